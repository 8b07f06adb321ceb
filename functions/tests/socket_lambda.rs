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
