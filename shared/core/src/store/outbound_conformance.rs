//! The Store conformance cases of outbound email (docs/API.md §16): contacts confirmed by a
//! code whose tries are counted atomically, daily limits, and sends recorded with their
//! `email.sent` event before anything is mailed, then claimed for one attempt at a time until
//! sent or failed. A backend runs them with [`crate::store_outbound_conformance_tests!`].

use serde_json::Value;

use super::conformance::{new_address, T0};
use super::{
    CodeCheck, CodeIssued, IdempotencyClaim, NewCode, NewEvent, NewSend, OutboundMessage,
    SendOutcome, Store, StoreError,
};
use crate::domain::mail_out::{
    self, code_hash, ContactStatus, SendStatus, CODE_TRIES, CODE_VALID_MS,
};
use crate::domain::{ids, Ingress, Limits, Millis};

const SEC: Millis = 1_000;
const DAY: Millis = 86_400_000;

/// Generates one `#[tokio::test]` per outbound case, as [`crate::store_conformance_tests!`]
/// does.
#[macro_export]
macro_rules! store_outbound_conformance_tests {
    ($make:expr) => {
        $crate::__outbound_conformance_cases!($make;
            contacts_are_confirmed_by_their_code, codes_are_spent_after_their_tries,
            codes_expire, code_mails_are_limited_per_day, contacts_are_capped,
            code_mails_are_capped_per_recipient_mailbox, code_mails_are_capped_per_client,
            concurrent_tries_are_each_counted, sends_need_a_confirmed_contact,
            a_send_is_recorded_once_per_key, sends_are_limited_per_day,
            sends_need_two_free_feed_slots, a_send_is_claimed_retried_and_failed,
            a_lost_attempt_is_claimed_again_after_its_lease, a_send_reads_back_in_every_state,
            outbound_goes_with_its_address
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __outbound_conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $make;
                $crate::store::outbound_conformance::$case(store.as_ref()).await;
            }
        )*
    };
}

const ADA: &str = "ada@example.com";

/// The default limits without the server-wide daily caps on code mails: the cases that are not
/// about them mail `ADA` many times (and a DynamoDB table is shared by every case of a run).
fn uncapped() -> Limits {
    Limits {
        code_mails_per_recipient_per_day: 1_000_000_000,
        code_mails_per_client_per_day: 1_000_000_000,
        ..Limits::default()
    }
}

/// A tag no other case, nor another run on the same table, uses.
fn unique() -> String {
    mail_out::new_send_id().replace(mail_out::SEND_PREFIX, "")
}

fn code(address_id: &str, email: &str, digits: &str, now: Millis) -> NewCode {
    code_from(address_id, email, digits, now, "192.0.2.1")
}

fn code_from(address_id: &str, email: &str, digits: &str, now: Millis, client: &str) -> NewCode {
    NewCode {
        email: email.into(),
        code_hash: code_hash(address_id, email, digits),
        expires_at: now + CODE_VALID_MS,
        client: client.into(),
    }
}

async fn issue(store: &dyn Store, id: &str, email: &str, digits: &str, now: Millis) -> CodeIssued {
    store
        .issue_contact_code(id, code(id, email, digits, now), &uncapped(), now)
        .await
        .expect("issue a code")
}

async fn check(store: &dyn Store, id: &str, email: &str, digits: &str, now: Millis) -> CodeCheck {
    store
        .check_contact_code(id, email, &code_hash(id, email, digits), now)
        .await
        .expect("check a code")
}

/// A new address with `ADA` confirmed.
async fn with_confirmed_contact(store: &dyn Store) -> String {
    let a = new_address(store, None).await;
    issue(store, &a.id, ADA, "123456", T0).await;
    assert!(matches!(
        check(store, &a.id, ADA, "123456", T0).await,
        CodeCheck::Confirmed(_)
    ));
    a.id
}

/// A send of `subject` to `to` with Idempotency-Key `key` (body hash of `subject`).
pub fn new_send(address_id: &str, to: &str, key: &str, subject: &str) -> NewSend {
    let id = mail_out::new_send_id();
    let message_id = mail_out::message_id(&id, "mail@agents.example");
    NewSend {
        claim: IdempotencyClaim {
            key_hash: ids::sha256_hex(key.as_bytes()),
            body_hash: ids::sha256_hex(subject.as_bytes()),
        },
        event: NewEvent {
            event_type: "email.sent".into(),
            source: None,
            ingress: Ingress::Outbound,
            data: mail_out::email_sent_data(to, subject, "Hello.", &message_id, None),
            http: None,
        },
        message: OutboundMessage {
            to: to.into(),
            reply_to: format!("{address_id}@inbox.test"),
            subject: subject.into(),
            text: "Hello.".into(),
            message_id,
            in_reply_to: Some("<parent@example.com>".into()),
            references: vec!["<root@example.com>".into(), "<parent@example.com>".into()],
        },
        id,
    }
}

fn failed_event(error: &str) -> NewEvent {
    NewEvent {
        event_type: "email.send_failed".into(),
        source: None,
        ingress: Ingress::Outbound,
        data: serde_json::json!({ "error": error }).to_string(),
        http: None,
    }
}

pub async fn contacts_are_confirmed_by_their_code(store: &dyn Store) {
    let a = new_address(store, None).await;
    assert_eq!(store.list_contacts(&a.id, T0).await, Ok(vec![]));
    let CodeIssued::Issued(c) = issue(store, &a.id, ADA, "123456", T0).await else {
        panic!("a new contact gets a code")
    };
    assert_eq!((c.email.as_str(), c.status), (ADA, ContactStatus::Pending));
    assert_eq!(c.code_mails, 1);
    let listed = store.list_contacts(&a.id, T0).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].status, ContactStatus::Pending);
    assert_eq!(listed[0].confirmed_at, None);

    assert_eq!(
        check(store, &a.id, ADA, "654321", T0 + SEC).await,
        CodeCheck::Wrong {
            tries_left: CODE_TRIES - 1
        }
    );
    let CodeCheck::Confirmed(c) = check(store, &a.id, ADA, "123456", T0 + 2 * SEC).await else {
        panic!("the right code confirms")
    };
    assert_eq!(c.status, ContactStatus::Confirmed);
    assert_eq!(c.confirmed_at, Some(T0 + 2 * SEC));
    assert!(c.code_hash.is_none(), "a used code is forgotten");
    let listed = store.list_contacts(&a.id, T0).await.expect("list");
    assert_eq!(listed[0].status, ContactStatus::Confirmed);
    assert_eq!(listed[0].confirmed_at, Some(T0 + 2 * SEC));
    // Confirmed stays confirmed: no new code, and the old one is no longer a question.
    assert!(matches!(
        issue(store, &a.id, ADA, "111111", T0 + 3 * SEC).await,
        CodeIssued::AlreadyConfirmed(_)
    ));
    assert!(matches!(
        check(store, &a.id, ADA, "000000", T0 + 4 * SEC).await,
        CodeCheck::AlreadyConfirmed(_)
    ));
    // An unknown contact, and another address's contact, are not found.
    assert_eq!(
        store
            .check_contact_code(&a.id, "eve@example.com", "x", T0)
            .await,
        Err(StoreError::NotFound)
    );
    let b = new_address(store, None).await;
    assert_eq!(
        store.check_contact_code(&b.id, ADA, "x", T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(store.list_contacts(&b.id, T0).await, Ok(vec![]));
}

pub async fn codes_are_spent_after_their_tries(store: &dyn Store) {
    let a = new_address(store, None).await;
    issue(store, &a.id, ADA, "123456", T0).await;
    for left in (0..CODE_TRIES).rev() {
        assert_eq!(
            check(store, &a.id, ADA, "000000", T0).await,
            CodeCheck::Wrong { tries_left: left }
        );
    }
    assert_eq!(
        check(store, &a.id, ADA, "123456", T0).await,
        CodeCheck::Spent,
        "the right code after five wrong ones is refused"
    );
    // A new code starts over.
    issue(store, &a.id, ADA, "222222", T0 + SEC).await;
    assert_eq!(
        check(store, &a.id, ADA, "123456", T0 + SEC).await,
        CodeCheck::Wrong {
            tries_left: CODE_TRIES - 1
        },
        "the old code is replaced"
    );
    assert!(matches!(
        check(store, &a.id, ADA, "222222", T0 + SEC).await,
        CodeCheck::Confirmed(_)
    ));
}

pub async fn codes_expire(store: &dyn Store) {
    let a = new_address(store, None).await;
    issue(store, &a.id, ADA, "123456", T0).await;
    assert_eq!(
        check(store, &a.id, ADA, "123456", T0 + CODE_VALID_MS).await,
        CodeCheck::Expired
    );
    let listed = store.list_contacts(&a.id, T0).await.expect("list");
    assert_eq!(listed[0].status, ContactStatus::Pending);
}

pub async fn code_mails_are_limited_per_day(store: &dyn Store) {
    let a = new_address(store, None).await;
    let day_start = (T0 / DAY + 1) * DAY;
    for n in 1..=3 {
        let CodeIssued::Issued(c) = issue(store, &a.id, ADA, "123456", day_start + n).await else {
            panic!("code {n}")
        };
        assert_eq!(c.code_mails, n as u32);
    }
    let fourth = store
        .issue_contact_code(
            &a.id,
            code(&a.id, ADA, "123456", day_start + 10),
            &uncapped(),
            day_start + 10,
        )
        .await;
    assert_eq!(
        fourth,
        Err(StoreError::DailyLimit {
            retry_after_seconds: 86_400
        })
    );
    // The refused code did not replace the third.
    assert!(matches!(
        check(store, &a.id, ADA, "123456", day_start + 20).await,
        CodeCheck::Confirmed(_)
    ));
    // Another contact has its own count; the next UTC day starts over.
    let b = new_address(store, None).await;
    for n in 1..=3 {
        issue(store, &b.id, ADA, "123456", day_start + n).await;
    }
    let CodeIssued::Issued(c) = issue(store, &b.id, ADA, "123456", day_start + DAY).await else {
        panic!("a new day")
    };
    assert_eq!(c.code_mails, 1);
}

pub async fn contacts_are_capped(store: &dyn Store) {
    let a = new_address(store, None).await;
    let limits = Limits {
        max_contacts: 2,
        ..uncapped()
    };
    for email in ["a@example.com", "b@example.com"] {
        store
            .issue_contact_code(&a.id, code(&a.id, email, "123456", T0), &limits, T0)
            .await
            .expect("within the cap");
    }
    assert_eq!(
        store
            .issue_contact_code(
                &a.id,
                code(&a.id, "c@example.com", "123456", T0),
                &limits,
                T0
            )
            .await,
        Err(StoreError::QuotaExceeded)
    );
    // A known contact may get another code.
    store
        .issue_contact_code(
            &a.id,
            code(&a.id, "b@example.com", "654321", T0),
            &limits,
            T0,
        )
        .await
        .expect("a known contact");
    assert_eq!(store.list_contacts(&a.id, T0).await.map(|c| c.len()), Ok(2));
}

/// docs/API.md §16: one recipient mailbox (case-insensitive, `+tag` ignored) is mailed at most
/// `code_mails_per_recipient_per_day` codes a UTC day by all addresses together; past it the
/// code is refused and nothing changes, counts included.
pub async fn code_mails_are_capped_per_recipient_mailbox(store: &dyn Store) {
    let tag = unique();
    let victim = format!("victim-{tag}@example.com");
    let limits = Limits {
        code_mails_per_recipient_per_day: 3,
        ..uncapped()
    };
    let day_start = (T0 / DAY + 1) * DAY;
    let ask = |id: String, email: String, client: String, digits: &'static str, now: Millis| {
        let limits = limits.clone();
        async move {
            store
                .issue_contact_code(
                    &id,
                    code_from(&id, &email, digits, now, &client),
                    &limits,
                    now,
                )
                .await
        }
    };
    // Three addresses, three clients, three spellings of one mailbox: three code mails.
    let mut addresses = Vec::new();
    for (n, email) in [
        victim.clone(),
        format!("victim-{tag}+1@example.com"),
        format!("victim-{tag}+two@example.com"),
    ]
    .into_iter()
    .enumerate()
    {
        let a = new_address(store, None).await;
        let issued = ask(
            a.id.clone(),
            email,
            format!("client-{tag}-{n}"),
            "123456",
            day_start + 1,
        )
        .await;
        assert!(
            matches!(issued, Ok(CodeIssued::Issued(_))),
            "{n}: {issued:?}"
        );
        addresses.push(a.id);
    }
    let refused = Err(StoreError::CodeMailCap {
        cap: super::CodeMailCap::Recipient,
        retry_after_seconds: 86_400,
    });
    // A fourth address: refused, and its contact is not created.
    let d = new_address(store, None).await;
    assert_eq!(
        ask(
            d.id.clone(),
            format!("victim-{tag}+3@example.com"),
            format!("client-{tag}-3"),
            "123456",
            day_start + 2
        )
        .await,
        refused
    );
    assert_eq!(store.list_contacts(&d.id, T0).await, Ok(Vec::new()));
    // A known contact asking again: refused, and its code is not replaced.
    assert_eq!(
        ask(
            addresses[0].clone(),
            victim.clone(),
            format!("client-{tag}-0"),
            "654321",
            day_start + 3
        )
        .await,
        refused
    );
    assert!(matches!(
        check(store, &addresses[0], &victim, "123456", day_start + 4).await,
        CodeCheck::Confirmed(_)
    ));
    // A confirmed contact asked again mails nothing and counts nothing; another mailbox has
    // its own count; the next UTC day starts over.
    assert!(matches!(
        ask(
            addresses[0].clone(),
            victim.clone(),
            format!("client-{tag}-0"),
            "111111",
            day_start + 5
        )
        .await,
        Ok(CodeIssued::AlreadyConfirmed(_))
    ));
    let other = ask(
        d.id.clone(),
        format!("other-{tag}@example.com"),
        format!("client-{tag}-3"),
        "123456",
        day_start + 6,
    )
    .await;
    assert!(matches!(other, Ok(CodeIssued::Issued(_))), "{other:?}");
    let next_day = ask(
        d.id.clone(),
        victim.clone(),
        format!("client-{tag}-3"),
        "123456",
        day_start + DAY,
    )
    .await;
    assert!(
        matches!(next_day, Ok(CodeIssued::Issued(_))),
        "{next_day:?}"
    );
}

/// docs/API.md §16: one client asks for at most `code_mails_per_client_per_day` code mails a
/// UTC day for all addresses together (addresses created from one IP mail few codes); past
/// it nothing changes, and the refused code did not count against its recipient either.
pub async fn code_mails_are_capped_per_client(store: &dyn Store) {
    let tag = unique();
    let client = format!("client-{tag}");
    let limits = Limits {
        code_mails_per_client_per_day: 2,
        code_mails_per_recipient_per_day: 1,
        ..uncapped()
    };
    let day_start = (T0 / DAY + 1) * DAY;
    for n in 0..2 {
        let a = new_address(store, None).await;
        let email = format!("person-{tag}-{n}@example.com");
        let issued = store
            .issue_contact_code(
                &a.id,
                code_from(&a.id, &email, "123456", day_start, &client),
                &limits,
                day_start,
            )
            .await;
        assert!(
            matches!(issued, Ok(CodeIssued::Issued(_))),
            "{n}: {issued:?}"
        );
    }
    let c = new_address(store, None).await;
    let third = format!("person-{tag}-2@example.com");
    assert_eq!(
        store
            .issue_contact_code(
                &c.id,
                code_from(&c.id, &third, "123456", day_start + 1, &client),
                &limits,
                day_start + 1,
            )
            .await,
        Err(StoreError::CodeMailCap {
            cap: super::CodeMailCap::Client,
            retry_after_seconds: 86_400,
        })
    );
    assert_eq!(store.list_contacts(&c.id, T0).await, Ok(Vec::new()));
    // Another client may mail that recipient: the refusal counted nothing against it (its
    // cap is 1 here).
    let other = store
        .issue_contact_code(
            &c.id,
            code_from(
                &c.id,
                &third,
                "123456",
                day_start + 2,
                &format!("other-{tag}"),
            ),
            &limits,
            day_start + 2,
        )
        .await;
    assert!(matches!(other, Ok(CodeIssued::Issued(_))), "{other:?}");
}

pub async fn concurrent_tries_are_each_counted(store: &dyn Store) {
    let a = new_address(store, None).await;
    issue(store, &a.id, ADA, "123456", T0).await;
    let tries = (0..20).map(|n| {
        let guess = format!("{:06}", 900_000 + n);
        let hash = code_hash(&a.id, ADA, &guess);
        let id = a.id.clone();
        async move { store.check_contact_code(&id, ADA, &hash, T0).await }
    });
    let results = futures::future::join_all(tries).await;
    let wrong = results
        .iter()
        .filter(|r| matches!(r, Ok(CodeCheck::Wrong { .. })))
        .count();
    let spent = results
        .iter()
        .filter(|r| matches!(r, Ok(CodeCheck::Spent)))
        .count();
    assert_eq!(
        (wrong, spent),
        (CODE_TRIES as usize, 20 - CODE_TRIES as usize),
        "{results:?}"
    );
    assert_eq!(
        check(store, &a.id, ADA, "123456", T0).await,
        CodeCheck::Spent
    );
}

pub async fn sends_need_a_confirmed_contact(store: &dyn Store) {
    let a = new_address(store, None).await;
    issue(store, &a.id, ADA, "123456", T0).await;
    for to in [ADA, "eve@example.com"] {
        assert_eq!(
            store
                .record_send(
                    &a.id,
                    new_send(&a.id, to, "k", "Hi"),
                    &Limits::default(),
                    T0
                )
                .await,
            Err(StoreError::ContactNotConfirmed),
            "{to}"
        );
    }
    assert_eq!(
        store.last_sequence(&a.id, T0).await,
        Ok(0),
        "nothing appended"
    );
    assert_eq!(store.due_sends(T0 + DAY, 100).await.map(|d| d.len()), Ok(0));
}

pub async fn a_send_is_recorded_once_per_key(store: &dyn Store) {
    let id = with_confirmed_contact(store).await;
    let limits = Limits::default();
    let send = new_send(&id, ADA, "key-1", "Hello");
    let message = send.message.clone();
    let send_id = send.id.clone();
    let first = store
        .record_send(&id, send, &limits, T0 + SEC)
        .await
        .expect("record");
    assert!(!first.duplicate);
    assert_eq!(first.send_id, send_id);
    assert_eq!(first.status, SendStatus::Pending);
    let e = store
        .get_event(&id, &first.event.id, T0 + SEC)
        .await
        .expect("the email.sent event");
    assert_eq!(e.event_type, "email.sent");
    assert_eq!(e.ingress, Ingress::Outbound);
    let data: Value = serde_json::from_str(&e.data).expect("JSON");
    assert_eq!(data["to"], ADA);
    assert_eq!(data["subject"], "Hello");
    assert_eq!(data["message_id"], message.message_id.as_str());

    // The same key and body: that send again, nothing new.
    let again = store
        .record_send(
            &id,
            new_send(&id, ADA, "key-1", "Hello"),
            &limits,
            T0 + 2 * SEC,
        )
        .await
        .expect("again");
    assert!(again.duplicate);
    assert_eq!(
        (again.event, again.send_id),
        (first.event.clone(), send_id.clone())
    );
    assert_eq!(store.last_sequence(&id, T0).await, Ok(first.event.sequence));
    // The same key, another body.
    assert_eq!(
        store
            .record_send(
                &id,
                new_send(&id, ADA, "key-1", "Other"),
                &limits,
                T0 + 2 * SEC
            )
            .await,
        Err(StoreError::IdempotencyKeyReused)
    );
    // Claimed once, with the message as recorded.
    let claimed = store
        .claim_send(&id, &send_id, T0 + 60 * SEC, T0 + 3 * SEC)
        .await
        .expect("claim")
        .expect("a pending send is claimed");
    assert_eq!(claimed.message, message);
    assert_eq!(claimed.attempts, 1);
    assert_eq!(claimed.event, first.event);
    assert_eq!(
        store
            .claim_send(&id, &send_id, T0 + 60 * SEC, T0 + 4 * SEC)
            .await,
        Ok(None),
        "held by the first attempt"
    );
    store
        .finish_send(&id, &send_id, SendOutcome::Sent, &limits, T0 + 5 * SEC)
        .await
        .expect("finish");
    assert_eq!(
        store.claim_send(&id, &send_id, T0 + DAY, T0 + DAY).await,
        Ok(None),
        "a sent send is never claimed again"
    );
    let dup = store
        .record_send(
            &id,
            new_send(&id, ADA, "key-1", "Hello"),
            &limits,
            T0 + 6 * SEC,
        )
        .await
        .expect("again after sending");
    assert_eq!((dup.duplicate, dup.status), (true, SendStatus::Sent));
    assert_eq!(store.due_sends(T0 + DAY, 100).await.map(|d| d.len()), Ok(0));
}

pub async fn sends_are_limited_per_day(store: &dyn Store) {
    let id = with_confirmed_contact(store).await;
    let limits = Limits {
        sends_per_day: 2,
        ..Limits::default()
    };
    let day_start = (T0 / DAY + 1) * DAY;
    for n in 0..2 {
        store
            .record_send(
                &id,
                new_send(&id, ADA, &format!("k{n}"), "Hi"),
                &limits,
                day_start,
            )
            .await
            .expect("within the limit");
    }
    let before = store.last_sequence(&id, day_start).await;
    assert_eq!(
        store
            .record_send(
                &id,
                new_send(&id, ADA, "k2", "Hi"),
                &limits,
                day_start + 1_000
            )
            .await,
        Err(StoreError::DailyLimit {
            retry_after_seconds: 86_399
        })
    );
    assert_eq!(
        store.last_sequence(&id, day_start).await,
        before,
        "nothing appended"
    );
    // A retry of an accepted send is still answered.
    let dup = store
        .record_send(
            &id,
            new_send(&id, ADA, "k0", "Hi"),
            &limits,
            day_start + 2_000,
        )
        .await
        .expect("a duplicate");
    assert!(dup.duplicate);
    store
        .record_send(
            &id,
            new_send(&id, ADA, "k2", "Hi"),
            &limits,
            day_start + DAY,
        )
        .await
        .expect("the next UTC day");
}

pub async fn sends_need_two_free_feed_slots(store: &dyn Store) {
    let id = with_confirmed_contact(store).await;
    let limits = Limits {
        max_retained_events: 3,
        ..Limits::default()
    };
    let event = |n: u32| NewEvent {
        event_type: "test.event".into(),
        source: None,
        ingress: Ingress::Http,
        data: format!("{{\"n\":{n}}}"),
        http: None,
    };
    store
        .append_event(&id, event(1), None, &limits, T0)
        .await
        .expect("one");
    store
        .record_send(&id, new_send(&id, ADA, "a", "Hi"), &limits, T0)
        .await
        .expect("two slots free: events 2 and 3");
    assert_eq!(
        store
            .record_send(&id, new_send(&id, ADA, "b", "Hi"), &limits, T0)
            .await,
        Err(StoreError::QuotaExceeded),
        "one slot free"
    );
    assert_eq!(store.last_sequence(&id, T0).await, Ok(2));
}

pub async fn a_send_is_claimed_retried_and_failed(store: &dyn Store) {
    let id = with_confirmed_contact(store).await;
    let limits = Limits {
        max_retained_events: 2,
        ..Limits::default()
    };
    let send = new_send(&id, ADA, "k", "Hi");
    let send_id = send.id.clone();
    let recorded = store
        .record_send(&id, send, &limits, T0)
        .await
        .expect("record");
    assert_eq!(
        store
            .claim_send(&id, &send_id, T0 + 60 * SEC, T0)
            .await
            .map(|s| s.map(|s| s.attempts)),
        Ok(Some(1))
    );
    store
        .finish_send(
            &id,
            &send_id,
            SendOutcome::Retry {
                next_attempt_at: T0 + 30 * SEC,
                error: "421 try later".into(),
            },
            &limits,
            T0 + SEC,
        )
        .await
        .expect("retry");
    assert_eq!(
        store
            .claim_send(&id, &send_id, T0 + DAY, T0 + 29 * SEC)
            .await,
        Ok(None),
        "not due yet"
    );
    let second = store
        .claim_send(&id, &send_id, T0 + 90 * SEC, T0 + 30 * SEC)
        .await
        .expect("claim")
        .expect("due");
    assert_eq!(second.attempts, 2);
    assert_eq!(second.last_error.as_deref(), Some("421 try later"));
    // Fill the feed: the failure is reported all the same.
    store
        .append_event(
            &id,
            NewEvent {
                event_type: "x".into(),
                source: None,
                ingress: Ingress::Http,
                data: "{}".into(),
                http: None,
            },
            None,
            &limits,
            T0 + 31 * SEC,
        )
        .await
        .expect("the second slot");
    store
        .finish_send(
            &id,
            &send_id,
            SendOutcome::Failed {
                error: "550 no such user".into(),
                event: failed_event("550 no such user"),
            },
            &limits,
            T0 + 32 * SEC,
        )
        .await
        .expect("fail");
    let page = store
        .read_events(&id, recorded.event.sequence, 10, u64::MAX, T0 + 33 * SEC)
        .await
        .expect("read");
    let types: Vec<&str> = page.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["x", "email.send_failed"]);
    assert_eq!(
        store.claim_send(&id, &send_id, T0 + DAY, T0 + DAY).await,
        Ok(None),
        "a failed send is never claimed again"
    );
    // Finishing again changes nothing.
    store
        .finish_send(
            &id,
            &send_id,
            SendOutcome::Failed {
                error: "again".into(),
                event: failed_event("again"),
            },
            &limits,
            T0 + 34 * SEC,
        )
        .await
        .expect("finish a finished send");
    assert_eq!(
        store.last_sequence(&id, T0).await,
        Ok(recorded.event.sequence + 2)
    );
}

pub async fn a_lost_attempt_is_claimed_again_after_its_lease(store: &dyn Store) {
    let id = with_confirmed_contact(store).await;
    let send = new_send(&id, ADA, "k", "Hi");
    let send_id = send.id.clone();
    store
        .record_send(&id, send, &Limits::default(), T0)
        .await
        .expect("record");
    store
        .claim_send(&id, &send_id, T0 + 60 * SEC, T0)
        .await
        .expect("claim")
        .expect("first");
    assert_eq!(
        store
            .claim_send(&id, &send_id, T0 + 120 * SEC, T0 + 59 * SEC)
            .await,
        Ok(None)
    );
    let again = store
        .claim_send(&id, &send_id, T0 + 120 * SEC, T0 + 60 * SEC)
        .await
        .expect("claim")
        .expect("the lease is over");
    assert_eq!(again.attempts, 2);
}

pub async fn outbound_goes_with_its_address(store: &dyn Store) {
    let id = with_confirmed_contact(store).await;
    let send = new_send(&id, ADA, "k", "Hi");
    let send_id = send.id.clone();
    store
        .record_send(&id, send, &Limits::default(), T0)
        .await
        .expect("record");
    store.delete_address(&id, T0 + SEC).await.expect("delete");
    let now = T0 + 2 * SEC;
    assert_eq!(
        store.list_contacts(&id, now).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(
        store.claim_send(&id, &send_id, now + SEC, now).await,
        Err(StoreError::AddressGone),
        "nothing is sent for a deleted address"
    );
    assert_eq!(
        store
            .issue_contact_code(&id, code(&id, ADA, "123456", now), &uncapped(), now)
            .await,
        Err(StoreError::AddressGone)
    );
    assert!(store
        .due_sends(now, 100)
        .await
        .expect("due")
        .iter()
        .all(|(a, _)| a != &id));
}

pub async fn a_send_reads_back_in_every_state(store: &dyn Store) {
    let id = with_confirmed_contact(store).await;
    let limits = Limits::default();
    assert_eq!(store.get_send(&id, "snd_none", T0).await, Ok(None));
    let send = new_send(&id, ADA, "k", "Hi");
    let (send_id, message) = (send.id.clone(), send.message.clone());
    let recorded = store
        .record_send(&id, send, &limits, T0)
        .await
        .expect("record");
    let read = store
        .get_send(&id, &send_id, T0)
        .await
        .expect("read")
        .expect("the send");
    assert_eq!(read.status, SendStatus::Pending);
    assert_eq!((read.attempts, read.lease_until), (0, None));
    assert_eq!(read.message, message);
    assert_eq!(read.event, recorded.event);
    store
        .claim_send(&id, &send_id, T0 + 60 * SEC, T0)
        .await
        .expect("claim")
        .expect("claimed");
    let held = store
        .get_send(&id, &send_id, T0)
        .await
        .expect("read")
        .expect("the send");
    assert_eq!((held.attempts, held.lease_until), (1, Some(T0 + 60 * SEC)));
    store
        .finish_send(
            &id,
            &send_id,
            SendOutcome::Retry {
                next_attempt_at: T0 + 120 * SEC,
                error: "451 later".into(),
            },
            &limits,
            T0 + SEC,
        )
        .await
        .expect("retry");
    let later = store
        .get_send(&id, &send_id, T0 + SEC)
        .await
        .expect("read")
        .expect("the send");
    assert_eq!(later.status, SendStatus::Pending);
    assert_eq!(later.next_attempt_at, Some(T0 + 120 * SEC));
    assert_eq!(later.lease_until, None);
    assert_eq!(later.last_error.as_deref(), Some("451 later"));
    store
        .claim_send(&id, &send_id, T0 + 180 * SEC, T0 + 120 * SEC)
        .await
        .expect("claim")
        .expect("due");
    store
        .finish_send(&id, &send_id, SendOutcome::Sent, &limits, T0 + 121 * SEC)
        .await
        .expect("sent");
    let sent = store
        .get_send(&id, &send_id, T0 + 122 * SEC)
        .await
        .expect("read")
        .expect("the send");
    assert_eq!((sent.status, sent.attempts), (SendStatus::Sent, 2));
    // Another address's send is not found.
    let other = new_address(store, None).await;
    assert_eq!(store.get_send(&other.id, &send_id, T0).await, Ok(None));
}
