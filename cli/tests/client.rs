//! The command-line client (`agentaddress create|handoff|poll|ack|state`), run as a subprocess
//! against a real `agentaddress serve` on a free port, with a fresh credentials directory
//! (`AGENTADDRESS_HOME`) per test.

mod client_harness;
mod common;

use client_harness::{check_failure, deliver, mode, workflow, Cli};
use serde_json::json;
use tokio::process::Child;

struct Server {
    _child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let (child, base) = common::spawn_serve(&dir.path().join("a.db"), "127.0.0.1:0", &[]).await;
    Server {
        _child: child,
        base,
        _dir: dir,
    }
}

/// A port nothing listens on (bound, then released).
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_workflow() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    workflow(&mut cli, "task-42").await;
}

/// `create --verify SCHEME --secret-file FILE` (docs/API.md §15): the secret is sent, shown
/// nowhere (output, credentials file), and a bad one is the server's `invalid_request`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_a_signing_secret() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let dir = tempfile::tempdir().unwrap();
    let secret = "gh-secret-7f3a9c0e5b1d2f4a6c8e";
    let file = dir.path().join("secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let path = file.to_string_lossy().into_owned();
    let out = cli
        .ok(&[
            "create",
            "hooks",
            "--verify",
            "github",
            "--secret-file",
            &path,
            "--reject-unverified",
            "--tolerance-seconds",
            "60",
        ])
        .await;
    assert_eq!(
        out["verification"],
        json!({"scheme": "github", "reject_unverified": true}),
        "GitHub signs no timestamp: no tolerance_seconds (docs/API.md §15)"
    );
    assert!(!out.to_string().contains(secret));
    let saved = std::fs::read_to_string(cli.file("hooks")).unwrap();
    assert!(!saved.contains(secret), "{saved}");
    // The trailing newline was not part of the secret: GitHub's signature of the body verifies.
    let inbox = out["inbox_url"].as_str().unwrap_or_default().to_owned();
    let body = b"{\"ok\": true}".to_vec();
    let headers = agentaddress_blackbox::verification::github_headers(secret, "d-1", &body);
    let mut req = reqwest::Client::new().post(&inbox).body(body);
    for (k, v) in &headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status().as_u16(), 202);
    // A Stripe secret must start with whsec_: refused by the server, without echoing it.
    let out = cli
        .run(&[
            "create",
            "stripe",
            "--verify",
            "stripe",
            "--secret-file",
            &path,
        ])
        .await;
    let error = check_failure(&out, 2, "invalid_request");
    assert!(!error.to_string().contains(secret), "{error}");
    // --verify needs --secret-file (the argument parser's usage error).
    let out = cli.run(&["create", "t9", "--verify", "github"]).await;
    assert_eq!(out.code, 2, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_refuses_an_existing_task_unless_forced() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let first = cli.ok(&["create", "t1"]).await;
    assert_eq!(first["expires_at"], serde_json::Value::Null);
    let old_token = cli.token("t1");
    let before = std::fs::read(cli.file("t1")).unwrap();

    let error = cli.fails(&["create", "t1"], 6, "task_exists").await;
    assert!(error["message"]
        .as_str()
        .unwrap_or_default()
        .contains("--force"));
    assert_eq!(
        std::fs::read(cli.file("t1")).unwrap(),
        before,
        "the file must not change"
    );

    let second = cli.ok(&["create", "t1", "--force"]).await;
    assert_ne!(second["address_id"], first["address_id"]);
    assert_ne!(second["inbox_url"], first["inbox_url"]);
    assert_eq!(mode(&cli.file("t1")), 0o600);
    let new_token = cli.token("t1");
    assert_ne!(new_token, old_token);
    assert_eq!(cli.ok(&["handoff", "t1"]).await, second);

    // The old address still works with its token; the task now reads the new one.
    let page = cli.ok(&["poll", "t1"]).await;
    assert_eq!(page["next_cursor"], 0);
    cli.assert_never_printed(&old_token);
    cli.assert_never_printed(&new_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_of_the_credentials() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    // An existing directory open to others is tightened; the file is 0600 whatever the umask.
    std::fs::create_dir(&cli.home).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cli.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    cli.ok(&["create", "perm"]).await;
    assert_eq!(mode(&cli.home), 0o700);
    assert_eq!(mode(&cli.file("perm")), 0o600);
    // A nested directory that does not exist yet is created 0700.
    let nested = cli.scratch("a/b/creds");
    let mut c2 = Cli::new(&s.base);
    c2.home = nested.clone();
    c2.ok(&["create", "nested"]).await;
    assert_eq!(mode(&nested), 0o700);
    assert_eq!(mode(&nested.join("nested.json")), 0o600);
    cli.assert_never_printed(&cli.token("perm"));
    c2.assert_never_printed(&c2.token("nested"));

    // A file its group or others may use is refused before it is read (docs/CLI.md,
    // "Credentials files"); fields a newer writer added survive the CLI's rewrite.
    use std::os::unix::fs::PermissionsExt;
    let path = cli.file("perm");
    let mut saved = cli.saved("perm");
    saved["written_by"] = json!({"client": "python", "version": 2});
    std::fs::write(&path, saved.to_string()).unwrap();
    for bits in [0o644, 0o640, 0o602] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bits)).unwrap();
        let e = cli
            .fails(&["poll", "perm"], 1, "credentials_insecure")
            .await;
        let message = e["message"].as_str().unwrap_or_default();
        assert!(message.contains("chmod 600"), "{e}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let inbox = saved["inbox_url"].as_str().unwrap_or_default().to_owned();
    let r = reqwest::Client::new()
        .post(&inbox)
        .json(&json!({"type": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let page = cli.ok(&["poll", "perm"]).await;
    let id = page["events"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    cli.ok(&["ack", "perm", &id]).await;
    let after = cli.saved("perm");
    assert_eq!(after["cursor"], 1, "{after}");
    assert_eq!(
        after["written_by"],
        json!({"client": "python", "version": 2}),
        "an unknown field survives the CLI's rewrite"
    );
    assert_eq!(mode(&path), 0o600);
    cli.assert_never_printed(&cli.token("perm"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let created = cli.ok(&["create", "t"]).await;
    let token = cli.token("t");

    // Unknown task: no saved credentials.
    for args in [
        &["poll", "nope"][..],
        &["handoff", "nope"],
        &["ack", "nope", "evt_x"],
        &["state", "keys", "nope"],
        &["state", "get", "nope", "k"],
    ] {
        let e = cli.fails(args, 4, "unknown_task").await;
        assert!(e["message"].as_str().unwrap_or_default().contains("create"));
    }

    // Task names that are not safe file names.
    for bad in [
        "../x",
        "..",
        ".",
        "a/b",
        ".hidden",
        "a b",
        "",
        "/etc/passwd",
    ] {
        cli.fails(&["create", bad], 2, "invalid_task").await;
        cli.fails(&["poll", bad], 2, "invalid_task").await;
        cli.fails(&["state", "set", bad, "k", "-"], 2, "invalid_task")
            .await;
    }
    assert!(!cli.scratch("x.json").exists());

    // Bad JSON input, a missing file, bad keys: refused before any request.
    let bad = cli.scratch("bad.json");
    std::fs::write(&bad, b"{\"step\": 1,").unwrap();
    let bad = bad.display().to_string();
    let e = cli
        .fails(&["state", "set", "t", "k", &bad], 2, "invalid_json")
        .await;
    assert!(e["message"].as_str().unwrap_or_default().contains("line 1"));
    let out = cli
        .run_with(
            &["state", "set", "t", "k", "-"],
            Some(&s.base),
            Some(b"not json"),
        )
        .await;
    check_failure(&out, 2, "invalid_json");
    let out = cli
        .run_with(&["state", "set", "t", "k"], Some(&s.base), Some(b""))
        .await;
    check_failure(&out, 2, "invalid_json");
    let missing = cli.scratch("missing.json").display().to_string();
    cli.fails(&["state", "set", "t", "k", &missing], 2, "usage")
        .await;
    for key in ["bad key", "a/b", "..", ".", "é", &"k".repeat(129)] {
        cli.fails(&["state", "get", "t", key], 2, "invalid_request")
            .await;
        cli.fails(&["state", "delete", "t", key], 2, "invalid_request")
            .await;
        let out = cli
            .run_with(&["state", "set", "t", key, "-"], Some(&s.base), Some(b"1"))
            .await;
        check_failure(&out, 2, "invalid_request");
    }
    cli.fails(&["ack", "t", "not an id"], 2, "invalid_request")
        .await;
    assert_eq!(cli.ok(&["state", "keys", "t"]).await["state_keys"], 0);

    // Errors of the server come with its code and exit code.
    cli.fails(
        &["ack", "t", "evt_AAAAAAAAAAAAAAAAAAAAAAAA1"],
        4,
        "not_found",
    )
    .await;
    cli.fails(&["state", "get", "t", "absent"], 4, "not_found")
        .await;
    // A value too large for the state limits.
    let big = cli.scratch("big.json");
    std::fs::write(&big, json!("x".repeat(70_000)).to_string()).unwrap();
    let out = cli
        .run(&["state", "set", "t", "big", &big.display().to_string()])
        .await;
    check_failure(&out, 1, "payload_too_large");

    // Argument errors (the parser's own, text): exit 2.
    for args in [
        &["poll", "t", "--wait", "99"][..],
        &["poll", "t", "--limit", "0"],
        &["create", "t2", "--expires-in", "5"],
        &["state", "set", "t", "k", "-", "--if-revision", "x"],
        &["ack", "t"],
    ] {
        let out = cli.run(args).await;
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stdout.is_empty());
    }

    // Server down: `unreachable`, exit 3, and create saves nothing.
    let dead = dead_url();
    let e = cli
        .fails(&["poll", "t", "--url", &dead], 3, "unreachable")
        .await;
    assert!(
        e["message"].as_str().unwrap_or_default().contains(&dead),
        "{e}"
    );
    let out = cli
        .run_with(&["state", "keys", "t"], Some(&dead), None)
        .await;
    check_failure(&out, 3, "unreachable");
    let out = cli.run_with(&["create", "t3"], Some(&dead), None).await;
    check_failure(&out, 3, "unreachable");
    assert!(!cli.file("t3").exists());
    cli.fails(&["create", "t4", "--url", "ftp://x"], 2, "usage")
        .await;

    // A deleted address: `address_gone`, exit 5.
    let id = created["address_id"].as_str().unwrap_or_default();
    let status = reqwest::Client::new()
        .delete(format!("{}/api/v1/addresses/{id}", s.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 204);
    cli.fails(&["poll", "t"], 5, "address_gone").await;
    cli.fails(&["state", "keys", "t"], 5, "address_gone").await;

    // A wrong token: `unauthorized`, exit 5, and the wrong token is not printed either.
    let path = cli.file("t");
    let mut saved = cli.saved("t");
    let wrong = "aat_wrongwrongwrongwrongwrongwrongwrongwrong";
    saved["read_token"] = json!(wrong);
    std::fs::write(&path, saved.to_string()).unwrap();
    cli.fails(&["poll", "t"], 5, "unauthorized").await;
    cli.assert_never_printed(wrong);

    // A corrupt credentials file.
    std::fs::write(&path, b"{\"read_token\": \"aat_secretsecretsecret\",").unwrap();
    cli.fails(&["poll", "t"], 1, "credentials_error").await;
    cli.assert_never_printed("aat_secretsecretsecret");

    cli.assert_never_printed(&token);
}

/// The server URL saved by `create` is used by the later commands; `--url` and
/// `AGENTADDRESS_URL` override it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_url_resolution() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let created = cli.ok(&["create", "u", "--url", &s.base]).await;
    assert_eq!(created["url"], s.base.as_str());
    let seq = deliver(
        created["inbox_url"].as_str().unwrap_or_default(),
        &json!({"n": 1}),
    )
    .await;
    // No URL in the environment: the saved one.
    let out = cli.run_with(&["poll", "u"], None, None).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["next_cursor"], seq);
    // The environment's (dead) URL wins over the saved one; --url over the environment.
    let dead = dead_url();
    let out = cli.run_with(&["poll", "u"], Some(&dead), None).await;
    check_failure(&out, 3, "unreachable");
    let out = cli
        .run_with(&["poll", "u", "--url", &s.base], Some(&dead), None)
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let out = cli
        .run_with(&["state", "--url", &s.base, "keys", "u"], Some(&dead), None)
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    cli.assert_never_printed(&cli.token("u"));
}

/// `attachment`: the bytes of an email's attachment saved into a new 0600 file, under a plain
/// name in the working directory whatever the sender called it, never overwriting a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_is_saved_into_a_new_file_and_never_escapes() {
    use base64::Engine;
    const SECRET: &str = "client-test-ingest-secret-012345";
    let dir = tempfile::tempdir().expect("temp dir");
    let (_child, base) = common::spawn_serve(
        &dir.path().join("a.db"),
        "127.0.0.1:0",
        &["--email-ingest-secret", SECRET],
    )
    .await;
    let mut cli = Cli::new(&base);
    let created = cli.ok(&["create", "mail"]).await;
    let email = created["email"].as_str().unwrap_or_default().to_owned();
    let bytes: Vec<u8> = (0..20_000u32).map(|n| (n * 13 % 256) as u8).collect();
    let raw = format!(
        "From: ada@example.com\r\nSubject: a file\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
         --b\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n\
         --b\r\nContent-Type: application/octet-stream\r\n\
         Content-Disposition: attachment; filename=\"../../../escape.bin\"\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n{}\r\n--b--\r\n",
        base64::engine::general_purpose::STANDARD.encode(&bytes)
    );
    let r = reqwest::Client::new()
        .post(format!("{base}/api/v1/email/inbound?rcpt={email}"))
        .bearer_auth(SECRET)
        .body(raw)
        .send()
        .await
        .expect("ingest");
    assert_eq!(r.status(), 200);
    let page = cli.ok(&["poll", "mail"]).await;
    let event = &page["events"][0];
    let event_id = event["id"].as_str().unwrap_or_default().to_owned();
    let att = event["data"]["attachments"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let work = cli.scratch("work/inner");
    std::fs::create_dir_all(&work).unwrap();
    cli.cwd = Some(work.clone());
    let saved = cli.ok(&["attachment", "mail", &event_id, &att]).await;
    let file = work.join("escape.bin");
    assert_eq!(saved["filename"], "escape.bin");
    assert_eq!(saved["size"], bytes.len());
    assert_eq!(std::fs::read(&file).unwrap_or_default(), bytes);
    assert_eq!(mode(&file), 0o600);
    let entries: Vec<_> = std::fs::read_dir(cli.scratch("work"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        entries,
        vec![std::ffi::OsString::from("inner")],
        "nothing outside the folder"
    );

    // Never overwritten: neither the default name nor --out.
    std::fs::write(&file, b"mine").unwrap();
    cli.fails(&["attachment", "mail", &event_id, &att], 6, "file_exists")
        .await;
    assert_eq!(std::fs::read(&file).unwrap_or_default(), b"mine");
    let out = work.join("chosen.bin");
    let out_arg = out.display().to_string();
    cli.ok(&["attachment", "mail", &event_id, &att, "--out", &out_arg])
        .await;
    assert_eq!(std::fs::read(&out).unwrap_or_default(), bytes);
    cli.fails(
        &["attachment", "mail", &event_id, &att, "--out", &out_arg],
        6,
        "file_exists",
    )
    .await;

    // Errors: an unknown attachment, a malformed id.
    cli.fails(&["attachment", "mail", &event_id, "att_99"], 4, "not_found")
        .await;
    cli.fails(
        &["attachment", "mail", &event_id, "bad id"],
        2,
        "invalid_request",
    )
    .await;
    let token = cli.token("mail");
    cli.assert_never_printed(&token);
}

/// `agentaddress ask`: the request and its page URL are printed (never the token); the
/// person's answer arrives through `poll`; the same --idempotency-key gives the same URL; a bad
/// option is refused by the server with exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_a_person_and_poll_the_answer() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    cli.create(&["create", "deploy"]).await;
    let body = cli.scratch("body.md");
    std::fs::write(&body, "The **build** passed.").unwrap();
    let body = body.display().to_string();
    let asked = cli
        .ok(&[
            "ask",
            "deploy",
            "Ship it?",
            "--option",
            "Ship",
            "--option",
            "Hold",
            "--body",
            &body,
            "--comment",
            "none",
            "--idempotency-key",
            "ask-1",
        ])
        .await;
    let r = &asked["request"];
    assert_eq!(r["options"], json!(["Ship", "Hold"]));
    assert_eq!(r["body"], "The **build** passed.");
    assert_eq!(r["comment"], "none");
    let url = r["url"].as_str().unwrap_or_default().to_owned();
    assert!(url.starts_with(&format!("{}/r/req_", s.base)), "{url}");
    let again = cli
        .ok(&[
            "ask",
            "deploy",
            "Ship it?",
            "--option",
            "Ship",
            "--option",
            "Hold",
            "--body",
            &body,
            "--comment",
            "none",
            "--idempotency-key",
            "ask-1",
        ])
        .await;
    assert_eq!(
        again["request"]["url"],
        url.as_str(),
        "a retry prints the same URL"
    );

    let answered = agentaddress_blackbox::requests::answer_form(&url, &[("choice", "Ship")]).await;
    assert_eq!(answered.status(), 303);
    let polled = cli.ok(&["poll", "deploy", "--wait", "5"]).await;
    assert_eq!(polled["events"][0]["type"], "request.answered", "{polled}");
    assert_eq!(polled["events"][0]["data"]["choice"], "Ship");

    cli.fails(
        &["ask", "deploy", "Dup?", "--option", "a", "--option", "a"],
        2,
        "invalid_request",
    )
    .await;
    cli.assert_never_printed(&cli.token("deploy"));
}

/// `ask --wait` (docs/API.md §21): the page's URL on stderr at once, the request printed still
/// open when the time is up, or answered (with the URL of the first answer) once answered;
/// `poll --type` and `wait --type` read only matching events and pass over the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_waits_for_the_answer_and_poll_and_wait_filter_by_type() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let created = cli.create(&["create", "t"]).await;
    let inbox = created["inbox_url"].as_str().unwrap_or_default().to_owned();
    let ask = ["ask", "t", "Ship?", "--idempotency-key", "k1", "--wait"];
    let out = cli.run(&[&ask[..], &["1"]].concat()).await;
    assert_eq!(out.code, 0, "{out:?}");
    let first = out.json();
    assert_eq!(first["request"]["status"], "open", "{first}");
    let url = first["request"]["url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        out.stderr.contains("notice") && out.stderr.contains(&url),
        "{out:?}"
    );
    let answered =
        agentaddress_blackbox::requests::answer_form(&url, &[("choice", "Approve")]).await;
    assert_eq!(answered.status(), 303);
    let started = std::time::Instant::now();
    let out = cli.run(&[&ask[..], &["20"]].concat()).await;
    assert_eq!(out.code, 0, "{out:?}");
    let again = out.json();
    assert_eq!(again["request"]["status"], "answered", "{again}");
    assert_eq!(again["request"]["answer"]["choice"], "Approve");
    assert_eq!(again["request"]["url"], url.as_str(), "the URL stays");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    // Events 2..=5: ping, order.created, ping, order.paid (1 is the answer).
    for t in ["ping", "order.created", "ping", "order.paid"] {
        deliver(&inbox, &json!({"type": t})).await;
    }
    let polled = cli
        .ok(&["poll", "t", "--type", "order.*", "--after", "1"])
        .await;
    let seqs: Vec<u64> = polled["events"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["sequence"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(seqs, vec![3, 5], "{polled}");
    let polled = cli
        .ok(&["poll", "t", "--type", "nothing", "--type", "request.*"])
        .await;
    assert_eq!(polled["events"][0]["type"], "request.answered", "{polled}");
    assert_eq!(
        polled["next_cursor"], 5,
        "the cursor passes the rest: {polled}"
    );
    cli.fails(&["poll", "t", "--type", "a..b"], 2, "invalid_request")
        .await;
    let out = cli
        .run(&[
            "wait",
            "t",
            "--type",
            "order.*",
            "--after",
            "3",
            "--count",
            "1",
            "--timeout",
            "20",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let line: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(line["sequence"], 5, "{out:?}");
    cli.assert_never_printed(&cli.token("t"));
}

/// The hint of every `unauthorized` (exit 5) error (docs/CLI.md, "Errors and exit codes").
const URL_HINT: &str = "check --url: is this the server, and the database, that made the address?";

/// `POST /api/v1/viewer-codes/redeem` with `code`: (status, JSON body).
async fn redeem(base: &str, code: &str) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}/api/v1/viewer-codes/redeem"))
        .json(&json!({ "code": code }))
        .send()
        .await
        .expect("redeem");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

/// The code in a viewer link's fragment.
fn code_of_link(link: &str) -> String {
    link.split_once("#code=")
        .map(|(_, c)| c.to_owned())
        .unwrap_or_else(|| panic!("no #code= in {link}"))
}

/// `inbox --print` (docs/CLI.md): a link to the viewer whose fragment holds a one-time code and
/// no token; the code signs in once, with the task's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_prints_a_one_time_link_without_the_token() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let created = cli.ok(&["create", "viewer"]).await;
    let token = cli.token("viewer");
    let out = cli.ok(&["inbox", "viewer", "--print"]).await;
    assert_eq!(out["address_id"], created["address_id"]);
    assert!(out["expires_at"].is_string(), "{out}");
    assert!(out.get("opened").is_none(), "--print opens nothing: {out}");
    let link = out["viewer_url"].as_str().unwrap_or_default().to_owned();
    assert!(
        link.starts_with(&format!("{}/inbox#code=avc_", s.base)),
        "{link}"
    );
    assert!(!link.contains(&token) && !link.contains('?'), "{link}");
    let code = code_of_link(&link);
    let (status, body) = redeem(&s.base, &code).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["read_token"], token.as_str());
    assert_eq!(body["address_id"], created["address_id"]);
    let (status, body) = redeem(&s.base, &code).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["error"]["code"], "code_expired");
    // Each run makes a new link.
    let again = cli.ok(&["inbox", "viewer", "--print"]).await;
    assert_ne!(again["viewer_url"], out["viewer_url"]);
    cli.assert_never_printed(&token);
}

/// `inbox` opens the link with `$BROWSER` (its output kept off stdout), and prints the link
/// only when no browser opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_opens_the_browser_or_prints_the_link() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    cli.ok(&["create", "viewer"]).await;
    let token = cli.token("viewer");
    let opened = cli.scratch("opened.txt");
    let browser = cli.scratch("browser.sh");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\necho 'chatter on stdout'\nprintf '%s' \"$1\" > '{}'\n",
            opened.display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    cli.env = vec![("BROWSER".into(), browser.display().to_string())];
    let out = cli.ok(&["inbox", "viewer"]).await;
    assert_eq!(out["opened"], true, "{out}");
    assert!(
        out.get("viewer_url").is_none(),
        "an opened link is not printed: {out}"
    );
    let link = std::fs::read_to_string(&opened).unwrap();
    assert!(
        link.starts_with(&format!("{}/inbox#code=avc_", s.base)),
        "{link}"
    );
    let (status, _) = redeem(&s.base, &code_of_link(&link)).await;
    assert_eq!(status, 200);

    // No browser at all (a failing $BROWSER, no xdg-open on the PATH): the link, to open by hand.
    let empty = cli.scratch("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    cli.env = vec![
        ("BROWSER".into(), "/bin/false".into()),
        ("PATH".into(), empty.display().to_string()),
    ];
    let out = cli.ok(&["inbox", "viewer"]).await;
    assert_eq!(out["opened"], false, "{out}");
    assert!(
        out["reason"].as_str().is_some_and(|r| r.contains("false")),
        "{out}"
    );
    let link = out["viewer_url"].as_str().unwrap_or_default().to_owned();
    let (status, _) = redeem(&s.base, &code_of_link(&link)).await;
    assert_eq!(status, 200);
    cli.assert_never_printed(&token);
}

/// `import` adopts an address made with curl: the same file as `create` (0600, the same
/// fields), then `poll` works on it; an existing task needs `--force`; a wrong token or an
/// address of another server is exit 5 with the `--url` hint, and nothing is saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_adopts_an_address_made_elsewhere() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let made: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/api/v1/addresses", s.base))
        .json(&json!({"name": "made with curl", "expires_in_seconds": 3600}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = made["address"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let token = made["credentials"]["read_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let inbox_url = made["endpoints"]["inbox_url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let file = cli.scratch("token.txt");
    std::fs::write(&file, format!("  {token}\n\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let file = file.display().to_string();

    let out = cli
        .ok(&["import", "adopted", "--id", &id, "--token-file", &file])
        .await;
    assert_eq!(out["address_id"], id.as_str());
    assert_eq!(out["email"], made["address"]["email"]);
    assert_eq!(out["name"], "made with curl");
    assert_eq!(out["expires_at"], made["address"]["expires_at"]);
    assert_eq!(out["inbox_url"], serde_json::Value::Null, "{out}");
    assert_eq!(out["url"], s.base.as_str());
    assert_eq!(mode(&cli.file("adopted")), 0o600);
    assert_eq!(mode(&cli.home), 0o700);
    let saved = cli.saved("adopted");
    assert_eq!(cli.token("adopted"), token, "the token, trimmed");
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["cursor"], 0);
    assert_eq!(cli.ok(&["handoff", "adopted"]).await, out);

    // The other commands work on it.
    let seq = deliver(
        &inbox_url,
        &json!({"type": "ci.finished", "data": {"build": 9}}),
    )
    .await;
    let page = cli.ok(&["poll", "adopted", "--wait", "5"]).await;
    assert_eq!(page["events"][0]["sequence"], seq, "{page}");
    assert_eq!(page["events"][0]["data"], json!({"build": 9}));

    // An existing task is refused unless --force (and then the inbox URL can be given).
    cli.fails(
        &["import", "adopted", "--id", &id, "--token-file", &file],
        6,
        "task_exists",
    )
    .await;
    // A token file others can read is said on stderr (the import goes on).
    let shared = cli.scratch("shared-token.txt");
    std::fs::write(&shared, &token).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let shared = shared.display().to_string();
    let run = cli
        .run(&[
            "import",
            "adopted",
            "--id",
            &id,
            "--token-file",
            &shared,
            "--inbox-url",
            &inbox_url,
            "--force",
        ])
        .await;
    assert_eq!(run.code, 0, "{run:?}");
    let notice: serde_json::Value =
        serde_json::from_str(run.stderr.trim()).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    assert!(
        notice["notice"]["token_file"]
            .as_str()
            .is_some_and(|m| m.contains("0600")),
        "{run:?}"
    );
    let out = run.json();
    assert_eq!(out["inbox_url"], inbox_url.as_str());
    cli.fails(
        &[
            "import",
            "other",
            "--id",
            &id,
            "--token-file",
            &file,
            "--inbox-url",
            "https://elsewhere.example/api/v1/inbox/addr_other/ais_x",
        ],
        2,
        "usage",
    )
    .await;

    // A wrong token, an unknown id: exit 5 with the hint, and no file.
    let wrong = cli.scratch("wrong.txt");
    std::fs::write(&wrong, format!("aat_{}", "x".repeat(43))).unwrap();
    let wrong = wrong.display().to_string();
    for (task, args) in [
        (
            "w1",
            vec!["--id", id.as_str(), "--token-file", wrong.as_str()],
        ),
        (
            "w2",
            vec![
                "--id",
                "addr_unknownunknownunknow",
                "--token-file",
                file.as_str(),
            ],
        ),
    ] {
        let mut argv = vec!["import", task];
        argv.extend(args);
        let error = cli.fails(&argv, 5, "unauthorized").await;
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.ends_with(&format!("({URL_HINT})")), "{message}");
        assert!(!cli.file(task).exists(), "{task} was saved");
    }
    // An empty token file is refused before any request.
    let empty = cli.scratch("empty.txt");
    std::fs::write(&empty, "\n").unwrap();
    let empty = empty.display().to_string();
    cli.fails(
        &["import", "w3", "--id", &id, "--token-file", &empty],
        2,
        "usage",
    )
    .await;
    cli.assert_never_printed(&token);
}

/// Exit 5 of a saved task pointed at another server (another database) says what to check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_5_says_to_check_the_url() {
    let s = server().await;
    let other = server().await;
    let mut cli = Cli::new(&s.base);
    cli.ok(&["create", "t"]).await;
    let error = cli
        .fails(&["poll", "t", "--url", &other.base], 5, "unauthorized")
        .await;
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains(URL_HINT), "{message}");
    assert_eq!(error["http_status"], 401);
    cli.fails(
        &["inbox", "t", "--print", "--url", &other.base],
        5,
        "unauthorized",
    )
    .await;
    cli.assert_never_printed(&cli.token("t"));
}

/// `timer add|list|cancel` (docs/API.md §20) against a real `serve`: a timer 2 s ahead is
/// pending, then fires into the feed, where `wait --type 'timer.*'` sees it within seconds, and
/// `timer list` says fired; a timer an hour ahead is cancelled (twice alike), the fired one
/// cannot be (`timer_fired`, exit 6); bad durations and arguments are refused before any
/// request is made (against a dead URL: a request would be `unreachable`, exit 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_into_the_feed_and_cancel() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    cli.create(&["create", "t"]).await;

    let dead = dead_url();
    for bad in [
        "0",
        "0s",
        "-5m",
        "-1",
        "1.5h",
        "2hours",
        "2 h",
        "soon",
        "",
        "366d",
        "31536001",
        "99999999999999999999w",
        "18446744073709551615w",
    ] {
        let out = cli
            .run_with(&["timer", "add", "t", "--in", bad], Some(&dead), None)
            .await;
        let error = check_failure(&out, 2, "usage");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("--in"), "{bad:?}: {message}");
    }
    let out = cli
        .run_with(
            &["timer", "add", "t", "--in", "1h", "--data", "{nope"],
            Some(&dead),
            None,
        )
        .await;
    check_failure(&out, 2, "invalid_json");
    for bad_id in ["hk_x", "tmr_", "tmr_a/b", "../x"] {
        let out = cli
            .run_with(&["timer", "cancel", "t", bad_id], Some(&dead), None)
            .await;
        check_failure(&out, 2, "invalid_request");
    }
    // Exactly one of --in and --at (the argument parser's own errors, exit 2).
    for args in [
        &["timer", "add", "t"][..],
        &[
            "timer",
            "add",
            "t",
            "--in",
            "1h",
            "--at",
            "2030-01-01T00:00:00Z",
        ],
    ] {
        let out = cli.run_with(args, Some(&dead), None).await;
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
    }

    // A timer 2 s ahead, and one an hour ahead.
    let started = std::time::Instant::now();
    let soon = cli
        .ok(&[
            "timer",
            "add",
            "t",
            "--in",
            "2s",
            "--type",
            "timer.check",
            "--data",
            r#"{"n": 1}"#,
        ])
        .await;
    let soon = &soon["timer"];
    assert_eq!(soon["status"], "pending", "{soon}");
    assert_eq!(soon["type"], "timer.check", "{soon}");
    assert_eq!(soon["data"], json!({"n": 1}), "{soon}");
    let soon_id = soon["id"].as_str().unwrap_or_default().to_owned();
    assert!(soon_id.starts_with("tmr_"), "{soon}");
    let later = cli.ok(&["timer", "add", "t", "--in", "1h"]).await;
    let later = &later["timer"];
    assert_eq!(later["type"], "timer.fired", "the default type: {later}");
    let later_id = later["id"].as_str().unwrap_or_default().to_owned();

    let listed = cli.ok(&["timer", "list", "t"]).await;
    let ids_and_status = |listed: &serde_json::Value| -> Vec<(String, String)> {
        listed["timers"]
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .map(|t| {
                (
                    t["id"].as_str().unwrap_or_default().to_owned(),
                    t["status"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(
        ids_and_status(&listed),
        vec![
            (soon_id.clone(), "pending".to_owned()),
            (later_id.clone(), "pending".to_owned())
        ],
        "{listed}"
    );

    // `wait --type 'timer.*'` prints the timer's event when it fires.
    let out = cli
        .run(&[
            "wait",
            "t",
            "--type",
            "timer.*",
            "--count",
            "1",
            "--timeout",
            "20",
        ])
        .await;
    let took = started.elapsed();
    assert_eq!(out.code, 0, "{out:?}");
    let event: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(event["type"], "timer.check", "{event}");
    assert_eq!(event["source"], "timer", "{event}");
    assert_eq!(
        event["data"],
        json!({"timer_id": soon_id, "data": {"n": 1}}),
        "{event}"
    );
    assert!(
        took >= std::time::Duration::from_millis(1_500)
            && took < std::time::Duration::from_secs(15),
        "the timer's event came after {took:?}"
    );

    let listed = cli.ok(&["timer", "list", "t"]).await;
    assert_eq!(
        ids_and_status(&listed),
        vec![
            (later_id.clone(), "pending".to_owned()),
            (soon_id.clone(), "fired".to_owned())
        ],
        "pending first, then the closed: {listed}"
    );
    assert_eq!(listed["timers"][1]["event_id"], event["id"], "{listed}");
    assert_eq!(listed["timers"][1]["sequence"], event["sequence"]);

    // Cancel: the pending one (again: the same answer); the fired one cannot be.
    let cancelled = cli.ok(&["timer", "cancel", "t", &later_id]).await;
    assert_eq!(cancelled["timer"]["status"], "cancelled", "{cancelled}");
    assert!(cancelled["timer"]["closed_at"].is_string(), "{cancelled}");
    let again = cli.ok(&["timer", "cancel", "t", &later_id]).await;
    assert_eq!(again["timer"]["status"], "cancelled", "{again}");
    let error = cli
        .fails(&["timer", "cancel", "t", &soon_id], 6, "timer_fired")
        .await;
    assert_eq!(error["http_status"], 409, "{error}");
    cli.fails(
        &["timer", "cancel", "t", "tmr_doesnotexist"],
        4,
        "not_found",
    )
    .await;

    // --at: the time as given (here the cancelled timer's); one in the past is the server's
    // invalid_request; --idempotency-key answers the same timer again.
    let at = later["fire_at"].as_str().unwrap_or_default().to_owned();
    let by_time = cli.ok(&["timer", "add", "t", "--at", &at]).await;
    assert_eq!(by_time["timer"]["fire_at"], at.as_str(), "{by_time}");
    cli.fails(
        &["timer", "add", "t", "--at", "2000-01-01T00:00:00Z"],
        2,
        "invalid_request",
    )
    .await;
    cli.fails(
        &["timer", "add", "t", "--in", "1m", "--type", "ping"],
        2,
        "invalid_request",
    )
    .await;
    let keyed = ["timer", "add", "t", "--in", "2d", "--idempotency-key", "k1"];
    let first = cli.ok(&keyed).await;
    let second = cli.ok(&keyed).await;
    assert_eq!(first["timer"]["id"], second["timer"]["id"], "{second}");
    cli.fails(
        &["timer", "add", "t", "--in", "3d", "--idempotency-key", "k1"],
        1,
        "idempotency_key_reused",
    )
    .await;
    cli.assert_never_printed(&cli.token("t"));
}

/// `create --allow-sender PATTERN… --require-auth CHECK` (docs/API.md §10, "Sender rules"): the
/// policy is set and printed; a bad pattern is the server's `invalid_request`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_sender_rules() {
    let s = server().await;
    let mut cli = Cli::new(&s.base);
    let out = cli
        .ok(&[
            "create",
            "mail",
            "--allow-sender",
            "*@Example.com",
            "--allow-sender",
            "ops@*.corp.example",
            "--require-auth",
            "dmarc",
        ])
        .await;
    assert_eq!(
        out["email_policy"],
        json!({"allow": ["*@example.com", "ops@*.corp.example"], "require_auth": "dmarc"})
    );
    let out = cli
        .ok(&["create", "auth-only", "--require-auth", "spf_or_dkim"])
        .await;
    assert_eq!(
        out["email_policy"],
        json!({"allow": null, "require_auth": "spf_or_dkim"})
    );
    let out = cli.ok(&["create", "plain"]).await;
    assert!(out.get("email_policy").is_none(), "{out}");
    let out = cli.run(&["create", "bad", "--allow-sender", "*"]).await;
    let error = check_failure(&out, 2, "invalid_request");
    assert!(error.to_string().contains("allow[0]"), "{error}");
    // An unknown check is the argument parser's usage error.
    let out = cli.run(&["create", "t9", "--require-auth", "spf"]).await;
    assert_eq!(out.code, 2, "{out:?}");
}
