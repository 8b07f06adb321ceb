//! §6 of docs/API.md, "Waiting polls": with a cap on the waits of a deployment, a long poll
//! takes a waiting slot only when it starts to wait, hands it back when it answers, and one
//! over the cap is answered at once with 503 `unavailable` and `Retry-After` — never a hang;
//! deliveries are never refused for it.

use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::json;

use crate::common::{get, TestApp};

#[tokio::test]
async fn waits_over_the_cap_are_answered_at_once_with_503() {
    let t = std::sync::Arc::new(TestApp::with_waiting_cap(2));
    let a = t.create().await;
    let b = t.create().await;
    let c = t.create().await;
    // Two polls wait (the real clock's 3 s; the manual clock does not end waits).
    let waiting: Vec<_> = [&a, &b]
        .into_iter()
        .map(|x| {
            let t = t.clone();
            let url = format!("{}?wait=3", x.events());
            let token = x.token.clone();
            tokio::spawn(async move { t.send(get(url).bearer(&token)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A third is refused at once, with its Retry-After.
    let started = Instant::now();
    let r = t
        .send(get(format!("{}?wait=3", c.events())).bearer(&c.token))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered at once"
    );
    r.err(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert_eq!(r.header("retry-after"), Some("5"));
    // A poll that has something to answer takes no slot: answered at once, 200.
    t.deliver_ok(&c, &json!({"type": "x"})).await;
    let r = t
        .send(get(format!("{}?wait=3", c.events())).bearer(&c.token))
        .await;
    r.ok(StatusCode::OK);
    // Deliveries are never refused for waits: one to a waiting address ends its wait.
    t.deliver_ok(&a, &json!({"type": "wake"})).await;
    let mut answers = Vec::new();
    for w in waiting {
        answers.push(w.await.expect("join"));
    }
    assert_eq!(answers[0].ok(StatusCode::OK)["events"][0]["type"], "wake");
    answers[1].ok(StatusCode::OK);
    // Handed back: a new wait gets a slot again.
    let r = t
        .send(get(format!("{}?wait=1&after=1", c.events())).bearer(&c.token))
        .await;
    r.ok(StatusCode::OK);
}
