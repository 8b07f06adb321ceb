//! What the CLI's integration tests share: starting `agentaddress serve`.
// Each test crate includes this module and uses only part of it.
#![allow(dead_code)]

pub mod net;
pub mod raw;
pub mod smtp;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// `agentaddress serve` as a test starts it: every test that runs the server builds it here,
/// then [`listening`](Self::listening) (a server to talk to), [`spawn`](Self::spawn) (the
/// process, its output the test's to read) or [`output`](Self::output) (a run to its end, such
/// as a refused start-up). Its stdout is piped and it is killed when dropped; its environment,
/// stdin and stderr are the test's unless set.
pub struct ServeCommand {
    cmd: Command,
    /// What runs, for messages: `agentaddress serve` or `WRAPPER … agentaddress serve`.
    what: String,
    /// The arguments after `serve`, for messages.
    args: Vec<String>,
    /// The `--listen` address, for messages.
    listen: Option<String>,
}

impl ServeCommand {
    /// `agentaddress serve`.
    pub fn new() -> Self {
        Self::of(
            Command::new(env!("CARGO_BIN_EXE_agentaddress")),
            "agentaddress serve",
        )
    }

    /// `PROGRAM ARGS… agentaddress serve`: the server run by a wrapper, such as `prlimit`.
    pub fn under(program: &str, args: &[&str]) -> Self {
        let mut cmd = Command::new(program);
        cmd.args(args).arg(env!("CARGO_BIN_EXE_agentaddress"));
        Self::of(cmd, &format!("{program} … agentaddress serve"))
    }

    fn of(mut cmd: Command, what: &str) -> Self {
        cmd.arg("serve").stdout(Stdio::piped()).kill_on_drop(true);
        Self {
            cmd,
            what: what.to_owned(),
            args: Vec::new(),
            listen: None,
        }
    }

    /// `--listen ADDR`.
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = Some(addr.to_owned());
        self.args(["--listen", addr])
    }

    /// `--db DB`.
    pub fn db(self, db: impl AsRef<OsStr>) -> Self {
        self.arg("--db").arg(db)
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_string_lossy().into_owned());
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        args.into_iter().fold(self, Self::arg)
    }

    /// `RUST_LOG=LEVEL`.
    pub fn rust_log(self, level: &str) -> Self {
        self.env("RUST_LOG", level)
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.cmd.env_remove(key);
        self
    }

    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    pub fn stdin(mut self, stdin: Stdio) -> Self {
        self.cmd.stdin(stdin);
        self
    }

    pub fn stderr(mut self, stderr: Stdio) -> Self {
        self.cmd.stderr(stderr);
        self
    }

    /// Starts it; nothing is read.
    pub fn spawn(mut self) -> Child {
        let what = &self.what;
        self.cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"))
    }

    /// Starts it and reads its first stdout line (within 30 s): the server, its base URL, and
    /// the rest of its stdout (where `--log-format json` writes; keep it to keep the pipe open).
    pub async fn listening(self) -> (Child, String, BufReader<ChildStdout>) {
        let on = match &self.listen {
            Some(listen) => format!(" (on {listen})"),
            None => String::new(),
        };
        let what = self.what.clone();
        let mut child = self.spawn();
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout from {what}"));
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(30), reader.read_line(&mut line))
            .await
            .unwrap_or_else(|_| panic!("{what} did not start within 30 s"))
            .expect("reading the server's stdout");
        assert!(n > 0, "{what} exited before listening{on}");
        let base = line
            .trim_end()
            .strip_prefix("agentaddress listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        (child, base, reader)
    }

    /// Runs it to its end (within `within`), its stdout and stderr captured unless set.
    pub async fn output(mut self, within: Duration) -> Output {
        let (what, args) = (&self.what, &self.args);
        tokio::time::timeout(within, self.cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{what} {args:?} did not exit within {within:?}"))
            .unwrap_or_else(|e| panic!("run {what} {args:?}: {e}"))
    }
}

/// Starts `agentaddress serve --listen LISTEN --db DB EXTRA…` (warn-level logs) and returns it
/// with the base URL from its first stdout line.
pub async fn spawn_serve(db: &Path, listen: &str, extra: &[&str]) -> (Child, String) {
    let (child, base, _) = spawn_serve_with(db, listen, extra, "warn", Stdio::inherit()).await;
    (child, base)
}

/// [`spawn_serve`] on a free port of 127.0.0.1 with a database in a fresh temporary directory:
/// the server, its base URL, and the directory (removed when dropped).
pub async fn server(extra: &[&str]) -> (Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) =
        spawn_serve(&dir.path().join("agentaddress.db"), "127.0.0.1:0", extra).await;
    (child, base, dir)
}

/// [`spawn_serve`] with `RUST_LOG` and the server's stderr chosen by the test; also returns the
/// rest of the server's stdout after its first line (where `--log-format json` writes).
pub async fn spawn_serve_with(
    db: &Path, listen: &str, extra: &[&str], rust_log: &str, stderr: Stdio,
) -> (Child, String, BufReader<ChildStdout>) {
    ServeCommand::new()
        .listen(listen)
        .db(db)
        .args(extra)
        .rust_log(rust_log)
        .stderr(stderr)
        .listening()
        .await
}

/// [`spawn_serve`] with the SMTP door on a free port (`--smtp-listen 127.0.0.1:0`): returns the
/// server, its base URL, the SMTP address from its second stdout line, and the rest of stdout.
pub async fn spawn_serve_smtp(
    db: &Path, extra: &[&str],
) -> (Child, String, String, BufReader<ChildStdout>) {
    let mut args = vec!["--smtp-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (child, base, mut reader) =
        spawn_serve_with(db, "127.0.0.1:0", &args, "warn", Stdio::inherit()).await;
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(30), reader.read_line(&mut line))
        .await
        .unwrap_or_else(|_| panic!("no SMTP line within 30 s"))
        .expect("reading the server's stdout");
    let smtp = line
        .trim_end()
        .strip_prefix("agentaddress smtp listening on ")
        .unwrap_or_else(|| panic!("unexpected second line: {line:?}"))
        .to_owned();
    (child, base, smtp, reader)
}
