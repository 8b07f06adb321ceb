//! Edges: concurrency, page boundaries, fidelity of numbers and key order, robustness against
//! hostile input.

use http::StatusCode;
use serde_json::{json, Value};

use crate::common::{fresh_ip, get, post, put, send_to, seqs, TestApp, CREATE};

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
