//! Conformance cases of sender rules (docs/API.md §10, "Sender rules"): an address's
//! `email_policy` is stored with it (at creation, or set later), replaced, removed, kept
//! through appends and state writes; its refusals are counted, concurrently too; and only a
//! live address's can be set or counted.

use serde_json::json;

use super::{append, limits, new_address, DAY, T0};
use crate::domain::email_policy::EmailPolicy;
use crate::domain::ids;
use crate::store::{AddressRecord, NewAddress, Store, StoreError};

fn policy(v: serde_json::Value) -> EmailPolicy {
    EmailPolicy::from_json(&v).expect("a valid policy")
}

async fn record(store: &dyn Store, id: &str) -> AddressRecord {
    store
        .get_address(id, T0)
        .await
        .expect("get")
        .expect("exists")
}

pub async fn email_policy_is_stored_replaced_and_removed(store: &dyn Store) {
    let first =
        policy(json!({"allow": ["*@example.com", "ops@*.corp.example"], "require_auth": "dmarc"}));
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
            verification: None,
            email_policy: Some(first.clone()),
            hooks: Vec::new(),
        })
        .await
        .expect("create");
    let a = record(store, &id).await;
    assert_eq!(a.email_policy, Some(first.clone()));
    assert_eq!(a.email_refused, 0);
    append(store, &id, 1, T0).await;
    store
        .put_state(&id, "k", "1".into(), None, &limits(), T0)
        .await
        .expect("put state");
    assert_eq!(record(store, &id).await.email_policy, Some(first));

    let second = policy(json!({"require_auth": "spf_or_dkim"}));
    store
        .set_email_policy(&id, Some(second.clone()), T0)
        .await
        .expect("replace");
    assert_eq!(record(store, &id).await.email_policy, Some(second.clone()));
    // Setting it again is the same.
    store
        .set_email_policy(&id, Some(second.clone()), T0)
        .await
        .expect("again");
    assert_eq!(record(store, &id).await.email_policy, Some(second.clone()));
    store.set_email_policy(&id, None, T0).await.expect("remove");
    assert_eq!(record(store, &id).await.email_policy, None);
    // Removing what is not there is the same.
    store
        .set_email_policy(&id, None, T0)
        .await
        .expect("remove again");
    assert_eq!(record(store, &id).await.email_policy, None);

    // An address created without one, set later.
    let plain = new_address(store, None).await;
    assert_eq!(plain.email_policy, None);
    store
        .set_email_policy(&plain.id, Some(second.clone()), T0)
        .await
        .expect("set");
    assert_eq!(
        record(store, &plain.id).await.email_policy,
        Some(second.clone())
    );

    assert_eq!(
        store
            .set_email_policy("addr_unknown", Some(second.clone()), T0)
            .await,
        Err(StoreError::AddressNotFound)
    );
    // Expired (at T0 + DAY), then deleted: gone, and nothing changes.
    assert_eq!(
        store
            .set_email_policy(&id, Some(second.clone()), T0 + DAY)
            .await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(record(store, &id).await.email_policy, None);
    store.delete_address(&plain.id, T0).await.expect("delete");
    assert_eq!(
        store.set_email_policy(&plain.id, None, T0).await,
        Err(StoreError::AddressGone)
    );
}

pub async fn email_refusals_are_counted(store: &dyn Store) {
    let a = new_address(store, Some(T0 + DAY)).await;
    let other = new_address(store, None).await;
    store
        .set_email_policy(&a.id, Some(policy(json!({"allow": ["*@example.com"]}))), T0)
        .await
        .expect("set");
    for _ in 0..3 {
        store.count_email_refusal(&a.id, T0).await.expect("count");
    }
    assert_eq!(record(store, &a.id).await.email_refused, 3);
    assert_eq!(record(store, &other.id).await.email_refused, 0);

    // Concurrent refusals each count.
    let counts = (0..8).map(|_| store.count_email_refusal(&a.id, T0));
    for r in futures::future::join_all(counts).await {
        r.expect("count concurrently");
    }
    assert_eq!(record(store, &a.id).await.email_refused, 11);

    // The count stays through a change of the rules, appends and their removal.
    append(store, &a.id, 1, T0).await;
    store
        .set_email_policy(&a.id, Some(policy(json!({"require_auth": "dmarc"}))), T0)
        .await
        .expect("replace");
    store
        .set_email_policy(&a.id, None, T0)
        .await
        .expect("remove");
    let after = record(store, &a.id).await;
    assert_eq!(after.email_refused, 11);
    assert_eq!(after.last_sequence, 1, "counting appends nothing");

    assert_eq!(
        store.count_email_refusal("addr_unknown", T0).await,
        Err(StoreError::AddressNotFound)
    );
    // Expired: not counted.
    assert_eq!(
        store.count_email_refusal(&a.id, T0 + DAY).await,
        Err(StoreError::AddressGone)
    );
    assert_eq!(record(store, &a.id).await.email_refused, 11);
    store.delete_address(&other.id, T0).await.expect("delete");
    assert_eq!(
        store.count_email_refusal(&other.id, T0).await,
        Err(StoreError::AddressGone)
    );
}
