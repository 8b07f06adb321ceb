//! `POST /api/mcp`: the API as MCP tools, over Streamable HTTP, stateless (no session: every
//! POST stands alone, so any instance — or any Lambda invocation — can answer it).
//!
//! One source of truth: a tool call becomes the REST request it stands for (same path, query,
//! body and bearer token) and is answered by the REST router in process, so validation,
//! authentication, rate limits, quotas and long polling are exactly those of the HTTP API.
//! A 2xx answer is the tool's `structuredContent`; any other answer is a tool error
//! (`isError: true`) whose `structuredContent` is the API's error body,
//! `{"error": {"code", "message", ...}}` — never a JSON-RPC error. The output schemas are the
//! response schemas of `/openapi.json`, generated from the same DTOs.
//!
//! Secrets: the read token travels only in the in-process request's `Authorization` header,
//! which nothing logs. rmcp logs whole JSON-RPC messages (tool arguments included) at debug
//! level, so every deployment caps the `rmcp` target (`agentaddress_api::telemetry`).
#![forbid(unsafe_code)]

use std::sync::Arc;

use axum::routing::{post_service, MethodRouter};
use axum::Router;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use agentaddress_api::{AppState, RouteGroup};

mod catalogue;
mod jsonrpc;
mod rest;
mod server;

pub use catalogue::INLINE_MAX_BYTES;
pub use jsonrpc::McpService;
pub use server::McpServer;

use jsonrpc::BODY_LIMIT;

/// The path of the MCP endpoint.
pub const PATH: &str = agentaddress_api::MCP_PATH;

/// What serves `POST /api/mcp` in [`agentaddress_api::router_with`].
pub fn route(state: &AppState) -> MethodRouter<AppState> {
    post_service(service(state.clone()))
}

/// The whole API, REST and MCP (what `agentaddress serve` runs).
pub fn router(state: AppState) -> Router {
    router_for(&RouteGroup::ALL, state)
}

/// The routes of `groups`, MCP's included when `groups` has it.
pub fn router_for(groups: &[RouteGroup], state: AppState) -> Router {
    agentaddress_api::router_with(groups, state, Some(route))
}

/// The MCP endpoint as a tower service over `state`: [`Transport`](jsonrpc::Transport) behind
/// the JSON-RPC checks of [`McpService::answer`] (docs/API.md, "Request hygiene").
pub fn service(state: AppState) -> McpService {
    let rest = agentaddress_api::router_for(&RouteGroup::REST, state);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(BODY_LIMIT)
        // Like the REST routes, the endpoint answers whatever Host it is reached under (API
        // Gateway, a proxy, a configured public URL): every data tool needs the read token,
        // and creation is rate limited per client IP exactly as `POST /api/v1/addresses`.
        .disable_allowed_hosts();
    McpService {
        transport: StreamableHttpService::new(
            move || Ok(McpServer { rest: rest.clone() }),
            Arc::new(NeverSessionManager::default()),
            config,
        ),
    }
}
