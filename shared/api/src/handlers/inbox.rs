//! The inbox URL (docs/API.md §3): a webhook delivery becomes one event.

use axum::body::Body;
use axum::extract::State;
use http::{HeaderMap, StatusCode};

use crate::domain::delivery::{self, Delivery};
use crate::domain::{ids, Ingress};
use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::append_due;
use crate::extract::*;
use crate::store::{IdempotencyClaim, NewEvent, StoreError};
use crate::{json_response, ApiError, AppState};

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
    PathParams((address_id, inbox_secret)): PathParams<(String, String)>, Now(now): Now,
    headers: HeaderMap, body: Body,
) -> ApiResult {
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
    let received = delivery::receive(&pairs, &bytes, record.verification.as_ref(), key, now);
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
