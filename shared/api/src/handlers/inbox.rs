//! The inbox URL (docs/API.md §3): a webhook delivery becomes one event; a provider's
//! handshake (§22) is answered and appends nothing.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode};

use crate::domain::delivery::{self, Delivery};
use crate::domain::verification::{self, Handshake, HandshakeRefusal};
use crate::domain::{ids, Ingress, Millis};
use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::append_due;
use crate::extract::*;
use crate::store::{AddressRecord, IdempotencyClaim, NewEvent, StoreError};
use crate::{json_response, ApiError, AppState};

#[utoipa::path(
    post, path = "/api/v1/inbox/{address_id}/{inbox_secret}", tag = "inbox",
    params(("address_id" = String, Path), ("inbox_secret" = String, Path),
           ("Idempotency-Key" = Option<String>, Header)),
    request_body(content = Object, description = "Any body up to the inbox limit", content_type = "*/*"),
    responses(
        (status = 202, description = "Committed", body = DeliveryResult),
        (status = 200, description = "Duplicate of an earlier delivery, or a provider's handshake answered (Slack, Zoom: JSON; Microsoft Graph: the token as text/plain; docs/API.md §22), nothing appended", body = DeliveryResult),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 401, description = "The address refuses unverified deliveries and this one did not verify (docs/API.md §15)", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, description = "Handshakes over their rate limit (docs/API.md §22)", body = ErrorBody),
    )
)]
pub async fn deliver(
    State(state): State<AppState>,
    PathParams((address_id, inbox_secret)): PathParams<(String, String)>, Now(now): Now,
    RawQuery(query): RawQuery, headers: HeaderMap, body: Body,
) -> ApiResult {
    let unknown = || ApiError::not_found("No such inbox.");
    let record = inbox_address(&state, &address_id, &inbox_secret, now).await?;
    // Checked after the inbox: an unknown inbox is 404 whatever its key.
    let key = idempotency_key(&headers)?;
    let bytes = read_body(
        &headers,
        body,
        state.config.limits.max_inbox_bytes,
        "inbox body",
    )
    .await?;
    // The envelope rule (docs/API.md §3), on bytes verified first when the address verifies
    // its deliveries (§15).
    let pairs: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    // The URL the sender was given, as Twilio signs it: the public inbox URL and the query.
    let url = inbox_url(
        &state,
        &headers,
        &address_id,
        &inbox_secret,
        query.as_deref(),
    );
    let signed = verification::Signed {
        headers: &pairs,
        body: &bytes,
        url: Some(&url),
        now,
    };
    if let Some(answer) =
        verification::handshake(query.as_deref(), &signed, record.verification.as_ref())
    {
        charge_handshake(&state, &address_id, now).await?;
        return handshake_answer(answer, &address_id);
    }
    let received = delivery::receive(
        &pairs,
        &bytes,
        record.verification.as_ref(),
        key,
        Some(&url),
        now,
    );
    let Delivery { envelope, claim } = received.map_err(|reason| {
        tracing::info!(%address_id, reason = reason.as_str(), "unverified delivery refused");
        ApiError::SignatureInvalid {
            reason: reason.as_str(),
        }
    })?;
    let event = NewEvent {
        event_type: envelope.event_type,
        source: envelope.source,
        ingress: Ingress::Http,
        data: envelope.data,
        http: Some(envelope.http),
    };
    let claim = claim.map(|c| IdempotencyClaim {
        key_hash: c.key_hash,
        body_hash: c.body_hash,
    });
    // A request for a person that expired before this delivery gets its event first.
    append_due(&state, &record, now).await?;
    let appended = state
        .store
        .append_event(&address_id, event, claim, &state.config.limits, now)
        .await
        .map_err(|e| match e {
            StoreError::AddressNotFound => unknown(),
            other => refused(&address_id, other),
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

/// A store failure of a delivery, as an answer. An unavailable store is logged with the address
/// (a warning a log query can count by `address_id`): on DynamoDB it is most often that
/// address's partition throttled — a hot address (docs/SCALE.md, "Hot addresses").
fn refused(address_id: &str, e: StoreError) -> ApiError {
    if let StoreError::Unavailable(detail) = &e {
        tracing::warn!(%address_id, %detail, "delivery refused: the store is unavailable for this address (throttled?)");
    }
    e.into()
}

/// Handshakes answered per address per minute (docs/API.md §22): providers send one when a URL
/// is registered (Zoom again every few days); more is someone else.
pub const HANDSHAKES_PER_MINUTE: u64 = 30;

/// The live address of an inbox URL: 404 for an unknown address or a wrong secret alike, 410
/// for a deleted or expired one.
async fn inbox_address(
    state: &AppState, address_id: &str, inbox_secret: &str, now: Millis,
) -> Result<AddressRecord, ApiError> {
    let unknown = || ApiError::not_found("No such inbox.");
    if !ids::is_valid_id(address_id) || !ids::is_valid_id(inbox_secret) {
        return Err(unknown());
    }
    let record = state
        .store
        .get_address(address_id, now)
        .await
        .map_err(|e| refused(address_id, e))?
        .ok_or_else(unknown)?;
    if !ids::verify_secret(inbox_secret, &record.inbox_hash) {
        return Err(unknown());
    }
    if record.is_gone(now) {
        return Err(ApiError::AddressGone);
    }
    Ok(record)
}

/// The public inbox URL this request was sent to, with its query as received.
fn inbox_url(
    state: &AppState, headers: &HeaderMap, address_id: &str, inbox_secret: &str,
    query: Option<&str>,
) -> String {
    let base = base_url(state, headers);
    match query {
        Some(q) => format!("{base}/api/v1/inbox/{address_id}/{inbox_secret}?{q}"),
        None => format!("{base}/api/v1/inbox/{address_id}/{inbox_secret}"),
    }
}

/// Counts a handshake against the address's handshake rate limit.
async fn charge_handshake(state: &AppState, address_id: &str, now: Millis) -> Result<(), ApiError> {
    match state
        .store
        .hit_rate_limit(
            &format!("handshake:{address_id}"),
            HANDSHAKES_PER_MINUTE,
            now,
        )
        .await?
    {
        Some(retry_after) => Err(ApiError::RateLimited { retry_after }),
        None => Ok(()),
    }
}

/// A handshake's answer: JSON, or the challenge as `text/plain` only (never HTML, never in a
/// header), or its refusal.
fn handshake_answer(
    answer: Result<Handshake, HandshakeRefusal>, address_id: &str,
) -> Result<Response, ApiError> {
    match answer {
        Ok(Handshake::Json(v)) => Ok(json_response(StatusCode::OK, &v)),
        Ok(Handshake::Text(t)) => {
            let mut r = (StatusCode::OK, t).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            Ok(r)
        }
        Err(HandshakeRefusal::Invalid(message)) => Err(ApiError::InvalidRequest(message)),
        Err(HandshakeRefusal::Unverified(reason)) => {
            tracing::info!(%address_id, reason = reason.as_str(), "unverified handshake refused");
            Err(ApiError::SignatureInvalid {
                reason: reason.as_str(),
            })
        }
        Err(HandshakeRefusal::Forbidden) => Err(ApiError::Forbidden),
    }
}

#[utoipa::path(
    get, path = "/api/v1/inbox/{address_id}/{inbox_secret}", tag = "inbox",
    params(("address_id" = String, Path), ("inbox_secret" = String, Path),
           ("hub.mode" = String, Query, description = "`subscribe`"),
           ("hub.verify_token" = String, Query, description = "The address's `verify_token` (scheme `meta`)"),
           ("hub.challenge" = String, Query, description = "Echoed back, at most 1,024 characters")),
    responses(
        (status = 200, description = "Meta's subscription handshake: the challenge (docs/API.md §22)", body = String, content_type = "text/plain"),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 429, body = ErrorBody),
    )
)]
pub async fn subscribe_inbox(
    State(state): State<AppState>,
    PathParams((address_id, inbox_secret)): PathParams<(String, String)>, Now(now): Now,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let record = inbox_address(&state, &address_id, &inbox_secret, now).await?;
    charge_handshake(&state, &address_id, now).await?;
    let answer = verification::meta_subscription(query.as_deref(), record.verification.as_ref());
    handshake_answer(answer, &address_id)
}
