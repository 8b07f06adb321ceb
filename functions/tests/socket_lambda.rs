//! The wake-up socket on the local Lambda stack (docs/API.md §17): API Gateway's WebSocket API
//! as agentaddress-wsgateway emulates it, the `ws` function answering its frames over DynamoDB
//! Local, and the appending functions posting `notify` through its Management API. The same
//! scenarios as `serve`'s (`agentaddress_blackbox::sockets`).

use agentaddress_blackbox::sockets::{self, Deployment};
use agentaddress_blackbox::Client;

fn client() -> Client {
    match std::env::var("AGENTADDRESS_LAMBDA_URL") {
        Ok(url) if !url.is_empty() => Client::behind_gateway(&url),
        _ => panic!(
            "AGENTADDRESS_LAMBDA_URL is not set: run scripts/test, which starts the local Lambda stack"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_append_is_covered_by_a_notify_under_16_writers() {
    sockets::every_append_is_covered_under_16_writers(&client(), Deployment::Gateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_learns_nothing_and_deletion_says_gone() {
    sockets::wrong_token_learns_nothing_and_deletion_says_gone(&client()).await;
}

/// The expiry watch: a delayed message on the purge queue, handled by the purge worker (the
/// purge function on AWS); SQS's delays are whole seconds, and the worker may be busy with a
/// purge of the same batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_says_gone() {
    sockets::expiry_says_gone(&client(), std::time::Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_and_subscriptions_are_capped() {
    sockets::sockets_and_subscriptions_are_capped(&client()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_never_crash_anything() {
    sockets::hostile_frames_never_crash_anything(
        &client(),
        Deployment::Gateway,
        10_000,
        "/healthz",
    )
    .await;
}

/// The gateway emulator's base (`http://HOST:PORT`), from the socket URL handed out.
fn gateway(ws_url: &str) -> String {
    let rest = ws_url.trim_start_matches("ws://");
    format!("http://{}", rest.split('/').next().unwrap_or(rest))
}

/// 25 sockets subscribing at once: exactly 20 are taken (the subscribe transactions are
/// conditioned on the address's counter, so racing subscribes cannot all pass the cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_subscribes_respect_the_cap_exactly() {
    let c = client();
    let a = c.new_address().await;
    let url = sockets::ws_url(&a);
    let mut all = Vec::new();
    for _ in 0..25 {
        all.push(sockets::connect(&url).await);
    }
    let answers = futures::future::join_all(all.iter_mut().map(|ws| {
        let frame = sockets::subscribe(&a, 0);
        async move {
            // `unavailable` (contention outlasted the server's retries) is safe to retry.
            let mut answer = serde_json::Value::Null;
            for _ in 0..3 {
                sockets::send(ws, frame.clone()).await;
                answer = sockets::next(ws).await.unwrap_or_default();
                if answer["code"] != "unavailable" {
                    break;
                }
            }
            answer
        }
    }))
    .await;
    let taken = answers.iter().filter(|f| f["type"] == "subscribed").count();
    let refused = answers
        .iter()
        .filter(|f| f["code"] == "quota_exceeded")
        .count();
    assert_eq!((taken, refused), (20, 5), "{answers:?}");
}

/// A subscription whose connection vanished without `$disconnect` (API Gateway answers 410
/// for it) is removed by the first notifier that meets it; a throttled post (429) is tried
/// again, and the subscriber is still told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_connections_are_unsubscribed_and_throttled_posts_retried() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let c = client();
    let table = std::env::var("AGENTADDRESS_LAMBDA_TABLE")
        .unwrap_or_else(|_| panic!("AGENTADDRESS_LAMBDA_TABLE is not set: run scripts/test"));
    let a = c.new_address().await;
    let sdk = agentaddress_dynamodb::sdk_config().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let ttl = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        + 3600)
        .to_string();
    ddb.put_item()
        .table_name(&table)
        .item("pk", AttributeValue::S(format!("A#{}", a.id)))
        .item("sk", AttributeValue::S("W#vanishedConnId=".into()))
        .item("conn", AttributeValue::S("vanishedConnId=".into()))
        .item("ttl", AttributeValue::N(ttl))
        .send()
        .await
        .unwrap_or_else(|e| panic!("put a dangling subscription: {e:?}"));
    let url = sockets::ws_url(&a);
    let mut ws = sockets::connect(&url).await;
    sockets::send(&mut ws, sockets::subscribe(&a, 0)).await;
    assert_eq!(
        sockets::next(&mut ws).await.unwrap_or_default()["type"],
        "subscribed"
    );
    let http = reqwest::Client::new();
    let gw = gateway(&url);
    let stats = |http: reqwest::Client, gw: String| async move {
        http.get(format!("{gw}/__wsgateway/stats"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("stats: {e}"))
            .json::<serde_json::Value>()
            .await
            .unwrap_or_default()
    };
    let before = stats(http.clone(), gw.clone()).await;
    http.post(format!("{gw}/__wsgateway/throttle"))
        .json(&serde_json::json!({"posts": 2}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("throttle: {e}"));
    c.deliver(&a, &serde_json::json!({"n": 1}), None)
        .await
        .expect_status(202, "deliver");
    let f = sockets::next(&mut ws).await.unwrap_or_default();
    assert_eq!(f["type"], "notify", "{f}");
    assert_eq!(f["last_sequence"], 1, "{f}");
    let after = stats(http.clone(), gw.clone()).await;
    let grew = |k: &str| after[k].as_u64().unwrap_or(0) > before[k].as_u64().unwrap_or(0);
    assert!(
        grew("throttled"),
        "posts were throttled: {before} -> {after}"
    );
    assert!(
        grew("gone"),
        "the vanished connection was answered 410: {before} -> {after}"
    );
    let left = ddb
        .get_item()
        .table_name(&table)
        .key("pk", AttributeValue::S(format!("A#{}", a.id)))
        .key("sk", AttributeValue::S("W#vanishedConnId=".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap_or_else(|e| panic!("get: {e:?}"));
    assert!(left.item.is_none(), "the gone connection is unsubscribed");
}
