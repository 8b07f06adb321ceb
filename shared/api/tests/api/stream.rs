//! The event stream (docs/API.md §14) and requests for a person: a request expiring while a
//! stream is open gets its `request.expired` event onto the stream on time — whether the
//! request existed when the stream opened or was created while it was open — as it ends a
//! long poll. In process (the router's answer body read frame by frame), with the manual clock
//! for the request's minute; the last second passes in real time while the stream waits.

use std::time::Duration;

use axum::body::Body;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::*;

async fn ask(app: &TestApp, a: &Addr, seconds: u64) -> Value {
    let r = app
        .send(
            post(format!("{}/requests", a.root))
                .bearer(&a.token)
                .json(&json!({"title": "Still there?", "expires_in_seconds": seconds})),
        )
        .await;
    r.ok(StatusCode::CREATED)["request"].clone()
}

async fn open(app: &TestApp, a: &Addr) -> Body {
    let response = app
        .app
        .clone()
        .oneshot(
            get(format!("{}/events/stream", a.root))
                .bearer(&a.token)
                .build(),
        )
        .await
        .expect("the router never fails");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "a stream"
    );
    response.into_body()
}

/// The `data:` of the next event block of `body` (skipping comments), within `limit`.
async fn next_event(body: &mut Body, text: &mut String, limit: Duration) -> Value {
    tokio::time::timeout(limit, async {
        loop {
            if let Some(end) = text.find("\n\n") {
                let block: String = text.drain(..end + 2).collect();
                if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return serde_json::from_str(data).expect("data is JSON");
                }
                continue;
            }
            let frame = body
                .frame()
                .await
                .expect("the stream stays open")
                .expect("a frame");
            if let Ok(data) = frame.into_data() {
                text.push_str(&String::from_utf8_lossy(&data));
            }
        }
    })
    .await
    .expect("an event before the limit")
}

async fn expires_onto_the_stream(created_before_the_stream: bool) {
    let app = TestApp::new();
    let a = app.create().await;
    // 59 s of the request's minute pass on the manual clock (before the stream opens, or,
    // for a request created while it is open, before the stream reads its wake-up); the last
    // second passes in real time while the stream waits.
    let (mut body, r) = if created_before_the_stream {
        let r = ask(&app, &a, 60).await;
        app.advance(59);
        (open(&app, &a).await, r)
    } else {
        let body = open(&app, &a).await;
        let r = ask(&app, &a, 60).await;
        app.advance(59);
        (body, r)
    };
    let clock = app.clock.clone();
    let advance = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        clock.advance_secs(1);
    });
    let mut text = String::new();
    // Well before the stream's first heartbeat (15 s) or its end.
    let event = next_event(&mut body, &mut text, Duration::from_secs(10)).await;
    advance.await.expect("advance task");
    assert_eq!(event["type"], "request.expired", "{event}");
    assert_eq!(event["data"]["request_id"], r["id"]);
    assert_eq!(event["sequence"], 1);
}

#[tokio::test]
async fn a_request_expiring_reaches_an_open_stream() {
    expires_onto_the_stream(true).await;
}

#[tokio::test]
async fn a_request_created_while_a_stream_is_open_expires_onto_it() {
    expires_onto_the_stream(false).await;
}
