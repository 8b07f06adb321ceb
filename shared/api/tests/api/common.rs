//! What every test of the in-process API suite shares: requests and responses (`Req`, `Resp`),
//! a router over an in-memory SQLite store and a manual clock (`TestApp`), one created address
//! (`Addr`) and small assertions on ids, times and pages.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use agentaddress_api::{self as api, ApiConfig, AppState};
use agentaddress_core::domain::{Clock, Limits, ManualClock};
use agentaddress_sqlite::SqliteStore;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

const JSON_CT: &str = "application/json; charset=utf-8";
pub const CREATE: &str = "/api/v1/addresses";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static NEXT_IP: AtomicU32 = AtomicU32::new(1);

/// A client IP no other request of this test binary used, so creations never share a bucket.
pub fn fresh_ip() -> String {
    let n = NEXT_IP.fetch_add(1, Ordering::Relaxed);
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

/// A request under construction.
pub struct Req {
    method: Method,
    uri: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    ip: Option<String>,
}

pub fn req(method: Method, uri: impl Into<String>) -> Req {
    Req {
        method,
        uri: uri.into(),
        headers: Vec::new(),
        body: Vec::new(),
        ip: None,
    }
}

pub fn get(uri: impl Into<String>) -> Req {
    req(Method::GET, uri)
}

pub fn post(uri: impl Into<String>) -> Req {
    req(Method::POST, uri)
}

pub fn put(uri: impl Into<String>) -> Req {
    req(Method::PUT, uri)
}

pub fn delete(uri: impl Into<String>) -> Req {
    req(Method::DELETE, uri)
}

impl Req {
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", format!("Bearer {token}"))
    }

    pub fn content_type(self, ct: &str) -> Self {
        self.header("content-type", ct)
    }

    /// A JSON body with `Content-Type: application/json`.
    pub fn json(self, v: &Value) -> Self {
        self.content_type("application/json").raw(v.to_string())
    }

    /// A body as given, without touching the headers.
    pub fn raw(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    pub fn ip(mut self, ip: &str) -> Self {
        self.ip = Some(ip.to_owned());
        self
    }

    pub fn build(self) -> Request<Body> {
        let mut b = Request::builder().method(self.method).uri(self.uri);
        for (name, value) in self.headers {
            let value = HeaderValue::from_bytes(&value).expect("valid header value");
            b = b.header(name.as_str(), value);
        }
        let mut r = b.body(Body::from(self.body)).expect("build request");
        if let Some(ip) = self.ip {
            let addr = SocketAddr::new(ip.parse().expect("IP address"), 40_000);
            r.extensions_mut().insert(ConnectInfo(addr));
        }
        r
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[track_caller]
    pub fn assert_json_content_type(&self) {
        assert_eq!(
            self.header("content-type"),
            Some(JSON_CT),
            "JSON answers carry `{JSON_CT}`; body: {}",
            self.text
        );
    }

    /// Asserts a JSON success answer with `status` and returns its body.
    #[track_caller]
    pub fn ok(&self, status: StatusCode) -> &Value {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        self.assert_json_content_type();
        &self.json
    }

    /// Asserts a JSON error answer with `status` and `code` and returns its `error` object.
    #[track_caller]
    pub fn err(&self, status: StatusCode, code: &str) -> &Value {
        assert_eq!(
            self.status, status,
            "unexpected status; body: {}",
            self.text
        );
        self.assert_json_content_type();
        assert_eq!(
            self.json["error"]["code"], code,
            "unexpected error code; body: {}",
            self.text
        );
        let message = self.json["error"]["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "error without message: {}", self.text);
        &self.json["error"]
    }

    /// Asserts a 429 with matching `Retry-After` and `retry_after_seconds` (1..=60).
    #[track_caller]
    pub fn assert_rate_limited(&self) -> u64 {
        let error = self.err(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
        let in_body = error["retry_after_seconds"]
            .as_u64()
            .expect("retry_after_seconds is a number");
        let in_header: u64 = self
            .header("retry-after")
            .expect("429 carries Retry-After")
            .parse()
            .expect("Retry-After is a number of seconds");
        assert_eq!(in_body, in_header);
        assert!((1..=60).contains(&in_body), "retry after {in_body}s");
        in_body
    }
}

pub async fn send_to(app: &Router, r: Req) -> Resp {
    let response = app
        .clone()
        .oneshot(r.build())
        .await
        .expect("the router never fails");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("read response body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Resp {
        status,
        headers,
        text,
        json,
    }
}

/// One created address, with paths relative to the router.
#[derive(Debug, Clone)]
pub struct Addr {
    pub id: String,
    pub token: String,
    pub inbox_secret: String,
    /// `/api/v1/inbox/{id}/{secret}`
    pub inbox: String,
    /// `/api/v1/addresses/{id}`
    pub root: String,
}

impl Addr {
    pub fn events(&self) -> String {
        format!("{}/events", self.root)
    }

    pub fn state(&self) -> String {
        format!("{}/state", self.root)
    }

    pub fn key(&self, key: &str) -> String {
        format!("{}/state/{key}", self.root)
    }

    pub fn event(&self, event_id: &str) -> String {
        format!("{}/events/{event_id}", self.root)
    }

    pub fn ack(&self, event_id: &str) -> String {
        format!("{}/events/{event_id}/ack", self.root)
    }
}

fn path_of(url: &str) -> String {
    let at = url.find("/api/v1/").expect("URL holds /api/v1/");
    url[at..].to_owned()
}

pub struct TestApp {
    pub app: Router,
    pub clock: Arc<ManualClock>,
    pub store: Arc<SqliteStore>,
    pub limits: Limits,
}

impl TestApp {
    pub fn new() -> Self {
        Self::with_limits(|_| {})
    }

    /// The default limits, changed by `tweak`.
    pub fn with_limits(tweak: impl FnOnce(&mut Limits)) -> Self {
        let mut limits = Limits::default();
        tweak(&mut limits);
        Self::build(limits, None)
    }

    /// The default limits, wake hooks called by the real sender (private receivers allowed or
    /// not, as `agentaddress serve --allow-private-hooks`).
    pub fn with_hook_sender(allow_private: bool) -> Self {
        let sender = agentaddress_outbound::wake::WakeSender::new(allow_private).expect("sender");
        Self::build(Limits::default(), Some(Arc::new(sender)))
    }

    /// The default limits, with at most `cap` waits at once (docs/API.md §6, "Waiting polls").
    pub fn with_waiting_cap(cap: u64) -> Self {
        Self::build_with(Limits::default(), None, cap)
    }

    fn build(
        limits: Limits, caller: Option<Arc<dyn agentaddress_core::relay::HookCaller>>,
    ) -> Self {
        Self::build_with(limits, caller, 0)
    }

    fn build_with(
        limits: Limits, caller: Option<Arc<dyn agentaddress_core::relay::HookCaller>>,
        max_waiting_polls: u64,
    ) -> Self {
        let store = Arc::new(SqliteStore::open_in_memory().expect("open in-memory SQLite"));
        let clock = Arc::new(ManualClock::starting_now());
        let state = AppState::new(
            store.clone(),
            ApiConfig {
                public_url: None,
                email_domain: "inbox.test".into(),
                limits: limits.clone(),
                email_ingest_secret_hash: None,
                poll_checks: Default::default(),
                max_waiting_polls,
            },
        )
        .with_clock(clock.clone())
        .with_hook_caller(caller);
        Self {
            app: api::router(state),
            clock,
            store,
            limits,
        }
    }

    pub async fn send(&self, r: Req) -> Resp {
        send_to(&self.app, r).await
    }

    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    pub fn advance(&self, secs: i64) {
        self.clock.advance_secs(secs);
    }

    /// Creates an address with an empty body (from a fresh client IP).
    pub async fn create(&self) -> Addr {
        self.create_with(&json!({})).await.1
    }

    /// Creates an address with `body`; returns the 201 body and the address.
    pub async fn create_with(&self, body: &Value) -> (Value, Addr) {
        let r = self.send(post(CREATE).ip(&fresh_ip()).json(body)).await;
        let created = r.ok(StatusCode::CREATED).clone();
        let addr = addr_of(&created);
        (created, addr)
    }

    pub async fn deliver(&self, a: &Addr, body: &Value) -> Resp {
        self.send(post(&a.inbox).json(body)).await
    }

    /// Delivers a JSON body, expects 202, returns (event id, sequence).
    pub async fn deliver_ok(&self, a: &Addr, body: &Value) -> (String, u64) {
        let r = self.deliver(a, body).await;
        let b = r.ok(StatusCode::ACCEPTED);
        assert_eq!(b["duplicate"], false);
        (
            b["event"]["id"].as_str().expect("event id").to_owned(),
            b["event"]["sequence"].as_u64().expect("sequence"),
        )
    }

    /// `GET {root}/events?{query}`, expecting 200.
    pub async fn events(&self, a: &Addr, query: &str) -> Value {
        let r = self
            .send(get(format!("{}?{query}", a.events())).bearer(&a.token))
            .await;
        r.ok(StatusCode::OK).clone()
    }

    pub async fn put_state(&self, a: &Addr, key: &str, body: &Value) -> Resp {
        self.send(put(a.key(key)).bearer(&a.token).json(body)).await
    }

    pub async fn inspect(&self, a: &Addr) -> Value {
        let r = self.send(get(&a.root).bearer(&a.token)).await;
        r.ok(StatusCode::OK).clone()
    }
}

pub fn addr_of(created: &Value) -> Addr {
    let id = created["address"]["id"].as_str().expect("address.id");
    let inbox_url = created["endpoints"]["inbox_url"]
        .as_str()
        .expect("endpoints.inbox_url");
    let inbox = path_of(inbox_url);
    let inbox_secret = inbox
        .rsplit('/')
        .next()
        .expect("inbox secret segment")
        .to_owned();
    Addr {
        id: id.to_owned(),
        token: created["credentials"]["read_token"]
            .as_str()
            .expect("credentials.read_token")
            .to_owned(),
        inbox_secret,
        inbox,
        root: format!("/api/v1/addresses/{id}"),
    }
}

pub fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// RFC 3339 UTC with milliseconds: `2026-11-30T11:04:10.123Z`.
#[track_caller]
pub fn assert_time(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("{v} is not a time"));
    let b = s.as_bytes();
    assert_eq!(b.len(), 24, "{s}");
    assert_eq!(
        (b[4], b[7], b[10], b[13], b[16]),
        (b'-', b'-', b'T', b':', b':')
    );
    assert_eq!((b[19], b[23]), (b'.', b'Z'), "{s}");
}

pub fn seqs(page: &Value) -> Vec<u64> {
    page["events"]
        .as_array()
        .expect("events array")
        .iter()
        .map(|e| e["sequence"].as_u64().expect("sequence"))
        .collect()
}

/// Every bearer route of the address, as (method, path, body).
pub fn bearer_routes(a: &Addr) -> Vec<(Method, String, Option<Value>)> {
    let evt = "evt_AAAAAAAAAAAAAAAA1";
    vec![
        (Method::GET, a.root.clone(), None),
        (Method::DELETE, a.root.clone(), None),
        (Method::GET, a.events(), None),
        (Method::GET, a.event(evt), None),
        (Method::POST, a.ack(evt), None),
        (Method::GET, a.state(), None),
        (Method::GET, a.key("k"), None),
        (Method::PUT, a.key("k"), Some(json!({"value": 1}))),
        (Method::DELETE, a.key("k"), None),
    ]
}

pub fn route_req(method: &Method, path: &str, body: &Option<Value>) -> Req {
    let r = req(method.clone(), path);
    match body {
        Some(b) => r.json(b),
        None => r,
    }
}
