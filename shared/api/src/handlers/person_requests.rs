//! Requests for a person (docs/API.md §12): the agent's routes (`POST {root}/requests`,
//! `GET {root}/requests/{request_id}`) and the person's page at the capability URL
//! `/r/{request_id}/{secret}` with its form. Re-exported by `handlers`, so the route table names
//! them like the others.

use std::time::Duration;

use crate::error::ApiResult;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use serde::Serialize;
use tokio::time::Instant;
use utoipa::ToSchema;

use crate::domain::request::{
    self, check_answer, RequestStatus, DEFAULT_OPTIONS, REQUEST_EXPIRES_DEFAULT_SECONDS,
};
use crate::domain::time::format_rfc3339;
use crate::domain::{ids, Millis};
use crate::dto::ErrorBody;
use crate::extract::*;
use crate::handlers::events::{charge_poll, wait_for_feed};
use crate::inputs::{parse_fields, AnswerRequestBody, CreateRequestBody, RequestWaitParams};
use crate::pages::{page_headers, person_request as request_page};
use crate::store::{Answer, AnswerOutcome, IdempotencyClaim, NewRequest, RequestRecord};
use crate::{json_response, ApiError, AppState};

impl JsonRequest for CreateRequestBody {
    /// The largest body of `POST {root}/requests`: a 20,000-character body of 4-byte
    /// characters, escaped, with room for the rest.
    fn limit(_: &AppState) -> u64 {
        128 * 1024
    }
}

/// The largest answer (a 2,000-character comment, form-encoded).
const ANSWER_BODY_LIMIT: u64 = 32 * 1024;

/// A person's answer (docs/API.md §12).
#[derive(Debug, Serialize, ToSchema)]
pub struct AnswerView {
    pub choice: String,
    pub comment: Option<String>,
    /// RFC 3339.
    pub answered_at: String,
}

/// A request for a person (docs/API.md §12).
#[derive(Debug, Serialize, ToSchema)]
pub struct RequestView {
    pub id: String,
    /// The person's page on this server, `…/r/{request_id}/{secret}`: only in the creation's
    /// answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub title: String,
    pub body: Option<String>,
    pub options: Vec<String>,
    /// `none`, `optional` or `required`.
    pub comment: String,
    /// `open`, `answered` or `expired`.
    pub status: String,
    pub created_at: String,
    pub expires_at: String,
    pub answer: Option<AnswerView>,
}

impl RequestView {
    pub fn of(r: &RequestRecord, url: Option<String>, now: Millis) -> Self {
        Self {
            id: r.id.clone(),
            url,
            title: r.title.clone(),
            body: r.body.clone(),
            options: r.options.clone(),
            comment: r.comment.as_str().into(),
            status: r.status_at(now).as_str().into(),
            created_at: format_rfc3339(r.created_at),
            expires_at: format_rfc3339(r.expires_at),
            answer: r.answer.as_ref().map(|a| AnswerView {
                choice: a.choice.clone(),
                comment: a.comment.clone(),
                answered_at: format_rfc3339(a.answered_at),
            }),
        }
    }
}

/// `{"request": …}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RequestEnvelope {
    pub request: RequestView,
}

fn request_url(state: &AppState, headers: &HeaderMap, request_id: &str, secret: &str) -> String {
    format!("{}/r/{request_id}/{secret}", base_url(state, headers))
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/requests", tag = "requests",
    params(("address_id" = String, Path), ("Idempotency-Key" = Option<String>, Header)),
    request_body = CreateRequestBody,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created; `url` is the person's page, shown here only", body = RequestEnvelope),
        (status = 200, description = "The request an earlier creation with this Idempotency-Key made", body = RequestEnvelope),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
pub async fn create_request(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    headers: HeaderMap, IdempotencyKey(claim_key): IdempotencyKey,
    JsonBody { value, bytes }: JsonBody<CreateRequestBody>,
) -> ApiResult {
    let token = bearer_token(&headers)
        .ok_or(ApiError::Unauthorized)?
        .to_owned();
    let CreateRequestBody {
        title,
        body,
        options,
        comment,
        expires_in_seconds,
    } = value;
    let id = request::new_request_id();
    let expires_in = expires_in_seconds.unwrap_or(REQUEST_EXPIRES_DEFAULT_SECONDS);
    let new = NewRequest {
        secret_hash: ids::hash_secret(&request::request_secret(&token, &id)),
        id,
        title,
        body,
        options: options.unwrap_or_else(|| DEFAULT_OPTIONS.map(String::from).to_vec()),
        comment: comment.unwrap_or_default(),
        created_at: now,
        expires_at: now
            .saturating_add(i64::try_from(expires_in.saturating_mul(1000)).unwrap_or(i64::MAX)),
        claim: claim_key.map(|k| IdempotencyClaim {
            key_hash: ids::sha256_hex(&k),
            body_hash: ids::sha256_hex(&bytes),
        }),
    };
    let created = state
        .store
        .create_request(&address_id, new, &state.config.limits, now)
        .await
        .map_err(|e| match e {
            crate::store::StoreError::QuotaExceeded => ApiError::OpenRequestsFull,
            other => other.into(),
        })?;
    let r = &created.request;
    // The secret is derived from the token that created it: a retry gets the same URL.
    let url = request_url(
        &state,
        &headers,
        &r.id,
        &request::request_secret(&token, &r.id),
    );
    if !created.duplicate {
        tracing::info!(%address_id, request_id = %r.id, "request created");
        // An open event stream learns the new expiry (docs/API.md §14).
        if let Some(signal) = state.store.feed_signal() {
            signal.touch(&address_id);
        }
    }
    let status = if created.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(json_response(
        status,
        &RequestEnvelope {
            request: RequestView::of(r, Some(url), now),
        },
    ))
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/requests/{request_id}", tag = "requests",
    params(("address_id" = String, Path), ("request_id" = String, Path), RequestWaitParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The request, with its answer once answered", body = RequestEnvelope),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 429, body = ErrorBody),
    )
)]
pub async fn get_request(
    State(state): State<AppState>, Arrived(arrived): Arrived,
    Current(Authenticated {
        address_id,
        address,
        now,
    }): Current,
    RequestId(request_id): RequestId, uri: Uri,
) -> ApiResult {
    let params: RequestWaitParams = parse_fields(query_fields(uri.query())?)?;
    let wait = params
        .wait
        .unwrap_or(0.0)
        .min(state.config.limits.max_wait_seconds as f64);
    let deadline = arrived + Duration::from_secs_f64(wait);
    drop((uri, address));
    if wait > 0.0 {
        // A waiting read is a poll (docs/API.md §6, §21).
        charge_poll(&state, &address_id, now).await?;
    }
    let read = |now: Millis| {
        let (state, address_id, request_id) = (&state, &address_id, &request_id);
        async move {
            state
                .store
                .get_request(address_id, request_id, now)
                .await
                .map_err(|e| match e {
                    crate::store::StoreError::NotFound => ApiError::not_found("No such request."),
                    other => other.into(),
                })
        }
    };
    let mut now = now;
    let mut r = read(now).await?;
    if r.status_at(now) == RequestStatus::Open && wait > 0.0 {
        // The answer and the expiry each append an event: wait for the feed to grow, then
        // read the request again; its own expiry ends the wait too.
        let mut head = state.store.last_sequence(&address_id, now).await?;
        r = read(state.clock.now()).await?;
        loop {
            now = state.clock.now();
            if r.status_at(now) != RequestStatus::Open || Instant::now() >= deadline {
                break;
            }
            let expiry = Instant::now()
                + Duration::from_millis(u64::try_from(r.expires_at - now).unwrap_or(0));
            head = wait_for_feed(&state, &address_id, head, deadline.min(expiry)).await?;
            now = state.clock.now();
            if r.status_at(now) == RequestStatus::Expired {
                // Its `request.expired` event is appended before the answer says so.
                state
                    .store
                    .expire_requests(&address_id, &state.config.limits, now)
                    .await?;
            }
            r = read(now).await?;
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &RequestEnvelope {
            request: RequestView::of(&r, None, now),
        },
    ))
}

/// A client that names JSON and not HTML in `Accept` (an API client, not a browser).
fn accepts_only_json(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    accept.contains("application/json") && !accept.contains("text/html")
}

/// The request behind a page URL, when the secret is its own; else `None` (a plain 404, the
/// same for an unknown request, a wrong secret and a gone address).
async fn request_of_page(
    state: &AppState, request_id: &str, secret: &str, now: Millis,
) -> Result<Option<RequestRecord>, ApiError> {
    if !ids::is_valid_id(request_id) || !ids::is_valid_id(secret) {
        return Ok(None);
    }
    let found = state.store.find_request(request_id, now).await?;
    let hash = found
        .as_ref()
        .map_or(request_page::DUMMY_HASH, |r| r.secret_hash.as_str());
    // Compared in constant time, and compared even when there is no request.
    let matches = ids::verify_secret(secret, hash);
    Ok(found.filter(|_| matches))
}

#[utoipa::path(
    get, path = "/r/{request_id}/{secret}", tag = "requests",
    params(("request_id" = String, Path), ("secret" = String, Path)),
    responses(
        (status = 200, description = "The person's page: the question and its form, or the recorded decision", content_type = "text/html"),
        (status = 404, description = "An unknown request, a wrong secret or a gone address: the same plain page for all (JSON when the client accepts only JSON)",
         content((ErrorBody = "application/json"), (String = "text/html"))),
    )
)]
pub async fn request_page(
    State(state): State<AppState>, PathParams((request_id, secret)): PathParams<(String, String)>,
    Now(now): Now, headers: HeaderMap,
) -> ApiResult {
    let Some(r) = request_of_page(&state, &request_id, &secret, now).await? else {
        return Ok(if accepts_only_json(&headers) {
            ApiError::not_found("No such request.").into_response()
        } else {
            request_page::not_found()
        });
    };
    let asker = asker(&state, &r, now).await;
    Ok(request_page::page(&r, asker.as_deref(), now, None))
}

/// Who asks: the name of the request's address, if it has one (docs/API.md §12). The page is
/// shown without it when the address cannot be read.
async fn asker(state: &AppState, r: &RequestRecord, now: Millis) -> Option<String> {
    match state.store.get_address(&r.address_id, now).await {
        Ok(address) => address.and_then(|a| a.name),
        Err(e) => {
            tracing::warn!(request_id = %r.id, error = %e, "the asker's name could not be read");
            None
        }
    }
}

#[utoipa::path(
    post, path = "/r/{request_id}/{secret}", tag = "requests",
    params(("request_id" = String, Path), ("secret" = String, Path)),
    request_body(content = AnswerRequestBody, description = "The page's form (`application/x-www-form-urlencoded`), or the same fields as JSON", content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 303, description = "Form: answered (or closed already); `Location` is the page, which shows the decision"),
        (status = 200, description = "JSON: answered; a form that is refused (no option chosen, a required comment missing) gets the page again with the reason, as HTML, and nothing is recorded",
         content((RequestEnvelope = "application/json"), (String = "text/html"))),
        (status = 400, body = ErrorBody),
        (status = 404, description = "An unknown request, a wrong secret or a gone address (JSON for a JSON answer, else the plain page)",
         content((ErrorBody = "application/json"), (String = "text/html"))),
        (status = 409, description = "JSON: answered already (`request_closed`), or the feed is full", body = ErrorBody),
        (status = 413, body = ErrorBody),
    )
)]
pub async fn answer_request(
    State(state): State<AppState>, PathParams((request_id, secret)): PathParams<(String, String)>,
    Now(now): Now, headers: HeaderMap, body: Body,
) -> ApiResult {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    let Some(r) = request_of_page(&state, &request_id, &secret, now).await? else {
        return Ok(if json || accepts_only_json(&headers) {
            ApiError::not_found("No such request.").into_response()
        } else {
            request_page::not_found()
        });
    };
    let bytes = read_body(&headers, body, ANSWER_BODY_LIMIT, "answer").await?;
    let parsed = if json {
        json_body::<AnswerRequestBody>(&bytes)
    } else {
        request_page::form_fields(&bytes).and_then(parse_fields::<AnswerRequestBody>)
    };
    let checked = parsed.and_then(|a| {
        check_answer(&r.options, r.comment, &a.choice, a.comment.as_deref())
            .map_err(|e| ApiError::invalid(e.0))
            .map(|()| a)
    });
    let answer = match checked {
        Ok(a) => a,
        Err(e) if !json && r.status_at(now) == RequestStatus::Open => {
            // The person sees the page again, with what was wrong.
            let asker = asker(&state, &r, now).await;
            return Ok(request_page::page(
                &r,
                asker.as_deref(),
                now,
                Some(&e.to_string()),
            ));
        }
        Err(e) if json => return Err(e),
        Err(_) => return Ok(request_page::see_page(&request_id, &secret)),
    };
    let outcome = state
        .store
        .answer_request(
            &r.id,
            Answer {
                choice: answer.choice,
                comment: answer.comment,
                answered_at: now,
            },
            &state.config.limits,
            now,
        )
        .await
        .map_err(|e| match e {
            crate::store::StoreError::NotFound => ApiError::not_found("No such request."),
            other => other.into(),
        })?;
    match (outcome, json) {
        (AnswerOutcome::Answered { request, .. }, true) => {
            tracing::info!(request_id = %request.id, "request answered");
            Ok(json_response(
                StatusCode::OK,
                &RequestEnvelope {
                    request: RequestView::of(&request, None, now),
                },
            ))
        }
        (AnswerOutcome::Closed(_), true) => Err(ApiError::RequestClosed),
        (AnswerOutcome::Answered { request, .. }, false) => {
            tracing::info!(request_id = %request.id, "request answered");
            Ok(request_page::see_page(&request_id, &secret))
        }
        (AnswerOutcome::Closed(_), false) => Ok(request_page::see_page(&request_id, &secret)),
    }
}

#[utoipa::path(
    get, path = "/r/page.css", tag = "service",
    responses((status = 200, description = "The stylesheet of the person's page", content_type = "text/css")),
)]
pub async fn request_page_css() -> Response {
    page_asset(request_page::PAGE_CSS, "text/css; charset=utf-8")
}

#[utoipa::path(
    get, path = "/r/page.js", tag = "service",
    responses((status = 200, description = "The script of the person's page: it shows the page's times in the reader's locale", content_type = "text/javascript")),
)]
pub async fn request_page_js() -> Response {
    page_asset(request_page::PAGE_JS, "text/javascript; charset=utf-8")
}

/// An asset of the person's page: the pages' headers, cached for an hour.
fn page_asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in page_headers() {
        headers.insert(name, value);
    }
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    response
}
