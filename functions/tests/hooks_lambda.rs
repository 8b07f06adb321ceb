//! Wake hooks on the Lambda stack (docs/API.md §19), black-box: an append that matches a hook
//! sends its address to the wake queue, which `scripts/sqs-to-lambda.py` hands to the `wake`
//! function (the real binary) as Lambda's SQS event source does; the wake reaches a receiver this
//! test runs on loopback (the stack allows private receivers: `scripts/lambda-local`), signed
//! with the hook's secret. A failing receiver is tried again with the same `webhook-id` (the
//! message hidden until the retry is due), a paused hook wakes for what came meanwhile once it
//! is active again, types filter, and a burst is coalesced by the debounce.
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL`; without it these tests
//! fail loudly, never skip.

use std::time::{Duration, Instant};

use agentaddress_blackbox::hooks::{header, receiver, wake_of};
use agentaddress_blackbox::{stack_client as client, stack_env, Address, Client};
use agentaddress_core::domain::verification::{verify, VerificationConfig};
use axum::body::Bytes;
use axum::http::HeaderMap;
use serde_json::{json, Value};

/// The wake verifies with `secret` (the inbound verifier's Standard Webhooks rule).
fn assert_signed(request: &(HeaderMap, Bytes), secret: &str) {
    let config =
        VerificationConfig::from_json(&json!({"scheme": "standard-webhooks", "secret": secret}))
            .expect("config");
    let pairs: Vec<(&str, &[u8])> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
        .iter()
        .map(|n| (*n, request.0.get(*n).expect("signed").as_bytes()))
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    assert_eq!(verify(&config, &pairs, &request.1, now).reason, None);
}

/// Makes a hook on `a` with `body` (its `url` given); its id and signing secret.
async fn add_hook(c: &Client, a: &Address, body: Value) -> (String, String) {
    let added = c
        .json("POST", &format!("{}/hooks", a.root), Some(&a.token), &body)
        .await;
    added.expect_status(201, "add a hook");
    (
        added.json["hook"]["id"].as_str().expect("id").to_owned(),
        added.json["signing_secret"]
            .as_str()
            .expect("secret")
            .to_owned(),
    )
}

async fn deliver_type(c: &Client, a: &Address, event_type: &str) -> u64 {
    let r = c.deliver(a, &json!({"type": event_type}), None).await;
    r.expect_status(202, "deliver");
    r.json["event"]["sequence"]
        .as_u64()
        .unwrap_or_else(|| panic!("no sequence: {}", r.text))
}

async fn hook_of(c: &Client, a: &Address, hook_id: &str) -> Value {
    let listed = c.get(&format!("{}/hooks", a.root), Some(&a.token)).await;
    listed.expect_status(200, "list hooks");
    listed.json["hooks"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["id"] == hook_id))
        .cloned()
        .expect("the hook is listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matching_delivery_wakes_the_receiver_and_a_failed_wake_is_retried_the_same() {
    let c = client();
    let base = stack_env("AGENTADDRESS_LAMBDA_URL");
    let (r, url) = receiver().await;
    let a = c.new_address().await;
    let (hook_id, secret) = add_hook(
        &c,
        &a,
        json!({"url": url, "types": ["order.*"], "headers": {"authorization": "Bearer rcv-7"}}),
    )
    .await;

    // A type the hook does not name wakes nothing; one it names wakes the receiver, covering
    // both (the wake's range is the feed up to its sequence).
    deliver_type(&c, &a, "other.thing").await;
    let started = Instant::now();
    let sequence = deliver_type(&c, &a, "order.created").await;
    let seen = r.wait_for(1, Duration::from_secs(20)).await;
    eprintln!("first wake after {:?}", started.elapsed());
    assert_eq!(seen.len(), 1, "one wake");
    assert_eq!(
        header(&seen[0].0, "webhook-id"),
        format!("{hook_id}_{sequence}")
    );
    assert_eq!(header(&seen[0].0, "authorization"), "Bearer rcv-7");
    assert_signed(&seen[0], &secret);
    let wake = wake_of(&seen[0]);
    assert_eq!(wake["type"], "address.wake");
    assert_eq!(wake["address_id"], a.id);
    assert_eq!(wake["to_sequence"], sequence);
    assert!(
        wake["events_url"]
            .as_str()
            .expect("events_url")
            .starts_with(&base),
        "{wake}"
    );

    // The receiver fails once: the same wake again after the first retry's 10 s (the message
    // hidden until then), and the cursor moves once it is answered.
    r.answer(503);
    let second = deliver_type(&c, &a, "order.paid").await;
    r.wait_for(2, Duration::from_secs(20)).await;
    r.answer(200);
    let failed = hook_of(&c, &a, &hook_id).await;
    assert_eq!(failed["delivered_through"], sequence, "{failed}");
    let seen = r.wait_for(3, Duration::from_secs(45)).await;
    assert_eq!(
        header(&seen[1].0, "webhook-id"),
        format!("{hook_id}_{second}")
    );
    assert_eq!(
        header(&seen[2].0, "webhook-id"),
        format!("{hook_id}_{second}"),
        "the same wake again"
    );
    assert_signed(&seen[2], &secret);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let hook = hook_of(&c, &a, &hook_id).await;
        if hook["delivered_through"] == second {
            assert_eq!(hook["status"], "active");
            break;
        }
        assert!(Instant::now() < deadline, "the cursor never moved: {hook}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(r.seen().len(), 3, "nothing more was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_hook_wakes_for_what_came_meanwhile_once_active_again() {
    let c = client();
    let (r, url) = receiver().await;
    let a = c.new_address().await;
    let (hook_id, _) = add_hook(&c, &a, json!({"url": url})).await;
    let hook_url = format!("{}/hooks/{hook_id}", a.root);
    c.json(
        "PUT",
        &hook_url,
        Some(&a.token),
        &json!({"status": "paused"}),
    )
    .await
    .expect_status(200, "pause");
    let sequence = deliver_type(&c, &a, "while.paused").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(r.seen().is_empty(), "a paused hook wakes nobody");
    c.json(
        "PUT",
        &hook_url,
        Some(&a.token),
        &json!({"status": "active"}),
    )
    .await
    .expect_status(200, "resume");
    let seen = r.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(wake_of(&seen[0])["to_sequence"], sequence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_coalesced_by_the_debounce_and_its_last_event_is_woken_for() {
    let c = client();
    let (r, url) = receiver().await;
    let a = c.new_address().await;
    let (_, _) = add_hook(&c, &a, json!({"url": url, "debounce_seconds": 3})).await;
    let started = Instant::now();
    let mut last = 0;
    for i in 0..40 {
        last = deliver_type(&c, &a, &format!("burst.n{i}")).await;
    }
    let burst = started.elapsed();
    // The last wake covers the last event; one wake per debounce while the burst lasted, and
    // one after, at most (each of the 40 appends queued the address: SQS's duplicates coalesce).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = r.seen();
        if seen
            .last()
            .is_some_and(|w| wake_of(w)["to_sequence"] == last)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no wake reached sequence {last}: {} wakes",
            seen.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let wakes = r.seen().len() as u64;
    let bound = 2 + burst.as_secs() / 3;
    eprintln!("{wakes} wakes for a burst of 40 over {burst:?}");
    assert!(wakes <= bound, "{wakes} wakes, at most {bound} expected");
}
