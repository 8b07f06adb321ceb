//! The SMTP door of `agentaddress serve` (docs/API.md §10), over real sockets against the real
//! binary: lettre and Python's smtplib as clients, pipelined commands from a raw socket, every
//! reply code, a client that vanishes mid-DATA, a retry after a lost `250`, a waiting long poll
//! woken by a mail, the caps and timeouts, STARTTLS, and shutdown.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::smtp::{
    create, exchange, fake_dns, feed, read_reply, send_raw, serve, serve_in, starts, Raw, DOMAIN,
};
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn message(message_id: &str, to: &str, subject: &str) -> String {
    format!(
        "From: Ada Lovelace <ada@example.com>\r\n\
         To: {to}\r\n\
         Subject: {subject}\r\n\
         Message-ID: <{message_id}>\r\n\
         Date: Tue, 01 Dec 2026 10:00:00 +0000\r\n\
         \r\n\
         Hello over SMTP.\r\n\
         .A line that starts with a dot.\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lettre_delivers_to_a_waiting_long_poll() {
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    assert!(a.email.ends_with(&format!("@{DOMAIN}")), "{}", a.email);

    // A consumer waits first.
    let poll = {
        let (http, base, a) = (http.clone(), s.base.clone(), a.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let events = feed(&http, &base, &a, 20).await;
            (events, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let email = Message::builder()
        .from("Ada Lovelace <ada@example.com>".parse().unwrap())
        .to(a.email.parse().unwrap())
        .subject("Invoice 42")
        .message_id(Some("<lettre-1@example.com>".into()))
        .body("Please pay.\r\n.Dotted line.".to_owned())
        .expect("build the message");
    let mailer = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(s.port())
        .build();
    let response = mailer.send(email).await.expect("lettre send");
    assert!(response.is_positive(), "{response:?}");

    let (events, waited) = poll.await.expect("poll task");
    assert!(
        waited < Duration::from_secs(10),
        "woken by the mail: {waited:?}"
    );
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["type"], "email.received");
    assert_eq!(e["source"], "ada@example.com");
    let d = &e["data"];
    assert_eq!(d["subject"], "Invoice 42");
    assert!(
        d["message_id"]
            .as_str()
            .unwrap_or_default()
            .contains("lettre-1@example.com"),
        "{d}"
    );
    assert_eq!(d["provider"], "smtp");
    assert_eq!(d["envelope"]["mail_from"], "ada@example.com");
    assert_eq!(d["envelope"]["rcpt_to"], json!([a.email]));
    let text = d["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(".Dotted line.") && !text.contains("..Dotted"),
        "dot-unstuffed once: {d}"
    );
    assert_eq!(
        d["auth"],
        json!({"spf": "none", "dkim": "none", "dmarc": "none"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_smtplib_delivers_with_a_tag() {
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let (local, _) = a.email.split_once('@').unwrap_or_default();
    let rcpt = format!("{}+Orders@{}", local.to_uppercase(), DOMAIN.to_uppercase());
    let script = r#"
import smtplib, sys
from email.message import EmailMessage
m = EmailMessage()
m["From"] = "Grace <grace@example.org>"
m["To"] = sys.argv[3]
m["Subject"] = "From Python"
m["Message-ID"] = "<py-1@example.org>"
m.set_content("Hello from smtplib.\n")
with smtplib.SMTP("127.0.0.1", int(sys.argv[1]), local_hostname="py.example", timeout=20) as c:
    c.ehlo()
    assert c.has_extn("pipelining") and c.has_extn("size") and c.has_extn("smtputf8"), c.esmtp_features
    refused = c.send_message(m, from_addr=sys.argv[2], to_addrs=[sys.argv[3]])
    assert refused == {}, refused
print("sent")
"#;
    let out = tokio::process::Command::new("python3")
        .args([
            "-c",
            script,
            &s.port().to_string(),
            "grace@example.org",
            &rcpt,
        ])
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("run python3");
    assert!(
        out.status.success(),
        "python3 smtplib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let d = &events[0]["data"];
    assert_eq!(d["subject"], "From Python");
    assert_eq!(d["tag"], "orders");
    assert_eq!(d["envelope"]["rcpt_to"], json!([rcpt]));
    assert_eq!(
        d["text"].as_str().unwrap_or_default().trim_end(),
        "Hello from smtplib."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commands_in_one_write_are_answered_in_order() {
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let b = create(&http, &s.base).await;
    let (mut c, greeting) = Raw::connect(&s.smtp).await;
    starts(&greeting, &format!("220 {DOMAIN} ESMTP"));
    let ehlo = c.cmd("EHLO client.example").await;
    for ext in [
        "250-SIZE 10000000",
        "250-PIPELINING",
        "250-8BITMIME",
        "250-SMTPUTF8",
        "250-ENHANCEDSTATUSCODES",
    ] {
        assert!(ehlo.contains(ext), "{ext} in {ehlo:?}");
    }
    assert!(
        !ehlo.contains("STARTTLS"),
        "no STARTTLS without a key: {ehlo:?}"
    );
    c.send(&format!(
        "MAIL FROM:<bob@example.com> SIZE=300 BODY=8BITMIME\r\n\
         RCPT TO:<{}>\r\nRCPT TO:<nobody@{DOMAIN}>\r\nRCPT TO:<{}>\r\nDATA\r\n",
        a.email, b.email
    ))
    .await;
    starts(&c.reply().await, "250 2.1.0");
    starts(&c.reply().await, "250 2.1.5");
    assert_eq!(c.reply().await, "550 5.1.1 No such recipient here");
    starts(&c.reply().await, "250 2.1.5");
    starts(&c.reply().await, "354");
    c.send(&format!(
        "{}.\r\nNOOP\r\nQUIT\r\n",
        message("pipe-1@example.com", &a.email, "Pipelined").replace("\r\n.", "\r\n..")
    ))
    .await;
    assert_eq!(c.reply().await, "250 2.0.0 OK");
    starts(&c.reply().await, "250 2.0.0");
    starts(&c.reply().await, "221 2.0.0");
    assert!(c.closed().await);
    for who in [&a, &b] {
        let events = feed(&http, &s.base, who, 0).await;
        assert_eq!(events.len(), 1, "{events:?}");
        let d = &events[0]["data"];
        assert_eq!(d["subject"], "Pipelined");
        // Each address sees only its own recipient (Bcc stays private).
        assert_eq!(d["envelope"]["rcpt_to"], json!([who.email]));
        let text = d["text"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("Hello over SMTP.")
                && text.contains("\n.A line that starts with a dot.")
                && !text.contains(".."),
            "dot-unstuffed: {text:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helo_the_null_sender_and_raw_utf8() {
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let (mut c, _) = Raw::connect(&s.smtp).await;
    assert_eq!(c.cmd("HELO old.example").await, format!("250 {DOMAIN}"));
    starts(
        &c.cmd("MAIL FROM:<> BODY=8BITMIME SMTPUTF8").await,
        "250 2.1.0",
    );
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250 2.1.5");
    starts(&c.cmd("DATA").await, "354");
    c.send(&format!(
        "From: Jürgen <jürgen@example.de>\r\nTo: {}\r\nSubject: Grüße 🎉\r\n\
         Message-ID: <utf8@example.de>\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Transfer-Encoding: 8bit\r\n\r\nÄpfel und Birnen.\r\n",
        a.email
    ))
    .await;
    assert_eq!(c.cmd(".").await, "250 2.0.0 OK");
    starts(&c.cmd("QUIT").await, "221");
    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let d = &events[0]["data"];
    assert_eq!(d["subject"], "Grüße 🎉");
    assert_eq!(d["envelope"]["mail_from"], "");
    assert!(
        d["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Äpfel und Birnen."),
        "{d}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reply_code() {
    let s = serve(
        DOMAIN,
        &[
            "--max-email-bytes",
            "4096",
            "--max-email-recipients",
            "2",
            "--smtp-max-errors",
            "100",
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let gone = create(&http, &s.base).await;
    let r = http
        .delete(format!("{}/api/v1/addresses/{}", s.base, gone.id))
        .bearer_auth(&gone.token)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(r.status(), 204);

    let (mut c, _) = Raw::connect(&s.smtp).await;
    // Bad sequence, unknown command, syntax, an over-long line.
    starts(&c.cmd("MAIL FROM:<x@example.com>").await, "503 5.5.1");
    assert_eq!(c.cmd("FOO bar").await, "500 5.5.2 Command unrecognized");
    starts(&c.cmd("EHLO").await, "501 5.5.4");
    assert_eq!(
        c.cmd(&format!("NOOP {}", "x".repeat(1100))).await,
        "500 5.5.6 Line too long"
    );
    starts(&c.cmd("EXPN staff").await, "502 5.5.1");
    starts(&c.cmd("STARTTLS").await, "502 5.5.1");
    let ehlo = c.cmd("EHLO client.example").await;
    assert!(ehlo.contains("250-SIZE 4096"), "{ehlo:?}");
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "503 5.5.1");
    starts(&c.cmd("DATA").await, "503 5.5.1");
    starts(&c.cmd("VRFY someone").await, "252 2.5.2");
    starts(&c.cmd("HELP").await, "214 2.0.0");
    starts(&c.cmd("NOOP").await, "250 2.0.0");
    // SIZE over the limit, unsupported parameters, a malformed path.
    starts(
        &c.cmd("MAIL FROM:<x@example.com> SIZE=5000").await,
        "552 5.3.4",
    );
    starts(
        &c.cmd("MAIL FROM:<x@example.com> RET=HDRS").await,
        "555 5.5.4",
    );
    starts(&c.cmd("MAIL FROM:x@example.com").await, "501 5.5.4");
    starts(
        &c.cmd("MAIL FROM:<x@example.com> SIZE=4000").await,
        "250 2.1.0",
    );
    starts(&c.cmd("MAIL FROM:<x@example.com>").await, "503 5.5.1");
    // No recipient yet: DATA has nobody to deliver to.
    starts(&c.cmd("DATA").await, "554 5.5.1");
    // Unknown recipients, another domain, a deleted address.
    assert_eq!(
        c.cmd(&format!("RCPT TO:<nobody@{DOMAIN}>")).await,
        "550 5.1.1 No such recipient here"
    );
    starts(
        &c.cmd("RCPT TO:<someone@elsewhere.example>").await,
        "550 5.1.1",
    );
    starts(
        &c.cmd(&format!("RCPT TO:<{}>", gone.email)).await,
        "550 5.1.1",
    );
    starts(
        &c.cmd(&format!("RCPT TO:<{}> NOTIFY=NEVER", a.email)).await,
        "555 5.5.4",
    );
    // Too many recipients.
    let (local, _) = a.email.split_once('@').unwrap_or_default();
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250 2.1.5");
    starts(
        &c.cmd(&format!("RCPT TO:<{local}+x@{DOMAIN}>")).await,
        "250 2.1.5",
    );
    assert_eq!(
        c.cmd(&format!("RCPT TO:<{local}+y@{DOMAIN}>")).await,
        "452 4.5.3 Too many recipients"
    );
    // A message over --max-email-bytes: read to its end, refused.
    starts(&c.cmd("DATA").await, "354");
    let big = message("big@example.com", &a.email, "Big") + &"0123456789\r\n".repeat(500);
    c.send(&big).await;
    starts(&c.cmd(".").await, "552 5.3.4");
    // The session goes on: the transaction was reset.
    starts(&c.cmd("DATA").await, "503 5.5.1");
    starts(&c.cmd("RSET").await, "250 2.0.0");
    starts(&c.cmd("QUIT").await, "221 2.0.0");
    assert!(feed(&http, &s.base, &a, 0).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_feed_is_a_temporary_failure() {
    let s = serve(DOMAIN, &["--max-retained-events", "1"]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let first = message("full-1@example.com", &a.email, "One");
    assert_eq!(
        send_raw(&s.smtp, "x@example.com", &[&a.email], &first).await,
        "250 2.0.0 OK"
    );
    let second = message("full-2@example.com", &a.email, "Two");
    assert_eq!(
        send_raw(&s.smtp, "x@example.com", &[&a.email], &second).await,
        "452 4.2.2 Mailbox full, try again later"
    );
    assert_eq!(feed(&http, &s.base, &a, 0).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_data_stores_nothing() {
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let (mut c, _) = Raw::connect(&s.smtp).await;
    starts(&c.cmd("EHLO client.example").await, "250");
    starts(&c.cmd("MAIL FROM:<x@example.com>").await, "250");
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250");
    starts(&c.cmd("DATA").await, "354");
    c.send(&message("cut@example.com", &a.email, "Cut")).await;
    drop(c);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(feed(&http, &s.base, &a, 0).await.is_empty());
    // The same message sent whole afterwards is delivered.
    let raw = message("cut@example.com", &a.email, "Cut");
    assert_eq!(
        send_raw(&s.smtp, "x@example.com", &[&a.email], &raw).await,
        "250 2.0.0 OK"
    );
    assert_eq!(feed(&http, &s.base, &a, 0).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_message_times_out_and_stores_nothing() {
    let s = serve(DOMAIN, &["--smtp-data-timeout-seconds", "1"]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let (mut c, _) = Raw::connect(&s.smtp).await;
    starts(&c.cmd("EHLO client.example").await, "250");
    starts(&c.cmd("MAIL FROM:<x@example.com>").await, "250");
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250");
    starts(&c.cmd("DATA").await, "354");
    c.send(&message("slow@example.com", &a.email, "Slow")).await;
    let started = Instant::now();
    starts(&c.reply().await, "421 4.4.2");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(c.closed().await);
    assert!(feed(&http, &s.base, &a, 0).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_being_received_share_a_memory_budget() {
    // 1 MiB holds one message of the largest size (1 MiB), and a message holds memory by the
    // bytes received: one nearly whole message takes all of it.
    let s = serve(
        DOMAIN,
        &[
            "--max-email-bytes",
            "1048576",
            "--smtp-data-memory-mib",
            "1",
            "--smtp-command-timeout-seconds",
            "2",
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let (mut c, _) = Raw::connect(&s.smtp).await;
        starts(&c.cmd("EHLO client.example").await, "250");
        starts(&c.cmd("MAIL FROM:<x@example.com>").await, "250");
        starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250");
        sessions.push(c);
    }
    let (first, second) = sessions.split_at_mut(1);
    let (one, two) = (&mut first[0], &mut second[0]);
    starts(&one.cmd("DATA").await, "354");
    let raw = message("budget-1@example.com", &a.email, "First") + &"0123456789\r\n".repeat(83_000);
    one.send(&raw).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The budget is in use: the second DATA waits up to the command timeout, then 452.
    assert_eq!(
        two.cmd("DATA").await,
        "452 4.3.1 Insufficient system resources, try again later"
    );
    // The first message is delivered; meanwhile the second session says NOOP, so that a slow
    // delivery (a loaded machine) does not run it into the 2 s command timeout.
    let delivered = std::cell::Cell::new(false);
    let (reply, ()) = tokio::join!(
        async {
            let reply = one.cmd(".").await;
            delivered.set(true);
            reply
        },
        async {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if delivered.get() {
                    break;
                }
                starts(&two.cmd("NOOP").await, "250");
            }
        }
    );
    assert_eq!(reply, "250 2.0.0 OK");
    // Its transaction stands: DATA again, now that the budget is free.
    starts(&two.cmd("DATA").await, "354");
    two.send(&message("budget-2@example.com", &a.email, "Second"))
        .await;
    assert_eq!(two.cmd(".").await, "250 2.0.0 OK");
    assert_eq!(feed(&http, &s.base, &a, 0).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_lost_250_is_one_event() {
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let raw = message("retry@example.com", &a.email, "Retry");
    for _ in 0..2 {
        assert_eq!(
            send_raw(&s.smtp, "x@example.com", &[&a.email], &raw).await,
            "250 2.0.0 OK"
        );
    }
    // Without a Message-ID the bytes are the key: the door adds nothing to them.
    let bare = format!(
        "From: x@example.com\r\nTo: {}\r\nSubject: Bare\r\n\r\nNo id.\r\n",
        a.email
    );
    for _ in 0..2 {
        assert_eq!(
            send_raw(&s.smtp, "x@example.com", &[&a.email], &bare).await,
            "250 2.0.0 OK"
        );
    }
    let events = feed(&http, &s.base, &a, 0).await;
    let subjects: Vec<&Value> = events.iter().map(|e| &e["data"]["subject"]).collect();
    assert_eq!(subjects, [&json!("Retry"), &json!("Bare")], "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_and_timeouts_close_sessions() {
    let s = serve(
        DOMAIN,
        &[
            "--smtp-max-connections-per-ip",
            "2",
            "--smtp-command-timeout-seconds",
            "2",
            "--smtp-max-errors",
            "5",
        ],
    )
    .await;
    // Per-IP cap: the third connection is refused.
    let (mut one, g1) = Raw::connect(&s.smtp).await;
    let (mut two, g2) = Raw::connect(&s.smtp).await;
    starts(&g1, "220 ");
    starts(&g2, "220 ");
    let (mut three, g3) = Raw::connect(&s.smtp).await;
    starts(&g3, "421 4.7.0");
    assert!(three.closed().await);
    // Too many errors: the fifth failed command ends the session.
    two.send("FOO\r\nFOO\r\nFOO\r\nFOO\r\nFOO\r\nNOOP\r\n")
        .await;
    for _ in 0..4 {
        starts(&two.reply().await, "500 5.5.2");
    }
    starts(&two.reply().await, "421 4.7.0");
    assert!(two.closed().await);
    drop((two, three));
    // Idle: the command timeout ends the session.
    let idle = Instant::now();
    starts(&one.reply().await, "421 4.4.2");
    assert!(idle.elapsed() < Duration::from_secs(5));
    assert!(one.closed().await);
    drop(one);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A line without an end, far over the limit: answered, then closed.
    let (mut flood, _) = Raw::connect(&s.smtp).await;
    flood.send(&"x".repeat(100_000)).await;
    starts(&flood.reply().await, "500 5.5.6");
    assert!(flood.closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_idle_sessions_and_lets_data_finish() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir_path = dir.path().to_owned();
    let mut s = serve_in(dir, DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;

    let (mut idle, _) = Raw::connect(&s.smtp).await;
    starts(&idle.cmd("EHLO idle.example").await, "250");
    let (mut busy, _) = Raw::connect(&s.smtp).await;
    starts(&busy.cmd("EHLO busy.example").await, "250");
    starts(&busy.cmd("MAIL FROM:<x@example.com>").await, "250");
    starts(&busy.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250");
    starts(&busy.cmd("DATA").await, "354");
    let raw = message("shutdown@example.com", &a.email, "Finished");
    let (head, tail) = raw.split_at(40);
    busy.send(head).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    s.signal("-TERM");
    starts(&idle.reply().await, "421 4.3.2");
    assert!(idle.closed().await);
    // The message in progress is finished, answered, and then the session is closed.
    busy.send(tail).await;
    assert_eq!(busy.cmd(".").await, "250 2.0.0 OK");
    starts(&busy.reply().await, "421 4.3.2");
    let status = tokio::time::timeout(Duration::from_secs(15), s.child.wait())
        .await
        .unwrap_or_else(|_| panic!("the server did not exit within 15 s of SIGTERM"))
        .expect("wait");
    assert!(status.success(), "clean exit: {status}");
    assert!(
        TcpStream::connect(&s.smtp).await.is_err(),
        "no longer listening"
    );

    // The message is in the feed after a restart on the same database.
    let (_child, base) = common::spawn_serve(
        &dir_path.join("smtp.db"),
        "127.0.0.1:0",
        &["--email-domain", DOMAIN],
    )
    .await;
    let events = feed(&http, &base, &a, 0).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["subject"], "Finished");
    drop(s);
}

/// A self-signed certificate for `localhost` and 127.0.0.1, written as PEM files.
fn self_signed(dir: &Path) -> (String, String, String) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("rcgen");
    let cert_pem = ck.cert.pem();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, &cert_pem).expect("write cert");
    std::fs::write(&key, ck.signing_key.serialize_pem()).expect("write key");
    (
        cert.display().to_string(),
        key.display().to_string(),
        cert_pem,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_with_lettre_and_smtplib() {
    use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
    let certs = tempfile::tempdir().expect("temp dir");
    let (cert, key, cert_pem) = self_signed(certs.path());
    let s = serve(DOMAIN, &["--smtp-tls-cert", &cert, "--smtp-tls-key", &key]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;

    let (mut c, _) = Raw::connect(&s.smtp).await;
    let ehlo = c.cmd("EHLO client.example").await;
    assert!(ehlo.contains("250-STARTTLS"), "{ehlo:?}");
    starts(&c.cmd("STARTTLS now").await, "501 5.5.4");
    starts(&c.cmd("QUIT").await, "221");

    // lettre, verifying the certificate against it.
    let tls = TlsParameters::builder("localhost".to_owned())
        .certificate_store(CertificateStore::None)
        .add_root_certificate(Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .build_rustls()
        .expect("TLS parameters");
    let mailer = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(s.port())
        .tls(Tls::Required(tls))
        .build();
    let email = Message::builder()
        .from("ada@example.com".parse().unwrap())
        .to(a.email.parse().unwrap())
        .subject("Over TLS")
        .body("Encrypted.".to_owned())
        .expect("build the message");
    let response = mailer.send(email).await.expect("lettre send over STARTTLS");
    assert!(response.is_positive(), "{response:?}");

    // smtplib, verifying too; EHLO again after STARTTLS shows no STARTTLS.
    let script = r#"
import smtplib, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
with smtplib.SMTP("localhost", int(sys.argv[1]), local_hostname="py.example", timeout=20) as c:
    c.starttls(context=ctx)
    c.ehlo()
    assert not c.has_extn("starttls"), c.esmtp_features
    msg = "From: grace@example.org\r\nSubject: Python over TLS\r\nMessage-ID: <py-tls@example.org>\r\n\r\nHi.\r\n"
    refused = c.sendmail("grace@example.org", [sys.argv[3]], msg)
    assert refused == {}, refused
"#;
    let out = tokio::process::Command::new("python3")
        .args(["-c", script, &s.port().to_string(), &cert, &a.email])
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("run python3");
    assert!(
        out.status.success(),
        "python3 smtplib over STARTTLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let events = feed(&http, &s.base, &a, 0).await;
    let subjects: Vec<&Value> = events.iter().map(|e| &e["data"]["subject"]).collect();
    assert_eq!(subjects, [&json!("Over TLS"), &json!("Python over TLS")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_drops_what_was_pipelined_behind_it_and_starts_afresh() {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    let certs = tempfile::tempdir().expect("temp dir");
    let (cert, key, cert_pem) = self_signed(certs.path());
    let s = serve(DOMAIN, &["--smtp-tls-cert", &cert, "--smtp-tls-key", &key]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;

    let tcp = TcpStream::connect(&s.smtp).await.expect("connect");
    let mut plain = BufReader::new(tcp);
    starts(&read_reply(&mut plain).await, "220 ");
    starts(&exchange(&mut plain, "EHLO client.example").await, "250");
    // A man in the middle appends a command to STARTTLS, in the same segment.
    starts(
        &exchange(&mut plain, "STARTTLS\r\nMAIL FROM:<mallory@example.com>").await,
        "220 2.0.0",
    );
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap())
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, plain.into_inner())
        .await
        .expect("TLS handshake (the injected bytes must be dropped)");
    let mut t = BufReader::new(tls);
    // The session starts afresh: no EHLO yet, and the injected MAIL is gone.
    starts(
        &exchange(&mut t, "RCPT TO:<x@inbox.test>").await,
        "503 5.5.1",
    );
    starts(
        &exchange(&mut t, "MAIL FROM:<x@example.com>").await,
        "503 5.5.1",
    );
    let ehlo = exchange(&mut t, "EHLO client.example").await;
    assert!(!ehlo.contains("STARTTLS"), "{ehlo:?}");
    starts(&exchange(&mut t, "STARTTLS").await, "503 5.5.1");
    starts(&exchange(&mut t, "MAIL FROM:<x@example.com>").await, "250");
    starts(
        &exchange(&mut t, &format!("RCPT TO:<{}>", a.email)).await,
        "250",
    );
    starts(&exchange(&mut t, "DATA").await, "354");
    let raw = message("tls@example.com", &a.email, "Private");
    t.write_all(raw.as_bytes()).await.expect("write");
    assert_eq!(exchange(&mut t, ".").await, "250 2.0.0 OK");
    starts(&exchange(&mut t, "QUIT").await, "221");
    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["subject"], "Private");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spf_dkim_and_dmarc_verdicts_with_a_configured_resolver() {
    let (dns, _dns_task) = fake_dns(vec![
        ("example.com", "v=spf1 ip4:127.0.0.1 -all"),
        ("_dmarc.example.com", "v=DMARC1; p=reject"),
        ("other.example", "v=spf1 -all"),
        ("_dmarc.other.example", "v=DMARC1; p=reject"),
    ])
    .await;
    let s = serve(DOMAIN, &["--smtp-check-auth", "--smtp-dns-resolver", &dns]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    // Sent from an IP the sender's domain allows, From aligned: SPF and DMARC pass.
    let genuine = message("auth-1@example.com", &a.email, "Genuine");
    assert_eq!(
        send_raw(&s.smtp, "ada@example.com", &[&a.email], &genuine).await,
        "250 2.0.0 OK"
    );
    // A domain that allows no IP: SPF and DMARC fail (still delivered: the consumer decides).
    let forged = format!(
        "From: boss@other.example\r\nTo: {}\r\nSubject: Forged\r\nMessage-ID: <auth-2@other.example>\r\n\r\nPay now.\r\n",
        a.email
    );
    assert_eq!(
        send_raw(&s.smtp, "boss@other.example", &[&a.email], &forged).await,
        "250 2.0.0 OK"
    );
    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[0]["data"]["auth"],
        json!({"spf": "pass", "dkim": "none", "dmarc": "pass"})
    );
    assert_eq!(
        events[1]["data"]["auth"],
        json!({"spf": "fail", "dkim": "none", "dmarc": "fail"})
    );
}

/// A message signed here with an Ed25519 DKIM key whose public half the resolver publishes:
/// DKIM `pass` (and DMARC `pass` by the aligned signature, though the envelope's SPF fails);
/// the same message altered after signing: DKIM `fail`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dkim_signatures_verify_against_the_published_key() {
    use base64::Engine;
    use mail_auth::common::crypto::Ed25519Key;
    use mail_auth::common::headers::HeaderWriter;
    use mail_auth::dkim::DkimSigner;

    let pkcs8 = Ed25519Key::generate_pkcs8().expect("generate a key");
    let key = Ed25519Key::from_pkcs8_der(&pkcs8).expect("load the key");
    let public = base64::engine::general_purpose::STANDARD.encode(key.public_key());
    let record: &'static str =
        Box::leak(format!("v=DKIM1; k=ed25519; p={public}").into_boxed_str());
    let (dns, _dns_task) = fake_dns(vec![
        ("test._domainkey.example.com", record),
        ("_dmarc.example.com", "v=DMARC1; p=reject"),
        ("other.example", "v=spf1 -all"),
    ])
    .await;
    let s = serve(DOMAIN, &["--smtp-check-auth", "--smtp-dns-resolver", &dns]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let body = format!(
        "From: Ada <ada@example.com>\r\nTo: {}\r\nSubject: Signed\r\n\
         Message-ID: <dkim-1@example.com>\r\n\r\nA signed body.\r\n",
        a.email
    );
    let signature = DkimSigner::from_key(key)
        .domain("example.com")
        .selector("test")
        .headers(["From", "To", "Subject", "Message-ID"])
        .sign(body.as_bytes())
        .expect("sign");
    let signed = format!("{}{body}", signature.to_header());
    // Relayed from a host the envelope domain does not allow: SPF fails, the signature aligns.
    assert_eq!(
        send_raw(&s.smtp, "bounce@other.example", &[&a.email], &signed).await,
        "250 2.0.0 OK"
    );
    let altered = signed
        .replace("A signed body.", "An altered body.")
        .replace("<dkim-1@", "<dkim-2@");
    assert_eq!(
        send_raw(&s.smtp, "bounce@other.example", &[&a.email], &altered).await,
        "250 2.0.0 OK"
    );
    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[0]["data"]["auth"],
        json!({"spf": "fail", "dkim": "pass", "dmarc": "pass"})
    );
    assert_eq!(
        events[1]["data"]["auth"],
        json!({"spf": "fail", "dkim": "fail", "dmarc": "fail"})
    );
}

/// `--smtp-messages-per-minute-per-ip`: past it, `MAIL` is answered `450 4.7.1` (with the
/// seconds to wait) until the one-minute window ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_per_minute_per_ip_are_limited() {
    let s = serve(DOMAIN, &["--smtp-messages-per-minute-per-ip", "2"]).await;
    let (mut c, greeting) = Raw::connect(&s.smtp).await;
    starts(&greeting, "220 ");
    starts(&c.cmd("EHLO client.example").await, "250");
    let mut replies = Vec::new();
    // Five attempts: even if a minute boundary falls among them, one is over the limit.
    for _ in 0..5 {
        let reply = c.cmd("MAIL FROM:<ada@example.com>").await;
        replies.push(reply.clone());
        starts(&c.cmd("RSET").await, "250");
    }
    assert!(replies[0].starts_with("250 2.1.0"), "{replies:?}");
    assert!(replies[1].starts_with("250 2.1.0"), "{replies:?}");
    let refused: Vec<&String> = replies
        .iter()
        .filter(|r| r.starts_with("450 4.7.1"))
        .collect();
    assert!(!refused.is_empty(), "{replies:?}");
    assert!(
        refused.iter().all(|r| r.contains("try again in")),
        "{replies:?}"
    );
}

/// `PUT {root}/email/policy` (docs/API.md §10, "Sender rules"), answered 200.
async fn set_policy(http: &reqwest::Client, a: &common::smtp::Address, policy: Value) {
    let r = http
        .put(format!("{}/api/v1/addresses/{}/email/policy", a.base, a.id))
        .bearer_auth(&a.token)
        .json(&policy)
        .send()
        .await
        .expect("PUT email policy");
    let status = r.status();
    let body = r.text().await.unwrap_or_default();
    assert_eq!(status, 200, "{body}");
}

/// `email.refused_count` of `GET {root}`.
async fn refused_count(http: &reqwest::Client, a: &common::smtp::Address) -> u64 {
    let r = http
        .get(format!("{}/api/v1/addresses/{}", a.base, a.id))
        .bearer_auth(&a.token)
        .send()
        .await
        .expect("GET the address");
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("JSON");
    v["email"]["refused_count"]
        .as_u64()
        .unwrap_or_else(|| panic!("no email.refused_count: {v}"))
}

fn authored(from: &str, to: &str, id: &str) -> String {
    format!("From: {from}\r\nTo: {to}\r\nSubject: {id}\r\nMessage-ID: <{id}@example.com>\r\n\r\nHi.\r\n")
}

/// Sender rules on the SMTP door (docs/API.md §10): an envelope sender outside `allow` is
/// refused at `RCPT` (`550 5.7.1`, counted once per transaction and address, the other
/// recipients unaffected); an allowed envelope with an author outside `allow` after `DATA`; the
/// null sender is judged by its author; allowed mail arrives; nothing refused is appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_rules_refuse_at_rcpt_and_after_data_and_count() {
    let s = serve(DOMAIN, &[]).await;
    let http = reqwest::Client::new();
    let a = create(&http, &s.base).await;
    let open = create(&http, &s.base).await;
    set_policy(&http, &a, json!({"allow": ["*@example.com"]})).await;
    let (local, _) = a.email.split_once('@').unwrap_or_default();
    let tagged = format!("{local}+tag@{DOMAIN}");

    let (mut c, greeting) = Raw::connect(&s.smtp).await;
    starts(&greeting, "220 ");
    starts(&c.cmd("EHLO client.example").await, "250");
    starts(&c.cmd("MAIL FROM:<eve@evil.example>").await, "250 2.1.0");
    let refused = "550 5.7.1 Sender not allowed by the recipient's sender rules";
    assert_eq!(c.cmd(&format!("RCPT TO:<{}>", a.email)).await, refused);
    assert_eq!(c.cmd(&format!("RCPT TO:<{tagged}>")).await, refused);
    starts(
        &c.cmd(&format!("RCPT TO:<{}>", open.email)).await,
        "250 2.1.5",
    );
    starts(&c.cmd("DATA").await, "354");
    c.send(&authored("Eve <eve@evil.example>", &open.email, "eve-1"))
        .await;
    assert_eq!(c.cmd(".").await, "250 2.0.0 OK", "the open address gets it");

    // The envelope allowed, the author not: refused after DATA.
    starts(&c.cmd("MAIL FROM:<ada@example.com>").await, "250 2.1.0");
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250 2.1.5");
    starts(&c.cmd("DATA").await, "354");
    c.send(&authored("Eve <eve@evil.example>", &a.email, "eve-2"))
        .await;
    assert_eq!(
        c.cmd(".").await,
        "550 5.7.1 Message author not allowed by the recipient's sender rules"
    );
    // Allowed envelope and author: delivered.
    starts(&c.cmd("MAIL FROM:<ada@example.com>").await, "250 2.1.0");
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250 2.1.5");
    starts(&c.cmd("DATA").await, "354");
    c.send(&authored("Ada <ADA@Example.com>", &a.email, "ada-1"))
        .await;
    assert_eq!(c.cmd(".").await, "250 2.0.0 OK");
    // The null sender (a bounce) passes the envelope and is judged by its author.
    starts(&c.cmd("MAIL FROM:<>").await, "250 2.1.0");
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250 2.1.5");
    starts(&c.cmd("DATA").await, "354");
    c.send(&authored("mailer-daemon@example.com", &a.email, "bounce-1"))
        .await;
    assert_eq!(c.cmd(".").await, "250 2.0.0 OK");
    starts(&c.cmd("MAIL FROM:<>").await, "250 2.1.0");
    starts(&c.cmd(&format!("RCPT TO:<{}>", a.email)).await, "250 2.1.5");
    starts(&c.cmd("DATA").await, "354");
    c.send(&authored(
        "mailer-daemon@relay.example.org",
        &a.email,
        "bounce-2",
    ))
    .await;
    starts(&c.cmd(".").await, "550 5.7.1 ");
    starts(&c.cmd("QUIT").await, "221");

    let subjects = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["data"]["subject"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let events = feed(&http, &s.base, &a, 0).await;
    assert_eq!(subjects(&events), ["ada-1", "bounce-1"], "{events:?}");
    assert_eq!(refused_count(&http, &a).await, 3);
    let events = feed(&http, &s.base, &open, 0).await;
    assert_eq!(subjects(&events), ["eve-1"]);
    assert_eq!(refused_count(&http, &open).await, 0);

    // Without the rules, the same sender is accepted.
    let r = http
        .delete(format!("{}/api/v1/addresses/{}/email/policy", a.base, a.id))
        .bearer_auth(&a.token)
        .send()
        .await
        .expect("DELETE email policy");
    assert_eq!(r.status(), 204);
    let eve = authored("Eve <eve@evil.example>", &a.email, "eve-3");
    assert_eq!(
        send_raw(&s.smtp, "eve@evil.example", &[&a.email], &eve).await,
        "250 2.0.0 OK"
    );
    assert_eq!(refused_count(&http, &a).await, 3);
}

/// `require_auth` on the SMTP door: without `--smtp-check-auth` nothing can pass, so the
/// recipient is refused at `RCPT` (fail closed); with it, the verdicts decide after `DATA`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_authentication_fails_closed_without_checks_and_decides_with_them() {
    let http = reqwest::Client::new();
    let unchecked = serve(DOMAIN, &[]).await;
    let a = create(&http, &unchecked.base).await;
    set_policy(&http, &a, json!({"require_auth": "spf_or_dkim"})).await;
    let (mut c, greeting) = Raw::connect(&unchecked.smtp).await;
    starts(&greeting, "220 ");
    starts(&c.cmd("EHLO client.example").await, "250");
    starts(&c.cmd("MAIL FROM:<ada@example.com>").await, "250 2.1.0");
    assert_eq!(
        c.cmd(&format!("RCPT TO:<{}>", a.email)).await,
        "550 5.7.1 Message not authenticated as the recipient's sender rules require"
    );
    starts(&c.cmd("QUIT").await, "221");
    assert_eq!(refused_count(&http, &a).await, 1);
    assert!(feed(&http, &unchecked.base, &a, 0).await.is_empty());

    let (dns, _dns_task) = fake_dns(vec![
        ("example.com", "v=spf1 ip4:127.0.0.1 -all"),
        ("_dmarc.example.com", "v=DMARC1; p=reject"),
        ("other.example", "v=spf1 -all"),
        ("_dmarc.other.example", "v=DMARC1; p=reject"),
    ])
    .await;
    let checked = serve(DOMAIN, &["--smtp-check-auth", "--smtp-dns-resolver", &dns]).await;
    let b = create(&http, &checked.base).await;
    set_policy(&http, &b, json!({"require_auth": "dmarc"})).await;
    let forged = authored("boss@other.example", &b.email, "forged");
    assert_eq!(
        send_raw(&checked.smtp, "boss@other.example", &[&b.email], &forged).await,
        "550 5.7.1 Message not authenticated as the recipient's sender rules require"
    );
    let genuine = authored("Ada <ada@example.com>", &b.email, "genuine");
    assert_eq!(
        send_raw(&checked.smtp, "ada@example.com", &[&b.email], &genuine).await,
        "250 2.0.0 OK"
    );
    let events = feed(&http, &checked.base, &b, 0).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["subject"], "genuine");
    assert_eq!(events[0]["data"]["auth"]["dmarc"], "pass");
    assert_eq!(refused_count(&http, &b).await, 1);
}
