//! `agentaddress wait TASK`, run as a subprocess against a real `agentaddress serve` over real
//! sockets: events print as they arrive, one JSON line each, in sequence order and never
//! twice — woken by the wake-up socket (docs/API.md §17), by long polls where no socket is
//! offered or reachable, and across a server restart that cuts the socket. `--count`,
//! `--after`, `--timeout` (exit 8), a deleted address (exit 5), Ctrl-C (exit 130).

mod client_harness;
mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use client_harness::{check_failure, deliver, Cli, Out};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

struct Server {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
}

async fn server(extra: &[&str]) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) = common::spawn_serve(&dir.path().join("w.db"), "127.0.0.1:0", extra).await;
    Server { child, base, dir }
}

/// A running `agentaddress wait`: its stderr is read up to the notice that says how it waits.
struct Waiting {
    child: Child,
    args: Vec<String>,
    stderr: BufReader<ChildStderr>,
    /// The first stderr line (the mode notice).
    notice: String,
}

async fn start_wait(cli: &Cli, args: &[&str]) -> Waiting {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentaddress"))
        .arg("wait")
        .args(args)
        .env("AGENTADDRESS_HOME", &cli.home)
        .env("AGENTADDRESS_URL", &cli.url)
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot run agentaddress wait");
    let mut stderr = BufReader::new(child.stderr.take().unwrap_or_else(|| panic!("no stderr")));
    let mut notice = String::new();
    tokio::time::timeout(Duration::from_secs(20), stderr.read_line(&mut notice))
        .await
        .unwrap_or_else(|_| panic!("wait {args:?} said nothing on stderr within 20 s"))
        .expect("reading wait's stderr");
    Waiting {
        child,
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        stderr,
        notice,
    }
}

impl Waiting {
    /// Waits for the process to exit (within `limit`); everything it printed.
    async fn finish(mut self, cli: &mut Cli, limit: Duration) -> Out {
        let mut stdout = self
            .child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout"));
        let mut out = String::new();
        let mut rest = String::new();
        let outcome = tokio::time::timeout(limit, async {
            let (a, b) = tokio::join!(
                stdout.read_to_string(&mut out),
                self.stderr.read_to_string(&mut rest)
            );
            a.and(b).expect("reading wait's output");
            self.child.wait().await
        })
        .await
        .unwrap_or_else(|_| panic!("wait {:?} did not exit within {limit:?}", self.args))
        .unwrap_or_else(|e| panic!("wait {:?}: {e}", self.args));
        let out = Out {
            args: self.args,
            code: outcome.code().unwrap_or(-1),
            stdout: out,
            stderr: format!("{}{rest}", self.notice),
        };
        cli.log.push(out.clone());
        out
    }

    fn interrupt(&self) {
        let pid = self.child.id().unwrap_or_else(|| panic!("wait has exited"));
        let status = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }
}

/// The events printed on stdout: one JSON object per line.
fn events(out: &Out) -> Vec<Value> {
    out.stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON line ({e}): {l:?}"))
        })
        .collect()
}

fn sequences(out: &Out) -> Vec<u64> {
    events(out)
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap_or_else(|| panic!("{e}")))
        .collect()
}

/// The last line of stderr as the `error` object.
fn last_error(out: &Out) -> Value {
    let line = out.stderr.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    v["error"].clone()
}

/// Creates TASK; returns its inbox URL.
async fn create(cli: &mut Cli, task: &str) -> String {
    let created = cli.ok(&["create", task]).await;
    created["inbox_url"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_events_as_they_arrive_on_the_socket() {
    let s = server(&[]).await;
    let mut cli = Cli::new(&s.base);
    let inbox = create(&mut cli, "t").await;
    let w = start_wait(&cli, &["t", "--count", "3"]).await;
    assert!(
        w.notice.contains("waiting on the socket at ws://") && w.notice.contains("/api/v1/ws"),
        "{}",
        w.notice
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut sent = Vec::new();
    for n in 1..=3 {
        sent.push(deliver(&inbox, &json!({"type": "ci.step", "data": {"n": n}})).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = w.finish(&mut cli, Duration::from_secs(15)).await;
    assert_eq!(out.code, 0, "{out:?}");
    let printed = events(&out);
    assert_eq!(sequences(&out), sent);
    for (n, e) in printed.iter().enumerate() {
        assert_eq!(e["type"], "ci.step");
        assert_eq!(e["data"], json!({"n": n + 1}));
    }
    // Each line is the event exactly as `poll` prints it in its page.
    let page = cli.ok(&["poll", "t"]).await;
    assert_eq!(page["events"], Value::Array(printed));
    // The saved cursor did not move.
    assert_eq!(cli.saved("t")["cursor"], 0);
    // What is there already prints at once; --after starts elsewhere.
    let out = cli
        .run(&["wait", "t", "--count", "2", "--after", "1"])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(sequences(&out), vec![2, 3]);
    // From the saved cursor, moved by ack.
    let id = page["events"][2]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    cli.ok(&["ack", "t", &id]).await;
    let w = start_wait(&cli, &["t", "--count", "1"]).await;
    let fourth = deliver(&inbox, &json!({"n": 4})).await;
    let out = w.finish(&mut cli, Duration::from_secs(15)).await;
    assert_eq!(sequences(&out), vec![fourth], "{out:?}");
    cli.assert_never_printed(&cli.token("t"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_all_print_in_order_once() {
    let s = server(&[]).await;
    let mut cli = Cli::new(&s.base);
    let inbox = create(&mut cli, "busy").await;
    let w = start_wait(&cli, &["busy", "--count", "40"]).await;
    assert!(w.notice.contains("socket"), "{}", w.notice);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writers = (0..8).map(|writer| {
        let inbox = inbox.clone();
        tokio::spawn(async move {
            for n in 0..5 {
                deliver(&inbox, &json!({"writer": writer, "n": n})).await;
            }
        })
    });
    for w in futures::future::join_all(writers).await {
        w.expect("a writer");
    }
    let out = w.finish(&mut cli, Duration::from_secs(120)).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(sequences(&out), (1..=40).collect::<Vec<u64>>());
    let mut seen: Vec<(u64, u64)> = events(&out)
        .iter()
        .map(|e| {
            (
                e["data"]["writer"].as_u64().unwrap_or(99),
                e["data"]["n"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    seen.sort_unstable();
    let all: Vec<(u64, u64)> = (0..8).flat_map(|w| (0..5).map(move |n| (w, n))).collect();
    assert_eq!(seen, all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_gone_unauthorized_and_ctrl_c() {
    let s = server(&[]).await;
    let mut cli = Cli::new(&s.base);
    let inbox = create(&mut cli, "t").await;

    // Nothing arrives: exit 8, `timed_out`, after the timeout.
    let started = Instant::now();
    let out = cli.run(&["wait", "t", "--timeout", "2"]).await;
    let took = started.elapsed();
    assert_eq!(out.code, 8, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(last_error(&out)["code"], "timed_out", "{out:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // The timeout counts from the last event: two print, then it times out.
    deliver(&inbox, &json!({"n": 1})).await;
    deliver(&inbox, &json!({"n": 2})).await;
    let out = cli.run(&["wait", "t", "--timeout", "2"]).await;
    assert_eq!(out.code, 8, "{out:?}");
    assert_eq!(sequences(&out), vec![1, 2]);

    // Ctrl-C ends it at once.
    let w = start_wait(&cli, &["t", "--after", "2"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    w.interrupt();
    let out = w.finish(&mut cli, Duration::from_secs(10)).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(out.code, 130, "{out:?}");
    assert_eq!(last_error(&out)["code"], "interrupted", "{out:?}");

    // The address deleted while waiting: the error a gone address gives, exit 5.
    let w = start_wait(&cli, &["t", "--after", "2"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deleted = reqwest::Client::new()
        .delete(format!(
            "{}/api/v1/addresses/{}",
            s.base,
            cli.saved("t")["address_id"].as_str().unwrap_or_default()
        ))
        .bearer_auth(cli.token("t"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    let out = w.finish(&mut cli, Duration::from_secs(10)).await;
    assert_eq!(out.code, 5, "{out:?}");
    assert_eq!(last_error(&out)["code"], "address_gone", "{out:?}");
    // The same as the other commands give.
    let poll = cli.fails(&["poll", "t"], 5, "address_gone").await;
    assert_eq!(last_error(&out)["message"], poll["message"]);
    let out = cli.run(&["wait", "t"]).await;
    check_failure(&out, 5, "address_gone");
    let out = cli.run(&["wait", "t", "--no-socket"]).await;
    check_failure(&out, 5, "address_gone");

    // A wrong token: `unauthorized`, exit 5, as for a 401.
    create(&mut cli, "u").await;
    let token = cli.token("u");
    let file = cli.file("u");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace(&token, "aat_wrong_token_0123456789")).unwrap();
    let out = cli.run(&["wait", "u"]).await;
    check_failure(&out, 5, "unauthorized");
    cli.fails(&["wait", "nope"], 4, "unknown_task").await;
    cli.assert_never_printed(&token);
}

/// A socket URL nobody serves, and `--no-socket`: long polls, said once on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn falls_back_to_long_polls() {
    let s = server(&["--ws-url", "ws://127.0.0.1:1/x"]).await;
    let mut cli = Cli::new(&s.base);
    let inbox = create(&mut cli, "t").await;
    for args in [
        &["t", "--count", "2"][..],
        &["t", "--count", "2", "--no-socket"],
    ] {
        let w = start_wait(&cli, args).await;
        assert!(w.notice.contains("long polls"), "{}", w.notice);
        if args.len() == 3 {
            assert!(
                w.notice.contains("ws://127.0.0.1:1/x") && w.notice.contains("cannot be reached"),
                "{}",
                w.notice
            );
        } else {
            assert!(w.notice.contains("--no-socket"), "{}", w.notice);
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        let base = cli.saved("t")["cursor"].as_u64().unwrap_or(0);
        let a = deliver(&inbox, &json!({"n": 1})).await;
        let b = deliver(&inbox, &json!({"n": 2})).await;
        let out = w.finish(&mut cli, Duration::from_secs(30)).await;
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(sequences(&out), vec![a, b]);
        assert_eq!(out.stderr.lines().count(), 1, "said once: {out:?}");
        // Move the cursor so the next run starts after these.
        let last = events(&out)[1]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        cli.ok(&["ack", "t", &last]).await;
        assert!(cli.saved("t")["cursor"].as_u64().unwrap_or(0) > base);
    }
    // Long polls time out like the socket.
    let out = cli
        .run(&["wait", "t", "--timeout", "1", "--no-socket"])
        .await;
    assert_eq!(out.code, 8, "{out:?}");
}

/// The server restarted on the same data file and port while `wait` runs: the socket is cut,
/// `wait` reopens it and subscribes with its cursor; what came before, around and after the
/// cut prints once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_a_restart_and_loses_nothing() {
    let mut s = server(&[]).await;
    let mut cli = Cli::new(&s.base);
    let inbox = create(&mut cli, "t").await;
    let w = start_wait(&cli, &["t", "--count", "6"]).await;
    assert!(w.notice.contains("socket"), "{}", w.notice);
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in 1..=2 {
        deliver(&inbox, &json!({"n": n})).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Restart on the same port and file.
    let listen = s
        .base
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{}", s.base))
        .to_owned();
    s.child.kill().await.unwrap();
    let db = s.dir.path().join("w.db");
    let (child, base, _stdout) =
        common::spawn_serve_with(&db, &listen, &[], "warn", Stdio::inherit()).await;
    assert_eq!(base, s.base);
    s.child = child;
    for n in 3..=6 {
        deliver(&inbox, &json!({"n": n})).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let out = w.finish(&mut cli, Duration::from_secs(60)).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(sequences(&out), (1..=6).collect::<Vec<u64>>());
    let ns: Vec<Value> = events(&out)
        .iter()
        .map(|e| e["data"]["n"].clone())
        .collect();
    assert_eq!(ns, (1..=6).map(Value::from).collect::<Vec<_>>());
    assert!(
        out.stderr.contains("the socket closed"),
        "the cut was noticed: {out:?}"
    );
}
