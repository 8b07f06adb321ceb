//! Runs the `agentaddress` client commands as subprocesses with a fresh credentials directory,
//! keeps every byte they print (to check that no read token is ever among them), and the
//! steps of the agent workflow shared by the tests against `serve` and the Lambda stack.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// What one command did.
#[derive(Debug, Clone)]
pub struct Out {
    pub args: Vec<String>,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// stdout as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{:?}: stdout is not JSON ({e}): {self:?}", self.args))
    }

    /// The `error` object printed on stderr.
    pub fn error(&self) -> Value {
        let v: Value = serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|e| panic!("{:?}: stderr is not JSON ({e}): {self:?}", self.args));
        v.get("error")
            .cloned()
            .unwrap_or_else(|| panic!("{:?}: no error object: {self:?}", self.args))
    }
}

/// The client, run against one server URL with its own credentials directory.
pub struct Cli {
    _tmp: tempfile::TempDir,
    /// The credentials directory (`AGENTADDRESS_HOME`); created by the client itself.
    pub home: PathBuf,
    pub url: String,
    /// Every command run so far.
    pub log: Vec<Out>,
    /// The commands' working directory (default: the test's).
    pub cwd: Option<PathBuf>,
    /// More environment variables of the commands (`BROWSER` for `inbox`).
    pub env: Vec<(String, String)>,
}

impl Cli {
    pub fn new(url: &str) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let home = tmp.path().join("creds");
        Self {
            _tmp: tmp,
            home,
            url: url.to_owned(),
            log: Vec::new(),
            cwd: None,
            env: Vec::new(),
        }
    }

    /// A scratch path next to the credentials directory.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self._tmp.path().join(name)
    }

    /// Runs `agentaddress ARGS` with `AGENTADDRESS_URL` set to the server, and `stdin`.
    pub async fn run_with(
        &mut self, args: &[&str], url: Option<&str>, stdin: Option<&[u8]>,
    ) -> Out {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentaddress"));
        cmd.args(args)
            .env("AGENTADDRESS_HOME", &self.home)
            .env_remove("AGENTADDRESS_URL")
            .env("RUST_LOG", "trace")
            .env("RUST_BACKTRACE", "1")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(url) = url {
            cmd.env("AGENTADDRESS_URL", url);
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run agentaddress {args:?}: {e}"));
        if let Some(bytes) = stdin {
            let mut pipe = child
                .stdin
                .take()
                .unwrap_or_else(|| panic!("no stdin pipe"));
            match pipe.write_all(bytes).await {
                // The command may refuse its arguments and exit without reading its input
                // (`state set t 'bad key' -`): its exit code and output tell the test.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => panic!("writing stdin: {e}"),
                Ok(()) => {}
            }
            drop(pipe);
        }
        let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("agentaddress {args:?} did not finish within 90 s"))
            .unwrap_or_else(|e| panic!("agentaddress {args:?}: {e}"));
        let out = Out {
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        self.log.push(out.clone());
        out
    }

    /// Runs against this harness's server URL.
    pub async fn run(&mut self, args: &[&str]) -> Out {
        let url = self.url.clone();
        self.run_with(args, Some(&url), None).await
    }

    /// Runs, expects exit 0, returns stdout's JSON.
    pub async fn ok(&mut self, args: &[&str]) -> Value {
        let out = self.run(args).await;
        assert_eq!(out.code, 0, "{args:?} failed: {out:?}");
        assert!(out.stderr.is_empty(), "{args:?} wrote on stderr: {out:?}");
        out.json()
    }

    /// Runs, expects `exit` and the error `code` on stderr (and nothing on stdout); returns the
    /// error object.
    pub async fn fails(&mut self, args: &[&str], exit: i32, code: &str) -> Value {
        let out = self.run(args).await;
        check_failure(&out, exit, code)
    }

    /// `create`, waiting out `rate_limited` (creation is limited per client IP, and a shared
    /// deployment serves other tests too); returns stdout's JSON.
    pub async fn create(&mut self, args: &[&str]) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        loop {
            let out = self.run(args).await;
            if out.code == 7 && std::time::Instant::now() < deadline {
                let error = out.error();
                assert_eq!(error["code"], "rate_limited", "{out:?}");
                let secs = error["retry_after_seconds"]
                    .as_u64()
                    .unwrap_or(1)
                    .clamp(1, 60);
                tokio::time::sleep(Duration::from_secs(secs)).await;
                continue;
            }
            assert_eq!(out.code, 0, "{args:?} failed: {out:?}");
            assert!(out.stderr.is_empty(), "{args:?} wrote on stderr: {out:?}");
            return out.json();
        }
    }

    pub fn file(&self, task: &str) -> PathBuf {
        self.home.join(format!("{task}.json"))
    }

    /// The saved credentials of a task.
    pub fn saved(&self, task: &str) -> Value {
        let text = std::fs::read_to_string(self.file(task))
            .unwrap_or_else(|e| panic!("reading the credentials of {task}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("credentials of {task}: {e}"))
    }

    pub fn token(&self, task: &str) -> String {
        let token = self.saved(task)["read_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no read_token saved for {task}"))
            .to_owned();
        assert!(token.starts_with("aat_"), "{token:?}");
        token
    }

    /// No command printed `token` on stdout or stderr.
    pub fn assert_never_printed(&self, token: &str) {
        assert!(token.len() > 10, "not a token: {token:?}");
        for out in &self.log {
            assert!(
                !out.stdout.contains(token) && !out.stderr.contains(token),
                "the read token was printed by {:?}",
                out.args
            );
        }
    }
}

pub fn check_failure(out: &Out, exit: i32, code: &str) -> Value {
    assert_eq!(out.code, exit, "{:?}: wrong exit code: {out:?}", out.args);
    assert!(
        out.stdout.is_empty(),
        "{:?} printed on stdout: {out:?}",
        out.args
    );
    let error = out.error();
    assert_eq!(error["code"], code, "{:?}: {out:?}", out.args);
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{:?}: no message: {out:?}",
        out.args
    );
    error
}

/// The mode bits of a path.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// Delivers a JSON webhook to an inbox URL over HTTP; returns the event's sequence.
pub async fn deliver(inbox_url: &str, body: &Value) -> u64 {
    let response = reqwest::Client::new()
        .post(inbox_url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("delivering to the inbox");
    let status = response.status().as_u16();
    let answer: Value = response.json().await.expect("inbox answer");
    assert_eq!(status, 202, "{answer}");
    answer["event"]["sequence"]
        .as_u64()
        .unwrap_or_else(|| panic!("no sequence: {answer}"))
}

fn ids_and_sequences(page: &Value) -> Vec<(String, u64)> {
    page["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events: {page}"))
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap_or_default().to_owned(),
                e["sequence"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// The agent's workflow on one task, against any deployment: create → handoff → a delivery →
/// poll → ack (the cursor advances) → poll (nothing new) → state with conflicts → delete.
/// `wait` is the long poll used to see the first delivery.
pub async fn workflow(cli: &mut Cli, task: &str) {
    // create: the hand-off, never the token.
    let created = cli
        .ok(&[
            "create",
            task,
            "--name",
            "deploy watcher",
            "--expires-in",
            "3600",
        ])
        .await;
    for field in [
        "inbox_url",
        "email",
        "address_id",
        "expires_at",
        "credentials_file",
    ] {
        assert!(created[field].is_string(), "{field}: {created}");
    }
    assert_eq!(created["task"], task);
    assert_eq!(created["name"], "deploy watcher");
    assert!(created.get("read_token").is_none() && created.get("credentials").is_none());
    let address_id = created["address_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(address_id.starts_with("addr_"), "{created}");
    assert!(created["email"]
        .as_str()
        .is_some_and(|e| e.starts_with(&format!("{address_id}@"))));
    let inbox_url = created["inbox_url"].as_str().unwrap_or_default().to_owned();
    assert!(inbox_url.contains("/api/v1/inbox/"), "{created}");

    // Files: directory 0700, file 0600, nothing else left behind.
    assert_eq!(mode(&cli.home), 0o700);
    assert_eq!(mode(&cli.file(task)), 0o600);
    let saved = cli.saved(task);
    assert_eq!(saved["address_id"], address_id.as_str());
    assert_eq!(saved["cursor"], 0);
    let token = cli.token(task);

    // handoff: the same inbox URL and email, again.
    let handoff = cli.ok(&["handoff", task]).await;
    assert_eq!(handoff, created);

    // Nothing yet.
    let page = cli.ok(&["poll", task]).await;
    assert_eq!(
        page,
        json!({"events": [], "next_cursor": 0, "has_more": false})
    );

    // A webhook arrives while a run long-polls: the poll answers with it.
    let url = cli.url.clone();
    let home = cli.home.clone();
    let waiting = tokio::spawn({
        let task = task.to_owned();
        async move {
            let mut c = Cli {
                _tmp: tempfile::tempdir().expect("temp dir"),
                home,
                url,
                log: Vec::new(),
                cwd: None,
                env: Vec::new(),
            };
            let started = std::time::Instant::now();
            let out = c.run(&["poll", &task, "--wait", "20"]).await;
            (out, started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let first = deliver(
        &inbox_url,
        &json!({"type": "ci.finished", "data": {"build": 7}}),
    )
    .await;
    let (out, took) = waiting.await.expect("the long poll task");
    cli.log.push(out.clone());
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        took < Duration::from_secs(18),
        "the long poll took {took:?}"
    );
    let page = out.json();
    let events = ids_and_sequences(&page);
    assert_eq!(events.len(), 1, "{page}");
    assert_eq!(events[0].1, first);
    assert_eq!(page["events"][0]["type"], "ci.finished");
    assert_eq!(page["events"][0]["data"], json!({"build": 7}));

    let second = deliver(
        &inbox_url,
        &json!({"type": "ci.finished", "data": {"build": 8}}),
    )
    .await;

    // poll does not move the cursor: both events, twice.
    let page = cli.ok(&["poll", task, "--wait", "0"]).await;
    let events = ids_and_sequences(&page);
    assert_eq!(
        events.iter().map(|e| e.1).collect::<Vec<_>>(),
        vec![first, second]
    );
    assert_eq!(page["next_cursor"], second);
    assert_eq!(cli.ok(&["poll", task]).await, page);
    // --limit cuts the page.
    let limited = cli.ok(&["poll", task, "--limit", "1"]).await;
    assert_eq!(ids_and_sequences(&limited).len(), 1);
    assert_eq!(limited["has_more"], true);

    // ack the first: the cursor moves to it; the next poll starts after it.
    let acked = cli.ok(&["ack", task, &events[0].0]).await;
    assert_eq!(acked["event"]["id"], events[0].0.as_str());
    assert!(acked["event"]["acknowledged_at"].is_string(), "{acked}");
    assert_eq!(acked["cursor"], first);
    assert_eq!(cli.saved(task)["cursor"], first);
    assert_eq!(mode(&cli.file(task)), 0o600);
    let page = cli.ok(&["poll", task, "--wait", "0"]).await;
    assert_eq!(
        ids_and_sequences(&page),
        vec![events[1].clone()],
        "after acking the first"
    );
    assert_eq!(page["events"][0]["acknowledged_at"], Value::Null);

    // ack the second: nothing new after it.
    let acked = cli.ok(&["ack", task, &events[1].0]).await;
    assert_eq!(acked["cursor"], second);
    let page = cli.ok(&["poll", task, "--wait", "0"]).await;
    assert_eq!(
        page,
        json!({"events": [], "next_cursor": second, "has_more": false})
    );
    // Acking an older event again is fine and never moves the cursor back.
    let again = cli.ok(&["ack", task, &events[0].0]).await;
    assert_eq!(again["cursor"], second);
    assert_eq!(
        again["event"]["acknowledged_at"],
        acked_at(&cli.log, &events[0].0)
    );
    assert_eq!(cli.saved(task)["cursor"], second);
    // --after reads from elsewhere without touching the cursor.
    let page = cli
        .ok(&["poll", task, "--after", "0", "--limit", "1"])
        .await;
    assert_eq!(ids_and_sequences(&page), vec![events[0].clone()]);
    assert_eq!(cli.saved(task)["cursor"], second);

    // State: create-only from a file, then compare-and-set from stdin.
    let file = cli.scratch(&format!("{task}-value.json"));
    std::fs::write(&file, br#"{"step": 1, "big": 12345678901234567890123}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let file = file.display().to_string();
    let set = cli
        .ok(&[
            "state",
            "set",
            task,
            "progress",
            &file,
            "--if-revision",
            "0",
        ])
        .await;
    assert_eq!(set["key"], "progress");
    assert_eq!(
        set["value"].to_string(),
        r#"{"step":1,"big":12345678901234567890123}"#
    );
    let r1 = set["revision"].as_u64().unwrap_or_else(|| panic!("{set}"));
    assert_eq!(set["event"]["sequence"], r1);

    let conflict = cli
        .fails(
            &[
                "state",
                "set",
                task,
                "progress",
                &file,
                "--if-revision",
                "0",
            ],
            6,
            "revision_conflict",
        )
        .await;
    assert_eq!(conflict["current_revision"], r1);

    let r1s = r1.to_string();
    let out = cli
        .run_with(
            &["state", "set", task, "progress", "-", "--if-revision", &r1s],
            Some(&cli.url.clone()),
            Some(br#"{"step": 2}"#),
        )
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let r2 = out.json()["revision"]
        .as_u64()
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(r2 > r1);
    // stdin without `-` too (unconditional write of another key).
    let out = cli
        .run_with(
            &["state", "set", task, "notes"],
            Some(&cli.url.clone()),
            Some(b"[\"a\", null]"),
        )
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["value"], json!(["a", null]));

    // A stale revision is refused with the current one.
    let stale = cli
        .fails(
            &[
                "state",
                "set",
                task,
                "progress",
                &file,
                "--if-revision",
                &r1s,
            ],
            6,
            "revision_conflict",
        )
        .await;
    assert_eq!(stale["current_revision"], r2);

    let got = cli.ok(&["state", "get", task, "progress"]).await;
    assert_eq!(got["value"], json!({"step": 2}));
    assert_eq!(got["revision"], r2);

    let keys = cli.ok(&["state", "keys", task]).await;
    let names: Vec<&str> = keys["keys"]
        .as_array()
        .unwrap_or_else(|| panic!("{keys}"))
        .iter()
        .filter_map(|k| k["key"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{keys}");
    assert!(
        names.contains(&"progress") && names.contains(&"notes"),
        "{keys}"
    );
    assert_eq!(keys["state_keys"], 2);

    // Conditional delete: stale refused, current accepted.
    let stale = cli
        .fails(
            &["state", "delete", task, "progress", "--if-revision", &r1s],
            6,
            "revision_conflict",
        )
        .await;
    assert_eq!(stale["current_revision"], r2);
    let deleted = cli
        .ok(&[
            "state",
            "delete",
            task,
            "progress",
            "--if-revision",
            &r2.to_string(),
        ])
        .await;
    assert_eq!(deleted["deleted"], true);
    assert_eq!(deleted["key"], "progress");
    cli.fails(&["state", "get", task, "progress"], 4, "not_found")
        .await;
    cli.fails(&["state", "delete", task, "progress"], 4, "not_found")
        .await;
    cli.ok(&["state", "delete", task, "notes"]).await;

    // The state writes are in the feed after the cursor, in order.
    let page = cli.ok(&["poll", task, "--wait", "0"]).await;
    let types: Vec<&str> = page["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        types,
        vec![
            "state.updated",
            "state.updated",
            "state.updated",
            "state.deleted",
            "state.deleted"
        ],
        "{page}"
    );

    // Nothing left behind but the task's file; the token was never printed.
    let names: Vec<String> = std::fs::read_dir(&cli.home)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![format!("{task}.json")]);
    cli.assert_never_printed(&token);
}

/// The `acknowledged_at` of an event in the first `ack` of it that was run.
fn acked_at(log: &[Out], event_id: &str) -> Value {
    log.iter()
        .filter(|o| o.code == 0 && o.args.first().is_some_and(|a| a == "ack"))
        .map(Out::json)
        .find(|v| v["event"]["id"] == event_id)
        .map(|v| v["event"]["acknowledged_at"].clone())
        .unwrap_or(Value::Null)
}
