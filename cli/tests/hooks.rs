//! Wake hooks on `agentaddress serve` (docs/API.md §19), black-box: the CLI makes a hook whose
//! receiver runs on loopback (`--allow-private-hooks`), deliveries to the inbox wake it with a
//! wake that verifies with the saved secret, a failing receiver gets the same `webhook-id`
//! again, also after `serve` was restarted with the wake pending, a burst is coalesced by
//! the debounce, and the README's Python (`standardwebhooks`) and Node receivers, run as the
//! README shows them, verify real wakes.

mod client_harness;
mod common;

use std::time::{Duration, Instant};

use agentaddress_blackbox::hooks::{header, receiver, wake_of};
use agentaddress_core::domain::verification::{verify, VerificationConfig};
use axum::body::Bytes;
use axum::http::HeaderMap;
use client_harness::{deliver, Cli};
use common::ServeCommand;
use serde_json::{json, Value};

/// The wake verifies with `secret` (the inbound verifier's Standard Webhooks rule).
fn assert_signed(request: &(HeaderMap, Bytes), secret: &str) {
    let config =
        VerificationConfig::from_json(&json!({"scheme": "standard-webhooks", "secret": secret}))
            .expect("config");
    let pairs: Vec<(&str, &[u8])> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
        .iter()
        .map(|n| (*n, request.0.get(*n).expect("signed").as_bytes()))
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    assert_eq!(verify(&config, &pairs, &request.1, now).reason, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakes_reach_the_receiver_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("hooks.db");
    let serve = || {
        ServeCommand::new()
            .listen("127.0.0.1:0")
            .db(&db)
            .arg("--allow-private-hooks")
            .rust_log("warn")
            .listening()
    };
    let (child, base, _) = serve().await;
    let (r, url) = receiver().await;
    let mut cli = Cli::new(&base);
    let created = cli.create(&["create", "wake-task"]).await;
    let inbox = created["inbox_url"].as_str().expect("inbox_url").to_owned();
    let headers = cli.scratch("headers");
    std::fs::write(&headers, "Authorization: Bearer receiver-token-42\n").expect("write");
    let headers = headers.to_string_lossy().into_owned();
    let added = cli
        .ok(&[
            "hook",
            "add",
            "wake-task",
            &url,
            "--type",
            "*",
            "--header-file",
            &headers,
        ])
        .await;
    assert!(added.get("signing_secret").is_none(), "{added}");
    let hook_id = added["hook"]["id"].as_str().expect("hook id").to_owned();
    assert_eq!(added["hook"]["header_names"], json!(["authorization"]));
    let secret = cli.saved("wake-task")["hook_secrets"][&hook_id]
        .as_str()
        .expect("the secret is saved with the task")
        .to_owned();
    assert!(secret.starts_with("whsec_"));
    for out in &cli.log {
        assert!(!out.stdout.contains(&secret) && !out.stderr.contains(&secret));
        assert!(!out.stdout.contains("receiver-token-42"));
    }

    // A delivery wakes the receiver.
    let started = Instant::now();
    let sequence = deliver(&inbox, &json!({"order": 1})).await;
    let seen = r.wait_for(1, Duration::from_secs(10)).await;
    eprintln!("first wake after {:?}", started.elapsed());
    assert_eq!(
        header(&seen[0].0, "webhook-id"),
        format!("{hook_id}_{sequence}")
    );
    assert_eq!(
        header(&seen[0].0, "authorization"),
        "Bearer receiver-token-42"
    );
    assert_signed(&seen[0], &secret);
    let wake = wake_of(&seen[0]);
    assert_eq!(wake["type"], "address.wake");
    assert_eq!(wake["task_id"], "wake-task");
    assert_eq!(wake["to_sequence"], sequence);
    assert!(wake["events_url"]
        .as_str()
        .expect("events_url")
        .starts_with(&base));

    // The receiver fails: the wake is tried again after 10 s — by the next server.
    r.answer(503);
    let second = deliver(&inbox, &json!({"order": 2})).await;
    r.wait_for(2, Duration::from_secs(10)).await;
    // Its outcome recorded (a retry in 10 s), the server stops.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Killed and reaped before the next server opens the file: until the old process has
    // exited it holds the database's lock (one server per database).
    let mut child = child;
    child.kill().await.expect("SIGKILL the server");
    r.answer(200);
    let (_child, base2, _) = serve().await;
    let seen = r.wait_for(3, Duration::from_secs(45)).await;
    assert_eq!(
        header(&seen[1].0, "webhook-id"),
        format!("{hook_id}_{second}")
    );
    assert_eq!(
        header(&seen[2].0, "webhook-id"),
        format!("{hook_id}_{second}"),
        "the same wake again"
    );
    assert_signed(&seen[2], &secret);
    cli.url = base2.clone();
    let listed = cli
        .ok(&["hook", "list", "wake-task", "--url", &base2])
        .await;
    assert_eq!(listed["hooks"][0]["delivered_through"], second);
    assert_eq!(listed["hooks"][0]["status"], "active");

    // A test wake, then the hook goes, and its secret with it.
    let tested = cli
        .ok(&["hook", "test", "wake-task", &hook_id, "--url", &base2])
        .await;
    assert_eq!(tested["status"], 200);
    assert_eq!(
        wake_of(&r.wait_for(4, Duration::from_secs(5)).await[3])["type"],
        "hook.test"
    );
    cli.ok(&["hook", "remove", "wake-task", &hook_id, "--url", &base2])
        .await;
    assert!(cli.saved("wake-task").get("hook_secrets").is_none());
    deliver(&inbox.replace(&base, &base2), &json!({"order": 3})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(r.seen().len(), 4, "no wake after the hook was removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_one_or_two_wakes_and_types_filter() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_child, base, _) = ServeCommand::new()
        .listen("127.0.0.1:0")
        .db(dir.path().join("burst.db"))
        .arg("--allow-private-hooks")
        .rust_log("warn")
        .listening()
        .await;
    let (r, url) = receiver().await;
    let (other, other_url) = receiver().await;
    let mut cli = Cli::new(&base);
    let created = cli.create(&["create", "burst"]).await;
    let inbox = created["inbox_url"].as_str().expect("inbox_url").to_owned();
    cli.ok(&["hook", "add", "burst", &url, "--debounce", "10"])
        .await;
    cli.ok(&[
        "hook",
        "add",
        "burst",
        &other_url,
        "--type",
        "request.answered",
    ])
    .await;
    let mut last = 0;
    let burst = Instant::now();
    for n in 0..100 {
        last = deliver(&inbox, &json!({ "n": n })).await;
    }
    // At most one wake per debounce (10 s) while the burst lasted, and one after it.
    let bound = 2 + burst.elapsed().as_secs() as usize / 10;
    // Every event covered: the last wake's range ends at the last event.
    let start = Instant::now();
    loop {
        let seen = r.seen();
        if seen
            .last()
            .is_some_and(|w| wake_of(w)["to_sequence"] == last)
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "{} wakes",
            seen.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = r.seen();
    assert!(
        seen.len() <= bound,
        "{} wakes for a burst of 100 that lasted {:?}",
        seen.len(),
        burst.elapsed()
    );
    let mut from = 1;
    for w in &seen {
        let wake = wake_of(w);
        assert_eq!(wake["from_sequence"], from, "ranges follow each other");
        from = wake["to_sequence"].as_u64().expect("to") + 1;
    }
    assert!(
        other.seen().is_empty(),
        "no request.answered came: nothing for that hook"
    );
}

/// The README's code block fenced as `lang` after the line `after` (its fence removed).
fn readme_block(after: &str, lang: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let from = readme
        .find(after)
        .unwrap_or_else(|| panic!("README.md has no {after:?}"));
    let fence = format!("```{lang}\n");
    let start = readme[from..]
        .find(&fence)
        .map(|i| from + i + fence.len())
        .unwrap_or_else(|| panic!("no {lang} block after {after:?}"));
    let end = readme[start..]
        .find("```")
        .map(|i| start + i)
        .expect("the block ends");
    readme[start..end].to_owned()
}

/// A receiver of the README run as its own process on `port`, with `secret`; its stdout lines.
struct Program {
    _child: tokio::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Program {
    async fn start(
        program: &std::path::Path, script: &std::path::Path, secret: &str, port: u16,
    ) -> Self {
        let mut child = tokio::process::Command::new(program)
            .arg(script)
            .env("WAKE_SECRET", secret)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = tx.send(line);
            }
        });
        let start = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} did not listen on {port}",
                script.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            _child: child,
            lines,
        }
    }

    /// The next line it prints (within 20 s).
    async fn line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.lines.recv())
            .await
            .expect("the receiver printed nothing within 20 s")
            .expect("the receiver exited")
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The README's two receivers — Python with the `standardwebhooks` package (PyPI, pinned in
/// scripts/mcp-python) and Node with its standard library — exactly as the README shows them
/// (only the port changed), verify real wakes of `serve`; the Node one refuses a wake signed
/// with another hook's secret (401, which the hook records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_receivers_verify_real_wakes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".cache/mcp-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/mcp-python --install-only (scripts/test does)",
        python.display()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let (_serve, base, _) = ServeCommand::new()
        .listen("127.0.0.1:0")
        .db(dir.path().join("receivers.db"))
        .arg("--allow-private-hooks")
        .rust_log("warn")
        .listening()
        .await;
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{base}/api/v1/addresses"))
        .json(&json!({}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("created");
    let id = created["address"]["id"].as_str().expect("id").to_owned();
    let token = created["credentials"]["read_token"]
        .as_str()
        .expect("token")
        .to_owned();
    let inbox = created["endpoints"]["inbox_url"]
        .as_str()
        .expect("inbox")
        .to_owned();
    let hooks = format!("{base}/api/v1/addresses/{id}/hooks");
    let add = |url: String| {
        let (http, hooks, token) = (http.clone(), hooks.clone(), token.clone());
        async move {
            let added: Value = http
                .post(&hooks)
                .bearer_auth(&token)
                .json(&json!({ "url": url }))
                .send()
                .await
                .expect("add hook")
                .json()
                .await
                .expect("added");
            (
                added["hook"]["id"].as_str().expect("hook id").to_owned(),
                added["signing_secret"].as_str().expect("secret").to_owned(),
            )
        }
    };

    let (py_port, js_port) = (free_port(), free_port());
    let (_, py_secret) = add(format!("http://127.0.0.1:{py_port}/")).await;
    let (_, js_secret) = add(format!("http://127.0.0.1:{js_port}/")).await;
    // Another hook to the Node receiver: signed with its own secret, which that receiver does
    // not hold.
    let (stranger, _) = add(format!("http://127.0.0.1:{js_port}/")).await;
    let port = |code: String, port: u16| {
        assert!(
            code.contains("8000"),
            "the README's receiver listens on 8000"
        );
        code.replace("8000", &port.to_string())
    };
    let py_script = dir.path().join("receiver.py");
    std::fs::write(
        &py_script,
        port(
            readme_block("**Verify a wake in your own receiver**", "python"),
            py_port,
        ),
    )
    .expect("write");
    let js_script = dir.path().join("receiver.js");
    std::fs::write(
        &js_script,
        port(
            readme_block("Node, with nothing but the standard library", "js"),
            js_port,
        ),
    )
    .expect("write");
    let mut py = Program::start(&python, &py_script, &py_secret, py_port).await;
    let mut js = Program::start(
        std::path::Path::new("node"),
        &js_script,
        &js_secret,
        js_port,
    )
    .await;

    let sequence = deliver(&inbox, &json!({"type": "build.done"})).await;
    assert_eq!(py.line().await, format!("wake for {id} up to {sequence}"));
    assert_eq!(js.line().await, format!("wake {sequence}"));

    // The stranger's wake was refused: its hook records the 401 (a permanent failure, reported
    // as `hook.failed`: docs/API.md §19), and the receiver printed nothing for it.
    let start = Instant::now();
    loop {
        let listed: Value = http
            .get(&hooks)
            .bearer_auth(&token)
            .send()
            .await
            .expect("list")
            .json()
            .await
            .expect("listed");
        let hook = listed["hooks"]
            .as_array()
            .and_then(|h| h.iter().find(|h| h["id"] == stranger.as_str()))
            .cloned()
            .expect("listed");
        if hook["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("401"))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the stranger's wake was not refused: {hook}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        js.lines.try_recv().is_err(),
        "nothing printed for the stranger"
    );
}
