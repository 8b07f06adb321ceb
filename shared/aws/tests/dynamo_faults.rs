//! The DynamoDB store behind the fault-injection proxy (`agentaddress-faultproxy`, started in
//! process on port 0 in front of DynamoDB Local), each test on a fresh table:
//! - a response dropped after the write applied (the SDK re-sends it) is answered right and
//!   applied exactly once, on every write path, at the store and at the HTTP API;
//! - a request that fails on every SDK attempt is `unavailable` (HTTP 503 with `Retry-After`),
//!   never a definite answer, and an ambiguous one applied at most once;
//! - concurrent appenders, idempotent deliveries, acks and CAS writers on a few addresses with
//!   10 % of requests failed and 10 % dropped leave gapless feeds in which every acknowledged
//!   write appears exactly once and nothing appears twice — checked on the table directly.
//!
//! Like the other DynamoDB tests they need DynamoDB Local and the SQS emulator (`scripts/test`,
//! or `scripts/emulators start` and `eval "$(scripts/emulators env)"`) and fail loudly without
//! them.

use agentaddress_core::store::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use agentaddress_api::{self as api, ApiConfig, AppState};
use agentaddress_aws::{client_config, DynamoStore, SqsPurgeQueue, SDK_MAX_ATTEMPTS};
use agentaddress_core::domain::{ids, mail_out, Ingress, Limits, Millis};
use agentaddress_core::store::conformance::T0;
use agentaddress_core::store::outbound_conformance::new_send;
use agentaddress_core::store::{
    CodeCheck, CodeIssued, IdempotencyClaim, NewAddress, NewCode, NewEvent, SendOutcome, StoreError,
};
use agentaddress_faultproxy::{Action, FaultConfig, FaultProxy, Rule, Stats};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

type Item = HashMap<String, AttributeValue>;

const TOMBSTONE_SECONDS: u64 = 30 * 86_400;

fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap_or_else(|_| {
        panic!(
            "AWS_ENDPOINT_URL_DYNAMODB is not set: run scripts/test, or `scripts/emulators start` \
             and `eval \"$(scripts/emulators env)\"` (these tests need DynamoDB Local)"
        )
    })
}

/// A fresh table on DynamoDB Local, a proxy in front of it, and two stores on the table: one
/// through the proxy, one direct (for setting up and for checking).
struct Rig {
    sdk: aws_config::SdkConfig,
    direct: Client,
    table: String,
    proxy: FaultProxy,
    faulty: DynamoStore,
    store: DynamoStore,
}

impl Rig {
    async fn new(config: FaultConfig) -> Self {
        let upstream = endpoint();
        let sdk = agentaddress_aws::sdk_config().await;
        let direct = DynamoStore::client(&sdk);
        let table = format!("faults-{}", ids::new_address_id());
        direct
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key_element("pk", KeyType::Hash))
            .key_schema(key_element("sk", KeyType::Range))
            .attribute_definitions(attribute("pk"))
            .attribute_definitions(attribute("sk"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("create table {table} on {upstream}: {e:?}"));
        let proxy = FaultProxy::start(
            "127.0.0.1:0".parse().expect("listen address"),
            &upstream,
            config,
        )
        .await
        .expect("start the fault proxy");
        let faulty = Client::from_conf(client_config(&sdk).endpoint_url(proxy.url()).build());
        Self {
            faulty: DynamoStore::new(faulty, &table, TOMBSTONE_SECONDS),
            store: DynamoStore::new(direct.clone(), &table, TOMBSTONE_SECONDS),
            sdk,
            direct,
            table,
            proxy,
        }
    }

    /// The HTTP API over the store through the proxy.
    fn api(&self) -> axum::Router {
        api::router(AppState::new(
            Arc::new(self.faulty.clone()),
            ApiConfig {
                public_url: Some("http://agentaddress.test".into()),
                email_domain: "inbox.test".into(),
                limits: Limits::default(),
                email_ingest_secret_hash: None,
                poll_checks: Default::default(),
                max_waiting_polls: 0,
            },
        ))
    }

    /// Every item of the address's partition, by sort key.
    async fn partition(&self, id: &str) -> BTreeMap<String, Item> {
        let mut items = BTreeMap::new();
        let mut start = None;
        loop {
            let out = self
                .direct
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", AttributeValue::S(format!("A#{id}")))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .expect("query the partition directly");
            for item in out.items() {
                items.insert(text(item, "sk"), item.clone());
            }
            start = out.last_evaluated_key;
            if start.is_none() {
                return items;
            }
        }
    }

    /// The events of the address's partition, by sequence.
    async fn events(&self, id: &str) -> BTreeMap<u64, Item> {
        self.partition(id)
            .await
            .into_iter()
            .filter(|(sk, _)| sk.starts_with("E#") && sk.matches('#').count() == 1)
            .map(|(_, item)| (number(&item, "seq"), item))
            .collect()
    }

    async fn meta(&self, id: &str) -> Item {
        self.partition(id)
            .await
            .remove("META")
            .expect("the META item exists")
    }

    async fn new_address(&self) -> NewAddress {
        let a = new_address();
        self.store
            .create_address(a.clone())
            .await
            .expect("create directly");
        a
    }

    fn op(&self, op: &str) -> agentaddress_faultproxy::OperationStats {
        self.proxy
            .stats()
            .operations
            .get(op)
            .cloned()
            .unwrap_or_default()
    }
}

fn key_element(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .expect("key schema element")
}

fn attribute(name: &str) -> AttributeDefinition {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .expect("attribute definition")
}

fn text(item: &Item, k: &str) -> String {
    item.get(k)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

fn number(item: &Item, k: &str) -> u64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("item without number {k}: {item:?}"))
}

fn data(item: &Item) -> Value {
    serde_json::from_str(&text(item, "data")).expect("event data is JSON")
}

fn new_address() -> NewAddress {
    let id = ids::new_address_id();
    NewAddress {
        email: format!("{id}@inbox.test"),
        id,
        name: Some("faults".into()),
        task_id: None,
        created_at: T0,
        expires_at: None,
        token_hash: ids::hash_secret(&ids::new_read_token()),
        inbox_hash: ids::hash_secret(&ids::new_inbox_secret()),
        verification: None,
        email_policy: None,
        hooks: Vec::new(),
    }
}

fn marked(marker: &str) -> NewEvent {
    NewEvent {
        event_type: "fault.test".into(),
        source: None,
        ingress: Ingress::Http,
        data: json!({ "marker": marker }).to_string(),
        http: None,
    }
}

fn claim(marker: &str) -> IdempotencyClaim {
    IdempotencyClaim {
        key_hash: ids::sha256_hex(marker.as_bytes()),
        body_hash: ids::sha256_hex(format!("body of {marker}").as_bytes()),
    }
}

fn drop_next(op: &str) -> Rule {
    Rule::new(op, Action::Drop, 1)
}

#[tokio::test]
async fn a_dropped_append_applies_once() {
    let rig = Rig::new(FaultConfig::passthrough(1)).await;
    let a = rig.new_address().await;
    let l = Limits::default();

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let first = rig
        .faulty
        .append_event(&a.id, marked("one"), None, &l, T0)
        .await
        .expect("the re-sent transaction succeeds");
    assert_eq!((first.event.sequence, first.duplicate), (1, false));
    let tx = rig.op("TransactWriteItems");
    assert_eq!(
        (tx.requests, tx.dropped_after),
        (2, 1),
        "applied, response dropped, re-sent once"
    );

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let second = rig
        .faulty
        .append_event(&a.id, marked("two"), Some(claim("two")), &l, T0)
        .await
        .expect("the re-sent idempotent delivery succeeds");
    assert_eq!(
        (second.event.sequence, second.duplicate),
        (2, false),
        "our own idempotency record is not a duplicate"
    );
    let again = rig
        .faulty
        .append_event(&a.id, marked("two"), Some(claim("two")), &l, T0)
        .await
        .expect("the same delivery again");
    assert_eq!((&again.event, again.duplicate), (&second.event, true));

    // Failed before forwarding, then dropped after applying, then answered.
    rig.proxy
        .push_rule(Rule::new("TransactWriteItems", Action::Fail, 1));
    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let third = rig
        .faulty
        .append_event(&a.id, marked("three"), None, &l, T0)
        .await
        .expect("succeeds on the third attempt");
    assert_eq!(third.event.sequence, 3);

    let events = rig.events(&a.id).await;
    assert_eq!(events.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    for (seq, (id, marker)) in [
        (1, (&first.event.id, "one")),
        (2, (&second.event.id, "two")),
        (3, (&third.event.id, "three")),
    ] {
        assert_eq!(&text(&events[&seq], "id"), id);
        assert_eq!(data(&events[&seq])["marker"], marker);
    }
    assert_eq!(number(&rig.meta(&a.id).await, "seq"), 3);
}

#[tokio::test]
async fn dropped_outbound_writes_apply_once() {
    let rig = Rig::new(FaultConfig::passthrough(1)).await;
    let a = rig.new_address().await;
    // Without the server-wide caps on code mails: the table is shared with the conformance
    // cases of the run, many of which mail `ada` (its counts live outside the partition).
    let l = Limits {
        code_mails_per_recipient_per_day: 1_000_000_000,
        code_mails_per_client_per_day: 1_000_000_000,
        ..Limits::default()
    };
    let ada = "ada@example.com";
    let code = NewCode {
        email: ada.into(),
        code_hash: mail_out::code_hash(&a.id, ada, "123456"),
        expires_at: T0 + mail_out::CODE_VALID_MS,
        client: "192.0.2.1".into(),
    };

    // A new contact (one transaction: META's count and the contact), its answer dropped.
    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let issued = rig
        .faulty
        .issue_contact_code(&a.id, code.clone(), &l, T0)
        .await
        .expect("the re-sent creation succeeds");
    assert!(
        matches!(&issued, CodeIssued::Issued(c) if c.code_mails == 1),
        "{issued:?}"
    );
    assert_eq!(number(&rig.meta(&a.id).await, "contacts"), 1);
    let contact = rig.partition(&a.id).await[&format!("C#{ada}")].clone();
    assert_eq!(number(&contact, "code_mails"), 1, "counted once");

    // The right code: the try is counted, then the confirmation's answer is dropped.
    rig.proxy
        .push_rule(Rule::new("UpdateItem", Action::Pass, 1));
    rig.proxy.push_rule(drop_next("UpdateItem"));
    let checked = rig
        .faulty
        .check_contact_code(&a.id, ada, &code.code_hash, T0 + 1)
        .await
        .expect("the re-sent confirmation succeeds");
    assert!(matches!(checked, CodeCheck::Confirmed(_)), "{checked:?}");

    // A send, its answer dropped: one event, one send, one count of the day.
    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let send = new_send(&a.id, ada, "key", "Hi");
    let send_id = send.id.clone();
    let recorded = rig
        .faulty
        .record_send(&a.id, send, &l, T0 + 2)
        .await
        .expect("the re-sent send succeeds");
    assert_eq!(
        (recorded.event.sequence, recorded.duplicate),
        (1, false),
        "our own key record is not a duplicate"
    );
    let day = rig.partition(&a.id).await[&format!("OD#{}", mail_out::utc_day(T0))].clone();
    assert_eq!(number(&day, "count"), 1);

    // Its failure, the answer dropped: one `email.send_failed`.
    rig.faulty
        .claim_send(&a.id, &send_id, T0 + 60_000, T0 + 3)
        .await
        .expect("claim")
        .expect("pending and due");
    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let failed = NewEvent {
        event_type: "email.send_failed".into(),
        source: None,
        ingress: Ingress::Outbound,
        data: json!({ "error": "550" }).to_string(),
        http: None,
    };
    rig.faulty
        .finish_send(
            &a.id,
            &send_id,
            SendOutcome::Failed {
                error: "550".into(),
                event: failed,
            },
            &l,
            T0 + 4,
        )
        .await
        .expect("the re-sent failure succeeds");
    let events = rig.events(&a.id).await;
    assert_eq!(events.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(text(&events[&2], "type"), "email.send_failed");
    let send = rig.partition(&a.id).await[&format!("O#{send_id}")].clone();
    assert_eq!(text(&send, "status"), "failed");
    assert_eq!(number(&rig.meta(&a.id).await, "seq"), 2);
    assert_eq!(rig.op("TransactWriteItems").dropped_after, 3);
    assert_eq!(rig.op("UpdateItem").dropped_after, 1);
}

#[tokio::test]
async fn dropped_state_writes_apply_once() {
    let rig = Rig::new(FaultConfig::passthrough(2)).await;
    let a = rig.new_address().await;
    let l = Limits::default();

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let created = rig
        .faulty
        .put_state(&a.id, "k", "\"v1\"".into(), Some(0), &l, T0)
        .await
        .expect("create-only write, re-sent after it applied: success, not a conflict");
    assert_eq!(created.entry.revision, 1);

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let updated = rig
        .faulty
        .put_state(&a.id, "k", "\"v2\"".into(), Some(1), &l, T0)
        .await
        .expect("CAS write, re-sent after it applied: success, not a conflict");
    assert_eq!(updated.entry.revision, 2);

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let unconditional = rig
        .faulty
        .put_state(&a.id, "k", "\"v3\"".into(), None, &l, T0)
        .await
        .expect("unconditional write");
    assert_eq!(unconditional.entry.revision, 3);

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let deleted = rig
        .faulty
        .delete_state(&a.id, "k", Some(3), &l, T0)
        .await
        .expect("delete, re-sent after it applied: success, not 404");
    assert_eq!(deleted.revision, 4);
    assert_eq!(rig.op("TransactWriteItems").dropped_after, 4);

    let events = rig.events(&a.id).await;
    let kinds: Vec<(u64, String)> = events
        .iter()
        .map(|(seq, e)| (*seq, text(e, "type")))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (1, "state.updated".to_owned()),
            (2, "state.updated".to_owned()),
            (3, "state.updated".to_owned()),
            (4, "state.deleted".to_owned()),
        ],
        "one event per write"
    );
    assert_eq!(data(&events[&2])["value"], "v2");
    let partition = rig.partition(&a.id).await;
    assert!(!partition.contains_key("S#k"), "the key is deleted");
    let meta = &partition["META"];
    assert_eq!(
        (
            number(meta, "seq"),
            number(meta, "state_keys"),
            number(meta, "state_bytes")
        ),
        (4, 0, 0)
    );
}

/// Wake hooks (docs/API.md §19): each write's answer dropped once, and the SDK's re-send
/// answered as the write it repeats — never a lost compare-and-set, a missing hook or a cap.
#[tokio::test]
async fn dropped_hook_writes_apply_once() {
    use agentaddress_core::domain::hooks::MAX_HOOKS_PER_ADDRESS;
    use agentaddress_core::store::hook_conformance::new_hook;
    use agentaddress_core::store::HookStatus;
    let rig = Rig::new(FaultConfig::passthrough(7)).await;
    let a = rig.new_address().await;
    let l = Limits::default();
    let hooks = |partition: &BTreeMap<String, Item>| {
        partition.keys().filter(|sk| sk.starts_with("H#")).count()
    };

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let wanted = vec![new_hook(&["*"]), new_hook(&["email.*"])];
    let added = rig
        .faulty
        .add_hooks(&a.id, wanted.clone(), MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("the re-sent add finds its own hooks: success, not a lost race");
    assert_eq!(
        added.iter().map(|h| &h.id).collect::<Vec<_>>(),
        vec![&wanted[0].id, &wanted[1].id]
    );
    assert_eq!(rig.op("TransactWriteItems").dropped_after, 1);
    assert_eq!(hooks(&rig.partition(&a.id).await), 2);
    assert_eq!(number(&rig.meta(&a.id).await, "hooks"), 2, "counted once");

    // A claim: the hook's own update, its answer dropped.
    let mut claim = added[0].clone();
    claim.delivery.pending_to = Some(1);
    claim.delivery.attempts = 1;
    rig.proxy.push_rule(drop_next("UpdateItem"));
    let claimed = rig
        .faulty
        .save_hook(&a.id, claim.clone(), Vec::new(), &l, T0)
        .await
        .expect("save")
        .expect("the re-sent claim is our own write, not another writer's");
    assert_eq!((claimed.revision, claimed.delivery.attempts), (2, 1));
    assert_eq!(rig.op("UpdateItem").dropped_after, 1);

    // A failed range disabling the hook, with its reports: one transaction, its answer dropped.
    let mut disabled = claimed.clone();
    disabled.status = HookStatus::Disabled;
    disabled.delivery.pending_to = None;
    disabled.delivery.failed_ranges = 3;
    let reports = ["hook.failed", "hook.disabled"].map(|t| NewEvent {
        event_type: t.into(),
        source: None,
        ingress: Ingress::Outbound,
        data: json!({ "hook_id": claimed.id }).to_string(),
        http: None,
    });
    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let saved = rig
        .faulty
        .save_hook(&a.id, disabled, reports.to_vec(), &l, T0 + 1)
        .await
        .expect("save")
        .expect("the re-sent save is our own write");
    assert_eq!((saved.revision, saved.status), (3, HookStatus::Disabled));
    let events = rig.events(&a.id).await;
    assert_eq!(
        events.values().map(|e| text(e, "type")).collect::<Vec<_>>(),
        vec!["hook.failed", "hook.disabled"],
        "the reports appended once"
    );
    assert_eq!(number(&rig.meta(&a.id).await, "seq"), 2);
    assert_eq!(
        rig.faulty.get_hook(&a.id, &saved.id, T0).await,
        Ok(saved.clone())
    );

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    rig.faulty
        .delete_hook(&a.id, &saved.id, T0 + 2)
        .await
        .expect("the re-sent delete finds its own mark: success, not 404");
    assert_eq!(rig.op("TransactWriteItems").dropped_after, 3);
    assert_eq!(hooks(&rig.partition(&a.id).await), 1);
    assert_eq!(
        number(&rig.meta(&a.id).await, "hooks"),
        1,
        "counted down once"
    );
    assert_eq!(
        rig.faulty.delete_hook(&a.id, &saved.id, T0 + 3).await,
        Err(StoreError::NotFound),
        "another deletion is still 404"
    );
}

#[tokio::test]
async fn a_dropped_create_succeeds_once() {
    let rig = Rig::new(FaultConfig::passthrough(3)).await;
    let a = new_address();
    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    rig.faulty
        .create_address(a.clone())
        .await
        .expect("the re-sent create finds its own META: success, not a collision");
    let put = rig.op("TransactWriteItems");
    assert_eq!((put.requests, put.dropped_after), (2, 1));
    let partition = rig.partition(&a.id).await;
    assert_eq!(partition.keys().collect::<Vec<_>>(), vec!["META"]);
    assert_eq!(text(&partition["META"], "token_hash"), a.token_hash);
    assert_eq!(number(&partition["META"], "seq"), 0);
    let by_email = rig
        .faulty
        .address_by_email(&a.email.to_uppercase(), T0)
        .await
        .expect("lookup")
        .expect("the email key was written with the META");
    assert_eq!(by_email.id, a.id);

    let collision = NewAddress {
        token_hash: ids::hash_secret("someone else"),
        ..a.clone()
    };
    assert_eq!(
        rig.faulty.create_address(collision).await,
        Err(StoreError::AddressExists),
        "a real collision is still one"
    );
    assert_eq!(text(&rig.meta(&a.id).await, "token_hash"), a.token_hash);
}

#[tokio::test]
async fn a_dropped_delete_is_ours_and_still_purges() {
    let rig = Rig::new(FaultConfig::passthrough(4)).await;
    if std::env::var("AWS_ENDPOINT_URL_SQS").is_err() {
        panic!("AWS_ENDPOINT_URL_SQS is not set: run scripts/test (it starts the SQS emulator)");
    }
    let sqs = aws_sdk_sqs::Client::new(&rig.sdk);
    let queue_url = sqs
        .create_queue()
        .queue_name(&rig.table)
        .send()
        .await
        .expect("create a queue on the SQS emulator")
        .queue_url
        .expect("queue URL");
    let store = rig.faulty.clone().with_purge_queue(Arc::new(SqsPurgeQueue {
        client: sqs.clone(),
        queue_url: queue_url.clone(),
    }));
    let a = rig.new_address().await;
    let now = T0 + 5_000;

    rig.proxy.push_rule(drop_next("UpdateItem"));
    store
        .delete_address(&a.id, now)
        .await
        .expect("the re-sent delete finds its own tombstone: success, not 410");
    let upd = rig.op("UpdateItem");
    assert_eq!((upd.requests, upd.dropped_after), (2, 1));
    let meta = rig.meta(&a.id).await;
    assert_eq!(number(&meta, "deleted_at"), now as u64);

    let messages = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(5)
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    let bodies: Vec<Value> = messages
        .iter()
        .filter_map(|m| m.body())
        .map(|b| serde_json::from_str(b).expect("JSON message"))
        .collect();
    assert_eq!(
        bodies,
        vec![json!({ "address_id": a.id })],
        "one purge message"
    );

    assert_eq!(
        store.delete_address(&a.id, now + 1).await,
        Err(StoreError::AddressGone),
        "another deletion of the tombstone is still 410"
    );
    assert_eq!(
        store.delete_address("addr_never_was", now).await,
        Err(StoreError::AddressNotFound)
    );
}

#[tokio::test]
async fn a_dropped_ack_keeps_the_first_time_and_a_dropped_rate_hit_counts_twice() {
    let rig = Rig::new(FaultConfig::passthrough(5)).await;
    let a = rig.new_address().await;
    let e = rig
        .store
        .append_event(&a.id, marked("x"), None, &Limits::default(), T0)
        .await
        .expect("append directly");
    rig.proxy.push_rule(drop_next("UpdateItem"));
    let acked = rig
        .faulty
        .ack_event(&a.id, &e.event.id, T0 + 7)
        .await
        .expect("ack");
    assert_eq!(acked.acknowledged_at, T0 + 7);
    let again = rig
        .faulty
        .ack_event(&a.id, &e.event.id, T0 + 99)
        .await
        .expect("ack again");
    assert_eq!(again.acknowledged_at, T0 + 7);
    assert_eq!(
        number(&rig.events(&a.id).await[&1], "acked_at"),
        (T0 + 7) as u64
    );

    rig.proxy.push_rule(drop_next("UpdateItem"));
    assert_eq!(rig.faulty.hit_rate_limit("poll:x", 30, T0).await, Ok(None));
    let counter = rig
        .direct
        .scan()
        .table_name(&rig.table)
        .filter_expression("begins_with(pk, :r)")
        .expression_attribute_values(":r", AttributeValue::S("R#poll:x#".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("scan")
        .items()
        .to_vec();
    assert_eq!(counter.len(), 1);
    assert_eq!(
        number(&counter[0], "count"),
        2,
        "a re-sent counter increment counts twice (documented, accepted)"
    );
}

#[tokio::test]
async fn every_attempt_failing_is_unavailable_and_an_ambiguous_write_applies_at_most_once() {
    let rig = Rig::new(FaultConfig::passthrough(6)).await;
    let a = rig.new_address().await;
    let l = Limits::default();
    let unavailable = |r: Result<(), StoreError>, what: &str| match r {
        Err(StoreError::Unavailable(_)) => {}
        other => panic!("{what}: expected unavailable, got {other:?}"),
    };

    // Failed before forwarding on every attempt: unavailable, nothing applied.
    let fail_all = |op: &str| Rule::new(op, Action::Fail, SDK_MAX_ATTEMPTS);
    rig.proxy.push_rule(fail_all("TransactWriteItems"));
    unavailable(
        rig.faulty
            .append_event(&a.id, marked("never"), None, &l, T0)
            .await
            .map(|_| ()),
        "append",
    );
    assert_eq!(
        rig.op("TransactWriteItems").failed_before,
        u64::from(SDK_MAX_ATTEMPTS),
        "the SDK made {SDK_MAX_ATTEMPTS} attempts"
    );
    rig.proxy.push_rule(fail_all("TransactWriteItems"));
    unavailable(
        rig.faulty
            .put_state(&a.id, "k", "1".into(), None, &l, T0)
            .await
            .map(|_| ()),
        "put_state",
    );
    // Creating is a TransactWriteItems (META and email-key item).
    rig.proxy.push_rule(fail_all("TransactWriteItems"));
    let other = new_address();
    unavailable(rig.faulty.create_address(other.clone()).await, "create");
    assert!(rig.partition(&other.id).await.is_empty());
    assert_eq!(
        rig.store.address_by_email(&other.email, T0).await,
        Ok(None),
        "no email-key item either"
    );
    rig.proxy.push_rule(fail_all("UpdateItem"));
    unavailable(rig.faulty.delete_address(&a.id, T0).await, "delete");
    rig.proxy.push_rule(fail_all("UpdateItem"));
    unavailable(
        rig.faulty.hit_rate_limit("x", 1, T0).await.map(|_| ()),
        "rate limit",
    );
    rig.proxy.push_rule(fail_all("GetItem"));
    unavailable(rig.faulty.get_address(&a.id, T0).await.map(|_| ()), "read");
    let meta = rig.meta(&a.id).await;
    assert!(!meta.contains_key("deleted_at"));
    assert_eq!(number(&meta, "seq"), 0);
    assert!(rig.events(&a.id).await.is_empty());

    // Applied, and every answer lost: unavailable, applied exactly once, the feed goes on.
    rig.proxy.push_rule(Rule::new(
        "TransactWriteItems",
        Action::Drop,
        SDK_MAX_ATTEMPTS,
    ));
    unavailable(
        rig.faulty
            .append_event(&a.id, marked("ambiguous"), None, &l, T0)
            .await
            .map(|_| ()),
        "append with every answer dropped",
    );
    let next = rig
        .faulty
        .append_event(&a.id, marked("after"), None, &l, T0)
        .await
        .expect("append after");
    assert_eq!(next.event.sequence, 2);
    let events = rig.events(&a.id).await;
    let markers: Vec<(u64, Value)> = events
        .iter()
        .map(|(s, e)| (*s, data(e)["marker"].clone()))
        .collect();
    assert_eq!(
        markers,
        vec![(1, json!("ambiguous")), (2, json!("after"))],
        "the ambiguous append applied once"
    );
    let stats = rig.proxy.stats();
    println!("every-attempt-fails: proxy {}", stats.summary());
}

/// The HTTP API over the store through the proxy: the handlers answer what happened.
#[tokio::test]
async fn the_api_answers_201_204_after_dropped_responses_and_503_when_every_attempt_fails() {
    let rig = Rig::new(FaultConfig::passthrough(7)).await;
    let app = rig.api();
    let send = |method: Method, uri: String, token: Option<String>| {
        let app = app.clone();
        async move {
            let mut b = Request::builder().method(method).uri(uri);
            if let Some(t) = token {
                b = b.header("authorization", format!("Bearer {t}"));
            }
            let resp = app
                .oneshot(b.body(Body::empty()).expect("request"))
                .await
                .expect("infallible");
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = resp.into_body().collect().await.expect("body").to_bytes();
            let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            (status, retry_after, json)
        }
    };

    rig.proxy.push_rule(drop_next("TransactWriteItems"));
    let (status, _, created) = send(Method::POST, "/api/v1/addresses".into(), None).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["address"]["id"]
        .as_str()
        .expect("address id")
        .to_owned();
    let token = created["credentials"]["read_token"]
        .as_str()
        .expect("read token")
        .to_owned();
    assert_eq!(rig.op("TransactWriteItems").dropped_after, 1);

    rig.proxy.set_rates(1.0, 0.0).expect("rates");
    let (status, retry_after, body) = send(Method::POST, "/api/v1/addresses".into(), None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "unavailable");
    assert_eq!(retry_after.as_deref(), Some("1"));
    let (status, retry_after, body) = send(
        Method::DELETE,
        format!("/api/v1/addresses/{id}"),
        Some(token.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    rig.proxy.set_rates(0.0, 0.0).expect("rates");

    rig.proxy.push_rule(drop_next("UpdateItem"));
    let (status, _, body) = send(
        Method::DELETE,
        format!("/api/v1/addresses/{id}"),
        Some(token.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(rig.op("UpdateItem").dropped_after, 1);
    let (status, _, body) = send(
        Method::DELETE,
        format!("/api/v1/addresses/{id}"),
        Some(token),
    )
    .await;
    assert_eq!(status, StatusCode::GONE, "{body}");
}

/// One write of the stress test and how the store answered it.
#[derive(Debug)]
enum Outcome {
    /// An append; `marker` is in its data.
    Append {
        address: String,
        marker: String,
        answer: Result<(u64, String, bool), StoreError>,
    },
    /// A CAS state write of the value `marker`.
    Cas {
        address: String,
        marker: String,
        answer: Result<(u64, String), StoreError>,
    },
    Ack {
        address: String,
        sequence: u64,
        answer: Result<Millis, StoreError>,
    },
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_under_faults_apply_once_and_stay_gapless() {
    const ADDRESSES: usize = 3;
    const APPENDERS: usize = 6;
    const APPENDS: usize = 20;
    const CAS_WRITERS: usize = 4;
    const CAS_ROUNDS: usize = 15;
    let rig = Arc::new(Rig::new(FaultConfig::passthrough(7)).await);
    let mut addresses = Vec::new();
    for _ in 0..ADDRESSES {
        addresses.push(rig.new_address().await.id);
    }
    rig.proxy.set_rates(0.10, 0.10).expect("rates");
    let l = Limits::default();

    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..APPENDERS {
        let rig = Arc::clone(&rig);
        let address = addresses[w % ADDRESSES].clone();
        let l = l.clone();
        tasks.spawn(async move {
            let mut out = Vec::new();
            for i in 0..APPENDS {
                let marker = format!("a{w}-{i}");
                let with_claim = i % 2 == 0;
                let send = || {
                    rig.faulty.append_event(
                        &address,
                        marked(&marker),
                        with_claim.then(|| claim(&marker)),
                        &l,
                        T0,
                    )
                };
                let mut answer = send().await;
                // An idempotent delivery that was answered `unavailable` is sent again, as a
                // client would: it must not append a second event.
                if with_claim && matches!(answer, Err(StoreError::Unavailable(_))) {
                    answer = send().await;
                }
                let answer = answer.map(|a| (a.event.sequence, a.event.id, a.duplicate));
                if let Ok((seq, id, false)) = &answer {
                    if i % 3 == 0 {
                        let acked = rig.faulty.ack_event(&address, id, T0 + 1).await;
                        out.push(Outcome::Ack {
                            address: address.clone(),
                            sequence: *seq,
                            answer: acked.map(|a| a.acknowledged_at),
                        });
                    }
                }
                out.push(Outcome::Append {
                    address: address.clone(),
                    marker,
                    answer,
                });
            }
            out
        });
    }
    for w in 0..CAS_WRITERS {
        let rig = Arc::clone(&rig);
        // Two writers race on each key.
        let address = addresses[(w / 2) % ADDRESSES].clone();
        let key = format!("k{}", w / 2);
        let l = l.clone();
        tasks.spawn(async move {
            let mut out = Vec::new();
            for i in 0..CAS_ROUNDS {
                let expected = match rig.faulty.get_state(&address, &key, T0).await {
                    Ok(entry) => entry.revision,
                    Err(StoreError::NotFound) => 0,
                    Err(StoreError::Unavailable(_)) => continue,
                    Err(e) => panic!("get_state: {e:?}"),
                };
                let marker = format!("c{w}-{i}");
                let value = serde_json::to_string(&marker).expect("JSON string");
                let answer = rig
                    .faulty
                    .put_state(&address, &key, value, Some(expected), &l, T0)
                    .await
                    .map(|w| (w.event.sequence, w.event.id));
                out.push(Outcome::Cas {
                    address: address.clone(),
                    marker,
                    answer,
                });
            }
            out
        });
    }
    let mut outcomes = Vec::new();
    while let Some(done) = tasks.join_next().await {
        outcomes.extend(done.expect("a writer panicked"));
    }
    rig.proxy.set_rates(0.0, 0.0).expect("rates");
    let stats: Stats = rig.proxy.stats();

    // The table, read directly.
    let mut feeds: HashMap<String, BTreeMap<u64, Item>> = HashMap::new();
    for a in &addresses {
        let events = rig.events(a).await;
        let meta = rig.meta(a).await;
        let last = number(&meta, "seq");
        assert_eq!(
            events.keys().copied().collect::<Vec<_>>(),
            (1..=last).collect::<Vec<_>>(),
            "{a}: the feed is gapless and ends at META's sequence"
        );
        // State items agree with the last state event of their key.
        let partition = rig.partition(a).await;
        let state: Vec<&Item> = partition
            .iter()
            .filter(|(sk, _)| sk.starts_with("S#"))
            .map(|(_, i)| i)
            .collect();
        assert_eq!(number(&meta, "state_keys"), state.len() as u64);
        assert_eq!(
            number(&meta, "state_bytes"),
            state.iter().map(|i| number(i, "size")).sum::<u64>()
        );
        for item in state {
            let rev = number(item, "revision");
            let event = &events[&rev];
            assert_eq!(text(event, "type"), "state.updated");
            assert_eq!(data(event)["key"], text(item, "key"));
            let latest = events
                .iter()
                .filter(|(_, e)| {
                    text(e, "type") == "state.updated" && data(e)["key"] == text(item, "key")
                })
                .map(|(s, _)| *s)
                .max();
            assert_eq!(latest, Some(rev), "the state item is the key's last write");
            assert_eq!(
                serde_json::from_str::<Value>(&text(item, "value")).expect("JSON value"),
                data(event)["value"]
            );
        }
        feeds.insert(a.clone(), events);
    }
    // Each marker appears at most once in the whole table.
    let mut seen: HashMap<String, (String, u64)> = HashMap::new();
    for (a, events) in &feeds {
        for (seq, e) in events {
            let d = data(e);
            let marker = d["marker"]
                .as_str()
                .or_else(|| d["value"].as_str())
                .unwrap_or_else(|| panic!("event without a marker: {d}"))
                .to_owned();
            if let Some(first) = seen.insert(marker.clone(), (a.clone(), *seq)) {
                panic!("marker {marker} appears twice: {first:?} and ({a}, {seq})");
            }
        }
    }
    let find = |marker: &str| seen.get(marker).cloned();

    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for o in &outcomes {
        match o {
            Outcome::Append {
                address,
                marker,
                answer,
            } => match answer {
                Ok((seq, id, duplicate)) => {
                    *counts
                        .entry(if *duplicate {
                            "append duplicate"
                        } else {
                            "append ok"
                        })
                        .or_default() += 1;
                    assert_eq!(
                        find(marker),
                        Some((address.clone(), *seq)),
                        "Ok append {marker} is in the feed at its sequence"
                    );
                    assert_eq!(&text(&feeds[address][seq], "id"), id);
                }
                Err(StoreError::Unavailable(_)) => {
                    *counts.entry("append unavailable").or_default() += 1;
                }
                Err(e) => panic!("append {marker}: unexpected {e:?}"),
            },
            Outcome::Cas {
                address,
                marker,
                answer,
            } => match answer {
                Ok((seq, id)) => {
                    *counts.entry("cas ok").or_default() += 1;
                    assert_eq!(
                        find(marker),
                        Some((address.clone(), *seq)),
                        "Ok CAS write {marker} is in the feed"
                    );
                    let e = &feeds[address][seq];
                    assert_eq!(&text(e, "id"), id);
                    assert_eq!(text(e, "type"), "state.updated");
                    assert_eq!(data(e)["revision"], json!(seq));
                }
                Err(StoreError::RevisionConflict { .. }) => {
                    *counts.entry("cas conflict").or_default() += 1;
                    assert_eq!(
                        find(marker),
                        None,
                        "a refused CAS write {marker} never applied"
                    );
                }
                Err(StoreError::Unavailable(_)) => {
                    *counts.entry("cas unavailable").or_default() += 1;
                }
                Err(e) => panic!("CAS {marker}: unexpected {e:?}"),
            },
            Outcome::Ack {
                address,
                sequence,
                answer,
            } => match answer {
                Ok(at) => {
                    *counts.entry("ack ok").or_default() += 1;
                    assert_eq!(*at, T0 + 1);
                    assert_eq!(
                        number(&feeds[address][sequence], "acked_at"),
                        (T0 + 1) as u64
                    );
                }
                Err(StoreError::Unavailable(_)) => {
                    *counts.entry("ack unavailable").or_default() += 1;
                }
                Err(e) => panic!("ack {address}/{sequence}: unexpected {e:?}"),
            },
        }
    }
    println!("stress: proxy {}", stats.summary());
    println!("stress: outcomes {counts:?}");
    assert!(
        stats.failed_before.total > 0 && stats.dropped_after > 0,
        "faults were injected: {stats:?}"
    );
    assert!(
        stats.operations["TransactWriteItems"].dropped_after > 0,
        "some transactions applied and lost their answer: {stats:?}"
    );
    assert!(counts.get("append ok").copied().unwrap_or(0) > 0);
    assert!(counts.get("cas ok").copied().unwrap_or(0) > 0);
    assert!(
        counts.get("cas conflict").copied().unwrap_or(0) > 0,
        "the CAS writers raced: {counts:?}"
    );
}

/// A long poll's checks of the sequence are hints: one that fails every attempt (DynamoDB
/// throttling the whole retry budget) delays the next look instead of failing the poll, which
/// still answers 200 with the event delivered after it (docs/API.md §4).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_poll_outlives_a_failed_check_and_answers_the_next_event() {
    let rig = Rig::new(FaultConfig::passthrough(11)).await;
    let app = rig.api();
    let call = |method: Method, uri: String, token: Option<String>, body: Option<Value>| {
        let app = app.clone();
        async move {
            let mut b = Request::builder().method(method).uri(uri);
            if let Some(t) = token {
                b = b.header("authorization", format!("Bearer {t}"));
            }
            let body = match body {
                Some(v) => {
                    b = b.header("content-type", "application/json");
                    Body::from(v.to_string())
                }
                None => Body::empty(),
            };
            let resp = app
                .oneshot(b.body(body).expect("request"))
                .await
                .expect("infallible");
            let status = resp.status();
            let bytes = resp.into_body().collect().await.expect("body").to_bytes();
            (
                status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let (status, created) = call(Method::POST, "/api/v1/addresses".into(), None, None).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["address"]["id"].as_str().expect("id").to_owned();
    let token = created["credentials"]["read_token"]
        .as_str()
        .expect("read token")
        .to_owned();

    let queries = rig.op("Query").requests;
    let poll = tokio::spawn(call(
        Method::GET,
        format!("/api/v1/addresses/{id}/events?after=0&wait=20"),
        Some(token),
        None,
    ));
    // Wait until the poll has read the empty feed (a Query) and made its first check (a
    // GetItem after it), however slow the machine: only then does every attempt of the next
    // check fail (failing earlier would fail the poll's authentication, a real 503).
    let start = std::time::Instant::now();
    while rig.op("Query").requests == queries {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "the poll never read the feed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let checks = rig.op("GetItem").requests;
    while rig.op("GetItem").requests == checks {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "the poll never checked the feed's head"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let before = rig.op("GetItem").failed_before;
    rig.proxy
        .push_rule(Rule::new("GetItem", Action::Throttling, SDK_MAX_ATTEMPTS));
    let start = std::time::Instant::now();
    while rig.op("GetItem").failed_before < before + u64::from(SDK_MAX_ATTEMPTS) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "the poll's checks never used up the injected failures: {:?}",
            rig.op("GetItem")
        );
        assert!(
            !poll.is_finished(),
            "the poll ended before its check failed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let inbox = created["endpoints"]["inbox_url"]
        .as_str()
        .expect("inbox url")
        .trim_start_matches("http://agentaddress.test")
        .to_owned();
    let (status, v) = call(
        Method::POST,
        inbox,
        None,
        Some(json!({"type": "after.the.failure"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    let (status, page) = poll.await.expect("poll task");
    assert_eq!(
        status,
        StatusCode::OK,
        "a failed check does not fail the poll: {page}"
    );
    let events = page["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{page}");
    assert_eq!(events[0]["type"], "after.the.failure");
}
