//! Timers (docs/API.md §20) for any deployment: a timer fires on its own — nobody reading the
//! feed — and tells a subscribed socket within the deployment's bound (`serve`: its scheduler,
//! 1 s; AWS: delayed queue messages, 5 s); a waiting long poll is woken by it; a cancelled timer
//! never fires.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::sockets::{self, connect, next, send};
use crate::{Address, Client, Restartable};

fn millis(rfc3339: &Value) -> i64 {
    let text = rfc3339.as_str().unwrap_or_default();
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("not an RFC 3339 time: {text:?}: {e}"))
        .timestamp_millis()
}

/// `POST {root}/timers` with `body`; the timer (201).
pub async fn set_timer(c: &Client, a: &Address, body: &Value) -> Value {
    let r = c
        .json("POST", &format!("{}/timers", a.root), Some(&a.token), body)
        .await;
    r.expect_status(201, "set a timer");
    r.json["timer"].clone()
}

/// `GET {root}/timers`: the listing.
pub async fn list_timers(c: &Client, a: &Address) -> Vec<Value> {
    let r = c.get(&format!("{}/timers", a.root), Some(&a.token)).await;
    r.expect_status(200, "list timers");
    r.json["timers"].as_array().cloned().unwrap_or_default()
}

/// A timer 2 s ahead fires with nobody reading: a socket subscribed to `timer.*` is told within
/// `bound` of its time (the background path alone: no read fires it); the event is the
/// timer's, once, and the listing says fired.
pub async fn a_timer_fires_on_its_own_and_tells_a_socket(c: &Client, bound: Duration) {
    let a = c.new_address().await;
    let mut ws = connect(&sockets::ws_url(&a)).await;
    send(
        &mut ws,
        json!({"action": "subscribe", "address_id": a.id, "read_token": a.token,
               "types": ["timer.*"]}),
    )
    .await;
    let subscribed = next(&mut ws).await.unwrap_or_default();
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    let set_at = Instant::now();
    let t = set_timer(
        c,
        &a,
        &json!({"in_seconds": 2, "type": "timer.nudge", "data": {"why": "blackbox"}}),
    )
    .await;
    assert_eq!(t["status"], "pending", "{t}");
    let frame = tokio::time::timeout(
        Duration::from_secs(2) + bound + Duration::from_secs(5),
        async {
            loop {
                match next(&mut ws).await {
                    Some(f) if f["type"] == "notify" => return f,
                    Some(_) => continue,
                    None => panic!("the socket closed before the timer fired"),
                }
            }
        },
    )
    .await
    .unwrap_or_else(|_| panic!("no notify within {:?} of the timer", bound));
    let late = set_at.elapsed().saturating_sub(Duration::from_secs(2));
    assert!(
        late <= bound,
        "the timer told its socket {late:?} after its time (bound {bound:?})"
    );
    assert_eq!(frame["address_id"], a.id.as_str(), "{frame}");
    let events = c.read_all(&a).await;
    assert_eq!(events.len(), 1, "one event: {events:?}");
    assert_eq!(events[0]["type"], "timer.nudge");
    assert_eq!(events[0]["source"], "timer");
    assert_eq!(
        events[0]["data"],
        json!({"timer_id": t["id"], "data": {"why": "blackbox"}})
    );
    assert_eq!(frame["last_sequence"], events[0]["sequence"], "{frame}");
    let listed = list_timers(c, &a).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["status"], "fired");
    assert_eq!(listed[0]["event_id"], events[0]["id"]);
}

/// A long poll for `timer.*` that is waiting when a timer falls due is answered with its event
/// within `bound` of its time, however many unrelated deliveries arrive meanwhile.
pub async fn a_timer_wakes_a_filtered_long_poll(c: &Client, bound: Duration) {
    let a = c.new_address().await;
    set_timer(c, &a, &json!({"in_seconds": 3, "type": "timer.deadline"})).await;
    let set_at = Instant::now();
    let poll = {
        let (c, a) = (c.clone(), a.clone());
        tokio::spawn(async move { c.events(&a, "after=0&types=timer.*&wait=20").await })
    };
    for n in 0..3 {
        let r = c
            .deliver(&a, &json!({"type": "ping", "data": {"n": n}}), None)
            .await;
        r.expect_status(202, "deliver a ping");
    }
    let r = poll.await.expect("poll task");
    r.expect_status(200, "the filtered poll");
    let late = set_at.elapsed().saturating_sub(Duration::from_secs(3));
    let events = r.json["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{}", r.text);
    assert_eq!(events[0]["type"], "timer.deadline");
    assert!(
        late <= bound,
        "the poll was answered {late:?} after the timer's time (bound {bound:?})"
    );
}

/// A timer cancelled before its time never fires: its socket hears nothing, the feed stays
/// empty, the listing says cancelled; a bad timer is refused with nothing stored.
pub async fn a_cancelled_timer_never_fires(c: &Client) {
    let a = c.new_address().await;
    let mut ws = connect(&sockets::ws_url(&a)).await;
    send(&mut ws, sockets::subscribe(&a, 0)).await;
    let subscribed = next(&mut ws).await.unwrap_or_default();
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    let t = set_timer(c, &a, &json!({"in_seconds": 2})).await;
    let r = c
        .json(
            "DELETE",
            &format!("{}/timers/{}", a.root, t["id"].as_str().unwrap_or_default()),
            Some(&a.token),
            &Value::Null,
        )
        .await;
    r.expect_status(200, "cancel");
    assert_eq!(r.json["timer"]["status"], "cancelled", "{}", r.text);
    let r = c
        .json(
            "POST",
            &format!("{}/timers", a.root),
            Some(&a.token),
            &json!({"in_seconds": 10, "type": "follow_up"}),
        )
        .await;
    r.expect_error(400, "invalid_request", "a type without `timer.`");
    // Past its time, and past the AWS bound: a notify would have come by now.
    tokio::time::sleep(Duration::from_secs(8)).await;
    send(&mut ws, json!({"action": "ping"})).await;
    let frame = next(&mut ws).await.unwrap_or_default();
    assert_eq!(frame["type"], "pong", "told of something: {frame}");
    assert!(c.read_all(&a).await.is_empty(), "nothing appended");
    let listed = list_timers(c, &a).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["status"], "cancelled");
}

/// Timers pending when the server stops abruptly fire after it starts again, once each, on
/// their own: their events' `received_at` is within `bound` of their `fire_at` although nobody
/// reads the feed until well after; the later one is still pending. Without a server to
/// restart (a deployment), the same without the restart.
pub async fn pending_timers_fire_once_after_a_restart(
    c: &Client, server: Option<&mut dyn Restartable>, bound: Duration,
) {
    let a = c.new_address().await;
    let first = set_timer(c, &a, &json!({"in_seconds": 5, "type": "timer.a"})).await;
    let second = set_timer(c, &a, &json!({"in_seconds": 5, "type": "timer.b"})).await;
    let later = set_timer(c, &a, &json!({"in_seconds": 3600})).await;
    if let Some(server) = server {
        server.restart().await;
    }
    let c = c.reconnected();
    tokio::time::sleep(Duration::from_secs(9)).await;
    let events = c.read_all(&a).await;
    assert_eq!(events.len(), 2, "each fired once: {events:?}");
    for (event, timer) in events.iter().zip([&first, &second]) {
        assert_eq!(event["type"], timer["type"], "{events:?}");
        assert_eq!(event["data"]["timer_id"], timer["id"]);
        let late = millis(&event["received_at"]) - millis(&timer["fire_at"]);
        assert!(
            (0..=i64::try_from(bound.as_millis()).unwrap_or(i64::MAX)).contains(&late),
            "fired {late} ms after its time (bound {bound:?}): by the scheduler, not a read"
        );
    }
    let listed = list_timers(&c, &a).await;
    let status = |id: &Value| {
        listed
            .iter()
            .find(|t| t["id"] == *id)
            .map(|t| t["status"].clone())
    };
    assert_eq!(status(&first["id"]), Some(json!("fired")));
    assert_eq!(status(&second["id"]), Some(json!("fired")));
    assert_eq!(status(&later["id"]), Some(json!("pending")));
}
