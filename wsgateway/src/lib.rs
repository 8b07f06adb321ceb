//! A local emulator of an AWS API Gateway **WebSocket API** whose `$connect`, `$disconnect`
//! and `$default` routes are Lambda proxy integrations of one function, with the API Gateway
//! Management API (`@connections`) on the same listener: what the AWS deployment's wake-up
//! socket (docs/API.md §17) runs on, here in front of `cargo lambda watch`.
//!
//! # What it emulates
//! - `GET /{stage}` upgrades to a WebSocket. Before the handshake completes, `$connect` is
//!   invoked (Lambda Invoke API: `POST {invoke-url}/2015-03-31/functions/{function}/invocations`);
//!   a non-2xx `statusCode` refuses the handshake with that status, a function error with 500.
//!   A `Sec-WebSocket-Protocol` header in its answer is the handshake's subprotocol.
//! - A text frame whose JSON `{route-selection-field}` names a `--mock-route` is answered by that
//!   route's JSON (AWS's MOCK integration with a route response; no invocation). Every other
//!   text frame goes to `$default` (body = the frame); a 2xx answer with a body is sent back
//!   (a two-way route), a function error sends AWS's `{"message": "Internal server error",
//!   "connectionId", "requestId"}`. The messages of one connection are handled in order.
//! - Binary frames: API Gateway "doesn't currently support binary frames in incoming message
//!   payloads ... rejects it and disconnects the client with code 1003" (Binary media types for
//!   WebSocket APIs); so does this emulator.
//! - Quotas (Quotas for configuring and running a WebSocket in API Gateway): a frame over 32 KB
//!   or a message over 128 KB closes with 1009; idle timeout (10 min) and connection duration
//!   (2 h) are flags. A message either way resets the idle timer (services that keep AWS
//!   connections open send server-to-client keep-alives, so posts count); WebSocket ping
//!   frames do not (AWS documents nothing either way: clients should send a message, e.g.
//!   `{"action": "ping"}`). `lastActiveAt` is the last client message. Those closes, `DELETE @connections` and shutdown
//!   send 1001 ("Going away"): AWS documents no code for them, 1001 is this emulator's choice.
//!   Posted messages over 32 KB are sent as 32 KB fragments, as the quotas page says AWS does.
//! - `$disconnect` is invoked (best effort, answer ignored) after every connection that
//!   `$connect` accepted ends, with `disconnectStatusCode`/`disconnectReason`: the client's close
//!   code and reason (1005 "Client-side close frame status not set" without one, as in AWS's
//!   captured event), 1006 when the connection broke, else the code the gateway closed with.
//! - Management API at `/{stage}/@connections/{id}` (what the AWS SDK calls with the endpoint
//!   `http://HOST:PORT/{stage}`; SigV4 is not checked): `POST` (body → one frame; text when
//!   UTF-8, else binary) → 200; `GET` → `connectedAt`, `identity`, `lastActiveAt`; `DELETE` →
//!   204. Unknown or closed ids → 410 `GoneException`, bodies over 128 KiB → 413
//!   `PayloadTooLargeException`, a throttled post → 429 `LimitExceededException`; the error
//!   type is in the `x-amzn-ErrorType` header (what smithy's restJson1 clients read first) and
//!   the body is `{"message"}`.
//! - Test controls: `GET /__wsgateway/connections` (live ids), `POST /__wsgateway/throttle`
//!   `{"posts": N}` (the next N posts answer 429), `GET /__wsgateway/stats` (counters).
//!
//! # Running it
//! ```text
//! agentaddress-wsgateway --listen 127.0.0.1:0 --invoke-url http://127.0.0.1:9000 \
//!     [--function ws] [--stage local] [--api-id local] [--route-selection-field action] \
//!     [--mock-route 'ping={"type":"pong"}' ...] [--idle-timeout-seconds 600] \
//!     [--max-connection-seconds 7200]
//! ```
//! Once bound it prints one line, `wsgateway listening on http://HOST:PORT`, to stdout
//! (logs go to stderr, `RUST_LOG` filters them). Clients connect to `ws://HOST:PORT/{stage}`;
//! the functions' `aws-sdk-apigatewaymanagement` client takes the endpoint
//! `http://HOST:PORT/{stage}` (e.g. `AWS_ENDPOINT_URL_APIGATEWAYMANAGEMENTAPI`), any region
//! and any credentials. SIGTERM or Ctrl-C closes every socket (1001), waits for their
//! `$disconnect` (10 s at most) and exits 0. A wrong stage or path answers 403
//! `{"message": "Forbidden"}`, as API Gateway does for a route it does not have. The tests
//! (`wsgateway/tests/gateway.rs`) run it against a small Invoke API that records events.
//!
//! # The events
//! Built as `aws_lambda_events::apigw::ApiGatewayWebsocketProxyRequest` and serialised by that
//! crate, so they hold every field of its type: besides what AWS sends (compare the captured
//! `$connect` event: `headers`, `multiValueHeaders`, `requestContext` {`routeKey`, `eventType`,
//! `extendedRequestId`, `requestTime`, `messageDirection`, `stage`, `connectedAt`,
//! `requestTimeEpoch`, `identity`, `requestId`, `domainName`, `connectionId`, `apiId`},
//! `isBase64Encoded`), they carry `null`/empty `resource`, `path`, `pathParameters`,
//! `stageVariables`, `queryStringParameters` (AWS omits it without a query; with one, its
//! values are single strings as AWS sends them, not the crate's lists), `body` on
//! CONNECT/DISCONNECT, and `requestContext.accountId`, `resourceId`, `error`, ... Differences:
//! header names are lower-case (AWS keeps the client's case: read them case-insensitively);
//! `domainName` is the `Host` header with its port (AWS: the API's host name); the
//! `X-Forwarded-*`/`X-Amzn-Trace-Id` headers AWS adds are imitated. DISCONNECT events carry
//! the few headers AWS's captured one has (`Host`, `X-Forwarded-For`, `x-api-key`,
//! `x-restapi`). Ids (`connectionId`, `requestId`, `messageId`) are 11 random bytes in base64,
//! 16 characters like AWS's `L0SM9cOFvHcCIhw=`; they may contain `+` and `/` (the SDK
//! percent-encodes them in `@connections` paths).
//!
//! # What it does not emulate
//! Authorizers, API keys, custom routes with integrations (only mock routes), request
//! templates, stage variables, TLS, the 29 s integration timeout's exact answer (a timeout
//! is a function error here), per-account throttling, and SigV4 checks.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::apigw::{
    ApiGatewayRequestIdentity, ApiGatewayWebsocketProxyRequest,
    ApiGatewayWebsocketProxyRequestContext,
};
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::{SinkExt, StreamExt};
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// AWS's WebSocket frame size quota.
pub const MAX_FRAME_BYTES: usize = 32 * 1024;
/// AWS's message payload size quota (client messages and `@connections` posts).
pub const MAX_MESSAGE_BYTES: usize = 128 * 1024;
/// AWS's integration timeout.
const INVOKE_TIMEOUT: Duration = Duration::from_secs(29);

/// The command line (and the library's configuration).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "agentaddress-wsgateway",
    about = "Emulates an API Gateway WebSocket API in front of `cargo lambda watch`"
)]
pub struct Config {
    /// Where to listen (port 0: any free port; the line on stdout tells which).
    #[arg(long)]
    pub listen: SocketAddr,
    /// The Lambda Invoke API's base URL (`cargo lambda watch`), e.g. http://127.0.0.1:9000.
    #[arg(long)]
    pub invoke_url: String,
    /// The function of the `$connect`, `$disconnect` and `$default` routes.
    #[arg(long, default_value = "ws")]
    pub function: String,
    /// The stage: clients connect to `/{stage}`, the SDK's endpoint is `http://HOST:PORT/{stage}`.
    #[arg(long, default_value = "local")]
    pub stage: String,
    /// `requestContext.apiId` of the events.
    #[arg(long, default_value = "local")]
    pub api_id: String,
    /// The JSON field of the route selection expression (`$request.body.{field}`).
    #[arg(long, default_value = "action")]
    pub route_selection_field: String,
    /// A MOCK route and its route response, `KEY=JSON` (repeatable), e.g. `ping={"type":"pong"}`.
    #[arg(long = "mock-route", value_parser = parse_mock_route)]
    pub mock_routes: Vec<(String, String)>,
    /// Close a connection after this long without a client message (AWS: 10 minutes).
    #[arg(long, default_value_t = 600)]
    pub idle_timeout_seconds: u64,
    /// Close a connection this long after it opened (AWS: 2 hours).
    #[arg(long, default_value_t = 7200)]
    pub max_connection_seconds: u64,
}

fn parse_mock_route(s: &str) -> Result<(String, String), String> {
    let (key, answer) = s
        .split_once('=')
        .ok_or_else(|| format!("--mock-route {s:?}: expected KEY=JSON"))?;
    let value: Value = serde_json::from_str(answer)
        .map_err(|e| format!("--mock-route {key}: the answer is not JSON: {e}"))?;
    Ok((key.to_string(), value.to_string()))
}

/// Counters of `GET /__wsgateway/stats`.
#[derive(Default)]
struct Stats {
    connects: AtomicU64,
    refused: AtomicU64,
    messages: AtomicU64,
    invocations: AtomicU64,
    posts: AtomicU64,
    gone: AtomicU64,
    throttled: AtomicU64,
    disconnects: AtomicU64,
}

/// What a connection's task is asked to send.
enum Out {
    Frame(Message),
    Close(u16, &'static str),
}

/// A live connection, as the management API sees it.
struct Conn {
    tx: mpsc::UnboundedSender<Out>,
    connected_at: DateTime<Utc>,
    source_ip: String,
    user_agent: Option<String>,
    last_active: Mutex<DateTime<Utc>>,
}

/// What every event of one connection repeats.
struct Ctx {
    id: String,
    connected_at: DateTime<Utc>,
    source_ip: String,
    user_agent: Option<String>,
    domain: String,
}

struct Gateway {
    config: Config,
    mocks: HashMap<String, String>,
    http: reqwest::Client,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    throttle: AtomicU64,
    stats: Stats,
    shutdown: watch::Receiver<bool>,
    /// Held by every connection task; shutdown waits until all are dropped.
    alive: mpsc::Sender<()>,
}

type Gw = Arc<Gateway>;

/// A running gateway.
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    alive: mpsc::Receiver<()>,
    server: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Closes every socket (1001), waits for their `$disconnect` (at most 10 s) and stops.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.alive.recv()).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
    }
}

/// Binds `config.listen` and serves in the background.
pub async fn start(config: Config) -> Result<Running, String> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("no local address: {e}"))?;
    let http = reqwest::Client::builder()
        .timeout(INVOKE_TIMEOUT)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let (stop, shutdown) = watch::channel(false);
    let (alive, alive_rx) = mpsc::channel(1);
    let stage = config.stage.clone();
    let gw: Gw = Arc::new(Gateway {
        mocks: config.mock_routes.iter().cloned().collect(),
        config,
        http,
        conns: Mutex::default(),
        throttle: AtomicU64::new(0),
        stats: Stats::default(),
        shutdown: shutdown.clone(),
        alive,
    });
    let app = Router::new()
        .route(&format!("/{stage}"), get(upgrade))
        .route(
            &format!("/{stage}/@connections/{{id}}"),
            post(post_to_connection)
                .get(get_connection)
                .delete(delete_connection),
        )
        .route("/__wsgateway/connections", get(list_connections))
        .route("/__wsgateway/throttle", post(set_throttle))
        .route("/__wsgateway/stats", get(stats))
        .fallback(|| async { aws_error(StatusCode::FORBIDDEN, "ForbiddenException", "Forbidden") })
        // Bodies over the quota get AWS's 413, not axum's.
        .layer(DefaultBodyLimit::max(16 * 1024 * 1024))
        .with_state(gw);
    let mut down = shutdown;
    let server = tokio::spawn(async move {
        let serve = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            let _ = down.wait_for(|stop| *stop).await;
        });
        if let Err(e) = serve.await {
            tracing::error!("server: {e}");
        }
    });
    Ok(Running {
        addr,
        stop,
        alive: alive_rx,
        server,
    })
}

/// 11 random bytes in base64: the shape of AWS's connection, request and message ids.
fn random_id() -> String {
    base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 11]>())
}

/// An error of the management API as smithy clients read it.
fn aws_error(status: StatusCode, kind: &'static str, message: &str) -> Response {
    let mut response = (status, Json(json!({ "message": message }))).into_response();
    let headers = response.headers_mut();
    headers.insert("x-amzn-ErrorType", HeaderValue::from_static(kind));
    if let Ok(id) = HeaderValue::from_str(&random_id()) {
        headers.insert("x-amzn-RequestId", id);
    }
    response
}

// ---- Events and invocations ----

/// An event with the `requestContext` AWS fills for every route.
fn event(
    gw: &Gateway, ctx: &Ctx, route_key: &str, event_type: &str,
) -> ApiGatewayWebsocketProxyRequest {
    let now = Utc::now();
    let request_id = random_id();
    let mut identity = ApiGatewayRequestIdentity::default();
    identity.source_ip = Some(ctx.source_ip.clone());
    let mut rc = ApiGatewayWebsocketProxyRequestContext::default();
    rc.route_key = Some(route_key.to_string());
    rc.event_type = Some(event_type.to_string());
    rc.extended_request_id = Some(request_id.clone());
    rc.request_time = Some(now.format("%d/%b/%Y:%H:%M:%S +0000").to_string());
    rc.message_direction = Some("IN".to_string());
    rc.stage = Some(gw.config.stage.clone());
    rc.connected_at = ctx.connected_at.timestamp_millis();
    rc.request_time_epoch = now.timestamp_millis();
    rc.identity = identity;
    rc.request_id = Some(request_id);
    rc.domain_name = Some(ctx.domain.clone());
    rc.connection_id = Some(ctx.id.clone());
    rc.apiid = Some(gw.config.api_id.clone());
    let mut event = ApiGatewayWebsocketProxyRequest::default();
    event.request_context = rc;
    event
}

/// The function's answer (`ApiGatewayProxyResponse`'s shape).
struct Answer {
    status: u16,
    headers: serde_json::Map<String, Value>,
    body: Option<String>,
}

/// Invokes the function with `event`; `Err` is a function error (its description).
async fn invoke(gw: &Gateway, event: &ApiGatewayWebsocketProxyRequest) -> Result<Answer, String> {
    gw.stats.invocations.fetch_add(1, Relaxed);
    let url = format!(
        "{}/2015-03-31/functions/{}/invocations",
        gw.config.invoke_url.trim_end_matches('/'),
        gw.config.function
    );
    let mut body =
        serde_json::to_value(event).map_err(|e| format!("serialising the event: {e}"))?;
    // The crate writes `queryStringParameters` as lists; AWS sends single values (the last one
    // of a repeated name), lists only in `multiValueQueryStringParameters`.
    if let Some(Value::Object(query)) = body.get_mut("queryStringParameters") {
        for value in query.values_mut() {
            if let Some(last) = value.as_array().and_then(|a| a.last()).cloned() {
                *value = last;
            }
        }
    }
    let response = gw
        .http
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("invoking {url}: {e}"))?;
    let status = response.status();
    let function_error = response.headers().contains_key("x-amz-function-error");
    let text = response
        .text()
        .await
        .map_err(|e| format!("reading the answer of {url}: {e}"))?;
    if !status.is_success() || function_error {
        return Err(format!("{url} answered {status}: {text}"));
    }
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format!("the function's answer is not JSON ({e}): {text}"))?;
    if value.get("errorType").is_some() || value.get("errorMessage").is_some() {
        return Err(format!("function error: {text}"));
    }
    let status = value
        .get("statusCode")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .ok_or_else(|| format!("the function's answer has no statusCode: {text}"))?;
    let headers = value
        .get("headers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let base64 = value.get("isBase64Encoded").and_then(Value::as_bool) == Some(true);
    let body = match value.get("body").and_then(Value::as_str) {
        Some(b) if base64 => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| format!("the function's body is not base64: {e}"))?;
            Some(String::from_utf8_lossy(&bytes).into_owned())
        }
        other => other.map(str::to_string),
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}

// ---- The WebSocket side ----

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `GET /{stage}`: `$connect`, then the handshake.
async fn upgrade(
    State(gw): State<Gw>, ConnectInfo(peer): ConnectInfo<SocketAddr>, mut req: Request,
) -> Response {
    let h = req.headers();
    let is_upgrade = header_str(h, "upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
        && header_str(h, "connection").is_some_and(|c| {
            c.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
        && header_str(h, "sec-websocket-version") == Some("13");
    let Some(key) = h.get("sec-websocket-key").filter(|_| is_upgrade).cloned() else {
        return (
            StatusCode::UPGRADE_REQUIRED,
            Json(json!({"message": "Expected a WebSocket upgrade (version 13)"})),
        )
            .into_response();
    };
    let ctx = Arc::new(Ctx {
        id: random_id(),
        connected_at: Utc::now(),
        source_ip: peer.ip().to_string(),
        user_agent: header_str(h, "user-agent").map(str::to_string),
        domain: header_str(h, "host").map_or_else(|| peer.to_string(), str::to_string),
    });
    let mut connect = event(&gw, &ctx, "$connect", "CONNECT");
    let mut headers = h.clone();
    let trace = format!("Root=1-{:08x}-{}", Utc::now().timestamp(), hex24());
    for (name, value) in [
        ("x-amzn-trace-id", trace),
        ("x-forwarded-for", ctx.source_ip.clone()),
        ("x-forwarded-port", gw_port(&ctx).to_string()),
        ("x-forwarded-proto", "http".to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    connect.headers = headers.clone();
    connect.multi_value_headers = headers;
    if let Some(query) = req.uri().query() {
        connect.query_string_parameters = query.parse().unwrap_or_default();
        connect.multi_value_query_string_parameters = query.parse().unwrap_or_default();
    }
    connect.request_context.identity.user_agent = ctx.user_agent.clone();
    let answer = match invoke(&gw, &connect).await {
        Ok(a) if (200..300).contains(&a.status) => a,
        Ok(a) => {
            gw.stats.refused.fetch_add(1, Relaxed);
            tracing::info!(connection = %ctx.id, status = a.status, "$connect refused");
            return StatusCode::from_u16(a.status)
                .unwrap_or(StatusCode::BAD_GATEWAY)
                .into_response();
        }
        Err(e) => {
            gw.stats.refused.fetch_add(1, Relaxed);
            tracing::warn!(connection = %ctx.id, "$connect failed: {e}");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    gw.stats.connects.fetch_add(1, Relaxed);
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let rh = response.headers_mut();
    rh.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    rh.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(accept) =
        HeaderValue::from_str(&tungstenite::handshake::derive_accept_key(key.as_bytes()))
    {
        rh.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    let protocol = answer
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("sec-websocket-protocol"))
        .and_then(|(_, v)| v.as_str())
        .and_then(|v| HeaderValue::from_str(v).ok());
    if let Some(p) = protocol {
        rh.insert(header::SEC_WEBSOCKET_PROTOCOL, p);
    }
    // The connection is live (postable, listed) before the client reads the 101, as on AWS
    // once `$connect` has accepted; posts made before the upgrade completes wait in its queue.
    let (tx, rx) = mpsc::unbounded_channel();
    let conn = Arc::new(Conn {
        tx,
        connected_at: ctx.connected_at,
        source_ip: ctx.source_ip.clone(),
        user_agent: ctx.user_agent.clone(),
        last_active: Mutex::new(ctx.connected_at),
    });
    lock(&gw.conns).insert(ctx.id.clone(), conn.clone());
    let alive = gw.alive.clone();
    tokio::spawn(async move {
        let _alive = alive;
        match on_upgrade.await {
            Ok(upgraded) => {
                let config = WebSocketConfig::default()
                    .max_frame_size(Some(MAX_FRAME_BYTES))
                    .max_message_size(Some(MAX_MESSAGE_BYTES));
                let ws = WebSocketStream::from_raw_socket(
                    TokioIo::new(upgraded),
                    Role::Server,
                    Some(config),
                )
                .await;
                let (code, reason) = run(&gw, &ctx, ws, &conn, rx).await;
                disconnect(&gw, &ctx, code, &reason).await;
            }
            Err(e) => {
                lock(&gw.conns).remove(&ctx.id);
                tracing::warn!(connection = %ctx.id, "upgrade failed: {e}");
                disconnect(&gw, &ctx, 1006, ABNORMAL).await;
            }
        }
    });
    response
}

/// The port in a `Host`-like `domain`, else 80.
fn gw_port(ctx: &Ctx) -> u16 {
    ctx.domain
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(80)
}

fn hex24() -> String {
    rand::random::<[u8; 12]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

const GOING_AWAY: &str = "Going away";
const ABNORMAL: &str = "Connection was closed abnormally";

/// How a connection ended: closed or lost by the peer (nothing left to send), or closed by
/// the gateway with a code (and, after a refused frame, its rest read away).
enum End {
    Peer(u16, String),
    Gateway(u16, &'static str, bool),
}

/// Serves one accepted connection; returns the close code and reason for `$disconnect`.
/// `conn` is already registered; `rx` receives what is posted to it.
async fn run(
    gw: &Gw, ctx: &Arc<Ctx>, mut ws: Ws, conn: &Conn, mut rx: mpsc::UnboundedReceiver<Out>,
) -> (u16, String) {
    let tx = conn.tx.clone();
    tracing::info!(connection = %ctx.id, "connected");
    // Messages are routed one after another by a worker, while this task keeps the socket.
    let (work, work_rx) = mpsc::unbounded_channel::<String>();
    let worker = tokio::spawn(route_messages(gw.clone(), ctx.clone(), work_rx, tx));
    let idle = Duration::from_secs(gw.config.idle_timeout_seconds);
    let mut idle_at = Instant::now() + idle;
    let end_at = Instant::now() + Duration::from_secs(gw.config.max_connection_seconds);
    let mut shutdown = gw.shutdown.clone();
    let end = loop {
        tokio::select! {
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    gw.stats.messages.fetch_add(1, Relaxed);
                    idle_at = Instant::now() + idle;
                    *lock(&conn.last_active) = Utc::now();
                    let _ = work.send(text.to_string());
                }
                Some(Ok(Message::Binary(_))) => {
                    break End::Gateway(1003, "Binary frames are not supported", false);
                }
                // tungstenite answers pings itself; control frames do not count as activity.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(frame))) => {
                    // tungstenite has queued the reply; polling on sends it.
                    let _ = tokio::time::timeout(Duration::from_secs(2), ws.next()).await;
                    break match frame {
                        Some(f) => End::Peer(u16::from(f.code), f.reason.to_string()),
                        None => End::Peer(1005, "Client-side close frame status not set".into()),
                    };
                }
                Some(Err(tungstenite::Error::Capacity(e))) => {
                    tracing::info!(connection = %ctx.id, "closing: {e}");
                    break End::Gateway(1009, "Message too big", true);
                }
                Some(Err(e)) => {
                    tracing::info!(connection = %ctx.id, "connection lost: {e}");
                    break End::Peer(1006, ABNORMAL.into());
                }
                None => break End::Peer(1006, ABNORMAL.into()),
            },
            Some(out) = rx.recv() => match out {
                Out::Frame(message) => {
                    // Traffic either way keeps a connection from idling out.
                    idle_at = Instant::now() + idle;
                    if let Err(e) = send_fragmented(&mut ws, message).await {
                        tracing::info!(connection = %ctx.id, "send failed: {e}");
                        break End::Peer(1006, ABNORMAL.into());
                    }
                }
                Out::Close(code, reason) => break End::Gateway(code, reason, false),
            },
            _ = tokio::time::sleep_until(idle_at) => break End::Gateway(1001, GOING_AWAY, false),
            _ = tokio::time::sleep_until(end_at) => break End::Gateway(1001, GOING_AWAY, false),
            () = stopped(&mut shutdown) => break End::Gateway(1001, GOING_AWAY, false),
        }
    };
    // No more posts to this connection; messages still queued are routed (the peer closed) or
    // dropped (the gateway closes).
    lock(&gw.conns).remove(&ctx.id);
    drop(work);
    let (code, reason, drain_raw) = match end {
        End::Peer(code, reason) => {
            let _ = worker.await;
            return (code, reason);
        }
        End::Gateway(code, reason, drain_raw) => {
            worker.abort();
            (code, reason, drain_raw)
        }
    };
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.into(),
    };
    let _ = ws.close(Some(frame)).await;
    if drain_raw {
        // The rest of the refused frame is still arriving: read it away (a "lingering close")
        // so the client reads the close frame instead of a reset.
        let raw = ws.get_mut();
        let mut buf = vec![0u8; 16 * 1024];
        let deadline = Instant::now() + Duration::from_secs(2);
        while let Ok(Ok(n)) = tokio::time::timeout_at(
            deadline.min(Instant::now() + Duration::from_millis(300)),
            raw.read(&mut buf),
        )
        .await
        {
            if n == 0 {
                break;
            }
        }
    } else {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(Ok(_)) = ws.next().await {}
        })
        .await;
    }
    (code, reason.to_string())
}

/// Resolves when the gateway shuts down.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Sends `message`, a text or binary over [`MAX_FRAME_BYTES`] as fragments of that size.
async fn send_fragmented(ws: &mut Ws, message: Message) -> Result<(), tungstenite::Error> {
    let (first, payload) = match &message {
        Message::Text(t) if t.len() > MAX_FRAME_BYTES => {
            (Data::Text, Bytes::copy_from_slice(t.as_bytes()))
        }
        Message::Binary(b) if b.len() > MAX_FRAME_BYTES => (Data::Binary, b.clone()),
        _ => return ws.send(message).await,
    };
    let chunks: Vec<Bytes> = payload
        .chunks(MAX_FRAME_BYTES)
        .map(Bytes::copy_from_slice)
        .collect();
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let opcode = OpCode::Data(if i == 0 { first } else { Data::Continue });
        ws.feed(Message::Frame(
            tungstenite::protocol::frame::Frame::message(chunk, opcode, i == last),
        ))
        .await?;
    }
    ws.flush().await
}

/// Routes one connection's messages in order: a mock route, or `$default`.
async fn route_messages(
    gw: Gw, ctx: Arc<Ctx>, mut work: mpsc::UnboundedReceiver<String>,
    tx: mpsc::UnboundedSender<Out>,
) {
    while let Some(text) = work.recv().await {
        let route = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
            v.get(&gw.config.route_selection_field)
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        if let Some(answer) = route.and_then(|r| gw.mocks.get(&r)) {
            let _ = tx.send(Out::Frame(Message::text(answer.clone())));
            continue;
        }
        let mut message = event(&gw, &ctx, "$default", "MESSAGE");
        message.request_context.message_id = Some(random_id());
        message.body = Some(text);
        message.is_base64_encoded = false;
        match invoke(&gw, &message).await {
            Ok(answer) => {
                if let Some(body) = answer
                    .body
                    .filter(|b| !b.is_empty() && (200..300).contains(&answer.status))
                {
                    let _ = tx.send(Out::Frame(Message::text(body)));
                }
            }
            Err(e) => {
                tracing::warn!(connection = %ctx.id, "$default failed: {e}");
                let error = json!({
                    "message": "Internal server error",
                    "connectionId": ctx.id,
                    "requestId": message.request_context.request_id,
                });
                let _ = tx.send(Out::Frame(Message::text(error.to_string())));
            }
        }
    }
}

/// Invokes `$disconnect` (best effort).
async fn disconnect(gw: &Gateway, ctx: &Ctx, code: u16, reason: &str) {
    gw.stats.disconnects.fetch_add(1, Relaxed);
    tracing::info!(connection = %ctx.id, code, reason, "disconnected");
    let mut event = event(gw, ctx, "$disconnect", "DISCONNECT");
    event.request_context.disconnect_status_code = Some(i64::from(code));
    event.request_context.disconnect_reason = Some(reason.to_string());
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("host", ctx.domain.as_str()),
        ("x-api-key", ""),
        ("x-forwarded-for", ctx.source_ip.as_str()),
        ("x-restapi", ""),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    event.headers = headers.clone();
    event.multi_value_headers = headers;
    if let Err(e) = invoke(gw, &event).await {
        tracing::warn!(connection = %ctx.id, "$disconnect failed: {e}");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---- The management API ----

fn gone(gw: &Gateway, id: &str) -> Response {
    gw.stats.gone.fetch_add(1, Relaxed);
    aws_error(
        StatusCode::GONE,
        "GoneException",
        &format!("The connection {id} is gone"),
    )
}

fn find(gw: &Gateway, id: &str) -> Option<Arc<Conn>> {
    lock(&gw.conns).get(id).cloned()
}

async fn post_to_connection(State(gw): State<Gw>, Path(id): Path<String>, body: Bytes) -> Response {
    let throttled = gw
        .throttle
        .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
        .is_ok();
    if throttled {
        gw.stats.throttled.fetch_add(1, Relaxed);
        return aws_error(
            StatusCode::TOO_MANY_REQUESTS,
            "LimitExceededException",
            "Rate exceeded",
        );
    }
    if body.len() > MAX_MESSAGE_BYTES {
        return aws_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLargeException",
            &format!(
                "Message too long: {} bytes, at most {MAX_MESSAGE_BYTES}",
                body.len()
            ),
        );
    }
    let Some(conn) = find(&gw, &id) else {
        return gone(&gw, &id);
    };
    let frame = match String::from_utf8(body.to_vec()) {
        Ok(text) => Message::text(text),
        Err(_) => Message::Binary(body),
    };
    if conn.tx.send(Out::Frame(frame)).is_err() {
        return gone(&gw, &id);
    }
    gw.stats.posts.fetch_add(1, Relaxed);
    StatusCode::OK.into_response()
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

async fn get_connection(State(gw): State<Gw>, Path(id): Path<String>) -> Response {
    let Some(conn) = find(&gw, &id) else {
        return gone(&gw, &id);
    };
    let last_active = *lock(&conn.last_active);
    Json(json!({
        "connectedAt": iso(conn.connected_at),
        "identity": {"sourceIp": conn.source_ip, "userAgent": conn.user_agent},
        "lastActiveAt": iso(last_active),
    }))
    .into_response()
}

async fn delete_connection(State(gw): State<Gw>, Path(id): Path<String>) -> Response {
    let Some(conn) = lock(&gw.conns).remove(&id) else {
        return gone(&gw, &id);
    };
    let _ = conn.tx.send(Out::Close(1001, GOING_AWAY));
    StatusCode::NO_CONTENT.into_response()
}

// ---- Test controls ----

async fn list_connections(State(gw): State<Gw>) -> Json<Vec<String>> {
    let mut ids: Vec<String> = lock(&gw.conns).keys().cloned().collect();
    ids.sort();
    Json(ids)
}

async fn set_throttle(State(gw): State<Gw>, body: Bytes) -> Response {
    match serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("posts").and_then(Value::as_u64))
    {
        Some(n) => {
            gw.throttle.store(n, Relaxed);
            Json(json!({ "posts": n })).into_response()
        }
        None => (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "expected {\"posts\": N}"})),
        )
            .into_response(),
    }
}

async fn stats(State(gw): State<Gw>) -> Json<Value> {
    let s = &gw.stats;
    Json(json!({
        "connects": s.connects.load(Relaxed),
        "refused": s.refused.load(Relaxed),
        "messages": s.messages.load(Relaxed),
        "invocations": s.invocations.load(Relaxed),
        "posts": s.posts.load(Relaxed),
        "gone": s.gone.load(Relaxed),
        "throttled": s.throttled.load(Relaxed),
        "disconnects": s.disconnects.load(Relaxed),
        "live": lock(&gw.conns).len(),
    }))
}
