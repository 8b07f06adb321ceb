//! The Store conformance cases of timers (docs/API.md §20): a timer is created once per
//! Idempotency-Key, within the pending limit; it fires exactly once, its event appended in the
//! same atomic step, however many readers fire at once; a cancel racing its firing has one
//! winner; the listing and `next_timer_at` follow the pending timers. A backend runs them with
//! [`crate::store_timer_conformance_tests!`].

use std::sync::Arc;

use serde_json::Value;

use super::conformance::{new_address, T0};
use super::{
    CancelOutcome, IdempotencyClaim, NewTimer, Store, StoreError, TimerRecord, TimerStatus,
};
use crate::domain::timer::{new_timer_id, MAX_PENDING_TIMERS};
use crate::domain::{ids, Ingress, Limits, Millis};

const SEC: Millis = 1_000;
const HOUR: Millis = 3_600_000;

/// Generates one `#[tokio::test]` per timer case, as [`crate::store_conformance_tests!`] does.
#[macro_export]
macro_rules! store_timer_conformance_tests {
    ($make:expr) => {
        $crate::__timer_conformance_cases!($make;
            timer_round_trips, timer_creation_is_idempotent, pending_timers_are_capped,
            due_timers_fire_once_in_order, concurrent_fires_append_once,
            cancel_racing_fire_has_one_winner, cancelled_timers_never_fire,
            next_timer_at_follows_pending_timers, full_feed_leaves_timers_pending,
            timers_go_with_their_address
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __timer_conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $make;
                $crate::store::timer_conformance::$case(store.as_ref()).await;
            }
        )*
    };
}

/// A new timer firing `after` past `T0`, of type `timer.fired` with data `{"n": 1}`, with an
/// optional Idempotency-Key claim (key, body).
pub fn new_timer(after: Millis, claim: Option<(&str, &str)>) -> NewTimer {
    NewTimer {
        id: new_timer_id(),
        fire_at: T0 + after,
        event_type: "timer.fired".into(),
        data: Some(r#"{"n":1}"#.into()),
        created_at: T0,
        claim: claim.map(|(key, body)| IdempotencyClaim {
            key_hash: ids::sha256_hex(key.as_bytes()),
            body_hash: ids::sha256_hex(body.as_bytes()),
        }),
    }
}

/// The events of the address whose source is `timer`, as (type, data), in feed order.
async fn timer_events(store: &dyn Store, id: &str, now: Millis) -> Vec<(String, Value)> {
    let page = store
        .read_events(id, 0, 1_000, u64::MAX, now)
        .await
        .expect("read the feed");
    page.events
        .iter()
        .filter(|e| e.source.as_deref() == Some("timer"))
        .map(|e| {
            assert_eq!(e.ingress, Ingress::Timer);
            (
                e.event_type.clone(),
                serde_json::from_str(&e.data).expect("event data is JSON"),
            )
        })
        .collect()
}

async fn create(store: &dyn Store, id: &str, t: NewTimer) -> TimerRecord {
    store
        .create_timer(id, t, &Limits::default(), T0)
        .await
        .expect("create timer")
        .timer
}

fn status_of(list: &[TimerRecord], id: &str) -> Option<TimerStatus> {
    list.iter().find(|t| t.id == id).map(|t| t.status)
}

pub async fn timer_round_trips(store: &dyn Store) {
    let a = new_address(store, None).await;
    let t = new_timer(HOUR, None);
    let created = store
        .create_timer(&a.id, t.clone(), &Limits::default(), T0)
        .await
        .expect("create timer");
    assert!(!created.duplicate);
    let got = created.timer;
    assert_eq!(got.id, t.id);
    assert_eq!(got.fire_at, T0 + HOUR);
    assert_eq!(got.event_type, "timer.fired");
    assert_eq!(got.data.as_deref(), Some(r#"{"n":1}"#));
    assert_eq!(got.status, TimerStatus::Pending);
    assert_eq!((got.closed_at, got.event.clone()), (None, None));
    let listed = store.list_timers(&a.id, T0).await.expect("list");
    assert_eq!(
        listed,
        vec![got.clone()],
        "the pending timer is listed as stored"
    );

    // Another address sees none of it.
    let b = new_address(store, None).await;
    assert_eq!(store.list_timers(&b.id, T0).await.expect("list b"), vec![]);
    assert_eq!(
        store.cancel_timer(&b.id, &t.id, T0).await,
        Err(StoreError::NotFound),
        "another address's timer is not found"
    );
    assert_eq!(
        store.cancel_timer(&a.id, &new_timer_id(), T0).await,
        Err(StoreError::NotFound)
    );
}

pub async fn timer_creation_is_idempotent(store: &dyn Store) {
    let a = new_address(store, None).await;
    let first = store
        .create_timer(
            &a.id,
            new_timer(HOUR, Some(("k1", "body"))),
            &Limits::default(),
            T0,
        )
        .await
        .expect("create");
    let again = store
        .create_timer(
            &a.id,
            new_timer(HOUR, Some(("k1", "body"))),
            &Limits::default(),
            T0 + SEC,
        )
        .await
        .expect("create again");
    assert!(
        again.duplicate,
        "the same key and body answer the earlier timer"
    );
    assert_eq!(again.timer, first.timer);
    assert_eq!(
        store
            .create_timer(
                &a.id,
                new_timer(HOUR, Some(("k1", "other"))),
                &Limits::default(),
                T0 + SEC
            )
            .await,
        Err(StoreError::IdempotencyKeyReused)
    );
    assert_eq!(store.list_timers(&a.id, T0).await.expect("list").len(), 1);
    // Once fired, the key still answers the timer as it is now.
    store
        .fire_timers(&a.id, &Limits::default(), T0 + HOUR)
        .await
        .expect("fire");
    let later = store
        .create_timer(
            &a.id,
            new_timer(2 * HOUR, Some(("k1", "body"))),
            &Limits::default(),
            T0 + HOUR + SEC,
        )
        .await
        .expect("create after firing");
    assert!(later.duplicate);
    assert_eq!(later.timer.id, first.timer.id);
    assert_eq!(later.timer.status, TimerStatus::Fired);
    // Another address may use the same key.
    let b = new_address(store, None).await;
    let other = store
        .create_timer(
            &b.id,
            new_timer(HOUR, Some(("k1", "body"))),
            &Limits::default(),
            T0,
        )
        .await
        .expect("create at b");
    assert!(!other.duplicate);
}

pub async fn pending_timers_are_capped(store: &dyn Store) {
    let a = new_address(store, None).await;
    for n in 0..MAX_PENDING_TIMERS {
        create(store, &a.id, new_timer(HOUR + n as Millis, None)).await;
    }
    assert_eq!(
        store
            .create_timer(&a.id, new_timer(HOUR, None), &Limits::default(), T0)
            .await,
        Err(StoreError::QuotaExceeded),
        "the 101st pending timer is refused"
    );
    // A cancelled one frees its place.
    let listed = store.list_timers(&a.id, T0).await.expect("list");
    assert_eq!(listed.len(), MAX_PENDING_TIMERS);
    let outcome = store
        .cancel_timer(&a.id, &listed[0].id, T0)
        .await
        .expect("cancel");
    assert!(matches!(outcome, CancelOutcome::Cancelled(_)));
    create(store, &a.id, new_timer(HOUR, None)).await;
}

pub async fn due_timers_fire_once_in_order(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits::default();
    let late = create(store, &a.id, new_timer(20 * SEC, None)).await;
    let mut early = new_timer(10 * SEC, None);
    early.event_type = "timer.early".into();
    early.data = None;
    let early = create(store, &a.id, early).await;
    assert_eq!(
        store.fire_timers(&a.id, &limits, T0 + 9 * SEC).await,
        Ok(0),
        "not yet"
    );
    assert_eq!(
        store.fire_timers(&a.id, &limits, T0 + 30 * SEC).await,
        Ok(2)
    );
    assert_eq!(
        store.fire_timers(&a.id, &limits, T0 + 31 * SEC).await,
        Ok(0),
        "each fires once"
    );
    let events = timer_events(store, &a.id, T0 + 31 * SEC).await;
    assert_eq!(
        events,
        vec![
            (
                "timer.early".to_owned(),
                serde_json::json!({"timer_id": early.id, "data": null})
            ),
            (
                "timer.fired".to_owned(),
                serde_json::json!({"timer_id": late.id, "data": {"n": 1}})
            ),
        ],
        "earliest first, each with its type and data"
    );
    let listed = store.list_timers(&a.id, T0 + 31 * SEC).await.expect("list");
    for t in [&early, &late] {
        let got = listed.iter().find(|x| x.id == t.id).expect("listed");
        assert_eq!(got.status, TimerStatus::Fired);
        assert_eq!(got.closed_at, Some(T0 + 30 * SEC));
        let event = got.event.as_ref().expect("its event");
        let stored = store
            .get_event(&a.id, &event.id, T0 + 31 * SEC)
            .await
            .expect("its event is in the feed");
        assert_eq!(stored.sequence, event.sequence);
    }
    assert_eq!(
        store.cancel_timer(&a.id, &early.id, T0 + 31 * SEC).await,
        Ok(CancelOutcome::Fired(
            listed
                .iter()
                .find(|x| x.id == early.id)
                .cloned()
                .expect("listed")
        )),
        "a fired timer is not cancelled"
    );
}

pub async fn concurrent_fires_append_once(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Arc::new(Limits::default());
    for n in 0..3 {
        create(store, &a.id, new_timer(SEC + n, None)).await;
    }
    let fired = futures::future::join_all((0..8).map(|_| {
        let (id, limits) = (a.id.clone(), limits.clone());
        async move { store.fire_timers(&id, &limits, T0 + 10 * SEC).await }
    }))
    .await;
    let total: u64 = fired
        .iter()
        .map(|r| *r.as_ref().expect("fire_timers"))
        .sum();
    assert_eq!(total, 3, "three timers fired in all: {fired:?}");
    assert_eq!(
        timer_events(store, &a.id, T0 + 10 * SEC).await.len(),
        3,
        "one event each"
    );
}

pub async fn cancel_racing_fire_has_one_winner(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Arc::new(Limits::default());
    for round in 0..6 {
        let t = create(store, &a.id, new_timer(SEC + round, None)).await;
        let at = T0 + 10 * SEC;
        let (fired, cancelled) = tokio::join!(
            store.fire_timers(&a.id, &limits, at),
            store.cancel_timer(&a.id, &t.id, at)
        );
        let fired = fired.expect("fire");
        let events = timer_events(store, &a.id, at)
            .await
            .into_iter()
            .filter(|(_, d)| d["timer_id"] == t.id.as_str())
            .count();
        match cancelled.expect("cancel") {
            CancelOutcome::Cancelled(c) => {
                assert_eq!(c.status, TimerStatus::Cancelled);
                assert_eq!((fired, events), (0, 0), "cancelled: nothing appended");
            }
            CancelOutcome::Fired(f) => {
                assert_eq!(f.status, TimerStatus::Fired);
                assert_eq!((fired, events), (1, 1), "fired: one event");
            }
        }
    }
}

pub async fn cancelled_timers_never_fire(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits::default();
    let t = create(store, &a.id, new_timer(10 * SEC, None)).await;
    let CancelOutcome::Cancelled(c) = store
        .cancel_timer(&a.id, &t.id, T0 + SEC)
        .await
        .expect("cancel")
    else {
        panic!("a pending timer is cancelled");
    };
    assert_eq!(c.status, TimerStatus::Cancelled);
    assert_eq!(c.closed_at, Some(T0 + SEC));
    assert_eq!(
        store.cancel_timer(&a.id, &t.id, T0 + 2 * SEC).await,
        Ok(CancelOutcome::Cancelled(c.clone())),
        "cancelling again answers the same"
    );
    assert_eq!(store.fire_timers(&a.id, &limits, T0 + HOUR).await, Ok(0));
    assert!(timer_events(store, &a.id, T0 + HOUR).await.is_empty());
    let listed = store.list_timers(&a.id, T0 + HOUR).await.expect("list");
    assert_eq!(status_of(&listed, &t.id), Some(TimerStatus::Cancelled));
}

pub async fn next_timer_at_follows_pending_timers(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits::default();
    assert_eq!(a.next_timer_at, None);
    let late = create(store, &a.id, new_timer(2 * HOUR, None)).await;
    let record = store.get_address(&a.id, T0).await.expect("get").expect("a");
    assert_eq!(record.next_timer_at, Some(late.fire_at));
    let early = create(store, &a.id, new_timer(HOUR, None)).await;
    let record = store.get_address(&a.id, T0).await.expect("get").expect("a");
    assert_eq!(record.next_timer_at, Some(early.fire_at));
    assert_eq!(record.next_due(), Some(early.fire_at));
    store
        .cancel_timer(&a.id, &early.id, T0)
        .await
        .expect("cancel");
    let record = store.get_address(&a.id, T0).await.expect("get").expect("a");
    assert_eq!(
        record.next_timer_at,
        Some(late.fire_at),
        "a cancel moves it on"
    );
    // append_due fires what is due for the record it is given.
    store
        .append_due(&record, &limits, late.fire_at)
        .await
        .expect("append due");
    let record = store
        .get_address(&a.id, late.fire_at)
        .await
        .expect("get")
        .expect("a");
    assert_eq!(record.next_timer_at, None, "nothing pending");
    assert_eq!(timer_events(store, &a.id, late.fire_at).await.len(), 1);
}

pub async fn full_feed_leaves_timers_pending(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits {
        max_retained_events: 2,
        ..Limits::default()
    };
    let mut ts = Vec::new();
    for n in 0..3 {
        ts.push(create(store, &a.id, new_timer(SEC + n, None)).await);
    }
    assert_eq!(
        store.fire_timers(&a.id, &limits, T0 + 10 * SEC).await,
        Ok(2)
    );
    let listed = store.list_timers(&a.id, T0 + 10 * SEC).await.expect("list");
    let pending: Vec<_> = ts
        .iter()
        .filter(|t| status_of(&listed, &t.id) == Some(TimerStatus::Pending))
        .collect();
    assert_eq!(pending.len(), 1, "the feed's room fired two; one waits");
    let record = store
        .get_address(&a.id, T0 + 10 * SEC)
        .await
        .expect("get")
        .expect("a");
    assert_eq!(record.next_timer_at, Some(pending[0].fire_at));
}

pub async fn timers_go_with_their_address(store: &dyn Store) {
    let a = new_address(store, None).await;
    let t = create(store, &a.id, new_timer(HOUR, None)).await;
    store.delete_address(&a.id, T0 + SEC).await.expect("delete");
    assert_eq!(
        store.list_timers(&a.id, T0 + 2 * SEC).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store.cancel_timer(&a.id, &t.id, T0 + 2 * SEC).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store
            .create_timer(
                &a.id,
                new_timer(HOUR, None),
                &Limits::default(),
                T0 + 2 * SEC
            )
            .await
            .map(|_| ()),
        Err(StoreError::AddressGone)
    );
    assert!(matches!(
        store
            .fire_timers(&a.id, &Limits::default(), T0 + 2 * HOUR)
            .await,
        Err(StoreError::AddressGone) | Ok(0)
    ));
}
