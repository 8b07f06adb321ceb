//! Timers (docs/API.md §20): setting one, every refusal with nothing stored or appended, the
//! pending cap, Idempotency-Key, listing and cancelling; a read fires due timers first (the
//! manual clock, no scheduler runs here), and a long poll wakes when one falls due.

use http::StatusCode;
use serde_json::{json, Value};

use agentaddress_core::domain::time::format_rfc3339;

use crate::common::*;

fn timers(a: &Addr) -> String {
    format!("{}/timers", a.root)
}

async fn set(app: &TestApp, a: &Addr, body: &Value) -> Value {
    let r = app.send(post(timers(a)).bearer(&a.token).json(body)).await;
    r.ok(StatusCode::CREATED)["timer"].clone()
}

async fn list(app: &TestApp, a: &Addr) -> Vec<Value> {
    let r = app.send(get(timers(a)).bearer(&a.token)).await;
    r.ok(StatusCode::OK)["timers"]
        .as_array()
        .expect("timers")
        .clone()
}

async fn feed(app: &TestApp, a: &Addr) -> Vec<Value> {
    app.events(a, "after=0").await["events"]
        .as_array()
        .expect("events")
        .clone()
}

#[tokio::test]
async fn a_timer_fires_once_at_its_time_before_any_later_read() {
    let app = TestApp::new();
    let a = app.create().await;
    let t = set(
        &app,
        &a,
        &json!({"in_seconds": 60, "type": "timer.follow_up", "data": {"ticket": 7}}),
    )
    .await;
    let id = t["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("tmr_"), "{t}");
    assert_eq!(t["type"], "timer.follow_up");
    assert_eq!(t["status"], "pending");
    assert_eq!(t["data"], json!({"ticket": 7}));
    assert_eq!(t["closed_at"], Value::Null);
    assert_eq!(t["fire_at"], format_rfc3339(app.now() + 60_000));

    app.advance(59);
    assert!(feed(&app, &a).await.is_empty(), "not yet");
    app.advance(1);
    // No scheduler runs in this suite: the read itself fires it, first.
    let events = feed(&app, &a).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["type"], "timer.follow_up");
    assert_eq!(e["source"], "timer");
    assert_eq!(e["ingress_surface"], "timer");
    assert_eq!(e["data"], json!({"timer_id": id, "data": {"ticket": 7}}));
    assert_eq!(feed(&app, &a).await.len(), 1, "once");

    let listed = list(&app, &a).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["status"], "fired");
    assert_eq!(listed[0]["event_id"], e["id"]);
    assert_eq!(listed[0]["sequence"], e["sequence"]);
    // A fired timer cannot be cancelled.
    let r = app
        .send(delete(format!("{}/{id}", timers(&a))).bearer(&a.token))
        .await;
    r.err(StatusCode::CONFLICT, "timer_fired");
}

#[tokio::test]
async fn a_cancelled_timer_never_fires_and_cancelling_again_answers_the_same() {
    let app = TestApp::new();
    let a = app.create().await;
    let t = set(&app, &a, &json!({"in_seconds": 10})).await;
    assert_eq!(t["type"], "timer.fired", "the default type");
    assert_eq!(t["data"], Value::Null);
    let url = format!("{}/{}", timers(&a), t["id"].as_str().expect("id"));
    let r = app.send(delete(&url).bearer(&a.token)).await;
    let cancelled = r.ok(StatusCode::OK)["timer"].clone();
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled["closed_at"].is_string());
    let again = app.send(delete(&url).bearer(&a.token)).await;
    assert_eq!(again.ok(StatusCode::OK)["timer"], cancelled);
    app.advance(3_600);
    assert!(feed(&app, &a).await.is_empty(), "nothing appended");
    assert_eq!(list(&app, &a).await[0]["status"], "cancelled");

    // Unknown ids, and ids of the wrong shape.
    let unknown = format!("{}/tmr_AAAAAAAAAAAAAAAA", timers(&a));
    app.send(delete(&unknown).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    app.send(delete(format!("{}/req_x", timers(&a))).bearer(&a.token))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
    // Another address's token.
    let b = app.create().await;
    app.send(delete(&url).bearer(&b.token))
        .await
        .err(StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn bad_timers_are_refused_with_nothing_stored() {
    let app = TestApp::new();
    let (_, a) = app
        .create_with(&json!({"expires_in_seconds": 86_400}))
        .await;
    let deep = (0..65).fold(json!(1), |v, _| json!([v]));
    let past = format_rfc3339(app.now() - 5_000);
    let after_expiry = format_rfc3339(app.now() + 2 * 86_400_000);
    let cases = [
        (json!({}), "fire_at"),
        (
            json!({"in_seconds": 10, "fire_at": after_expiry}),
            "not both",
        ),
        (json!({"fire_at": past}), "future"),
        (json!({"fire_at": after_expiry}), "expires"),
        (json!({"fire_at": "tomorrow"}), "RFC 3339"),
        (json!({"fire_at": 1_800_000_000}), "RFC 3339"),
        (json!({"in_seconds": 0}), "in_seconds"),
        (json!({"in_seconds": -5}), "in_seconds"),
        (json!({"in_seconds": 1.5}), "in_seconds"),
        (json!({"in_seconds": 1e300}), "in_seconds"),
        (json!({"in_seconds": "60"}), "in_seconds"),
        (json!({"in_seconds": 10, "type": "follow_up"}), "timer."),
        (json!({"in_seconds": 10, "type": "timer."}), "timer."),
        (json!({"in_seconds": 10, "type": 5}), "timer."),
        (
            json!({"in_seconds": 10, "data": "x".repeat(17 * 1024)}),
            "bytes",
        ),
        (json!({"in_seconds": 10, "data": deep}), "deeper"),
    ];
    for (body, says) in cases {
        let r = app
            .send(post(timers(&a)).bearer(&a.token).json(&body))
            .await;
        let e = r.err(StatusCode::BAD_REQUEST, "invalid_request");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message}");
    }
    // Not an object, not JSON.
    app.send(post(timers(&a)).bearer(&a.token).json(&json!([1])))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    app.send(post(timers(&a)).bearer(&a.token).raw("{"))
        .await
        .err(StatusCode::BAD_REQUEST, "invalid_request");
    // More than a year ahead, for an address that never expires.
    let b = app.create().await;
    app.send(
        post(timers(&b))
            .bearer(&b.token)
            .json(&json!({"in_seconds": 31_536_001})),
    )
    .await
    .err(StatusCode::BAD_REQUEST, "invalid_request");
    set(&app, &b, &json!({"in_seconds": 31_536_000})).await;
    assert!(list(&app, &a).await.is_empty());
    assert!(feed(&app, &a).await.is_empty());
}

#[tokio::test]
async fn the_101st_pending_timer_is_refused_and_keys_make_creation_idempotent() {
    let app = TestApp::new();
    let a = app.create().await;
    let body = json!({"in_seconds": 600, "data": {"n": 1}});
    let first = app
        .send(
            post(timers(&a))
                .bearer(&a.token)
                .header("idempotency-key", "k-1")
                .json(&body),
        )
        .await;
    let first = first.ok(StatusCode::CREATED)["timer"].clone();
    let again = app
        .send(
            post(timers(&a))
                .bearer(&a.token)
                .header("idempotency-key", "k-1")
                .json(&body),
        )
        .await;
    assert_eq!(again.ok(StatusCode::OK)["timer"], first, "the same timer");
    app.send(
        post(timers(&a))
            .bearer(&a.token)
            .header("idempotency-key", "k-1")
            .json(&json!({"in_seconds": 601})),
    )
    .await
    .err(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused");
    for n in 1..100 {
        set(&app, &a, &json!({"in_seconds": 600 + n})).await;
    }
    let r = app
        .send(
            post(timers(&a))
                .bearer(&a.token)
                .json(&json!({"in_seconds": 5})),
        )
        .await;
    let e = r.err(StatusCode::CONFLICT, "quota_exceeded");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("pending timers"),
        "{e}"
    );
    assert_eq!(list(&app, &a).await.len(), 100);
}

#[tokio::test]
async fn a_long_poll_and_a_filtered_one_wake_when_a_timer_falls_due() {
    let app = TestApp::new();
    let a = app.create().await;
    app.deliver_ok(&a, &json!({"type": "other.thing"})).await;
    set(&app, &a, &json!({"in_seconds": 60, "type": "timer.check"})).await;
    app.advance(59);
    let started = std::time::Instant::now();
    let advance = {
        let clock = app.clock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
            clock.advance_secs(1);
        })
    };
    let page = app.events(&a, "after=1&wait=5&types=timer.*").await;
    advance.await.expect("advance task");
    let events = page["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{page}");
    assert_eq!(events[0]["type"], "timer.check");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "woken when it fell due, not at the end of the wait: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn timers_of_a_deleted_address_are_gone() {
    let app = TestApp::new();
    let a = app.create().await;
    set(&app, &a, &json!({"in_seconds": 60})).await;
    let r = app.send(delete(&a.root).bearer(&a.token)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    app.send(get(timers(&a)).bearer(&a.token))
        .await
        .err(StatusCode::GONE, "address_gone");
    app.send(
        post(timers(&a))
            .bearer(&a.token)
            .json(&json!({"in_seconds": 5})),
    )
    .await
    .err(StatusCode::GONE, "address_gone");
}
