//! Outbound email on the Lambda stack (docs/API.md §16): the `outbound` function records
//! contacts and sends over DynamoDB and mails the code through SES; the `send` function, fed
//! by the send queue (through `scripts/sqs-to-lambda.py`), delivers each send through SES. The
//! emulator's SES keeps every message it was given (`/moto-api/data.json`): the tests read the
//! code there and check each message's headers and body. The person's reply comes back through
//! the SES door (a message put into the email bucket, as SES's S3 action does).
//!
//! `scripts/test` starts the stack (its sender is `Agents <mail@agents.localhost>`, a verified
//! identity of the emulator) and passes `AGENTADDRESS_LAMBDA_URL` and
//! `AGENTADDRESS_LAMBDA_BUCKET`; without them these tests fail loudly, never skip.

use std::time::{Duration, Instant};

use agentaddress_blackbox::{Address, Client, Resp};
use serde_json::{json, Value};

use agentaddress_blackbox::stack_env as env;

use agentaddress_blackbox::stack_client as client;

fn moto_url() -> String {
    std::env::var("AWS_ENDPOINT_URL_SES")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_SQS"))
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|_| panic!("no emulator endpoint: run scripts/test"))
}

/// The raw messages the emulator's SES was given for `to`.
async fn sent_to(to: &str) -> Vec<String> {
    let data: Value = reqwest::get(format!("{}/moto-api/data.json", moto_url()))
        .await
        .expect("moto data")
        .json()
        .await
        .expect("moto data JSON");
    data["ses"]["RawMessage"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| {
            m["destinations"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d == to))
        })
        .filter_map(|m| m["raw_data"].as_str().map(str::to_owned))
        .collect()
}

/// The `n`-th message SES was given for `to` (waits up to 25 s for it).
async fn nth_sent_to(to: &str, n: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let sent = sent_to(to).await;
        if sent.len() > n {
            return sent[n].clone();
        }
        assert!(
            Instant::now() < deadline,
            "SES was given {} messages for {to}, not {}",
            sent.len(),
            n + 1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A header of a raw message, unfolded (a long one is folded onto continuation lines).
fn header(raw: &str, name: &str) -> Option<String> {
    let head = raw.split("\r\n\r\n").next().unwrap_or("");
    let unfolded = head.replace("\r\n ", " ").replace("\r\n\t", " ");
    unfolded.split("\r\n").find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

fn code_in(raw: &str) -> String {
    let at = raw
        .find("code: ")
        .unwrap_or_else(|| panic!("no code in {raw}"));
    raw[at + 6..].chars().take(6).collect()
}

async fn post(c: &Client, a: &Address, path: &str, key: Option<&str>, body: Value) -> Resp {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(k) = key {
        headers.push(("idempotency-key", k));
    }
    c.send(
        "POST",
        &format!("{}{path}", a.root),
        Some(&a.token),
        &headers,
        Some(serde_json::to_vec(&body).unwrap_or_default()),
    )
    .await
}

async fn events(c: &Client, a: &Address) -> Vec<Value> {
    let r = c.events(a, "after=0").await;
    r.expect_status(200, "events");
    r.json["events"].as_array().cloned().unwrap_or_default()
}

async fn wait_for(c: &Client, a: &Address, event_type: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let found: Vec<Value> = events(c, a)
            .await
            .into_iter()
            .filter(|e| e["type"] == event_type)
            .collect();
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{} {event_type} events, not {n}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn put_inbound(ses_id: &str, raw: Vec<u8>) {
    let sdk = agentaddress_aws::sdk_config().await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    );
    s3.put_object()
        .bucket(env("AGENTADDRESS_LAMBDA_BUCKET"))
        .key(format!("inbound/{ses_id}"))
        .body(raw.into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("put inbound/{ses_id}: {e:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contacts_sends_and_replies_go_through_ses() {
    let c = client();
    let a = c
        .create_address(&json!({"task_id": "outbound-lambda"}))
        .await;
    let email = a.created["address"]["email"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // A recipient of this test alone.
    let person = format!(
        "ada-{}@people.test",
        a.id.to_ascii_lowercase().replace('_', "-")
    );

    let r = c
        .get(&format!("{}/email/contacts", a.root), Some(&a.token))
        .await;
    r.expect_status(200, "contacts");
    assert_eq!(r.json, json!({"contacts": [], "outbound_configured": true}));

    // The code mail, as SES was given it.
    let r = post(&c, &a, "/email/contacts", None, json!({"email": person})).await;
    r.expect_status(202, "add a contact");
    let mail = nth_sent_to(&person, 0).await;
    assert_eq!(
        header(&mail, "From"),
        Some("Agents <mail@agents.localhost>".to_owned())
    );
    assert_eq!(header(&mail, "Reply-To"), Some(email.clone()));
    let code = code_in(&mail);
    let wrong = format!("{:06}", (code.parse::<u32>().unwrap_or(0) + 1) % 1_000_000);
    post(
        &c,
        &a,
        "/email/contacts",
        None,
        json!({"email": person, "code": wrong}),
    )
    .await
    .expect_error(422, "invalid_code", "a wrong code");
    let r = post(
        &c,
        &a,
        "/email/contacts",
        None,
        json!({"email": person, "code": code}),
    )
    .await;
    r.expect_status(200, "confirm");
    assert_eq!(r.json["contact"]["status"], "confirmed");

    // Refusals, before anything is recorded.
    post(
        &c,
        &a,
        "/email/send",
        Some("x"),
        json!({"to": "eve@people.test", "subject": "Hi", "text": "x"}),
    )
    .await
    .expect_error(403, "contact_not_confirmed", "a stranger");
    post(
        &c,
        &a,
        "/email/send",
        Some("x"),
        json!({"to": person, "subject": "Hi\r\nBcc: eve@evil.test", "text": "x"}),
    )
    .await
    .expect_error(400, "invalid_request", "CRLF in the subject");

    // A send: recorded, queued, delivered by the send function through SES.
    let body = json!({"to": person, "subject": "Deploy?", "text": "Shall I deploy v2?"});
    let r = post(&c, &a, "/email/send", Some("deploy-1"), body.clone()).await;
    r.expect_status(202, "send");
    let event_id = r.json["event"]["id"].clone();
    let again = post(&c, &a, "/email/send", Some("deploy-1"), body).await;
    again.expect_status(200, "the same key again");
    assert_eq!(again.json["duplicate"], true);
    let sent = wait_for(&c, &a, "email.sent", 1).await[0].clone();
    assert_eq!(sent["id"], event_id);
    let message_id = sent["data"]["message_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mail = nth_sent_to(&person, 1).await;
    assert_eq!(header(&mail, "Message-ID"), Some(message_id.clone()));
    assert_eq!(header(&mail, "Subject"), Some("Deploy?".to_owned()));
    assert_eq!(header(&mail, "To"), Some(person.clone()));
    assert_eq!(header(&mail, "Reply-To"), Some(email.clone()));
    assert!(mail.contains("Shall I deploy v2?"), "{mail}");

    // The reply comes back through the SES door, threaded to the send.
    let ses_id = format!("reply{}", a.id.to_ascii_lowercase().replace(['_', '-'], ""));
    let reply = format!(
        "From: {person}\r\nTo: {email}\r\nSubject: Re: Deploy?\r\nMessage-ID: <reply-{ses_id}@people.test>\r\n\
         In-Reply-To: {message_id}\r\nReferences: {message_id}\r\nDate: Tue, 01 Dec 2026 10:00:00 +0000\r\n\r\nYes.\r\n"
    );
    put_inbound(&ses_id, reply.into_bytes()).await;
    let received = wait_for(&c, &a, "email.received", 1).await[0].clone();
    assert_eq!(received["data"]["in_reply_to"], message_id.as_str());

    // Answering the reply threads the mail.
    let r = post(
        &c,
        &a,
        "/email/send",
        Some("deploy-2"),
        json!({"to": person, "subject": "Deploying", "text": "On it.",
                        "reply_to_event_id": received["id"]}),
    )
    .await;
    r.expect_status(202, "a reply");
    let mail = nth_sent_to(&person, 2).await;
    let parent = format!("<reply-{ses_id}@people.test>");
    assert_eq!(header(&mail, "Subject"), Some("Re: Deploying".to_owned()));
    assert_eq!(header(&mail, "In-Reply-To"), Some(parent.clone()));
    assert_eq!(
        header(&mail, "References"),
        Some(format!("{message_id} {parent}"))
    );
    // Nothing was sent twice.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(sent_to(&person).await.len(), 3);
}
