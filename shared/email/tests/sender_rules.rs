//! Sender rules (docs/API.md §10, "Sender rules") in the one pipeline every door ends in
//! (`deliver_email`, and SES's `deliver_ses`), on the embedded store: a refused address gets
//! `550 5.7.1`, its refusal is counted once, nothing is appended to it, and the other
//! addresses of the same message are not affected; SES's refusal settles the message (it is
//! never retried).

use std::sync::Arc;

use agentaddress_core::domain::email_policy::{EmailPolicy, PolicyFailure};
use agentaddress_core::domain::{ids, Limits, Millis};
use agentaddress_core::store::{prelude::*, AddressRecord, NewAddress};
use agentaddress_email::{
    deliver_email, deliver_ses, AuthResults, AuthVerdict, Delivery, Inbound, Provider,
    ProviderOutcome, Rejection,
};
use agentaddress_sqlite::SqliteStore;
use serde_json::{json, Value};

const DOMAIN: &str = "inbox.test";
const T0: Millis = 1_800_000_000_000;

fn store() -> Arc<dyn Store> {
    Arc::new(SqliteStore::open_in_memory().expect("in-memory SQLite"))
}

async fn address(store: &dyn Store, policy: Option<Value>) -> String {
    let id = ids::new_address_id();
    store
        .create_address(NewAddress {
            id: id.clone(),
            name: None,
            task_id: None,
            email: format!("{id}@{DOMAIN}"),
            created_at: T0,
            expires_at: None,
            token_hash: ids::hash_secret("t"),
            inbox_hash: ids::hash_secret("i"),
            verification: None,
            email_policy: policy.map(|p| EmailPolicy::from_json(&p).expect("valid policy")),
            hooks: Vec::new(),
        })
        .await
        .expect("create");
    id
}

async fn record(store: &dyn Store, id: &str) -> AddressRecord {
    store
        .get_address(id, T0)
        .await
        .expect("get")
        .expect("exists")
}

fn message(from: &str, n: u32) -> Vec<u8> {
    format!(
        "From: {from}\r\nTo: someone@{DOMAIN}\r\nMessage-ID: <rules-{n}@example.com>\r\n\
         Subject: rules {n}\r\n\r\nThe body.\r\n"
    )
    .into_bytes()
}

async fn send(
    store: &dyn Store, raw: &[u8], mail_from: &str, rcpts: &[String], auth: AuthResults,
) -> Delivery {
    deliver_email(
        store,
        &Inbound {
            raw,
            mail_from,
            rcpt_to: rcpts,
            provider: Provider::Smtp,
            auth,
            email_id_hint: None,
        },
        DOMAIN,
        &Limits::default(),
        T0,
    )
    .await
}

fn rcpt(id: &str) -> String {
    format!("{id}@{DOMAIN}")
}

const PASS_ALL: AuthResults = AuthResults {
    spf: AuthVerdict::Pass,
    dkim: AuthVerdict::Pass,
    dmarc: AuthVerdict::Pass,
};

#[tokio::test]
async fn an_allowed_sender_is_delivered_and_others_are_refused_and_counted() {
    let store = store();
    let s = store.as_ref();
    let guarded = address(s, Some(json!({"allow": ["*@example.com"]}))).await;
    let open = address(s, None).await;

    let d = send(
        s,
        &message("Ada <ada@example.com>", 1),
        "bounce@example.com",
        &[rcpt(&guarded)],
        AuthResults::default(),
    )
    .await;
    assert_eq!(d.accepted.len(), 1, "{d:?}");

    // The envelope's sender refused: for the guarded address only; its two recipients count
    // once, and the message still reaches the open address.
    let rcpts = [
        rcpt(&guarded),
        format!("{guarded}+tag@{DOMAIN}"),
        rcpt(&open),
    ];
    let d = send(
        s,
        &message("Ada <ada@example.com>", 2),
        "eve@evil.example",
        &rcpts,
        AuthResults::default(),
    )
    .await;
    assert_eq!(d.accepted.len(), 1, "{d:?}");
    assert_eq!(d.accepted[0].address_id, open);
    assert_eq!(d.rejected.len(), 2, "{d:?}");
    for r in &d.rejected {
        assert_eq!(
            r.rejection,
            Rejection::SenderRefused(PolicyFailure::EnvelopeSender)
        );
        assert_eq!(
            r.rejection.smtp_reply().to_string(),
            "550 5.7.1 Sender not allowed by the recipient's sender rules"
        );
        assert!(!r.rejection.is_temporary());
        assert_eq!(r.rejection.code(), "invalid_request");
    }
    let g = record(s, &guarded).await;
    assert_eq!((g.email_refused, g.last_sequence), (1, 1));

    // An allowed envelope with an author that is not allowed: refused after parsing.
    let d = send(
        s,
        &message("Eve <eve@evil.example>", 3),
        "bounce@example.com",
        &[rcpt(&guarded)],
        AuthResults::default(),
    )
    .await;
    assert!(d.accepted.is_empty(), "{d:?}");
    assert_eq!(
        d.rejected[0].rejection,
        Rejection::SenderRefused(PolicyFailure::Author)
    );
    assert!(d.rejected[0]
        .rejection
        .smtp_reply()
        .to_string()
        .starts_with("550 5.7.1 "));
    // No single author (two mailboxes): nobody to match.
    let d = send(
        s,
        &message("ada@example.com, bob@example.com", 4),
        "bounce@example.com",
        &[rcpt(&guarded)],
        AuthResults::default(),
    )
    .await;
    assert_eq!(
        d.rejected.first().map(|r| r.rejection.clone()),
        Some(Rejection::SenderRefused(PolicyFailure::Author))
    );
    let g = record(s, &guarded).await;
    assert_eq!(
        (g.email_refused, g.last_sequence),
        (3, 1),
        "nothing appended"
    );
    assert_eq!(record(s, &open).await.email_refused, 0);
}

#[tokio::test]
async fn the_null_sender_is_judged_by_its_author() {
    let store = store();
    let s = store.as_ref();
    let a = address(s, Some(json!({"allow": ["*@example.com"]}))).await;
    let bounce = message("Mail Delivery System <mailer-daemon@example.com>", 1);
    let d = send(s, &bounce, "", &[rcpt(&a)], AuthResults::default()).await;
    assert_eq!(d.accepted.len(), 1, "{d:?}");
    let d = send(
        s,
        &message("mailer-daemon@relay.example.org", 2),
        "",
        &[rcpt(&a)],
        AuthResults::default(),
    )
    .await;
    assert_eq!(
        d.rejected.first().map(|r| r.rejection.clone()),
        Some(Rejection::SenderRefused(PolicyFailure::Author))
    );
    assert_eq!(record(s, &a).await.email_refused, 1);
}

#[tokio::test]
async fn required_authentication_fails_closed_without_verdicts() {
    let store = store();
    let s = store.as_ref();
    let dmarc = address(s, Some(json!({"require_auth": "dmarc"}))).await;
    let either = address(s, Some(json!({"require_auth": "spf_or_dkim"}))).await;
    let both = [rcpt(&dmarc), rcpt(&either)];
    let from = "Ada <ada@example.com>";

    // Nothing evaluated (the webhook door; SMTP without --smtp-check-auth): nothing passes.
    let d = send(
        s,
        &message(from, 1),
        "ada@example.com",
        &both,
        AuthResults::default(),
    )
    .await;
    assert!(d.accepted.is_empty(), "{d:?}");
    assert!(d
        .rejected
        .iter()
        .all(|r| r.rejection == Rejection::SenderRefused(PolicyFailure::Auth)));
    assert_eq!(
        d.rejected[0].rejection.smtp_reply().to_string(),
        "550 5.7.1 Message not authenticated as the recipient's sender rules require"
    );

    // SPF alone: enough for spf_or_dkim, not for dmarc.
    let spf = AuthResults {
        spf: AuthVerdict::Pass,
        ..AuthResults::default()
    };
    let d = send(s, &message(from, 2), "ada@example.com", &both, spf).await;
    assert_eq!(d.accepted.len(), 1, "{d:?}");
    assert_eq!(d.accepted[0].address_id, either);
    assert_eq!(d.rejected.len(), 1, "{d:?}");

    // DMARC pass with a single author: both.
    let d = send(s, &message(from, 3), "ada@example.com", &both, PASS_ALL).await;
    assert_eq!(d.accepted.len(), 2, "{d:?}");
    // A DMARC "pass" for a message without a single author is no pass.
    let d = send(
        s,
        &message("ada@example.com, bob@example.com", 4),
        "ada@example.com",
        &[rcpt(&dmarc)],
        PASS_ALL,
    )
    .await;
    assert!(d.accepted.is_empty(), "{d:?}");

    assert_eq!(record(s, &dmarc).await.email_refused, 3);
    assert_eq!(record(s, &either).await.email_refused, 1);
}

#[tokio::test]
async fn at_rcpt_refuses_what_the_envelope_already_shows() {
    let store = store();
    let s = store.as_ref();
    let allow = address(s, Some(json!({"allow": ["*@*.example.com"]}))).await;
    let auth = address(s, Some(json!({"require_auth": "dmarc"}))).await;
    let open = address(s, None).await;
    let (allow, auth, open) = (
        record(s, &allow).await,
        record(s, &auth).await,
        record(s, &open).await,
    );
    let at = Rejection::at_rcpt;
    assert_eq!(at(&allow, "ada@mail.example.com", false), None);
    assert_eq!(
        at(&allow, "ada@example.com", true),
        Some(Rejection::SenderRefused(PolicyFailure::EnvelopeSender))
    );
    assert_eq!(at(&allow, "", true), None, "the null sender");
    // Authentication required where none is evaluated: refused at once (fail closed).
    assert_eq!(
        at(&auth, "ada@example.com", false),
        Some(Rejection::SenderRefused(PolicyFailure::Auth))
    );
    assert_eq!(at(&auth, "ada@example.com", true), None);
    assert_eq!(at(&open, "eve@evil.example", false), None);
}

/// `message` as SES's S3 action stores it: SES's own headers on top, its verdicts as given.
fn ses_stored(rcpt: &str, mail_from: &str, verdicts: &str, message: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "Return-Path: <{mail_from}>\r\n\
         Received: from mail.example.com (mail.example.com [192.0.2.1]) by \
         inbound-smtp.eu-west-1.amazonaws.com with SMTP id ses1 for {rcpt}; \
         Tue, 01 Dec 2026 10:00:00 +0000 (UTC)\r\n\
         Authentication-Results: amazonses.com; {verdicts}\r\n"
    )
    .into_bytes();
    raw.extend_from_slice(message);
    raw
}

#[tokio::test]
async fn on_ses_a_refused_message_is_settled_counted_and_never_appended() {
    let store = store();
    let s = store.as_ref();
    let a = address(
        s,
        Some(json!({"allow": ["*@example.com"], "require_auth": "dmarc"})),
    )
    .await;
    let limits = Limits::default();
    let fail = "spf=fail smtp.mailfrom=example.com; dkim=none; dmarc=fail header.from=example.com;";
    let pass = "spf=pass smtp.mailfrom=example.com; dkim=pass header.i=@example.com; dmarc=pass header.from=example.com;";

    // A forged author: SES's DMARC says fail. Settled (the stored copy may go), not retried.
    let forged = ses_stored(
        &rcpt(&a),
        "bounce@example.com",
        fail,
        &message("ada@example.com", 1),
    );
    let outcome = deliver_ses(s, &forged, "ses-forged", DOMAIN, &limits, T0, None).await;
    let ProviderOutcome::Settled(d) = &outcome else {
        panic!("settled: {outcome:?}");
    };
    assert!(d.accepted.is_empty(), "{d:?}");
    assert_eq!(
        d.rejected[0].rejection,
        Rejection::SenderRefused(PolicyFailure::Auth)
    );
    assert_eq!(outcome.failure(DOMAIN), None, "never retried");
    // An envelope sender outside the rules.
    let other = ses_stored(
        &rcpt(&a),
        "eve@evil.example",
        pass,
        &message("ada@example.com", 2),
    );
    let outcome = deliver_ses(s, &other, "ses-other", DOMAIN, &limits, T0, None).await;
    assert!(
        matches!(&outcome, ProviderOutcome::Settled(d) if d.accepted.is_empty()),
        "{outcome:?}"
    );
    let r = record(s, &a).await;
    assert_eq!((r.email_refused, r.last_sequence), (2, 0));

    // Genuine: delivered.
    let genuine = ses_stored(
        &rcpt(&a),
        "bounce@example.com",
        pass,
        &message("Ada <ada@example.com>", 3),
    );
    let outcome = deliver_ses(s, &genuine, "ses-genuine", DOMAIN, &limits, T0, None).await;
    assert!(
        matches!(&outcome, ProviderOutcome::Settled(d) if d.accepted.len() == 1),
        "{outcome:?}"
    );
    let r = record(s, &a).await;
    assert_eq!((r.email_refused, r.last_sequence), (2, 1));
}
