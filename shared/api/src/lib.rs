//! The HTTP API of docs/API.md as one axum router, shared by every deployment: `agentaddress
//! serve` runs all of it on one port; each Lambda function runs the route groups it serves.
//! Handlers parse, call one store operation, and map the result. The MCP endpoint is its own
//! crate (`agentaddress-mcp`), so that only what serves it links the MCP SDK; it plugs into
//! [`router_with`].
#![forbid(unsafe_code)]

pub use agentaddress_core::{domain, metrics, relay, store};

pub mod config;
pub mod dto;
pub mod error;
pub mod extract;
mod handlers;
pub mod hygiene;
pub mod inputs;
pub mod numbers;
pub mod openapi;
pub mod page_budget;
pub mod pages;
mod request_log;
pub mod routes;
pub mod send_delivery;
pub mod socket;
pub mod stream;
pub mod telemetry;
pub mod timer_loop;
pub mod wake_delivery;

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::Router;
use http::{header, HeaderValue, StatusCode};
use serde::Serialize;
use tokio::sync::watch;

pub use error::ApiError;
pub use extract::ClientIp;
pub use routes::{RouteGroup, Routes};

use crate::config::ServiceConfig;
use crate::domain::{ids, Clock, Limits, SystemClock};
use crate::store::Store;

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    pub public_url: Option<String>,
    pub email_domain: String,
    pub limits: Limits,
    /// SHA-256 (hex) of the operator's ingest secret; `None` turns the raw-MIME webhook door
    /// off (docs/API.md §10).
    pub email_ingest_secret_hash: Option<String>,
    /// When a long poll re-checks a store without a wake-up signal (DynamoDB on Lambda).
    pub poll_checks: PollChecks,
    /// The most long polls (and request waits) waiting at once on this deployment; 0: no cap
    /// (docs/API.md §6, "Waiting polls"). Over it a wait is answered at once, 503
    /// `unavailable` with `Retry-After`.
    pub max_waiting_polls: u64,
}

/// The long-poll check schedule of stores without a wake-up signal (DynamoDB on Lambda): the
/// first check `first` after the first read, each gap `growth` times the last, at most `max`.
/// Each check is a cheap read of the address's sequence (`Feed::feed_head_hint`), followed
/// by a read of the feed only when it moved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PollChecks {
    pub first: std::time::Duration,
    pub growth: f64,
    pub max: std::time::Duration,
}

impl PollChecks {
    /// The schedule: checks 100 ms after the first read, gaps growing 1.25× to 300 ms. An
    /// event arriving at any moment of a poll is seen at most 300 ms (plus a read) later; an
    /// idle 25 s poll costs about 85 checks (half a read unit each, docs/COSTS.md).
    pub const DEFAULT: PollChecks = PollChecks {
        first: std::time::Duration::from_millis(100),
        growth: 1.25,
        max: std::time::Duration::from_millis(300),
    };
    /// The schedule before 2026-12-02 (the gaps grew to 1.5 s): kept to benchmark against
    /// (`agentaddress-costs`).
    pub const SPARSE: PollChecks = PollChecks {
        first: std::time::Duration::from_millis(100),
        growth: 1.25,
        max: std::time::Duration::from_millis(1500),
    };
}

impl Default for PollChecks {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl From<&ServiceConfig> for ApiConfig {
    fn from(c: &ServiceConfig) -> Self {
        Self {
            public_url: c.public_url.clone(),
            email_domain: c.email_domain.clone(),
            limits: c.limits(),
            email_ingest_secret_hash: c
                .email_ingest_secret
                .as_ref()
                .map(|s| ids::hash_secret(s.expose())),
            poll_checks: PollChecks::default(),
            max_waiting_polls: c.max_waiting_polls,
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
    /// How event streams behave; `None` where they cannot be served (the Lambda functions:
    /// API Gateway buffers whole answers), and the route answers 501 (docs/API.md §14).
    pub streams: Option<stream::StreamSettings>,
    /// Outbound email's sender, relay and delivery (docs/API.md §16); `None`: not configured.
    pub outbound: Option<Arc<send_delivery::Outbound>>,
    /// Where the wake-up socket is served (docs/API.md §17); `None`: nowhere, and
    /// `endpoints.ws_url` is absent.
    pub ws: Option<WsEndpoint>,
    /// Where new address ids come from: [`ids::new_address_id`], 128 random bits (a test may
    /// hand out ids that are taken, to see a creation try again).
    pub address_ids: Arc<dyn Fn() -> String + Send + Sync>,
    /// What calls wake hooks' URLs (docs/API.md §19: a hook's URL checked at creation, and
    /// `POST {root}/hooks/{id}/test`); `None`: this function makes no hooks (501).
    pub hook_caller: Option<Arc<dyn relay::HookCaller>>,
}

/// Where the wake-up socket is served, handed out as `endpoints.ws_url` (docs/API.md §17).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WsEndpoint {
    /// `{base}/api/v1/ws` of this server, `ws://` for `http://` and `wss://` for `https://`
    /// (`serve`).
    ThisServer,
    /// A URL of its own (the AWS deployment's WebSocket API).
    At(String),
}

impl WsEndpoint {
    /// The URL for clients that reach the API at `base`.
    pub fn url(&self, base: &str) -> String {
        match self {
            WsEndpoint::At(url) => url.clone(),
            WsEndpoint::ThisServer => {
                let rest = base
                    .strip_prefix("https://")
                    .map(|r| format!("wss://{r}"))
                    .or_else(|| base.strip_prefix("http://").map(|r| format!("ws://{r}")))
                    .unwrap_or_else(|| base.to_owned());
                format!("{rest}/api/v1/ws")
            }
        }
    }
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
            streams: Some(stream::StreamSettings::default()),
            outbound: None,
            ws: None,
            address_ids: Arc::new(ids::new_address_id),
            hook_caller: None,
        }
    }

    /// Wake hooks' URLs checked and called by `caller` (docs/API.md §19).
    pub fn with_hook_caller(mut self, caller: Option<Arc<dyn relay::HookCaller>>) -> Self {
        self.hook_caller = caller;
        self
    }

    /// New address ids from `ids` instead of [`ids::new_address_id`].
    pub fn with_address_ids(mut self, ids: Arc<dyn Fn() -> String + Send + Sync>) -> Self {
        self.address_ids = ids;
        self
    }

    /// The wake-up socket at `ws` (docs/API.md §17), or none.
    pub fn with_ws(mut self, ws: Option<WsEndpoint>) -> Self {
        self.ws = ws;
        self
    }

    /// Outbound email through `send_delivery` (docs/API.md §16).
    pub fn with_outbound(mut self, outbound: Option<Arc<send_delivery::Outbound>>) -> Self {
        self.outbound = outbound;
        self
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn with_shutdown(mut self, shutdown: watch::Receiver<bool>) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// Event streams with these settings, or none (501) where the deployment cannot stream.
    pub fn with_streams(mut self, streams: Option<stream::StreamSettings>) -> Self {
        self.streams = streams;
        self
    }

    pub fn with_page_budget(mut self, budget: Arc<page_budget::PageBudget>) -> Self {
        self.page_budget = Some(budget);
        self
    }
}

/// The OpenAPI document of every REST route (`GET /openapi.json`), with `base` as its server.
pub fn openapi_document(base: &str) -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi;
    openapi::document_of(routes::RestPaths::openapi(), base)
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
    let groups: Vec<&'static Routes> = groups.iter().map(|g| g.routes()).collect();
    router_of(&groups, state, mcp, &[])
}

/// The router of a Lambda function: the routes of `groups` (each names only its own handlers,
/// so the function links no other), and `others` answered as routed elsewhere: the `service`
/// function passes every route's shape ([`routes::SHAPES`]), so that another method of a known
/// path gets its 405 and `Allow` as from the function that serves the path.
pub fn router_of(
    groups: &[&'static Routes], state: AppState, mcp: Option<McpRoute>, others: &[routes::Shape],
) -> Router {
    let mut app = Router::new();
    for g in groups {
        app = g.add_to(app, &state, mcp);
    }
    app = routes::add_shapes(app, groups, others);
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
