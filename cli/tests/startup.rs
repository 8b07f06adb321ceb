//! The first minutes with `agentaddress serve` (README, "The two commands" and
//! "Configuration"), on real processes and real files: the start-up banner on stderr (the
//! machine-read stdout lines unchanged), one server per database file (README, "One server per
//! database file"), logs a person can read (no colour off a terminal, `NO_COLOR`, durations to
//! two decimals, flag values as spelled), fatal start-up errors said once with their cause in
//! words, and every flag of `serve --help` in README's configuration tables.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use agentaddress_blackbox::Client;
use common::ServeCommand;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

const BIN: &str = env!("CARGO_BIN_EXE_agentaddress");

/// The path `serve` shows for a database in `dir`: absolute, symbolic links resolved.
fn canonical(dir: &Path, name: &str) -> PathBuf {
    std::fs::canonicalize(dir)
        .unwrap_or_else(|e| panic!("canonicalize {}: {e}", dir.display()))
        .join(name)
}

/// `agentaddress ARGS…` run to its end within `within`, with `RUST_LOG=info` and no
/// `NO_COLOR` from the environment.
async fn run_to_end(args: &[&str], within: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let out = tokio::time::timeout(
        within,
        Command::new(BIN)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("agentaddress {args:?} did not exit within {within:?}"))
    .unwrap_or_else(|e| panic!("run agentaddress {args:?}: {e}"));
    (out, started.elapsed())
}

/// `agentaddress serve ARGS…` run to its end within `within`, with `RUST_LOG=info` and no
/// `NO_COLOR` from the environment.
async fn serve_to_end(args: &[&str], within: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let out = ServeCommand::new()
        .args(args)
        .rust_log("info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output(within)
        .await;
    (out, started.elapsed())
}

/// A `serve` started by a test: the process, its stdout after the lines read, its stderr.
struct Serve {
    child: Child,
    stdout: BufReader<ChildStdout>,
    stderr: BufReader<ChildStderr>,
}

impl Serve {
    /// `agentaddress serve ARGS…` in `cwd`, with `RUST_LOG=warn`, stdout and stderr piped.
    fn start(cwd: &Path, args: &[&str]) -> Self {
        let mut child = ServeCommand::new()
            .args(args)
            .current_dir(cwd)
            .rust_log("warn")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout from serve"));
        let stderr = child
            .stderr
            .take()
            .unwrap_or_else(|| panic!("no stderr from serve"));
        Self {
            child,
            stdout: BufReader::new(stdout),
            stderr: BufReader::new(stderr),
        }
    }

    /// The next stdout line, within 30 s.
    async fn stdout_line(&mut self) -> String {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(30), self.stdout.read_line(&mut line))
            .await
            .unwrap_or_else(|_| panic!("no stdout line within 30 s"))
            .expect("read serve's stdout");
        line
    }

    /// Stderr lines up to and including the banner's last (`Stop it with Ctrl-C …`).
    async fn banner(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(Duration::from_secs(30), self.stderr.read_line(&mut line))
                .await
                .unwrap_or_else(|_| panic!("no banner within 30 s: {lines:?}"))
                .expect("read serve's stderr");
            assert!(n > 0, "stderr ended before the banner did: {lines:?}");
            let line = line.trim_end().to_owned();
            let last = line.starts_with("Stop it with Ctrl-C");
            lines.push(line);
            if last {
                return lines;
            }
        }
    }

    /// SIGKILL, then everything left on stdout.
    async fn kill_and_rest_of_stdout(mut self) -> String {
        let _ = self.child.kill().await;
        let mut rest = String::new();
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            self.stdout.read_to_string(&mut rest),
        )
        .await;
        rest
    }
}

/// SIGTERM `child` and wait for its clean exit.
async fn terminate(child: &mut Child) {
    let pid = child
        .id()
        .unwrap_or_else(|| panic!("the server exited early"));
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap_or_else(|_| panic!("the server did not stop within 20 s of SIGTERM"))
        .expect("wait for the server");
    assert!(exit.success(), "clean exit after SIGTERM: {exit}");
}

// ---------------------------------------------------------------------------------------------
// One server per database file
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_database_exits_and_the_first_keeps_waking_long_polls() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let db = dir.path().join("agentaddress.db");
    let (first, base) = common::spawn_serve(&db, "127.0.0.1:0", &[]).await;
    let first_pid = first.id().unwrap_or_else(|| panic!("no pid"));
    let c = Client::new(&base);
    let a = c.new_address().await;

    // The same file by another spelling: the lock is the file's, not the spelling's.
    let other_spelling = dir.path().join("sub/../agentaddress.db");
    let (out, took) = serve_to_end(
        &[
            "--listen",
            "127.0.0.1:0",
            "--db",
            &other_spelling.to_string_lossy(),
        ],
        Duration::from_secs(20),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a second serve started: {out:?}");
    assert!(took < Duration::from_secs(5), "it took {took:?} to refuse");
    let lock = format!(
        "{}.lock",
        canonical(dir.path(), "agentaddress.db").display()
    );
    let expected = format!(
        "error: another agentaddress serve (pid {first_pid}) is using {} (lock {lock}); one \
         server per database file",
        canonical(dir.path(), "agentaddress.db").display()
    );
    assert_eq!(stderr.trim_end(), expected, "stderr: {stderr}");
    assert!(!stdout.contains("listening"), "it listened: {stdout}");
    let pid_in_lock = std::fs::read_to_string(&lock).unwrap_or_else(|e| panic!("{lock}: {e}"));
    assert_eq!(
        pid_in_lock.trim(),
        first_pid.to_string(),
        "the holder's pid"
    );

    // The first still serves, and its long polls still wake at once for its deliveries.
    let poll = {
        let c = Client::new(&base);
        let a = a.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = c.events(&a, "after=0&wait=10").await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the long poll did not wait");
    c.deliver(&a, &json!({"type": "ping", "data": {"n": 1}}), None)
        .await
        .expect_status(202, "a delivery to the first server");
    let (r, waited) = poll.await.expect("poll task");
    r.expect_status(200, "the long poll");
    let events = r.json["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{}", r.text);
    assert_eq!(events[0]["type"], "ping", "{}", r.text);
    assert!(
        waited < Duration::from_secs(5),
        "the long poll answered after {waited:?}, not at the delivery"
    );

    // A backup takes no lock: it works while the server runs.
    let copy = dir.path().join("copy.db");
    let (out, _) = run_to_end(
        &[
            "backup",
            "--db",
            &db.to_string_lossy(),
            "--out",
            &copy.to_string_lossy(),
        ],
        Duration::from_secs(30),
    )
    .await;
    assert!(out.status.success(), "backup: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("integrity check ok"),
        "{out:?}"
    );
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_goes_with_the_process_and_memory_takes_none() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("agentaddress.db");
    let (mut first, _) = common::spawn_serve(&db, "127.0.0.1:0", &[]).await;
    first.kill().await.expect("SIGKILL");
    // SIGKILLed: the lock died with it, though its file (and the stale pid) stays.
    assert!(dir.path().join("agentaddress.db.lock").exists());
    let (second, base) = common::spawn_serve(&db, "127.0.0.1:0", &[]).await;
    Client::new(&base).new_address().await;
    // Two in-memory servers share nothing, so nothing stops them.
    let (m1, _) = common::spawn_serve(Path::new(":memory:"), "127.0.0.1:0", &[]).await;
    let (m2, _) = common::spawn_serve(Path::new(":memory:"), "127.0.0.1:0", &[]).await;
    assert!(!Path::new(":memory:.lock").exists());
    drop((second, m1, m2));
}

// ---------------------------------------------------------------------------------------------
// Logs a person can read
// ---------------------------------------------------------------------------------------------

/// Every `ms=` value in `logs`.
fn ms_values(logs: &str) -> Vec<&str> {
    logs.match_indices("ms=")
        .map(|(at, _)| {
            let rest = &logs[at + 3..];
            let end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_file_have_no_colour_two_decimals_and_flag_values_as_spelled() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let (mut child, base, _stdout) = ServeCommand::new()
        .listen("127.0.0.1:0")
        .db(dir.path().join("agentaddress.db"))
        .rust_log("info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stderr(Stdio::from(log))
        .listening()
        .await;
    let c = Client::new(&base);
    let a = c.new_address().await;
    for n in 0..3 {
        c.deliver(&a, &json!({"data": {"n": n}}), None)
            .await
            .expect_status(202, "a delivery");
    }
    c.events(&a, "after=0").await.expect_status(200, "the feed");
    terminate(&mut child).await;

    let bytes = std::fs::read(&log_path).expect("read log");
    let logs = String::from_utf8_lossy(&bytes);
    assert!(
        !bytes.contains(&0x1b),
        "an escape code in a log that is no terminal:\n{logs}"
    );
    let ms = ms_values(&logs);
    assert!(ms.len() >= 5, "every request logs its ms: {ms:?}\n{logs}");
    for value in &ms {
        let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(
            value.parse::<f64>().is_ok() && decimals <= 2,
            "ms={value} is not a duration to at most 2 decimals\n{logs}"
        );
    }
    assert!(logs.contains(" synchronous=full "), "{logs}");
    assert!(
        !logs.contains("synchronous=Full"),
        "a flag value as Debug: {logs}"
    );
}

/// A pseudo-terminal by util-linux's `script`: coloured logs on a terminal (the control that
/// shows the test above could see colour), none with `NO_COLOR` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_gets_colour_unless_no_color_is_set() {
    async fn on_a_terminal(no_color: Option<&str>) -> Vec<u8> {
        let command = format!("timeout -s TERM 2 '{BIN}' serve --listen 127.0.0.1:0 --db :memory:");
        let mut cmd = Command::new("script");
        cmd.args(["-q", "-e", "-c", &command, "/dev/null"])
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("script did not end within 60 s"))
            .expect("run script (util-linux)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            text.contains("serving the agentaddress API"),
            "the logs on the terminal: {text:?} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
    let coloured = on_a_terminal(None).await;
    assert!(coloured.contains(&0x1b), "no colour on a terminal");
    let plain = on_a_terminal(Some("1")).await;
    assert!(
        !plain.contains(&0x1b),
        "colour despite NO_COLOR=1: {:?}",
        String::from_utf8_lossy(&plain)
    );
    let empty = on_a_terminal(Some("")).await;
    assert!(empty.contains(&0x1b), "an empty NO_COLOR counts as unset");
}

// ---------------------------------------------------------------------------------------------
// The banner
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_banner_names_the_urls_and_the_absolute_database_and_stdout_is_unchanged() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A relative --db: the banner shows where it really is.
    let mut s = Serve::start(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--db",
            "agentaddress.db",
            "--smtp-listen",
            "127.0.0.1:0",
        ],
    );
    let first = s.stdout_line().await;
    let base = first
        .trim_end()
        .strip_prefix("agentaddress listening on ")
        .unwrap_or_else(|| panic!("first stdout line: {first:?}"))
        .to_owned();
    let second = s.stdout_line().await;
    let smtp = second
        .trim_end()
        .strip_prefix("agentaddress smtp listening on ")
        .unwrap_or_else(|| panic!("second stdout line: {second:?}"))
        .to_owned();
    let banner = s.banner().await;
    let db = canonical(dir.path(), "agentaddress.db");
    for expected in [
        format!("  API root:      {base}/api/v1"),
        format!("  Inbox viewer:  {base}/inbox   (open it in a browser)"),
        format!("  MCP endpoint:  {base}/api/mcp"),
        format!("  SMTP door:     {smtp}   (mail to {{address_id}}@inbox.localhost)"),
        format!("  Database:      {}", db.display()),
    ] {
        assert!(
            banner.contains(&expected),
            "{expected:?} is not in the banner:\n{}",
            banner.join("\n")
        );
    }
    assert!(db.is_absolute() && db.exists(), "{}", db.display());
    // The URLs answer.
    let c = Client::new(&base);
    c.get(&format!("{base}/inbox"), None)
        .await
        .expect_status(200, "the inbox viewer");
    c.new_address().await;
    // Nothing but the machine-read lines on stdout.
    let rest = s.kill_and_rest_of_stdout().await;
    assert_eq!(rest, "", "stdout after its two lines");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_banner_of_a_wildcard_listener_an_in_memory_store_and_a_public_url() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut s = Serve::start(dir.path(), &["--listen", "0.0.0.0:0", "--db", ":memory:"]);
    let first = s.stdout_line().await;
    let port = first
        .trim_end()
        .strip_prefix("agentaddress listening on http://0.0.0.0:")
        .unwrap_or_else(|| panic!("first stdout line: {first:?}"))
        .to_owned();
    let banner = s.banner().await.join("\n");
    for expected in [
        format!("  API root:      http://127.0.0.1:{port}/api/v1"),
        format!("  Listening on:  0.0.0.0:{port}, every interface"),
        "  Database:      in memory (:memory:)".to_owned(),
    ] {
        assert!(banner.contains(&expected), "{expected:?}:\n{banner}");
    }
    drop(s);

    let mut s = Serve::start(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--db",
            ":memory:",
            "--public-url",
            "https://agents.example.com/",
        ],
    );
    s.stdout_line().await;
    let banner = s.banner().await.join("\n");
    for expected in [
        "  API root:      https://agents.example.com/api/v1",
        "  Inbox viewer:  https://agents.example.com/inbox",
        "  MCP endpoint:  https://agents.example.com/api/mcp",
        "(the URLs above use --public-url)",
    ] {
        assert!(banner.contains(expected), "{expected:?}:\n{banner}");
    }
}

// ---------------------------------------------------------------------------------------------
// Fatal start-up errors
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fatal_errors_are_said_once_with_their_cause_in_words() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = canonical(dir.path(), "");
    let missing = root.join("missing/agentaddress.db");
    let (out, _) = serve_to_end(
        &[
            "--listen",
            "127.0.0.1:0",
            "--db",
            &missing.to_string_lossy(),
        ],
        Duration::from_secs(30),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: cannot open the database {}: the directory {} does not exist",
            missing.display(),
            root.join("missing").display()
        ),
        "said once, nothing else"
    );
    assert!(!root.join("missing").exists(), "no directory was made");

    // A port another process listens on.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let db = root.join("port.db");
    let (out, _) = serve_to_end(
        &["--listen", &addr, "--db", &db.to_string_lossy()],
        Duration::from_secs(30),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        stderr.matches("address already in use").count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.matches("cannot listen on").count(), 1, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: cannot listen on {addr}: address already in use (another process is \
             listening there)"
        )
    );
    assert!(!db.exists(), "a taken port makes no database");

    // With JSON logs, the error is one JSON line.
    let (out, _) = serve_to_end(
        &[
            "--log-format",
            "json",
            "--listen",
            &addr,
            "--db",
            ":memory:",
        ],
        Duration::from_secs(30),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        stderr.matches("address already in use").count(),
        1,
        "{stderr}"
    );
    for line in stderr.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
    }
    drop(taken);
}

// ---------------------------------------------------------------------------------------------
// The README's configuration tables
// ---------------------------------------------------------------------------------------------

/// The long flags a `--help` output lists (hidden flags are not in it), `--help` itself aside.
fn help_flags(help: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for line in help.lines() {
        let line = line.trim_start();
        let line = match line.strip_prefix('-') {
            // `-h, --help`: a short flag first.
            Some(rest) if !rest.starts_with('-') => match rest.split_once(", ") {
                Some((_, long)) => long,
                None => continue,
            },
            Some(_) => line,
            None => continue,
        };
        let Some(name) = line.strip_prefix("--") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if !name.is_empty() && name != "help" {
            flags.push(format!("--{name}"));
        }
    }
    flags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flag_of_serve_is_in_the_readme_configuration_tables() {
    let (out, _) = serve_to_end(&["--help"], Duration::from_secs(30)).await;
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let flags = help_flags(&help);
    assert!(
        flags.len() >= 40 && flags.iter().any(|f| f == "--listen"),
        "the help was read: {flags:?}"
    );
    assert!(
        !flags.iter().any(|f| f == "--sqlite-group-max"),
        "hidden flags are not listed"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("read README.md");
    let section = readme
        .split_once("\n## Configuration\n")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("README.md has no Configuration section"));
    // The configuration tables: every row's first cell, up to the next top-level section.
    let section = section.split("\n## ").next().unwrap_or(section);
    let documented: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix('|'))
        .filter_map(|l| l.split('|').next())
        .collect();
    let missing: Vec<&String> = flags
        .iter()
        .filter(|f| {
            !documented
                .iter()
                .any(|cell| cell.contains(&format!("`{f}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "flags of `serve --help` missing from README.md's configuration tables: {missing:?}"
    );
}
