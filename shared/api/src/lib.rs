//! The HTTP API of docs/API.md as one axum router, shared by every deployment: `agentaddress
//! serve` runs all of it on one port; each Lambda function runs the route groups it serves.
//! Handlers parse, call one store operation, and map the result. The MCP endpoint is its own
//! crate (`agentaddress-mcp`), so that only what serves it links the MCP SDK; it plugs into
//! [`router_with`].
#![forbid(unsafe_code)]

pub use agentaddress_core::{domain, store};

pub mod config;
pub mod dto;
pub mod error;
pub mod extract;
mod handlers;
pub mod hygiene;
pub mod openapi;
pub mod page_budget;
pub mod request;
mod request_log;
pub mod telemetry;

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use http::{header, HeaderValue, StatusCode};
use serde::Serialize;
use tokio::sync::watch;

pub use error::ApiError;
pub use extract::ClientIp;

use crate::config::ServiceConfig;
use crate::domain::{Clock, Limits, SystemClock};
use crate::store::Store;

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    pub public_url: Option<String>,
    pub email_domain: String,
    pub limits: Limits,
}

impl From<&ServiceConfig> for ApiConfig {
    fn from(c: &ServiceConfig) -> Self {
        Self {
            public_url: c.public_url.clone(),
            email_domain: c.email_domain.clone(),
            limits: c.limits(),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub config: Arc<ApiConfig>,
    pub clock: Arc<dyn Clock>,
    /// Turns `true` when the server is shutting down: waiting long polls answer at once.
    pub shutdown: watch::Receiver<bool>,
    /// The memory shared by pages of events in flight (`serve`); none on Lambda.
    pub page_budget: Option<Arc<page_budget::PageBudget>>,
}

impl AppState {
    /// State with the system clock and a shutdown signal that never fires.
    pub fn new(store: Arc<dyn Store>, config: ApiConfig) -> Self {
        let (tx, rx) = watch::channel(false);
        std::mem::forget(tx);
        Self {
            store,
            config: Arc::new(config),
            clock: Arc::new(SystemClock),
            shutdown: rx,
            page_budget: None,
        }
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_shutdown(mut self, shutdown: watch::Receiver<bool>) -> Self {
        self.shutdown = shutdown;
        self
    }

    pub fn with_page_budget(mut self, budget: Arc<page_budget::PageBudget>) -> Self {
        self.page_budget = Some(budget);
        self
    }
}

/// The route groups, one per Lambda function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteGroup {
    /// `POST /api/v1/addresses`
    CreateAddress,
    /// `GET`, `DELETE {root}`
    Address,
    /// `POST {inbox_url}`
    Inbox,
    /// `GET {root}/events`, `GET {root}/events/{event_id}`, `POST .../ack`
    Events,
    /// `GET {state_url}`, `GET`, `PUT`, `DELETE {state_url}/{key}`
    State,
    /// `/healthz`, `/openapi.json`, `/skill.md`
    Service,
    /// `POST /api/mcp`: the API as MCP tools (answered by the REST routes in process)
    Mcp,
}

impl RouteGroup {
    pub const ALL: [RouteGroup; 7] = [
        RouteGroup::CreateAddress,
        RouteGroup::Address,
        RouteGroup::Inbox,
        RouteGroup::Events,
        RouteGroup::State,
        RouteGroup::Service,
        RouteGroup::Mcp,
    ];

    /// The groups of the HTTP API, which `/openapi.json` describes: all but MCP.
    pub const REST: [RouteGroup; 6] = [
        RouteGroup::CreateAddress,
        RouteGroup::Address,
        RouteGroup::Inbox,
        RouteGroup::Events,
        RouteGroup::State,
        RouteGroup::Service,
    ];

    /// The name of the Lambda function (and binary) that serves this group.
    pub fn function_name(self) -> &'static str {
        match self {
            RouteGroup::CreateAddress => "create-address",
            RouteGroup::Address => "address",
            RouteGroup::Inbox => "inbox",
            RouteGroup::Events => "events",
            RouteGroup::State => "state",
            RouteGroup::Service => "service",
            RouteGroup::Mcp => "mcp",
        }
    }

    /// The (method, path) pairs this group serves, in the router's path syntax. Deployment
    /// descriptions (`template.yaml`, the `cargo lambda watch` router) are checked against it.
    pub fn endpoints(self) -> &'static [(&'static str, &'static str)] {
        match self {
            RouteGroup::CreateAddress => &[("POST", "/api/v1/addresses")],
            RouteGroup::Address => &[
                ("GET", "/api/v1/addresses/{address_id}"),
                ("DELETE", "/api/v1/addresses/{address_id}"),
            ],
            RouteGroup::Inbox => &[("POST", "/api/v1/inbox/{address_id}/{inbox_secret}")],
            RouteGroup::Events => &[
                ("GET", "/api/v1/addresses/{address_id}/events"),
                ("GET", "/api/v1/addresses/{address_id}/events/{event_id}"),
                (
                    "POST",
                    "/api/v1/addresses/{address_id}/events/{event_id}/ack",
                ),
            ],
            RouteGroup::State => &[
                ("GET", "/api/v1/addresses/{address_id}/state"),
                ("GET", "/api/v1/addresses/{address_id}/state/{key}"),
                ("PUT", "/api/v1/addresses/{address_id}/state/{key}"),
                ("DELETE", "/api/v1/addresses/{address_id}/state/{key}"),
            ],
            RouteGroup::Service => &[
                ("GET", "/healthz"),
                ("GET", "/openapi.json"),
                ("GET", "/skill.md"),
            ],
            RouteGroup::Mcp => &[("POST", MCP_PATH)],
        }
    }

    fn routes(self, state: &AppState, mcp: Option<McpRoute>) -> Router<AppState> {
        use handlers::*;
        let r = Router::new();
        match self {
            RouteGroup::CreateAddress => r.route("/api/v1/addresses", post(create_address)),
            RouteGroup::Address => r.route(
                "/api/v1/addresses/{address_id}",
                get(inspect_address).delete(delete_address),
            ),
            RouteGroup::Inbox => {
                r.route("/api/v1/inbox/{address_id}/{inbox_secret}", post(deliver))
            }
            RouteGroup::Events => r
                .route("/api/v1/addresses/{address_id}/events", get(list_events))
                .route(
                    "/api/v1/addresses/{address_id}/events/{event_id}",
                    get(get_event),
                )
                .route(
                    "/api/v1/addresses/{address_id}/events/{event_id}/ack",
                    post(ack_event),
                ),
            RouteGroup::State => r
                .route("/api/v1/addresses/{address_id}/state", get(list_state))
                .route(
                    "/api/v1/addresses/{address_id}/state/{key}",
                    get(get_state).put(put_state).delete(delete_state),
                ),
            RouteGroup::Service => r
                .route("/healthz", get(healthz))
                .route("/openapi.json", get(openapi_json))
                .route("/skill.md", get(skill_md)),
            RouteGroup::Mcp => match mcp {
                Some(route) => r.route(MCP_PATH, route(state)),
                None => r,
            },
        }
    }
}

/// The path of the MCP endpoint (`RouteGroup::Mcp`).
pub const MCP_PATH: &str = "/api/mcp";

/// What serves `POST /api/mcp`, given by the crate that implements it (`agentaddress-mcp`).
pub type McpRoute = fn(&AppState) -> MethodRouter<AppState>;

/// The whole REST API (every group but MCP, which [`router_with`] adds).
pub fn router(state: AppState) -> Router {
    router_for(&RouteGroup::REST, state)
}

/// The routes of `groups`, with the JSON 404/405 answers, the request-level checks of
/// [`hygiene`] (Host, Transfer-Encoding, repeated headers: docs/API.md, "Request hygiene"),
/// panic catching and request logs.
pub fn router_for(groups: &[RouteGroup], state: AppState) -> Router {
    router_with(groups, state, None)
}

/// [`router_for`], with `mcp` serving [`RouteGroup::Mcp`] when `groups` has it (without one,
/// that group adds no route).
pub fn router_with(groups: &[RouteGroup], state: AppState, mcp: Option<McpRoute>) -> Router {
    let mut app = Router::new();
    for g in groups {
        app = app.merge(g.routes(&state, mcp));
    }
    app.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(hygiene::HygieneLayer)
        .layer(request_log::RequestLogLayer)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(on_panic))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("No such route.")
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

fn on_panic(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal("a handler panicked".into()).into_response()
}

pub const JSON_CONTENT_TYPE: &str = "application/json; charset=utf-8";

/// A JSON response with `Content-Type: application/json; charset=utf-8`.
pub fn json_response<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(JSON_CONTENT_TYPE),
            )],
            bytes,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize a response");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}
