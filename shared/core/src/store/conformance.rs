//! The Store conformance suite: one set of behaviours every backend must show.
//!
//! Each case is a public `async fn(&dyn Store)` that panics on a violation. A backend's tests
//! run them all with [`crate::store_conformance_tests!`], giving it an expression that builds a
//! fresh store (`Arc<dyn Store>`, possibly `async`). Cases use their own addresses and explicit
//! times, so they never depend on the wall clock or on each other.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{AddressRecord, EventRef, IdempotencyClaim, NewAddress, NewEvent, Store, StoreError};
use crate::domain::verification::VerificationConfig;
use crate::domain::{ids, Ingress, Limits, Millis};

mod email_policy;
pub use email_policy::*;
mod filtered;
pub use filtered::*;
mod wait_slots;
pub use wait_slots::*;

/// A fixed start time for every case: 2027-01-15T08:00:00Z.
pub const T0: Millis = 1_800_000_000_000;
const SEC: Millis = 1_000;
const DAY: Millis = 86_400_000;
const MIB4: u64 = 4 * 1024 * 1024;

/// Generates one `#[tokio::test]` per conformance case. `$make` is an expression whose value
/// (awaited if it is a future) is an `Arc<dyn Store>`; it runs once per case.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::__conformance_cases!($make;
            create_and_get_address, append_assigns_gapless_sequences, pages_are_cut_at_limit_and_bytes,
            idempotency_returns_the_original_event, quota_counts_only_retained_events,
            events_expire_after_retention, ack_is_idempotent, state_put_get_list_and_cas,
            state_delete, state_limits, full_feed_rejects_state_writes, delete_address_hides_everything,
            expired_address_is_gone, sweep_removes_expired_data_and_old_tombstones,
            rate_limit_windows, concurrent_appends_are_gapless, concurrent_cas_has_one_winner,
            feed_signal_wakes_on_commit, failed_operations_leave_no_trace, big_events_round_trip,
            address_is_found_by_email_in_any_case, email_keys_are_unique,
            tombstones_are_found_by_email_until_forgotten, verification_is_stored_rotated_and_removed,
            filtered_reads_return_matches_and_pass_the_others, filtered_reads_examine_a_bounded_range,
            filtered_pages_are_cut_at_limit_and_bytes, email_policy_is_stored_replaced_and_removed,
            email_refusals_are_counted, wait_slots_are_capped_handed_back_and_free_themselves
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $make;
                $crate::store::conformance::$case(store.as_ref()).await;
            }
        )*
    };
}

fn limits() -> Limits {
    Limits::default()
}

/// A new address of `store` (email `{id}@inbox.test`), read back; also for a backend's own
/// tests.
pub async fn new_address(store: &dyn Store, expires_at: Option<Millis>) -> AddressRecord {
    let id = ids::new_address_id();
    let a = NewAddress {
        id: id.clone(),
        name: Some("conformance".into()),
        task_id: Some("task-1".into()),
        email: format!("{id}@inbox.test"),
        created_at: T0,
        expires_at,
        token_hash: ids::hash_secret("token"),
        inbox_hash: ids::hash_secret("inbox"),
        verification: None,
        email_policy: None,
        hooks: Vec::new(),
    };
    store.create_address(a).await.expect("create address");
    store
        .get_address(&id, T0)
        .await
        .expect("get address")
        .expect("address exists")
}

fn event(n: usize) -> NewEvent {
    NewEvent {
        event_type: "test.event".into(),
        source: Some("conformance".into()),
        ingress: Ingress::Http,
        data: json!({"n": n}).to_string(),
        http: Some(json!({"content_type": "application/json", "headers": {}}).to_string()),
    }
}

fn claim(key: &str, body: &str) -> Option<IdempotencyClaim> {
    Some(IdempotencyClaim {
        key_hash: ids::sha256_hex(key.as_bytes()),
        body_hash: ids::sha256_hex(body.as_bytes()),
    })
}

async fn append(store: &dyn Store, id: &str, n: usize, now: Millis) -> EventRef {
    store
        .append_event(id, event(n), None, &limits(), now)
        .await
        .expect("append")
        .event
}

fn parse(json_text: &str) -> Value {
    serde_json::from_str(json_text).expect("stored text is JSON")
}

pub async fn create_and_get_address(store: &dyn Store) {
    let a = new_address(store, Some(T0 + DAY)).await;
    assert!(ids::is_valid_id(&a.id));
    assert_eq!(a.name.as_deref(), Some("conformance"));
    assert_eq!(a.task_id.as_deref(), Some("task-1"));
    assert_eq!(a.created_at, T0);
    assert_eq!(a.expires_at, Some(T0 + DAY));
    assert_eq!(a.deleted_at, None);
    assert_eq!((a.last_sequence, a.state_keys, a.state_bytes), (0, 0, 0));
    assert!(ids::verify_secret("token", &a.token_hash));
    assert!(ids::verify_secret("inbox", &a.inbox_hash));
    assert!(!a.is_gone(T0));
    let again = NewAddress {
        id: a.id.clone(),
        name: None,
        task_id: None,
        email: a.email.clone(),
        created_at: T0,
        expires_at: None,
        token_hash: ids::hash_secret("other"),
        inbox_hash: ids::hash_secret("other"),
        verification: None,
        email_policy: None,
        hooks: Vec::new(),
    };
    assert_eq!(
        store.create_address(again).await,
        Err(StoreError::AddressExists)
    );
    let still = store
        .get_address(&a.id, T0)
        .await
        .expect("get")
        .expect("exists");
    assert!(ids::verify_secret("token", &still.token_hash));
    assert_eq!(
        store.get_address("addr_unknown", T0).await.expect("get"),
        None
    );
    let u = store.usage(&a.id, &limits(), T0).await.expect("usage");
    assert_eq!((u.last_sequence, u.retained_events), (0, 0));
}

pub async fn append_assigns_gapless_sequences(store: &dyn Store) {
    let a = new_address(store, None).await;
    let mut seen = BTreeSet::new();
    for n in 1..=5 {
        let e = append(store, &a.id, n, T0 + n as i64).await;
        assert_eq!(e.sequence, n as u64);
        assert_eq!(ids::event_sequence(&e.id), Some(e.sequence));
        assert!(seen.insert(e.id));
    }
    let page = store
        .read_events(&a.id, 0, 100, MIB4, T0 + 10)
        .await
        .expect("read");
    assert!(!page.has_more);
    let seqs: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    let first = &page.events[0];
    assert_eq!(first.event_type, "test.event");
    assert_eq!(first.source.as_deref(), Some("conformance"));
    assert_eq!(first.ingress, Ingress::Http);
    assert_eq!(first.received_at, T0 + 1);
    assert_eq!(first.acknowledged_at, None);
    assert_eq!(parse(&first.data), json!({"n": 1}));
    assert_eq!(
        parse(first.http.as_deref().expect("http record"))["content_type"],
        "application/json"
    );
    let page = store
        .read_events(&a.id, 3, 100, MIB4, T0 + 10)
        .await
        .expect("read");
    let seqs: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, vec![4, 5]);
    let page = store
        .read_events(&a.id, 5, 100, MIB4, T0 + 10)
        .await
        .expect("read");
    assert!(page.events.is_empty() && !page.has_more);
    assert_eq!(store.last_sequence(&a.id, T0 + 10).await, Ok(5));
    let got = store
        .get_event(
            &a.id,
            &seen.iter().next().cloned().unwrap_or_default(),
            T0 + 10,
        )
        .await
        .expect("get event");
    assert!(got.sequence >= 1);
    let usage = store.usage(&a.id, &limits(), T0 + 10).await.expect("usage");
    assert_eq!((usage.last_sequence, usage.retained_events), (5, 5));
}

pub async fn pages_are_cut_at_limit_and_bytes(store: &dyn Store) {
    let a = new_address(store, None).await;
    let big = "x".repeat(1000);
    for n in 0..4 {
        let mut e = event(n);
        e.data = json!({"n": n, "pad": big}).to_string();
        store
            .append_event(&a.id, e, None, &limits(), T0)
            .await
            .expect("append");
    }
    let page = store
        .read_events(&a.id, 0, 2, MIB4, T0)
        .await
        .expect("read");
    assert_eq!(page.events.len(), 2);
    assert!(page.has_more);
    let page = store
        .read_events(&a.id, 2, 2, MIB4, T0)
        .await
        .expect("read");
    assert_eq!(page.events.len(), 2);
    assert!(!page.has_more);
    let one = page.events[0].page_bytes();
    let page = store
        .read_events(&a.id, 0, 100, one * 2 + one / 2, T0)
        .await
        .expect("read");
    assert_eq!(page.events.len(), 2);
    assert!(page.has_more);
    let page = store.read_events(&a.id, 0, 100, 1, T0).await.expect("read");
    assert_eq!(
        page.events.len(),
        1,
        "a page always holds one available event"
    );
    assert!(page.has_more);
}

pub async fn idempotency_returns_the_original_event(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    let first = store
        .append_event(&a.id, event(1), claim("k1", "body"), &l, T0)
        .await
        .expect("first");
    assert!(!first.duplicate);
    let again = store
        .append_event(&a.id, event(1), claim("k1", "body"), &l, T0 + SEC)
        .await
        .expect("again");
    assert!(again.duplicate);
    assert_eq!(again.event, first.event);
    assert_eq!(
        store
            .append_event(&a.id, event(2), claim("k1", "other body"), &l, T0 + SEC)
            .await,
        Err(StoreError::IdempotencyKeyReused)
    );
    let other = store
        .append_event(&a.id, event(2), claim("k2", "body"), &l, T0 + SEC)
        .await
        .expect("other key");
    assert_eq!(other.event.sequence, 2);
    assert_eq!(store.last_sequence(&a.id, T0 + SEC).await, Ok(2));
    let later = T0 + l.retention_ms() + SEC;
    let after_expiry = store
        .append_event(&a.id, event(3), claim("k1", "body"), &l, later)
        .await
        .expect("after the event expired the key is forgotten");
    assert!(!after_expiry.duplicate);
    assert_eq!(after_expiry.event.sequence, 3);
}

pub async fn quota_counts_only_retained_events(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits {
        max_retained_events: 3,
        ..limits()
    };
    let mut refs = Vec::new();
    for n in 0..3 {
        let r = store
            .append_event(
                &a.id,
                event(n),
                claim(&format!("k{n}"), "b"),
                &l,
                T0 + n as i64 * SEC,
            )
            .await
            .expect("append within quota");
        refs.push(r.event);
    }
    assert_eq!(
        store
            .append_event(&a.id, event(9), None, &l, T0 + 5 * SEC)
            .await,
        Err(StoreError::QuotaExceeded)
    );
    let dup = store
        .append_event(&a.id, event(0), claim("k0", "b"), &l, T0 + 5 * SEC)
        .await
        .expect("a duplicate is answered even when the feed is full");
    assert!(dup.duplicate);
    assert_eq!(dup.event, refs[0]);
    let usage = store.usage(&a.id, &l, T0 + 5 * SEC).await.expect("usage");
    assert_eq!(usage.retained_events, 3);
    let first_expired = T0 + l.retention_ms();
    let e = store
        .append_event(&a.id, event(4), None, &l, first_expired)
        .await
        .expect("the oldest event expired, so one fits");
    assert_eq!(e.event.sequence, 4);
    let usage = store.usage(&a.id, &l, first_expired).await.expect("usage");
    assert_eq!(usage.retained_events, 3);
    assert_eq!(
        store
            .append_event(&a.id, event(5), None, &l, first_expired)
            .await,
        Err(StoreError::QuotaExceeded)
    );
}

pub async fn events_expire_after_retention(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    let e1 = append(store, &a.id, 1, T0).await;
    let e2 = append(store, &a.id, 2, T0 + DAY).await;
    let just_before = T0 + l.retention_ms() - 1;
    let page = store
        .read_events(&a.id, 0, 100, MIB4, just_before)
        .await
        .expect("read");
    assert_eq!(page.events.len(), 2);
    let at = T0 + l.retention_ms();
    let page = store
        .read_events(&a.id, 0, 100, MIB4, at)
        .await
        .expect("read");
    let seqs: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, vec![2], "an expired event is never returned");
    assert_eq!(
        store.get_event(&a.id, &e1.id, at).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.ack_event(&a.id, &e1.id, at).await,
        Err(StoreError::NotFound)
    );
    assert!(store.get_event(&a.id, &e2.id, at).await.is_ok());
    assert_eq!(store.last_sequence(&a.id, at).await, Ok(2));
    let usage = store.usage(&a.id, &l, at).await.expect("usage");
    assert_eq!(usage.retained_events, 1);
}

pub async fn ack_is_idempotent(store: &dyn Store) {
    let a = new_address(store, None).await;
    let e = append(store, &a.id, 1, T0).await;
    let first = store.ack_event(&a.id, &e.id, T0 + SEC).await.expect("ack");
    assert_eq!(first.event, e);
    assert_eq!(first.acknowledged_at, T0 + SEC);
    let second = store
        .ack_event(&a.id, &e.id, T0 + 5 * SEC)
        .await
        .expect("ack again");
    assert_eq!(
        second.acknowledged_at,
        T0 + SEC,
        "the first ack time is kept"
    );
    let got = store
        .get_event(&a.id, &e.id, T0 + 6 * SEC)
        .await
        .expect("get");
    assert_eq!(got.acknowledged_at, Some(T0 + SEC));
    let page = store
        .read_events(&a.id, 0, 10, MIB4, T0 + 6 * SEC)
        .await
        .expect("read");
    assert_eq!(page.events.len(), 1, "acking never hides an event");
    assert_eq!(page.events[0].acknowledged_at, Some(T0 + SEC));
    let forged = ids::new_event_id(1);
    assert_eq!(
        store.ack_event(&a.id, &forged, T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.ack_event(&a.id, &ids::new_event_id(99), T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.ack_event(&a.id, "evt_nope", T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.get_event(&a.id, &forged, T0).await,
        Err(StoreError::NotFound)
    );
    let b = new_address(store, None).await;
    assert_eq!(
        store.get_event(&b.id, &e.id, T0).await,
        Err(StoreError::NotFound),
        "events belong to their address"
    );
}

pub async fn state_put_get_list_and_cas(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    let w = store
        .put_state(&a.id, "counter", "1".into(), Some(0), &l, T0)
        .await
        .expect("create only");
    assert_eq!(w.entry.revision, 1);
    assert_eq!(w.event.sequence, 1);
    assert_eq!(w.entry.value, "1");
    assert_eq!(w.entry.updated_at, T0);
    assert_eq!(
        store
            .put_state(&a.id, "counter", "2".into(), Some(0), &l, T0)
            .await,
        Err(StoreError::RevisionConflict { current: Some(1) })
    );
    assert_eq!(
        store
            .put_state(&a.id, "counter", "2".into(), Some(7), &l, T0)
            .await,
        Err(StoreError::RevisionConflict { current: Some(1) })
    );
    assert_eq!(
        store
            .put_state(&a.id, "absent", "2".into(), Some(3), &l, T0)
            .await,
        Err(StoreError::RevisionConflict { current: None })
    );
    append(store, &a.id, 0, T0).await;
    let w2 = store
        .put_state(&a.id, "counter", "{\"n\":2}".into(), Some(1), &l, T0 + SEC)
        .await
        .expect("cas");
    assert_eq!(w2.entry.revision, 3, "revision is the event's sequence");
    let w3 = store
        .put_state(&a.id, "b.key", "[true]".into(), None, &l, T0 + 2 * SEC)
        .await
        .expect("unconditional");
    assert_eq!(w3.entry.revision, 4);
    let got = store
        .get_state(&a.id, "counter", T0 + 3 * SEC)
        .await
        .expect("get");
    assert_eq!(got.value, "{\"n\":2}");
    assert_eq!(got.revision, 3);
    assert_eq!(got.updated_at, T0 + SEC);
    assert_eq!(
        store.get_state(&a.id, "missing", T0).await,
        Err(StoreError::NotFound)
    );
    let list = store.list_state(&a.id, T0 + 3 * SEC).await.expect("list");
    let keys: Vec<&str> = list.keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, vec!["b.key", "counter"]);
    assert_eq!(list.keys[1].size, 7 + 7 + 64);
    assert_eq!(list.keys[0].size, 5 + 6 + 64);
    assert_eq!(list.state_keys, 2);
    assert_eq!(list.state_bytes, (7 + 7 + 64) + (5 + 6 + 64));
    let page = store
        .read_events(&a.id, 0, 100, MIB4, T0 + 3 * SEC)
        .await
        .expect("read");
    let updates: Vec<&super::Event> = page
        .events
        .iter()
        .filter(|e| e.event_type == "state.updated")
        .collect();
    assert_eq!(updates.len(), 3);
    for e in &updates {
        assert_eq!(e.ingress, Ingress::State);
        assert_eq!(e.source.as_deref(), Some("state"));
        assert_eq!(e.http, None);
        assert_eq!(parse(&e.data)["revision"], json!(e.sequence));
    }
    assert_eq!(
        parse(&updates[1].data),
        json!({"key": "counter", "revision": 3, "value": {"n": 2}})
    );
    let usage = store.usage(&a.id, &l, T0 + 3 * SEC).await.expect("usage");
    assert_eq!((usage.state_keys, usage.state_bytes), (2, list.state_bytes));
}

pub async fn state_delete(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    assert_eq!(
        store.delete_state(&a.id, "k", None, &l, T0).await,
        Err(StoreError::NotFound)
    );
    store
        .put_state(&a.id, "k", "\"v\"".into(), None, &l, T0)
        .await
        .expect("put");
    store
        .put_state(&a.id, "other", "1".into(), None, &l, T0)
        .await
        .expect("put");
    assert_eq!(
        store.delete_state(&a.id, "k", Some(5), &l, T0).await,
        Err(StoreError::RevisionConflict { current: Some(1) })
    );
    let d = store
        .delete_state(&a.id, "k", Some(1), &l, T0 + SEC)
        .await
        .expect("delete");
    assert_eq!(d.key, "k");
    assert_eq!(d.revision, 3);
    assert_eq!(d.event.sequence, 3);
    assert_eq!(
        store.get_state(&a.id, "k", T0 + SEC).await,
        Err(StoreError::NotFound)
    );
    let list = store.list_state(&a.id, T0 + SEC).await.expect("list");
    assert_eq!(list.state_keys, 1);
    assert_eq!(list.state_bytes, 5 + 1 + 64);
    let e = store
        .get_event(&a.id, &d.event.id, T0 + SEC)
        .await
        .expect("event");
    assert_eq!(e.event_type, "state.deleted");
    assert_eq!(parse(&e.data), json!({"key": "k", "revision": 3}));
    let d2 = store
        .delete_state(&a.id, "other", None, &l, T0 + SEC)
        .await
        .expect("unconditional delete");
    assert_eq!(d2.revision, 4);
    let list = store.list_state(&a.id, T0 + SEC).await.expect("list");
    assert_eq!((list.state_keys, list.state_bytes), (0, 0));
    assert!(list.keys.is_empty());
}

pub async fn state_limits(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits {
        max_state_keys: 2,
        max_state_bytes: 300,
        ..limits()
    };
    store
        .put_state(&a.id, "a", "1".into(), None, &l, T0)
        .await
        .expect("first key");
    store
        .put_state(&a.id, "b", "1".into(), None, &l, T0)
        .await
        .expect("second key");
    assert_eq!(
        store.put_state(&a.id, "c", "1".into(), None, &l, T0).await,
        Err(StoreError::StateLimitExceeded)
    );
    let big = format!("\"{}\"", "x".repeat(200));
    assert_eq!(
        store.put_state(&a.id, "a", big.clone(), None, &l, T0).await,
        Err(StoreError::StateLimitExceeded),
        "66 + 1 + 202 + 64 > 300"
    );
    let fits = format!("\"{}\"", "x".repeat(100));
    store
        .put_state(&a.id, "a", fits, None, &l, T0)
        .await
        .expect("1 + 102 + 64 + 66 = 233 fits");
    store
        .put_state(&a.id, "a", "2".into(), None, &l, T0)
        .await
        .expect("shrinking is always allowed");
    let list = store.list_state(&a.id, T0).await.expect("list");
    assert_eq!((list.state_keys, list.state_bytes), (2, 132));
    assert_eq!(store.last_sequence(&a.id, T0).await, Ok(4));
    store
        .delete_state(&a.id, "b", None, &l, T0)
        .await
        .expect("delete frees a key");
    store
        .put_state(&a.id, "c", "1".into(), None, &l, T0)
        .await
        .expect("now it fits");
}

pub async fn full_feed_rejects_state_writes(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = Limits {
        max_retained_events: 2,
        ..limits()
    };
    store
        .put_state(&a.id, "k", "1".into(), None, &l, T0)
        .await
        .expect("put");
    store
        .append_event(&a.id, event(1), None, &l, T0)
        .await
        .expect("append");
    assert_eq!(
        store
            .put_state(&a.id, "k", "2".into(), Some(1), &l, T0)
            .await,
        Err(StoreError::QuotaExceeded)
    );
    assert_eq!(
        store.delete_state(&a.id, "k", None, &l, T0).await,
        Err(StoreError::QuotaExceeded)
    );
    let got = store.get_state(&a.id, "k", T0).await.expect("unchanged");
    assert_eq!((got.value.as_str(), got.revision), ("1", 1));
    assert_eq!(store.last_sequence(&a.id, T0).await, Ok(2));
}

pub async fn delete_address_hides_everything(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    let e = append(store, &a.id, 1, T0).await;
    store
        .put_state(&a.id, "k", "1".into(), None, &l, T0)
        .await
        .expect("put");
    store.delete_address(&a.id, T0 + SEC).await.expect("delete");
    let tomb = store
        .get_address(&a.id, T0)
        .await
        .expect("get")
        .expect("a tombstone remains");
    assert_eq!(tomb.deleted_at, Some(T0 + SEC));
    assert!(tomb.is_gone(T0 + SEC));
    assert!(ids::verify_secret("token", &tomb.token_hash));
    let now = T0 + 2 * SEC;
    let gone = Err(StoreError::AddressGone);
    assert_eq!(
        store.read_events(&a.id, 0, 10, MIB4, now).await.map(|_| ()),
        gone
    );
    assert_eq!(store.get_event(&a.id, &e.id, now).await.map(|_| ()), gone);
    assert_eq!(store.ack_event(&a.id, &e.id, now).await.map(|_| ()), gone);
    assert_eq!(store.last_sequence(&a.id, now).await.map(|_| ()), gone);
    assert_eq!(store.list_state(&a.id, now).await.map(|_| ()), gone);
    assert_eq!(store.get_state(&a.id, "k", now).await.map(|_| ()), gone);
    assert_eq!(
        store
            .put_state(&a.id, "k", "2".into(), None, &l, now)
            .await
            .map(|_| ()),
        gone
    );
    assert_eq!(
        store
            .delete_state(&a.id, "k", None, &l, now)
            .await
            .map(|_| ()),
        gone
    );
    assert_eq!(
        store
            .append_event(&a.id, event(2), None, &l, now)
            .await
            .map(|_| ()),
        gone
    );
    assert_eq!(store.usage(&a.id, &l, now).await.map(|_| ()), gone);
    assert_eq!(store.delete_address(&a.id, now).await, gone);
    assert_eq!(
        store.delete_address("addr_never_was", now).await,
        Err(StoreError::AddressNotFound)
    );
    assert_eq!(
        store
            .read_events("addr_never_was", 0, 10, MIB4, now)
            .await
            .map(|_| ()),
        Err(StoreError::AddressNotFound)
    );
}

pub async fn expired_address_is_gone(store: &dyn Store) {
    let expires = T0 + 60 * SEC;
    let a = new_address(store, Some(expires)).await;
    let l = limits();
    let e = append(store, &a.id, 1, T0).await;
    let stored = store.get_event(&a.id, &e.id, T0).await.expect("event");
    assert_eq!(stored.sequence, 1);
    store
        .put_state(&a.id, "k", "1".into(), None, &l, expires - 1)
        .await
        .expect("still alive a millisecond before");
    assert_eq!(
        store
            .read_events(&a.id, 0, 10, MIB4, expires)
            .await
            .map(|_| ()),
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store
            .append_event(&a.id, event(2), None, &l, expires)
            .await
            .map(|_| ()),
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store.get_state(&a.id, "k", expires).await.map(|_| ()),
        Err(StoreError::AddressGone)
    );
    let rec = store
        .get_address(&a.id, T0)
        .await
        .expect("get")
        .expect("record");
    assert!(rec.is_gone(expires) && !rec.is_gone(expires - 1));
}

pub async fn sweep_removes_expired_data_and_old_tombstones(store: &dyn Store) {
    // Retention 10 days; tombstones kept the default 30 days.
    let l = Limits {
        event_retention_seconds: 10 * 86_400,
        ..limits()
    };
    let kept = new_address(store, None).await;
    let deleted = new_address(store, None).await;
    let expiring = new_address(store, Some(T0 + DAY)).await;
    for (id, n, at) in [
        (&kept.id, 1, T0),
        (&kept.id, 2, T0 + 2 * DAY),
        (&expiring.id, 1, T0),
    ] {
        store
            .append_event(id, event(n), None, &l, at)
            .await
            .expect("append");
    }
    store.delete_address(&deleted.id, T0).await.expect("delete");
    let now = T0 + 11 * DAY;
    store.sweep(&l, now).await.expect("sweep");
    let page = store
        .read_events(&kept.id, 0, 10, MIB4, now)
        .await
        .expect("read");
    let seqs: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, vec![2]);
    assert_eq!(store.last_sequence(&kept.id, now).await, Ok(2));
    assert!(store
        .get_address(&deleted.id, now)
        .await
        .expect("get")
        .is_some());
    assert!(store
        .get_address(&expiring.id, now)
        .await
        .expect("get")
        .is_some());
    let later = T0 + DAY + l.tombstone_ms() + SEC;
    store.sweep(&l, later).await.expect("sweep");
    assert_eq!(
        store.get_address(&deleted.id, later).await.expect("get"),
        None
    );
    assert_eq!(
        store.get_address(&expiring.id, later).await.expect("get"),
        None
    );
    assert!(store
        .get_address(&kept.id, later)
        .await
        .expect("get")
        .is_some());
    let e = store
        .append_event(&kept.id, event(3), None, &l, later)
        .await
        .expect("append");
    assert_eq!(e.event.sequence, 3, "sequences never restart after a sweep");
}

pub async fn rate_limit_windows(store: &dyn Store) {
    let scope = format!("test:{}", ids::new_address_id());
    let other = format!("test:{}", ids::new_address_id());
    let minute_start = (T0 / 60_000 + 1) * 60_000;
    for _ in 0..3 {
        assert_eq!(
            store
                .hit_rate_limit(&scope, 3, minute_start + 10 * SEC)
                .await,
            Ok(None)
        );
    }
    assert_eq!(
        store
            .hit_rate_limit(&scope, 3, minute_start + 10 * SEC)
            .await,
        Ok(Some(50))
    );
    assert_eq!(
        store.hit_rate_limit(&scope, 3, minute_start + 59_500).await,
        Ok(Some(1))
    );
    assert_eq!(
        store
            .hit_rate_limit(&other, 3, minute_start + 10 * SEC)
            .await,
        Ok(None),
        "scopes are independent"
    );
    assert_eq!(
        store
            .hit_rate_limit(&scope, 3, minute_start + 60 * SEC)
            .await,
        Ok(None),
        "a new window starts afresh"
    );
}

pub async fn concurrent_appends_are_gapless(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    let n = 40;
    let futures = (0..n).map(|i| store.append_event(&a.id, event(i), None, &l, T0));
    let results = futures::future::join_all(futures).await;
    let mut seqs: Vec<u64> = results
        .into_iter()
        .map(|r| r.expect("append").event.sequence)
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=n as u64).collect::<Vec<_>>());
    let page = store
        .read_events(&a.id, 0, 100, MIB4, T0)
        .await
        .expect("read");
    assert_eq!(page.events.len(), n);
}

pub async fn concurrent_cas_has_one_winner(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    let w = store
        .put_state(&a.id, "k", "0".into(), Some(0), &l, T0)
        .await
        .expect("put");
    let futures =
        (0..16).map(|i| store.put_state(&a.id, "k", i.to_string(), Some(w.entry.revision), &l, T0));
    let results = futures::future::join_all(futures).await;
    let winners = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(winners, 1);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(e, &StoreError::RevisionConflict { current: Some(2) });
        }
    }
    assert_eq!(store.last_sequence(&a.id, T0).await, Ok(2));
}

pub async fn feed_signal_wakes_on_commit(store: &dyn Store) {
    let Some(signal) = store.feed_signal() else {
        return;
    };
    let a = new_address(store, None).await;
    let mut rx = signal.subscribe(&a.id);
    let e = append(store, &a.id, 1, T0).await;
    tokio::time::timeout(std::time::Duration::from_secs(5), rx.changed())
        .await
        .expect("woken within 5 s")
        .expect("sender alive");
    assert_eq!(*rx.borrow(), e.sequence);
}

pub async fn failed_operations_leave_no_trace(store: &dyn Store) {
    let a = new_address(store, None).await;
    let l = limits();
    store
        .put_state(&a.id, "k", "1".into(), None, &l, T0)
        .await
        .expect("put");
    let _ = store
        .put_state(&a.id, "k", "2".into(), Some(9), &l, T0)
        .await;
    let _ = store.delete_state(&a.id, "k", Some(9), &l, T0).await;
    let _ = store.delete_state(&a.id, "nope", None, &l, T0).await;
    let tight = Limits {
        max_state_keys: 1,
        ..limits()
    };
    let _ = store
        .put_state(&a.id, "k2", "1".into(), None, &tight, T0)
        .await;
    assert_eq!(store.last_sequence(&a.id, T0).await, Ok(1));
    let page = store
        .read_events(&a.id, 0, 10, MIB4, T0)
        .await
        .expect("read");
    assert_eq!(page.events.len(), 1);
    let list = store.list_state(&a.id, T0).await.expect("list");
    assert_eq!((list.state_keys, list.state_bytes), (1, 1 + 1 + 64));
    let e = append(store, &a.id, 2, T0).await;
    assert_eq!(e.sequence, 2);
}

pub async fn big_events_round_trip(store: &dyn Store) {
    let a = new_address(store, None).await;
    let text: String = (0..1_000_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let data = json!({"content_type": "text/plain", "text": text}).to_string();
    let mut e = event(0);
    e.data = data.clone();
    let r = store
        .append_event(&a.id, e, None, &limits(), T0)
        .await
        .expect("append 1 MB");
    let got = store.get_event(&a.id, &r.event.id, T0).await.expect("get");
    assert_eq!(got.data, data, "stored and read back byte-identical");
    let page = store
        .read_events(&a.id, 0, 10, MIB4, T0)
        .await
        .expect("read");
    assert_eq!(page.events[0].data.len(), data.len());
}

/// Keeps `Arc` in the public surface used by the macro's callers.
pub type SharedStore = Arc<dyn Store>;

/// `id` with the case of every ASCII letter swapped: another id with the same email key.
fn swap_case(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

pub async fn address_is_found_by_email_in_any_case(store: &dyn Store) {
    let a = new_address(store, None).await;
    for written in [
        a.email.clone(),
        a.email.to_uppercase(),
        a.email.to_lowercase(),
        swap_case(&a.email),
    ] {
        let found = store.address_by_email(&written, T0).await.expect("lookup");
        assert_eq!(found.as_ref(), Some(&a), "{written}");
    }
    for unknown in [
        "addr_never_was@inbox.test".to_owned(),
        format!("{}@other.test", a.id),
        format!("x{}", a.email),
        swap_case(&format!("{}@other.test", a.id)),
    ] {
        assert_eq!(
            store.address_by_email(&unknown, T0).await.expect("lookup"),
            None,
            "{unknown}"
        );
    }
}

pub async fn email_keys_are_unique(store: &dyn Store) {
    let a = new_address(store, Some(T0 + DAY)).await;
    let twin = swap_case(&a.id);
    assert_ne!(twin, a.id);
    let clash = NewAddress {
        id: twin.clone(),
        name: None,
        task_id: None,
        email: format!("{twin}@inbox.test"),
        created_at: T0,
        expires_at: None,
        token_hash: ids::hash_secret("other token"),
        inbox_hash: ids::hash_secret("other inbox"),
        verification: None,
        email_policy: None,
        hooks: Vec::new(),
    };
    assert_eq!(
        store.create_address(clash).await,
        Err(StoreError::AddressExists),
        "an id differing only by case has the same email key"
    );
    assert_eq!(
        store.get_address(&twin, T0).await.expect("get"),
        None,
        "the refused address leaves no trace"
    );
    let found = store.address_by_email(&a.email, T0).await.expect("lookup");
    assert_eq!(
        found,
        Some(a.clone()),
        "the key still names the first address"
    );
    assert_eq!(
        store.get_address(&a.id, T0).await.expect("get"),
        Some(a),
        "the first address is untouched"
    );
}

pub async fn tombstones_are_found_by_email_until_forgotten(store: &dyn Store) {
    let l = limits();
    let deleted = new_address(store, None).await;
    let expiring = new_address(store, Some(T0 + DAY)).await;
    store
        .delete_address(&deleted.id, T0 + SEC)
        .await
        .expect("delete");
    let now = T0 + 2 * DAY;
    store.sweep(&l, now).await.expect("sweep");
    let tomb = store
        .address_by_email(&deleted.email.to_uppercase(), now)
        .await
        .expect("lookup")
        .expect("a deleted address is found until forgotten");
    assert_eq!(
        (tomb.id.as_str(), tomb.deleted_at),
        (deleted.id.as_str(), Some(T0 + SEC))
    );
    assert!(tomb.is_gone(now));
    let expired = store
        .address_by_email(&swap_case(&expiring.email), now)
        .await
        .expect("lookup")
        .expect("an expired address is found until forgotten");
    assert_eq!(expired.id, expiring.id);
    assert!(expired.is_gone(now));
    let later = T0 + DAY + l.tombstone_ms() + SEC;
    store.sweep(&l, later).await.expect("sweep");
    for a in [&deleted, &expiring] {
        assert_eq!(
            store
                .address_by_email(&a.email, later)
                .await
                .expect("lookup"),
            None,
            "forgotten with its tombstone"
        );
        assert_eq!(store.get_address(&a.id, later).await.expect("get"), None);
    }
}

async fn verification_of(store: &dyn Store, id: &str) -> Option<VerificationConfig> {
    store
        .get_address(id, T0)
        .await
        .expect("get")
        .expect("exists")
        .verification
}

/// docs/API.md §15: an address's signing secret is stored with it (at creation, or set later),
/// read back whole (the secret included: it must be usable), replaced at once, removed, kept
/// through appends and state writes, and only a live address's can be set.
pub async fn verification_is_stored_rotated_and_removed(store: &dyn Store) {
    let first = VerificationConfig::new(
        "standard-webhooks",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        Some(true),
        Some(60),
    )
    .expect("valid");
    let id = ids::new_address_id();
    store
        .create_address(NewAddress {
            id: id.clone(),
            name: None,
            task_id: None,
            email: format!("{id}@inbox.test"),
            created_at: T0,
            expires_at: Some(T0 + DAY),
            token_hash: ids::hash_secret("token"),
            inbox_hash: ids::hash_secret("inbox"),
            verification: Some(first.clone()),
            email_policy: None,
            hooks: Vec::new(),
        })
        .await
        .expect("create");
    assert_eq!(verification_of(store, &id).await, Some(first.clone()));
    append(store, &id, 1, T0).await;
    store
        .put_state(&id, "k", "1".into(), None, &limits(), T0)
        .await
        .expect("put state");
    assert_eq!(verification_of(store, &id).await, Some(first));

    let rotated =
        VerificationConfig::new("stripe", "whsec_abcdefgh12345678", None, None).expect("valid");
    store
        .set_verification(&id, Some(rotated.clone()), T0)
        .await
        .expect("rotate");
    assert_eq!(verification_of(store, &id).await, Some(rotated.clone()));
    // Setting it again is the same.
    store
        .set_verification(&id, Some(rotated.clone()), T0)
        .await
        .expect("again");
    assert_eq!(verification_of(store, &id).await, Some(rotated.clone()));
    store.set_verification(&id, None, T0).await.expect("remove");
    assert_eq!(verification_of(store, &id).await, None);
    // An address created without one, set later.
    let plain = new_address(store, None).await;
    assert_eq!(plain.verification, None);
    store
        .set_verification(&plain.id, Some(rotated.clone()), T0)
        .await
        .expect("set");
    assert_eq!(
        verification_of(store, &plain.id).await,
        Some(rotated.clone())
    );

    assert_eq!(
        store
            .set_verification("addr_unknown", Some(rotated.clone()), T0)
            .await,
        Err(StoreError::AddressNotFound)
    );
    // Expired (at T0 + DAY), then deleted: gone, and nothing changes.
    assert_eq!(
        store
            .set_verification(&id, Some(rotated.clone()), T0 + DAY)
            .await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(verification_of(store, &id).await, None);
    store.delete_address(&plain.id, T0).await.expect("delete");
    assert_eq!(
        store.set_verification(&plain.id, None, T0).await,
        Err(StoreError::AddressGone)
    );
}
