//! The black-box HTTP suite against the Lambda stack (`scripts/lambda-local`: the real function
//! binaries under `cargo lambda watch`, DynamoDB Local, the SQS emulator and the purge worker),
//! exactly as it runs against `agentaddress serve` — and the purge, checked in the table.
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL` and
//! `AGENTADDRESS_LAMBDA_TABLE`; without them these tests fail loudly, never skip.

use std::time::{Duration, Instant};

use agentaddress_blackbox::scenarios;
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;

use agentaddress_blackbox::stack_env as env;

use agentaddress_blackbox::stack_client as client;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_life() {
    scenarios::agent_life(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limits() {
    scenarios::limits(&client()).await;
}

/// A waiting filtered long poll is answered with a timer's event within 5 s of its time
/// (docs/API.md §20).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timer_wakes_a_filtered_long_poll() {
    agentaddress_blackbox::timers::a_timer_wakes_a_filtered_long_poll(
        &client(),
        std::time::Duration::from_secs(5),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_filtered_poll_wakes_only_for_a_match() {
    agentaddress_blackbox::filtered::a_filtered_poll_wakes_only_for_a_match(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn survives_restart() {
    // Every invocation is a fresh process over DynamoDB: a fresh client is the restart.
    scenarios::survives_restart(&client(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cas_increments() {
    scenarios::concurrent_cas_increments(&client(), 16, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verified_webhooks() {
    agentaddress_blackbox::verification::verified_webhooks(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sender_handshakes() {
    agentaddress_blackbox::senders::handshakes(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sender_schemes() {
    agentaddress_blackbox::senders::schemes(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn service_routes() {
    let c = client();
    scenarios::service_routes(&c).await;
    let r = c.get("/healthz", None).await;
    assert_eq!(r.json["store"], "dynamodb", "{}", r.text);
}

/// DELETE marks the address deleted at once; the purge queue consumer then removes every item
/// of the address but its tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleted_address_is_purged_from_the_table() {
    let c = client();
    let table = env("AGENTADDRESS_LAMBDA_TABLE");
    let a = c.new_address().await;
    for n in 0..12 {
        c.deliver(&a, &json!({"n": n}), Some(&format!("k{n}")))
            .await
            .expect_status(202, "deliver");
    }
    c.json(
        "PUT",
        &format!("{}/k", a.state_url),
        Some(&a.token),
        &json!({"value": 1}),
    )
    .await
    .expect_status(200, "put");
    let sdk = agentaddress_aws::sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let items = || async {
        ddb.query()
            .table_name(&table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(format!("A#{}", a.id)))
            .consistent_read(true)
            .send()
            .await
            .expect("query the table")
            .items()
            .iter()
            .filter_map(|i| i.get("sk").and_then(|v| v.as_s().ok()).cloned())
            .collect::<Vec<String>>()
    };
    assert!(
        items().await.len() >= 12 + 12 + 2,
        "the items are in the table"
    );
    c.send("DELETE", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(204, "delete");
    c.get(&a.events_url, Some(&a.token))
        .await
        .expect_error(410, "address_gone", "gone at once");
    let started = Instant::now();
    loop {
        let left = items().await;
        if left == vec!["META".to_owned()] {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "purge did not finish within 60 s; left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    c.get(&a.events_url, Some(&a.token)).await.expect_error(
        410,
        "address_gone",
        "the tombstone still answers 410",
    );
}
