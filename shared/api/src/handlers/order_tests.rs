//! Which error a request with several problems gets: the order in which each handler's
//! extractors and checks answer (the token first: docs/API.md §0, "Authentication first"). Each
//! case breaks two or more rules at once; the expected code is the one the first check answers.

use std::sync::Arc;

use agentaddress_sqlite::SqliteStore;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use crate::domain::{Limits, ManualClock};
use crate::{ApiConfig, AppState};

struct App(axum::Router);

/// A request: method, path, headers and body.
struct Case<'a> {
    method: Method,
    path: String,
    headers: Vec<(&'a str, &'a str)>,
    body: Vec<u8>,
}

fn case<'a>(method: Method, path: impl Into<String>) -> Case<'a> {
    Case {
        method,
        path: path.into(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

impl<'a> Case<'a> {
    fn header(mut self, name: &'a str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }

    fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// A body of `n` bytes, declared in Content-Length.
    fn large(self, n: usize) -> Self {
        self.body(vec![b' '; n])
    }
}

impl App {
    fn new() -> Self {
        let store = Arc::new(SqliteStore::open_in_memory().expect("in-memory SQLite"));
        let state = AppState::new(
            store,
            ApiConfig {
                public_url: None,
                email_domain: "inbox.test".into(),
                limits: Limits::default(),
                email_ingest_secret_hash: None,
                poll_checks: Default::default(),
                max_waiting_polls: 0,
            },
        )
        .with_clock(Arc::new(ManualClock::starting_now()));
        App(crate::router(state))
    }

    async fn send(&self, c: Case<'_>) -> (StatusCode, Value) {
        let mut b = Request::builder().method(c.method).uri(c.path);
        for (name, value) in c.headers {
            b = b.header(name, value);
        }
        if !c.body.is_empty() {
            b = b.header("content-length", c.body.len().to_string());
        }
        let request = b.body(Body::from(c.body)).expect("request");
        let response = self.0.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// The error code of `c`'s answer, with its status.
    async fn code(&self, c: Case<'_>) -> (StatusCode, String) {
        let (status, body) = self.send(c).await;
        let code = body["error"]["code"].as_str().unwrap_or("").to_owned();
        (status, code)
    }

    /// A new address: its root path, read token and inbox path.
    async fn create(&self) -> (String, String, String) {
        let (status, body) = self.send(case(Method::POST, "/api/v1/addresses")).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let id = body["address"]["id"].as_str().expect("id").to_owned();
        let token = body["credentials"]["read_token"]
            .as_str()
            .expect("token")
            .to_owned();
        let inbox_url = body["endpoints"]["inbox_url"].as_str().expect("inbox");
        let inbox = inbox_url[inbox_url.find("/api/").expect("path")..].to_owned();
        (format!("/api/v1/addresses/{id}"), token, inbox)
    }
}

fn expect(status: StatusCode, code: &str) -> (StatusCode, String) {
    (status, code.to_owned())
}

#[tokio::test]
async fn each_handler_answers_its_first_failing_check() {
    let app = App::new();
    let (root, token, inbox) = app.create().await;
    let bearer = format!("Bearer {token}");
    let auth = bearer.as_str();
    let long_key = "k".repeat(256);
    let bad = (StatusCode::BAD_REQUEST, "invalid_request");
    let unauthorized = (StatusCode::UNAUTHORIZED, "unauthorized");
    let too_large = (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    let media = (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
    let not_found = (StatusCode::NOT_FOUND, "not_found");
    let outbound = (StatusCode::SERVICE_UNAVAILABLE, "outbound_not_configured");
    let cases: Vec<(Case, (StatusCode, &str))> = vec![
        // A path parameter that does not decode, before the token.
        (case(Method::GET, format!("{root}/events/%FF")), bad),
        // The token before the path's other parameters.
        (
            case(Method::GET, format!("{root}/events/bad!id")),
            unauthorized,
        ),
        (
            case(Method::GET, format!("{root}/state/bad%20key")),
            unauthorized,
        ),
        (
            case(Method::PUT, format!("{root}/state/bad%20key"))
                .header("content-type", "text/plain")
                .large(1 << 20),
            unauthorized,
        ),
        // Then the path's parameters, in order, before the query and the body.
        (
            case(Method::GET, format!("{root}/events/bad!id")).header("authorization", auth),
            bad,
        ),
        (
            case(
                Method::GET,
                format!("{root}/events/bad!id/attachments/bad!id?redirect=x"),
            )
            .header("authorization", auth),
            bad,
        ),
        (
            case(
                Method::GET,
                format!("{root}/events/evt_1/attachments/bad!id?redirect=x"),
            )
            .header("authorization", auth),
            not_found,
        ),
        (
            case(Method::GET, format!("{root}/events/bad!id/raw?redirect=x"))
                .header("authorization", auth),
            bad,
        ),
        (
            case(Method::GET, format!("{root}/requests/bad!id")).header("authorization", auth),
            not_found,
        ),
        (
            case(Method::PUT, format!("{root}/state/bad%20key"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .large(1 << 20),
            bad,
        ),
        (
            case(
                Method::DELETE,
                format!("{root}/state/bad%20key?if_revision=x"),
            )
            .header("authorization", auth),
            bad,
        ),
        // PUT state and replay: the content type before the body's size.
        (
            case(Method::PUT, format!("{root}/state/k"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .large(1 << 20),
            media,
        ),
        (
            case(Method::POST, format!("{root}/email/replay"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .large(8192),
            media,
        ),
        // The other JSON bodies: their size before the content type.
        (
            case(Method::PUT, format!("{root}/verification"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .large(32 * 1024),
            too_large,
        ),
        (
            case(Method::POST, format!("{root}/requests"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .large(256 * 1024),
            too_large,
        ),
        (
            case(Method::POST, format!("{root}/requests"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .body("not json"),
            media,
        ),
        (
            case(Method::POST, "/api/v1/viewer-codes/redeem")
                .header("content-type", "text/plain")
                .large(2048),
            too_large,
        ),
        (
            case(Method::POST, "/api/v1/addresses")
                .header("content-type", "text/plain")
                .large(32 * 1024),
            too_large,
        ),
        (
            case(Method::POST, "/api/v1/addresses")
                .header("content-type", "text/plain")
                .body("x"),
            media,
        ),
        // The Idempotency-Key before the body.
        (
            case(Method::POST, format!("{root}/requests"))
                .header("authorization", auth)
                .header("idempotency-key", &long_key)
                .header("content-type", "text/plain")
                .large(256 * 1024),
            bad,
        ),
        // Outbound email: not configured, before its key and its body.
        (
            case(Method::POST, format!("{root}/email/send"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .large(1 << 20),
            outbound,
        ),
        (
            case(Method::POST, format!("{root}/email/contacts"))
                .header("authorization", auth)
                .header("content-type", "text/plain")
                .large(1 << 20),
            outbound,
        ),
        // The inbox: an unknown inbox before its key; the key before the body.
        (
            case(
                Method::POST,
                format!("{root}x/x").replace("/addresses/", "/inbox/"),
            )
            .header("idempotency-key", ""),
            not_found,
        ),
        (
            case(Method::POST, inbox.as_str())
                .header("idempotency-key", "")
                .large(2_000_000),
            bad,
        ),
    ];
    for (i, (c, (status, code))) in cases.into_iter().enumerate() {
        let what = format!("case {i}: {} {}", c.method, c.path);
        assert_eq!(app.code(c).await, expect(status, code), "{what}");
    }
    // A blank create body is `{}`, whatever its content type.
    let blank = case(Method::POST, "/api/v1/addresses")
        .header("content-type", "text/plain")
        .body(" \n");
    assert_eq!(app.send(blank).await.0, StatusCode::CREATED);
    // A deleted address: 410 before the path's other parameters.
    let deleted = case(Method::DELETE, root.as_str()).header("authorization", auth);
    assert_eq!(app.send(deleted).await.0, StatusCode::NO_CONTENT);
    let gone = case(Method::GET, format!("{root}/events/bad!id")).header("authorization", auth);
    assert_eq!(
        app.code(gone).await,
        expect(StatusCode::GONE, "address_gone")
    );
}
