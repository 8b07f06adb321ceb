//! The Store conformance cases of stored email (docs/API.md §10–§11): a raw message and its
//! `email.received` event commit together, idempotently on `email_id`, and the message follows
//! its event. A backend that stores email runs them with [`crate::store_email_conformance_tests!`]
//! (the embedded store does; DynamoDB's stored email is not built yet and answers
//! [`StoreError::NotSupported`]).

use serde_json::json;

use super::conformance::{new_address, T0};
use super::{NewEmail, NewEvent, Store, StoreError};
use crate::domain::{Ingress, Limits, Millis};

const SEC: Millis = 1_000;
const DAY: Millis = 86_400_000;
const MIB4: u64 = 4 * 1024 * 1024;

/// Generates one `#[tokio::test]` per stored-email case, as
/// [`crate::store_conformance_tests!`] does.
#[macro_export]
macro_rules! store_email_conformance_tests {
    ($make:expr) => {
        $crate::__email_conformance_cases!($make;
            email_commits_raw_message_and_event_together, email_is_idempotent_on_email_id,
            stored_email_bytes_are_capped, full_feed_refuses_email_and_stores_nothing,
            stored_email_follows_its_event, big_email_round_trips
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __email_conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $make;
                $crate::store::email_conformance::$case(store.as_ref()).await;
            }
        )*
    };
}

/// A message whose raw bytes are `raw` and whose event names `email_id`; also for a
/// backend's own tests.
pub fn email(email_id: &str, raw: Vec<u8>) -> NewEmail {
    NewEmail {
        email_id: email_id.into(),
        event: NewEvent {
            event_type: "email.received".into(),
            source: Some("ada@example.com".into()),
            ingress: Ingress::Email,
            data: json!({"email_id": email_id, "size": raw.len()}).to_string(),
            http: None,
        },
        raw,
    }
}

fn message(n: usize) -> Vec<u8> {
    format!("From: ada@example.com\r\nSubject: {n}\r\n\r\nbody {n}\r\n").into_bytes()
}

pub async fn email_commits_raw_message_and_event_together(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits::default();
    let raw = message(1);
    let appended = store
        .append_email(&a.id, email("eml_1", raw.clone()), &l, T0)
        .await
        .expect("append email");
    assert!(!appended.duplicate);
    assert_eq!(appended.event.sequence, 1);
    let event = store
        .get_event(&a.id, &appended.event.id, T0)
        .await
        .expect("the event is in the feed");
    assert_eq!(event.event_type, "email.received");
    assert_eq!(event.ingress, Ingress::Email);
    assert_eq!(event.source.as_deref(), Some("ada@example.com"));
    assert_eq!(event.http, None);
    let by_event = store
        .email_of_event(&a.id, &appended.event.id, T0)
        .await
        .expect("stored message by event");
    assert_eq!(by_event.raw, raw, "the raw message is stored byte for byte");
    assert_eq!(by_event.email_id, "eml_1");
    assert_eq!(by_event.event, appended.event);
    let by_id = store
        .email_by_id(&a.id, "eml_1", T0)
        .await
        .expect("stored message by email_id");
    assert_eq!(by_id, by_event);
    // Interleaved with a webhook delivery: one feed, one sequence.
    let other = store
        .append_event(
            &a.id,
            NewEvent {
                event_type: "webhook".into(),
                source: None,
                ingress: Ingress::Http,
                data: "{}".into(),
                http: None,
            },
            None,
            &l,
            T0,
        )
        .await
        .expect("append");
    assert_eq!(other.event.sequence, 2);
    assert_eq!(
        store.email_of_event(&a.id, &other.event.id, T0).await,
        Err(StoreError::EmailUnavailable),
        "an event that is not an email has no stored message"
    );
    assert_eq!(
        store.email_of_event(&a.id, "evt_nope", T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.email_by_id(&a.id, "eml_2", T0).await,
        Err(StoreError::NotFound)
    );
    // Another address sees none of it.
    let b = new_address(store, None).await;
    assert_eq!(
        store.email_of_event(&b.id, &appended.event.id, T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.email_by_id(&b.id, "eml_1", T0).await,
        Err(StoreError::NotFound)
    );
}

pub async fn email_is_idempotent_on_email_id(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits::default();
    let first = store
        .append_email(&a.id, email("eml_same", message(1)), &l, T0)
        .await
        .expect("first");
    // A retry (the client lost the 250): the same email_id, even with other bytes (relays add
    // headers), answers the first event and stores nothing.
    let again = store
        .append_email(&a.id, email("eml_same", message(2)), &l, T0 + SEC)
        .await
        .expect("retry");
    assert!(again.duplicate);
    assert_eq!(again.event, first.event);
    assert_eq!(store.last_sequence(&a.id, T0 + SEC).await, Ok(1));
    assert_eq!(
        store
            .email_by_id(&a.id, "eml_same", T0 + SEC)
            .await
            .expect("stored")
            .raw,
        message(1),
        "the first message is kept"
    );
    let other = store
        .append_email(&a.id, email("eml_other", message(3)), &l, T0 + SEC)
        .await
        .expect("another email");
    assert!(!other.duplicate);
    assert_eq!(other.event.sequence, 2);
    // The same email_id at another address is that address's own message.
    let b = new_address(store, None).await;
    let at_b = store
        .append_email(&b.id, email("eml_same", message(1)), &l, T0 + SEC)
        .await
        .expect("at b");
    assert!(!at_b.duplicate);
    assert_eq!(at_b.event.sequence, 1);
    // Once the first event is past retention, the same email_id is a new message.
    let later = T0 + l.retention_ms();
    let renewed = store
        .append_email(&a.id, email("eml_same", message(4)), &l, later)
        .await
        .expect("after retention");
    assert!(!renewed.duplicate);
    assert_eq!(renewed.event.sequence, 3);
    assert_eq!(
        store
            .email_by_id(&a.id, "eml_same", later)
            .await
            .expect("stored")
            .raw,
        message(4)
    );
}

pub async fn stored_email_bytes_are_capped(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits {
        max_stored_email_bytes: 1_000,
        ..Limits::default()
    };
    let big = vec![b'x'; 600];
    store
        .append_email(&a.id, email("eml_1", big.clone()), &l, T0)
        .await
        .expect("600 of 1000 bytes");
    assert_eq!(
        store
            .append_email(&a.id, email("eml_2", big.clone()), &l, T0 + SEC)
            .await,
        Err(StoreError::EmailStorageFull)
    );
    assert_eq!(
        store.last_sequence(&a.id, T0 + SEC).await,
        Ok(1),
        "nothing half-stored"
    );
    assert_eq!(
        store.email_by_id(&a.id, "eml_2", T0 + SEC).await,
        Err(StoreError::NotFound)
    );
    // A retry of a stored message is still answered (it needs no room).
    assert!(
        store
            .append_email(&a.id, email("eml_1", big.clone()), &l, T0 + SEC)
            .await
            .expect("retry")
            .duplicate
    );
    // 400 more bytes fit exactly.
    store
        .append_email(&a.id, email("eml_3", vec![b'y'; 400]), &l, T0 + SEC)
        .await
        .expect("exactly at the cap");
    // Retention frees room.
    let later = T0 + l.retention_ms();
    store
        .append_email(&a.id, email("eml_4", big), &l, later)
        .await
        .expect("room after retention");
}

pub async fn full_feed_refuses_email_and_stores_nothing(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits {
        max_retained_events: 2,
        ..Limits::default()
    };
    for n in 1..=2 {
        store
            .append_email(&a.id, email(&format!("eml_{n}"), message(n)), &l, T0)
            .await
            .expect("within the quota");
    }
    assert_eq!(
        store
            .append_email(&a.id, email("eml_3", message(3)), &l, T0)
            .await,
        Err(StoreError::QuotaExceeded)
    );
    assert_eq!(
        store.email_by_id(&a.id, "eml_3", T0).await,
        Err(StoreError::NotFound)
    );
    // A retry of a message already in the feed is answered even when it is full.
    assert!(
        store
            .append_email(&a.id, email("eml_2", message(2)), &l, T0)
            .await
            .expect("retry")
            .duplicate
    );
}

pub async fn stored_email_follows_its_event(store: &dyn Store) {
    let l = Limits::default();
    // Retention: the message goes with its event, before and after a sweep.
    let a = new_address(store, None).await;
    let first = store
        .append_email(&a.id, email("eml_1", message(1)), &l, T0)
        .await
        .expect("append");
    let second = store
        .append_email(&a.id, email("eml_2", message(2)), &l, T0 + DAY)
        .await
        .expect("append");
    let at = T0 + l.retention_ms();
    assert_eq!(
        store.email_of_event(&a.id, &first.event.id, at).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.email_by_id(&a.id, "eml_1", at).await,
        Err(StoreError::NotFound)
    );
    store.sweep(&l, at).await.expect("sweep");
    assert_eq!(
        store.email_by_id(&a.id, "eml_1", at).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store
            .email_of_event(&a.id, &second.event.id, at)
            .await
            .expect("the later message stays")
            .raw,
        message(2)
    );
    // Deletion: nothing is readable, and appending is refused.
    store.delete_address(&a.id, at).await.expect("delete");
    assert_eq!(
        store.email_of_event(&a.id, &second.event.id, at).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store.email_by_id(&a.id, "eml_2", at).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store
            .append_email(&a.id, email("eml_3", message(3)), &l, at)
            .await,
        Err(StoreError::AddressGone)
    );
    // Expiry: the address's messages go with it.
    let b = new_address(store, Some(T0 + DAY)).await;
    let e = store
        .append_email(&b.id, email("eml_1", message(1)), &l, T0)
        .await
        .expect("append");
    assert_eq!(
        store.email_of_event(&b.id, &e.event.id, T0 + DAY).await,
        Err(StoreError::AddressGone)
    );
    store.sweep(&l, T0 + DAY).await.expect("sweep");
    assert_eq!(
        store.email_by_id(&b.id, "eml_1", T0 + DAY).await,
        Err(StoreError::AddressGone)
    );
    // Unknown addresses.
    assert_eq!(
        store
            .append_email("nope", email("eml_1", message(1)), &l, T0)
            .await,
        Err(StoreError::AddressNotFound)
    );
}

pub async fn big_email_round_trips(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits::default();
    let raw: Vec<u8> = (0..MIB4 as usize + 12_345)
        .map(|n| (n % 251) as u8)
        .collect();
    let appended = store
        .append_email(&a.id, email("eml_big", raw.clone()), &l, T0)
        .await
        .expect("a 4 MiB message");
    let stored = store
        .email_of_event(&a.id, &appended.event.id, T0)
        .await
        .expect("read back");
    assert!(stored.raw == raw, "4 MiB of bytes round-trip exactly");
}
