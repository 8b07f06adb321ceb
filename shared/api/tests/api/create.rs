//! §1 of docs/API.md, creating an address: defaults, echoed fields, boundary values, bad bodies,
//! content types, body size and the per-IP rate limit.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use agentaddress_api::{self as api, ApiConfig, AppState};
use agentaddress_core::domain::time::format_rfc3339;
use agentaddress_core::domain::Limits;
use agentaddress_core::store::prelude::*;
use agentaddress_sqlite::SqliteStore;
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{addr_of, assert_time, fresh_ip, is_id, post, send_to, TestApp, CREATE};

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

/// Address ids handed out in order from `queue` (then random ones), each recorded in `tried`.
#[derive(Clone, Default)]
struct IdSource {
    queue: Arc<Mutex<VecDeque<String>>>,
    tried: Arc<Mutex<Vec<String>>>,
}

impl IdSource {
    fn next(&self) -> String {
        let id = lock(&self.queue)
            .pop_front()
            .unwrap_or_else(agentaddress_core::domain::ids::new_address_id);
        lock(&self.tried).push(id.clone());
        id
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An app over an in-memory SQLite store whose new address ids come from an [`IdSource`].
fn app_with_ids() -> (axum::Router, Arc<SqliteStore>, IdSource) {
    let store = Arc::new(SqliteStore::open_in_memory().expect("open in-memory SQLite"));
    let source = IdSource::default();
    let ids = source.clone();
    let state = AppState::new(
        store.clone(),
        ApiConfig {
            public_url: None,
            email_domain: "inbox.test".into(),
            limits: Limits::default(),
            email_ingest_secret_hash: None,
            poll_checks: Default::default(),
            max_waiting_polls: 0,
        },
    )
    .with_address_ids(Arc::new(move || ids.next()));
    (api::router(state), store, source)
}

/// Creates an address on `app` and answers its id.
async fn created_id(app: &axum::Router) -> String {
    let r = send_to(app, post(CREATE).ip(&fresh_ip())).await;
    r.ok(StatusCode::CREATED)["address"]["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

#[tokio::test]
async fn a_taken_id_or_email_key_gets_a_fresh_id() {
    let (app, store, ids) = app_with_ids();
    let (a, b) = (created_id(&app).await, created_id(&app).await);
    lock(&ids.tried).clear();
    // An id differing from a taken one only by case takes its email key (docs/API.md §1); then
    // a taken id; then a fresh one.
    lock(&ids.queue).extend([a.to_uppercase(), b.clone()]);
    let r = send_to(&app, post(CREATE).ip(&fresh_ip())).await;
    let body = r.ok(StatusCode::CREATED);
    let id = body["address"]["id"].as_str().expect("id").to_owned();
    let tried = lock(&ids.tried).clone();
    assert_eq!(tried.len(), 3, "two collisions, then a fresh id: {tried:?}");
    assert_eq!(tried.iter().collect::<BTreeSet<_>>().len(), 3, "{tried:?}");
    assert_eq!(tried.last(), Some(&id));
    assert_eq!(body["address"]["email"], format!("{id}@inbox.test"));
    let found = store
        .address_by_email(&format!("{id}@INBOX.TEST"), 0)
        .await
        .expect("lookup")
        .expect("the created address");
    assert_eq!(found.id, id);

    // Three taken in a row: the creation gives up.
    lock(&ids.queue).extend([a.clone(), b.clone(), a.to_uppercase()]);
    send_to(&app, post(CREATE).ip(&fresh_ip()))
        .await
        .err(StatusCode::INTERNAL_SERVER_ERROR, "internal");
}
