//! Inbound email scenarios for any deployment (docs/API.md §10–§11): a message reaches a waiting
//! long poll, its attachment and raw message read back byte for byte, a sender's retry is one
//! event, replay, deletion, and who may read what.
//!
//! How a message reaches the deployment is a [`Door`]: the raw-MIME webhook ([`WebhookDoor`],
//! here, over HTTP) or, on AWS, the email bucket SES writes to (the functions' tests). Where the
//! deployment keeps each address's messages is a [`Kept`] probe (a row count in `serve`'s
//! database, objects under `mail/{address_id}/` in the bucket), so that deletion is seen to
//! remove them and not only to hide them.

use std::time::Duration;

pub use futures::future::BoxFuture;
use serde_json::{json, Value};

use crate::{Address, Client, Resp};

/// One message as a sender hands it over.
#[derive(Debug, Clone)]
pub struct Mail {
    /// Names the message at the door, the same on a retry (SES's message id on the bucket door).
    pub id: String,
    /// The envelope's recipients.
    pub rcpts: Vec<String>,
    /// The message as the sender wrote it.
    pub raw: Vec<u8>,
}

/// A way in for mail.
pub trait Door: Sync {
    /// The event's `data.provider` for mail that came this way.
    fn provider(&self) -> &'static str;

    /// Hands `mail` over; `again` is the sender (or the queue) delivering it once more. Returns
    /// the door's answer when it answers per message (the webhook), `None` when delivery goes on
    /// after the call returns (the bucket).
    fn deliver<'a>(
        &'a self, c: &'a Client, mail: &'a Mail, again: bool,
    ) -> BoxFuture<'a, Option<Resp>>;

    /// The bytes the deployment keeps for `mail`, which `…/raw` answers and `data.size` counts.
    fn stored_bytes(&self, mail: &Mail) -> Vec<u8>;
}

/// Counts the messages a deployment keeps for an address.
pub trait Kept: Sync {
    fn messages<'a>(&'a self, address_id: &'a str) -> BoxFuture<'a, usize>;
}

/// The raw-MIME webhook door, `POST /api/v1/email/inbound`, with the deployment's ingest secret.
pub struct WebhookDoor {
    pub secret: String,
}

/// The envelope sender every scenario's mail comes from.
pub const MAIL_FROM: &str = "bounces@example.com";

/// `POST /api/v1/email/inbound` of `raw` for `rcpts` with `secret`.
pub async fn ingest(c: &Client, secret: &str, rcpts: &[&str], raw: &[u8]) -> Resp {
    let query: Vec<String> = rcpts
        .iter()
        .map(|r| format!("rcpt={}", form_encode(r)))
        .chain([format!("mail_from={}", form_encode(MAIL_FROM))])
        .collect();
    c.send(
        "POST",
        &format!("/api/v1/email/inbound?{}", query.join("&")),
        Some(secret),
        &[("content-type", "message/rfc822")],
        Some(raw.to_vec()),
    )
    .await
}

/// Percent-encodes what a query value cannot carry as is (`+` would read as a space).
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'@' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Door for WebhookDoor {
    fn provider(&self) -> &'static str {
        "webhook"
    }

    fn deliver<'a>(
        &'a self, c: &'a Client, mail: &'a Mail, again: bool,
    ) -> BoxFuture<'a, Option<Resp>> {
        Box::pin(async move {
            // A relay that lost our answer sends the message again, with its own trace on top.
            let raw = if again {
                let mut raw = b"Received: from relay.example.com\r\n".to_vec();
                raw.extend_from_slice(&mail.raw);
                raw
            } else {
                mail.raw.clone()
            };
            let rcpts: Vec<&str> = mail.rcpts.iter().map(String::as_str).collect();
            Some(ingest(c, &self.secret, &rcpts, &raw).await)
        })
    }

    fn stored_bytes(&self, mail: &Mail) -> Vec<u8> {
        mail.raw.clone()
    }
}

/// The email address of `a`, as its create answer gives it.
pub fn email_of(a: &Address) -> String {
    a.created["address"]["email"]
        .as_str()
        .unwrap_or_else(|| panic!("no address.email in the create answer: {}", a.created))
        .to_owned()
}

/// A name no earlier run used, for Message-IDs and SES message ids.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{:016x}", rand::random::<u64>())
}

/// A message to `to` with a text body and one PDF attachment, `attachment`, whose declared file
/// name carries a path (which must not survive) and whose subject is RFC 2047 encoded.
pub fn message(message_id: &str, to: &str, attachment: &[u8]) -> Vec<u8> {
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, attachment);
    let wrapped: Vec<&str> = b64
        .as_bytes()
        .chunks(76)
        .map(|c| std::str::from_utf8(c).unwrap_or_default())
        .collect();
    format!(
        "From: Ada Lovelace <Ada@Example.COM>\r\n\
         To: {to}\r\n\
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

/// Each feed read after a delivery that goes on asynchronously waits this long for the event.
const SETTLE: Duration = Duration::from_secs(3);

/// The address's events after 0.
async fn feed(c: &Client, a: &Address) -> Vec<Value> {
    let r = c.events(a, "after=0").await;
    r.expect_status(200, "read the feed");
    r.json["events"].as_array().cloned().unwrap_or_default()
}

/// Waits up to 10 s for the address's first event.
async fn first_event(c: &Client, a: &Address) -> Value {
    let (events, waited) = events_within(c, a, 0, MAIL_DEADLINE).await;
    let e = events.first().cloned().unwrap_or_default();
    assert!(e.is_object(), "no event within {waited:?}");
    e
}

/// How long a test waits for mail to reach the feed. Mail through the bucket crosses three
/// emulators (S3's notification, the queue, the function behind it); a loaded test machine may
/// take tens of seconds. How soon it arrives is the benchmarks' business.
pub const MAIL_DEADLINE: Duration = Duration::from_secs(120);

/// The events of `a` after `after`, long-polled (25 s at a time) until there is at least one or
/// `deadline` has passed; with how long that took.
pub async fn events_within(
    c: &Client, a: &Address, after: u64, deadline: Duration,
) -> (Vec<Value>, Duration) {
    let started = std::time::Instant::now();
    loop {
        let left = deadline.saturating_sub(started.elapsed()).as_secs().min(25);
        let r = c.events(a, &format!("after={after}&wait={left}")).await;
        r.expect_status(200, "wait for events");
        let events = r.json["events"].as_array().cloned().unwrap_or_default();
        if !events.is_empty() || left == 0 {
            return (events, started.elapsed());
        }
    }
}

/// `POST {root}/email/replay` of `email_id` by `a`.
pub async fn replay(c: &Client, a: &Address, email_id: &str) -> Resp {
    c.json(
        "POST",
        &format!("{}/email/replay", a.root),
        Some(&a.token),
        &json!({ "email_id": email_id }),
    )
    .await
}

/// A message to a waiting consumer: the long poll wakes with the `email.received` event, whose
/// fields describe the message; the attachment and the raw message read back byte for byte,
/// with the headers that keep a browser from rendering them; unknown ids are 404; the sender
/// retrying is still one event, and replay finds it; deleting the address makes the downloads
/// 410, removes the kept message, and (where the door answers) refuses later mail for good.
pub async fn mail_reaches_a_waiting_poll_and_reads_back(
    c: &Client, door: &dyn Door, kept: &dyn Kept,
) {
    let a = c.new_address().await;
    let email = email_of(&a);
    let (local, domain) = email
        .split_once('@')
        .unwrap_or_else(|| panic!("not an email address: {email}"));

    // A consumer waits first.
    let poll = {
        let (c, a) = (c.clone(), a.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let r = c.events(&a, "after=0&wait=25").await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let attachment: Vec<u8> = (0..50_000u32).map(|n| (n * 7 % 256) as u8).collect();
    // Mixed case and a +tag reach the same address.
    let rcpt = format!(
        "{}+Invoices@{}",
        local.to_uppercase(),
        domain.to_uppercase()
    );
    let mail = Mail {
        id: unique("m1"),
        raw: message(
            &format!("{}@example.com", unique("m1-")),
            &email,
            &attachment,
        ),
        rcpts: vec![rcpt.clone()],
    };
    if let Some(r) = door.deliver(c, &mail, false).await {
        r.expect_status(200, "deliver the mail");
        assert_eq!(
            r.json,
            json!({"accepted": [rcpt], "rejected": []}),
            "{}",
            r.text
        );
    }

    let (r, waited) = poll.await.expect("poll task");
    r.expect_status(200, "the waiting poll");
    // A poll that times out answers no events: one event means the mail woke it. (How soon is
    // the benchmarks' business: on a loaded test machine mail through the bucket may outlast the
    // first poll, and the next polls wait for it.)
    let mut events = r.json["events"].as_array().cloned().unwrap_or_default();
    if events.is_empty() {
        let (later, more) = events_within(c, &a, 0, MAIL_DEADLINE).await;
        eprintln!("the mail outlasted the first poll ({waited:?}); it came {more:?} later");
        events = later;
    }
    assert_eq!(events.len(), 1, "woken after {waited:?}: {events:?}");
    let e = &events[0];
    let stored = door.stored_bytes(&mail);
    assert_eq!(e["type"], "email.received");
    assert_eq!(e["ingress_surface"], "email");
    assert_eq!(e["source"], "ada@example.com");
    let d = &e["data"];
    assert_eq!(d["subject"], "Invoice \u{1f4ce}");
    assert_eq!(d["tag"], "invoices");
    assert_eq!(d["provider"], door.provider());
    assert_eq!(d["envelope"]["mail_from"], MAIL_FROM);
    assert_eq!(d["envelope"]["rcpt_to"], json!([rcpt]));
    assert_eq!(d["size"], stored.len());
    assert_eq!(d["text"], "Please find the invoice attached.");
    assert_eq!(
        d["reply_text"], "Please find the invoice attached.",
        "nothing quoted"
    );
    assert_eq!(d["auto_reply"], false);
    let att = &d["attachments"][0];
    assert_eq!(att["filename"], "invoice.pdf", "no path in a filename");
    assert_eq!(att["content_type"], "application/pdf");
    assert_eq!(att["size"], attachment.len());
    let event_id = e["id"].as_str().unwrap_or_default().to_owned();
    let att_id = att["id"].as_str().unwrap_or_default().to_owned();
    let email_id = d["email_id"].as_str().unwrap_or_default().to_owned();

    // The attachment, byte for byte, never rendered by a browser.
    let download = |rest: String| {
        let (c, url, token) = (
            c.clone(),
            format!("{}/events/{rest}", a.root),
            a.token.clone(),
        );
        async move { c.get(&url, Some(&token)).await }
    };
    let r = download(format!("{event_id}/attachments/{att_id}")).await;
    r.expect_status(200, "the attachment");
    assert_eq!(r.headers["content-type"], "application/pdf");
    assert_eq!(r.headers["x-content-type-options"], "nosniff");
    assert_eq!(r.headers["content-security-policy"], "sandbox");
    assert_eq!(
        r.headers["content-disposition"],
        "attachment; filename*=UTF-8''invoice.pdf"
    );
    assert!(
        r.bytes == attachment,
        "the attachment differs from what was sent"
    );

    // The raw message as kept.
    let r = download(format!("{event_id}/raw")).await;
    r.expect_status(200, "the raw message");
    assert_eq!(r.headers["content-type"], "message/rfc822");
    assert!(
        r.bytes == stored,
        "the raw message differs from what was kept"
    );

    // A small download is bytes with `redirect=false` too: only a link answer is marked.
    let r = download(format!("{event_id}/attachments/{att_id}?redirect=false")).await;
    r.expect_status(200, "the attachment with redirect=false");
    assert!(r.bytes == attachment, "redirect=false changes no bytes");
    assert!(
        !r.headers.contains_key("agentaddress-download"),
        "bytes are not a link: {:?}",
        r.headers
    );
    download(format!("{event_id}/raw?redirect=no"))
        .await
        .expect_error(
            400,
            "invalid_request",
            "a redirect that is not true or false",
        );

    // Unknown attachment and event ids.
    download(format!("{event_id}/attachments/att_99"))
        .await
        .expect_error(404, "not_found", "an unknown attachment");
    download("evt_nope/raw".to_owned())
        .await
        .expect_error(404, "not_found", "an unknown event");

    // The sender delivers it again (it lost our answer): still one event, and replay finds it.
    if let Some(r) = door.deliver(c, &mail, true).await {
        r.expect_status(200, "deliver the mail again");
    } else {
        tokio::time::sleep(SETTLE).await;
    }
    let evs = feed(c, &a).await;
    assert_eq!(evs.len(), 1, "a retry makes no second event: {evs:?}");
    let r = replay(c, &a, &email_id).await;
    r.expect_status(200, "replay of a delivered message");
    assert_eq!(r.json["duplicate"], true, "{}", r.text);
    assert_eq!(r.json["event"]["id"], event_id.as_str());
    replay(c, &a, "eml_unknown").await.expect_error(
        404,
        "not_found",
        "replay of an unknown message",
    );

    // Deleting the address: downloads answer 410, and the kept message is gone.
    assert_eq!(kept.messages(&a.id).await, 1, "the message is kept");
    c.send("DELETE", &a.root, Some(&a.token), &[], None)
        .await
        .expect_status(204, "delete the address");
    for rest in [
        format!("{event_id}/attachments/{att_id}"),
        format!("{event_id}/raw"),
    ] {
        download(rest.clone())
            .await
            .expect_error(410, "address_gone", &rest);
    }
    // (On AWS the purge runs after the answer, from a queue.)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while kept.messages(&a.id).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "deleting the address did not remove its message within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Mail to it is refused for good.
    let later = Mail {
        id: unique("m2"),
        raw: message(&format!("{}@example.com", unique("m2-")), &email, b"x"),
        rcpts: vec![email.clone()],
    };
    if let Some(r) = door.deliver(c, &later, false).await {
        r.expect_status(200, "mail to a deleted address");
        assert_eq!(r.json["rejected"][0]["code"], "address_gone", "{}", r.text);
        assert_eq!(r.json["rejected"][0]["temporary"], false, "{}", r.text);
    }
}

/// One address never reads another's mail: its token is refused on the other's routes (401),
/// and the other's event ids are unknown under its own (404).
pub async fn one_address_never_reads_anothers_mail(c: &Client, door: &dyn Door) {
    let (a, b) = (c.new_address().await, c.new_address().await);
    let email = email_of(&a);
    let mail = Mail {
        id: unique("s"),
        raw: message(
            &format!("{}@example.com", unique("secret-")),
            &email,
            b"for a only",
        ),
        rcpts: vec![email],
    };
    if let Some(r) = door.deliver(c, &mail, false).await {
        r.expect_status(200, "deliver the mail");
    }
    let e = first_event(c, &a).await;
    let event_id = e["id"].as_str().unwrap_or_default();
    let att_id = e["data"]["attachments"][0]["id"]
        .as_str()
        .unwrap_or_default();
    for (address, token, status) in [
        (&a.id, &b.token, 401), // a's routes with b's token
        (&b.id, &b.token, 404), // a's event under b's address
    ] {
        for path in [
            format!("events/{event_id}/attachments/{att_id}"),
            format!("events/{event_id}/raw"),
        ] {
            let r = c
                .get(&format!("/api/v1/addresses/{address}/{path}"), Some(token))
                .await;
            assert_eq!(r.status, status, "{path} of {address}: {}", r.text);
        }
    }
    replay(c, &b, mail.id.as_str()).await.expect_error(
        404,
        "not_found",
        "replay of another address's message",
    );
}

/// What the webhook door refuses: a wrong or missing secret (401), no recipient (400), a message
/// over `max_email_bytes` (413), and per recipient an unknown one or another domain's
/// (`not_found`, 550 5.1.1) and a message with no header at all (`invalid_request`, 554 5.6.0);
/// the known recipient beside them still gets the message.
pub async fn webhook_refusals(c: &Client, secret: &str, max_email_bytes: usize) {
    let a = c.new_address().await;
    let email = email_of(&a);
    let domain = email.split_once('@').map(|(_, d)| d).unwrap_or_default();
    let small = message(&format!("{}@example.com", unique("r-")), &email, b"tiny");

    // The secret, compared whole.
    let wrong = "x".repeat(secret.len());
    ingest(c, &wrong, &[&email], &small).await.expect_error(
        401,
        "unauthorized",
        "a wrong secret of the same length",
    );
    c.send(
        "POST",
        &format!("/api/v1/email/inbound?rcpt={email}"),
        None,
        &[("content-type", "message/rfc822")],
        Some(small.clone()),
    )
    .await
    .expect_error(401, "unauthorized", "no secret at all");
    // Recipients are required.
    ingest(c, secret, &[], &small)
        .await
        .expect_error(400, "invalid_request", "no recipient");
    // Over the raw limit.
    let big = message("big@example.com", &email, &vec![7u8; max_email_bytes]);
    ingest(c, secret, &[&email], &big).await.expect_error(
        413,
        "payload_too_large",
        "a message over max_email_bytes",
    );
    assert!(feed(c, &a).await.is_empty(), "nothing refused was appended");

    // Unknown recipients and other domains are rejected one by one; the rest is delivered.
    let nobody = format!("nobody-{}@{domain}", unique(""));
    let r = ingest(
        c,
        secret,
        &[&email, &nobody, "someone@elsewhere.example"],
        &small,
    )
    .await;
    r.expect_status(200, "a message for three recipients");
    assert_eq!(r.json["accepted"], json!([email]), "{}", r.text);
    assert_eq!(r.json["rejected"][0]["rcpt"], nobody.as_str(), "{}", r.text);
    assert_eq!(r.json["rejected"][0]["code"], "not_found", "{}", r.text);
    assert!(
        r.json["rejected"][0]["smtp"]
            .as_str()
            .unwrap_or_default()
            .starts_with("550 5.1.1"),
        "{}",
        r.text
    );
    assert_eq!(r.json["rejected"][1]["code"], "not_found", "{}", r.text);
    assert_eq!(feed(c, &a).await.len(), 1, "the known recipient got it");

    // A message with no header at all is refused permanently.
    let r = ingest(c, secret, &[&email], b"\r\nno headers").await;
    r.expect_status(200, "a message without headers");
    assert_eq!(
        r.json["rejected"][0]["code"], "invalid_request",
        "{}",
        r.text
    );
    assert!(
        r.json["rejected"][0]["smtp"]
            .as_str()
            .unwrap_or_default()
            .starts_with("554 5.6.0"),
        "{}",
        r.text
    );
    assert_eq!(feed(c, &a).await.len(), 1, "nothing more was appended");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_value_keeps_its_plus() {
        assert_eq!(form_encode("A+b@x.example"), "A%2Bb@x.example");
        assert_eq!(form_encode("a b&c"), "a%20b%26c");
    }
}
