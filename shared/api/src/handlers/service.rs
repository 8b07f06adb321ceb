//! The service's own documents: health, the OpenAPI document and the agent instructions.

use axum::extract::State;
use axum::response::IntoResponse;
use http::{header, HeaderMap, StatusCode};

use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::*;
use crate::openapi::SKILL_MD;
use crate::{json_response, openapi_document, AppState};

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
    Ok(json_response(StatusCode::OK, &openapi_document(&base)))
}

#[utoipa::path(
    get, path = "/skill.md", tag = "service",
    responses((status = 200, description = "Instructions for an agent", content_type = "text/markdown"))
)]
pub async fn skill_md(State(state): State<AppState>, headers: HeaderMap) -> ApiResult {
    let base = base_url(&state, &headers);
    let text = SKILL_MD.replace("{base}", &base);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        text,
    )
        .into_response())
}
