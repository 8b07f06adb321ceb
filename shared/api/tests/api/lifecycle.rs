//! §2 of docs/API.md, inspect and delete, and what follows: expiry at the second, tombstones
//! answering 410 `address_gone`, and forgotten tombstones.

use agentaddress_core::store::prelude::*;
use http::{Method, StatusCode};
use serde_json::json;

use crate::common::{bearer_routes, delete, get, post, route_req, Addr, TestApp};

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
