//! Security properties of a real `agentaddress serve`, over HTTP:
//! - one address's read token opens nothing of another address (every bearer route), and
//!   leaves it unchanged; another address's event ids are unknown events;
//! - the inbox secret is not a read token, and the read token is not an inbox secret;
//! - secrets never reach the logs, at the most verbose level, in text and JSON (webhook signing
//!   secrets included, which no answer shows either);
//! - secrets are compared as fixed-length SHA-256 digests in constant time;
//! - the creation and poll rate limits hold exactly under a concurrent burst.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentaddress_blackbox::{Address, Client, Resp};
use agentaddress_core::domain::ids;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::process::Child;
use tokio::task::JoinSet;

// ---------------------------------------------------------------------------------------------
// A server of our own
// ---------------------------------------------------------------------------------------------

struct Server {
    child: Child,
    base: String,
    /// Everything the server wrote after its first stdout line (the log test reads it).
    stdout_rest: tokio::task::JoinHandle<String>,
    _dir: tempfile::TempDir,
}

/// Starts `agentaddress serve` on a free port with a fresh database, `extra` flags, `RUST_LOG`
/// and stderr going to `stderr`.
async fn start(extra: &[&str], rust_log: &str, stderr: Stdio) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base, mut reader) = common::spawn_serve_with(
        &dir.path().join("agentaddress.db"),
        "127.0.0.1:0",
        extra,
        rust_log,
        stderr,
    )
    .await;
    let stdout_rest = tokio::spawn(async move {
        let mut rest = String::new();
        let _ = reader.read_to_string(&mut rest).await;
        rest
    });
    Server {
        child,
        base,
        stdout_rest,
        _dir: dir,
    }
}

impl Server {
    /// SIGTERM, then wait for a clean exit.
    async fn stop(mut self) -> String {
        let pid = self
            .child
            .id()
            .unwrap_or_else(|| panic!("the server exited early"));
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
        let exit = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the server did not stop within 20 s of SIGTERM"))
            .expect("wait for the server");
        assert!(exit.success(), "clean exit after SIGTERM: {exit}");
        self.stdout_rest.await.expect("stdout reader")
    }
}

fn inbox_secret(a: &Address) -> String {
    a.inbox_url
        .rsplit('/')
        .next()
        .unwrap_or_else(|| panic!("inbox URL without a secret: {}", a.inbox_url))
        .to_owned()
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

#[track_caller]
fn assert_unauthorized(r: &Resp, what: &str) {
    r.expect_error(401, "unauthorized", what);
}

/// Everything `B` looks like to its owner: address, usage, feed, state, and one key.
async fn snapshot(c: &Client, b: &Address) -> Value {
    let root = c.get(&b.root, Some(&b.token)).await;
    root.expect_status(200, "inspect B");
    let events = c.events(b, "after=0&limit=100").await;
    events.expect_status(200, "B's feed");
    let state = c.get(&b.state_url, Some(&b.token)).await;
    state.expect_status(200, "B's state");
    let key = c.get(&format!("{}/k", b.state_url), Some(&b.token)).await;
    key.expect_status(200, "B's key");
    json!({"root": root.json, "events": events.json, "state": state.json, "key": key.json})
}

// ---------------------------------------------------------------------------------------------
// Authorization between addresses
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_opens_nothing_of_another_address() {
    let server = start(&[], "warn", Stdio::inherit()).await;
    let c = Client::new(&server.base);
    let a = c.new_address().await;
    let b = c.new_address().await;
    // Both feeds hold events with the same sequences, so a lookup by sequence alone would
    // find the wrong one.
    c.deliver(&a, &json!({"type": "a.one"}), None)
        .await
        .expect_status(202, "deliver to A");
    let b_event = c
        .deliver(
            &b,
            &json!({"type": "b.one", "data": {"secret": "of B"}}),
            None,
        )
        .await;
    b_event.expect_status(202, "deliver to B");
    let b_event_id = b_event.json["event"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("event id: {}", b_event.text))
        .to_owned();
    c.json(
        "PUT",
        &format!("{}/k", b.state_url),
        Some(&b.token),
        &json!({"value": {"n": 1}}),
    )
    .await
    .expect_status(200, "B writes its state");
    let before = snapshot(&c, &b).await;

    // A's token on every bearer route of B.
    let key = format!("{}/k", b.state_url);
    let event = format!("{}/{b_event_id}", b.events_url);
    let ack = format!("{event}/ack");
    let body = json!({"value": "overwritten by A"});
    let routes: Vec<(&str, String, Option<&Value>)> = vec![
        ("GET", b.root.clone(), None),
        ("DELETE", b.root.clone(), None),
        ("GET", b.events_url.clone(), None),
        ("GET", format!("{}?after=0&wait=1", b.events_url), None),
        ("GET", event.clone(), None),
        ("POST", ack.clone(), None),
        ("GET", b.state_url.clone(), None),
        ("GET", key.clone(), None),
        ("PUT", key.clone(), Some(&body)),
        ("DELETE", key.clone(), None),
        ("PUT", format!("{}/new-key", b.state_url), Some(&body)),
    ];
    let secret_a = inbox_secret(&a);
    let secret_b = inbox_secret(&b);
    for (method, url, body) in &routes {
        let wrong_tokens = [
            ("A's read token", a.token.as_str()),
            ("A's inbox secret", secret_a.as_str()),
            ("B's own inbox secret", secret_b.as_str()),
            (
                "a token sharing all but one character with B's",
                &b.token[..b.token.len() - 1],
            ),
            ("garbage", "aat_garbage"),
        ];
        for (what, token) in wrong_tokens {
            let r = match body {
                Some(v) => c.json(method, url, Some(token), v).await,
                None => c.send(method, url, Some(token), &[], None).await,
            };
            assert_unauthorized(&r, &format!("{what} on {method} {url}"));
        }
        let r = c.send(method, url, None, &[], None).await;
        assert_unauthorized(&r, &format!("no token on {method} {url}"));
        let basic = format!("Basic {}", b.token);
        let r = c
            .send(
                method,
                url,
                None,
                &[("authorization", basic.as_str())],
                None,
            )
            .await;
        assert_unauthorized(&r, &format!("B's token as Basic on {method} {url}"));
    }
    assert_eq!(
        snapshot(&c, &b).await,
        before,
        "B is unchanged by everything A tried"
    );

    // B's event id under A's own path, with A's token: an unknown event of A.
    let under_a = format!("{}/{b_event_id}", a.events_url);
    c.get(&under_a, Some(&a.token)).await.expect_error(
        404,
        "not_found",
        "B's event under A's path",
    );
    c.send("POST", &format!("{under_a}/ack"), Some(&a.token), &[], None)
        .await
        .expect_error(404, "not_found", "acking B's event under A's path");
    c.get(&format!("{}/k", a.state_url), Some(&a.token))
        .await
        .expect_error(404, "not_found", "B's key under A's path");
    assert_eq!(
        snapshot(&c, &b).await,
        before,
        "B's event is still unacknowledged"
    );
    // And B's own token still works on all of it.
    c.send("POST", &ack, Some(&b.token), &[], None)
        .await
        .expect_status(200, "B acks its own event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_secrets_and_read_tokens_are_not_interchangeable() {
    let server = start(&[], "warn", Stdio::inherit()).await;
    let c = Client::new(&server.base);
    let a = c.new_address().await;
    let b = c.new_address().await;
    let secret_a = inbox_secret(&a);
    let secret_b = inbox_secret(&b);
    let inbox = |id: &str, secret: &str| format!("{}/api/v1/inbox/{id}/{secret}", c.base);

    // The inbox secret is not a read token.
    assert_unauthorized(
        &c.get(&a.root, Some(&secret_a)).await,
        "inbox secret as bearer on GET root",
    );
    assert_unauthorized(
        &c.events(
            &Address {
                token: secret_a.clone(),
                ..a.clone()
            },
            "after=0",
        )
        .await,
        "inbox secret as bearer on GET events",
    );
    assert_unauthorized(
        &c.get(&a.state_url, Some(&secret_a)).await,
        "inbox secret as bearer on GET state",
    );

    // The read token is not an inbox secret, and secrets are per address.
    let body = json!({"type": "should.not.arrive"});
    for (what, url) in [
        ("A's read token as A's inbox secret", inbox(&a.id, &a.token)),
        ("B's inbox secret with A's id", inbox(&a.id, &secret_b)),
        ("A's inbox secret with B's id", inbox(&b.id, &secret_a)),
        ("A's read token with B's id", inbox(&b.id, &a.token)),
        (
            "A's secret missing its last character",
            inbox(&a.id, &secret_a[..secret_a.len() - 1]),
        ),
        (
            "A's secret with one more character",
            inbox(&a.id, &format!("{secret_a}A")),
        ),
        (
            "the SHA-256 of A's secret",
            inbox(&a.id, &sha256_hex(&secret_a)),
        ),
    ] {
        let r = c
            .send(
                "POST",
                &url,
                None,
                &[("content-type", "application/json")],
                Some(body.to_string().into_bytes()),
            )
            .await;
        r.expect_error(404, "not_found", what);
    }
    // Nothing arrived anywhere; the real inbox URL still works.
    for addr in [&a, &b] {
        let r = c.events(addr, "after=0").await;
        r.expect_status(200, "read the feed");
        assert_eq!(
            r.json["events"],
            json!([]),
            "no event was delivered: {}",
            r.text
        );
    }
    c.deliver(&a, &body, None)
        .await
        .expect_status(202, "A's own inbox URL");
}

/// The answers to a wrong token do not depend on how wrong it is, nor on whether the address
/// exists: no oracle for guessing a token character by character or probing ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_all_look_the_same() {
    let server = start(&[], "warn", Stdio::inherit()).await;
    let c = Client::new(&server.base);
    let a = c.new_address().await;
    let last = a.token.chars().last().unwrap_or('A');
    let flipped = if last == 'A' { 'B' } else { 'A' };
    let near = format!("{}{flipped}", &a.token[..a.token.len() - 1]);
    let random = ids::new_read_token();
    let unknown_root = format!("{}/api/v1/addresses/addr_AAAAAAAAAAAAAAAAAAAAAA", c.base);
    let answers = [
        c.get(&a.root, Some(&near)).await,
        c.get(&a.root, Some(&random)).await,
        c.get(&a.root, Some(&a.token[..10])).await,
        c.get(&unknown_root, Some(&a.token)).await,
        c.get(&unknown_root, Some(&random)).await,
        c.get(
            &format!("{}/api/v1/addresses/not%20an%20id", c.base),
            Some(&a.token),
        )
        .await,
    ];
    for r in &answers {
        assert_unauthorized(r, "a wrong token");
        assert_eq!(
            (r.status, &r.text),
            (answers[0].status, &answers[0].text),
            "identical answers"
        );
    }
    c.get(&a.root, Some(&a.token))
        .await
        .expect_status(200, "the right token");
}

// ---------------------------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------------------------

/// Exercises every route with real and wrong secrets; returns the address ids and the
/// secrets involved.
async fn full_run(c: &Client) -> (Vec<String>, Vec<String>) {
    let a = c
        .create_address(&json!({"name": "log test", "task_id": "logs", "expires_in_seconds": 3600}))
        .await;
    let b = c.new_address().await;
    let (secret_a, secret_b) = (inbox_secret(&a), inbox_secret(&b));
    let json_ct = ("content-type", "application/json");

    // Deliveries: plain, idempotent (again, and reused with another body), non-JSON, and one
    // whose sender put a token and cookies in headers that are not recorded.
    c.deliver(
        &a,
        &json!({"type": "ci.finished", "data": {"ok": true}}),
        None,
    )
    .await
    .expect_status(202, "deliver");
    c.deliver(&a, &json!({"type": "x"}), Some("key-1"))
        .await
        .expect_status(202, "deliver with key");
    c.deliver(&a, &json!({"type": "x"}), Some("key-1"))
        .await
        .expect_status(200, "duplicate");
    c.deliver(&a, &json!({"type": "y"}), Some("key-1"))
        .await
        .expect_status(422, "reused key");
    let auth = format!("Bearer {}", a.token);
    let cookie = format!("session={secret_b}");
    c.send(
        "POST",
        &a.inbox_url,
        None,
        &[
            ("content-type", "text/plain"),
            ("authorization", &auth),
            ("cookie", &cookie),
            ("user-agent", "log-test/1"),
            ("x-hub-signature-256", "sha256=00"),
        ],
        Some(b"plain text body".to_vec()),
    )
    .await
    .expect_status(202, "deliver text with stray credentials");
    // Wrong inbox URLs.
    for url in [
        format!("{}/api/v1/inbox/{}/{}", c.base, a.id, a.token),
        format!("{}/api/v1/inbox/{}/{}", c.base, a.id, secret_b),
        format!("{}/api/v1/inbox/{}/{}", c.base, b.id, secret_a),
    ] {
        c.send("POST", &url, None, &[json_ct], Some(b"{}".to_vec()))
            .await
            .expect_status(404, "wrong inbox URL");
    }

    // Reads with the token, a short long poll, acks.
    let page = c.events(&a, "after=0&limit=100").await;
    page.expect_status(200, "read");
    let first = page.json["events"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let cursor = page.json["next_cursor"].as_u64().unwrap_or_default();
    c.events(&a, &format!("after={cursor}&wait=1"))
        .await
        .expect_status(200, "long poll");
    c.get(&format!("{}/{first}", a.events_url), Some(&a.token))
        .await
        .expect_status(200, "one event");
    for _ in 0..2 {
        c.send(
            "POST",
            &format!("{}/{first}/ack", a.events_url),
            Some(&a.token),
            &[],
            None,
        )
        .await
        .expect_status(200, "ack");
    }
    c.events(&a, "after=0&limit=0")
        .await
        .expect_status(400, "bad query");

    // Wrong tokens.
    for token in [b.token.as_str(), secret_a.as_str(), "aat_wrong"] {
        assert_unauthorized(&c.get(&a.root, Some(token)).await, "wrong token");
        assert_unauthorized(
            &c.events(
                &Address {
                    token: token.to_owned(),
                    ..a.clone()
                },
                "after=0",
            )
            .await,
            "wrong token",
        );
    }

    // State writes.
    let key = format!("{}/progress", a.state_url);
    c.json(
        "PUT",
        &key,
        Some(&a.token),
        &json!({"value": {"step": 1}, "if_revision": 0}),
    )
    .await
    .expect_status(200, "create key");
    c.json(
        "PUT",
        &key,
        Some(&a.token),
        &json!({"value": {"step": 2}, "if_revision": 1}),
    )
    .await
    .expect_error(409, "revision_conflict", "stale revision");
    c.send(
        "PUT",
        &key,
        Some(&a.token),
        &[json_ct, ("if-match", "*")],
        Some(b"{\"value\":1}".to_vec()),
    )
    .await
    .expect_status(400, "bad If-Match");
    c.get(&a.state_url, Some(&a.token))
        .await
        .expect_status(200, "list state");
    c.get(&key, Some(&a.token))
        .await
        .expect_status(200, "get key");
    c.send("DELETE", &key, Some(&a.token), &[], None)
        .await
        .expect_status(200, "delete key");

    // Service routes, unknown routes and methods.
    c.get("/healthz", None).await.expect_status(200, "healthz");
    c.get("/openapi.json", None)
        .await
        .expect_status(200, "openapi");
    c.get("/skill.md", None).await.expect_status(200, "skill");
    c.get("/nope", None)
        .await
        .expect_status(404, "unknown route");
    c.send("PATCH", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(405, "wrong method");

    // Inspect and delete; then the address is gone.
    c.get(&a.root, Some(&a.token))
        .await
        .expect_status(200, "inspect");
    c.send("DELETE", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(204, "delete");
    c.get(&a.root, Some(&a.token))
        .await
        .expect_error(410, "address_gone", "deleted");
    c.deliver(&a, &json!({"late": true}), None)
        .await
        .expect_error(410, "address_gone", "inbox of a deleted address");

    (
        vec![a.id.clone(), b.id.clone()],
        vec![a.token.clone(), b.token.clone(), secret_a, secret_b],
    )
}

async fn logs_carry_no_secret(format: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log_path = dir.path().join("stderr.log");
    let log_file = std::fs::File::create(&log_path).expect("log file");
    const INGEST: &str = "ingest-0123456789abcdef0123456789";
    let server = start(
        &["--log-format", format, "--email-ingest-secret", INGEST],
        "trace",
        Stdio::from(log_file),
    )
    .await;
    let c = Client::new(&server.base);
    let (ids, mut secrets) = full_run(&c).await;
    // Mail through the webhook door, with the ingest secret and with a wrong one.
    let http = reqwest::Client::new();
    for (secret, status) in [(INGEST, 200), ("ingest-wrong-0123456789abcdef01", 401)] {
        let r = http
            .post(format!(
                "{}/api/v1/email/inbound?rcpt={}@inbox.localhost",
                server.base, ids[0]
            ))
            .bearer_auth(secret)
            .body("From: a@example.com\r\nSubject: hi\r\n\r\nbody\r\n")
            .send()
            .await
            .expect("webhook");
        assert_eq!(r.status(), status);
    }
    secrets.push(INGEST.to_owned());
    // A request for a person: its page, a wrong secret, its answer; the page secret is a
    // secret like the others (docs/API.md §12).
    let b = c.new_address().await;
    let asked = agentaddress_blackbox::requests::ask(&c, &b, &json!({"title": "Log me?"})).await;
    let url = asked["url"].as_str().unwrap_or_default().to_owned();
    let (base, page_secret) = url.rsplit_once('/').unwrap_or_default();
    c.get(&url, None).await.expect_status(200, "the page");
    c.get(&format!("{base}/ars_{}", "x".repeat(43)), None)
        .await
        .expect_status(404, "a wrong page secret");
    let answered =
        agentaddress_blackbox::requests::answer_form(&url, &[("choice", "Approve")]).await;
    assert_eq!(answered.status(), 303, "the answer");
    secrets.push(page_secret.to_owned());
    secrets.push(b.token.clone());
    // Verified webhooks (docs/API.md §15): the signing secrets, set at creation and by PUT,
    // with signed, unsigned and refused deliveries; no answer shows them (checked by the
    // scenario) and neither may the logs.
    secrets.extend(agentaddress_blackbox::verification::verified_webhooks(&c).await);
    let stdout = server.stop().await;
    let logs = format!("{}{stdout}", read(&log_path));

    // About 45 requests, one line each, plus start-up, connections and shutdown.
    let lines = logs.lines().count();
    assert!(lines >= 40, "the run was logged ({lines} lines):\n{logs}");
    // The logs did see the requests, by route template: the search below can fail.
    for template in [
        "/api/v1/inbox/{address_id}/{inbox_secret}",
        "/api/v1/addresses/{address_id}/events",
        "/api/v1/addresses/{address_id}/state/{key}",
        "/api/v1/email/inbound",
        "/r/{request_id}/{secret}",
    ] {
        assert!(
            logs.contains(template),
            "{template} appears in the {format} logs"
        );
    }
    // Positive control: address ids (not secrets) are logged when an address is created, so a
    // string of a secret's shape would be found.
    for id in &ids {
        assert!(
            logs.contains(id.as_str()),
            "the {format} logs name address {id}"
        );
    }
    if format == "json" {
        let parsed = logs
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).is_ok())
            .count();
        assert!(
            parsed * 10 >= lines * 9,
            "JSON logs are JSON lines ({parsed} of {lines})"
        );
    }
    for secret in &secrets {
        let (_, random) = secret.split_at(4);
        for (what, needle) in [
            ("secret", secret.clone()),
            ("secret without its prefix", random.to_owned()),
            ("SHA-256 of the secret", sha256_hex(secret)),
            (
                "SHA-256 of the secret, upper case",
                sha256_hex(secret).to_ascii_uppercase(),
            ),
        ] {
            assert!(
                !logs.contains(&needle),
                "the {format} logs contain a {what} ({needle}); line: {:?}",
                logs.lines().find(|l| l.contains(&needle))
            );
        }
    }
    println!(
        "{format} logs: {lines} lines, {} bytes, no secret among {} checked",
        logs.len(),
        secrets.len()
    );
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(
        &std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display())),
    )
    .into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_at_trace_carry_no_secret() {
    logs_carry_no_secret("text").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_at_trace_carry_no_secret() {
    logs_carry_no_secret("json").await;
}

// ---------------------------------------------------------------------------------------------
// Constant-time comparison
// ---------------------------------------------------------------------------------------------

/// Secrets are stored as the hex SHA-256 of the whole secret, and a presented secret is hashed
/// before it is compared: the comparison is between two 32-byte digests (with `subtle`'s
/// `ConstantTimeEq`), so its time cannot depend on how long a prefix of the secret a guess got
/// right. A wrong secret sharing all but its last character is refused exactly like a random
/// one, and nothing but the exact secret verifies.
#[test]
fn secrets_are_compared_as_digests() {
    for secret in [ids::new_read_token(), ids::new_inbox_secret()] {
        let stored = ids::hash_secret(&secret);
        assert_eq!(
            stored,
            sha256_hex(&secret),
            "stored form is the hex SHA-256"
        );
        assert_eq!(stored.len(), 64);
        assert!(ids::verify_secret(&secret, &stored));

        let chars: Vec<char> = secret.chars().collect();
        let mut near = chars.clone();
        let last = near.len() - 1;
        near[last] = if near[last] == 'A' { 'B' } else { 'A' };
        let near: String = near.into_iter().collect();
        let mut first_wrong = chars.clone();
        first_wrong[4] = if first_wrong[4] == 'A' { 'B' } else { 'A' };
        let first_wrong: String = first_wrong.into_iter().collect();
        let wrong = [
            near.clone(),
            first_wrong,
            ids::new_read_token(),
            secret[..secret.len() - 1].to_owned(),
            format!("{secret}A"),
            secret.to_ascii_uppercase(),
            String::new(),
            stored.clone(),
        ];
        for w in &wrong {
            assert!(!ids::verify_secret(w, &stored), "{w:?} must not verify");
        }
        // The digests of a near miss and of the secret share no exploitable prefix: they are
        // unrelated 32-byte values.
        let common = sha256_hex(&near)
            .bytes()
            .zip(stored.bytes())
            .take_while(|(x, y)| x == y)
            .count();
        assert!(common < 16, "digests of near misses are unrelated");
        // A malformed or truncated stored hash never verifies (no prefix comparison).
        assert!(!ids::verify_secret(&secret, &stored[..62]));
        assert!(!ids::verify_secret(&secret, &stored[..32]));
        assert!(!ids::verify_secret(&secret, ""));
        assert!(!ids::verify_secret(&secret, "zz"));
    }
}

/// A dudect-style check of `verify_secret`: Welch's t statistic between the timings of a
/// near miss (all but the last character right) and of a random wrong secret. Timing
/// measurements are noisy on shared machines, so this is not part of the suite; run it with
/// `cargo nextest run -p agentaddress-cli --test security --run-ignored only`.
#[test]
#[ignore = "statistical timing check; run on a quiet machine"]
fn dudect_verify_secret() {
    use std::time::Instant;
    let secret = ids::new_read_token();
    let stored = ids::hash_secret(&secret);
    let near = format!(
        "{}{}",
        &secret[..secret.len() - 1],
        if secret.ends_with('A') { 'B' } else { 'A' }
    );
    let randoms: Vec<String> = (0..64).map(|_| ids::new_read_token()).collect();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..200_000 {
        let (class_a, input) = if round % 2 == 0 {
            (true, near.as_str())
        } else {
            (false, randoms[round % 64].as_str())
        };
        let t = Instant::now();
        let ok = ids::verify_secret(std::hint::black_box(input), std::hint::black_box(&stored));
        let ns = t.elapsed().as_nanos() as f64;
        assert!(!ok);
        if class_a {
            a.push(ns)
        } else {
            b.push(ns)
        }
    }
    // Drop the slowest 5% of each class (preemption, interrupts), as dudect does.
    let crop = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.truncate(v.len() * 95 / 100);
    };
    crop(&mut a);
    crop(&mut b);
    let stats = |v: &[f64]| {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var, n)
    };
    let ((ma, va, na), (mb, vb, nb)) = (stats(&a), stats(&b));
    let t = (ma - mb) / (va / na + vb / nb).sqrt();
    println!("near miss {ma:.1} ns, random {mb:.1} ns, Welch t = {t:.2}");
    assert!(t.abs() < 10.0, "timing depends on the guess: t = {t:.2}");
}

// ---------------------------------------------------------------------------------------------
// Rate limits under a burst
// ---------------------------------------------------------------------------------------------

/// Rate windows are calendar minutes (`now / 60 s`): waits, if needed, until a burst that takes
/// at most `budget` fits in the current window.
async fn wait_for_room_in_the_window(budget: Duration) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock before 1970");
    let into_minute = Duration::from_millis((now.as_millis() % 60_000) as u64);
    let left = Duration::from_secs(60) - into_minute;
    if left < budget {
        tokio::time::sleep(left + Duration::from_millis(300)).await;
    }
}

#[track_caller]
fn assert_rate_limited(r: &Resp, what: &str) {
    r.expect_error(429, "rate_limited", what);
    let header: u64 = r
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: 429 without a numeric Retry-After: {:?}", r.headers));
    let body = r.json["error"]["retry_after_seconds"]
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: no retry_after_seconds: {}", r.text));
    assert!((1..=60).contains(&header), "{what}: Retry-After {header}");
    assert!(
        header.abs_diff(body) <= 1,
        "{what}: Retry-After {header} vs retry_after_seconds {body}"
    );
}

fn tally(rs: &[Resp]) -> (usize, usize, Vec<u16>) {
    let ok = rs.iter().filter(|r| (200..300).contains(&r.status)).count();
    let limited = rs.iter().filter(|r| r.status == 429).count();
    let other = rs
        .iter()
        .map(|r| r.status)
        .filter(|s| !(200..300).contains(s) && *s != 429)
        .collect();
    (ok, limited, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creation_limit_holds_under_a_burst() {
    let server = start(&[], "warn", Stdio::inherit()).await;
    let c = Client::new(&server.base);
    wait_for_room_in_the_window(Duration::from_secs(15)).await;
    let mut burst = JoinSet::new();
    for i in 0..50 {
        let c = c.clone();
        burst.spawn(async move {
            c.json(
                "POST",
                "/api/v1/addresses",
                None,
                &json!({"name": format!("burst {i}")}),
            )
            .await
        });
    }
    let answers: Vec<Resp> = burst.join_all().await;
    let (created, limited, other) = tally(&answers);
    assert_eq!(other, Vec::<u16>::new(), "only 201 and 429");
    assert_eq!(
        (created, limited),
        (20, 30),
        "exactly 20 creations per IP per minute"
    );
    for r in &answers {
        match r.status {
            201 => {
                r.expect_status(201, "created");
                assert!(
                    r.json["credentials"]["read_token"].is_string(),
                    "{}",
                    r.text
                );
            }
            _ => assert_rate_limited(r, "creation over the limit"),
        }
    }
    // Still limited right after the burst.
    assert_rate_limited(
        &c.json("POST", "/api/v1/addresses", None, &json!({})).await,
        "51st creation",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poll_limit_holds_under_a_burst() {
    let server = start(&[], "warn", Stdio::inherit()).await;
    let c = Client::new(&server.base);
    let a = c.new_address().await;
    let b = c.new_address().await;
    c.deliver(&a, &json!({"type": "one"}), None)
        .await
        .expect_status(202, "deliver");
    wait_for_room_in_the_window(Duration::from_secs(15)).await;
    let mut burst = JoinSet::new();
    for _ in 0..60 {
        let c = c.clone();
        let a = a.clone();
        burst.spawn(async move { c.events(&a, "after=0&wait=0").await });
    }
    let answers: Vec<Resp> = burst.join_all().await;
    let (read, limited, other) = tally(&answers);
    assert_eq!(other, Vec::<u16>::new(), "only 200 and 429");
    assert_eq!(
        (read, limited),
        (30, 30),
        "exactly 30 polls per address per minute"
    );
    for r in &answers {
        match r.status {
            200 => assert_eq!(r.json["events"][0]["type"], "one", "{}", r.text),
            _ => assert_rate_limited(r, "poll over the limit"),
        }
    }
    // The limit is per address: B polls freely; single-event reads are not polls.
    c.events(&b, "after=0")
        .await
        .expect_status(200, "another address");
    assert_rate_limited(&c.events(&a, "after=0").await, "61st poll");
}
