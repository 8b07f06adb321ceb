//! The address itself (docs/API.md §1–§3, §10, §15): create, inspect, delete, its webhook
//! verification and its inbound email's sender rules.

use axum::body::Body;
use axum::extract::State;
use axum::response::IntoResponse;
use http::request::Parts;
use http::{HeaderMap, StatusCode};

use crate::domain::email_policy::EmailPolicy;
use crate::domain::ids;
use crate::domain::time::format_rfc3339;
use crate::domain::verification::VerificationConfig;
use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::*;
use crate::inputs::*;
use crate::store::{NewAddress, StoreError};
use crate::{json_response, ApiError, AppState};

const CREATE_ATTEMPTS: u32 = 3;

impl JsonRequest for CreateAddressRequest {
    /// The largest create-address body we read.
    fn limit(_: &AppState) -> u64 {
        16 * 1024
    }

    /// An absent or blank body is the same as `{}` (docs/API.md §1, "Create"), whatever its
    /// content type.
    fn when_blank() -> Option<Self> {
        Some(Self::default())
    }
}

/// The create answer's hooks: as the store made them, active with their cursor at 0.
fn made_hooks(
    address_id: &str, hooks: &[crate::store::NewHook], now: crate::domain::Millis,
) -> Vec<HookCreated> {
    hooks
        .iter()
        .map(|h| {
            super::hooks::created(&crate::store::HookRecord::new(
                address_id,
                h.clone(),
                0,
                now,
            ))
        })
        .collect()
}

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
pub async fn create_address(
    State(state): State<AppState>, Now(now): Now, parts: Parts, body: Body,
) -> ApiResult {
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
    // After the rate limit: the body is read only for a client within it.
    let body = JsonBody::<CreateAddressRequest>::read(&state, &parts.headers, body).await?;
    let CreateAddressRequest {
        name,
        task_id,
        expires_in_seconds: expires_in,
        verification,
        email_policy,
        hooks,
    } = body.value;
    // Each hook's URL checked before anything is stored (docs/API.md §19).
    let hooks = super::hooks::new_hooks(&state, hooks.unwrap_or_default()).await?;

    let read_token = ids::new_read_token();
    let inbox_secret = ids::new_inbox_secret();
    // A taken id, or an email key taken by an id differing only by case (docs/API.md §1), is
    // astronomically unlikely with 128 random bits; it gets a fresh id, a few times at most.
    let mut attempt = 0;
    let new = loop {
        let id = (state.address_ids)();
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
            email_policy: email_policy.clone(),
            hooks: hooks.clone(),
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
        email_policy: new.email_policy.as_ref().map(EmailPolicy::view),
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
            hooks: made_hooks(&id, &new.hooks, now),
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
    // Its `last_sequence` is the feed's head: what is due is appended first (docs/API.md §20).
    Current(Authenticated {
        address_id,
        address,
        now,
    }): Current,
    headers: HeaderMap,
) -> ApiResult {
    let usage = state
        .store
        .usage(&address_id, &state.config.limits, now)
        .await?;
    let base = base_url(&state, &headers);
    let root = root_url(&base, &address_id);
    Ok(json_response(
        StatusCode::OK,
        &AddressDetails {
            address: AddressView::from(&address),
            usage: usage.into(),
            limits: state.config.limits.clone(),
            endpoints: ReadEndpoints {
                events_url: format!("{root}/events"),
                state_url: format!("{root}/state"),
                ws_url: state.ws.as_ref().map(|ws| ws.url(&base)),
            },
            email: EmailStatsView {
                refused_count: address.email_refused,
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
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
) -> ApiResult {
    state.store.delete_address(&address_id, now).await?;
    tracing::info!(%address_id, "address deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

impl JsonRequest for VerificationRequest {
    /// The largest `PUT {root}/verification` body read.
    fn limit(_: &AppState) -> u64 {
        16 * 1024
    }
}

impl ParseBody for VerificationRequest {
    fn parse_body(body: &[u8]) -> Result<Self, ApiError> {
        VerificationRequest::parse(body).map(VerificationRequest)
    }
}

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
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    JsonBody {
        value: VerificationRequest(config),
        ..
    }: JsonBody<VerificationRequest>,
) -> ApiResult {
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
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
) -> ApiResult {
    state.store.set_verification(&address_id, None, now).await?;
    tracing::info!(%address_id, "verification removed");
    Ok(StatusCode::NO_CONTENT.into_response())
}

impl JsonRequest for EmailPolicyRequest {
    /// The largest `PUT {root}/email/policy` body read: 100 patterns of 254 characters fit.
    fn limit(_: &AppState) -> u64 {
        64 * 1024
    }
}

impl ParseBody for EmailPolicyRequest {
    fn parse_body(body: &[u8]) -> Result<Self, ApiError> {
        EmailPolicyRequest::parse(body).map(EmailPolicyRequest)
    }
}

#[utoipa::path(
    put, path = "/api/v1/addresses/{address_id}/email/policy", tag = "addresses",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    request_body(content = EmailPolicyRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Set, replacing any earlier rules: the next message is judged by them", body = EmailPolicyResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody),
    )
)]
pub async fn set_email_policy(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    JsonBody {
        value: EmailPolicyRequest(policy),
        ..
    }: JsonBody<EmailPolicyRequest>,
) -> ApiResult {
    let view = policy.view();
    state
        .store
        .set_email_policy(&address_id, Some(policy), now)
        .await?;
    tracing::info!(%address_id, "email policy set");
    Ok(json_response(
        StatusCode::OK,
        &EmailPolicyResult { email_policy: view },
    ))
}

#[utoipa::path(
    delete, path = "/api/v1/addresses/{address_id}/email/policy", tag = "addresses",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Removed (also when none was set): mail from any sender is accepted"),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn delete_email_policy(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
) -> ApiResult {
    state.store.set_email_policy(&address_id, None, now).await?;
    tracing::info!(%address_id, "email policy removed");
    Ok(StatusCode::NO_CONTENT.into_response())
}
