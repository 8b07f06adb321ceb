//! §21 of docs/API.md, filtered waits: `types=` on the feed and the stream (only matching
//! events; the cursor passes over the others; 1,000 examined per page; a wait ended only by a
//! matching append), and the wait for a person's answer (`GET {root}/requests/{id}?wait=`).

use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::{json, Value};

use crate::common::*;

async fn typed(t: &TestApp, a: &Addr, event_type: &str) -> u64 {
    t.deliver_ok(a, &json!({"type": event_type, "data": {"t": event_type}}))
        .await
        .1
}

#[tokio::test]
async fn a_filtered_page_holds_matches_and_its_cursor_passes_the_others() {
    let t = TestApp::new();
    let a = t.create().await;
    for ty in ["order.created", "ping", "order.paid", "noise.x"] {
        typed(&t, &a, ty).await;
    }
    let p = t.events(&a, "types=order.*").await;
    assert_eq!(seqs(&p), vec![1, 3]);
    assert_eq!(
        (p["next_cursor"].clone(), p["has_more"].clone()),
        (json!(4), json!(false))
    );
    let p = t.events(&a, "types=ping,noise.*&after=1").await;
    assert_eq!(seqs(&p), vec![2, 4]);
    let p = t.events(&a, "types=nothing.here").await;
    assert_eq!(
        p,
        json!({"events": [], "next_cursor": 4, "has_more": false}),
        "nothing matched: the cursor passes all four"
    );
    // Cut at its limit: the cursor is the last event returned, and more follow.
    let p = t.events(&a, "types=*&limit=2").await;
    assert_eq!(seqs(&p), vec![1, 2]);
    assert_eq!(
        (p["next_cursor"].clone(), p["has_more"].clone()),
        (json!(2), json!(true))
    );
    // Percent-encoded and duplicated patterns are the same filter.
    let p = t.events(&a, "types=order.%2A%2Corder.paid").await;
    assert_eq!(seqs(&p), vec![1, 3]);
}

#[tokio::test]
async fn bad_patterns_are_400_and_append_nothing() {
    let t = TestApp::new();
    let a = t.create().await;
    typed(&t, &a, "order.created").await;
    let long = "a".repeat(200);
    let fifty = (0..50)
        .map(|n| format!("t{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let bad = [
        "types=".to_owned(),
        "types=a..b".to_owned(),
        "types=.a".to_owned(),
        "types=a,".to_owned(),
        "types=**".to_owned(),
        "types=*.*".to_owned(),
        "types=email*".to_owned(),
        "types=a%20b".to_owned(),
        format!("types={long}"),
        format!("types={fifty}"),
        "types=a&types=b".to_owned(),
    ];
    for q in &bad {
        let r = t
            .send(get(format!("{}?{q}", a.events())).bearer(&a.token))
            .await;
        let body = r.err(StatusCode::BAD_REQUEST, "invalid_request");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("types")),
            "?{q}: {body}"
        );
        let r = t
            .send(get(format!("{}/stream?{q}", a.events())).bearer(&a.token))
            .await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
    assert_eq!(seqs(&t.events(&a, "").await), vec![1], "nothing appended");
}

#[tokio::test]
async fn a_page_examines_at_most_1000_events() {
    let t = TestApp::with_limits(|l| {
        l.max_retained_events = 5_000;
        l.polls_per_minute = 1_000;
    });
    let a = t.create().await;
    for n in 0..1_003 {
        t.send(
            post(&a.inbox)
                .content_type("text/plain")
                .raw(format!("{n}")),
        )
        .await
        .ok(StatusCode::ACCEPTED);
    }
    typed(&t, &a, "wanted").await;
    let started = Instant::now();
    let p = t.events(&a, "types=wanted&wait=5").await;
    assert_eq!(
        p,
        json!({"events": [], "next_cursor": 1000, "has_more": true}),
        "1,000 examined without a match: answered at once"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let p = t.events(&a, "types=wanted&after=1000").await;
    assert_eq!(seqs(&p), vec![1004]);
    assert_eq!(
        (p["next_cursor"].clone(), p["has_more"].clone()),
        (json!(1004), json!(false))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_long_poll_wakes_for_a_matching_event_only() {
    let t = TestApp::new();
    let a = t.create().await;
    typed(&t, &a, "ping").await;
    let app = t.app.clone();
    let poll = get(format!("{}?types=request.*&wait=10", a.events())).bearer(&a.token);
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let r = send_to(&app, poll).await;
        (started.elapsed(), r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        typed(&t, &a, "ping").await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "a non-matching append ended the wait"
    );
    typed(&t, &a, "request.answered").await;
    let (elapsed, r) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the poll answers")
        .expect("poll task");
    let p = r.ok(StatusCode::OK);
    assert_eq!(seqs(p), vec![5]);
    assert_eq!(p["next_cursor"], 5);
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");

    // A wait that ends without a match carries the cursor past what it examined.
    typed(&t, &a, "ping").await;
    let p = t.events(&a, "types=request.*&after=5&wait=1").await;
    assert_eq!(
        p,
        json!({"events": [], "next_cursor": 6, "has_more": false})
    );
}

#[tokio::test]
async fn a_filtered_stream_sends_only_matching_events() {
    let t = TestApp::new();
    let a = t.create().await;
    for ty in ["ping", "email.received", "ping", "email.bounced"] {
        typed(&t, &a, ty).await;
    }
    let lines = stream_blocks(&t, &a, "types=email.*", 2).await;
    assert_eq!(
        lines,
        vec![
            (2, "email.received".to_owned()),
            (4, "email.bounced".to_owned())
        ]
    );
}

/// The first `n` events of the stream `GET {root}/events/stream?{query}`: (id, event type).
async fn stream_blocks(t: &TestApp, a: &Addr, query: &str, n: usize) -> Vec<(u64, String)> {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = get(format!("{}/stream?{query}", a.events()))
        .bearer(&a.token)
        .build();
    let response = t.app.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let mut text = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("the stream sends in time")
            .expect("a frame")
            .expect("the body");
        if let Ok(data) = frame.into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::trim)
                    .unwrap_or_default()
                    .to_owned()
            };
            if let Ok(id) = field("id:").parse::<u64>() {
                out.push((id, field("event:")));
            }
        }
    }
    out
}

fn requests(a: &Addr) -> String {
    format!("{}/requests", a.root)
}

async fn ask(t: &TestApp, a: &Addr, body: &Value) -> (String, String) {
    let r = t.send(post(requests(a)).bearer(&a.token).json(body)).await;
    let req = &r.ok(StatusCode::CREATED)["request"];
    let url = req["url"].as_str().expect("url");
    let at = url.find("/r/").expect("a page URL holds /r/");
    (
        req["id"].as_str().expect("id").to_owned(),
        url[at..].to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_wait_returns_the_answer_the_moment_it_is_given() {
    let t = TestApp::new();
    let a = t.create().await;
    let (id, page) = ask(&t, &a, &json!({"title": "Deploy?"})).await;
    // Unrelated events do not end the wait.
    let app = t.app.clone();
    let wait = get(format!("{}/{id}?wait=10", requests(&a))).bearer(&a.token);
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let r = send_to(&app, wait).await;
        (started.elapsed(), r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    typed(&t, &a, "ping").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "an unrelated event ended the wait");
    let answered = t
        .send(
            post(&page)
                .content_type("application/x-www-form-urlencoded")
                .raw("choice=Approve"),
        )
        .await;
    assert_eq!(answered.status, StatusCode::SEE_OTHER, "{}", answered.text);
    let (elapsed, r) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the wait answers")
        .expect("wait task");
    let body = r.ok(StatusCode::OK);
    assert_eq!(body["request"]["status"], "answered", "{body}");
    assert_eq!(body["request"]["answer"]["choice"], "Approve");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    // Answered already: at once.
    let started = Instant::now();
    let r = t
        .send(get(format!("{}/{id}?wait=25", requests(&a))).bearer(&a.token))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["request"]["status"], "answered");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_wait_ends_at_its_time_or_its_expiry() {
    let t = TestApp::with_limits(|l| l.max_wait_seconds = 1);
    let a = t.create().await;
    let (id, _) = ask(
        &t,
        &a,
        &json!({"title": "Deploy?", "expires_in_seconds": 60}),
    )
    .await;
    let started = Instant::now();
    let r = t
        .send(get(format!("{}/{id}?wait=30", requests(&a))).bearer(&a.token))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["request"]["status"], "open");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_millis(900) && held < Duration::from_secs(3),
        "{held:?}"
    );
    t.advance(61);
    let r = t
        .send(get(format!("{}/{id}?wait=1", requests(&a))).bearer(&a.token))
        .await;
    assert_eq!(r.ok(StatusCode::OK)["request"]["status"], "expired");
    let feed = t.events(&a, "types=request.expired").await;
    assert_eq!(feed["events"].as_array().map(Vec::len), Some(1), "{feed}");
    for q in ["wait=-1", "wait=abc", "wait=1&wait=2"] {
        let r = t
            .send(get(format!("{}/{id}?{q}", requests(&a))).bearer(&a.token))
            .await;
        r.err(StatusCode::BAD_REQUEST, "invalid_request");
    }
}

#[tokio::test]
async fn a_request_wait_on_a_deleted_address_is_410() {
    let t = TestApp::new();
    let a = t.create().await;
    let (id, _) = ask(&t, &a, &json!({"title": "Deploy?"})).await;
    let r = t.send(delete(&a.root).bearer(&a.token)).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = t
        .send(get(format!("{}/{id}?wait=5", requests(&a))).bearer(&a.token))
        .await;
    r.err(StatusCode::GONE, "address_gone");
}
