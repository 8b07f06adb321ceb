//! State (docs/API.md §7): list, read, compare-and-set write and delete of one key.

use axum::extract::State;
use http::{HeaderMap, StatusCode, Uri};

use crate::domain::state::entry_size;
use crate::domain::time::format_rfc3339;
use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::*;
use crate::inputs::*;
use crate::{json_response, ApiError, AppState};

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
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
) -> ApiResult {
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
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    StateKey(key): StateKey,
) -> ApiResult {
    let entry = state.store.get_state(&address_id, &key, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &StateValue::from_entry(&entry)?,
    ))
}

impl JsonRequest for PutStateRequest {
    /// Room for a value of the state limit as sent (spaces and escapes included) and the rest
    /// of the body; the value itself is checked once re-encoded (`put_state`).
    fn limit(state: &AppState) -> u64 {
        let limits = &state.config.limits;
        limits
            .max_state_bytes
            .saturating_mul(4)
            .saturating_add(4096)
    }

    const CONTENT_TYPE_FIRST: bool = true;
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
    Current(Authenticated {
        address_id,
        address: _,
        now,
    }): Current,
    StateKey(key): StateKey, headers: HeaderMap,
    JsonBody { value: request, .. }: JsonBody<PutStateRequest>,
) -> ApiResult {
    let limits = &state.config.limits;
    let expected = expected_revision(&headers, request.if_revision)?;
    let compact = serde_json::to_string(&request.value)
        .map_err(|e| ApiError::Internal(format!("cannot re-encode a value: {e}")))?;
    if entry_size(&key, &compact) > limits.max_state_bytes {
        return Err(ApiError::PayloadTooLarge(format!(
            "This value can never fit: key, value and 64 bytes of metadata exceed the state limit of {} bytes.",
            limits.max_state_bytes
        )));
    }
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
    Current(Authenticated {
        address_id,
        address: _,
        now,
    }): Current,
    StateKey(key): StateKey, headers: HeaderMap, uri: Uri,
) -> ApiResult {
    let params = parse_fields::<DeleteStateParams>(query_fields(uri.query())?)?;
    let expected = expected_revision(&headers, params.if_revision)?;
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
