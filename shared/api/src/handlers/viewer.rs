//! The inbox viewer's one-time sign-in links (docs/API.md §13, "Sign-in links"):
//! `POST {root}/viewer-codes` (bearer) makes a code that carries the read token sealed
//! (`domain::viewer`), and `POST /api/v1/viewer-codes/redeem` (no auth) trades it for the read
//! token once, so that `agentaddress inbox TASK` (docs/CLI.md) opens the viewer signed in with
//! no token in any URL. Re-exported by `handlers`, so the route table names them like the
//! others.

use crate::error::ApiResult;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::ids;
use crate::domain::time::format_rfc3339;
use crate::domain::viewer::{
    code_hash, is_code_shaped, new_viewer_code, open_token, seal_token, REDEEMS_PER_MINUTE,
    VIEWER_CODES_PER_MINUTE, VIEWER_CODE_VALID_MS,
};
use crate::dto::ErrorBody;
use crate::extract::*;
use crate::inputs::Fields;
use crate::store::NewViewerCode;
use crate::{json_response, ApiError, AppState};

/// `POST {root}/viewer-codes`'s answer (docs/API.md §13).
#[derive(Debug, Serialize, ToSchema)]
pub struct ViewerCode {
    /// The one-time code (`avc_…`): it signs the viewer in once, within 5 minutes.
    pub code: String,
    /// RFC 3339: when the code stops working.
    pub expires_at: String,
    /// The inbox viewer's URL with the code in its fragment (`…/inbox#code=avc_…`), which a
    /// browser never sends to a server: the page trades the code for the read token.
    pub viewer_url: String,
}

/// Body of `POST /api/v1/viewer-codes/redeem`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RedeemViewerCode {
    /// The code of a viewer sign-in link (`avc_…`, the link's fragment after `#code=`).
    pub code: String,
}

impl Fields for RedeemViewerCode {}

impl JsonRequest for RedeemViewerCode {
    /// The largest body of `POST /api/v1/viewer-codes/redeem`.
    fn limit(_: &AppState) -> u64 {
        1024
    }
}

/// `POST /api/v1/viewer-codes/redeem`'s answer: what the viewer keeps in its tab.
#[derive(Debug, Serialize, ToSchema)]
pub struct ViewerSignIn {
    pub address_id: String,
    pub read_token: String,
}

/// An answer that holds a secret: no cache may keep it.
fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/viewer-codes", tag = "viewer",
    params(("address_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "A one-time sign-in code for the inbox viewer, valid 5 minutes, and the viewer's URL with it in the fragment (shown only here)", body = ViewerCode),
        (status = 401, body = ErrorBody), (status = 410, body = ErrorBody),
        (status = 429, body = ErrorBody),
    )
)]
pub async fn create_viewer_code(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    headers: HeaderMap,
) -> ApiResult {
    let read_token = bearer_token(&headers).ok_or(ApiError::Unauthorized)?;
    if let Some(retry_after) = state
        .store
        .hit_rate_limit(
            &format!("viewer-codes:{address_id}"),
            VIEWER_CODES_PER_MINUTE,
            now,
        )
        .await?
    {
        return Err(ApiError::RateLimited { retry_after });
    }
    let code = new_viewer_code();
    let sealed_token = seal_token(&code, &address_id, read_token)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let expires_at = now + VIEWER_CODE_VALID_MS;
    state
        .store
        .create_viewer_code(
            &address_id,
            NewViewerCode {
                code_hash: code_hash(&code),
                sealed_token,
                created_at: now,
                expires_at,
            },
            now,
        )
        .await?;
    tracing::info!(%address_id, "viewer code created");
    let base = base_url(&state, &headers);
    Ok(no_store(json_response(
        StatusCode::CREATED,
        &ViewerCode {
            viewer_url: format!("{base}/inbox#code={code}"),
            code,
            expires_at: format_rfc3339(expires_at),
        },
    )))
}

#[utoipa::path(
    post, path = "/api/v1/viewer-codes/redeem", tag = "viewer",
    request_body = RedeemViewerCode,
    responses(
        (status = 200, description = "The address id and read token the code carried; the code is used up", body = ViewerSignIn),
        (status = 410, description = "`code_expired`: the code is unknown, used or expired (one answer for all three)", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 429, body = ErrorBody),
    )
)]
pub async fn redeem_viewer_code(
    State(state): State<AppState>, Now(now): Now, parts: Parts, body: Body,
) -> ApiResult {
    // Every attempt counts, right or wrong: codes cannot be guessed at speed (docs/API.md §13).
    let client = client_key(&parts);
    if let Some(retry_after) = state
        .store
        .hit_rate_limit(&format!("viewer-redeem:{client}"), REDEEMS_PER_MINUTE, now)
        .await?
    {
        return Err(ApiError::RateLimited { retry_after });
    }
    // After the rate limit: the body is read only for a client within it.
    let body = JsonBody::<RedeemViewerCode>::read(&state, &parts.headers, body).await?;
    let RedeemViewerCode { code } = body.value;
    // Unknown, used, expired, not ours, or its address gone since: one answer for all.
    if !is_code_shaped(&code) {
        return Err(ApiError::ViewerCodeExpired);
    }
    let Some(redeemed) = state
        .store
        .redeem_viewer_code(&code_hash(&code), now)
        .await?
    else {
        return Err(ApiError::ViewerCodeExpired);
    };
    let read_token = open_token(&code, &redeemed.address_id, &redeemed.sealed_token)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let address = state.store.get_address(&redeemed.address_id, now).await?;
    let live =
        address.is_some_and(|a| !a.is_gone(now) && ids::verify_secret(&read_token, &a.token_hash));
    if !live {
        return Err(ApiError::ViewerCodeExpired);
    }
    tracing::info!(address_id = %redeemed.address_id, "viewer code redeemed");
    Ok(no_store(json_response(
        StatusCode::OK,
        &ViewerSignIn {
            address_id: redeemed.address_id,
            read_token,
        },
    )))
}
