//! A hostile client's probe of the email doors (issue 33), over real sockets against the real
//! binary, each a case that was accepted wrongly before:
//!
//! - a message whose author is ambiguous (two `From` fields, two mailboxes in one) got DMARC
//!   `none` and a `from` of the domain it spoofed: now it is refused `550 5.7.1` under
//!   `--smtp-check-auth`, or, with `--smtp-allow-ambiguous-from`, delivered with `from` null and
//!   DMARC `permerror` (docs/API.md §10);
//! - contact code mails as a mail bomb: six addresses asking codes for one mailbox mailed it 18
//!   codes; now at most 5 a day reach it, and one client (IP) asks for a bounded number
//!   (docs/API.md §16);
//! - a bad secret in the configuration was printed back in clap's error (docs/API.md §10, the
//!   ingest secret; README, the relay password);
//! - an attachment named `invoice\u{202E}gpj.exe` kept its U+202E (docs/API.md §10);
//! - a message of exactly 1,000 MIME parts was refused (docs/API.md §10 refuses only more).

mod common;

use std::net::SocketAddr;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::smtp::{agent_server, deliver_raw, fake_dns, serve, starts, Address, DOMAIN};
use common::ServeCommand;
use serde_json::{json, Value};

impl Address {
    /// `POST {root}/email/contacts {"email"}`: the status, `Retry-After`, and the body.
    async fn add_contact(&self, email: &str) -> (u16, Option<String>, Value) {
        let r = reqwest::Client::new()
            .post(format!(
                "{}/api/v1/addresses/{}/email/contacts",
                self.base, self.id
            ))
            .bearer_auth(&self.token)
            .json(&json!({ "email": email }))
            .send()
            .await
            .expect("POST contacts");
        let status = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (status, retry_after, r.json().await.unwrap_or(Value::Null))
    }
}

/// A whole transaction on a raw connection: the reply to the message's final `.`. Then `QUIT`,
/// its reply unchecked, and up to 5 s for the server to close the connection.
async fn send_raw(smtp: &SocketAddr, from: &str, rcpt: &str, body: &str) -> String {
    let (mut c, reply) = deliver_raw(smtp, from, &[rcpt], body).await;
    c.send("QUIT\r\n").await;
    let _ = c.closed_or_reset().await;
    reply
}

/// evil.test lets this machine send for it (SPF) and publishes no DMARC policy; bank.test
/// allows no one and publishes `p=reject`.
async fn dns_for_the_spoof() -> (String, tokio::task::JoinHandle<()>) {
    fake_dns(vec![
        ("evil.test", "v=spf1 ip4:127.0.0.1 -all"),
        ("bank.test", "v=spf1 -all"),
        ("_dmarc.bank.test", "v=DMARC1; p=reject"),
    ])
    .await
}

fn spoof(froms: &str, to: &str, n: u32) -> String {
    format!(
        "{froms}To: {to}\r\nSubject: Approve payment {n}\r\nMessage-ID: <spoof-{n}@evil.test>\r\n\
         \r\nApproved.\r\n"
    )
}

/// Finding 5 (docs/API.md §10): with `--smtp-check-auth`, a message with two `From` fields
/// (evil.test, then bank.test) or two mailboxes in one `From` was delivered with DMARC `none`
/// and bank.test as its `from`. It is refused `550 5.7.1` (RFC 7489 §6.6.1) and nothing is
/// stored; a message with one `From` is evaluated for the very mailbox it shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_from_is_refused_under_check_auth() {
    let (dns, _dns_task) = dns_for_the_spoof().await;
    let s = serve(
        DOMAIN,
        &["--smtp-check-auth", "--smtp-dns-resolver", dns.as_str()],
    )
    .await;
    let a = s.new_address().await;
    for (n, froms) in [
        "From: Mallory <evil@evil.test>\r\nFrom: Bank <ceo@bank.test>\r\n",
        "From: Mallory <evil@evil.test>, Bank <ceo@bank.test>\r\n",
        "From: ceo@bank.test, ceo@bank.test\r\n",
        "",
    ]
    .into_iter()
    .enumerate()
    {
        let reply = send_raw(
            &s.smtp,
            "evil@evil.test",
            &a.email,
            &spoof(froms, &a.email, n as u32),
        )
        .await;
        starts(&reply, "550 5.7.1");
    }
    assert_eq!(a.events().await, Vec::<Value>::new(), "nothing stored");

    // One From naming the bank, sent from evil's server: the bank's policy is evaluated, for
    // the mailbox the event shows.
    let reply = send_raw(
        &s.smtp,
        "evil@evil.test",
        &a.email,
        &spoof("From: Bank <ceo@bank.test>\r\n", &a.email, 10),
    )
    .await;
    assert_eq!(reply, "250 2.0.0 OK");
    let events = a.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["from"], "Bank <ceo@bank.test>");
    assert_eq!(events[0]["source"], "ceo@bank.test");
    assert_eq!(
        events[0]["data"]["auth"],
        json!({"spf": "pass", "dkim": "none", "dmarc": "fail"})
    );
}

/// With `--smtp-allow-ambiguous-from` the same messages are delivered, never looking
/// authenticated: `from` null (no mailbox is attributed), `source` the envelope's sender, DMARC
/// `permerror`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_ambiguous_from_is_attributed_to_no_one() {
    let (dns, _dns_task) = dns_for_the_spoof().await;
    let s = serve(
        DOMAIN,
        &[
            "--smtp-check-auth",
            "--smtp-dns-resolver",
            dns.as_str(),
            "--smtp-allow-ambiguous-from",
        ],
    )
    .await;
    let a = s.new_address().await;
    let froms = [
        "From: Mallory <evil@evil.test>\r\nFrom: Bank <ceo@bank.test>\r\n",
        "From: Mallory <evil@evil.test>, Bank <ceo@bank.test>\r\n",
    ];
    for (n, froms) in froms.into_iter().enumerate() {
        let reply = send_raw(
            &s.smtp,
            "evil@evil.test",
            &a.email,
            &spoof(froms, &a.email, n as u32),
        )
        .await;
        assert_eq!(reply, "250 2.0.0 OK");
    }
    let events = a.events().await;
    assert_eq!(events.len(), 2, "{events:?}");
    for e in &events {
        assert_eq!(e["data"]["from"], Value::Null, "{e}");
        assert_eq!(e["source"], "evil@evil.test", "{e}");
        assert_eq!(
            e["data"]["auth"],
            json!({"spf": "pass", "dkim": "none", "dmarc": "permerror"}),
            "{e}"
        );
    }
}

// ----- finding 6: code mails as a mail bomb -----

/// Finding 6 (docs/API.md §16): six addresses of one server each ask for a code to the same
/// victim mailbox, spelled six ways (case, `+tags`). The operator's relay (another server's
/// SMTP door, where the victim's mailbox is an address) gets at most 5 code mails; the sixth
/// request is 429 `rate_limited` with `Retry-After`, and nothing is mailed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_mails_to_one_mailbox_are_capped_across_addresses() {
    let mailboxes = serve("people.test", &[]).await;
    let victim = mailboxes.new_address().await;
    let agents = agent_server(&mailboxes, &[]).await;
    let (local, domain) = victim
        .email
        .split_once('@')
        .unwrap_or_else(|| panic!("no @ in {}", victim.email));
    let spellings = [
        victim.email.clone(),
        victim.email.to_uppercase(),
        format!("{local}+a@{domain}"),
        format!("{local}+b@{}", domain.to_uppercase()),
        format!("{}+c@{domain}", local.to_uppercase()),
        format!("{local}+d@{domain}"),
    ];
    let mut answers = Vec::new();
    for spelling in &spellings {
        let a = agents.new_address().await;
        answers.push(a.add_contact(spelling).await);
    }
    for (n, (status, _, v)) in answers.iter().take(5).enumerate() {
        assert_eq!(*status, 202, "request {}: {v}", n + 1);
    }
    let (status, retry_after, v) = &answers[5];
    assert_eq!(*status, 429, "{v}");
    assert_eq!(v["error"]["code"], "rate_limited", "{v}");
    let retry: u64 = retry_after
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {retry_after:?}"));
    assert!((1..=86_400).contains(&retry), "{retry}");
    assert_eq!(v["error"]["retry_after_seconds"], retry, "{v}");
    // The relay delivered each code mail before its 202: exactly 5 reached the victim.
    let mails: Vec<Value> = victim
        .events()
        .await
        .into_iter()
        .filter(|e| e["type"] == "email.received")
        .collect();
    assert_eq!(mails.len(), 5, "{mails:?}");
}

/// docs/API.md §16: one client (IP) asks for at most `--code-mails-per-client-per-day` code
/// mails a day, whatever addresses it creates: creating addresses to ask for codes for
/// everyone mails few codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_mails_one_client_asks_for_are_capped() {
    let mailboxes = serve("people.test", &[]).await;
    let mut people = Vec::new();
    for _ in 0..4 {
        people.push(mailboxes.new_address().await);
    }
    let agents = agent_server(&mailboxes, &["--code-mails-per-client-per-day", "3"]).await;
    let mut answers = Vec::new();
    for person in &people {
        let a = agents.new_address().await;
        answers.push(a.add_contact(&person.email).await);
    }
    for (n, (status, _, v)) in answers.iter().take(3).enumerate() {
        assert_eq!(*status, 202, "request {}: {v}", n + 1);
    }
    let (status, retry_after, v) = &answers[3];
    assert_eq!(*status, 429, "{v}");
    assert_eq!(v["error"]["code"], "rate_limited", "{v}");
    assert!(retry_after.is_some(), "no Retry-After");
    assert_eq!(
        people[3].events().await,
        Vec::<Value>::new(),
        "nothing mailed to the fourth"
    );
}

// ----- finding 7: secrets in configuration errors -----

/// Runs `agentaddress serve ARGS` with `env` (none of the email settings from the test's own
/// environment), its output captured (at most 30 s).
async fn run_serve(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = ServeCommand::new()
        .args(args)
        .env_remove("AGENTADDRESS_EMAIL_INGEST_SECRET")
        .env_remove("AGENTADDRESS_SMTP_RELAY")
        .env_remove("AGENTADDRESS_SMTP_RELAY_PASSWORD")
        .env_remove("AGENTADDRESS_SMTP_RELAY_PASSWORD_FILE")
        .env_remove("AGENTADDRESS_EMAIL_FROM")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd = cmd.env(k, v);
    }
    cmd.output(Duration::from_secs(30)).await
}

/// The output of a run that must refuse: `code`, a message naming `flag` and `rule`, and
/// nowhere the secret (nor its distinctive marker).
fn refused_without_the_secret(out: &Output, code: i32, flag: &str, rule: &str, secret: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("{flag} / {secret:?}: stdout {stdout:?}, stderr {stderr:?}");
    assert_eq!(out.status.code(), Some(code), "{what}");
    assert!(stderr.contains(flag), "the flag is not named: {what}");
    assert!(stderr.contains(rule), "the rule is not named: {what}");
    for shown in [&stdout, &stderr] {
        assert!(!shown.contains(secret), "the secret is shown: {what}");
        assert!(
            !shown.contains("S3CR3T"),
            "part of the secret is shown: {what}"
        );
    }
}

/// Finding 7: a bad ingest secret, by flag and by environment variable, too short, too long,
/// with a space or a tab: exit 2, the flag and the rule named, the secret nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_ingest_secret_is_never_repeated() {
    let long = format!("S3CR3T-{}", "x".repeat(600));
    let cases = [
        ("S3CR3T-short".to_owned(), "this one is shorter"),
        (long, "this one is longer"),
        (
            "S3CR3T with a space in it".to_owned(),
            "this one holds a space",
        ),
        (
            "S3CR3T\twith-a-tab-in-it".to_owned(),
            "this one holds a tab",
        ),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("never.db");
    let db = db.to_string_lossy().into_owned();
    for (secret, rule) in &cases {
        let base = ["--listen", "127.0.0.1:0", "--db", db.as_str()];
        let mut by_flag = base.to_vec();
        by_flag.extend(["--email-ingest-secret", secret.as_str()]);
        let out = run_serve(&by_flag, &[]).await;
        refused_without_the_secret(&out, 2, "--email-ingest-secret", rule, secret);
        let out = run_serve(&base, &[("AGENTADDRESS_EMAIL_INGEST_SECRET", secret)]).await;
        refused_without_the_secret(&out, 2, "AGENTADDRESS_EMAIL_INGEST_SECRET", rule, secret);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("must be 16 to 512 printable ASCII"),
            "{out:?}"
        );
    }
}

/// Finding 7: the relay's password is never repeated either — in the relay URL (refused by
/// flag and by environment variable, exit 2), or given without a user to log in as, or given
/// itself where its file's path belongs (start-up errors, exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_password_is_never_repeated() {
    let secret = "S3CR3T-relay-password-0123";
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("never.db");
    let db = db.to_string_lossy().into_owned();
    let base = [
        "--listen",
        "127.0.0.1:0",
        "--db",
        db.as_str(),
        "--email-from",
        "mail@agents.test",
    ];
    let in_url = format!("smtp://user:{secret}@127.0.0.1:1");
    let mut by_flag = base.to_vec();
    by_flag.extend(["--smtp-relay", in_url.as_str()]);
    let out = run_serve(&by_flag, &[]).await;
    refused_without_the_secret(&out, 2, "--smtp-relay", "may not hold a password", secret);
    let out = run_serve(&base, &[("AGENTADDRESS_SMTP_RELAY", &in_url)]).await;
    refused_without_the_secret(
        &out,
        2,
        "AGENTADDRESS_SMTP_RELAY",
        "may not hold a password",
        secret,
    );

    // A password, but no user in the URL to log in with.
    let file = dir.path().join("relay-password");
    std::fs::write(&file, format!("{secret}\n")).expect("write");
    let file = file.to_string_lossy().into_owned();
    let mut with_file = base.to_vec();
    with_file.extend([
        "--smtp-relay",
        "smtp://127.0.0.1:1",
        "--smtp-relay-password-file",
        file.as_str(),
    ]);
    let out = run_serve(&with_file, &[]).await;
    refused_without_the_secret(&out, 1, "--smtp-relay", "needs a user", secret);
    let mut with_env = base.to_vec();
    with_env.extend(["--smtp-relay", "smtp://127.0.0.1:1"]);
    let out = run_serve(&with_env, &[("AGENTADDRESS_SMTP_RELAY_PASSWORD", secret)]).await;
    refused_without_the_secret(&out, 1, "--smtp-relay", "needs a user", secret);

    // The password itself given as the file's path.
    let mut mistaken = base.to_vec();
    mistaken.extend([
        "--smtp-relay",
        "smtp://user@127.0.0.1:1",
        "--smtp-relay-password-file",
        secret,
    ]);
    let out = run_serve(&mistaken, &[]).await;
    refused_without_the_secret(
        &out,
        1,
        "--smtp-relay-password-file",
        "must name a readable file",
        secret,
    );
}

// ----- finding 8: bidirectional controls in attachment names -----

/// An attachment named `invoice\u{202E}gpj.exe` (shown as `invoiceexe.jpg`), its name RFC 2231
/// encoded as mail clients send it: the event's filename has no bidirectional control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_names_lose_their_bidi_controls() {
    let s = serve(DOMAIN, &[]).await;
    let a = s.new_address().await;
    let body = format!(
        "From: ada@example.com\r\nTo: {}\r\nSubject: Invoice\r\nMessage-ID: <bidi@example.com>\r\n\
         MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
         --b\r\nContent-Type: text/plain\r\n\r\nSee attached.\r\n\
         --b\r\nContent-Type: application/octet-stream\r\n\
         Content-Disposition: attachment; filename*=utf-8''invoice%E2%80%AEgpj.exe\r\n\
         Content-Transfer-Encoding: base64\r\n\r\nTVqQAAMAAAAEAAAA\r\n\
         --b\r\nContent-Type: application/pdf; name=\"=?utf-8?b?cmVwb3J04oCPLnBkZg==?=\"\r\n\
         Content-Disposition: attachment\r\n\
         Content-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n--b--\r\n",
        a.email
    );
    assert_eq!(
        send_raw(&s.smtp, "ada@example.com", &a.email, &body).await,
        "250 2.0.0 OK"
    );
    let events = a.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    let names: Vec<&str> = events[0]["data"]["attachments"]
        .as_array()
        .unwrap_or_else(|| panic!("no attachments: {}", events[0]))
        .iter()
        .filter_map(|a| a["filename"].as_str())
        .collect();
    assert_eq!(names, ["invoicegpj.exe", "report.pdf"], "{}", events[0]);
    let bidi = |c: char| matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
    assert!(names.iter().all(|n| !n.chars().any(bidi)), "{names:?}");
}

// ----- the parts bound -----

/// A multipart/mixed message to `to` of `leaves` text parts: `leaves + 1` MIME parts.
fn parts_message(to: &str, leaves: usize) -> String {
    let mut m = format!(
        "From: ada@example.com\r\nTo: {to}\r\nSubject: {leaves} leaves\r\n\
         Message-ID: <parts-{leaves}@example.com>\r\n\
         Content-Type: multipart/mixed; boundary=\"P\"\r\n\r\n"
    );
    for i in 0..leaves {
        m.push_str(&format!(
            "--P\r\nContent-Type: text/plain\r\n\r\npart {i}\r\n"
        ));
    }
    m.push_str("--P--\r\n");
    m
}

/// docs/API.md §10 refuses a message of more than 1,000 parts: exactly 1,000 (the container
/// and 999 leaves; the closing delimiter starts no part) is `250`, 1,001 is `554 5.6.0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_a_thousand_parts_pass_the_smtp_door() {
    let s = serve(DOMAIN, &[]).await;
    let a = s.new_address().await;
    assert_eq!(
        send_raw(
            &s.smtp,
            "ada@example.com",
            &a.email,
            &parts_message(&a.email, 999)
        )
        .await,
        "250 2.0.0 OK"
    );
    let refused = send_raw(
        &s.smtp,
        "ada@example.com",
        &a.email,
        &parts_message(&a.email, 1_000),
    )
    .await;
    starts(&refused, "554 5.6.0");
    let events = a.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["subject"], "999 leaves");
}
