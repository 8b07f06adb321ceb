//! The delivery pipeline (`deliver_email`) on the embedded store: recipients resolved and grouped,
//! one parse, one event per address committed with the raw message, each recipient's outcome.

use std::sync::Arc;

use agentaddress_core::domain::{ids, Limits, Millis};
use agentaddress_core::store::{prelude::*, NewAddress, StoreError};
use agentaddress_email::{
    deliver_email, resolve, AuthResults, Delivery, Inbound, Provider, Refusal, Rejection,
};
use agentaddress_sqlite::SqliteStore;
use serde_json::Value;

const DOMAIN: &str = "inbox.test";
const T0: Millis = 1_800_000_000_000;

fn store() -> Arc<dyn Store> {
    Arc::new(SqliteStore::open_in_memory().expect("in-memory SQLite"))
}

async fn address(store: &dyn Store, expires_at: Option<Millis>) -> String {
    let id = ids::new_address_id();
    store
        .create_address(NewAddress {
            id: id.clone(),
            name: None,
            task_id: None,
            email: format!("{id}@{DOMAIN}"),
            created_at: T0,
            expires_at,
            token_hash: ids::hash_secret("t"),
            inbox_hash: ids::hash_secret("i"),
            verification: None,
            email_policy: None,
            hooks: Vec::new(),
        })
        .await
        .expect("create");
    id
}

const RAW: &[u8] = b"From: Ada <Ada@Example.com>\r\nTo: someone@inbox.test\r\n\
Message-ID: <m1@example.com>\r\nSubject: hello\r\n\r\nThe body.\r\n";

async fn send(store: &dyn Store, raw: &[u8], rcpts: &[String], limits: &Limits) -> Delivery {
    deliver_email(
        store,
        &Inbound {
            raw,
            mail_from: "bounce@example.com",
            rcpt_to: rcpts,
            provider: Provider::Webhook,
            auth: AuthResults::default(),
            email_id_hint: None,
        },
        DOMAIN,
        limits,
        T0,
    )
    .await
}

async fn data_of(store: &dyn Store, id: &str, event_id: &str) -> Value {
    let event = store.get_event(id, event_id, T0).await.expect("event");
    serde_json::from_str(&event.data).expect("JSON")
}

#[tokio::test]
async fn one_event_per_address_with_only_its_own_recipients() {
    let store = store();
    let (a, b) = (
        address(store.as_ref(), None).await,
        address(store.as_ref(), None).await,
    );
    let rcpts = vec![
        format!("{}+Invoices@{}", a.to_uppercase(), DOMAIN.to_uppercase()),
        format!("<{b}@{DOMAIN}>"),
        format!("{a}@{DOMAIN}"),
    ];
    let d = send(store.as_ref(), RAW, &rcpts, &Limits::default()).await;
    assert!(d.rejected.is_empty(), "{:?}", d.rejected);
    assert_eq!(d.accepted.len(), 3);
    assert_eq!(d.accepted[0].address_id, a);
    assert_eq!(
        d.accepted[1].address_id, a,
        "both of a's recipients share one event"
    );
    assert_eq!(d.accepted[0].event, d.accepted[1].event);
    assert_eq!(d.accepted[2].address_id, b);
    assert_eq!(store.last_sequence(&a, T0).await, Ok(1));
    assert_eq!(store.last_sequence(&b, T0).await, Ok(1));

    let da = data_of(store.as_ref(), &a, &d.accepted[0].event.id).await;
    assert_eq!(da["tag"], "invoices");
    assert_eq!(
        da["envelope"]["rcpt_to"],
        serde_json::json!([rcpts[0], rcpts[2]]),
        "a sees its own recipients only"
    );
    assert_eq!(da["envelope"]["mail_from"], "bounce@example.com");
    assert_eq!(da["provider"], "webhook");
    assert_eq!(da["subject"], "hello");
    let db = data_of(store.as_ref(), &b, &d.accepted[2].event.id).await;
    assert_eq!(db["tag"], Value::Null);
    assert_eq!(db["envelope"]["rcpt_to"], serde_json::json!([rcpts[1]]));
    assert_eq!(da["email_id"], db["email_id"]);
    let event = store
        .get_event(&a, &d.accepted[0].event.id, T0)
        .await
        .expect("event");
    assert_eq!(event.event_type, "email.received");
    assert_eq!(event.source.as_deref(), Some("ada@example.com"));
    let stored = store
        .email_of_event(&b, &d.accepted[2].event.id, T0)
        .await
        .expect("stored");
    assert_eq!(stored.raw, RAW);
}

#[tokio::test]
async fn a_resent_message_is_one_event() {
    let store = store();
    let a = address(store.as_ref(), None).await;
    let rcpts = vec![format!("{a}@{DOMAIN}")];
    let first = send(store.as_ref(), RAW, &rcpts, &Limits::default()).await;
    // A relay prepends a Received header; the Message-ID and sender are the same.
    let mut again = b"Received: from relay.example.com\r\n".to_vec();
    again.extend_from_slice(RAW);
    let second = send(store.as_ref(), &again, &rcpts, &Limits::default()).await;
    assert!(!first.accepted[0].duplicate);
    assert!(second.accepted[0].duplicate);
    assert_eq!(first.accepted[0].event, second.accepted[0].event);
    assert_eq!(store.last_sequence(&a, T0).await, Ok(1));
}

#[tokio::test]
async fn each_recipient_gets_its_own_refusal() {
    let store = store();
    let live = address(store.as_ref(), None).await;
    let deleted = address(store.as_ref(), None).await;
    store.delete_address(&deleted, T0).await.expect("delete");
    let full = address(store.as_ref(), None).await;
    let limits = Limits {
        max_retained_events: 1,
        max_email_recipients: 4,
        ..Limits::default()
    };
    store
        .append_event(
            &full,
            agentaddress_core::store::NewEvent {
                event_type: "x".into(),
                source: None,
                ingress: agentaddress_core::domain::Ingress::Http,
                data: "{}".into(),
                http: None,
            },
            None,
            &limits,
            T0,
        )
        .await
        .expect("fill the feed");
    let rcpts = vec![
        format!("{live}@{DOMAIN}"),
        format!("nobody@{DOMAIN}"),
        format!("{live}@other.example"),
        format!("{deleted}@{DOMAIN}"),
        format!("{full}@{DOMAIN}"),
        "garbage".to_owned(),
    ];
    let d = send(store.as_ref(), RAW, &rcpts, &limits).await;
    assert_eq!(d.accepted.len(), 1);
    assert_eq!(d.accepted[0].rcpt, rcpts[0]);
    let why: Vec<(&str, &Rejection)> = d
        .rejected
        .iter()
        .map(|r| (r.rcpt.as_str(), &r.rejection))
        .collect();
    assert_eq!(
        why,
        vec![
            (rcpts[4].as_str(), &Rejection::TooManyRecipients),
            ("garbage", &Rejection::TooManyRecipients),
            (rcpts[1].as_str(), &Rejection::UnknownRecipient),
            (rcpts[2].as_str(), &Rejection::UnknownRecipient),
            (rcpts[3].as_str(), &Rejection::AddressGone),
        ]
    );
    let replies: Vec<String> = d
        .rejected
        .iter()
        .map(|r| r.rejection.smtp_reply().to_string())
        .collect();
    assert!(replies[0].starts_with("452 4.5.3"), "{replies:?}");
    assert!(replies[2].starts_with("550 5.1.1"), "{replies:?}");
    assert!(replies[4].starts_with("550 5.1.1"), "{replies:?}");
    assert!(d.rejected[0].rejection.is_temporary());
    assert!(!d.rejected[2].rejection.is_temporary());
    // The full feed, within the recipient limit: temporary, 452 4.2.2, nothing stored.
    let d = send(store.as_ref(), RAW, &[format!("{full}@{DOMAIN}")], &limits).await;
    assert_eq!(d.rejected[0].rejection, Rejection::FeedFull);
    assert_eq!(d.rejected[0].rejection.code(), "quota_exceeded");
    assert!(d.rejected[0]
        .rejection
        .smtp_reply()
        .to_string()
        .starts_with("452 4.2.2"));
    assert_eq!(store.last_sequence(&full, T0).await, Ok(1));
    // Resolving at RCPT time gives the same answers.
    assert!(resolve(store.as_ref(), &rcpts[0], DOMAIN, T0).await.is_ok());
    assert_eq!(
        resolve(store.as_ref(), &rcpts[3], DOMAIN, T0).await.err(),
        Some(Rejection::AddressGone)
    );
}

#[tokio::test]
async fn a_refused_message_reaches_no_one_and_stores_nothing() {
    let store = store();
    let a = address(store.as_ref(), None).await;
    let rcpts = vec![format!("{a}@{DOMAIN}")];
    let limits = Limits {
        max_email_bytes: 2_000,
        ..Limits::default()
    };
    let mut big = RAW.to_vec();
    big.extend(std::iter::repeat_n(b'x', 3_000));
    let d = send(store.as_ref(), &big, &rcpts, &limits).await;
    assert!(matches!(
        d.rejected[0].rejection,
        Rejection::Message(Refusal::TooLarge { .. })
    ));
    assert_eq!(d.rejected[0].rejection.code(), "payload_too_large");
    assert!(d.rejected[0]
        .rejection
        .smtp_reply()
        .to_string()
        .starts_with("552 5.3.4"));
    let d = send(store.as_ref(), b"\r\n\r\njust a body", &rcpts, &limits).await;
    assert!(matches!(d.rejected[0].rejection, Rejection::Message(_)));
    assert!(d.rejected[0]
        .rejection
        .smtp_reply()
        .to_string()
        .starts_with("554 5.6.0"));
    assert_eq!(store.last_sequence(&a, T0).await, Ok(0));
    // The stored-bytes cap: temporary.
    let limits = Limits {
        max_stored_email_bytes: RAW.len() as u64,
        ..Limits::default()
    };
    assert!(send(store.as_ref(), RAW, &rcpts, &limits)
        .await
        .rejected
        .is_empty());
    let other = RAW.replace_first(b"<m1@", b"<m2@");
    let d = send(store.as_ref(), &other, &rcpts, &limits).await;
    assert_eq!(d.rejected[0].rejection, Rejection::StorageFull);
    assert_eq!(
        store.email_by_id(&a, "eml_none", T0).await,
        Err(StoreError::NotFound)
    );
}

trait ReplaceFirst {
    fn replace_first(&self, from: &[u8], to: &[u8]) -> Vec<u8>;
}

impl ReplaceFirst for [u8] {
    fn replace_first(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = self
            .windows(from.len())
            .position(|w| w == from)
            .expect("pattern present");
        [&self[..at], to, &self[at + from.len()..]].concat()
    }
}

/// A request for a person that expired before a message arrived gets its `request.expired`
/// event first: the feed is in the order things happened (docs/API.md §12).
#[tokio::test]
async fn an_expired_request_comes_before_the_message_that_follows_it() {
    use agentaddress_core::domain::request::CommentMode;
    use agentaddress_core::store::NewRequest;
    let store = store();
    let a = address(store.as_ref(), None).await;
    store
        .create_request(
            &a,
            NewRequest {
                id: "req_expired_before_mail".into(),
                title: "Ship it?".into(),
                body: None,
                options: vec!["Yes".into(), "No".into()],
                comment: CommentMode::Optional,
                created_at: T0 - 120_000,
                expires_at: T0 - 60_000,
                secret_hash: ids::sha256_hex(b"secret"),
                claim: None,
            },
            &Limits::default(),
            T0 - 120_000,
        )
        .await
        .expect("create the request");
    let rcpts = vec![format!("{a}@{DOMAIN}")];
    let d = send(store.as_ref(), RAW, &rcpts, &Limits::default()).await;
    assert!(d.rejected.is_empty(), "{:?}", d.rejected);
    let page = store
        .read_events(&a, 0, 10, u64::MAX, T0)
        .await
        .expect("read");
    let types: Vec<&str> = page.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["request.expired", "email.received"]);
}
