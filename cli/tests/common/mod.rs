//! What the CLI's integration tests share: starting `agentaddress serve`.
// Each test crate includes this module and uses only part of it.
#![allow(dead_code)]

pub mod net;
pub mod raw;
pub mod smtp;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// Starts `agentaddress serve --listen LISTEN --db DB EXTRA…` (warn-level logs) and returns it
/// with the base URL from its first stdout line.
pub async fn spawn_serve(db: &Path, listen: &str, extra: &[&str]) -> (Child, String) {
    let (child, base, _) = spawn_serve_with(db, listen, extra, "warn", Stdio::inherit()).await;
    (child, base)
}

/// [`spawn_serve`] on a free port of 127.0.0.1 with a database in a fresh temporary directory:
/// the server, its base URL, and the directory (removed when dropped).
pub async fn server(extra: &[&str]) -> (Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let (child, base) =
        spawn_serve(&dir.path().join("agentaddress.db"), "127.0.0.1:0", extra).await;
    (child, base, dir)
}

/// [`spawn_serve`] with `RUST_LOG` and the server's stderr chosen by the test; also returns the
/// rest of the server's stdout after its first line (where `--log-format json` writes).
pub async fn spawn_serve_with(
    db: &Path,
    listen: &str,
    extra: &[&str],
    rust_log: &str,
    stderr: Stdio,
) -> (Child, String, BufReader<ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentaddress"))
        .args(["serve", "--listen", listen, "--db"])
        .arg(db)
        .args(extra)
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start agentaddress serve: {e}"));
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("no stdout from agentaddress serve"));
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let n = tokio::time::timeout(Duration::from_secs(30), reader.read_line(&mut line))
        .await
        .unwrap_or_else(|_| panic!("agentaddress serve did not start within 30 s"))
        .unwrap_or_else(|e| panic!("reading the server's stdout: {e}"));
    assert!(
        n > 0,
        "agentaddress serve exited before listening (on {listen})"
    );
    let base = line
        .trim_end()
        .strip_prefix("agentaddress listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    (child, base, reader)
}

/// [`spawn_serve`] with the SMTP door on a free port (`--smtp-listen 127.0.0.1:0`): returns the
/// server, its base URL, the SMTP address from its second stdout line, and the rest of stdout.
pub async fn spawn_serve_smtp(
    db: &Path,
    extra: &[&str],
) -> (Child, String, String, BufReader<ChildStdout>) {
    let mut args = vec!["--smtp-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (child, base, mut reader) =
        spawn_serve_with(db, "127.0.0.1:0", &args, "warn", Stdio::inherit()).await;
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(30), reader.read_line(&mut line))
        .await
        .unwrap_or_else(|_| panic!("no SMTP line within 30 s"))
        .unwrap_or_else(|e| panic!("reading the server's stdout: {e}"));
    let smtp = line
        .trim_end()
        .strip_prefix("agentaddress smtp listening on ")
        .unwrap_or_else(|| panic!("unexpected second line: {line:?}"))
        .to_owned();
    (child, base, smtp, reader)
}
