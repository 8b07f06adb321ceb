//! State (docs/API.md §7): list, read, compare-and-set write and delete of one key.

use axum::body::Body;
use axum::extract::State;
use http::{HeaderMap, StatusCode, Uri};

use crate::domain::state::{entry_size, validate_key};
use crate::domain::time::format_rfc3339;
use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::*;
use crate::handlers::person_requests::expire_due;
use crate::request::*;
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
