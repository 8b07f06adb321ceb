//! Filtered waits (docs/API.md §21) for any deployment: a long poll with `types` is ended only
//! by a matching append and its cursor passes over the others; a socket subscribed with `types`
//! is told only of matching appends.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::sockets::{self, connect, next, send};
use crate::{Address, Client};

async fn deliver(c: &Client, a: &Address, event_type: &str) -> u64 {
    let r = c
        .deliver(
            a,
            &json!({"type": event_type, "data": {"t": event_type}}),
            None,
        )
        .await;
    r.expect_status(202, "deliver");
    r.json["event"]["sequence"].as_u64().unwrap_or_default()
}

fn sequences(page: &Value) -> Vec<u64> {
    page["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(|e| e["sequence"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// A long poll for `order.*` waits through three `ping`s and answers the `order.paid` that
/// follows, with its cursor; the next poll from that cursor passes over a later `ping`.
pub async fn a_filtered_poll_wakes_only_for_a_match(c: &Client) {
    let a = c.new_address().await;
    deliver(c, &a, "ping").await;
    let poll = {
        let (c, a) = (c.clone(), a.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let r = c.events(&a, "after=0&types=order.*&wait=20").await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..3 {
        deliver(c, &a, "ping").await;
    }
    // Long enough for a poll woken by a ping to have answered (at most 300 ms between checks
    // on AWS, and a read).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!poll.is_finished(), "a non-matching append ended the wait");
    let paid = deliver(c, &a, "order.paid").await;
    let (r, waited) = poll.await.expect("poll task");
    r.expect_status(200, "the filtered poll");
    assert_eq!(sequences(&r.json), vec![paid], "{}", r.text);
    assert_eq!(r.json["next_cursor"], paid);
    assert!(
        waited < Duration::from_secs(19),
        "answered only at its end: {waited:?}"
    );

    deliver(c, &a, "ping").await;
    let r = c
        .events(&a, &format!("after={paid}&types=order.*&wait=1"))
        .await;
    r.expect_status(200, "a filtered poll with no match");
    assert_eq!(
        r.json,
        json!({"events": [], "next_cursor": paid + 1, "has_more": false}),
        "the cursor passes the ping"
    );
    let r = c.events(&a, "after=0&types=a..b").await;
    r.expect_error(400, "invalid_request", "a bad pattern");
}

/// A socket subscribed with `types: ["order.*"]` hears nothing of a `ping`, then a `notify` for
/// the `order.created` after it; a bad `types` is refused with `invalid_request`.
pub async fn a_filtered_socket_is_told_only_of_matches(c: &Client) {
    let a = c.new_address().await;
    let mut ws = connect(&sockets::ws_url(&a)).await;
    send(
        &mut ws,
        json!({"action": "subscribe", "address_id": a.id, "read_token": a.token,
               "types": ["a..b"]}),
    )
    .await;
    let refused = next(&mut ws).await.unwrap_or_default();
    assert_eq!(refused["code"], "invalid_request", "{refused}");
    send(
        &mut ws,
        json!({"action": "subscribe", "address_id": a.id, "read_token": a.token,
               "types": ["order.*"]}),
    )
    .await;
    let subscribed = next(&mut ws).await.unwrap_or_default();
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    deliver(c, &a, "ping").await;
    // Nothing for the ping: the next frame is the pong of a ping sent after it was told (or
    // not) — a notify for the ping would come first.
    tokio::time::sleep(Duration::from_secs(1)).await;
    send(&mut ws, json!({"action": "ping"})).await;
    let frame = next(&mut ws).await.unwrap_or_default();
    assert_eq!(frame["type"], "pong", "told of a ping: {frame}");
    let created = deliver(c, &a, "order.created").await;
    let frame = next(&mut ws).await.unwrap_or_default();
    assert_eq!(
        frame,
        json!({"type": "notify", "address_id": a.id, "last_sequence": created})
    );
}
