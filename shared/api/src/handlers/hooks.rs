//! Wake hooks (docs/API.md §19): `POST`/`GET {root}/hooks`, `PUT`/`DELETE {root}/hooks/{id}`,
//! `POST {root}/hooks/{id}/test`, and the hooks of the create body ([`new_hooks`]). Wakes are
//! sent by the delivery machine, `crate::wake_delivery`.

use std::sync::Arc;

use axum::extract::{FromRequestParts, State};
use axum::response::IntoResponse;
use http::request::Parts;
use http::{HeaderMap, StatusCode};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::hooks::{new_hook_id, new_signing_secret, HookSpec, MAX_HOOKS_PER_ADDRESS};
use crate::dto::{ErrorBody, HookCreated, HookView};
use crate::error::ApiResult;
use crate::extract::*;
use crate::inputs::{HookRequest, HookStatusBody};
use crate::relay::{HookCaller, NotSent};
use crate::store::{HookRecord, HookStatus, NewHook, StoreError};
use crate::wake_delivery::{request_of, wake_of};
use crate::{json_response, ApiError, AppState};

/// `GET {root}/hooks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HooksEnvelope {
    pub hooks: Vec<HookView>,
}

/// `PUT {root}/hooks/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HookEnvelope {
    pub hook: HookView,
}

/// `POST {root}/hooks/{id}/test`: what the receiver answered.
#[derive(Debug, Serialize, ToSchema)]
pub struct HookTested {
    /// The receiver's HTTP status (any: a 4xx is an answer too).
    pub status: u16,
    /// Milliseconds from the send to the answer.
    pub ms: u64,
}

impl JsonRequest for HookRequest {
    /// The largest `POST {root}/hooks` body read: five headers of 1 KiB, twenty patterns and a
    /// URL, with room.
    fn limit(_: &AppState) -> u64 {
        16 * 1024
    }
}

impl ParseBody for HookRequest {
    fn parse_body(body: &[u8]) -> Result<Self, ApiError> {
        HookRequest::parse(body).map(HookRequest)
    }
}

impl JsonRequest for HookStatusBody {
    fn limit(_: &AppState) -> u64 {
        1024
    }
}

/// This deployment's hook caller: 501 `not_supported` where none is configured.
pub struct Caller(pub Arc<dyn HookCaller>);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        caller(state).map(Caller)
    }
}

fn caller(state: &AppState) -> Result<Arc<dyn HookCaller>, ApiError> {
    state
        .hook_caller
        .clone()
        .ok_or_else(|| ApiError::NotSupported("This deployment does not make wake hooks.".into()))
}

fn no_such_hook(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => ApiError::not_found("No such hook."),
        StoreError::QuotaExceeded => ApiError::HooksFull,
        other => other.into(),
    }
}

/// The hooks to make from `specs`: each URL checked (its form, then every address its host
/// resolves to), a new id and signing secret each.
pub(crate) async fn new_hooks(
    state: &AppState, specs: Vec<HookSpec>,
) -> Result<Vec<NewHook>, ApiError> {
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let caller = caller(state)?;
    let mut hooks = Vec::with_capacity(specs.len());
    for spec in specs {
        caller
            .check(&spec.url)
            .await
            .map_err(|e| ApiError::InvalidHookUrl(e.0))?;
        hooks.push(NewHook {
            id: new_hook_id(),
            url: spec.url,
            types: spec.types.as_slice().to_vec(),
            format: spec.format,
            headers: spec.headers,
            secret: new_signing_secret(),
            debounce_seconds: spec.debounce_seconds,
        });
    }
    Ok(hooks)
}

/// The create answer's entry of a hook just made.
pub(crate) fn created(hook: &HookRecord) -> HookCreated {
    HookCreated {
        hook: HookView::of(hook),
        signing_secret: hook.secret.clone(),
    }
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/hooks", tag = "hooks",
    params(("address_id" = String, Path)),
    request_body(content = HookRequest, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Made; its signing secret is shown only here", body = HookCreated),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
    )
)]
pub async fn add_hook(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    JsonBody {
        value: HookRequest(spec),
        ..
    }: JsonBody<HookRequest>,
) -> ApiResult {
    let hooks = new_hooks(&state, vec![spec]).await?;
    let added = state
        .store
        .add_hooks(&address_id, hooks, MAX_HOOKS_PER_ADDRESS, now)
        .await
        .map_err(no_such_hook)?;
    let Some(hook) = added.first() else {
        return Err(ApiError::Internal(
            "a hook was added but not returned".into(),
        ));
    };
    tracing::info!(%address_id, hook_id = %hook.id, format = hook.format.as_str(), "hook added");
    Ok(json_response(StatusCode::CREATED, &created(hook)))
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/hooks", tag = "hooks",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The address's hooks, oldest first (never a secret or a header's value)", body = HooksEnvelope),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn list_hooks(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
) -> ApiResult {
    let hooks = state.store.list_hooks(&address_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &HooksEnvelope {
            hooks: hooks.iter().map(HookView::of).collect(),
        },
    ))
}

#[utoipa::path(
    put, path = "/api/v1/addresses/{address_id}/hooks/{hook_id}", tag = "hooks",
    params(("address_id" = String, Path), ("hook_id" = String, Path)),
    request_body(content = HookStatusBody, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Its status set (`active` also re-enables a disabled hook; the events that came meanwhile are woken for)", body = HookEnvelope),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
    )
)]
pub async fn set_hook_status(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    HookId(hook_id): HookId,
    JsonBody {
        value: HookStatusBody { status },
        ..
    }: JsonBody<HookStatusBody>,
) -> ApiResult {
    let wanted = HookStatus::parse(&status).unwrap_or(HookStatus::Paused);
    let limits = &state.config.limits;
    // A wake being recorded meanwhile changes the revision: read again and set again.
    for _ in 0..5 {
        let hook = state
            .store
            .get_hook(&address_id, &hook_id, now)
            .await
            .map_err(no_such_hook)?;
        if hook.status == wanted {
            return Ok(json_response(
                StatusCode::OK,
                &HookEnvelope {
                    hook: HookView::of(&hook),
                },
            ));
        }
        let mut next = hook;
        next.status = wanted;
        if wanted == HookStatus::Active {
            next.delivery.failed_ranges = 0;
        }
        if let Some(saved) = state
            .store
            .save_hook(&address_id, next, Vec::new(), limits, now)
            .await
            .map_err(no_such_hook)?
        {
            tracing::info!(%address_id, %hook_id, status = wanted.as_str(), "hook status set");
            return Ok(json_response(
                StatusCode::OK,
                &HookEnvelope {
                    hook: HookView::of(&saved),
                },
            ));
        }
    }
    Err(ApiError::Unavailable(
        "the hook kept changing; try again".into(),
    ))
}

#[utoipa::path(
    delete, path = "/api/v1/addresses/{address_id}/hooks/{hook_id}", tag = "hooks",
    params(("address_id" = String, Path), ("hook_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted: no wake is sent for it any more (one already on its way may still arrive)"),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 410, body = ErrorBody),
    )
)]
pub async fn delete_hook(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    HookId(hook_id): HookId,
) -> ApiResult {
    state
        .store
        .delete_hook(&address_id, &hook_id, now)
        .await
        .map_err(no_such_hook)?;
    tracing::info!(%address_id, %hook_id, "hook deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/hooks/{hook_id}/test", tag = "hooks",
    params(("address_id" = String, Path), ("hook_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A `hook.test` wake was sent at once; the receiver's answer (whatever its status)", body = HookTested),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 502, body = ErrorBody),
    )
)]
pub async fn test_hook(
    State(state): State<AppState>,
    Authenticated {
        address_id,
        address,
        now,
    }: Authenticated,
    HookId(hook_id): HookId, Caller(caller): Caller, headers: HeaderMap,
) -> ApiResult {
    let hook = state
        .store
        .get_hook(&address_id, &hook_id, now)
        .await
        .map_err(no_such_hook)?;
    let base = base_url(&state, &headers);
    let at = hook.delivery.delivered_through;
    let mut wake = wake_of(&hook, address.task_id.clone(), at, at, Vec::new(), &base);
    wake.test = Some(now);
    let (headers, body) = request_of(&hook, &wake, now);
    match caller.call(&hook.url, &headers, body).await {
        Ok(answer) => {
            tracing::info!(%address_id, %hook_id, status = answer.status, "test wake sent");
            Ok(json_response(
                StatusCode::OK,
                &HookTested {
                    status: answer.status,
                    ms: u64::try_from(answer.elapsed.as_millis()).unwrap_or(u64::MAX),
                },
            ))
        }
        Err(NotSent::Refused(why)) => Err(ApiError::InvalidHookUrl(why)),
        Err(NotSent::Unreachable(why)) => Err(ApiError::HookUnreachable(format!(
            "The test wake got no answer: {why}."
        ))),
    }
}
