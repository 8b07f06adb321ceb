//! In-process tests of the HTTP API (docs/API.md): the axum router is driven with
//! `tower::ServiceExt::oneshot` (no server, no sockets) over an in-memory SQLite store and a
//! manual clock, so expiry, retention and rate-limit windows are reached without waiting.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentaddress_api::{self as api, ApiConfig, AppState};
use agentaddress_core::domain::time::format_rfc3339;
use agentaddress_core::domain::{Clock, Limits, ManualClock};
use agentaddress_core::store::Store;
use agentaddress_sqlite::SqliteStore;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

const JSON_CT: &str = "application/json; charset=utf-8";
const CREATE: &str = "/api/v1/addresses";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static NEXT_IP: AtomicU32 = AtomicU32::new(1);

/// A client IP no other request of this test binary used, so creations never share a bucket.
fn fresh_ip() -> String {
    let n = NEXT_IP.fetch_add(1, Ordering::Relaxed);
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

/// A request under construction.
struct Req {
    method: Method,
    uri: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    ip: Option<String>,
}

fn req(method: Method, uri: impl Into<String>) -> Req {
    Req {
        method,
        uri: uri.into(),
        headers: Vec::new(),
        body: Vec::new(),
        ip: None,
    }
}

fn get(uri: impl Into<String>) -> Req {
    req(Method::GET, uri)
}

fn post(uri: impl Into<String>) -> Req {
    req(Method::POST, uri)
}

fn put(uri: impl Into<String>) -> Req {
    req(Method::PUT, uri)
}

fn delete(uri: impl Into<String>) -> Req {
    req(Method::DELETE, uri)
}

impl Req {
    fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    fn bearer(self, token: &str) -> Self {
        self.header("authorization", format!("Bearer {token}"))
    }

    fn content_type(self, ct: &str) -> Self {
        self.header("content-type", ct)
    }

    /// A JSON body with `Content-Type: application/json`.
    fn json(self, v: &Value) -> Self {
        self.content_type("application/json").raw(v.to_string())
    }

    /// A body as given, without touching the headers.
    fn raw(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    fn ip(mut self, ip: &str) -> Self {
        self.ip = Some(ip.to_owned());
        self
    }

    fn build(self) -> Request<Body> {
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
struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
    json: Value,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[track_caller]
    fn assert_json_content_type(&self) {
        assert_eq!(
            self.header("content-type"),
            Some(JSON_CT),
            "JSON answers carry `{JSON_CT}`; body: {}",
            self.text
        );
    }

    /// Asserts a JSON success answer with `status` and returns its body.
    #[track_caller]
    fn ok(&self, status: StatusCode) -> &Value {
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
    fn err(&self, status: StatusCode, code: &str) -> &Value {
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
    fn assert_rate_limited(&self) -> u64 {
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

async fn send_to(app: &Router, r: Req) -> Resp {
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
struct Addr {
    id: String,
    token: String,
    inbox_secret: String,
    /// `/api/v1/inbox/{id}/{secret}`
    inbox: String,
    /// `/api/v1/addresses/{id}`
    root: String,
}

impl Addr {
    fn events(&self) -> String {
        format!("{}/events", self.root)
    }

    fn state(&self) -> String {
        format!("{}/state", self.root)
    }

    fn key(&self, key: &str) -> String {
        format!("{}/state/{key}", self.root)
    }

    fn event(&self, event_id: &str) -> String {
        format!("{}/events/{event_id}", self.root)
    }

    fn ack(&self, event_id: &str) -> String {
        format!("{}/events/{event_id}/ack", self.root)
    }
}

fn path_of(url: &str) -> String {
    let at = url.find("/api/v1/").expect("URL holds /api/v1/");
    url[at..].to_owned()
}

struct TestApp {
    app: Router,
    clock: Arc<ManualClock>,
    store: Arc<SqliteStore>,
    limits: Limits,
}

impl TestApp {
    fn new() -> Self {
        Self::with_limits(|_| {})
    }

    /// The default limits, changed by `tweak`.
    fn with_limits(tweak: impl FnOnce(&mut Limits)) -> Self {
        let mut limits = Limits::default();
        tweak(&mut limits);
        let store = Arc::new(SqliteStore::open_in_memory().expect("open in-memory SQLite"));
        let clock = Arc::new(ManualClock::starting_now());
        let state = AppState::new(
            store.clone(),
            ApiConfig {
                public_url: None,
                email_domain: "inbox.test".into(),
                limits: limits.clone(),
            },
        )
        .with_clock(clock.clone());
        Self {
            app: api::router(state),
            clock,
            store,
            limits,
        }
    }

    async fn send(&self, r: Req) -> Resp {
        send_to(&self.app, r).await
    }

    fn now(&self) -> i64 {
        self.clock.now()
    }

    fn advance(&self, secs: i64) {
        self.clock.advance_secs(secs);
    }

    /// Creates an address with an empty body (from a fresh client IP).
    async fn create(&self) -> Addr {
        self.create_with(&json!({})).await.1
    }

    /// Creates an address with `body`; returns the 201 body and the address.
    async fn create_with(&self, body: &Value) -> (Value, Addr) {
        let r = self.send(post(CREATE).ip(&fresh_ip()).json(body)).await;
        let created = r.ok(StatusCode::CREATED).clone();
        let addr = addr_of(&created);
        (created, addr)
    }

    async fn deliver(&self, a: &Addr, body: &Value) -> Resp {
        self.send(post(&a.inbox).json(body)).await
    }

    /// Delivers a JSON body, expects 202, returns (event id, sequence).
    async fn deliver_ok(&self, a: &Addr, body: &Value) -> (String, u64) {
        let r = self.deliver(a, body).await;
        let b = r.ok(StatusCode::ACCEPTED);
        assert_eq!(b["duplicate"], false);
        (
            b["event"]["id"].as_str().expect("event id").to_owned(),
            b["event"]["sequence"].as_u64().expect("sequence"),
        )
    }

    /// `GET {root}/events?{query}`, expecting 200.
    async fn events(&self, a: &Addr, query: &str) -> Value {
        let r = self
            .send(get(format!("{}?{query}", a.events())).bearer(&a.token))
            .await;
        r.ok(StatusCode::OK).clone()
    }

    async fn put_state(&self, a: &Addr, key: &str, body: &Value) -> Resp {
        self.send(put(a.key(key)).bearer(&a.token).json(body)).await
    }

    async fn inspect(&self, a: &Addr) -> Value {
        let r = self.send(get(&a.root).bearer(&a.token)).await;
        r.ok(StatusCode::OK).clone()
    }
}

fn addr_of(created: &Value) -> Addr {
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

fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// RFC 3339 UTC with milliseconds: `2026-11-30T11:04:10.123Z`.
#[track_caller]
fn assert_time(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("{v} is not a time"));
    let b = s.as_bytes();
    assert_eq!(b.len(), 24, "{s}");
    assert_eq!(
        (b[4], b[7], b[10], b[13], b[16]),
        (b'-', b'-', b'T', b':', b':')
    );
    assert_eq!((b[19], b[23]), (b'.', b'Z'), "{s}");
}

fn seqs(page: &Value) -> Vec<u64> {
    page["events"]
        .as_array()
        .expect("events array")
        .iter()
        .map(|e| e["sequence"].as_u64().expect("sequence"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// §1 Create
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn create_with_empty_body_returns_201_with_defaults() {
    let t = TestApp::new();
    let r = t
        .send(post(CREATE).header("host", "example.test").ip(&fresh_ip()))
        .await;
    let b = r.ok(StatusCode::CREATED);
    let id = b["address"]["id"].as_str().expect("id");
    assert!(id.starts_with("addr_") && is_id(id), "{id}");
    assert_eq!(b["address"]["name"], Value::Null);
    assert_eq!(b["address"]["task_id"], Value::Null);
    assert_eq!(b["address"]["email"], format!("{id}@inbox.test"));
    assert_eq!(b["address"]["created_at"], format_rfc3339(t.now()));
    assert_time(&b["address"]["created_at"]);
    assert!(b["address"].get("expires_at").is_some());
    assert_eq!(b["address"]["expires_at"], Value::Null);

    let token = b["credentials"]["read_token"].as_str().expect("token");
    assert!(token.starts_with("aat_"), "{token}");
    // At least 128 bits: 22 base64 characters after the prefix.
    assert!(token.len() >= 4 + 22, "{token}");

    let inbox_url = b["endpoints"]["inbox_url"].as_str().expect("inbox_url");
    let prefix = format!("http://example.test/api/v1/inbox/{id}/");
    let secret = inbox_url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{inbox_url} starts with {prefix}"));
    assert!(is_id(secret) && secret.len() >= 22, "{secret}");
    assert_ne!(secret, token);
    assert_eq!(
        b["endpoints"]["events_url"],
        format!("http://example.test/api/v1/addresses/{id}/events")
    );
    assert_eq!(
        b["endpoints"]["state_url"],
        format!("http://example.test/api/v1/addresses/{id}/state")
    );

    // A second address gets its own id and secrets.
    let other = t.create().await;
    assert_ne!(other.id, id);
    assert_ne!(other.token, token);
    assert_ne!(other.inbox_secret, secret);
}

#[tokio::test]
async fn create_with_fields_echoes_them_and_sets_expiry() {
    let t = TestApp::new();
    let body = json!({"name": "deploy watcher", "task_id": "task-42", "expires_in_seconds": 3600});
    let r = t
        .send(
            post(CREATE)
                .ip(&fresh_ip())
                .content_type("application/json; charset=utf-8")
                .raw(body.to_string()),
        )
        .await;
    let b = r.ok(StatusCode::CREATED).clone();
    assert_eq!(b["address"]["name"], "deploy watcher");
    assert_eq!(b["address"]["task_id"], "task-42");
    assert_eq!(
        b["address"]["expires_at"],
        format_rfc3339(t.now() + 3_600_000)
    );
    let a = addr_of(&b);
    let details = t.inspect(&a).await;
    assert_eq!(details["address"], b["address"]);
}

#[tokio::test]
async fn create_uses_forwarded_proto_for_endpoint_urls() {
    let t = TestApp::new();
    let r = t
        .send(
            post(CREATE)
                .ip(&fresh_ip())
                .header("host", "api.example.test:8443")
                .header("x-forwarded-proto", "https"),
        )
        .await;
    let b = r.ok(StatusCode::CREATED);
    let id = b["address"]["id"].as_str().expect("id");
    let inbox_url = b["endpoints"]["inbox_url"].as_str().expect("inbox_url");
    assert!(
        inbox_url.starts_with(&format!("https://api.example.test:8443/api/v1/inbox/{id}/")),
        "{inbox_url}"
    );
    assert_eq!(
        b["endpoints"]["events_url"],
        format!("https://api.example.test:8443/api/v1/addresses/{id}/events")
    );
    assert_eq!(
        b["endpoints"]["state_url"],
        format!("https://api.example.test:8443/api/v1/addresses/{id}/state")
    );
}

#[tokio::test]
async fn create_treats_null_fields_as_absent_and_ignores_unknown_fields() {
    let t = TestApp::new();
    let (b, _) = t
        .create_with(
            &json!({"name": null, "task_id": null, "expires_in_seconds": null, "colour": "blue"}),
        )
        .await;
    assert_eq!(b["address"]["name"], Value::Null);
    assert_eq!(b["address"]["task_id"], Value::Null);
    assert_eq!(b["address"]["expires_at"], Value::Null);
    assert!(b["address"].get("colour").is_none());

    // Whitespace only is an empty body too.
    let r = t.send(post(CREATE).ip(&fresh_ip()).raw("  \n")).await;
    r.ok(StatusCode::CREATED);
    // An empty body declared as JSON is fine as well.
    let r = t
        .send(
            post(CREATE)
                .ip(&fresh_ip())
                .content_type("application/json"),
        )
        .await;
    r.ok(StatusCode::CREATED);
    // `{}` without a content type.
    let r = t.send(post(CREATE).ip(&fresh_ip()).raw("{}")).await;
    r.ok(StatusCode::CREATED);
}

#[tokio::test]
async fn create_accepts_boundary_values() {
    let t = TestApp::new();
    for secs in [60u64, 31_536_000] {
        let (b, _) = t.create_with(&json!({"expires_in_seconds": secs})).await;
        assert_eq!(
            b["address"]["expires_at"],
            format_rfc3339(t.now() + secs as i64 * 1000)
        );
    }
    let long = "n".repeat(200);
    let (b, _) = t.create_with(&json!({"name": long, "task_id": long})).await;
    assert_eq!(b["address"]["name"], long.as_str());
    // 200 characters, counted as characters (400 bytes of UTF-8).
    let wide = "é".repeat(200);
    let (b, _) = t.create_with(&json!({"name": wide})).await;
    assert_eq!(b["address"]["name"], wide.as_str());
}

#[tokio::test]
async fn create_rejects_bad_bodies_with_400() {
    let t = TestApp::with_limits(|l| l.creations_per_minute = 10_000);
    let long = "x".repeat(201);
    let bodies: Vec<String> = vec![
        "{".into(),
        "{\"name\": }".into(),
        "[]".into(),
        "[{\"name\":\"x\"}]".into(),
        "\"name\"".into(),
        "42".into(),
        "null".into(),
        "true".into(),
        "{\"name\":\"a\"}{\"name\":\"b\"}".into(),
        "{\"name\":5}".into(),
        "{\"name\":\"\"}".into(),
        format!("{{\"name\":\"{long}\"}}"),
        "{\"name\":[\"x\"]}".into(),
        "{\"name\":{}}".into(),
        "{\"task_id\":5}".into(),
        "{\"task_id\":\"\"}".into(),
        format!("{{\"task_id\":\"{long}\"}}"),
        "{\"task_id\":true}".into(),
        "{\"expires_in_seconds\":\"60\"}".into(),
        "{\"expires_in_seconds\":59}".into(),
        "{\"expires_in_seconds\":0}".into(),
        "{\"expires_in_seconds\":31536001}".into(),
        "{\"expires_in_seconds\":1.5}".into(),
        "{\"expires_in_seconds\":-1}".into(),
        "{\"expires_in_seconds\":-60}".into(),
        "{\"expires_in_seconds\":1e400}".into(),
        "{\"expires_in_seconds\":99999999999999999999999}".into(),
        "{\"expires_in_seconds\":18446744073709551616}".into(),
        "{\"expires_in_seconds\":true}".into(),
        "{\"expires_in_seconds\":[60]}".into(),
    ];
    for body in &bodies {
        let r = t
            .send(
                post(CREATE)
                    .ip(&fresh_ip())
                    .content_type("application/json")
                    .raw(body.as_str()),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "body {body}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    // Invalid UTF-8 inside a JSON string.
    let r = t
        .send(
            post(CREATE)
                .ip(&fresh_ip())
                .content_type("application/json")
                .raw(b"{\"name\":\"\xff\"}".to_vec()),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
}

#[tokio::test]
async fn create_with_a_non_json_content_type_is_415() {
    let t = TestApp::new();
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "text/html; charset=utf-8",
    ] {
        let r = t
            .send(
                post(CREATE)
                    .ip(&fresh_ip())
                    .content_type(ct)
                    .raw(r#"{"name":"x"}"#),
            )
            .await;
        r.err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    }
}

#[tokio::test]
async fn create_with_a_huge_body_is_413() {
    let t = TestApp::new();
    let pad = "p".repeat(1_100_000);
    let body = json!({"name": "x", "pad": pad});
    let r = t.send(post(CREATE).ip(&fresh_ip()).json(&body)).await;
    r.err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // A declared Content-Length over the limit is refused before reading.
    let r = t
        .send(
            post(CREATE)
                .ip(&fresh_ip())
                .content_type("application/json")
                .header("content-length", "1000000000")
                .raw("{}"),
        )
        .await;
    r.err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

#[tokio::test]
async fn create_is_rate_limited_per_client_ip() {
    let t = TestApp::with_limits(|l| l.creations_per_minute = 2);
    let ip = "192.0.2.7";
    for _ in 0..2 {
        t.send(post(CREATE).ip(ip)).await.ok(StatusCode::CREATED);
    }
    let r = t.send(post(CREATE).ip(ip)).await;
    r.assert_rate_limited();
    // Another IP has its own budget; so does a request without a known peer ("unknown").
    t.send(post(CREATE).ip("198.51.100.1"))
        .await
        .ok(StatusCode::CREATED);
    t.send(post(CREATE)).await.ok(StatusCode::CREATED);
    t.send(post(CREATE)).await.ok(StatusCode::CREATED);
    t.send(post(CREATE)).await.assert_rate_limited();
    // A new minute gives a new budget.
    t.advance(60);
    t.send(post(CREATE).ip(ip)).await.ok(StatusCode::CREATED);
}

// ---------------------------------------------------------------------------------------------
// Authentication
// ---------------------------------------------------------------------------------------------

/// Every bearer route of the address, as (method, path, body).
fn bearer_routes(a: &Addr) -> Vec<(Method, String, Option<Value>)> {
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

fn route_req(method: &Method, path: &str, body: &Option<Value>) -> Req {
    let r = req(method.clone(), path);
    match body {
        Some(b) => r.json(b),
        None => r,
    }
}

#[tokio::test]
async fn bearer_routes_answer_401_for_missing_or_wrong_credentials() {
    let t = TestApp::new();
    let a = t.create().await;
    let b = t.create().await;
    let mut bodies = Vec::new();
    for (method, path, body) in bearer_routes(&a) {
        let variants: Vec<(&str, Option<String>)> = vec![
            ("missing", None),
            (
                "wrong token",
                Some(format!("Bearer aat_{}", "x".repeat(43))),
            ),
            ("other address's token", Some(format!("Bearer {}", b.token))),
            ("basic scheme", Some(format!("Basic {}", a.token))),
            ("token scheme", Some(format!("Token {}", a.token))),
            ("bare token", Some(a.token.clone())),
            ("empty bearer", Some("Bearer ".into())),
            ("empty header", Some(String::new())),
        ];
        for (what, auth) in variants {
            let mut r = route_req(&method, &path, &body);
            if let Some(v) = auth {
                r = r.header("authorization", v);
            }
            let resp = t.send(r).await;
            assert_eq!(
                resp.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {what}: {}",
                resp.text
            );
            resp.err(StatusCode::UNAUTHORIZED, "unauthorized");
            bodies.push(resp.text);
        }
    }
    // No oracle: every 401 reads the same.
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    // Nothing happened to A (the DELETE with bad credentials did not delete it).
    t.inspect(&a).await;
    t.inspect(&b).await;
}

#[tokio::test]
async fn unknown_and_malformed_address_ids_answer_401_like_a_wrong_token() {
    let t = TestApp::new();
    let a = t.create().await;
    let wrong_token = t
        .send(get(&a.root).bearer(&format!("aat_{}", "y".repeat(43))))
        .await;
    wrong_token.err(StatusCode::UNAUTHORIZED, "unauthorized");
    let ids = [
        "addr_unknownunknownunknow".to_owned(),
        "addr_".to_owned() + &"a".repeat(60),
        "addr%21bang".to_owned(),
        "addr.dot".to_owned(),
        "..".to_owned(),
        "addr%20space".to_owned(),
        "%C3%A9".to_owned(),
    ];
    for id in &ids {
        let root = format!("/api/v1/addresses/{id}");
        let fake = Addr {
            root: root.clone(),
            ..a.clone()
        };
        for (method, path, body) in bearer_routes(&fake) {
            let r = t
                .send(route_req(&method, &path, &body).bearer(&a.token))
                .await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path}: {}",
                r.text
            );
            r.err(StatusCode::UNAUTHORIZED, "unauthorized");
            assert_eq!(r.text, wrong_token.text, "no oracle for {path}");
        }
    }
}

#[tokio::test]
async fn bearer_scheme_is_case_insensitive() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .send(get(&a.root).header("authorization", format!("bearer {}", a.token)))
        .await;
    r.ok(StatusCode::OK);
    let r = t
        .send(get(&a.root).header("authorization", format!("BEARER {}", a.token)))
        .await;
    r.ok(StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// §2 Inspect / delete, expiry, tombstones
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn inspect_reports_usage_and_limits() {
    let t = TestApp::new();
    let a = t.create().await;
    let d = t.inspect(&a).await;
    assert_eq!(d["address"]["id"], a.id.as_str());
    assert_eq!(
        d["usage"],
        json!({"last_sequence": 0, "retained_events": 0, "state_keys": 0, "state_bytes": 0})
    );
    assert_eq!(
        d["limits"],
        serde_json::to_value(&t.limits).expect("limits to JSON")
    );
    assert_eq!(d["limits"]["max_retained_events"], 1000);

    t.deliver_ok(&a, &json!({"n": 1})).await;
    t.deliver_ok(&a, &json!({"n": 2})).await;
    t.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    let d = t.inspect(&a).await;
    // "k" + "1" + 64 bytes of metadata.
    assert_eq!(
        d["usage"],
        json!({"last_sequence": 3, "retained_events": 3, "state_keys": 1, "state_bytes": 66})
    );

    t.send(delete(a.key("k")).bearer(&a.token))
        .await
        .ok(StatusCode::OK);
    let d = t.inspect(&a).await;
    assert_eq!(
        d["usage"],
        json!({"last_sequence": 4, "retained_events": 4, "state_keys": 0, "state_bytes": 0})
    );
}

/// Asserts that every bearer route and the inbox of `a` answer 410 `address_gone`, while wrong
/// credentials still answer 401 / 404.
async fn assert_gone(t: &TestApp, a: &Addr, event_id: &str) {
    let mut routes = bearer_routes(a);
    routes.push((Method::GET, a.event(event_id), None));
    routes.push((Method::POST, a.ack(event_id), None));
    routes.push((Method::GET, format!("{}?after=0&wait=5", a.events()), None));
    routes.push((
        Method::PUT,
        a.key("k"),
        Some(json!({"value": 2, "if_revision": 1})),
    ));
    for (method, path, body) in &routes {
        let r = t.send(route_req(method, path, body).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::GONE, "{method} {path}: {}", r.text);
        r.err(StatusCode::GONE, "address_gone");
        let r = t
            .send(route_req(method, path, body).bearer(&format!("aat_{}", "z".repeat(43))))
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {path}");
    }
    let r = t.deliver(a, &json!({"late": true})).await;
    r.err(StatusCode::GONE, "address_gone");
    let r = t
        .send(post(&a.inbox).content_type("text/plain").raw("late"))
        .await;
    r.err(StatusCode::GONE, "address_gone");
    // A wrong inbox secret is still just unknown.
    let wrong = format!("/api/v1/inbox/{}/ais_{}", a.id, "w".repeat(43));
    let r = t.send(post(wrong).json(&json!({}))).await;
    r.err(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn delete_answers_204_then_everything_is_gone() {
    let t = TestApp::new();
    let a = t.create().await;
    let b = t.create().await;
    let (event_id, _) = t.deliver_ok(&a, &json!({"n": 1})).await;
    t.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);

    let r = t.send(delete(&a.root).bearer(&a.token)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    assert!(r.text.is_empty(), "204 has no body: {}", r.text);

    assert_gone(&t, &a, &event_id).await;
    // Deleting again is 410 too.
    let r = t.send(delete(&a.root).bearer(&a.token)).await;
    r.err(StatusCode::GONE, "address_gone");
    // Other addresses are untouched.
    t.inspect(&b).await;
    t.deliver_ok(&b, &json!({"still": "here"})).await;
}

#[tokio::test]
async fn expired_address_is_gone_from_the_second_it_expires() {
    let t = TestApp::new();
    let (_, a) = t.create_with(&json!({"expires_in_seconds": 60})).await;
    let (event_id, _) = t.deliver_ok(&a, &json!({"n": 1})).await;
    t.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);

    t.advance(59);
    t.inspect(&a).await;
    t.events(&a, "after=0").await;
    t.deliver_ok(&a, &json!({"n": 2})).await;

    t.advance(1);
    assert_gone(&t, &a, &event_id).await;

    // Whatever a sweeper has done: still gone (the tombstone stays 30 days by default).
    t.store.sweep(&t.limits, t.now()).await.expect("sweep");
    let r = t.send(get(&a.root).bearer(&a.token)).await;
    r.err(StatusCode::GONE, "address_gone");
    let r = t.deliver(&a, &json!({})).await;
    r.err(StatusCode::GONE, "address_gone");
}

#[tokio::test]
async fn forgotten_tombstone_answers_like_an_unknown_address() {
    let t = TestApp::with_limits(|l| l.tombstone_seconds = 60);
    let a = t.create().await;
    let r = t.send(delete(&a.root).bearer(&a.token)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    t.store.sweep(&t.limits, t.now()).await.expect("sweep");
    t.send(get(&a.root).bearer(&a.token))
        .await
        .err(StatusCode::GONE, "address_gone");
    t.advance(61);
    t.store.sweep(&t.limits, t.now()).await.expect("sweep");
    t.send(get(&a.root).bearer(&a.token))
        .await
        .err(StatusCode::UNAUTHORIZED, "unauthorized");
    t.deliver(&a, &json!({}))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
}

// ---------------------------------------------------------------------------------------------
// §3 Inbox
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn inbox_accepts_202_and_records_the_event() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .deliver(
            &a,
            &json!({"type": "demo.callback", "source": "ci", "data": {"ok": true}}),
        )
        .await;
    let b = r.ok(StatusCode::ACCEPTED);
    assert_eq!(b["duplicate"], false);
    assert_eq!(b["event"]["sequence"], 1);
    let id = b["event"]["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("evt_") && is_id(&id), "{id}");

    let page = t.events(&a, "").await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(1));
    let e = &page["events"][0];
    assert_eq!(e["id"], id.as_str());
    assert_eq!(e["sequence"], 1);
    assert_eq!(e["type"], "demo.callback");
    assert_eq!(e["source"], "ci");
    assert_eq!(e["ingress_surface"], "http");
    assert_eq!(e["received_at"], format_rfc3339(t.now()));
    assert_time(&e["received_at"]);
    assert_eq!(e["acknowledged_at"], Value::Null);
    assert_eq!(e["data"], json!({"ok": true}));
    assert_eq!(e["http"]["content_type"], "application/json");
    assert!(e["http"]["headers"].is_object());
    assert_eq!(page["next_cursor"], 1);
    assert_eq!(page["has_more"], false);

    // The single-event route shows the same object.
    let r = t.send(get(a.event(&id)).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["event"], *e);
}

#[tokio::test]
async fn inbox_idempotency_key_dedupes_and_detects_reuse() {
    let t = TestApp::new();
    let a = t.create().await;
    let body = json!({"type": "job.done", "data": {"id": 7}});
    let send = |b: &Value, key: &str| post(&a.inbox).json(b).header("idempotency-key", key);
    let first = t.send(send(&body, "delivery-1")).await;
    let first = first.ok(StatusCode::ACCEPTED).clone();
    assert_eq!(first["duplicate"], false);

    let again = t.send(send(&body, "delivery-1")).await;
    let again = again.ok(StatusCode::OK);
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["event"], first["event"]);

    let reused = t
        .send(send(
            &json!({"type": "job.done", "data": {"id": 8}}),
            "delivery-1",
        ))
        .await;
    reused.err(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");

    // No new event for the duplicate or the refused reuse.
    let page = t.events(&a, "").await;
    assert_eq!(seqs(&page), vec![1]);

    // Another key is another event.
    let other = t.send(send(&body, "delivery-2")).await;
    assert_eq!(other.ok(StatusCode::ACCEPTED)["event"]["sequence"], 2);

    // Bad keys: empty, too long, not printable ASCII.
    for bad in [
        b"".to_vec(),
        "k".repeat(256).into_bytes(),
        b"tab\there".to_vec(),
        "caf\u{e9}".as_bytes().to_vec(),
    ] {
        let r = t
            .send(post(&a.inbox).json(&body).header("idempotency-key", bad))
            .await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    // 255 printable characters are fine.
    let r = t.send(send(&body, &"k".repeat(255))).await;
    r.ok(StatusCode::ACCEPTED);
}

#[tokio::test]
async fn inbox_envelope_rule() {
    let t = TestApp::new();
    let a = t.create().await;

    // Only type/source/data: data is unwrapped.
    t.deliver_ok(
        &a,
        &json!({"type": "demo.callback", "source": "ci", "data": {"ok": true}}),
    )
    .await;
    // Extra keys: the whole body is the data.
    let push = json!({"type": "push", "source": "gh", "data": 1, "ref": "main"});
    t.deliver_ok(&a, &push).await;
    // Type only: data is null, source null.
    t.deliver_ok(&a, &json!({"type": "ping"})).await;
    // No type: http.request with the whole object.
    t.deliver_ok(&a, &json!({"source": "x", "data": 1})).await;
    // Non-string type: http.request.
    t.deliver_ok(&a, &json!({"type": 5, "data": 1})).await;
    // Non-object JSON.
    t.deliver_ok(&a, &json!([1, 2])).await;
    // text/plain, even when it parses as JSON.
    t.send(post(&a.inbox).content_type("text/plain").raw("hello"))
        .await
        .ok(StatusCode::ACCEPTED);
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .raw(r#"{"type":"x"}"#),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // Binary.
    t.send(
        post(&a.inbox)
            .content_type("application/octet-stream")
            .raw(vec![0xff, 0x00, 0x01]),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // Empty body without a content type.
    t.send(post(&a.inbox)).await.ok(StatusCode::ACCEPTED);
    // Declared JSON that does not parse: kept as text.
    t.send(
        post(&a.inbox)
            .content_type("application/json")
            .raw("{broken"),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // JSON without a content type is still JSON.
    t.send(post(&a.inbox).raw(r#"{"type":"bare","data":[1]}"#))
        .await
        .ok(StatusCode::ACCEPTED);

    let page = t.events(&a, "").await;
    let e = page["events"].as_array().expect("events");
    assert_eq!(e.len(), 12);
    let view = |i: usize| {
        (
            e[i]["type"].clone(),
            e[i]["source"].clone(),
            e[i]["data"].clone(),
        )
    };
    assert_eq!(
        view(0),
        (json!("demo.callback"), json!("ci"), json!({"ok": true}))
    );
    assert_eq!(view(1), (json!("push"), json!("gh"), push));
    assert_eq!(view(2), (json!("ping"), Value::Null, Value::Null));
    assert_eq!(
        view(3),
        (
            json!("http.request"),
            Value::Null,
            json!({"source": "x", "data": 1})
        )
    );
    assert_eq!(
        view(4),
        (
            json!("http.request"),
            Value::Null,
            json!({"type": 5, "data": 1})
        )
    );
    assert_eq!(view(5), (json!("http.request"), Value::Null, json!([1, 2])));
    assert_eq!(
        view(6),
        (
            json!("http.request"),
            Value::Null,
            json!({"content_type": "text/plain", "text": "hello"})
        )
    );
    assert_eq!(
        view(7).2,
        json!({"content_type": "text/plain", "text": "{\"type\":\"x\"}"})
    );
    assert_eq!(view(7).0, "http.request");
    assert_eq!(
        view(8).2,
        json!({"content_type": "application/octet-stream", "base64": "/wAB"})
    );
    assert_eq!(e[8]["http"]["content_type"], "application/octet-stream");
    assert_eq!(view(9).2, json!({"content_type": null, "text": ""}));
    assert_eq!(e[9]["http"]["content_type"], Value::Null);
    assert_eq!(
        view(10).2,
        json!({"content_type": "application/json", "text": "{broken"})
    );
    assert_eq!(view(11), (json!("bare"), Value::Null, json!([1])));
}

#[tokio::test]
async fn inbox_records_only_allowlisted_headers() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .send(
            post(&a.inbox)
                .json(&json!({"zen": "hi"}))
                .header("user-agent", "GitHub-Hookshot/abc")
                .header("x-github-event", "push")
                .header("x-github-delivery", "d-1")
                .header("x-hub-signature-256", "sha256=00ff")
                .header("stripe-signature", "t=1,v1=aa")
                .header("webhook-id", "msg_1")
                .header("webhook-timestamp", "1700000000")
                .header("webhook-signature", "v1,abc")
                .header("authorization", "Bearer very-secret-value")
                .header("cookie", "session=cookie-secret")
                .header("x-api-key", "key-secret"),
        )
        .await;
    r.ok(StatusCode::ACCEPTED);
    let page = t.events(&a, "").await;
    let http = &page["events"][0]["http"];
    assert_eq!(
        http["headers"],
        json!({
            "user-agent": "GitHub-Hookshot/abc",
            "x-github-event": "push",
            "x-github-delivery": "d-1",
            "x-hub-signature-256": "sha256=00ff",
            "stripe-signature": "t=1,v1=aa",
            "webhook-id": "msg_1",
            "webhook-timestamp": "1700000000",
            "webhook-signature": "v1,abc"
        })
    );
    let text = page.to_string();
    for secret in ["very-secret-value", "cookie-secret", "key-secret"] {
        assert!(!text.contains(secret), "{secret} was recorded: {text}");
    }
}

#[tokio::test]
async fn inbox_unknown_address_or_wrong_secret_is_404() {
    let t = TestApp::new();
    let a = t.create().await;
    let b = t.create().await;
    let paths = [
        format!("/api/v1/inbox/{}/ais_{}", a.id, "w".repeat(43)),
        format!("/api/v1/inbox/{}/{}", a.id, b.inbox_secret),
        format!("/api/v1/inbox/{}/{}", b.id, a.inbox_secret),
        format!("/api/v1/inbox/addr_unknownunknown/{}", a.inbox_secret),
        format!("/api/v1/inbox/{}/{}%21", a.id, a.inbox_secret),
        format!("/api/v1/inbox/{}/{}", a.id, "s".repeat(65)),
        format!("/api/v1/inbox/addr%21/{}", a.inbox_secret),
        format!("/api/v1/inbox/{}/{}", a.id, a.token),
    ];
    let mut bodies = Vec::new();
    for p in &paths {
        let r = t.send(post(p).json(&json!({"x": 1}))).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{p}: {}", r.text);
        r.err(StatusCode::NOT_FOUND, "not_found");
        bodies.push(r.text);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    // Missing secret segment: no such route.
    let r = t
        .send(post(format!("/api/v1/inbox/{}", a.id)).json(&json!({})))
        .await;
    r.err(StatusCode::NOT_FOUND, "not_found");
    // Nothing was delivered to either address.
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 0);
    assert_eq!(t.inspect(&b).await["usage"]["last_sequence"], 0);
}

#[tokio::test]
async fn inbox_body_over_the_limit_is_413() {
    let t = TestApp::with_limits(|l| l.max_inbox_bytes = 100);
    let a = t.create().await;
    // Exactly the limit is fine.
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .raw("a".repeat(100)),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    // One byte more is not, with or without a Content-Length.
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .raw("a".repeat(101)),
    )
    .await
    .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .header("content-length", "101")
            .raw("a".repeat(101)),
    )
    .await
    .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // A declared length over the limit is refused before the body is read.
    t.send(
        post(&a.inbox)
            .content_type("text/plain")
            .header("content-length", "1000000")
            .raw("tiny"),
    )
    .await
    .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    let page = t.events(&a, "").await;
    assert_eq!(seqs(&page), vec![1]);
}

#[tokio::test]
async fn full_feed_is_quota_exceeded_until_retention_frees_it() {
    let t = TestApp::with_limits(|l| {
        l.max_retained_events = 3;
        l.event_retention_seconds = 3600;
    });
    let a = t.create().await;
    let (first_id, _) = t.deliver_ok(&a, &json!({"n": 1})).await;
    t.send(
        post(&a.inbox)
            .json(&json!({"n": 2}))
            .header("idempotency-key", "k-2"),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    t.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);

    // Full: deliveries and state writes are refused.
    t.deliver(&a, &json!({"n": 4}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    t.put_state(&a, "k", &json!({"value": 2}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    t.put_state(&a, "new", &json!({"value": 2}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    t.send(delete(a.key("k")).bearer(&a.token))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    // A duplicate delivery still answers with its original event.
    let dup = t
        .send(
            post(&a.inbox)
                .json(&json!({"n": 2}))
                .header("idempotency-key", "k-2"),
        )
        .await;
    assert_eq!(dup.ok(StatusCode::OK)["event"]["sequence"], 2);

    // Acknowledging frees nothing.
    let page = t.events(&a, "").await;
    for e in page["events"].as_array().expect("events") {
        let id = e["id"].as_str().expect("id");
        t.send(post(a.ack(id)).bearer(&a.token))
            .await
            .ok(StatusCode::OK);
    }
    t.deliver(&a, &json!({"n": 4}))
        .await
        .err(StatusCode::CONFLICT, "quota_exceeded");
    let d = t.inspect(&a).await;
    assert_eq!(d["usage"]["retained_events"], 3);
    assert_eq!(d["usage"]["last_sequence"], 3);
    // The state value is unchanged.
    let r = t.send(get(a.key("k")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["value"], 1);

    // Retention frees the quota; expired events are never returned.
    t.advance(3600);
    let page = t.events(&a, "").await;
    assert_eq!(seqs(&page), Vec::<u64>::new());
    assert_eq!(page["next_cursor"], 0);
    t.send(get(a.event(&first_id)).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    t.send(post(a.ack(&first_id)).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    let (_, seq) = t.deliver_ok(&a, &json!({"n": 4})).await;
    assert_eq!(seq, 4, "sequences continue, gapless");
    // The Idempotency-Key is forgotten with its event.
    let again = t
        .send(
            post(&a.inbox)
                .json(&json!({"n": 2}))
                .header("idempotency-key", "k-2"),
        )
        .await;
    let again = again.ok(StatusCode::ACCEPTED);
    assert_eq!(again["duplicate"], false);
    assert_eq!(again["event"]["sequence"], 5);
    let d = t.inspect(&a).await;
    assert_eq!(d["usage"]["retained_events"], 2);
    assert_eq!(d["usage"]["last_sequence"], 5);
    // The state itself does not expire with its event.
    let r = t.send(get(a.key("k")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["value"], 1);
}

// ---------------------------------------------------------------------------------------------
// §4 Feed
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn events_page_with_limit_has_more_and_next_cursor() {
    let t = TestApp::new();
    let a = t.create().await;
    let empty = t.events(&a, "").await;
    assert_eq!(
        empty,
        json!({"events": [], "next_cursor": 0, "has_more": false})
    );
    for n in 1..=5 {
        t.deliver_ok(&a, &json!({"n": n})).await;
    }
    let p = t.events(&a, "limit=2").await;
    assert_eq!(seqs(&p), vec![1, 2]);
    assert_eq!(
        (p["next_cursor"].clone(), p["has_more"].clone()),
        (json!(2), json!(true))
    );
    let p = t.events(&a, "after=2&limit=2").await;
    assert_eq!(seqs(&p), vec![3, 4]);
    assert_eq!(
        (p["next_cursor"].clone(), p["has_more"].clone()),
        (json!(4), json!(true))
    );
    let p = t.events(&a, "after=4&limit=2").await;
    assert_eq!(seqs(&p), vec![5]);
    assert_eq!(
        (p["next_cursor"].clone(), p["has_more"].clone()),
        (json!(5), json!(false))
    );
    // Nothing new: the cursor stays where it was.
    let p = t.events(&a, "after=5").await;
    assert_eq!(
        p,
        json!({"events": [], "next_cursor": 5, "has_more": false})
    );
    let p = t.events(&a, "after=100").await;
    assert_eq!(
        p,
        json!({"events": [], "next_cursor": 100, "has_more": false})
    );
    // Boundaries and defaults; unknown parameters are ignored.
    assert_eq!(seqs(&t.events(&a, "limit=1").await), vec![1]);
    assert_eq!(seqs(&t.events(&a, "limit=100").await), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        seqs(&t.events(&a, "after=0&wait=0").await),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(
        seqs(&t.events(&a, "colour=blue").await),
        vec![1, 2, 3, 4, 5]
    );
    assert_eq!(seqs(&t.events(&a, "after=3").await), vec![4, 5]);
    // Reading hides nothing.
    assert_eq!(seqs(&t.events(&a, "").await), vec![1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn events_page_is_capped_at_100() {
    let t = TestApp::new();
    let a = t.create().await;
    for n in 0..101 {
        t.send(
            post(&a.inbox)
                .content_type("text/plain")
                .raw(format!("{n}")),
        )
        .await
        .ok(StatusCode::ACCEPTED);
    }
    let p = t.events(&a, "").await;
    assert_eq!(seqs(&p), (1..=100).collect::<Vec<u64>>());
    assert_eq!(p["has_more"], true);
    assert_eq!(p["next_cursor"], 100);
    let p = t.events(&a, "after=100").await;
    assert_eq!(seqs(&p), vec![101]);
    assert_eq!(p["has_more"], false);
}

#[tokio::test]
async fn events_reject_bad_query_values() {
    let t = TestApp::with_limits(|l| l.polls_per_minute = 10_000);
    let a = t.create().await;
    t.deliver_ok(&a, &json!({"n": 1})).await;
    let bad = [
        "after=-1",
        "after=abc",
        "after=1.5",
        "after=1e3",
        "after=%2B1",
        "after=%201",
        "after=99999999999999999999999",
        "after=18446744073709551616",
        "after=",
        "after=1&after=2",
        "after=0&after=0",
        "limit=0",
        "limit=101",
        "limit=-1",
        "limit=abc",
        "limit=1.5",
        "limit=99999999999999999999999",
        "limit=",
        "limit=1&limit=2",
        "wait=-1",
        "wait=abc",
        "wait=",
        "wait=1e400",
        "wait=NaN",
        "wait=inf",
        "wait=1&wait=2",
    ];
    for q in bad {
        let r = t
            .send(get(format!("{}?{q}", a.events())).bearer(&a.token))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "?{q}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
}

#[tokio::test]
async fn events_wait_is_clamped_and_returns_at_once_when_events_exist() {
    let t = TestApp::new();
    let a = t.create().await;
    t.deliver_ok(&a, &json!({"n": 1})).await;
    let started = Instant::now();
    let p = t.events(&a, "after=0&wait=999").await;
    assert_eq!(seqs(&p), vec![1]);
    let p2 = t.events(&a, "after=0&wait=25").await;
    assert_eq!(seqs(&p2), vec![1]);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn events_wait_beyond_the_maximum_is_clamped_on_an_empty_feed() {
    let t = TestApp::with_limits(|l| l.max_wait_seconds = 1);
    let a = t.create().await;
    let started = Instant::now();
    let p = t.events(&a, "after=0&wait=999").await;
    let elapsed = started.elapsed();
    assert_eq!(
        p,
        json!({"events": [], "next_cursor": 0, "has_more": false})
    );
    assert!(
        elapsed >= Duration::from_millis(900),
        "held only {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(3), "held {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_returns_as_soon_as_an_event_arrives() {
    let t = TestApp::new();
    let a = t.create().await;
    t.deliver_ok(&a, &json!({"n": 1})).await;

    let app = t.app.clone();
    let poll = get(format!("{}?after=1&wait=5", a.events())).bearer(&a.token);
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let r = send_to(&app, poll).await;
        (started.elapsed(), r)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.deliver_ok(&a, &json!({"n": 2})).await;

    let (elapsed, r) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the poll answers")
        .expect("poll task");
    let p = r.ok(StatusCode::OK);
    assert_eq!(seqs(p), vec![2]);
    assert_eq!(p["events"][0]["data"], json!({"n": 2}));
    assert_eq!(p["next_cursor"], 2);
    assert!(
        elapsed >= Duration::from_millis(150),
        "did not wait: {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_on_a_state_write() {
    let t = TestApp::new();
    let a = t.create().await;
    let app = t.app.clone();
    let poll = get(format!("{}?after=0&wait=5", a.events())).bearer(&a.token);
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let r = send_to(&app, poll).await;
        (started.elapsed(), r)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    t.put_state(&a, "k", &json!({"value": "v"}))
        .await
        .ok(StatusCode::OK);
    let (elapsed, r) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the poll answers")
        .expect("poll task");
    let p = r.ok(StatusCode::OK);
    assert_eq!(p["events"][0]["type"], "state.updated");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
}

#[tokio::test]
async fn polls_are_rate_limited_per_address() {
    let t = TestApp::with_limits(|l| l.polls_per_minute = 3);
    let a = t.create().await;
    let b = t.create().await;
    for _ in 0..3 {
        t.events(&a, "").await;
    }
    let r = t.send(get(a.events()).bearer(&a.token)).await;
    r.assert_rate_limited();
    // Other routes of A and polls of B are not limited.
    t.inspect(&a).await;
    t.send(get(a.state()).bearer(&a.token))
        .await
        .ok(StatusCode::OK);
    t.events(&b, "").await;
    // The next minute has a new budget.
    t.advance(60);
    t.events(&a, "").await;
}

#[tokio::test]
async fn get_event_by_id() {
    let t = TestApp::with_limits(|l| l.polls_per_minute = 1000);
    let a = t.create().await;
    let b = t.create().await;
    let (id, _) = t.deliver_ok(&a, &json!({"type": "t", "data": 1})).await;
    let (b_id, _) = t.deliver_ok(&b, &json!({"n": 1})).await;

    let r = t.send(get(a.event(&id)).bearer(&a.token)).await;
    let e = &r.ok(StatusCode::OK)["event"];
    assert_eq!(e["id"], id.as_str());
    assert_eq!(e["sequence"], 1);
    assert_eq!(e["type"], "t");
    assert_eq!(e["data"], 1);

    // Malformed ids: 400.
    for bad in [
        "evt_%21".to_owned(),
        format!("evt_{}", "a".repeat(61)),
        "evt%20x".to_owned(),
        "evt.1".to_owned(),
        "%C3%A9".to_owned(),
    ] {
        let r = t.send(get(a.event(&bad)).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let r = t.send(post(a.ack(&bad)).bearer(&a.token)).await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }

    // Well-formed but unknown: 404.
    let mut tampered_nonce = id.clone().into_bytes();
    tampered_nonce[4] = if tampered_nonce[4] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let tampered_nonce = String::from_utf8(tampered_nonce).expect("ascii");
    let other_seq = format!("{}2", &id[..id.len() - 1]);
    for unknown in [
        "evt_unknown".to_owned(),
        "evt_AAAAAAAAAAAAAAAA1".to_owned(),
        tampered_nonce,
        other_seq,
        "evt_AAAAAAAAAAAAAAAAzzzzzzzzzzzzz".to_owned(),
        "x".to_owned(),
        a.id.clone(),
        b_id.clone(),
    ] {
        let r = t.send(get(a.event(&unknown)).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{unknown}: {}", r.text);
        r.err(StatusCode::NOT_FOUND, "not_found");
        let r = t.send(post(a.ack(&unknown)).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "ack {unknown}: {}", r.text);
        r.err(StatusCode::NOT_FOUND, "not_found");
    }
    // B's event is still unacknowledged.
    let r = t.send(get(b.event(&b_id)).bearer(&b.token)).await;
    assert_eq!(
        r.ok(StatusCode::OK)["event"]["acknowledged_at"],
        Value::Null
    );
}

// ---------------------------------------------------------------------------------------------
// §5 Ack
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn ack_records_the_first_time_and_keeps_the_event() {
    let t = TestApp::new();
    let a = t.create().await;
    let (id, seq) = t.deliver_ok(&a, &json!({"n": 1})).await;
    t.deliver_ok(&a, &json!({"n": 2})).await;
    t.advance(5);
    let acked_at = format_rfc3339(t.now());
    let r = t.send(post(a.ack(&id)).bearer(&a.token)).await;
    assert_eq!(
        *r.ok(StatusCode::OK),
        json!({"event": {"id": id, "sequence": seq, "acknowledged_at": acked_at}})
    );
    // Again, later: 200 with the first time.
    t.advance(7);
    let r = t.send(post(a.ack(&id)).bearer(&a.token)).await;
    assert_eq!(
        r.ok(StatusCode::OK)["event"]["acknowledged_at"],
        acked_at.as_str()
    );
    // The feed still holds it, now with acknowledged_at; the other is untouched.
    let p = t.events(&a, "").await;
    assert_eq!(seqs(&p), vec![1, 2]);
    assert_eq!(p["events"][0]["acknowledged_at"], acked_at.as_str());
    assert_eq!(p["events"][1]["acknowledged_at"], Value::Null);
    let r = t.send(get(a.event(&id)).bearer(&a.token)).await;
    assert_eq!(
        r.ok(StatusCode::OK)["event"]["acknowledged_at"],
        acked_at.as_str()
    );
    assert_eq!(t.inspect(&a).await["usage"]["retained_events"], 2);
    // A body is ignored.
    let r = t
        .send(post(a.ack(&id)).bearer(&a.token).json(&json!({"x": 1})))
        .await;
    r.ok(StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// §7 State
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn state_put_get_list_delete_and_their_feed_events() {
    let t = TestApp::new();
    let a = t.create().await;
    // An inbox event first, so revisions visibly follow the feed's sequence.
    t.deliver_ok(&a, &json!({"n": 1})).await;

    let empty = t.send(get(a.state()).bearer(&a.token)).await;
    assert_eq!(
        *empty.ok(StatusCode::OK),
        json!({"keys": [], "state_bytes": 0, "state_keys": 0,
               "limits": {"max_keys": 32, "max_bytes": 65536}})
    );
    t.send(get(a.key("k1")).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");

    let updated_at = format_rfc3339(t.now());
    // Compact JSON is what is stored and counted, whatever the spacing of the request.
    let r = t
        .send(
            put(a.key("k1"))
                .bearer(&a.token)
                .content_type("application/json")
                .raw(r#"{ "value" : { "a" : 1 } }"#),
        )
        .await;
    let w = r.ok(StatusCode::OK).clone();
    assert_eq!(w["key"], "k1");
    assert_eq!(w["value"], json!({"a": 1}));
    assert_eq!(w["revision"], 2);
    assert_eq!(w["updated_at"], updated_at.as_str());
    assert_eq!(w["event"]["sequence"], 2);
    let put_event_id = w["event"]["id"].as_str().expect("event id").to_owned();

    let r = t.send(get(a.key("k1")).bearer(&a.token)).await;
    assert_eq!(
        *r.ok(StatusCode::OK),
        json!({"key": "k1", "value": {"a": 1}, "revision": 2, "updated_at": updated_at})
    );

    // Any JSON value, null included; no Content-Type is accepted too.
    let r = t
        .send(
            put(a.key("task:1.step-2_x"))
                .bearer(&a.token)
                .raw(r#"{"value": null}"#),
        )
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 3);
    let r = t.send(get(a.key("task:1.step-2_x")).bearer(&a.token)).await;
    let v = r.ok(StatusCode::OK);
    assert!(v.get("value").is_some_and(Value::is_null), "{v}");

    let r = t.send(get(a.state()).bearer(&a.token)).await;
    let l = r.ok(StatusCode::OK);
    assert_eq!(
        l["keys"],
        json!([
            {"key": "k1", "revision": 2, "size": 2 + 7 + 64, "updated_at": updated_at},
            {"key": "task:1.step-2_x", "revision": 3, "size": 15 + 4 + 64, "updated_at": updated_at},
        ])
    );
    assert_eq!(l["state_bytes"], 73 + 83);
    assert_eq!(l["state_keys"], 2);

    t.advance(2);
    let r = t.send(delete(a.key("k1")).bearer(&a.token)).await;
    let d = r.ok(StatusCode::OK).clone();
    assert_eq!(d["key"], "k1");
    assert_eq!(d["deleted"], true);
    assert_eq!(d["revision"], 4);
    assert_eq!(d["event"]["sequence"], 4);
    t.send(get(a.key("k1")).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    t.send(delete(a.key("k1")).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");

    // The feed tells the same story.
    let p = t.events(&a, "after=1").await;
    let e = p["events"].as_array().expect("events");
    assert_eq!(e.len(), 3);
    assert_eq!(e[0]["id"], put_event_id.as_str());
    assert_eq!(e[0]["sequence"], 2);
    assert_eq!(e[0]["type"], "state.updated");
    assert_eq!(e[0]["source"], "state");
    assert_eq!(e[0]["ingress_surface"], "state");
    assert_eq!(
        e[0]["data"],
        json!({"key": "k1", "revision": 2, "value": {"a": 1}})
    );
    assert!(e[0].get("http").is_none(), "{}", e[0]);
    assert_eq!(
        e[1]["data"],
        json!({"key": "task:1.step-2_x", "revision": 3, "value": null})
    );
    assert_eq!(e[2]["type"], "state.deleted");
    assert_eq!(e[2]["source"], "state");
    assert_eq!(e[2]["ingress_surface"], "state");
    assert_eq!(e[2]["data"], json!({"key": "k1", "revision": 4}));
    assert_eq!(e[2]["id"], d["event"]["id"]);
    assert!(e[2].get("http").is_none());
}

#[tokio::test]
async fn state_compare_and_set_with_if_revision_and_if_match() {
    let t = TestApp::new();
    let a = t.create().await;

    // if_revision 0: create only.
    let r = t
        .put_state(&a, "k", &json!({"value": 1, "if_revision": 0}))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 1);
    let e = t
        .put_state(&a, "k", &json!({"value": 2, "if_revision": 0}))
        .await;
    let e = e.err(StatusCode::CONFLICT, "revision_conflict");
    assert_eq!(e["current_revision"], 1);

    // if_revision N on a missing key: conflict with current_revision null.
    let e = t
        .put_state(&a, "missing", &json!({"value": 1, "if_revision": 7}))
        .await;
    let e = e.err(StatusCode::CONFLICT, "revision_conflict");
    assert_eq!(e.get("current_revision"), Some(&Value::Null), "{e}");

    // Wrong revision in the body.
    let e = t
        .put_state(&a, "k", &json!({"value": 2, "if_revision": 5}))
        .await;
    assert_eq!(
        e.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        1
    );
    // Right revision in the body.
    let r = t
        .put_state(&a, "k", &json!({"value": 2, "if_revision": 1}))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 2);

    // If-Match header: wrong, then right; agreeing header and body is fine.
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "1")
                .json(&json!({"value": 3})),
        )
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        2
    );
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "2")
                .json(&json!({"value": 3})),
        )
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 3);
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "3")
                .json(&json!({"value": 4, "if_revision": 3})),
        )
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 4);
    // If-Match: 0 means create only.
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "0")
                .json(&json!({"value": 5})),
        )
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        4
    );
    // Unconditional.
    let r = t.put_state(&a, "k", &json!({"value": 5})).await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 5);

    // DELETE with ?if_revision= and If-Match.
    let r = t
        .send(delete(format!("{}?if_revision=4", a.key("k"))).bearer(&a.token))
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        5
    );
    let r = t
        .send(delete(a.key("k")).bearer(&a.token).header("if-match", "4"))
        .await;
    assert_eq!(
        r.err(StatusCode::CONFLICT, "revision_conflict")["current_revision"],
        5
    );
    let r = t
        .send(delete(format!("{}?if_revision=5", a.key("k"))).bearer(&a.token))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["revision"], 6);

    t.put_state(&a, "j", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    let r = t
        .send(delete(a.key("j")).bearer(&a.token).header("if-match", "7"))
        .await;
    let d = r.ok(StatusCode::OK);
    assert_eq!(d["revision"], 8);
    assert_eq!(d["deleted"], true);

    // Conflicts appended nothing: 8 events for 8 successful writes.
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 8);
}

#[tokio::test]
async fn state_rejects_bad_requests_with_400() {
    let t = TestApp::new();
    let a = t.create().await;
    t.put_state(&a, "k", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);

    let bad_bodies = [
        "",
        "{",
        "[]",
        "5",
        "null",
        r#"{"value": 1"#,
        r#"{"if_revision": 1}"#,
        r#"{"Value": 1}"#,
        r#"{"value": 1, "if_revision": "1"}"#,
        r#"{"value": 1, "if_revision": -1}"#,
        r#"{"value": 1, "if_revision": 1.5}"#,
        r#"{"value": 1, "if_revision": true}"#,
        r#"{"value": 1, "if_revision": 99999999999999999999999}"#,
        r#"{"value": 1, "if_revision": 1e400}"#,
        r#"{"value": 1}{"value": 2}"#,
    ];
    for body in bad_bodies {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .content_type("application/json")
                    .raw(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body:?}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }

    // If-Match that is not a revision number, and If-Match disagreeing with if_revision.
    for bad in [
        "abc",
        "-1",
        "1.5",
        "*",
        "W/\"1\"",
        "99999999999999999999999",
    ] {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .header("if-match", bad)
                    .json(&json!({"value": 2})),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "If-Match {bad}: {}",
            r.text
        );
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let r = t
            .send(delete(a.key("k")).bearer(&a.token).header("if-match", bad))
            .await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    let r = t
        .send(
            put(a.key("k"))
                .bearer(&a.token)
                .header("if-match", "1")
                .json(&json!({"value": 2, "if_revision": 2})),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
    let r = t
        .send(
            delete(format!("{}?if_revision=2", a.key("k")))
                .bearer(&a.token)
                .header("if-match", "1"),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
    for q in [
        "if_revision=abc",
        "if_revision=-1",
        "if_revision=1.5",
        "if_revision=",
        "if_revision=1&if_revision=1",
    ] {
        let r = t
            .send(delete(format!("{}?{q}", a.key("k"))).bearer(&a.token))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "?{q}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }

    // Nothing changed.
    let r = t.send(get(a.key("k")).bearer(&a.token)).await;
    let v = r.ok(StatusCode::OK);
    assert_eq!(
        (v["value"].clone(), v["revision"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 1);
}

#[tokio::test]
async fn state_put_with_a_non_json_content_type_is_415() {
    let t = TestApp::new();
    let a = t.create().await;
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/octet-stream",
    ] {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .content_type(ct)
                    .raw(r#"{"value": 1}"#),
            )
            .await;
        r.err(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    }
    // JSON content types with parameters or a +json suffix are fine.
    for ct in [
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ] {
        let r = t
            .send(
                put(a.key("k"))
                    .bearer(&a.token)
                    .content_type(ct)
                    .raw(r#"{"value": 1}"#),
            )
            .await;
        r.ok(StatusCode::OK);
    }
}

#[tokio::test]
async fn state_rejects_bad_keys_with_400() {
    let t = TestApp::new();
    let a = t.create().await;
    let bad_keys = [
        "k".repeat(129),
        "a%20b".into(),
        "a%2Fb".into(),
        "a+b".into(),
        "a%40b".into(),
        "a%2Ab".into(),
        "%C3%A9".into(),
        "a%00b".into(),
        "a%22b".into(),
        "~tilde".into(),
    ];
    for key in &bad_keys {
        let r = t.put_state(&a, key, &json!({"value": 1})).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "PUT {key}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let r = t.send(get(a.key(key)).bearer(&a.token)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "GET {key}: {}", r.text);
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let r = t.send(delete(a.key(key)).bearer(&a.token)).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "DELETE {key}: {}",
            r.text
        );
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    // 128 characters and every allowed character are fine.
    let long = "k".repeat(128);
    t.put_state(&a, &long, &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "AZaz09._:-", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    let r = t.send(get(a.key("AZaz09._:-")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["key"], "AZaz09._:-");
    assert_eq!(t.inspect(&a).await["usage"]["state_keys"], 2);
}

#[tokio::test]
async fn state_key_count_limit() {
    let t = TestApp::with_limits(|l| l.max_state_keys = 2);
    let a = t.create().await;
    t.put_state(&a, "k1", &json!({"value": 1}))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "k2", &json!({"value": 2}))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "k3", &json!({"value": 3}))
        .await
        .err(StatusCode::CONFLICT, "state_limit_exceeded");
    // Overwriting an existing key is fine at the limit.
    t.put_state(&a, "k2", &json!({"value": 22}))
        .await
        .ok(StatusCode::OK);
    // Freeing a key makes room.
    t.send(delete(a.key("k1")).bearer(&a.token))
        .await
        .ok(StatusCode::OK);
    t.put_state(&a, "k3", &json!({"value": 3}))
        .await
        .ok(StatusCode::OK);
    let r = t.send(get(a.state()).bearer(&a.token)).await;
    let l = r.ok(StatusCode::OK);
    assert_eq!(l["state_keys"], 2);
    assert_eq!(l["limits"], json!({"max_keys": 2, "max_bytes": 65536}));
    // 5 successful writes, no event for the refused one.
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 5);
}

#[tokio::test]
async fn state_byte_limit_and_values_that_can_never_fit() {
    let t = TestApp::with_limits(|l| l.max_state_bytes = 200);
    let a = t.create().await;
    let s = |n: usize| json!({"value": "x".repeat(n)});

    // "a" + a 133-character string (135 bytes of JSON) + 64 = 200: exactly fits.
    t.put_state(&a, "a", &s(133)).await.ok(StatusCode::OK);
    // Any other key now breaks the byte limit.
    t.put_state(&a, "b", &json!({"value": 1}))
        .await
        .err(StatusCode::CONFLICT, "state_limit_exceeded");
    // 201 bytes alone can never fit.
    t.put_state(&a, "a", &s(134))
        .await
        .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    t.put_state(&a, "c", &s(1000))
        .await
        .err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    // Replacing counts the new size, not both.
    t.put_state(&a, "a", &s(53)).await.ok(StatusCode::OK); // 120 bytes
    t.put_state(&a, "b", &s(13)).await.ok(StatusCode::OK); // 80 bytes: 200 in all
    t.put_state(&a, "b", &s(14))
        .await
        .err(StatusCode::CONFLICT, "state_limit_exceeded");
    let r = t.send(get(a.state()).bearer(&a.token)).await;
    let l = r.ok(StatusCode::OK);
    assert_eq!(l["state_bytes"], 200);
    assert_eq!(l["state_keys"], 2);
    assert_eq!(l["keys"][0]["size"], 120);
    assert_eq!(l["keys"][1]["size"], 80);
    assert_eq!(l["limits"]["max_bytes"], 200);
    // The refused writes changed nothing.
    let r = t.send(get(a.key("b")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["value"], "x".repeat(13));
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 3);

    // A declared Content-Length far over anything acceptable is 413 before reading.
    let r = t
        .send(
            put(a.key("a"))
                .bearer(&a.token)
                .content_type("application/json")
                .header("content-length", "1000000000")
                .raw(r#"{"value": 1}"#),
        )
        .await;
    r.err(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

// ---------------------------------------------------------------------------------------------
// §8 Service routes, unknown routes, wrong methods
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn healthz_reports_ok_and_the_store() {
    let t = TestApp::new();
    let r = t.send(get("/healthz")).await;
    let b = r.ok(StatusCode::OK);
    assert_eq!(b["status"], "ok");
    assert_eq!(b["store"], "sqlite");
    assert!(b["version"].as_str().is_some_and(|v| !v.is_empty()), "{b}");
}

#[tokio::test]
async fn openapi_describes_every_route() {
    let t = TestApp::new();
    let r = t.send(get("/openapi.json")).await;
    let doc = r.ok(StatusCode::OK);
    let version = doc["openapi"].as_str().expect("openapi version");
    assert!(version.starts_with("3.1"), "{version}");
    let paths = doc["paths"].as_object().expect("paths");
    let expected: &[(&str, &[&str])] = &[
        ("/api/v1/addresses", &["post"]),
        ("/api/v1/addresses/{address_id}", &["get", "delete"]),
        ("/api/v1/inbox/{address_id}/{inbox_secret}", &["post"]),
        ("/api/v1/addresses/{address_id}/events", &["get"]),
        ("/api/v1/addresses/{address_id}/events/{event_id}", &["get"]),
        (
            "/api/v1/addresses/{address_id}/events/{event_id}/ack",
            &["post"],
        ),
        ("/api/v1/addresses/{address_id}/state", &["get"]),
        (
            "/api/v1/addresses/{address_id}/state/{key}",
            &["get", "put", "delete"],
        ),
        ("/healthz", &["get"]),
        ("/openapi.json", &["get"]),
        ("/skill.md", &["get"]),
    ];
    for (path, methods) in expected {
        let item = paths
            .get(*path)
            .unwrap_or_else(|| panic!("{path} missing from /openapi.json"));
        for m in *methods {
            assert!(item.get(*m).is_some(), "{m} {path} missing");
        }
    }
    assert_eq!(paths.len(), expected.len(), "{:?}", paths.keys());
}

#[tokio::test]
async fn skill_md_names_the_essentials() {
    let t = TestApp::new();
    let r = t
        .send(get("/skill.md").header("host", "example.test"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let ct = r.header("content-type").unwrap_or("");
    assert!(ct.starts_with("text/markdown"), "{ct}");
    for needle in [
        "http://example.test/api/v1/addresses",
        "read_token",
        "next_cursor",
        "ack",
    ] {
        assert!(r.text.contains(needle), "skill.md lacks {needle}");
    }
    assert!(!r.text.contains("{base}"), "unreplaced placeholder");
}

#[tokio::test]
async fn unknown_routes_are_404_json() {
    let t = TestApp::new();
    let a = t.create().await;
    for (method, path) in [
        (Method::GET, "/".to_owned()),
        (Method::GET, "/nope".to_owned()),
        (Method::GET, "/api/v1".to_owned()),
        (Method::GET, "/api/v2/addresses".to_owned()),
        (Method::POST, "/api/v1/inbox".to_owned()),
        (Method::GET, format!("{}/unknown", a.root)),
        (Method::GET, format!("{}/events/x/y/z", a.root)),
        (Method::POST, format!("{}/extra", a.inbox)),
    ] {
        let r = t.send(req(method.clone(), &path).bearer(&a.token)).await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            r.text
        );
        r.err(StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn wrong_methods_are_405_json() {
    let t = TestApp::new();
    let a = t.create().await;
    let (event_id, _) = t.deliver_ok(&a, &json!({})).await;
    for (method, path) in [
        (Method::GET, CREATE.to_owned()),
        (Method::DELETE, CREATE.to_owned()),
        (Method::PUT, a.root.clone()),
        (Method::POST, a.root.clone()),
        (Method::PATCH, a.root.clone()),
        (Method::GET, a.inbox.clone()),
        (Method::PUT, a.inbox.clone()),
        (Method::POST, a.events()),
        (Method::DELETE, a.event(&event_id)),
        (Method::POST, a.event(&event_id)),
        (Method::GET, a.ack(&event_id)),
        (Method::POST, a.state()),
        (Method::DELETE, a.state()),
        (Method::POST, a.key("k")),
        (Method::PATCH, a.key("k")),
        (Method::POST, "/healthz".to_owned()),
        (Method::DELETE, "/openapi.json".to_owned()),
        (Method::PUT, "/skill.md".to_owned()),
    ] {
        let r = t.send(req(method.clone(), &path).bearer(&a.token)).await;
        assert_eq!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}: {}",
            r.text
        );
        r.err(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    }
    // Nothing was changed by the refused requests.
    let d = t.inspect(&a).await;
    assert_eq!(d["usage"]["last_sequence"], 1);
    assert_eq!(d["usage"]["state_keys"], 0);
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn secrets_appear_only_in_the_create_response() {
    let t = TestApp::new();
    let r = t
        .send(post(CREATE).ip(&fresh_ip()).json(&json!({"name": "n"})))
        .await;
    let created = r.ok(StatusCode::CREATED).clone();
    let a = addr_of(&created);
    assert!(r.text.contains(&a.token) && r.text.contains(&a.inbox_secret));

    let mut seen: Vec<(String, Resp)> = Vec::new();
    let mut record = |what: &str, r: Resp| seen.push((what.to_owned(), r));
    let (event_id, _) = t.deliver_ok(&a, &json!({"type": "t", "data": 1})).await;
    record(
        "deliver",
        t.send(
            post(&a.inbox)
                .json(&json!({"x": 1}))
                .header("idempotency-key", "same"),
        )
        .await,
    );
    record(
        "duplicate",
        t.send(
            post(&a.inbox)
                .json(&json!({"x": 1}))
                .header("idempotency-key", "same"),
        )
        .await,
    );
    record(
        "reused key",
        t.send(
            post(&a.inbox)
                .json(&json!({"x": 2}))
                .header("idempotency-key", "same"),
        )
        .await,
    );
    record("inspect", t.send(get(&a.root).bearer(&a.token)).await);
    record("events", t.send(get(a.events()).bearer(&a.token)).await);
    record(
        "event",
        t.send(get(a.event(&event_id)).bearer(&a.token)).await,
    );
    record("ack", t.send(post(a.ack(&event_id)).bearer(&a.token)).await);
    record(
        "put",
        t.send(put(a.key("k")).bearer(&a.token).json(&json!({"value": 1})))
            .await,
    );
    record(
        "conflict",
        t.send(
            put(a.key("k"))
                .bearer(&a.token)
                .json(&json!({"value": 1, "if_revision": 0})),
        )
        .await,
    );
    record("get state", t.send(get(a.key("k")).bearer(&a.token)).await);
    record("list state", t.send(get(a.state()).bearer(&a.token)).await);
    record(
        "delete state",
        t.send(delete(a.key("k")).bearer(&a.token)).await,
    );
    record(
        "bad key",
        t.send(get(a.key("a%20b")).bearer(&a.token)).await,
    );
    record(
        "bad query",
        t.send(get(format!("{}?after=x", a.events())).bearer(&a.token))
            .await,
    );
    record(
        "wrong token on another id",
        t.send(get("/api/v1/addresses/addr_x").bearer(&a.token))
            .await,
    );
    record(
        "basic",
        t.send(get(&a.root).header("authorization", format!("Basic {}", a.token)))
            .await,
    );
    record(
        "inbox secret as token",
        t.send(get(&a.root).bearer(&a.inbox_secret)).await,
    );
    record(
        "secret on another id",
        t.send(post(format!("/api/v1/inbox/addr_other/{}", a.inbox_secret)).json(&json!({})))
            .await,
    );
    record(
        "inbox with token",
        t.send(post(format!("/api/v1/inbox/{}/{}", a.id, a.token)).json(&json!({})))
            .await,
    );
    record("405 on inbox", t.send(get(&a.inbox)).await);
    record(
        "404 below inbox",
        t.send(post(format!("{}/x", a.inbox))).await,
    );
    record("openapi", t.send(get("/openapi.json")).await);
    record("skill", t.send(get("/skill.md")).await);
    record("delete", t.send(delete(&a.root).bearer(&a.token)).await);
    record("gone", t.send(get(&a.root).bearer(&a.token)).await);
    record("gone inbox", t.send(post(&a.inbox).json(&json!({}))).await);

    for (what, r) in &seen {
        for (name, secret) in [("read token", &a.token), ("inbox secret", &a.inbox_secret)] {
            assert!(
                !r.text.contains(secret.as_str()),
                "{what} echoed the {name}: {}",
                r.text
            );
            for (h, v) in &r.headers {
                let v = String::from_utf8_lossy(v.as_bytes());
                assert!(
                    !v.contains(secret.as_str()),
                    "{what} header {h} echoed the {name}"
                );
            }
        }
    }
    assert!(seen.len() > 20);
}

// ---------------------------------------------------------------------------------------------
// Edges: concurrency, page boundaries, fidelity, robustness
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_with_the_same_if_revision_exactly_one_wins() {
    let t = TestApp::new();
    let a = t.create().await;
    t.put_state(&a, "k", &json!({"value": 0}))
        .await
        .ok(StatusCode::OK);
    let mut tasks = Vec::new();
    for n in 1..=10 {
        let app = t.app.clone();
        let r = put(a.key("k"))
            .bearer(&a.token)
            .json(&json!({"value": n, "if_revision": 1}));
        tasks.push(tokio::spawn(async move { send_to(&app, r).await }));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        let r = task.await.expect("task");
        if r.status == StatusCode::OK {
            winners.push(r.json.clone());
        } else {
            r.err(StatusCode::CONFLICT, "revision_conflict");
            losers.push(r.json["error"]["current_revision"].clone());
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(losers.len(), 9);
    assert_eq!(winners[0]["revision"], 2);
    assert!(losers.iter().all(|c| *c == 2), "{losers:?}");
    let r = t.send(get(a.key("k")).bearer(&a.token)).await;
    assert_eq!(r.ok(StatusCode::OK)["value"], winners[0]["value"]);
    assert_eq!(t.inspect(&a).await["usage"]["last_sequence"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deliveries_get_gapless_unique_sequences() {
    let t = TestApp::new();
    let a = t.create().await;
    let mut tasks = Vec::new();
    for n in 0..20 {
        let app = t.app.clone();
        let r = post(&a.inbox).json(&json!({"n": n}));
        tasks.push(tokio::spawn(async move { send_to(&app, r).await }));
    }
    let mut got = Vec::new();
    for task in tasks {
        let r = task.await.expect("task");
        got.push(
            r.ok(StatusCode::ACCEPTED)["event"]["sequence"]
                .as_u64()
                .expect("seq"),
        );
    }
    got.sort_unstable();
    assert_eq!(got, (1..=20).collect::<Vec<u64>>());
    let page = t.events(&a, "").await;
    assert_eq!(seqs(&page), (1..=20).collect::<Vec<u64>>());
}

#[tokio::test]
async fn has_more_is_false_when_a_full_page_ends_the_feed() {
    let t = TestApp::new();
    let a = t.create().await;
    for n in 1..=4 {
        t.deliver_ok(&a, &json!({"n": n})).await;
    }
    let p = t.events(&a, "after=2&limit=2").await;
    assert_eq!(seqs(&p), vec![3, 4]);
    assert_eq!(p["has_more"], false, "{p}");
    assert_eq!(p["next_cursor"], 4);
}

#[tokio::test]
async fn pages_are_cut_at_4_mib_but_hold_at_least_one_event() {
    let t = TestApp::with_limits(|l| l.max_inbox_bytes = 5_000_000);
    let a = t.create().await;
    let big = |n: usize| post(&a.inbox).content_type("text/plain").raw("a".repeat(n));
    for _ in 0..3 {
        t.send(big(1_500_000)).await.ok(StatusCode::ACCEPTED);
    }
    t.send(big(4_500_000)).await.ok(StatusCode::ACCEPTED);
    let p = t.events(&a, "").await;
    assert_eq!(seqs(&p), vec![1, 2]);
    assert_eq!(
        (p["has_more"].clone(), p["next_cursor"].clone()),
        (json!(true), json!(2))
    );
    let p = t.events(&a, "after=2").await;
    assert_eq!(seqs(&p), vec![3]);
    assert_eq!(p["has_more"], true);
    // One event over the page cap still comes, alone.
    let p = t.events(&a, "after=3").await;
    assert_eq!(seqs(&p), vec![4]);
    assert_eq!(p["has_more"], false);
    assert_eq!(
        p["events"][0]["data"]["text"].as_str().map(str::len),
        Some(4_500_000)
    );
}

#[tokio::test]
async fn numbers_and_key_order_survive_exactly() {
    let t = TestApp::new();
    let a = t.create().await;
    let body = r#"{"z":12345678901234567890123456789,"a":1.50,"m":-0.0}"#;
    t.send(post(&a.inbox).content_type("application/json").raw(body))
        .await
        .ok(StatusCode::ACCEPTED);
    let r = t.send(get(a.events()).bearer(&a.token)).await;
    r.ok(StatusCode::OK);
    assert!(r.text.contains(body), "data changed: {}", r.text);
    // State values too.
    let value = r#"{"big":99999999999999999999999,"x":1.50}"#;
    let r = t
        .send(
            put(a.key("n"))
                .bearer(&a.token)
                .content_type("application/json")
                .raw(format!(r#"{{"value":{value}}}"#)),
        )
        .await;
    r.ok(StatusCode::OK);
    let r = t.send(get(a.key("n")).bearer(&a.token)).await;
    r.ok(StatusCode::OK);
    assert!(r.text.contains(value), "value changed: {}", r.text);
}

#[tokio::test]
async fn deeply_nested_json_never_breaks_the_server() {
    let t = TestApp::new();
    let a = t.create().await;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    // The inbox keeps it (as text if it cannot be parsed).
    t.send(
        post(&a.inbox)
            .content_type("application/json")
            .raw(deep.clone()),
    )
    .await
    .ok(StatusCode::ACCEPTED);
    let p = t.events(&a, "").await;
    assert_eq!(seqs(&p), vec![1]);
    // A state value that deep is refused as a bad request, not a server error.
    let r = t
        .send(
            put(a.key("deep"))
                .bearer(&a.token)
                .content_type("application/json")
                .raw(format!(r#"{{"value":{deep}}}"#)),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
    let r = t
        .send(
            post(CREATE)
                .ip(&fresh_ip())
                .content_type("application/json")
                .raw(format!(r#"{{"name":{deep}}}"#)),
        )
        .await;
    r.err(StatusCode::BAD_REQUEST, "invalid_request");
    // Moderately nested values are fine.
    let ok = format!("{}1{}", "[".repeat(50), "]".repeat(50));
    t.send(
        put(a.key("nested"))
            .bearer(&a.token)
            .content_type("application/json")
            .raw(format!(r#"{{"value":{ok}}}"#)),
    )
    .await
    .ok(StatusCode::OK);
    t.send(get("/healthz")).await.ok(StatusCode::OK);
}

#[tokio::test]
async fn polls_with_bad_credentials_do_not_spend_the_address_budget() {
    let t = TestApp::with_limits(|l| l.polls_per_minute = 3);
    let a = t.create().await;
    for _ in 0..10 {
        t.send(get(a.events()).bearer("aat_wrong"))
            .await
            .err(StatusCode::UNAUTHORIZED, "unauthorized");
        t.send(get(a.events()))
            .await
            .err(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    for _ in 0..3 {
        t.events(&a, "").await;
    }
    t.send(get(a.events()).bearer(&a.token))
        .await
        .assert_rate_limited();
}

#[tokio::test]
async fn envelope_type_and_source_length_limits() {
    let t = TestApp::new();
    let a = t.create().await;
    let t128 = "t".repeat(128);
    let s200 = "s".repeat(200);
    t.deliver_ok(&a, &json!({"type": t128, "source": s200, "data": 1}))
        .await;
    let long_type = json!({"type": "t".repeat(129), "data": 1});
    t.deliver_ok(&a, &long_type).await;
    let long_source = json!({"type": "ok", "source": "s".repeat(201), "data": 1});
    t.deliver_ok(&a, &long_source).await;
    let p = t.events(&a, "").await;
    let e = &p["events"];
    assert_eq!(
        (
            e[0]["type"].clone(),
            e[0]["source"].clone(),
            e[0]["data"].clone()
        ),
        (json!(t128), json!(s200), json!(1))
    );
    assert_eq!(
        (e[1]["type"].clone(), e[1]["data"].clone()),
        (json!("http.request"), long_type)
    );
    // Nothing is lost: the whole body is the data.
    assert_eq!(e[2]["data"], long_source);
    assert_eq!(e[2]["source"], Value::Null);
}
