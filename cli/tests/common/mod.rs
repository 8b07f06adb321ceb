//! What the CLI's integration tests share: starting `agentaddress serve`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts `agentaddress serve --listen LISTEN --db DB EXTRA…` (warn-level logs) and returns it
/// with the base URL from its first stdout line.
pub async fn spawn_serve(db: &Path, listen: &str, extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentaddress"))
        .args(["serve", "--listen", listen, "--db"])
        .arg(db)
        .args(extra)
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
        .unwrap_or_else(|| panic!("agentaddress serve exited before listening (on {listen})"));
    let base = line
        .strip_prefix("agentaddress listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    (child, base)
}
