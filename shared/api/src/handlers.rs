//! The handlers: parse, call one store operation, map the result.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{header, HeaderMap, StatusCode, Uri};
use tokio::time::Instant;

use super::dto::*;
use super::extract::*;
use super::page_budget::{self, Charge, MEMORY_WAIT};
use super::request::*;
use super::{json_response, ApiError, AppState};
use crate::domain::envelope;
use crate::domain::state::{entry_size, validate_key};
use crate::domain::time::format_rfc3339;
use crate::domain::verification::{self, VerificationConfig};
use crate::domain::{ids, Ingress};
use crate::store::{IdempotencyClaim, NewAddress, NewEvent, StoreError};

pub use crate::email_routes::*;
pub use crate::outbound_routes::*;
pub use crate::pages::{
    __path_favicon, __path_home, __path_inbox_css, __path_inbox_js, __path_inbox_page,
    __path_llms_full_txt, __path_well_known, favicon, home, inbox_css, inbox_js, inbox_page,
    llms_full_txt, well_known,
};
pub use crate::request_routes::*;
pub use crate::stream::{__path_stream_events, stream_events};
pub use crate::viewer_routes::*;

type ApiResult = Result<Response, ApiError>;

/// How soon a long poll checks a request's expiry again when the service's clock has not
/// reached it at the moment the monotonic clock said it would.
const EXPIRY_RECHECK: Duration = Duration::from_millis(100);

/// The byte cap of one page of events (docs/API.md §4).
pub(crate) const PAGE_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// How many fresh ids creating an address tries when one is taken.
const CREATE_ATTEMPTS: u32 = 3;
/// The largest create-address body we read.
const CREATE_BODY_LIMIT: u64 = 16 * 1024;

fn root_url(base: &str, address_id: &str) -> String {
    format!("{base}/api/v1/addresses/{address_id}")
}

#[utoipa::path(
    post, path = "/api/v1/addresses", tag = "addresses",
    request_body(content = CreateAddressRequest, description = "Optional: an absent or empty body is the same as `{}`", content_type = "application/json"),
    responses(
        (status = 201, description = "Created; the read token is shown only here", body = CreatedAddress),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 429, body = ErrorBody),
    )
)]
pub async fn create_address(State(state): State<AppState>, parts: Parts, body: Body) -> ApiResult {
    let now = state.clock.now();
    let limits = &state.config.limits;
    // One client is an IPv4 address or an IPv6 /64 (docs/API.md §6).
    let ip = client_key(&parts);
    if let Some(retry_after) = state
        .store
        .hit_rate_limit(&format!("create:{ip}"), limits.creations_per_minute, now)
        .await?
    {
        return Err(ApiError::RateLimited { retry_after });
    }
    let bytes = read_body(&parts.headers, body, CREATE_BODY_LIMIT, "request body").await?;
    let request = if bytes.iter().all(u8::is_ascii_whitespace) {
        CreateAddressRequest::default()
    } else {
        require_json_content_type(&parts.headers)?;
        json_body::<CreateAddressRequest>(&bytes)?
    };
    let CreateAddressRequest {
        name,
        task_id,
        expires_in_seconds: expires_in,
        verification,
    } = request;

    let read_token = ids::new_read_token();
    let inbox_secret = ids::new_inbox_secret();
    // A taken id, or an email key taken by an id differing only by case (docs/API.md §1), is
    // astronomically unlikely with 128 random bits; it gets a fresh id, a few times at most.
    let mut attempt = 0;
    let new = loop {
        let id = ids::new_address_id();
        let new = NewAddress {
            email: format!("{id}@{}", state.config.email_domain),
            id,
            name: name.clone(),
            task_id: task_id.clone(),
            created_at: now,
            expires_at: expires_in.map(|s| now + s as i64 * 1000),
            token_hash: ids::hash_secret(&read_token),
            inbox_hash: ids::hash_secret(&inbox_secret),
            verification: verification.clone(),
        };
        match state.store.create_address(new.clone()).await {
            Ok(()) => break new,
            Err(StoreError::AddressExists) if attempt < CREATE_ATTEMPTS - 1 => {
                attempt += 1;
                tracing::warn!(address_id = %new.id, "address id or email key taken; new id");
            }
            Err(e) => return Err(e.into()),
        }
    };
    let id = new.id.clone();
    let base = base_url(&state, &parts.headers);
    let root = root_url(&base, &id);
    let view = AddressView {
        id: id.clone(),
        name: new.name,
        task_id: new.task_id,
        email: new.email,
        created_at: format_rfc3339(now),
        expires_at: new.expires_at.map(format_rfc3339),
        verification: new.verification.as_ref().map(VerificationConfig::view),
    };
    tracing::info!(address_id = %id, "address created");
    Ok(json_response(
        StatusCode::CREATED,
        &CreatedAddress {
            address: view,
            credentials: Credentials { read_token },
            endpoints: Endpoints {
                inbox_url: format!("{base}/api/v1/inbox/{id}/{inbox_secret}"),
                events_url: format!("{root}/events"),
                state_url: format!("{root}/state"),
                ws_url: state.ws.as_ref().map(|ws| ws.url(&base)),
            },
        },
    ))
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}", tag = "addresses",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = AddressDetails),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn inspect_address(
    State(state): State<AppState>,
    PathParams(address_id): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult {
    let now = state.clock.now();
    let record = authenticate(&state, &headers, &address_id, now).await?;
    let usage = state
        .store
        .usage(&address_id, &state.config.limits, now)
        .await?;
    let base = base_url(&state, &headers);
    let root = root_url(&base, &address_id);
    Ok(json_response(
        StatusCode::OK,
        &AddressDetails {
            address: AddressView::from(&record),
            usage: usage.into(),
            limits: state.config.limits.clone(),
            endpoints: ReadEndpoints {
                events_url: format!("{root}/events"),
                state_url: format!("{root}/state"),
                ws_url: state.ws.as_ref().map(|ws| ws.url(&base)),
            },
        },
    ))
}

#[utoipa::path(
    delete, path = "/api/v1/addresses/{address_id}", tag = "addresses",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted; its data is removed"),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn delete_address(
    State(state): State<AppState>,
    PathParams(address_id): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult {
    let now = state.clock.now();
    authenticate(&state, &headers, &address_id, now).await?;
    state.store.delete_address(&address_id, now).await?;
    tracing::info!(%address_id, "address deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(
    post, path = "/api/v1/inbox/{address_id}/{inbox_secret}", tag = "inbox",
    params(("address_id" = String, Path), ("inbox_secret" = String, Path),
           ("Idempotency-Key" = Option<String>, Header)),
    request_body(content = Object, description = "Any body up to the inbox limit", content_type = "*/*"),
    responses(
        (status = 202, description = "Committed", body = DeliveryResult),
        (status = 200, description = "Duplicate of an earlier delivery", body = DeliveryResult),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 401, description = "The address refuses unverified deliveries and this one did not verify (docs/API.md §15)", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody),
    )
)]
pub async fn deliver(
    State(state): State<AppState>,
    PathParams((address_id, inbox_secret)): PathParams<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let now = state.clock.now();
    let unknown = || ApiError::not_found("No such inbox.");
    if !ids::is_valid_id(&address_id) || !ids::is_valid_id(&inbox_secret) {
        return Err(unknown());
    }
    let record = state
        .store
        .get_address(&address_id, now)
        .await?
        .ok_or_else(unknown)?;
    if !ids::verify_secret(&inbox_secret, &record.inbox_hash) {
        return Err(unknown());
    }
    if record.is_gone(now) {
        return Err(ApiError::AddressGone);
    }
    let claim_key = idempotency_key(&headers)?;
    let bytes = read_body(
        &headers,
        body,
        state.config.limits.max_inbox_bytes,
        "inbox body",
    )
    .await?;
    // Verified webhooks (docs/API.md §15): on the exact bytes received, before anything else
    // reads them.
    let checked = record.verification.as_ref().map(|config| {
        let pairs: Vec<(&str, &[u8])> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_bytes()))
            .collect();
        (
            config.reject_unverified,
            verification::verify(config, &pairs, &bytes, now),
        )
    });
    if let Some((true, v)) = &checked {
        if let Some(reason) = v.reason {
            tracing::info!(%address_id, reason = reason.as_str(), "unverified delivery refused");
            return Err(ApiError::SignatureInvalid {
                reason: reason.as_str(),
            });
        }
    }
    // A verified delivery without its own key is keyed by the provider's delivery id, so a
    // provider's redelivery is a duplicate.
    let claim_key = match (claim_key, &checked) {
        (Some(k), _) => Some(k),
        (None, Some((_, v))) => v.delivery_id.clone().map(String::into_bytes),
        (None, None) => None,
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let header_pairs: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let env = envelope::from_delivery(
        content_type.as_deref(),
        header_pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        &bytes,
    );
    let claim = claim_key.map(|k| IdempotencyClaim {
        key_hash: ids::sha256_hex(&k),
        body_hash: ids::sha256_hex(&bytes),
    });
    let http = match &checked {
        Some((_, v)) => http_record_with_verification(&env.http, v.to_json())?,
        None => env.http,
    };
    let event = NewEvent {
        event_type: env.event_type,
        source: env.source,
        ingress: Ingress::Http,
        data: env.data,
        http: Some(http),
    };
    // A request for a person that expired before this delivery gets its event first.
    expire_due(&state, &record, now).await?;
    let appended = state
        .store
        .append_event(&address_id, event, claim, &state.config.limits, now)
        .await
        .map_err(|e| match e {
            StoreError::AddressNotFound => unknown(),
            other => other.into(),
        })?;
    let status = if appended.duplicate {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok(json_response(
        status,
        &DeliveryResult {
            duplicate: appended.duplicate,
            event: appended.event.into(),
        },
    ))
}

/// The largest `PUT {root}/verification` body read.
const VERIFICATION_BODY_LIMIT: u64 = 16 * 1024;

#[utoipa::path(
    put, path = "/api/v1/addresses/{address_id}/verification", tag = "addresses",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    request_body(content = VerificationRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Set; the next delivery is verified with it (the secret is never shown)", body = VerificationResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody),
    )
)]
pub async fn set_verification(
    State(state): State<AppState>,
    PathParams(address_id): PathParams<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let now = state.clock.now();
    authenticate(&state, &headers, &address_id, now).await?;
    let bytes = read_body(&headers, body, VERIFICATION_BODY_LIMIT, "request body").await?;
    require_json_content_type(&headers)?;
    let config = VerificationRequest::parse(&bytes)?;
    let view = config.view();
    state
        .store
        .set_verification(&address_id, Some(config), now)
        .await?;
    tracing::info!(%address_id, scheme = view.scheme.as_str(), "verification set");
    Ok(json_response(
        StatusCode::OK,
        &VerificationResult { verification: view },
    ))
}

#[utoipa::path(
    delete, path = "/api/v1/addresses/{address_id}/verification", tag = "addresses",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Removed (also when none was set): deliveries are no longer verified"),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn delete_verification(
    State(state): State<AppState>,
    PathParams(address_id): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult {
    let now = state.clock.now();
    authenticate(&state, &headers, &address_id, now).await?;
    state.store.set_verification(&address_id, None, now).await?;
    tracing::info!(%address_id, "verification removed");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/events", tag = "events",
    params(
        ("address_id" = String, Path),
        FeedParams,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, body = EventPageView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 429, body = ErrorBody),
    )
)]
pub async fn list_events(
    State(state): State<AppState>,
    PathParams(address_id): PathParams<String>,
    Client(client): Client,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult {
    let arrived = Instant::now();
    let now = state.clock.now();
    let record = authenticate(&state, &headers, &address_id, now).await?;
    let limits = &state.config.limits;
    charge_poll(&state, &address_id, now).await?;
    let q = parse_feed_query(uri.query(), limits.max_wait_seconds)?;
    // Requests for a person that expired get their event before the feed is read, and a wait
    // ends by the next expiry (docs/API.md §12).
    expire_due(&state, &record, now).await?;
    let next_expiry = record.next_request_expiry.filter(|t| *t > now);
    // The request's headers and URI are not needed while waiting: a long poll holds only what
    // it needs for its whole wait (the header map alone is about half a kilobyte).
    drop((headers, uri));
    let deadline = arrived + q.wait;
    let (page, charge) = long_poll(&state, &client, &address_id, &q, deadline, next_expiry).await?;
    let next_cursor = page.events.last().map_or(q.after, |e| e.sequence);
    let events = page
        .events
        .iter()
        .map(EventView::from_event)
        .collect::<Result<Vec<_>, _>>()?;
    let view = EventPageView {
        events,
        next_cursor,
        has_more: page.has_more,
    };
    let Some(charge) = charge else {
        return Ok(json_response(StatusCode::OK, &view));
    };
    let encoded = serde_json::to_vec(&view)
        .map_err(|e| ApiError::Internal(format!("cannot encode a page: {e}")))?;
    drop((view, page));
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static(super::JSON_CONTENT_TYPE),
        )],
        Body::from(charge.into_body(encoded)),
    )
        .into_response())
}

/// Counts one poll of address `id` against the poll rate limit (docs/API.md §6): a feed read
/// and an event stream (§14) each count once, however long they wait.
pub(crate) async fn charge_poll(
    state: &AppState,
    id: &str,
    now: crate::domain::Millis,
) -> Result<(), ApiError> {
    let per_minute = state.config.limits.polls_per_minute;
    match state
        .store
        .hit_rate_limit(&format!("poll:{id}"), per_minute, now)
        .await?
    {
        Some(retry_after) => Err(ApiError::RateLimited { retry_after }),
        None => Ok(()),
    }
}

/// Reads the feed; while it is empty, waits for the store's wake-up signal (or, without one,
/// re-checks the last sequence with backoff) until `deadline` or shutdown. With a page budget
/// (`serve`), each read is cut at what is free of the budget and of `client`'s share, which the
/// returned charge holds; a waiting poll holds none, and a poll that finds no memory for the
/// next event waits [`MEMORY_WAIT`] for it, then answers 503 `unavailable`
/// (`crate::page_budget`).
async fn long_poll(
    state: &AppState,
    client: &str,
    address_id: &str,
    q: &FeedQuery,
    deadline: Instant,
    request_expiry: Option<crate::domain::Millis>,
) -> Result<(crate::store::EventPage, Option<Charge>), ApiError> {
    let store = &state.store;
    // When to check the request expiry next (an instant of this process's monotonic clock).
    let until = |expiry: crate::domain::Millis| {
        Duration::from_millis(u64::try_from(expiry - state.clock.now()).unwrap_or(0))
    };
    let mut expiry_check = request_expiry.map(|e| Instant::now() + until(e));
    let mut wakeups = store.feed_signal().map(|s| s.subscribe(address_id));
    let mut shutdown = state.shutdown.clone();
    let checks = state.config.poll_checks;
    let mut backoff = checks.first;
    // Whether the last check of the sequence failed (see below).
    let mut hint_failed = false;
    // Counted in `agentaddress_long_polls_open` from its first wait to its answer.
    let mut waiting: Option<crate::metrics::Open> = None;
    loop {
        let memory_deadline = Instant::now() + MEMORY_WAIT;
        let read =
            page_budget::read_page(state, client, address_id, q.after, q.limit, memory_deadline);
        let Some((page, charge)) = read.await? else {
            return Err(ApiError::MemoryBusy);
        };
        if !page.events.is_empty() {
            return Ok((page, charge));
        }
        drop(charge);
        if Instant::now() >= deadline || *shutdown.borrow() {
            return Ok((page, None));
        }
        // A request for a person expiring during the wait: its event ends the wait. The
        // service's clock decides; checked again shortly if it is behind the monotonic one.
        if let (Some(expiry), Some(at)) = (request_expiry, expiry_check) {
            if at <= Instant::now() {
                let now = state.clock.now();
                if now >= expiry {
                    expiry_check = None;
                    if store
                        .expire_requests(address_id, &state.config.limits, now)
                        .await?
                        > 0
                    {
                        continue;
                    }
                } else {
                    expiry_check = Some(Instant::now() + until(expiry).min(EXPIRY_RECHECK));
                }
            }
        }
        let wake = expiry_check.map_or(deadline, |t| t.min(deadline));
        waiting.get_or_insert_with(|| crate::metrics::Open::new(crate::metrics::LONG_POLLS_OPEN));
        match &mut wakeups {
            Some(rx) => {
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = tokio::time::sleep_until(wake) => {}
                    _ = shutdown.changed() => {}
                }
            }
            None => loop {
                if expiry_check.is_some_and(|t| t <= Instant::now()) {
                    break;
                }
                let nap = backoff.min(wake.saturating_duration_since(Instant::now()));
                tokio::select! {
                    _ = tokio::time::sleep(nap) => {}
                    _ = shutdown.changed() => break,
                }
                backoff = backoff.mul_f64(checks.growth).min(checks.max);
                if Instant::now() >= deadline || *shutdown.borrow() {
                    if hint_failed {
                        // The last check said nothing: read the feed once more (the loop
                        // above answers after it, errors included).
                        break;
                    }
                    // Nothing was there at the last check: answer the empty page without
                    // reading again (the client's next poll, from the same cursor, sees
                    // anything that arrived since). Liveness was checked by that check.
                    return Ok((page, None));
                }
                // A check is only a hint: a store that is briefly unavailable (throttled, a
                // dropped answer) delays the next look, it does not fail the whole wait.
                match store.feed_head_hint(address_id, state.clock.now()).await {
                    Ok(head) if head > q.after => break,
                    Ok(_) => hint_failed = false,
                    Err(crate::store::StoreError::Unavailable(why)) => {
                        tracing::debug!(%why, "long-poll check failed; checking again later");
                        hint_failed = true;
                    }
                    Err(e) => return Err(e.into()),
                }
            },
        }
    }
}

pub(crate) fn event_id_param(event_id: &str) -> Result<(), ApiError> {
    if ids::is_valid_id(event_id) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "Event ids are 1 to 64 characters of letters, digits, _ and -.",
        ))
    }
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/events/{event_id}", tag = "events",
    params(("address_id" = String, Path), ("event_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = SingleEvent),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn get_event(
    State(state): State<AppState>,
    PathParams((address_id, event_id)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> ApiResult {
    let now = state.clock.now();
    authenticate(&state, &headers, &address_id, now).await?;
    event_id_param(&event_id)?;
    let event = state.store.get_event(&address_id, &event_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &SingleEvent {
            event: EventView::from_event(&event)?,
        },
    ))
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/events/{event_id}/ack", tag = "events",
    params(("address_id" = String, Path), ("event_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Acknowledged (again: the first time is kept)", body = AckResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn ack_event(
    State(state): State<AppState>,
    PathParams((address_id, event_id)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> ApiResult {
    let now = state.clock.now();
    authenticate(&state, &headers, &address_id, now).await?;
    event_id_param(&event_id)?;
    let acked = state.store.ack_event(&address_id, &event_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &AckResult {
            event: AckedEventView {
                id: acked.event.id,
                sequence: acked.event.sequence,
                acknowledged_at: format_rfc3339(acked.acknowledged_at),
            },
        },
    ))
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/state", tag = "state",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = StateList),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn list_state(
    State(state): State<AppState>,
    PathParams(address_id): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult {
    let now = state.clock.now();
    authenticate(&state, &headers, &address_id, now).await?;
    let listing = state.store.list_state(&address_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &StateList {
            keys: listing
                .keys
                .into_iter()
                .map(|k| StateKeyView {
                    key: k.key,
                    revision: k.revision,
                    size: k.size,
                    updated_at: format_rfc3339(k.updated_at),
                })
                .collect(),
            state_bytes: listing.state_bytes,
            state_keys: listing.state_keys,
            limits: limits_view(&state.config.limits),
        },
    ))
}

fn key_param(key: &str) -> Result<(), ApiError> {
    validate_key(key).map_err(|e| ApiError::invalid(format!("Bad state key: {e}.")))
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/state/{key}", tag = "state",
    params(("address_id" = String, Path), ("key" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = StateValue),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn get_state(
    State(state): State<AppState>,
    PathParams((address_id, key)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> ApiResult {
    let now = state.clock.now();
    authenticate(&state, &headers, &address_id, now).await?;
    key_param(&key)?;
    let entry = state.store.get_state(&address_id, &key, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &StateValue::from_entry(&entry)?,
    ))
}

#[utoipa::path(
    put, path = "/api/v1/addresses/{address_id}/state/{key}", tag = "state",
    params(("address_id" = String, Path), ("key" = String, Path),
           ("If-Match" = Option<String>, Header)),
    request_body(content = PutStateRequest, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 200, body = StateWriteResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, description = "revision_conflict, state_limit_exceeded or quota_exceeded", body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody),
    )
)]
pub async fn put_state(
    State(state): State<AppState>,
    PathParams((address_id, key)): PathParams<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    let now = state.clock.now();
    let record = authenticate(&state, &headers, &address_id, now).await?;
    key_param(&key)?;
    require_json_content_type(&headers)?;
    let limits = &state.config.limits;
    let body_limit = limits
        .max_state_bytes
        .saturating_mul(4)
        .saturating_add(4096);
    let bytes = read_body(&headers, body, body_limit, "request body").await?;
    let request = json_body::<PutStateRequest>(&bytes)?;
    let expected = expected_revision(&headers, request.if_revision)?;
    let compact = serde_json::to_string(&request.value)
        .map_err(|e| ApiError::Internal(format!("cannot re-encode a value: {e}")))?;
    if entry_size(&key, &compact) > limits.max_state_bytes {
        return Err(ApiError::PayloadTooLarge(format!(
            "This value can never fit: key, value and 64 bytes of metadata exceed the state limit of {} bytes.",
            limits.max_state_bytes
        )));
    }
    expire_due(&state, &record, now).await?;
    let written = state
        .store
        .put_state(&address_id, &key, compact, expected, limits, now)
        .await?;
    let entry = StateValue::from_entry(&written.entry)?;
    Ok(json_response(
        StatusCode::OK,
        &StateWriteResult {
            key: entry.key,
            value: entry.value,
            revision: entry.revision,
            updated_at: entry.updated_at,
            event: written.event.into(),
        },
    ))
}

#[utoipa::path(
    delete, path = "/api/v1/addresses/{address_id}/state/{key}", tag = "state",
    params(("address_id" = String, Path), ("key" = String, Path),
           DeleteStateParams,
           ("If-Match" = Option<String>, Header)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = StateDeleteResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 410, body = ErrorBody),
    )
)]
pub async fn delete_state(
    State(state): State<AppState>,
    PathParams((address_id, key)): PathParams<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
) -> ApiResult {
    let now = state.clock.now();
    let record = authenticate(&state, &headers, &address_id, now).await?;
    key_param(&key)?;
    let params = parse_fields::<DeleteStateParams>(query_fields(uri.query())?)?;
    let expected = expected_revision(&headers, params.if_revision)?;
    expire_due(&state, &record, now).await?;
    let deleted = state
        .store
        .delete_state(&address_id, &key, expected, &state.config.limits, now)
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &StateDeleteResult {
            key: deleted.key,
            deleted: true,
            revision: deleted.revision,
            event: deleted.event.into(),
        },
    ))
}

#[utoipa::path(
    get, path = "/healthz", tag = "service",
    responses((status = 200, body = Health))
)]
pub async fn healthz(State(state): State<AppState>) -> ApiResult {
    Ok(json_response(
        StatusCode::OK,
        &Health {
            status: "ok".into(),
            store: state.store.kind().into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
    ))
}

#[utoipa::path(
    get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "OpenAPI 3.1 of this API", content_type = "application/json"))
)]
pub async fn openapi_json(State(state): State<AppState>, headers: HeaderMap) -> ApiResult {
    let base = base_url(&state, &headers);
    Ok(json_response(
        StatusCode::OK,
        &super::openapi::document(&base),
    ))
}

#[utoipa::path(
    get, path = "/skill.md", tag = "service",
    responses((status = 200, description = "Instructions for an agent", content_type = "text/markdown"))
)]
pub async fn skill_md(State(state): State<AppState>, headers: HeaderMap) -> ApiResult {
    let base = base_url(&state, &headers);
    let text = super::openapi::SKILL_MD.replace("{base}", &base);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        text,
    )
        .into_response())
}
