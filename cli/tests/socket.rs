//! The wake-up socket of `agentaddress serve` (`GET /api/v1/ws`, docs/API.md §17), over a real
//! socket with a real WebSocket client: every append is covered by a later `notify` under 16
//! concurrent writers, a reconnect with its cursor loses nothing, a wrong token learns nothing,
//! the caps, `gone` after deletion, and hostile frames (the scenarios of
//! `agentaddress_blackbox::sockets`, which the Lambda stack runs too); and serve's own: idle
//! and shutdown.

mod common;

use std::time::Duration;

use agentaddress_blackbox::sockets::{self, connect, next, send, subscribe, Deployment};
use agentaddress_blackbox::Client;
use futures::StreamExt;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

struct Server {
    _child: tokio::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) = common::spawn_serve(
        &dir.path().join("ws.db"),
        "127.0.0.1:0",
        &["--creations-per-minute", "10000"],
    )
    .await;
    Server {
        _child: child,
        base,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_append_is_covered_by_a_notify_under_16_writers() {
    let s = server().await;
    sockets::every_append_is_covered_under_16_writers(&Client::new(&s.base), Deployment::Serve)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_learns_nothing_and_deletion_says_gone() {
    let s = server().await;
    sockets::wrong_token_learns_nothing_and_deletion_says_gone(&Client::new(&s.base)).await;
}

/// A timer fires by the scheduler alone and tells its socket within 1 s (docs/API.md §20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_fires_on_its_own_and_tells_a_socket() {
    let s = server().await;
    agentaddress_blackbox::timers::a_timer_fires_on_its_own_and_tells_a_socket(
        &Client::new(&s.base),
        std::time::Duration::from_secs(1),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_timer_never_fires() {
    let s = server().await;
    agentaddress_blackbox::timers::a_cancelled_timer_never_fires(&Client::new(&s.base)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_socket_is_told_only_of_matches() {
    let s = server().await;
    agentaddress_blackbox::filtered::a_filtered_socket_is_told_only_of_matches(&Client::new(
        &s.base,
    ))
    .await;
}

/// `serve` checks the subscribed addresses' liveness every 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_says_gone() {
    let s = server().await;
    sockets::expiry_says_gone(&Client::new(&s.base), Duration::from_secs(32)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_and_subscriptions_are_capped() {
    let s = server().await;
    sockets::sockets_and_subscriptions_are_capped(&Client::new(&s.base)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_never_crash_anything() {
    let s = server().await;
    let health = format!("{}/healthz", s.base);
    sockets::hostile_frames_never_crash_anything(
        &Client::new(&s.base),
        Deployment::Serve,
        10_000,
        &health,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_socket_outlives_the_idle_timeout_and_closes_at_shutdown() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut child, base) = common::spawn_serve(
        &dir.path().join("ws.db"),
        "127.0.0.1:0",
        &[
            "--idle-timeout-seconds",
            "1",
            "--header-timeout-seconds",
            "1",
        ],
    )
    .await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    let mut ws = connect(&sockets::ws_url(&a)).await;
    send(&mut ws, subscribe(&a, 0)).await;
    assert_eq!(
        next(&mut ws).await.unwrap_or_default()["type"],
        "subscribed"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.deliver(&a, &json!({"after": "idle"}), None)
        .await
        .expect_status(202, "deliver");
    let f = next(&mut ws).await.unwrap_or_default();
    assert_eq!(f["type"], "notify", "{f}");
    // SIGTERM: the socket is closed with 1001 (going away).
    let pid = child.id().unwrap_or_else(|| panic!("no pid"));
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let close = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the socket was not closed at shutdown"));
    assert_eq!(close, Some(1001));
    let _ = child.wait().await;
}
