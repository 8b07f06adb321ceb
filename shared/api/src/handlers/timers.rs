//! Timers (docs/API.md §20): `POST`/`GET {root}/timers`, `DELETE {root}/timers/{timer_id}`.
//! A timer fires by the store's own step (a read fires due timers first, `Current`; the
//! embedded deployment's scheduler, `crate::timer_loop`; on AWS, delayed queue messages).

use axum::extract::State;
use http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::domain::ids;
use crate::domain::time::format_rfc3339;
use crate::domain::timer::new_timer_id;
use crate::dto::ErrorBody;
use crate::error::ApiResult;
use crate::extract::*;
use crate::inputs::TimerRequest;
use crate::store::{CancelOutcome, IdempotencyClaim, NewTimer, StoreError, TimerRecord};
use crate::{json_response, ApiError, AppState};

/// A timer (docs/API.md §20).
#[derive(Debug, Serialize, ToSchema)]
pub struct TimerView {
    /// `tmr_…`.
    pub id: String,
    /// The type of the event it appends.
    #[serde(rename = "type")]
    pub event_type: String,
    /// RFC 3339: when it fires.
    pub fire_at: String,
    /// `pending`, `fired` or `cancelled`.
    pub status: String,
    /// The `data` it was given (`null` without), which its event carries as `data.data`.
    #[schema(value_type = serde_json::Value)]
    pub data: Value,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339: when it fired or was cancelled; `null` while pending.
    pub closed_at: Option<String>,
    /// The id of the event it appended; `null` unless fired.
    pub event_id: Option<String>,
    /// The sequence of the event it appended; `null` unless fired.
    pub sequence: Option<u64>,
}

impl TimerView {
    pub fn of(t: &TimerRecord) -> Self {
        Self {
            id: t.id.clone(),
            event_type: t.event_type.clone(),
            fire_at: format_rfc3339(t.fire_at),
            status: t.status.as_str().into(),
            data: t
                .data
                .as_deref()
                .and_then(|d| serde_json::from_str(d).ok())
                .unwrap_or(Value::Null),
            created_at: format_rfc3339(t.created_at),
            closed_at: t.closed_at.map(format_rfc3339),
            event_id: t.event.as_ref().map(|e| e.id.clone()),
            sequence: t.event.as_ref().map(|e| e.sequence),
        }
    }
}

/// `{"timer": …}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TimerEnvelope {
    pub timer: TimerView,
}

/// `{"timers": […]}`: pending (earliest first), then the last 100 fired or cancelled (most
/// recent first).
#[derive(Debug, Serialize, ToSchema)]
pub struct TimersEnvelope {
    pub timers: Vec<TimerView>,
}

impl JsonRequest for TimerRequest {
    /// The largest `POST {root}/timers` body read: 16 KiB of data, escaped, with room.
    fn limit(_: &AppState) -> u64 {
        64 * 1024
    }
}

impl ParseBody for TimerRequest {
    fn parse_body(body: &[u8]) -> Result<Self, ApiError> {
        TimerRequest::parse(body)
    }
}

fn no_such_timer(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::not_found("No such timer."),
        StoreError::QuotaExceeded => ApiError::TimersFull,
        other => other.into(),
    }
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/timers", tag = "timers",
    params(("address_id" = String, Path), ("Idempotency-Key" = Option<String>, Header)),
    request_body(content = TimerRequest, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Set: pending until it fires or is cancelled", body = TimerEnvelope),
        (status = 200, description = "The timer an earlier creation with this Idempotency-Key set (as it is now)", body = TimerEnvelope),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody),
    )
)]
pub async fn create_timer(
    State(state): State<AppState>,
    Current(Authenticated {
        address_id,
        address,
        now,
    }): Current,
    IdempotencyKey(claim_key): IdempotencyKey, JsonBody { value, bytes }: JsonBody<TimerRequest>,
) -> ApiResult {
    let spec = value.spec(now, address.expires_at)?;
    let new = NewTimer {
        id: new_timer_id(),
        fire_at: spec.fire_at,
        event_type: spec.event_type,
        data: spec.data,
        created_at: now,
        claim: claim_key.map(|k| IdempotencyClaim {
            key_hash: ids::sha256_hex(&k),
            body_hash: ids::sha256_hex(&bytes),
        }),
    };
    let created = state
        .store
        .create_timer(&address_id, new, &state.config.limits, now)
        .await
        .map_err(no_such_timer)?;
    let status = if created.duplicate {
        StatusCode::OK
    } else {
        tracing::info!(%address_id, timer_id = %created.timer.id, "timer set");
        StatusCode::CREATED
    };
    Ok(json_response(
        status,
        &TimerEnvelope {
            timer: TimerView::of(&created.timer),
        },
    ))
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/timers", tag = "timers",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Pending timers (earliest first), then the last 100 fired or cancelled (most recent first)", body = TimersEnvelope),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn list_timers(
    State(state): State<AppState>,
    Current(Authenticated {
        address_id, now, ..
    }): Current,
) -> ApiResult {
    let timers = state.store.list_timers(&address_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &TimersEnvelope {
            timers: timers.iter().map(TimerView::of).collect(),
        },
    ))
}

#[utoipa::path(
    delete, path = "/api/v1/addresses/{address_id}/timers/{timer_id}", tag = "timers",
    params(("address_id" = String, Path), ("timer_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Cancelled (now or earlier): it will not fire", body = TimerEnvelope),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`timer_fired`: it fired first; its event is in the feed", body = ErrorBody),
        (status = 410, body = ErrorBody),
    )
)]
pub async fn cancel_timer(
    State(state): State<AppState>,
    Current(Authenticated {
        address_id, now, ..
    }): Current, TimerId(timer_id): TimerId,
) -> ApiResult {
    match state
        .store
        .cancel_timer(&address_id, &timer_id, now)
        .await
        .map_err(no_such_timer)?
    {
        CancelOutcome::Cancelled(timer) => Ok(json_response(
            StatusCode::OK,
            &TimerEnvelope {
                timer: TimerView::of(&timer),
            },
        )),
        CancelOutcome::Fired(_) => Err(ApiError::TimerFired),
    }
}
