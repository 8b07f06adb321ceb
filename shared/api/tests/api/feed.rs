//! §4 and §5 of docs/API.md, reading the feed and acknowledging: pages and cursors, query
//! validation, long polls and their clamping, the per-address poll limit, one event by id, acks.

use std::time::{Duration, Instant};

use agentaddress_core::domain::time::format_rfc3339;
use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{get, post, send_to, seqs, TestApp};

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
