//! Sender rules on the SES path (docs/API.md §10, "Sender rules", "On AWS"): the `email`
//! function's handler (`email_message`) over DynamoDB Local and the S3 emulator, given S3's
//! notification of a message SES stored under `inbound/{id}`. A message the address's rules
//! refuse is dropped — nothing appended, the `inbound/` object removed, the notification done
//! (never retried) — and counted (`email.refused_count`); an allowed one is delivered.
//!
//! `scripts/test` starts the emulators, creates a fresh table and bucket with the project's
//! resource script and passes `AGENTADDRESS_TEST_TABLE` and `AGENTADDRESS_TEST_BUCKET` (the
//! endpoints come through the SDK's `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_S3`).
//! Without them these tests fail loudly: they never skip.

use agentaddress_api::ApiConfig;
use agentaddress_aws::{DynamoStore, EmailBucket, MAX_OBJECT_BYTES};
use agentaddress_core::domain::email_policy::EmailPolicy;
use agentaddress_core::domain::{ids, Clock, Limits, SystemClock};
use agentaddress_core::store::{prelude::*, AddressRecord, NewAddress};
use serde_json::json;

const DOMAIN: &str = "inbox.test";

fn env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: run scripts/test, which starts the emulators and creates a \
             fresh table and bucket"
        ),
    }
}

async fn store() -> DynamoStore {
    if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_err()
        && std::env::var("AWS_ENDPOINT_URL").is_err()
    {
        panic!("no DynamoDB endpoint: run scripts/test (it exports AWS_ENDPOINT_URL_DYNAMODB)");
    }
    let sdk = agentaddress_aws::sdk_config().await;
    DynamoStore::new(
        DynamoStore::client_from_env().await,
        env("AGENTADDRESS_TEST_TABLE"),
        30 * 86_400,
    )
    .with_email_bucket(EmailBucket::shared(&sdk, env("AGENTADDRESS_TEST_BUCKET")))
}

fn config() -> ApiConfig {
    ApiConfig {
        public_url: None,
        email_domain: DOMAIN.into(),
        limits: Limits::default(),
        email_ingest_secret_hash: None,
        poll_checks: Default::default(),
        max_waiting_polls: 0,
    }
}

async fn address(store: &DynamoStore, policy: serde_json::Value) -> String {
    let id = ids::new_address_id();
    store
        .create_address(NewAddress {
            id: id.clone(),
            name: None,
            task_id: None,
            email: format!("{id}@{DOMAIN}"),
            created_at: SystemClock.now(),
            expires_at: None,
            token_hash: ids::hash_secret("t"),
            inbox_hash: ids::hash_secret("i"),
            verification: None,
            email_policy: Some(EmailPolicy::from_json(&policy).expect("valid policy")),
            hooks: Vec::new(),
        })
        .await
        .expect("create");
    id
}

async fn record(store: &DynamoStore, id: &str) -> AddressRecord {
    store
        .get_address(id, SystemClock.now())
        .await
        .expect("get")
        .expect("exists")
}

/// A message as SES's S3 action stores it: SES's headers (envelope and verdicts) on top.
fn ses_stored(rcpt: &str, mail_from: &str, dmarc: &str, from: &str, n: &str) -> Vec<u8> {
    format!(
        "Return-Path: <{mail_from}>\r\n\
         Received: from mail.example.com (mail.example.com [192.0.2.1]) by \
         inbound-smtp.us-east-1.amazonaws.com with SMTP id {n} for {rcpt}; \
         Tue, 01 Dec 2026 10:00:00 +0000 (UTC)\r\n\
         Authentication-Results: amazonses.com; spf=pass smtp.mailfrom=example.com; \
         dkim=pass header.i=@example.com; dmarc={dmarc} header.from=example.com;\r\n\
         From: {from}\r\nTo: {rcpt}\r\nMessage-ID: <{n}@example.com>\r\nSubject: {n}\r\n\r\n\
         Hello from SES.\r\n"
    )
    .into_bytes()
}

/// A fresh SES message id (random: runs share the bucket).
fn ses_id(what: &str) -> String {
    format!("policy-{what}-{}", ids::new_address_id())
}

/// Puts `raw` where SES would, and hands the `email` function's handler S3's notification of
/// it; answers the handler's result (an `Err` makes the queue deliver it again).
async fn deliver(store: &DynamoStore, id: &str, raw: Vec<u8>) -> Result<(), String> {
    let bucket = env("AGENTADDRESS_TEST_BUCKET");
    let key = format!("inbound/{id}");
    let sdk = agentaddress_aws::sdk_config().await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    );
    s3.put_object()
        .bucket(&bucket)
        .key(&key)
        .body(raw.into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e:?}"));
    let notification = json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": bucket}, "object": {"key": key}}
    }]});
    agentaddress_functions::email_message(
        store,
        &config(),
        &notification.to_string(),
        SystemClock.now(),
    )
    .await
}

async fn inbound_exists(store: &DynamoStore, id: &str) -> bool {
    store
        .email_bucket()
        .expect("a bucket")
        .get(&format!("inbound/{id}"), MAX_OBJECT_BYTES)
        .await
        .expect("get")
        .is_some()
}

#[tokio::test]
async fn a_message_the_rules_refuse_is_dropped_counted_and_not_retried() {
    let store = store().await;
    let a = address(
        &store,
        json!({"allow": ["*@example.com"], "require_auth": "dmarc"}),
    )
    .await;
    let rcpt = format!("{a}@{DOMAIN}");

    // SES's DMARC verdict fails: refused by `require_auth`.
    let forged = ses_id("forged");
    let raw = ses_stored(
        &rcpt,
        "bounce@example.com",
        "fail",
        "Ada <ada@example.com>",
        &forged,
    );
    assert_eq!(
        deliver(&store, &forged, raw).await,
        Ok(()),
        "done, not retried"
    );
    assert!(!inbound_exists(&store, &forged).await, "dropped");
    // The envelope's sender is not allowed.
    let stranger = ses_id("stranger");
    let raw = ses_stored(
        &rcpt,
        "eve@evil.example",
        "pass",
        "Ada <ada@example.com>",
        &stranger,
    );
    assert_eq!(deliver(&store, &stranger, raw).await, Ok(()));
    assert!(!inbound_exists(&store, &stranger).await);
    // Delivered again (a redelivered notification): the object is gone, nothing happens.
    assert_eq!(
        deliver_notification_only(&store, &stranger).await,
        Ok(()),
        "a notification seen again is done"
    );

    let r = record(&store, &a).await;
    assert_eq!(
        (r.email_refused, r.last_sequence),
        (2, 0),
        "counted, nothing appended"
    );

    // An allowed, authenticated message is delivered.
    let genuine = ses_id("genuine");
    let raw = ses_stored(
        &rcpt,
        "bounce@example.com",
        "pass",
        "Ada <ada@example.com>",
        &genuine,
    );
    assert_eq!(deliver(&store, &genuine, raw).await, Ok(()));
    let r = record(&store, &a).await;
    assert_eq!((r.email_refused, r.last_sequence), (2, 1));
    let page = store
        .read_events(&a, 0, 10, 1 << 20, SystemClock.now())
        .await
        .expect("read");
    assert_eq!(page.events.len(), 1);
    assert!(
        page.events[0].data.contains(&genuine),
        "{}",
        page.events[0].data
    );
}

/// S3's notification of `inbound/{id}` alone (the object is not written again).
async fn deliver_notification_only(store: &DynamoStore, id: &str) -> Result<(), String> {
    let notification = json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": env("AGENTADDRESS_TEST_BUCKET")},
               "object": {"key": format!("inbound/{id}")}}
    }]});
    agentaddress_functions::email_message(
        store,
        &config(),
        &notification.to_string(),
        SystemClock.now(),
    )
    .await
}

#[tokio::test]
async fn concurrent_refusals_each_count() {
    let store = store().await;
    let a = address(&store, json!({"allow": ["ada@example.com"]})).await;
    let rcpt = format!("{a}@{DOMAIN}");
    let deliveries = (0..4).map(|i| {
        let id = ses_id(&format!("c{i}"));
        let raw = ses_stored(
            &rcpt,
            "eve@evil.example",
            "pass",
            "Eve <eve@evil.example>",
            &id,
        );
        let store = &store;
        async move { deliver(store, &id, raw).await }
    });
    for r in futures::future::join_all(deliveries).await {
        assert_eq!(r, Ok(()));
    }
    let r = record(&store, &a).await;
    assert_eq!((r.email_refused, r.last_sequence), (4, 0));
}
