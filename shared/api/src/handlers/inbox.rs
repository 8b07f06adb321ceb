//! The inbox URL (docs/API.md §3): a webhook delivery becomes one event.

use axum::body::Body;
use axum::extract::State;
use http::{header, HeaderMap, StatusCode};

use crate::domain::verification;
use crate::domain::{envelope, ids, Ingress};
use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::*;
use crate::handlers::person_requests::expire_due;
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
