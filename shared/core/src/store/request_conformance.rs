//! The Store conformance cases of requests for a person (docs/API.md §12): a request is created
//! once per Idempotency-Key, within the open-request limit; the first answer closes it and
//! appends `request.answered` atomically, however many answer at once; an open request past its
//! expiry reads as expired and gets one `request.expired` event, appended by whoever reads the
//! feed first. A backend runs them with [`crate::store_request_conformance_tests!`].

use std::sync::Arc;

use serde_json::Value;

use super::conformance::{new_address, T0};
use super::{
    Answer, AnswerOutcome, IdempotencyClaim, NewRequest, RequestRecord, Store, StoreError,
};
use crate::domain::request::{self, CommentMode, RequestStatus};
use crate::domain::{ids, Limits, Millis};

const SEC: Millis = 1_000;
const HOUR: Millis = 3_600_000;

/// Generates one `#[tokio::test]` per request case, as [`crate::store_conformance_tests!`] does.
#[macro_export]
macro_rules! store_request_conformance_tests {
    ($make:expr) => {
        $crate::__request_conformance_cases!($make;
            request_round_trips, request_creation_is_idempotent, open_requests_are_capped,
            first_answer_wins, concurrent_answers_have_one_winner,
            expired_requests_get_one_event, next_request_expiry_follows_open_requests,
            requests_go_with_their_address
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __request_conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $make;
                $crate::store::request_conformance::$case(store.as_ref()).await;
            }
        )*
    };
}

/// A new request expiring `ttl` after `T0`, with an optional Idempotency-Key claim.
pub fn new_request(ttl: Millis, claim: Option<(&str, &str)>) -> NewRequest {
    let id = request::new_request_id();
    NewRequest {
        secret_hash: ids::hash_secret(&request::request_secret("token", &id)),
        id,
        title: "Deploy to production?".into(),
        body: Some("The **build** passed. <script>x</script>".into()),
        options: vec!["Approve".into(), "Reject".into()],
        comment: CommentMode::Optional,
        created_at: T0,
        expires_at: T0 + ttl,
        claim: claim.map(|(key, body)| IdempotencyClaim {
            key_hash: ids::sha256_hex(key.as_bytes()),
            body_hash: ids::sha256_hex(body.as_bytes()),
        }),
    }
}

fn answer(choice: &str, comment: Option<&str>, at: Millis) -> Answer {
    Answer {
        choice: choice.into(),
        comment: comment.map(str::to_owned),
        answered_at: at,
    }
}

/// The `data` of the address's events of `event_type`, in feed order.
async fn events_of(store: &dyn Store, id: &str, event_type: &str, now: Millis) -> Vec<Value> {
    let page = store
        .read_events(id, 0, 100, u64::MAX, now)
        .await
        .expect("read the feed");
    page.events
        .iter()
        .filter(|e| e.event_type == event_type)
        .map(|e| serde_json::from_str(&e.data).expect("event data is JSON"))
        .collect()
}

async fn create(store: &dyn Store, id: &str, r: NewRequest) -> RequestRecord {
    store
        .create_request(id, r, &Limits::default(), T0)
        .await
        .expect("create request")
        .request
}

pub async fn request_round_trips(store: &dyn Store) {
    let a = new_address(store, None).await;
    let b = new_address(store, None).await;
    let r = new_request(HOUR, None);
    let created = store
        .create_request(&a.id, r.clone(), &Limits::default(), T0)
        .await
        .expect("create request");
    assert!(!created.duplicate);
    let got = created.request;
    assert_eq!(got.id, r.id);
    assert_eq!(got.address_id, a.id);
    assert_eq!(got.title, r.title);
    assert_eq!(got.body, r.body, "the body is kept as written");
    assert_eq!(got.options, r.options);
    assert_eq!(got.comment, CommentMode::Optional);
    assert_eq!(got.status, RequestStatus::Open);
    assert_eq!(got.secret_hash, r.secret_hash);
    assert_eq!((got.created_at, got.expires_at), (T0, T0 + HOUR));
    assert_eq!(got.answer, None);

    assert_eq!(store.get_request(&a.id, &r.id, T0).await.expect("get"), got);
    assert_eq!(
        store.find_request(&r.id, T0).await.expect("find"),
        Some(got.clone())
    );
    assert_eq!(
        store.get_request(&b.id, &r.id, T0).await,
        Err(StoreError::NotFound),
        "another address's request is unknown"
    );
    assert_eq!(
        store.get_request(&a.id, "req_unknown", T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(store.find_request("req_unknown", T0).await, Ok(None));
    // No body, other options, a required comment.
    let mut plain = new_request(HOUR, None);
    plain.body = None;
    plain.options = vec!["A".into(), "B".into(), "C".into()];
    plain.comment = CommentMode::Required;
    let got = create(store, &a.id, plain.clone()).await;
    assert_eq!(
        (got.body, got.options, got.comment),
        (None, plain.options, CommentMode::Required)
    );
    assert!(
        events_of(store, &a.id, "request.answered", T0)
            .await
            .is_empty(),
        "creating appends nothing"
    );
}

pub async fn request_creation_is_idempotent(store: &dyn Store) {
    let a = new_address(store, None).await;
    let first = create(store, &a.id, new_request(HOUR, Some(("k1", "body")))).await;
    let again = store
        .create_request(
            &a.id,
            new_request(HOUR, Some(("k1", "body"))),
            &Limits::default(),
            T0 + SEC,
        )
        .await
        .expect("create again");
    assert!(again.duplicate);
    assert_eq!(again.request, first, "the same request, not a new one");
    assert_eq!(
        store
            .create_request(
                &a.id,
                new_request(HOUR, Some(("k1", "other body"))),
                &Limits::default(),
                T0 + SEC
            )
            .await,
        Err(StoreError::IdempotencyKeyReused)
    );
    // Another key, or another address with the same key: new requests.
    let other = create(store, &a.id, new_request(HOUR, Some(("k2", "body")))).await;
    assert_ne!(other.id, first.id);
    let b = new_address(store, None).await;
    let theirs = create(store, &b.id, new_request(HOUR, Some(("k1", "body")))).await;
    assert_ne!(theirs.id, first.id);
}

pub async fn open_requests_are_capped(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits {
        max_open_requests: 2,
        ..Limits::default()
    };
    let short = new_request(10 * SEC, None);
    let short_id = short.id.clone();
    store
        .create_request(&a.id, short, &limits, T0)
        .await
        .expect("first");
    let long = new_request(HOUR, None);
    let long_id = long.id.clone();
    store
        .create_request(&a.id, long, &limits, T0)
        .await
        .expect("second");
    assert_eq!(
        store
            .create_request(&a.id, new_request(HOUR, None), &limits, T0)
            .await,
        Err(StoreError::QuotaExceeded),
        "a third open request"
    );
    // An answered request is not open.
    let outcome = store
        .answer_request(
            &long_id,
            answer("Approve", None, T0 + SEC),
            &limits,
            T0 + SEC,
        )
        .await
        .expect("answer");
    assert!(matches!(outcome, AnswerOutcome::Answered { .. }));
    store
        .create_request(&a.id, new_request(HOUR, None), &limits, T0 + SEC)
        .await
        .expect("room again after an answer");
    assert_eq!(
        store
            .create_request(&a.id, new_request(HOUR, None), &limits, T0 + 2 * SEC)
            .await,
        Err(StoreError::QuotaExceeded)
    );
    // An expired one is not open either, marked or not.
    let later = T0 + 11 * SEC;
    assert!(
        store
            .get_request(&a.id, &short_id, later)
            .await
            .expect("get")
            .status_at(later)
            == RequestStatus::Expired
    );
    store
        .create_request(&a.id, new_request(HOUR, None), &limits, later)
        .await
        .expect("room again after an expiry");
}

pub async fn first_answer_wins(store: &dyn Store) {
    let a = new_address(store, None).await;
    let r = create(store, &a.id, new_request(HOUR, None)).await;
    let limits = Limits::default();
    let at = T0 + 5 * SEC;
    let outcome = store
        .answer_request(
            &r.id,
            answer("Reject", Some("not today <b>"), at),
            &limits,
            at,
        )
        .await
        .expect("answer");
    let AnswerOutcome::Answered { request, event } = outcome else {
        panic!("the first answer closes the request: {outcome:?}");
    };
    assert_eq!(request.status, RequestStatus::Answered);
    assert_eq!(
        request.answer,
        Some(answer("Reject", Some("not today <b>"), at))
    );
    let stored = store.get_request(&a.id, &r.id, at).await.expect("get");
    assert_eq!(stored, request, "the answer is stored");
    let feed = store
        .read_events(&a.id, 0, 100, u64::MAX, at)
        .await
        .expect("feed");
    assert_eq!(feed.events.len(), 1);
    let e = &feed.events[0];
    assert_eq!(
        (e.id.as_str(), e.sequence),
        (event.id.as_str(), event.sequence)
    );
    assert_eq!(e.event_type, "request.answered");
    assert_eq!(e.ingress, crate::domain::Ingress::Request);
    assert_eq!(
        serde_json::from_str::<Value>(&e.data).expect("data"),
        serde_json::from_str::<Value>(&request::answered_data(
            &r.id,
            "Reject",
            Some("not today <b>"),
            at
        ))
        .expect("expected data")
    );

    // A second answer changes nothing and sees the first.
    let later = at + SEC;
    let outcome = store
        .answer_request(&r.id, answer("Approve", None, later), &limits, later)
        .await
        .expect("second answer");
    assert_eq!(outcome, AnswerOutcome::Closed(stored));
    assert_eq!(
        events_of(store, &a.id, "request.answered", later)
            .await
            .len(),
        1
    );
    assert_eq!(
        store
            .answer_request(
                "req_unknown",
                answer("Approve", None, later),
                &limits,
                later
            )
            .await,
        Err(StoreError::NotFound)
    );
}

pub async fn concurrent_answers_have_one_winner(store: &dyn Store) {
    let a = new_address(store, None).await;
    let r = create(store, &a.id, new_request(HOUR, None)).await;
    let limits = Arc::new(Limits::default());
    let outcomes = futures::future::join_all((0..8).map(|n| {
        let (id, limits) = (r.id.clone(), limits.clone());
        let choice = if n % 2 == 0 { "Approve" } else { "Reject" };
        async move {
            store
                .answer_request(&id, answer(choice, None, T0 + SEC), &limits, T0 + SEC)
                .await
        }
    }))
    .await;
    let winners: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            Ok(AnswerOutcome::Answered { request, .. }) => Some(request.clone()),
            Ok(AnswerOutcome::Closed(_)) => None,
            Err(e) => panic!("an answer failed: {e:?}"),
        })
        .collect();
    assert_eq!(winners.len(), 1, "exactly one answer wins: {outcomes:?}");
    for o in &outcomes {
        if let Ok(AnswerOutcome::Closed(seen)) = o {
            assert_eq!(seen.answer, winners[0].answer, "losers see the winner");
        }
    }
    let answered = events_of(store, &a.id, "request.answered", T0 + SEC).await;
    assert_eq!(answered.len(), 1, "one answer in the feed");
    assert_eq!(
        Some(answered[0]["choice"].as_str().unwrap_or_default()),
        winners[0].answer.as_ref().map(|x| x.choice.as_str())
    );
}

pub async fn expired_requests_get_one_event(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits::default();
    let r = create(store, &a.id, new_request(10 * SEC, None)).await;
    assert_eq!(
        store.expire_requests(&a.id, &limits, T0 + 9 * SEC).await,
        Ok(0),
        "not yet"
    );
    let at = T0 + 10 * SEC;
    // Before anyone marks it, it reads as expired, and cannot be answered.
    let seen = store.get_request(&a.id, &r.id, at).await.expect("get");
    assert_eq!(seen.status_at(at), RequestStatus::Expired);
    let outcome = store
        .answer_request(&r.id, answer("Approve", None, at), &limits, at)
        .await
        .expect("answer after expiry");
    assert!(
        matches!(outcome, AnswerOutcome::Closed(_)),
        "too late: {outcome:?}"
    );
    // Readers racing to expire it append one event.
    let counts =
        futures::future::join_all((0..4).map(|_| store.expire_requests(&a.id, &limits, at))).await;
    let total: u64 = counts.iter().map(|c| *c.as_ref().expect("expire")).sum();
    assert_eq!(total, 1, "one expiry among racing readers: {counts:?}");
    let expired = events_of(store, &a.id, "request.expired", at).await;
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0]["request_id"], r.id.as_str());
    let stored = store.get_request(&a.id, &r.id, at).await.expect("get");
    assert_eq!(stored.status, RequestStatus::Expired, "marked expired");
    assert_eq!(store.expire_requests(&a.id, &limits, at + SEC).await, Ok(0));
}

pub async fn next_request_expiry_follows_open_requests(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits::default();
    assert_eq!(a.next_request_expiry, None);
    let early = create(store, &a.id, new_request(10 * SEC, None)).await;
    let late = create(store, &a.id, new_request(HOUR, None)).await;
    let record = store
        .get_address(&a.id, T0)
        .await
        .expect("get")
        .expect("address");
    assert_eq!(record.next_request_expiry, Some(early.expires_at));
    // Answering the earliest moves it to the next.
    store
        .answer_request(
            &early.id,
            answer("Approve", None, T0 + SEC),
            &limits,
            T0 + SEC,
        )
        .await
        .expect("answer");
    let record = store
        .get_address(&a.id, T0 + SEC)
        .await
        .expect("get")
        .expect("address");
    assert_eq!(record.next_request_expiry, Some(late.expires_at));
    // Expiring the last clears it.
    let after = T0 + HOUR;
    assert_eq!(store.expire_requests(&a.id, &limits, after).await, Ok(1));
    let record = store
        .get_address(&a.id, after)
        .await
        .expect("get")
        .expect("address");
    assert_eq!(record.next_request_expiry, None);
}

pub async fn requests_go_with_their_address(store: &dyn Store) {
    let a = new_address(store, None).await;
    let r = create(store, &a.id, new_request(HOUR, None)).await;
    store.delete_address(&a.id, T0 + SEC).await.expect("delete");
    let at = T0 + 2 * SEC;
    assert_eq!(store.find_request(&r.id, at).await, Ok(None));
    assert_eq!(
        store.get_request(&a.id, &r.id, at).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store
            .answer_request(&r.id, answer("Approve", None, at), &Limits::default(), at)
            .await,
        Err(StoreError::NotFound),
        "a gone address's request cannot be answered"
    );
    assert_eq!(
        store
            .create_request(&a.id, new_request(HOUR, None), &Limits::default(), at)
            .await,
        Err(StoreError::AddressGone)
    );
}
