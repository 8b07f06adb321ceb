//! Wake hooks' routes (docs/API.md §19): made, listed, paused, deleted and tested; the create
//! body's hooks; every refusal of a URL, a pattern, a header, a format or a debounce.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};

use crate::common::*;

fn hooks_of(a: &Addr) -> String {
    format!("{}/hooks", a.root)
}

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A receiver on loopback answering `status` to every POST of `/wake`.
async fn receiver(status: u16) -> (Seen, String) {
    let seen: Seen = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/wake",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock().expect("seen").push((headers, body));
                StatusCode::from_u16(status).expect("status")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/wake", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (seen, url)
}

#[tokio::test]
async fn hooks_are_made_listed_paused_and_deleted() {
    let t = TestApp::with_hook_sender(true);
    let a = t.create().await;
    let r = t
        .send(post(hooks_of(&a)).bearer(&a.token).json(&json!({
            "url": "http://127.0.0.1:9/wake",
            "types": ["email.*", "request.answered", "email.*"],
            "format": "github-dispatch",
            "headers": {"Authorization": "Bearer gh-token-value", "X-GitHub-Api-Version": "2022-11-28"},
            "debounce_seconds": 60
        })))
        .await;
    let made = r.ok(StatusCode::CREATED).clone();
    let hook = &made["hook"];
    let id = hook["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("hk_"), "{id}");
    assert!(made["signing_secret"]
        .as_str()
        .expect("secret")
        .starts_with("whsec_"));
    assert_eq!(hook["types"], json!(["email.*", "request.answered"]));
    assert_eq!(hook["format"], "github-dispatch");
    assert_eq!(
        hook["header_names"],
        json!(["authorization", "x-github-api-version"])
    );
    assert_eq!(hook["debounce_seconds"], 60);
    assert_eq!(hook["status"], "active");
    assert_eq!(hook["delivered_through"], 0);
    assert!(hook["created_at"].is_string());

    let listed = t.send(get(hooks_of(&a)).bearer(&a.token)).await;
    let body = listed.ok(StatusCode::OK).clone();
    assert_eq!(body["hooks"][0]["id"], id.as_str());
    assert!(!listed.text.contains("gh-token-value"), "no header value");
    assert!(!listed.text.contains("whsec_"), "no secret");

    let one = format!("{}/{id}", hooks_of(&a));
    let paused = t
        .send(
            put(&one)
                .bearer(&a.token)
                .json(&json!({"status": "paused"})),
        )
        .await;
    assert_eq!(paused.ok(StatusCode::OK)["hook"]["status"], "paused");
    let bad = t
        .send(
            put(&one)
                .bearer(&a.token)
                .json(&json!({"status": "disabled"})),
        )
        .await;
    assert!(
        bad.err(StatusCode::BAD_REQUEST, "invalid_request")["message"]
            .as_str()
            .expect("message")
            .contains("status")
    );
    let active = t
        .send(
            put(&one)
                .bearer(&a.token)
                .json(&json!({"status": "active"})),
        )
        .await;
    assert_eq!(active.ok(StatusCode::OK)["hook"]["status"], "active");

    // Another address's token does not reach it; an unknown or malformed id is 404.
    let other = t.create().await;
    t.send(get(hooks_of(&a)).bearer(&other.token))
        .await
        .err(StatusCode::UNAUTHORIZED, "unauthorized");
    t.send(delete(format!("{}/{id}", hooks_of(&other))).bearer(&other.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    t.send(delete(format!("{}/nothook", hooks_of(&a))).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");

    let gone = t.send(delete(&one).bearer(&a.token)).await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    t.send(delete(&one).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    let listed = t.send(get(hooks_of(&a)).bearer(&a.token)).await;
    assert_eq!(listed.ok(StatusCode::OK)["hooks"], json!([]));
}

#[tokio::test]
async fn an_address_has_at_most_five_hooks() {
    let t = TestApp::with_hook_sender(true);
    let a = t.create().await;
    for _ in 0..5 {
        t.send(
            post(hooks_of(&a))
                .bearer(&a.token)
                .json(&json!({"url": "http://127.0.0.1:9/w"})),
        )
        .await
        .ok(StatusCode::CREATED);
    }
    let sixth = t
        .send(
            post(hooks_of(&a))
                .bearer(&a.token)
                .json(&json!({"url": "http://127.0.0.1:9/w"})),
        )
        .await;
    assert!(sixth.err(StatusCode::CONFLICT, "quota_exceeded")["message"]
        .as_str()
        .expect("message")
        .contains("hooks"));
}

#[tokio::test]
async fn the_create_body_makes_hooks_with_their_secrets() {
    let t = TestApp::with_hook_sender(true);
    let (created, a) = t
        .create_with(&json!({"task_id": "t-1", "hooks": [
            {"url": "http://127.0.0.1:9/a", "types": ["request.*"]},
            {"url": "http://127.0.0.1:9/b", "format": "slack"}
        ]}))
        .await;
    let hooks = created["hooks"].as_array().expect("hooks");
    assert_eq!(hooks.len(), 2);
    assert!(hooks[0]["signing_secret"]
        .as_str()
        .expect("secret")
        .starts_with("whsec_"));
    assert_eq!(hooks[0]["hook"]["types"], json!(["request.*"]));
    assert_eq!(hooks[1]["hook"]["format"], "slack");
    let listed = t.send(get(hooks_of(&a)).bearer(&a.token)).await;
    let ids: Vec<&Value> = listed.ok(StatusCode::OK)["hooks"]
        .as_array()
        .expect("hooks")
        .iter()
        .map(|h| &h["id"])
        .collect();
    assert_eq!(ids, vec![&hooks[0]["hook"]["id"], &hooks[1]["hook"]["id"]]);
    // Without hooks, the answer has none.
    let (plain, _) = t.create_with(&json!({})).await;
    assert!(plain.get("hooks").is_none());

    // A bad hook refuses the whole creation, naming the entry.
    let r = t
        .send(post(CREATE).ip(&fresh_ip()).json(&json!({"hooks": [
            {"url": "http://127.0.0.1:9/a"}, {"url": "http://127.0.0.1:9/b", "types": []}
        ]})))
        .await;
    let message = r.err(StatusCode::BAD_REQUEST, "invalid_request")["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(message.contains("hooks[1]"), "{message}");
    let six: Vec<Value> = (0..6)
        .map(|_| json!({"url": "http://127.0.0.1:9/a"}))
        .collect();
    t.send(post(CREATE).ip(&fresh_ip()).json(&json!({ "hooks": six })))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
}

#[tokio::test]
async fn hook_urls_that_reach_inward_are_refused() {
    let t = TestApp::with_hook_sender(false);
    let a = t.create().await;
    for (url, rule) in [
        ("http://hooks.example/wake", "https"),
        ("ftp://hooks.example/wake", "https"),
        ("https://user:pw@hooks.example/wake", "user"),
        ("https://127.0.0.1/wake", "not a public address"),
        ("https://[::1]/wake", "not a public address"),
        ("https://10.1.2.3/wake", "not a public address"),
        (
            "https://169.254.169.254/latest/meta-data",
            "not a public address",
        ),
        ("https://100.64.0.1/wake", "not a public address"),
        ("https://[::ffff:192.168.0.1]/wake", "not a public address"),
        ("https://[fd00::1]/wake", "not a public address"),
        ("https://localhost/wake", "local"),
        ("https://localhost./wake", "local"),
        ("not a url", "URL"),
    ] {
        let r = t
            .send(
                post(hooks_of(&a))
                    .bearer(&a.token)
                    .json(&json!({ "url": url })),
            )
            .await;
        let message = r.err(StatusCode::BAD_REQUEST, "invalid_hook_url")["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(message.contains(rule), "{url}: {message}");
    }
    // In the create body too, before anything is stored.
    t.send(
        post(CREATE)
            .ip(&fresh_ip())
            .json(&json!({"hooks": [{"url": "https://127.0.0.1/"}]})),
    )
    .await
    .err(StatusCode::BAD_REQUEST, "invalid_hook_url");
    let listed = t.send(get(hooks_of(&a)).bearer(&a.token)).await;
    assert_eq!(listed.ok(StatusCode::OK)["hooks"], json!([]));
}

#[tokio::test]
async fn bad_hook_bodies_are_refused_by_field() {
    let t = TestApp::with_hook_sender(true);
    let a = t.create().await;
    let long_pattern = "a".repeat(200);
    let fifty: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
    let six_headers: serde_json::Map<String, Value> =
        (0..6).map(|i| (format!("x-h{i}"), json!("v"))).collect();
    let cases: Vec<(Value, &str)> = vec![
        (json!({}), "url"),
        (json!({"url": 7}), "url"),
        (json!({"url": "http://127.0.0.1:9/", "types": []}), "types"),
        (
            json!({"url": "http://127.0.0.1:9/", "types": "email.*"}),
            "types",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "types": ["email..x"]}),
            "empty",
        ),
        (json!({"url": "http://127.0.0.1:9/", "types": ["**"]}), "**"),
        (
            json!({"url": "http://127.0.0.1:9/", "types": [long_pattern]}),
            "100",
        ),
        (json!({"url": "http://127.0.0.1:9/", "types": fifty}), "20"),
        (
            json!({"url": "http://127.0.0.1:9/", "format": "xml"}),
            "format",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": {"content-type": "text/plain"}}),
            "content-type",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": {"Webhook-Id": "x"}}),
            "Webhook-Id",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": {"x-a": "secret-value\r\nhost: evil"}}),
            "line break",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": {"bad name": "v"}}),
            "token",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": {"x-a": "v".repeat(1025)}}),
            "1024",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "headers": six_headers}),
            "at most 5",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "debounce_seconds": 3601}),
            "3600",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "debounce_seconds": -1}),
            "debounce_seconds",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "debounce_seconds": 1.5}),
            "debounce_seconds",
        ),
    ];
    for (body, mention) in cases {
        let r = t
            .send(post(hooks_of(&a)).bearer(&a.token).json(&body))
            .await;
        let message = r.err(StatusCode::BAD_REQUEST, "invalid_request")["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(message.contains(mention), "{body}: {message}");
        assert!(!message.contains("secret-value"), "{message}");
    }
    t.send(
        post(hooks_of(&a))
            .bearer(&a.token)
            .raw("[1]")
            .content_type("application/json"),
    )
    .await
    .err(StatusCode::BAD_REQUEST, "invalid_request");
    let listed = t.send(get(hooks_of(&a)).bearer(&a.token)).await;
    assert_eq!(
        listed.ok(StatusCode::OK)["hooks"],
        json!([]),
        "nothing was made"
    );
}

#[tokio::test]
async fn a_test_wake_is_sent_at_once_and_signed() {
    let t = TestApp::with_hook_sender(true);
    let a = t.create().await;
    let (seen, url) = receiver(204).await;
    let made = t
        .send(
            post(hooks_of(&a))
                .bearer(&a.token)
                .json(&json!({"url": url, "headers": {"x-token": "abc"}})),
        )
        .await;
    let made = made.ok(StatusCode::CREATED).clone();
    let id = made["hook"]["id"].as_str().expect("id");
    let secret = made["signing_secret"].as_str().expect("secret");
    let r = t
        .send(post(format!("{}/{id}/test", hooks_of(&a))).bearer(&a.token))
        .await;
    let answer = r.ok(StatusCode::OK);
    assert_eq!(answer["status"], 204);
    assert!(answer["ms"].is_u64());
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1);
    let (headers, body) = &seen[0];
    let wake: Value = serde_json::from_slice(body).expect("json");
    assert_eq!(wake["type"], "hook.test");
    assert_eq!(wake["hook_id"], id);
    assert_eq!(headers["x-token"], "abc");
    let webhook_id = headers["webhook-id"].to_str().expect("id");
    assert!(
        webhook_id.starts_with(&format!("{id}_test_")),
        "{webhook_id}"
    );
    let config = agentaddress_core::domain::verification::VerificationConfig::from_json(
        &json!({"scheme": "standard-webhooks", "secret": secret}),
    )
    .expect("config");
    let pairs: Vec<(&str, &[u8])> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
        .iter()
        .map(|n| (*n, headers[*n].as_bytes()))
        .collect();
    let checked = agentaddress_core::domain::verification::verify(&config, &pairs, body, t.now());
    assert_eq!(checked.reason, None);

    // A receiver that is not there: 502 with the reason.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let made = t
        .send(
            post(hooks_of(&a))
                .bearer(&a.token)
                .json(&json!({"url": format!("http://{closed}/wake")})),
        )
        .await;
    let id = made.ok(StatusCode::CREATED)["hook"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let r = t
        .send(post(format!("{}/{id}/test", hooks_of(&a))).bearer(&a.token))
        .await;
    let message = r.err(StatusCode::BAD_GATEWAY, "hook_unreachable")["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(message.contains("no answer"), "{message}");
}

#[tokio::test]
async fn a_deployment_without_a_hook_sender_says_so() {
    let t = TestApp::new();
    let a = t.create().await;
    t.send(
        post(hooks_of(&a))
            .bearer(&a.token)
            .json(&json!({"url": "https://hooks.example/"})),
    )
    .await
    .err(StatusCode::NOT_IMPLEMENTED, "not_supported");
    // Listing needs no sender.
    t.send(get(hooks_of(&a)).bearer(&a.token))
        .await
        .ok(StatusCode::OK);
}
