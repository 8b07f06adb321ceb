//! Wake hooks on DynamoDB Local (docs/API.md §19), beyond the conformance cases: how a hook and
//! its address's hook types are laid out, an address from before hooks, the cap and the
//! compare-and-set under concurrent writers, and the purge.
//!
//! Like the other DynamoDB tests they need DynamoDB Local (`scripts/test`, or
//! `scripts/emulators start`, `eval "$(scripts/emulators env)"` and a table named by
//! `AGENTADDRESS_TEST_TABLE`) and fail loudly without them.

use agentaddress_core::store::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

use agentaddress_aws::DynamoStore;
use agentaddress_core::domain::hooks::MAX_HOOKS_PER_ADDRESS;
use agentaddress_core::domain::{ids, Limits};
use agentaddress_core::store::conformance::T0;
use agentaddress_core::store::hook_conformance::new_hook;
use agentaddress_core::store::{HookStatus, NewAddress, StoreError};
use aws_sdk_dynamodb::types::AttributeValue;

type Item = HashMap<String, AttributeValue>;

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

fn new_address(id: &str) -> NewAddress {
    NewAddress {
        id: id.to_owned(),
        name: None,
        task_id: None,
        email: format!("{id}@x.test"),
        created_at: T0,
        expires_at: None,
        token_hash: ids::hash_secret("t"),
        inbox_hash: ids::hash_secret("i"),
        verification: None,
        email_policy: None,
        hooks: Vec::new(),
    }
}

fn text(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn number(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Every item of the address's partition, by sort key.
async fn partition(store: &DynamoStore, id: &str) -> HashMap<String, Item> {
    let client = DynamoStore::client_from_env().await;
    let out = client
        .query()
        .table_name(store.table())
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", text(&format!("A#{id}")))
        .consistent_read(true)
        .send()
        .await
        .expect("query the partition");
    out.items()
        .iter()
        .map(|i| {
            let sk = i.get("sk").and_then(|v| v.as_s().ok()).cloned();
            (sk.expect("an item has a sort key"), i.clone())
        })
        .collect()
}

#[tokio::test]
async fn a_hook_item_holds_its_record_and_meta_its_types() {
    let store = dynamo().await;
    let id = ids::new_address_id();
    let mut hook = new_hook(&["email.*", "request.answered"]);
    hook.headers = vec![("x-b".into(), "2".into()), ("x-a".into(), "1".into())];
    store
        .create_address(NewAddress {
            hooks: vec![hook.clone()],
            ..new_address(&id)
        })
        .await
        .expect("create with a hook");
    let items = partition(&store, &id).await;
    let item = &items[&format!("H#{}", hook.id)];
    assert_eq!(
        item["secret"],
        text(&hook.secret),
        "stored as given: wakes are signed with it"
    );
    assert_eq!(
        item["headers"],
        AttributeValue::L(vec![
            AttributeValue::L(vec![text("x-b"), text("2")]),
            AttributeValue::L(vec![text("x-a"), text("1")]),
        ]),
        "name/value pairs in their order"
    );
    assert_eq!(
        item["types"],
        AttributeValue::L(vec![text("email.*"), text("request.answered")])
    );
    assert_eq!(item["status"], text("active"));
    assert_eq!(item["format"], text("standard"));
    assert_eq!(item["order"], number(1));
    assert!(!item.contains_key("pending_to") && !item.contains_key("last_error"));
    let meta = &items["META"];
    assert_eq!(
        (&meta["hooks"], &meta["hooks_made"]),
        (&number(1), &number(1))
    );
    assert_eq!(
        meta["hook_types"],
        AttributeValue::M(HashMap::from([(
            hook.id.clone(),
            AttributeValue::L(vec![text("email.*"), text("request.answered")]),
        )]))
    );
    let read = store.get_hook(&id, &hook.id, T0).await.expect("get");
    assert_eq!(read.headers, hook.headers);

    // A paused hook leaves the address's types; a delivery state's absent fields are removed.
    let mut claimed = read.clone();
    claimed.delivery.pending_to = Some(3);
    claimed.delivery.last_error = Some("timeout".into());
    let claimed = store
        .save_hook(&id, claimed, Vec::new(), &Limits::default(), T0)
        .await
        .expect("save")
        .expect("written");
    let mut paused = claimed;
    paused.status = HookStatus::Paused;
    paused.delivery.pending_to = None;
    paused.delivery.last_error = None;
    let paused = store
        .save_hook(&id, paused, Vec::new(), &Limits::default(), T0)
        .await
        .expect("save")
        .expect("written");
    assert_eq!(paused.revision, 3);
    let items = partition(&store, &id).await;
    let item = &items[&format!("H#{}", hook.id)];
    assert!(!item.contains_key("pending_to") && !item.contains_key("last_error"));
    assert_eq!(item["status"], text("paused"));
    assert_eq!(
        items["META"]["hook_types"],
        AttributeValue::M(HashMap::new())
    );
    assert_eq!(
        store.get_hook(&id, &hook.id, T0).await.expect("get"),
        paused
    );

    store.delete_hook(&id, &hook.id, T0).await.expect("delete");
    let items = partition(&store, &id).await;
    assert_eq!(items["META"]["hooks"], number(0));
    assert_eq!(
        items["META"]["hooks_made"],
        number(1),
        "the next hook comes after it"
    );
}

#[tokio::test]
async fn an_address_from_before_hooks_gets_them() {
    let store = dynamo().await;
    let id = ids::new_address_id();
    // Its META as written before hooks: no counts, no map.
    DynamoStore::client_from_env()
        .await
        .put_item()
        .table_name(store.table())
        .item("pk", text(&format!("A#{id}")))
        .item("sk", text("META"))
        .item("id", text(&id))
        .item("email", text(&format!("{id}@x.test")))
        .item("created_at", number(T0))
        .item("token_hash", text(&ids::hash_secret("t")))
        .item("inbox_hash", text(&ids::hash_secret("i")))
        .item("seq", number(0))
        .item("state_keys", number(0))
        .item("state_bytes", number(0))
        .send()
        .await
        .expect("a META from before hooks");
    let record = store
        .get_address(&id, T0)
        .await
        .expect("get")
        .expect("exists");
    assert!(record.hook_types.is_empty());
    assert!(store.list_hooks(&id, T0).await.expect("list").is_empty());
    let stray = new_hook(&["*"]);
    assert_eq!(
        store.delete_hook(&id, &stray.id, T0).await,
        Err(StoreError::NotFound)
    );
    assert_eq!(
        store.get_hook(&id, &stray.id, T0).await,
        Err(StoreError::NotFound)
    );

    let added = store
        .add_hooks(
            &id,
            vec![new_hook(&["x.*"]), stray.clone()],
            MAX_HOOKS_PER_ADDRESS,
            T0,
        )
        .await
        .expect("the first hooks make the map");
    let mut types = store
        .get_address(&id, T0)
        .await
        .expect("get")
        .expect("exists")
        .hook_types;
    types.sort();
    assert_eq!(types, vec!["*", "x.*"]);
    let mut disabled = added[1].clone();
    disabled.status = HookStatus::Disabled;
    store
        .save_hook(&id, disabled, Vec::new(), &Limits::default(), T0)
        .await
        .expect("save")
        .expect("written");
    let record = store
        .get_address(&id, T0)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.hook_types, vec!["x.*"]);
    store.delete_hook(&id, &stray.id, T0).await.expect("delete");
    let listed = store.list_hooks(&id, T0).await.expect("list");
    assert_eq!(listed, vec![added[0].clone()]);
}

#[tokio::test]
async fn a_damaged_hook_item_is_an_internal_error_naming_the_attribute() {
    let store = dynamo().await;
    let id = ids::new_address_id();
    let hook = new_hook(&["*"]);
    store
        .create_address(NewAddress {
            hooks: vec![hook.clone()],
            ..new_address(&id)
        })
        .await
        .expect("create with a hook");
    DynamoStore::client_from_env()
        .await
        .update_item()
        .table_name(store.table())
        .key("pk", text(&format!("A#{id}")))
        .key("sk", text(&format!("H#{}", hook.id)))
        .update_expression("REMOVE secret SET attempts = :x")
        .expression_attribute_values(":x", text("two"))
        .send()
        .await
        .expect("damage the item");
    match store.get_hook(&id, &hook.id, T0).await {
        Err(StoreError::Internal(m)) => assert!(m.contains("secret"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_adds_stay_within_the_cap_and_one_save_wins() {
    let store = Arc::new(dynamo().await);
    let id = ids::new_address_id();
    store
        .create_address(new_address(&id))
        .await
        .expect("create");
    let limits = Limits::default();
    let tasks: Vec<_> = (0..MAX_HOOKS_PER_ADDRESS + 3)
        .map(|i| {
            let (store, id, limits) = (store.clone(), id.clone(), limits.clone());
            tokio::spawn(async move {
                if i % 2 == 0 {
                    // Appends beside them: each hook's cursor is the head when it was added.
                    store
                        .append_event(
                            &id,
                            agentaddress_core::store::NewEvent {
                                event_type: "x.y".into(),
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
                        .expect("append");
                }
                store
                    .add_hooks(&id, vec![new_hook(&["*"])], MAX_HOOKS_PER_ADDRESS, T0)
                    .await
            })
        })
        .collect();
    let mut added = Vec::new();
    let mut refused = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(mut hooks) => added.push(hooks.remove(0)),
            Err(StoreError::QuotaExceeded) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!((added.len(), refused), (MAX_HOOKS_PER_ADDRESS, 3));
    let listed = store.list_hooks(&id, T0).await.expect("list");
    assert_eq!(listed.len(), MAX_HOOKS_PER_ADDRESS);
    for hook in &added {
        assert!(listed.contains(hook), "{hook:?} as added");
    }
    let items = partition(&store, &id).await;
    assert_eq!(items["META"]["hooks"], number(MAX_HOOKS_PER_ADDRESS as i64));

    // Writers that read the same revision: exactly one is written.
    let hook = listed[0].clone();
    let saves: Vec<_> = (0..4u64)
        .map(|i| {
            let (store, id, limits) = (store.clone(), id.clone(), limits.clone());
            let mut mine = hook.clone();
            mine.delivery.pending_to = Some(100 + i);
            if i % 2 == 1 {
                mine.status = HookStatus::Paused;
            }
            tokio::spawn(async move { store.save_hook(&id, mine, Vec::new(), &limits, T0).await })
        })
        .collect();
    let mut written = Vec::new();
    for s in saves {
        if let Some(h) = s.await.expect("task").expect("save") {
            written.push(h);
        }
    }
    assert_eq!(written.len(), 1, "{written:?}");
    let stored = store.get_hook(&id, &hook.id, T0).await.expect("get");
    assert_eq!(stored, written[0]);
    assert_eq!(stored.revision, hook.revision + 1);
}

#[tokio::test]
async fn hooks_are_purged_with_their_address() {
    let store = dynamo().await;
    let id = ids::new_address_id();
    store
        .create_address(new_address(&id))
        .await
        .expect("create");
    let hooks = store
        .add_hooks(
            &id,
            vec![new_hook(&["*"]), new_hook(&["a.b"])],
            MAX_HOOKS_PER_ADDRESS,
            T0,
        )
        .await
        .expect("add");
    let items = partition(&store, &id).await;
    for h in &hooks {
        assert!(items.contains_key(&format!("H#{}", h.id)), "{items:?}");
    }
    store.delete_address(&id, T0).await.expect("delete");
    let progress = store.purge_address(&id, 25, T0).await.expect("purge");
    assert!(progress.done);
    let left: Vec<String> = partition(&store, &id).await.into_keys().collect();
    assert_eq!(left, vec!["META".to_owned()]);
}
