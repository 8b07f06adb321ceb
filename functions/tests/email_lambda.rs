//! Inbound email on the Lambda stack (docs/API.md §10–§11, "On AWS"): the raw-MIME webhook door
//! served by the `email-api` function, and the SES path — a message put into the email bucket
//! under `inbound/{id}` as SES's S3 action does, notified by S3 to the email queue, delivered by
//! the `email` function (through `scripts/sqs-to-lambda.py`, the stand-in for Lambda's event
//! source mapping). Downloads read the object back from S3.
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL`,
//! `AGENTADDRESS_LAMBDA_BUCKET` and `AGENTADDRESS_TEST_INGEST_SECRET`; without them these tests
//! fail loudly, never skip.

use std::time::{Duration, Instant};

use agentaddress_blackbox::email::{self, BoxFuture, Door, Kept, Mail, WebhookDoor};
use agentaddress_blackbox::{Address, Client, Resp};
use serde_json::{json, Value};

use agentaddress_blackbox::stack_env as env;

use agentaddress_blackbox::stack_client as client;

/// The address's events after 0, waiting up to `wait` seconds for one.
async fn events(c: &Client, a: &Address, wait: u64) -> Vec<Value> {
    let r = c.events(a, &format!("after=0&wait={wait}")).await;
    r.expect_status(200, "events");
    r.json["events"].as_array().cloned().unwrap_or_default()
}

/// `GET {root}/events/{event_id}/{rest}` with `token`.
async fn download(c: &Client, a: &Address, event_id: &str, rest: &str, token: &str) -> Resp {
    c.get(&format!("{}/events/{event_id}/{rest}", a.root), Some(token))
        .await
}

/// `message` as SES's S3 action stores it: SES's own headers on top.
fn as_ses_stored(ses_id: &str, rcpt: &str, message: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "Return-Path: <bounces@example.com>\r\n\
         Received: from mail.example.com (mail.example.com [192.0.2.1]) by \
         inbound-smtp.eu-west-1.amazonaws.com with SMTP id {ses_id} for {rcpt}; \
         Tue, 01 Dec 2026 10:00:00 +0000 (UTC)\r\n\
         X-SES-Spam-Verdict: PASS\r\n\
         X-SES-Virus-Verdict: PASS\r\n\
         Authentication-Results: amazonses.com; spf=pass (spfCheck: domain of example.com \
         designates 192.0.2.1 as permitted sender) client-ip=192.0.2.1; \
         envelope-from=bounces@example.com; helo=mail.example.com; dkim=pass \
         header.i=@example.com; dmarc=pass header.from=example.com;\r\n"
    )
    .into_bytes();
    raw.extend_from_slice(message);
    raw
}

async fn s3() -> aws_sdk_s3::Client {
    let sdk = agentaddress_aws::sdk_config().await;
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    )
}

async fn put_inbound(ses_id: &str, raw: Vec<u8>) {
    s3().await
        .put_object()
        .bucket(env("AGENTADDRESS_LAMBDA_BUCKET"))
        .key(format!("inbound/{ses_id}"))
        .body(raw.into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("put inbound/{ses_id}: {e:?}"));
}

async fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&agentaddress_aws::sdk_config().await)
}

/// The bodies of the messages now in the email queue's dead-letter queue (left there).
async fn dead_letters() -> Vec<String> {
    let sqs = sqs().await;
    let dlq = format!("{}-dlq", env("AGENTADDRESS_LAMBDA_EMAIL_QUEUE"));
    let url = sqs
        .get_queue_url()
        .queue_name(&dlq)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the URL of {dlq}: {e:?}"))
        .queue_url
        .unwrap_or_default();
    let out = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap_or_else(|e| panic!("receive from {dlq}: {e:?}"));
    out.messages()
        .iter()
        .filter_map(|m| m.body().map(str::to_owned))
        .collect()
}

/// Invokes the `email` function as Lambda's event source mapping does, with one SQS message
/// whose body is S3's notification of `inbound/{ses_id}`; returns the function's answer.
async fn invoke_email(ses_id: &str, message_id: &str) -> Value {
    let notification = json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": env("AGENTADDRESS_LAMBDA_BUCKET")},
               "object": {"key": format!("inbound/{ses_id}")}}
    }]});
    let event = json!({"Records": [{
        "messageId": message_id, "receiptHandle": "h", "body": notification.to_string(),
        "attributes": {}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "awsRegion": "us-east-1"
    }]});
    let r = reqwest::Client::new()
        .post(format!(
            "{}/2015-03-31/functions/email/invocations",
            env("AGENTADDRESS_LAMBDA_URL")
        ))
        .json(&event)
        .send()
        .await
        .expect("invoke email");
    assert_eq!(r.status(), 200, "the email function answered");
    r.json().await.expect("email's answer")
}

/// The SES door: `mail` stored as SES's S3 action stores it, under `inbound/{mail.id}`; S3
/// notifies the email queue, and the email function delivers it. Delivering it again writes the
/// object again, as SES retrying would: S3 notifies again.
struct BucketDoor;

impl Door for BucketDoor {
    fn provider(&self) -> &'static str {
        "ses"
    }

    fn deliver<'a>(
        &'a self, _c: &'a Client, mail: &'a Mail, _again: bool,
    ) -> BoxFuture<'a, Option<Resp>> {
        Box::pin(async move {
            put_inbound(&mail.id, self.stored_bytes(mail)).await;
            None
        })
    }

    fn stored_bytes(&self, mail: &Mail) -> Vec<u8> {
        let rcpt = mail.rcpts.first().map(String::as_str).unwrap_or_default();
        as_ses_stored(&mail.id, rcpt, &mail.raw)
    }
}

/// The messages the stack keeps for an address: objects under `mail/{address_id}/`.
struct Objects;

impl Kept for Objects {
    fn messages<'a>(&'a self, address_id: &'a str) -> BoxFuture<'a, usize> {
        Box::pin(async move {
            let out = s3()
                .await
                .list_objects_v2()
                .bucket(env("AGENTADDRESS_LAMBDA_BUCKET"))
                .prefix(format!("mail/{address_id}/"))
                .send()
                .await
                .unwrap_or_else(|e| panic!("list mail/{address_id}/: {e:?}"));
            out.contents().len()
        })
    }
}

fn webhook() -> WebhookDoor {
    WebhookDoor {
        secret: env("AGENTADDRESS_TEST_INGEST_SECRET"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_the_webhook_door_mail_reaches_a_waiting_poll_and_every_byte_reads_back() {
    email::mail_reaches_a_waiting_poll_and_reads_back(&client(), &webhook(), &Objects).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn through_the_bucket_mail_reaches_a_waiting_poll_and_every_byte_reads_back() {
    email::mail_reaches_a_waiting_poll_and_reads_back(&client(), &BucketDoor, &Objects).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_never_reads_anothers_mail_through_either_door() {
    let c = client();
    email::one_address_never_reads_anothers_mail(&c, &webhook()).await;
    email::one_address_never_reads_anothers_mail(&c, &BucketDoor).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_webhook_door_on_lambda_refuses_what_it_must() {
    // The stack runs with the default limit.
    email::webhook_refusals(
        &client(),
        &env("AGENTADDRESS_TEST_INGEST_SECRET"),
        10_000_000,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_ses_writes_to_the_bucket_reaches_the_feed_once() {
    let c = client();
    let a = c.new_address().await;
    let email = email::email_of(&a);
    let ses_id = email::unique("lambda");
    let tagged = email.replace('@', "+orders@");
    let raw = as_ses_stored(
        &ses_id,
        &tagged,
        &email::message("ses-1@example.com", &email, b"%PDF-1.4 tiny"),
    );
    put_inbound(&ses_id, raw.clone()).await;
    // How soon is the benchmarks' business (docs/PERFORMANCE.md); here it is printed.
    let (evs, took) = email::events_within(&c, &a, 0, email::MAIL_DEADLINE).await;
    assert_eq!(evs.len(), 1, "one event (waited {took:?}): {evs:?}");
    let e = &evs[0];
    assert_eq!(
        e["data"]["email_id"],
        ses_id.as_str(),
        "SES's message id is the email_id"
    );
    assert_eq!(e["data"]["provider"], "ses");
    assert_eq!(e["data"]["tag"], "orders");
    assert_eq!(
        e["data"]["auth"],
        json!({"spf": "pass", "dkim": "pass", "dmarc": "pass"})
    );
    assert_eq!(e["data"]["envelope"]["mail_from"], "bounces@example.com");
    println!("SES path: event in the feed {took:?} after the object was written");

    // The same object notified again (SES retrying, S3 redelivering): still one event.
    put_inbound(&ses_id, raw.clone()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        events(&c, &a, 0).await.len(),
        1,
        "a redelivery makes no second event"
    );
    let event_id = e["id"].as_str().unwrap_or_default();
    let r = download(&c, &a, event_id, "raw", &a.token).await;
    r.expect_status(200, "raw");
    assert_eq!(r.bytes, raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_message_appends_nothing_and_replay_delivers_it_once_fixed() {
    let c = client();
    let a = c.new_address().await;
    let email = email::email_of(&a);
    let ses_id = email::unique("lambda");
    // Multiparts nested 40 deep: too complex, refused for good (554 5.6.0).
    let mut nested = format!("From: a@example.com\r\nTo: {email}\r\nMIME-Version: 1.0\r\n");
    for depth in 0..40 {
        nested.push_str(&format!(
            "Content-Type: multipart/mixed; boundary=\"d{depth}\"\r\n\r\n--d{depth}\r\n"
        ));
    }
    nested.push_str("Content-Type: text/plain\r\n\r\ndeep\r\n");
    put_inbound(&ses_id, as_ses_stored(&ses_id, &email, nested.as_bytes())).await;
    // Five receives later (the test stack's email queue hides a message 5 s), its notification
    // is in the dead-letter queue.
    let start = Instant::now();
    // (The notification names the key URL-encoded: `inbound%2F…` on the emulator.)
    while !dead_letters()
        .await
        .iter()
        .any(|body| body.contains(&ses_id))
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the refused message's notification never reached the dead-letter queue"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "refused message: in the dead-letter queue after {:?}",
        start.elapsed()
    );
    assert!(events(&c, &a, 0).await.is_empty(), "nothing appended");
    email::replay(&c, &a, &ses_id)
        .await
        .expect_status(400, "a refused message stays refused");
    // Sender rules set since it came refuse it first, and the answer says so (docs/API.md §11).
    let policy = format!("{}/email/policy", a.root);
    c.json(
        "PUT",
        &policy,
        Some(&a.token),
        &serde_json::json!({"allow": ["someone@elsewhere.example"]}),
    )
    .await
    .expect_status(200, "sender rules");
    let r = email::replay(&c, &a, &ses_id).await;
    r.expect_error(
        400,
        "invalid_request",
        "a replay refused by the sender rules",
    );
    assert!(r.text.contains("sender rules"), "{}", r.text);
    c.send("DELETE", &policy, Some(&a.token), &[], None)
        .await
        .expect_status(204, "sender rules removed");
    assert!(events(&c, &a, 0).await.is_empty(), "nothing appended");

    // Fixed by an operator (the object rewritten whole), then replayed by the address.
    let fixed = as_ses_stored(
        &ses_id,
        &email,
        &email::message("ses-2@example.com", &email, b"x"),
    );
    put_inbound(&ses_id, fixed).await;
    let r = email::replay(&c, &a, &ses_id).await;
    // The notification of the rewrite may have delivered it first: then replay finds it.
    assert!(matches!(r.status, 200 | 201), "{}: {}", r.status, r.text);
    let evs = events(&c, &a, 0).await;
    assert_eq!(evs.len(), 1, "one event: {evs:?}");
    assert_eq!(r.json["event"]["id"], evs[0]["id"]);
    email::replay(&c, &a, &ses_id)
        .await
        .expect_status(200, "a second replay finds the event");
    let stranger = c.new_address().await;
    email::replay(&c, &stranger, &ses_id)
        .await
        .expect_status(404, "not addressed to it");
}

/// The function dies after appending and before the queue hears of its success: the queue
/// delivers the notification again, maybe to several instances at once. However many times and
/// however concurrently, one event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_notification_delivered_again_and_concurrently_makes_one_event() {
    let c = client();
    let a = c.new_address().await;
    let email = email::email_of(&a);
    let ses_id = email::unique("lambda");
    let raw = as_ses_stored(
        &ses_id,
        &email,
        &email::message("again@example.com", &email, b"y"),
    );
    put_inbound(&ses_id, raw).await;
    // The queue's own delivery (through the bridge) and four more, two at a time.
    for round in 0..2 {
        let (ma, mb) = (format!("m{round}a"), format!("m{round}b"));
        let (x, y) = tokio::join!(invoke_email(&ses_id, &ma), invoke_email(&ses_id, &mb));
        for answer in [x, y] {
            assert_eq!(
                answer["batchItemFailures"],
                json!([]),
                "a delivery seen again succeeds: {answer}"
            );
        }
    }
    email::events_within(&c, &a, 0, email::MAIL_DEADLINE).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let evs = events(&c, &a, 0).await;
    assert_eq!(evs.len(), 1, "one event: {evs:?}");
    assert_eq!(evs[0]["data"]["email_id"], ses_id.as_str());
}

/// Lambda answers at most 6 MB: a download over 4 MiB is a `303 See Other` to a short-lived
/// link (docs/API.md §11) that serves the same bytes, with the same content type and
/// disposition, without the token; a client following redirects (which drops the token on the
/// way to another host) just gets the bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_download_too_large_for_lambda_is_a_link_that_needs_no_token() {
    let c = client();
    let a = c.new_address().await;
    let email = email::email_of(&a);
    let ses_id = email::unique("lambda");
    let pdf: Vec<u8> = (0..5_000_000u32).map(|n| (n % 253) as u8).collect();
    let message = email::message(&format!("{ses_id}@example.com"), &email, &pdf);
    let raw = as_ses_stored(&ses_id, &email, &message);
    put_inbound(&ses_id, raw.clone()).await;
    // 10 MB through the emulators on a loaded test machine may take a while.
    let (evs, _) = email::events_within(&c, &a, 0, email::MAIL_DEADLINE).await;
    assert_eq!(evs.len(), 1, "the large message's event: {evs:?}");
    let event_id = evs[0]["id"].as_str().unwrap_or_default();
    let att = evs[0]["data"]["attachments"][0]["id"]
        .as_str()
        .unwrap_or_default();

    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    for (rest, expected, content_type) in [
        (format!("attachments/{att}"), &pdf, "application/pdf"),
        ("raw".to_owned(), &raw, "message/rfc822"),
    ] {
        let r = no_redirects
            .get(format!("{}/events/{event_id}/{rest}", a.root))
            .bearer_auth(&a.token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {rest}: {e}"));
        assert_eq!(r.status(), 303, "{rest}");
        assert_eq!(r.headers()["cache-control"], "private, no-store", "{rest}");
        assert_eq!(r.headers()["referrer-policy"], "no-referrer", "{rest}");
        let link = r.headers()["location"]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            !link.contains(&a.token),
            "the link does not carry the token"
        );
        let r = reqwest::get(&link)
            .await
            .unwrap_or_else(|e| panic!("GET the link of {rest}: {e}"));
        assert_eq!(r.status(), 200, "{rest} through its link");
        assert_eq!(r.headers()["content-type"], content_type, "{rest}");
        assert!(
            r.headers()["content-disposition"]
                .to_str()
                .unwrap_or_default()
                .starts_with("attachment; filename*=UTF-8''"),
            "{rest}: {:?}",
            r.headers()
        );
        let bytes = r
            .bytes()
            .await
            .unwrap_or_else(|e| panic!("read {rest}: {e}"));
        assert!(
            bytes.as_ref() == expected.as_slice(),
            "{rest}: the bytes differ"
        );
    }
    let r = download(&c, &a, event_id, "raw", &a.token).await;
    r.expect_status(200, "the raw message, following the redirect");
    assert!(r.bytes == raw, "the followed download differs");

    // redirect=false: the link as JSON, marked by a header a stored file cannot set.
    let r = no_redirects
        .get(format!("{}/events/{event_id}/raw?redirect=false", a.root))
        .bearer_auth(&a.token)
        .send()
        .await
        .expect("GET raw?redirect=false");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["agentaddress-download"], "link");
    assert_eq!(r.headers()["cache-control"], "private, no-store");
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    let view: serde_json::Value = r.json().await.expect("the link's JSON");
    let expires = view["expires_at"].as_str().unwrap_or_default();
    assert!(expires.ends_with('Z') && expires.len() == 24, "{view}");
    let link = view["url"].as_str().unwrap_or_default();
    let r = reqwest::get(link).await.expect("GET the JSON's link");
    assert_eq!(r.status(), 200, "{view}");
    let bytes = r.bytes().await.expect("read");
    assert!(
        bytes.as_ref() == raw.as_slice(),
        "the JSON's link serves the message"
    );
    for bad in ["maybe", "", "FALSE"] {
        let r = c
            .get(
                &format!("{}/events/{event_id}/raw?redirect={bad}", a.root),
                Some(&a.token),
            )
            .await;
        r.expect_error(
            400,
            "invalid_request",
            "a redirect that is not true or false",
        );
    }

    // The inbox page saves it through that link, in a real browser.
    agentaddress_browser::scenarios::attachment_is_saved(&c, &a, "lambda", &pdf, true).await;
}
