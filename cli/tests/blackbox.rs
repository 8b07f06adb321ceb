//! The black-box HTTP suite against `agentaddress serve`.
//!
//! With `AGENTADDRESS_BASE_URL` set, every scenario runs against that deployment instead (the
//! restart scenario then re-reads through a fresh client, since it cannot restart a server it
//! did not start). Otherwise each test starts its own server on a free port and a fresh
//! database file, so tests run in parallel without sharing rate limits.

mod common;
#[path = "email/mod.rs"]
mod email;

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use agentaddress_blackbox::{scenarios, Client, Restartable};
use tokio::process::Child;

struct Server {
    child: Option<Child>,
    db: PathBuf,
    listen: String,
    base: String,
    _dir: tempfile::TempDir,
}

async fn spawn(db: &Path, listen: &str) -> (Child, String) {
    common::spawn_serve(db, listen, &[]).await
}

impl Server {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("agentaddress.db");
        let (child, base) = spawn(&db, "127.0.0.1:0").await;
        let listen = base.trim_start_matches("http://").to_owned();
        Self {
            child: Some(child),
            db,
            listen,
            base,
            _dir: dir,
        }
    }
}

impl Restartable for Server {
    fn restart(&mut self) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if let Some(mut child) = self.child.take() {
                child.kill().await.expect("SIGKILL the server");
            }
            let mut last = None;
            for _ in 0..50 {
                let (child, base) = spawn(&self.db, &self.listen).await;
                if base == self.base {
                    self.child = Some(child);
                    return;
                }
                last = Some(base);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("restarted server listens on {last:?}, not {}", self.base);
        })
    }
}

/// The deployment under test: an external base URL, or a fresh server of our own.
async fn target() -> (Client, Option<Server>) {
    match std::env::var("AGENTADDRESS_BASE_URL") {
        // A deployment: API Gateway stands in front of it.
        Ok(url) if !url.trim().is_empty() => (Client::behind_gateway(url.trim()), None),
        _ => {
            let server = Server::start().await;
            (Client::new(&server.base), Some(server))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_life() {
    let (c, _server) = target().await;
    scenarios::agent_life(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limits() {
    let (c, _server) = target().await;
    scenarios::limits(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_filtered_poll_wakes_only_for_a_match() {
    let (c, _server) = target().await;
    agentaddress_blackbox::filtered::a_filtered_poll_wakes_only_for_a_match(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn survives_restart() {
    let (c, mut server) = target().await;
    let restartable = server.as_mut().map(|s| s as &mut dyn Restartable);
    scenarios::survives_restart(&c, restartable).await;
}

/// Timers pending across an abrupt restart fire after it, once, by the scheduler (docs/API.md
/// §20: within 1 s on `serve`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_timers_fire_once_after_a_restart() {
    let (c, mut server) = target().await;
    let restartable = server.as_mut().map(|s| s as &mut dyn Restartable);
    agentaddress_blackbox::timers::pending_timers_fire_once_after_a_restart(
        &c,
        restartable,
        Duration::from_secs(1),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timer_wakes_a_filtered_long_poll() {
    let (c, _server) = target().await;
    agentaddress_blackbox::timers::a_timer_wakes_a_filtered_long_poll(&c, Duration::from_secs(1))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cas_increments() {
    let (c, _server) = target().await;
    scenarios::concurrent_cas_increments(&c, 16, 25).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn service_routes() {
    let (c, _server) = target().await;
    scenarios::service_routes(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verified_webhooks() {
    let (c, _server) = target().await;
    agentaddress_blackbox::verification::verified_webhooks(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sender_handshakes() {
    let (c, _server) = target().await;
    agentaddress_blackbox::senders::handshakes(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sender_schemes() {
    let (c, _server) = target().await;
    agentaddress_blackbox::senders::schemes(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_answers_while_the_agent_waits() {
    let (c, _server) = target().await;
    agentaddress_blackbox::requests::a_person_answers_while_the_agent_waits(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_answers_record_one() {
    let (c, _server) = target().await;
    agentaddress_blackbox::requests::concurrent_answers_record_one(&c, 12).await;
}
