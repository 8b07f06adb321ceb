//! The black-box HTTP suite against `agentaddress serve`.
//!
//! With `AGENTADDRESS_BASE_URL` set, every scenario runs against that deployment instead (the
//! restart scenario then re-reads through a fresh client, since it cannot restart a server it
//! did not start). Otherwise each test starts its own server on a free port and a fresh
//! database file, so tests run in parallel without sharing rate limits.

use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use agentaddress_blackbox::{scenarios, Client, Restartable};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

struct Server {
    child: Option<Child>,
    db: PathBuf,
    listen: String,
    base: String,
    _dir: tempfile::TempDir,
}

async fn spawn(db: &PathBuf, listen: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentaddress"))
        .args(["serve", "--listen", listen, "--db"])
        .arg(db)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start agentaddress serve: {e}"));
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("no stdout from agentaddress serve"));
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("agentaddress serve did not start within 30 s"))
        .unwrap_or_else(|e| panic!("reading the server's stdout: {e}"))
        .unwrap_or_else(|| panic!("agentaddress serve exited before listening"));
    let base = line
        .strip_prefix("agentaddress listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    (child, base)
}

impl Server {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
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
                child
                    .kill()
                    .await
                    .unwrap_or_else(|e| panic!("SIGKILL the server: {e}"));
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
        Ok(url) if !url.trim().is_empty() => (Client::new(url.trim()), None),
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
async fn survives_restart() {
    let (c, mut server) = target().await;
    let restartable = server.as_mut().map(|s| s as &mut dyn Restartable);
    scenarios::survives_restart(&c, restartable).await;
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
