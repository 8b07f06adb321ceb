//! The Store conformance suite on DynamoDB Local, plus DynamoDB-only behaviour (purge).
//!
//! `scripts/test` starts DynamoDB Local, creates a fresh table for the run with the project's
//! resource script, and passes its name in `AGENTADDRESS_TEST_TABLE` (endpoints come through
//! the SDK's own `AWS_ENDPOINT_URL_DYNAMODB`). Without them these tests fail loudly: they
//! never skip.

use agentaddress_core::store::prelude::*;
use std::sync::Arc;

use agentaddress_aws::DynamoStore;
use agentaddress_core::domain::{ids, Millis};
use agentaddress_core::store::conformance::T0;
use agentaddress_core::store::NewAddress;

/// A new address `id` created at `T0` (email `{id}@x.test`, no signing secret).
fn new_address(id: &str, expires_at: Option<Millis>) -> NewAddress {
    NewAddress {
        id: id.to_owned(),
        name: None,
        task_id: None,
        email: format!("{id}@x.test"),
        created_at: T0,
        expires_at,
        token_hash: ids::hash_secret("t"),
        inbox_hash: ids::hash_secret("i"),
        verification: None,
        email_policy: None,
        hooks: Vec::new(),
    }
}

fn table() -> String {
    match std::env::var("AGENTADDRESS_TEST_TABLE") {
        Ok(t) if !t.is_empty() => t,
        _ => panic!(
            "AGENTADDRESS_TEST_TABLE is not set: run scripts/test, which starts DynamoDB Local \
             and creates a fresh table"
        ),
    }
}

async fn dynamo() -> DynamoStore {
    if std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_err()
        && std::env::var("AWS_ENDPOINT_URL").is_err()
    {
        panic!("no DynamoDB endpoint: run scripts/test (it exports AWS_ENDPOINT_URL_DYNAMODB)");
    }
    DynamoStore::new(DynamoStore::client_from_env().await, table(), 30 * 86_400)
}

async fn make() -> Arc<dyn Store> {
    Arc::new(dynamo().await)
}

/// The test run's email bucket on the S3 emulator (`AGENTADDRESS_TEST_BUCKET`, created by
/// `scripts/test` with the resource script; the endpoint is the SDK's `AWS_ENDPOINT_URL_S3`).
fn bucket() -> String {
    match std::env::var("AGENTADDRESS_TEST_BUCKET") {
        Ok(b) if !b.is_empty() => b,
        _ => panic!(
            "AGENTADDRESS_TEST_BUCKET is not set: run scripts/test, which starts the S3 \
             emulator and creates a fresh bucket"
        ),
    }
}

async fn dynamo_with_bucket() -> DynamoStore {
    let sdk = agentaddress_aws::sdk_config().await;
    dynamo()
        .await
        .with_email_bucket(agentaddress_aws::EmailBucket::shared(&sdk, bucket()))
}

async fn make_with_bucket() -> Arc<dyn Store> {
    Arc::new(dynamo_with_bucket().await)
}

mod conformance {
    agentaddress_core::store_conformance_tests!(super::make().await);
}

mod email_conformance {
    agentaddress_core::store_email_conformance_tests!(super::make_with_bucket().await);
}

mod request_conformance {
    agentaddress_core::store_request_conformance_tests!(super::make().await);
}

mod outbound_conformance {
    agentaddress_core::store_outbound_conformance_tests!(super::make().await);
}

mod viewer_conformance {
    agentaddress_core::store_viewer_conformance_tests!(super::make().await);
}

mod hook_conformance {
    agentaddress_core::store_hook_conformance_tests!(super::make().await);
}

mod timer_conformance {
    agentaddress_core::store_timer_conformance_tests!(super::make().await);
}

mod dynamodb_only {
    use agentaddress_aws::handle_purge_message;
    use agentaddress_core::domain::{ids, mail_out, Ingress, Limits};
    use agentaddress_core::store::conformance::T0;
    use agentaddress_core::store::outbound_conformance::new_send;
    use agentaddress_core::store::request_conformance::new_request;
    use agentaddress_core::store::{
        prelude::*, Answer, IdempotencyClaim, NewCode, NewEvent, StoreError,
    };
    use aws_sdk_dynamodb::types::AttributeValue;

    async fn items_of(store: &super::DynamoStore, id: &str) -> Vec<String> {
        let client = super::DynamoStore::client_from_env().await;
        let out = client
            .query()
            .table_name(store.table())
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(format!("A#{id}")))
            .consistent_read(true)
            .send()
            .await
            .expect("query the partition");
        out.items()
            .iter()
            .filter_map(|i| i.get("sk").and_then(|v| v.as_s().ok()).cloned())
            .collect()
    }

    async fn request_item_exists(store: &super::DynamoStore, request_id: &str) -> bool {
        let client = super::DynamoStore::client_from_env().await;
        client
            .get_item()
            .table_name(store.table())
            .key("pk", AttributeValue::S(format!("Q#{request_id}")))
            .key("sk", AttributeValue::S("Q".into()))
            .consistent_read(true)
            .send()
            .await
            .expect("get the request item")
            .item
            .is_some()
    }

    /// What the table keeps of a viewer sign-in code (docs/API.md §13): an item keyed by the
    /// code's hash, with the token sealed, a TTL, and neither the code nor the token; a redeem
    /// marks it used.
    #[tokio::test]
    async fn a_viewer_code_item_reveals_neither_code_nor_token() {
        use agentaddress_core::domain::viewer;
        use agentaddress_core::store::NewViewerCode;
        let store = super::dynamo().await;
        let id = ids::new_address_id();
        store
            .create_address(super::new_address(&id, None))
            .await
            .expect("create");
        let code = viewer::new_viewer_code();
        let token = ids::new_read_token();
        let new = NewViewerCode {
            code_hash: viewer::code_hash(&code),
            sealed_token: viewer::seal_token(&code, &id, &token).expect("seal"),
            created_at: T0,
            expires_at: T0 + viewer::VIEWER_CODE_VALID_MS,
        };
        store
            .create_viewer_code(&id, new.clone(), T0)
            .await
            .expect("store the code");
        let client = super::DynamoStore::client_from_env().await;
        let get = || async {
            client
                .get_item()
                .table_name(store.table())
                .key("pk", AttributeValue::S(format!("V#{}", new.code_hash)))
                .key("sk", AttributeValue::S("V".into()))
                .consistent_read(true)
                .send()
                .await
                .expect("get the code's item")
                .item
                .expect("the code's item exists")
        };
        let item = get().await;
        let text = format!("{item:?}");
        assert!(!text.contains(&code) && !text.contains(&token), "{text}");
        assert!(
            !text.contains(&token[4..]),
            "no plain part of the token: {text}"
        );
        let ttl = item.get("ttl").and_then(|v| v.as_n().ok()).cloned();
        assert_eq!(ttl, Some(((new.expires_at + 999) / 1000).to_string()));
        assert!(!item.contains_key("used_at"));
        let got = store
            .redeem_viewer_code(&new.code_hash, T0 + 1)
            .await
            .expect("redeem");
        assert_eq!(got.map(|r| r.address_id), Some(id.clone()));
        assert!(get().await.contains_key("used_at"), "marked used");
    }

    #[tokio::test]
    async fn purge_removes_everything_but_the_tombstone() {
        let store = super::dynamo().await;
        let limits = Limits::default();
        let id = ids::new_address_id();
        store
            .create_address(super::new_address(&id, None))
            .await
            .expect("create");
        let big = format!("\"{}\"", "x".repeat(700_000));
        for n in 0..30 {
            let data = if n == 0 { big.clone() } else { n.to_string() };
            let event = NewEvent {
                event_type: "t".into(),
                source: None,
                ingress: Ingress::Http,
                data,
                http: None,
            };
            let claim = IdempotencyClaim {
                key_hash: ids::sha256_hex(format!("k{n}").as_bytes()),
                body_hash: "b".into(),
            };
            store
                .append_event(&id, event, Some(claim), &limits, T0)
                .await
                .expect("append");
        }
        store
            .put_state(&id, "k", "1".into(), None, &limits, T0)
            .await
            .expect("put");
        // Outbound email (docs/API.md §16): a confirmed contact, one send with its key record
        // and its day's count, all in the partition.
        let ada = "ada@example.com";
        let code = NewCode {
            email: ada.into(),
            code_hash: mail_out::code_hash(&id, ada, "123456"),
            expires_at: T0 + mail_out::CODE_VALID_MS,
            client: "192.0.2.1".into(),
        };
        // Without the server-wide caps on code mails: the table is shared with every case of
        // the run, many of which mail `ada` (its counts live outside the partition).
        let uncapped = Limits {
            code_mails_per_recipient_per_day: 1_000_000_000,
            code_mails_per_client_per_day: 1_000_000_000,
            ..limits.clone()
        };
        store
            .issue_contact_code(&id, code.clone(), &uncapped, T0)
            .await
            .expect("issue a code");
        store
            .check_contact_code(&id, ada, &code.code_hash, T0)
            .await
            .expect("confirm");
        let send = new_send(&id, ada, "send-key", "Hi");
        let send_id = send.id.clone();
        store
            .record_send(&id, send, &limits, T0)
            .await
            .expect("record a send");
        // Requests for a person: their items live outside the partition.
        let mut requests = Vec::new();
        for claim in [None, Some(("k", "body"))] {
            let r = new_request(3_600_000, claim);
            requests.push(r.id.clone());
            store
                .create_request(&id, r, &limits, T0)
                .await
                .expect("create request");
        }
        // Two more, closed: one answered, one expired. A closed request's entry moves from the
        // open ones (`Q#`, what every request step reads) to the closed ones (`QX#`).
        let answered = new_request(3_600_000, None);
        let expired = new_request(60_000, None);
        for r in [answered.clone(), expired.clone()] {
            requests.push(r.id.clone());
            store
                .create_request(&id, r, &limits, T0)
                .await
                .expect("create request");
        }
        let answer = Answer {
            choice: "Approve".into(),
            comment: None,
            answered_at: T0 + 1,
        };
        store
            .answer_request(&answered.id, answer, &limits, T0 + 1)
            .await
            .expect("answer");
        assert_eq!(
            store
                .expire_requests(&id, &limits, T0 + 60_000)
                .await
                .expect("expire"),
            1
        );
        for r in &requests {
            assert!(request_item_exists(&store, r).await, "request {r} stored");
        }
        let before = items_of(&store, &id).await;
        for closed in [&answered.id, &expired.id] {
            assert!(before.contains(&format!("QX#{closed}")), "{before:?}");
            assert!(!before.contains(&format!("Q#{closed}")), "{before:?}");
        }
        let open: Vec<&String> = before.iter().filter(|sk| sk.starts_with("Q#")).collect();
        assert_eq!(open.len(), 2, "only the open requests' entries: {before:?}");
        assert!(
            before.iter().any(|sk| sk.contains("#001")),
            "the big event was chunked: {before:?}"
        );
        for sk in [
            format!("C#{ada}"),
            format!("O#{send_id}"),
            format!("OK#{}", ids::sha256_hex(b"send-key")),
            format!("OD#{}", mail_out::utc_day(T0)),
        ] {
            assert!(before.contains(&sk), "{sk} stored: {before:?}");
        }
        assert!(before.len() >= 31 + 30 + 1 + 1 + 4 + 4);
        assert!(
            handle_purge_message(
                &store,
                &format!("{{\"address_id\":\"{id}\"}}"),
                1,
                &agentaddress_core::domain::Limits::default(),
                T0
            )
            .await
            .is_err(),
            "a live address is never purged"
        );
        store.delete_address(&id, T0).await.expect("delete");
        let mut done = false;
        for _ in 0..10 {
            let p = store.purge_address(&id, 25, T0).await.expect("purge step");
            if p.done {
                done = true;
                break;
            }
        }
        assert!(done, "purge finishes in bounded steps");
        assert_eq!(items_of(&store, &id).await, vec!["META".to_owned()]);
        for r in &requests {
            assert!(
                !request_item_exists(&store, r).await,
                "request {r} purged with its address"
            );
        }
        assert_eq!(
            store.read_events(&id, 0, 10, 1 << 22, T0).await.map(|_| ()),
            Err(StoreError::AddressGone)
        );
        assert!(handle_purge_message(
            &store,
            "not json",
            1,
            &agentaddress_core::domain::Limits::default(),
            T0
        )
        .await
        .is_err());
    }

    /// A timer watch (docs/API.md §20) on a store with a purge queue: what a new timer arms, and
    /// what a watch message that falls due does.
    mod timer_watches {
        use std::sync::Arc;
        use std::time::Duration;

        use agentaddress_aws::{handle_purge_message, DynamoStore, PurgeMessage};
        use agentaddress_core::domain::{ids, Limits, Millis};
        use agentaddress_core::store::conformance::T0;
        use agentaddress_core::store::timer_conformance::new_timer;
        use agentaddress_core::store::{prelude::*, NewTimer, TimerStatus};

        use crate::expiry_watches::{taken, Queue};

        const SEC: Millis = 1_000;
        const HOUR: Millis = 3_600_000;

        async fn store_with_queue() -> (DynamoStore, Arc<Queue>, String) {
            let queue = Arc::new(Queue::default());
            let store = crate::dynamo().await.with_purge_queue(queue.clone());
            let id = ids::new_address_id();
            store
                .create_address(crate::new_address(&id, None))
                .await
                .expect("create");
            (store, queue, id)
        }

        async fn create(store: &DynamoStore, id: &str, t: NewTimer, now: Millis) -> String {
            store
                .create_timer(id, t, &Limits::default(), now)
                .await
                .expect("create timer")
                .timer
                .id
        }

        /// The timer ids of the address's timer events, in feed order.
        async fn fired(store: &DynamoStore, id: &str, now: Millis) -> Vec<String> {
            store
                .read_events(id, 0, 100, u64::MAX, now)
                .await
                .expect("read")
                .events
                .iter()
                .filter(|e| e.source.as_deref() == Some("timer"))
                .map(|e| {
                    let data: serde_json::Value = serde_json::from_str(&e.data).expect("json");
                    data["timer_id"].as_str().unwrap_or_default().to_owned()
                })
                .collect()
        }

        /// The one message sent since the last look: a timer watch of `id` due at `due`, sent
        /// at `now`; its body.
        fn one_watch(q: &Queue, id: &str, due: Millis, now: Millis) -> String {
            let sent = taken(q);
            let delay = u64::try_from((due - now) / 1000).expect("delay");
            assert_eq!(
                sent,
                vec![(
                    PurgeMessage::timer_watch(id, due),
                    Duration::from_secs(delay)
                )]
            );
            sent[0].0.to_body()
        }

        #[tokio::test]
        async fn a_timer_watch_fires_the_due_timer_once_and_moves_on() {
            let (store, queue, id) = store_with_queue().await;
            let limits = Limits::default();
            let soon = create(&store, &id, new_timer(10 * SEC, None), T0).await;
            let body = one_watch(&queue, &id, T0 + 10 * SEC, T0);
            // A later timer arms nothing: the pending watch falls due first.
            let later = create(&store, &id, new_timer(2 * HOUR, None), T0 + SEC).await;
            assert!(taken(&queue).is_empty());

            // The watch falls due (a little late): the timer fires, and the watch goes on
            // toward the next one, by SQS's longest delay.
            let now = T0 + 10 * SEC + 300;
            let progress = handle_purge_message(&store, &body, 8, &limits, now)
                .await
                .expect("watch");
            assert!(progress.done && progress.deleted_items == 0);
            assert_eq!(fired(&store, &id, now).await, vec![soon.clone()]);
            let next = one_watch(&queue, &id, now + 900 * SEC, now);
            let record = store.get_address(&id, now).await.expect("get").expect("a");
            assert_eq!(record.next_timer_at, Some(T0 + 2 * HOUR));

            // The same message again (SQS delivers at least once): nothing fires, nothing is
            // sent.
            handle_purge_message(&store, &body, 8, &limits, now + SEC)
                .await
                .expect("duplicate");
            assert_eq!(fired(&store, &id, now + SEC).await, vec![soon.clone()]);
            assert!(taken(&queue).is_empty(), "no second chain");

            // The hops reach the later timer; it fires once, and the watch ends.
            let mut body = next;
            let mut at = now + 900 * SEC;
            while at < T0 + 2 * HOUR {
                handle_purge_message(&store, &body, 8, &limits, at)
                    .await
                    .expect("hop");
                let due = (at + 900 * SEC).min(T0 + 2 * HOUR);
                // Whole seconds, never early.
                let due = at + (due - at + 999) / 1000 * 1000;
                body = one_watch(&queue, &id, due, at);
                at = due;
            }
            handle_purge_message(&store, &body, 8, &limits, at)
                .await
                .expect("last");
            assert_eq!(
                fired(&store, &id, at).await,
                vec![soon.clone(), later.clone()]
            );
            assert!(taken(&queue).is_empty(), "nothing pending: the watch ends");
            let listed = store.list_timers(&id, at).await.expect("list");
            assert!(listed.iter().all(|t| t.status == TimerStatus::Fired));
            assert_eq!(listed.len(), 2);

            // A new timer after the watch ended arms it again.
            create(&store, &id, new_timer(3 * HOUR, None), at).await;
            one_watch(&queue, &id, at + 900 * SEC, at);
        }

        #[tokio::test]
        async fn an_earlier_timer_supersedes_the_pending_watch() {
            let (store, queue, id) = store_with_queue().await;
            let limits = Limits::default();
            create(&store, &id, new_timer(2 * HOUR, None), T0).await;
            let hop = one_watch(&queue, &id, T0 + 900 * SEC, T0);
            let soon = create(&store, &id, new_timer(5 * SEC, None), T0).await;
            let first = one_watch(&queue, &id, T0 + 5 * SEC, T0);
            handle_purge_message(&store, &first, 8, &limits, T0 + 5 * SEC)
                .await
                .expect("watch");
            assert_eq!(fired(&store, &id, T0 + 5 * SEC).await, vec![soon]);
            one_watch(&queue, &id, T0 + 905 * SEC, T0 + 5 * SEC);
            // The superseded message falls due: it ends there.
            handle_purge_message(&store, &hop, 8, &limits, T0 + 900 * SEC)
                .await
                .expect("superseded");
            assert!(taken(&queue).is_empty());
            // A cancelled timer's watch finds nothing and ends.
            let (store, queue, id) = store_with_queue().await;
            let t = create(&store, &id, new_timer(20 * SEC, None), T0).await;
            let body = one_watch(&queue, &id, T0 + 20 * SEC, T0);
            store.cancel_timer(&id, &t, T0 + SEC).await.expect("cancel");
            handle_purge_message(&store, &body, 8, &limits, T0 + 20 * SEC)
                .await
                .expect("watch");
            assert!(taken(&queue).is_empty());
            assert!(fired(&store, &id, T0 + 20 * SEC).await.is_empty());
        }

        /// Every item a timer leaves in the partition goes with its address.
        #[tokio::test]
        async fn purge_removes_every_timer_item() {
            let (store, _queue, id) = store_with_queue().await;
            let limits = Limits::default();
            create(&store, &id, new_timer(HOUR, Some(("k", "b"))), T0).await;
            let cancelled = create(&store, &id, new_timer(HOUR, None), T0).await;
            create(&store, &id, new_timer(SEC, None), T0).await;
            store
                .cancel_timer(&id, &cancelled, T0 + 1)
                .await
                .expect("cancel");
            assert_eq!(store.fire_timers(&id, &limits, T0 + SEC).await, Ok(1));
            let before = super::items_of(&store, &id).await;
            for prefix in ["T#", "TX#", "TC#", "TK#", "WN"] {
                assert!(
                    before.iter().any(|sk| sk.starts_with(prefix)),
                    "{prefix}: {before:?}"
                );
            }
            assert_eq!(
                before.iter().filter(|sk| sk.starts_with("T#")).count(),
                1,
                "only the pending timer's item is pending: {before:?}"
            );
            store
                .delete_address(&id, T0 + 2 * SEC)
                .await
                .expect("delete");
            let p = store
                .purge_address(&id, 500, T0 + 2 * SEC)
                .await
                .expect("purge");
            assert!(p.done);
            assert_eq!(super::items_of(&store, &id).await, vec!["META".to_owned()]);
        }
    }
}

/// Email keys on DynamoDB: the key item, addresses created before it (no key item), and the
/// key item of a purged address.
mod email_keys {
    use agentaddress_core::domain::ids;
    use agentaddress_core::store::conformance::T0;
    use agentaddress_core::store::{prelude::*, NewAddress};
    use aws_sdk_dynamodb::types::AttributeValue;

    fn text(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    async fn key_item(
        table: &str, email: &str,
    ) -> Option<std::collections::HashMap<String, AttributeValue>> {
        let client = super::DynamoStore::client_from_env().await;
        client
            .get_item()
            .table_name(table)
            .key("pk", text(&format!("E#{}", ids::email_key(email))))
            .key("sk", text("E"))
            .consistent_read(true)
            .send()
            .await
            .expect("get the key item")
            .item
    }

    #[tokio::test]
    async fn a_legacy_address_is_found_by_its_exact_local_part() {
        let store = super::dynamo().await;
        let id = ids::new_address_id();
        let email = format!("{id}@Inbox.Test");
        // An address as created before email keys: its META alone.
        let client = super::DynamoStore::client_from_env().await;
        client
            .put_item()
            .table_name(store.table())
            .item("pk", text(&format!("A#{id}")))
            .item("sk", text("META"))
            .item("id", text(&id))
            .item("email", text(&email))
            .item("created_at", AttributeValue::N(T0.to_string()))
            .item("token_hash", text(&ids::hash_secret("t")))
            .item("inbox_hash", text(&ids::hash_secret("i")))
            .item("seq", AttributeValue::N("0".into()))
            .item("state_keys", AttributeValue::N("0".into()))
            .item("state_bytes", AttributeValue::N("0".into()))
            .send()
            .await
            .expect("a legacy META");
        assert!(key_item(store.table(), &email).await.is_none());
        for written in [email.clone(), format!("{id}@INBOX.TEST")] {
            let found = store
                .address_by_email(&written, T0)
                .await
                .expect("lookup")
                .expect("found by the local part as the id");
            assert_eq!(
                (found.id.as_str(), found.email.as_str()),
                (id.as_str(), email.as_str())
            );
        }
        assert_eq!(
            store
                .address_by_email(&format!("{}@inbox.test", id.to_uppercase()), T0)
                .await
                .expect("lookup"),
            None,
            "without a key item, a changed case of the id is not found (documented)"
        );
        assert_eq!(
            store
                .address_by_email(&format!("{id}@other.test"), T0)
                .await
                .expect("lookup"),
            None,
            "the META counts only if its own email has the key"
        );
    }

    #[tokio::test]
    async fn a_purged_address_keeps_its_key_until_the_tombstone_goes() {
        let store = super::dynamo().await;
        let id = ids::new_address_id();
        let email = format!("{id}@x.test");
        store
            .create_address(NewAddress {
                email: email.clone(),
                ..super::new_address(&id, None)
            })
            .await
            .expect("create");
        let item = key_item(store.table(), &email).await.expect("a key item");
        assert_eq!(item.get("address_id"), Some(&text(&id)));
        assert!(!item.contains_key("ttl"), "no expiry, no TTL");
        store.delete_address(&id, T0).await.expect("delete");
        let progress = store.purge_address(&id, 25, T0).await.expect("purge");
        assert!(progress.done);
        let item = key_item(store.table(), &email)
            .await
            .expect("the key item stays with the tombstone");
        let tombstone_ttl = (T0 + 30 * 86_400_000) / 1000;
        assert_eq!(
            item.get("ttl"),
            Some(&AttributeValue::N(tombstone_ttl.to_string()))
        );
        let found = store
            .address_by_email(&email.to_uppercase(), T0 + 1)
            .await
            .expect("lookup")
            .expect("the tombstone is found");
        assert_eq!(found.deleted_at, Some(T0));
        assert_eq!(
            store
                .address_by_email(&email, tombstone_ttl * 1000 + 1)
                .await
                .expect("lookup"),
            None,
            "forgotten with the tombstone"
        );
    }
}

/// The Lambda functions' SDK configuration (`lambda_sdk_config`: the region, credentials and
/// endpoints of the environment only) reaches the same table, and an address written through
/// it reads back through the default chain's configuration.
mod lambda_config {
    use agentaddress_aws::{lambda_sdk_config, AwsConfig, DynamoStore};
    use agentaddress_core::domain::{ids, Limits};
    use agentaddress_core::store::conformance::T0;
    use agentaddress_core::store::{email_conformance, prelude::*, NewAddress};

    #[tokio::test]
    async fn reaches_the_table_from_the_environment_alone() {
        let _ = super::dynamo().await; // the same loud checks of the environment
        let sdk = lambda_sdk_config().await;
        assert_eq!(
            sdk.region().map(|r| r.as_ref().to_owned()),
            std::env::var("AWS_REGION").ok(),
            "the region is AWS_REGION"
        );
        let aws = AwsConfig {
            table: super::table(),
            purge_queue_url: None,
            email_bucket: Some(super::bucket()),
            ws_management_url: None,
            wake_queue_url: None,
        };
        let lean = aws.store_with(&sdk, 30 * 86_400).with_email_bucket(
            aws.email_bucket_with(&sdk)
                .expect("the email bucket of the configuration"),
        );
        let id = ids::new_address_id();
        lean.create_address(NewAddress {
            name: Some("lean".into()),
            ..super::new_address(&id, None)
        })
        .await
        .expect("create through the Lambda configuration");
        let full = DynamoStore::new(DynamoStore::client_from_env().await, super::table(), 86_400);
        let read = full
            .get_address(&id, T0)
            .await
            .expect("read")
            .expect("the address is there");
        assert_eq!(read.name.as_deref(), Some("lean"));
        // The email bucket too (S3 through AWS_ENDPOINT_URL_S3 alone).
        let raw = b"Subject: lean\r\n\r\nbody\r\n".to_vec();
        let appended = lean
            .append_email(
                &id,
                email_conformance::email("eml_lean", raw.clone()),
                &Limits::default(),
                T0,
            )
            .await
            .expect("append an email through the Lambda configuration");
        let stored = lean
            .email_of_event(&id, &appended.event.id, T0)
            .await
            .expect("read it back");
        assert_eq!(stored.raw, raw);
    }
}

/// Stored email on DynamoDB and the S3 emulator: each address has its own object, named by its
/// event item and its email record; concurrent appends of one message make one event and leave
/// the object it names; purging an address removes its objects and no other address's; what SES
/// wrote under `inbound/` is readable for replay.
mod email_objects {
    use std::collections::HashMap;

    use agentaddress_core::domain::{ids, Limits};
    use agentaddress_core::store::conformance::{self, T0};
    use agentaddress_core::store::{email_conformance, prelude::*, NewEmail, StoreError};
    use aws_sdk_dynamodb::types::AttributeValue;

    async fn s3() -> aws_sdk_s3::Client {
        let sdk = agentaddress_aws::sdk_config().await;
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .force_path_style(true)
                .build(),
        )
    }

    async fn keys_under(prefix: &str) -> Vec<String> {
        let out = s3()
            .await
            .list_objects_v2()
            .bucket(super::bucket())
            .prefix(prefix)
            .send()
            .await
            .expect("list objects");
        out.contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
    }

    async fn new_address(store: &super::DynamoStore) -> String {
        conformance::new_address(store, None).await.id
    }

    fn email(email_id: &str, raw: &[u8]) -> NewEmail {
        email_conformance::email(email_id, raw.to_vec())
    }

    async fn event_item(
        store: &super::DynamoStore, id: &str, seq: u64,
    ) -> HashMap<String, AttributeValue> {
        let client = super::DynamoStore::client_from_env().await;
        client
            .get_item()
            .table_name(store.table())
            .key("pk", AttributeValue::S(format!("A#{id}")))
            .key("sk", AttributeValue::S(format!("E#{seq:020}")))
            .consistent_read(true)
            .send()
            .await
            .expect("get the event item")
            .item
            .expect("the event item exists")
    }

    #[tokio::test]
    async fn each_address_has_its_object_and_the_purge_removes_only_its_own() {
        let store = super::dynamo_with_bucket().await;
        let limits = Limits::default();
        let (a, b) = (new_address(&store).await, new_address(&store).await);
        let raw = b"Subject: to both\r\n\r\nhello\r\n";
        let ea = store
            .append_email(&a, email("eml_both", raw), &limits, T0)
            .await
            .expect("append to a");
        let eb = store
            .append_email(&b, email("eml_both", raw), &limits, T0)
            .await
            .expect("append to b");
        let (ka, kb) = (
            keys_under(&format!("mail/{a}/")).await,
            keys_under(&format!("mail/{b}/")).await,
        );
        assert_eq!(
            (ka.len(), kb.len()),
            (1, 1),
            "one object per address: {ka:?} {kb:?}"
        );
        let item = event_item(&store, &a, ea.event.sequence).await;
        assert_eq!(
            item.get("raw_key").and_then(|v| v.as_s().ok()),
            Some(&ka[0]),
            "the event item names its object"
        );
        assert_eq!(
            item.get("email_id")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str),
            Some("eml_both")
        );
        assert!(!item.contains_key("raw"), "no raw bytes in DynamoDB");

        store.delete_address(&a, T0).await.expect("delete a");
        for _ in 0..10 {
            if store
                .purge_address(&a, 25, T0)
                .await
                .expect("purge step")
                .done
            {
                break;
            }
        }
        assert!(
            keys_under(&format!("mail/{a}/")).await.is_empty(),
            "a's objects are gone"
        );
        assert_eq!(
            keys_under(&format!("mail/{b}/")).await,
            kb,
            "b's object stays"
        );
        let stored = store
            .email_of_event(&b, &eb.event.id, T0)
            .await
            .expect("b still reads its message");
        assert_eq!(stored.raw, raw);
    }

    #[tokio::test]
    async fn concurrent_appends_of_one_message_make_one_event_and_keep_its_object() {
        let store = super::dynamo_with_bucket().await;
        let limits = Limits::default();
        let id = new_address(&store).await;
        let mut tasks = Vec::new();
        for n in 0..6 {
            let (store, id, limits) = (store.clone(), id.clone(), limits.clone());
            tasks.push(tokio::spawn(async move {
                let raw = format!("Subject: copy {n}\r\n\r\nbody\r\n");
                store
                    .append_email(&id, email("eml_race", raw.as_bytes()), &limits, T0)
                    .await
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.expect("join").expect("append"));
        }
        assert_eq!(
            results.iter().filter(|r| !r.duplicate).count(),
            1,
            "one event: {results:?}"
        );
        let winner = results
            .iter()
            .find(|r| !r.duplicate)
            .map(|r| r.event.clone());
        assert!(
            results.iter().all(|r| Some(&r.event) == winner.as_ref()),
            "every append answers the one event: {results:?}"
        );
        let page = store
            .read_events(&id, 0, 10, 1 << 22, T0)
            .await
            .expect("read");
        assert_eq!(page.events.len(), 1);
        let stored = store
            .email_of_event(&id, &page.events[0].id, T0)
            .await
            .expect("its message is readable");
        assert!(stored.raw.starts_with(b"Subject: copy "), "a whole message");
        assert_eq!(
            keys_under(&format!("mail/{id}/")).await.len(),
            1,
            "the losers' objects are removed"
        );
    }

    #[tokio::test]
    async fn an_expired_event_s_message_is_unreachable_and_what_ses_wrote_is_pending() {
        let store = super::dynamo_with_bucket().await;
        let limits = Limits {
            event_retention_seconds: 60,
            ..Limits::default()
        };
        let id = new_address(&store).await;
        let appended = store
            .append_email(
                &id,
                email("eml_old", b"Subject: x\r\n\r\ny\r\n"),
                &limits,
                T0,
            )
            .await
            .expect("append");
        let later = T0 + 61_000;
        assert_eq!(
            store
                .email_of_event(&id, &appended.event.id, later)
                .await
                .map(|_| ()),
            Err(StoreError::NotFound)
        );
        assert_eq!(
            store.email_by_id(&id, "eml_old", later).await.map(|_| ()),
            Err(StoreError::NotFound)
        );
        assert_eq!(
            keys_under(&format!("mail/{id}/")).await.len(),
            1,
            "the object itself waits for the lifecycle rule"
        );

        let ses_id = format!(
            "ses{}",
            ids::new_address_id().to_ascii_lowercase().replace('_', "")
        );
        assert_eq!(store.pending_email(&ses_id).await, Ok(None));
        s3().await
            .put_object()
            .bucket(super::bucket())
            .key(format!("inbound/{ses_id}"))
            .body(b"Subject: from ses\r\n\r\nz\r\n".to_vec().into())
            .send()
            .await
            .expect("put as SES would");
        assert_eq!(
            store.pending_email(&ses_id).await,
            Ok(Some(b"Subject: from ses\r\n\r\nz\r\n".to_vec()))
        );
        assert_eq!(
            store.pending_email("../etc").await,
            Ok(None),
            "not a key SES writes"
        );
    }
}

/// The wake-up sockets' expiry watches (agentaddress-aws's sockets module): one pending
/// watch per address however many subscribes, hops of at most 15 minutes while sockets are
/// subscribed, `gone` to each of them once the address has expired, and no watch without
/// subscribers.
mod expiry_watches {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use agentaddress_aws::{
        handle_purge_message, ConnectionPoster, DynamoStore, PostError, PurgeMessage, PurgeQueue,
        Subscribed,
    };
    use agentaddress_core::domain::ids;
    use agentaddress_core::store::conformance::T0;
    use agentaddress_core::store::{prelude::*, StoreResult};

    /// Connection `tag` of this run: connections live outside any address's partition, so a
    /// name of a previous run on the same table must not be met again.
    fn c(tag: &str) -> String {
        static RUN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let run = RUN.get_or_init(ids::new_address_id);
        format!("conn{tag}-{run}=")
    }

    /// A purge queue that keeps what is sent to it.
    #[derive(Debug, Default)]
    pub(super) struct Queue(Mutex<Vec<(PurgeMessage, Duration)>>);

    #[async_trait::async_trait]
    impl PurgeQueue for Queue {
        async fn send(&self, message: &PurgeMessage, delay: Duration) -> StoreResult<()> {
            self.0.lock().expect("queue").push((message.clone(), delay));
            Ok(())
        }
    }

    #[derive(Debug, Default)]
    struct Poster(Mutex<Vec<(String, String)>>);

    #[async_trait::async_trait]
    impl ConnectionPoster for Poster {
        async fn post(&self, connection_id: &str, frame: &[u8]) -> Result<(), PostError> {
            self.0.lock().expect("poster").push((
                connection_id.to_owned(),
                String::from_utf8_lossy(frame).into_owned(),
            ));
            Ok(())
        }
    }

    const HOUR: i64 = 3_600_000;
    const UNTIL: i64 = T0 + 2 * HOUR + 600_000;

    async fn address(store: &DynamoStore, expires_at: Option<i64>) -> String {
        let id = ids::new_address_id();
        store
            .create_address(super::new_address(&id, expires_at))
            .await
            .expect("create");
        id
    }

    async fn subscribe(store: &DynamoStore, id: &str, conn: &str, expires: Option<i64>, now: i64) {
        assert_eq!(
            store
                .subscribe_socket(id, conn, None, UNTIL, now)
                .await
                .expect("subscribe"),
            Subscribed::Yes
        );
        store
            .watch_expiry(id, expires, UNTIL, now)
            .await
            .expect("watch");
    }

    pub(super) fn taken(q: &Queue) -> Vec<(PurgeMessage, Duration)> {
        std::mem::take(&mut *q.0.lock().expect("queue"))
    }

    /// The one message sent since the last look: an expiry watch of `id` delayed by `delay`,
    /// due `delay` after `now`; its body.
    fn one_watch(q: &Queue, id: &str, delay: u64, now: i64) -> String {
        let sent = taken(q);
        let due = now + i64::try_from(delay).expect("delay") * 1000;
        assert_eq!(
            sent,
            vec![(
                PurgeMessage::expiry_watch(id, due),
                Duration::from_secs(delay)
            )]
        );
        sent[0].0.to_body()
    }

    /// `$disconnect` removes a connection's subscriptions and marks it closed: a subscribe after
    /// it is refused, and one racing it is either removed with the others or refused — never
    /// left behind.
    #[tokio::test]
    async fn a_subscribe_racing_disconnect_leaves_no_subscription() {
        let store = super::dynamo().await;
        let id = address(&store, None).await;
        subscribe(&store, &id, &c("F"), None, T0).await;
        assert_eq!(
            store.drop_connection(&c("F"), T0).await.expect("drop"),
            vec![id.clone()]
        );
        assert_eq!(store.live_subscribers(&id, T0).await, Ok(vec![]));
        let again = store.subscribe_socket(&id, &c("F"), None, UNTIL, T0).await;
        assert_eq!(again, Ok(Subscribed::Closed), "after its $disconnect");
        // A connection that never subscribed is marked too.
        assert_eq!(store.drop_connection(&c("G"), T0).await, Ok(vec![]));
        let late = store.subscribe_socket(&id, &c("G"), None, UNTIL, T0).await;
        assert_eq!(late, Ok(Subscribed::Closed));
        assert_eq!(store.live_subscribers(&id, T0).await, Ok(vec![]));

        for n in 0..12 {
            let conn = format!("race{n}=");
            let (subscribed, dropped) = tokio::join!(
                store.subscribe_socket(&id, &conn, None, UNTIL, T0),
                store.drop_connection(&conn, T0)
            );
            let subscribed = subscribed.expect("subscribe");
            let dropped = dropped.expect("drop");
            match subscribed {
                Subscribed::Yes => assert_eq!(dropped, vec![id.clone()], "{conn}"),
                Subscribed::Closed => assert!(dropped.is_empty(), "{conn}: {dropped:?}"),
                other => panic!("{conn}: {other:?}"),
            }
            assert_eq!(
                store.live_subscribers(&id, T0).await,
                Ok(vec![]),
                "{conn}: {subscribed:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_expiry_is_told_once_to_every_subscribed_socket() {
        let queue = Arc::new(Queue::default());
        let poster = Arc::new(Poster::default());
        let store = super::dynamo()
            .await
            .with_purge_queue(queue.clone())
            .with_sockets(poster.clone());
        let expires = T0 + HOUR;
        let id = address(&store, Some(expires)).await;

        // Two sockets, three subscribes: one watch, due in SQS's longest delay.
        subscribe(&store, &id, &c("A"), Some(expires), T0).await;
        subscribe(&store, &id, &c("B"), Some(expires), T0 + 1_000).await;
        subscribe(&store, &id, &c("A"), Some(expires), T0 + 2_000).await;
        let first = one_watch(&queue, &id, 900, T0);

        // It falls due before the expiry: the next hop, nobody told.
        let progress = handle_purge_message(
            &store,
            &first,
            8,
            &agentaddress_core::domain::Limits::default(),
            T0 + 900_000,
        )
        .await
        .expect("watch");
        assert!(progress.done && progress.deleted_items == 0);
        let second = one_watch(&queue, &id, 900, T0 + 900_000);
        // The same message again (SQS delivers at least once): it ends there, no second chain.
        handle_purge_message(
            &store,
            &first,
            8,
            &agentaddress_core::domain::Limits::default(),
            T0 + 901_000,
        )
        .await
        .expect("watch");
        assert!(taken(&queue).is_empty());
        // A subscribe meanwhile starts no second watch.
        subscribe(&store, &id, &c("B"), Some(expires), T0 + 1_000_000).await;
        assert!(taken(&queue).is_empty());
        handle_purge_message(
            &store,
            &second,
            8,
            &agentaddress_core::domain::Limits::default(),
            T0 + 1_800_000,
        )
        .await
        .expect("watch");
        let third = one_watch(&queue, &id, 900, T0 + 1_800_000);
        // Handled 1.5 s late: the last hop is the rest of the wait, rounded up to whole seconds.
        let late = T0 + 2_700_000 + 1_500;
        handle_purge_message(
            &store,
            &third,
            8,
            &agentaddress_core::domain::Limits::default(),
            late,
        )
        .await
        .expect("watch");
        let last = one_watch(&queue, &id, 899, late);
        assert!(poster.0.lock().expect("poster").is_empty());

        // Expired: `gone` to both sockets, their subscriptions end, the watch ends.
        handle_purge_message(
            &store,
            &last,
            8,
            &agentaddress_core::domain::Limits::default(),
            expires + 500,
        )
        .await
        .expect("watch");
        let mut told = std::mem::take(&mut *poster.0.lock().expect("poster"));
        told.sort();
        let frames: Vec<(String, serde_json::Value)> = told
            .iter()
            .map(|(c, f)| (c.clone(), serde_json::from_str(f).expect("json")))
            .collect();
        let gone = serde_json::json!({"type": "gone", "address_id": id});
        assert_eq!(frames, vec![(c("A"), gone.clone()), (c("B"), gone)]);
        assert!(taken(&queue).is_empty());
        assert!(store
            .live_subscribers(&id, expires + 500)
            .await
            .expect("subscribers")
            .is_empty());
        // Their places on the sockets are free again: each can take 20 other addresses.
        for n in 0..20 {
            let other = address(&store, None).await;
            assert_eq!(
                store
                    .subscribe_socket(&other, &c("A"), None, UNTIL, expires + 1_000 + n)
                    .await
                    .expect("subscribe"),
                Subscribed::Yes,
                "address {n}"
            );
        }
    }

    #[tokio::test]
    async fn no_watch_without_an_expiry_in_reach_or_without_subscribers() {
        let queue = Arc::new(Queue::default());
        let store = super::dynamo()
            .await
            .with_purge_queue(queue.clone())
            .with_sockets(Arc::new(Poster::default()));
        // Never expires, or expires after the subscription ends: no watch.
        let forever = address(&store, None).await;
        subscribe(&store, &forever, &c("C"), None, T0).await;
        let later = address(&store, Some(UNTIL + 1)).await;
        subscribe(&store, &later, &c("C"), Some(UNTIL + 1), T0).await;
        assert!(taken(&queue).is_empty());

        // The only socket leaves before the watch falls due: it ends there.
        let expires = T0 + 30 * 60_000;
        let id = address(&store, Some(expires)).await;
        subscribe(&store, &id, &c("D"), Some(expires), T0).await;
        let body = one_watch(&queue, &id, 900, T0);
        store
            .unsubscribe_socket(&id, &c("D"))
            .await
            .expect("unsubscribe");
        handle_purge_message(
            &store,
            &body,
            8,
            &agentaddress_core::domain::Limits::default(),
            T0 + 900_000,
        )
        .await
        .expect("watch");
        assert!(taken(&queue).is_empty());
        // A later subscribe, after the watch fell due, starts a new one.
        let now = T0 + 20 * 60_000;
        subscribe(&store, &id, &c("E"), Some(expires), now).await;
        one_watch(&queue, &id, 600, now);
    }
}

/// The waiting slots' shards on DynamoDB (docs/API.md §6, "Waiting polls"): a cap of 60 is
/// three shards of 20, and a poll tries every one of three shards, so exactly 60 slots are
/// taken before the first refusal; handed back, they are free again.
mod wait_slot_shards {
    use agentaddress_core::store::conformance::T0;
    use agentaddress_core::store::prelude::*;

    #[tokio::test]
    async fn a_cap_over_many_shards_is_reached_exactly() {
        let store = super::dynamo().await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(T0, |d| i64::try_from(d.as_millis()).unwrap_or(T0))
            .max(T0);
        let until = now + 30_000;
        let mut held = Vec::new();
        for i in 0..60 {
            let slot = store
                .acquire_wait_slot(60, until, now)
                .await
                .expect("acquire")
                .unwrap_or_else(|| panic!("slot {i} of 60 refused"));
            held.push(slot);
        }
        assert_eq!(
            store
                .acquire_wait_slot(60, until, now)
                .await
                .expect("acquire"),
            None
        );
        let shards: std::collections::BTreeSet<&str> =
            held.iter().filter_map(|s| s.split('.').nth(1)).collect();
        assert_eq!(shards.len(), 3, "{shards:?}");
        for slot in &held {
            store.release_wait_slot(slot).await.expect("release");
        }
        let again = store
            .acquire_wait_slot(60, until, now)
            .await
            .expect("acquire")
            .expect("free again");
        store.release_wait_slot(&again).await.expect("release");
    }
}
