//! Inbound email against `agentaddress serve`, over real sockets (docs/API.md §10–§11): the
//! raw-MIME webhook door, a waiting long poll, attachment and raw downloads byte for byte,
//! replay, deletion, and who may read what.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::common;

const SECRET: &str = "ingest-secret-for-the-black-box-suite";
const DOMAIN: &str = "inbox.test";

struct Serve {
    _child: tokio::process::Child,
    base: String,
    db: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn serve(extra: &[&str]) -> Serve {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let db = dir.path().join("email.db");
    let mut args = vec!["--email-domain", DOMAIN];
    args.extend_from_slice(extra);
    let (child, base) = common::spawn_serve(&db, "127.0.0.1:0", &args).await;
    Serve {
        _child: child,
        base,
        db,
        _dir: dir,
    }
}

struct Address {
    id: String,
    email: String,
    token: String,
}

async fn create(http: &reqwest::Client, base: &str) -> Address {
    let r = http
        .post(format!("{base}/api/v1/addresses"))
        .json(&json!({}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
    assert_eq!(r.status(), 201);
    let v: Value = r
        .json()
        .await
        .unwrap_or_else(|e| panic!("create JSON: {e}"));
    Address {
        id: v["address"]["id"].as_str().unwrap_or_default().to_owned(),
        email: v["address"]["email"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        token: v["credentials"]["read_token"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// A message with a text body and one binary attachment of `attachment`.
fn message(message_id: &str, attachment: &[u8]) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(attachment);
    let wrapped: Vec<&str> = b64
        .as_bytes()
        .chunks(76)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect();
    format!(
        "From: Ada Lovelace <Ada@Example.COM>\r\n\
         To: agent@{DOMAIN}\r\n\
         Subject: =?UTF-8?B?SW52b2ljZSDwn5OO?=\r\n\
         Message-ID: <{message_id}>\r\n\
         Date: Tue, 01 Dec 2026 10:00:00 +0000\r\n\
         MIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=\"b1\"\r\n\
         \r\n\
         --b1\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         \r\n\
         Please find the invoice attached.\r\n\
         --b1\r\n\
         Content-Type: application/pdf; name=\"../../etc/invoice.pdf\"\r\n\
         Content-Disposition: attachment; filename=\"../../etc/invoice.pdf\"\r\n\
         Content-Transfer-Encoding: base64\r\n\
         \r\n\
         {}\r\n\
         --b1--\r\n",
        wrapped.join("\r\n")
    )
    .into_bytes()
}

async fn ingest(
    http: &reqwest::Client,
    base: &str,
    secret: &str,
    rcpts: &[&str],
    raw: Vec<u8>,
) -> reqwest::Response {
    let query: Vec<(&str, &str)> = rcpts
        .iter()
        .map(|r| ("rcpt", *r))
        .chain([("mail_from", "bounces@example.com")])
        .collect();
    http.post(format!("{base}/api/v1/email/inbound"))
        .query(&query)
        .bearer_auth(secret)
        .header("content-type", "message/rfc822")
        .body(raw)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ingest: {e}"))
}

async fn get(http: &reqwest::Client, url: String, token: &str) -> reqwest::Response {
    http.get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET: {e}"))
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn stored_messages(db: &Path, address_id: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap_or_else(|e| panic!("open the db: {e}"));
    conn.query_row(
        "SELECT count(*) FROM emails WHERE address_id = ?1",
        [address_id],
        |r| r.get(0),
    )
    .unwrap_or_else(|e| panic!("count stored messages: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mail_reaches_a_waiting_long_poll_and_every_byte_reads_back() {
    let s = serve(&["--email-ingest-secret", SECRET]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    assert!(a.email.ends_with(&format!("@{DOMAIN}")), "{}", a.email);

    // A consumer waits first.
    let poll = {
        let (http, url, token) = (
            http.clone(),
            format!(
                "{}/api/v1/addresses/{}/events?after=0&wait=20",
                s.base, a.id
            ),
            a.token.clone(),
        );
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let r = get(&http, url, &token).await;
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap_or_else(|e| panic!("feed JSON: {e}"));
            (v, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let attachment: Vec<u8> = (0..50_000u32).map(|n| (n * 7 % 256) as u8).collect();
    let raw = message("m1@example.com", &attachment);
    // Mixed case and a +tag reach the same address.
    let (local, _) = a.email.split_once('@').unwrap_or_default();
    let rcpt = format!(
        "{}+Invoices@{}",
        local.to_uppercase(),
        DOMAIN.to_uppercase()
    );
    let r = ingest(&http, &s.base, SECRET, &[&rcpt], raw.clone()).await;
    assert_eq!(r.status(), 200);
    let v: Value = r
        .json()
        .await
        .unwrap_or_else(|e| panic!("ingest JSON: {e}"));
    assert_eq!(v, json!({"accepted": [rcpt], "rejected": []}));

    let (feed, waited) = poll.await.unwrap_or_else(|e| panic!("poll task: {e}"));
    assert!(
        waited < Duration::from_secs(10),
        "woken by the email: {waited:?}"
    );
    let events = feed["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{feed}");
    let e = &events[0];
    assert_eq!(e["type"], "email.received");
    assert_eq!(e["ingress_surface"], "email");
    assert_eq!(e["source"], "ada@example.com");
    let d = &e["data"];
    assert_eq!(d["subject"], "Invoice \u{1f4ce}");
    assert_eq!(d["tag"], "invoices");
    assert_eq!(d["provider"], "webhook");
    assert_eq!(d["envelope"]["mail_from"], "bounces@example.com");
    assert_eq!(d["envelope"]["rcpt_to"], json!([rcpt]));
    assert_eq!(d["size"], raw.len());
    assert_eq!(d["text"], "Please find the invoice attached.");
    let att = &d["attachments"][0];
    assert_eq!(att["filename"], "invoice.pdf", "no path in a filename");
    assert_eq!(att["content_type"], "application/pdf");
    assert_eq!(att["size"], attachment.len());
    let event_id = e["id"].as_str().unwrap_or_default().to_owned();
    let att_id = att["id"].as_str().unwrap_or_default().to_owned();

    // The attachment, byte for byte, never rendered by a browser.
    let root = format!("{}/api/v1/addresses/{}", s.base, a.id);
    let r = get(
        &http,
        format!("{root}/events/{event_id}/attachments/{att_id}"),
        &a.token,
    )
    .await;
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "application/pdf");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["content-security-policy"], "sandbox");
    assert_eq!(
        h["content-disposition"],
        "attachment; filename*=UTF-8''invoice.pdf"
    );
    let bytes = r.bytes().await.unwrap_or_else(|e| panic!("body: {e}"));
    assert_eq!(sha(&bytes), sha(&attachment));

    // The raw message as received.
    let r = get(&http, format!("{root}/events/{event_id}/raw"), &a.token).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "message/rfc822");
    let bytes = r.bytes().await.unwrap_or_else(|e| panic!("body: {e}"));
    assert_eq!(sha(&bytes), sha(&raw));

    // Unknown attachment and event ids.
    let r = get(
        &http,
        format!("{root}/events/{event_id}/attachments/att_99"),
        &a.token,
    )
    .await;
    assert_eq!(r.status(), 404);
    let r = get(&http, format!("{root}/events/evt_nope/raw"), &a.token).await;
    assert_eq!(r.status(), 404);

    // The relay retries (it lost our answer): still one event, and replay answers it.
    let mut again = b"Received: from relay.example.com\r\n".to_vec();
    again.extend_from_slice(&raw);
    let r = ingest(&http, &s.base, SECRET, &[&a.email], again).await;
    assert_eq!(r.status(), 200);
    let r = get(&http, format!("{root}/events?after=0"), &a.token).await;
    let v: Value = r.json().await.unwrap_or_else(|e| panic!("feed JSON: {e}"));
    assert_eq!(v["events"].as_array().map(Vec::len), Some(1), "{v}");
    let r = http
        .post(format!("{root}/email/replay"))
        .bearer_auth(&a.token)
        .json(&json!({"email_id": d["email_id"]}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("replay: {e}"));
    assert_eq!(r.status(), 200);
    let v: Value = r
        .json()
        .await
        .unwrap_or_else(|e| panic!("replay JSON: {e}"));
    assert_eq!(v["duplicate"], true);
    assert_eq!(v["event"]["id"], event_id.as_str());
    let r = http
        .post(format!("{root}/email/replay"))
        .bearer_auth(&a.token)
        .json(&json!({"email_id": "eml_unknown"}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("replay: {e}"));
    assert_eq!(r.status(), 404);

    // Deleting the address: downloads answer 410, and the stored message is gone from the file.
    assert_eq!(stored_messages(&s.db, &a.id), 1);
    let r = http
        .delete(&root)
        .bearer_auth(&a.token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    assert_eq!(r.status(), 204);
    for url in [
        format!("{root}/events/{event_id}/attachments/{att_id}"),
        format!("{root}/events/{event_id}/raw"),
    ] {
        let r = get(&http, url, &a.token).await;
        assert_eq!(r.status(), 410);
    }
    assert_eq!(stored_messages(&s.db, &a.id), 0);
    // Mail to it is refused permanently.
    let r = ingest(&http, &s.base, SECRET, &[&a.email], message("m2@x", b"x")).await;
    let v: Value = r
        .json()
        .await
        .unwrap_or_else(|e| panic!("ingest JSON: {e}"));
    assert_eq!(v["rejected"][0]["code"], "address_gone");
    assert_eq!(v["rejected"][0]["temporary"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_never_reads_anothers_mail() {
    let s = serve(&["--email-ingest-secret", SECRET]).await;
    let http = reqwest::Client::new();
    let (a, b) = (create(&http, &s.base).await, create(&http, &s.base).await);
    let r = ingest(
        &http,
        &s.base,
        SECRET,
        &[&a.email],
        message("secret@example.com", b"for a only"),
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = get(
        &http,
        format!("{}/api/v1/addresses/{}/events?after=0", s.base, a.id),
        &a.token,
    )
    .await;
    let v: Value = r.json().await.unwrap_or_else(|e| panic!("feed JSON: {e}"));
    let event_id = v["events"][0]["id"].as_str().unwrap_or_default().to_owned();
    assert!(!event_id.is_empty(), "{v}");
    for (address, token, status) in [
        (&a.id, &b.token, 401), // a's routes with b's token
        (&b.id, &b.token, 404), // a's event under b's address
    ] {
        for path in [
            format!("events/{event_id}/attachments/att_2"),
            format!("events/{event_id}/raw"),
        ] {
            let r = get(
                &http,
                format!("{}/api/v1/addresses/{address}/{path}", s.base),
                token,
            )
            .await;
            assert_eq!(r.status(), status, "{path} of {address}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_webhook_door_refuses_what_it_must() {
    let s = serve(&["--email-ingest-secret", SECRET, "--max-email-bytes", "4096"]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let small = message("m@example.com", b"tiny");

    // The secret, compared whole.
    let r = ingest(
        &http,
        &s.base,
        "wrong-secret-of-the-same-size-xx",
        &[&a.email],
        small.clone(),
    )
    .await;
    assert_eq!(r.status(), 401);
    let r = http
        .post(format!("{}/api/v1/email/inbound?rcpt={}", s.base, a.email))
        .body(small.clone())
        .send()
        .await
        .unwrap_or_else(|e| panic!("ingest: {e}"));
    assert_eq!(r.status(), 401, "no secret at all");
    // Recipients are required.
    let r = ingest(&http, &s.base, SECRET, &[], small.clone()).await;
    assert_eq!(r.status(), 400);
    // Over the raw limit.
    let big = message("big@example.com", &[7u8; 8_000]);
    let r = ingest(&http, &s.base, SECRET, &[&a.email], big).await;
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap_or_else(|e| panic!("413 JSON: {e}"));
    assert_eq!(v["error"]["code"], "payload_too_large");
    // Unknown recipients and other domains are rejected one by one; the rest is delivered.
    let r = ingest(
        &http,
        &s.base,
        SECRET,
        &[
            &a.email,
            &format!("nobody@{DOMAIN}"),
            "someone@elsewhere.example",
        ],
        small.clone(),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r
        .json()
        .await
        .unwrap_or_else(|e| panic!("ingest JSON: {e}"));
    assert_eq!(v["accepted"], json!([a.email]));
    assert_eq!(v["rejected"][0]["rcpt"], format!("nobody@{DOMAIN}"));
    assert_eq!(v["rejected"][0]["code"], "not_found");
    assert!(
        v["rejected"][0]["smtp"]
            .as_str()
            .unwrap_or_default()
            .starts_with("550 5.1.1"),
        "{v}"
    );
    assert_eq!(v["rejected"][1]["code"], "not_found");
    // A message with no header at all is refused permanently.
    let r = ingest(
        &http,
        &s.base,
        SECRET,
        &[&a.email],
        b"\r\nno headers".to_vec(),
    )
    .await;
    let v: Value = r
        .json()
        .await
        .unwrap_or_else(|e| panic!("ingest JSON: {e}"));
    assert_eq!(v["rejected"][0]["code"], "invalid_request", "{v}");
    assert!(v["rejected"][0]["smtp"]
        .as_str()
        .unwrap_or_default()
        .starts_with("554 5.6.0"));

    // Without a configured secret the door does not exist.
    let off = serve(&[]).await;
    let r = ingest(&http, &off.base, SECRET, &[&a.email], small).await;
    assert_eq!(r.status(), 404);
}
