//! The Store conformance cases of wake hooks (docs/API.md §19): hooks added atomically within
//! their cap, their cursor starting at the feed's head, the address's hook types following
//! their status, delivery state written by compare-and-set with a hook's reports appended in
//! the same step, and hooks going with their address. A backend runs them with
//! [`crate::store_hook_conformance_tests!`].

use serde_json::json;

use super::conformance::{new_address, T0};
use super::{HookRecord, HookStatus, NewAddress, NewEvent, NewHook, Store, StoreError};
use crate::domain::hooks::{new_hook_id, new_signing_secret, HookFormat, MAX_HOOKS_PER_ADDRESS};
use crate::domain::{ids, Ingress, Limits};

/// Generates one `#[tokio::test]` per hook case, as [`crate::store_conformance_tests!`] does.
#[macro_export]
macro_rules! store_hook_conformance_tests {
    ($make:expr) => {
        $crate::__hook_conformance_cases!($make;
            hooks_are_added_read_and_deleted, hooks_are_capped_per_address,
            hooks_are_made_with_their_address, a_hook_is_saved_by_compare_and_set,
            a_hooks_reports_are_appended_with_its_state, a_hooks_reports_pass_a_full_feed,
            hooks_go_with_their_address
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __hook_conformance_cases {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store: ::std::sync::Arc<dyn $crate::store::Store> = $make;
                $crate::store::hook_conformance::$case(store.as_ref()).await;
            }
        )*
    };
}

/// A hook to add, waking for `types`; also for a backend's own tests.
pub fn new_hook(types: &[&str]) -> NewHook {
    NewHook {
        id: new_hook_id(),
        url: "https://hooks.example/wake".into(),
        types: types.iter().map(|t| (*t).to_owned()).collect(),
        format: HookFormat::Standard,
        headers: vec![("authorization".into(), "Bearer secret-value".into())],
        secret: new_signing_secret(),
        debounce_seconds: 0,
    }
}

fn event(event_type: &str) -> NewEvent {
    NewEvent {
        event_type: event_type.into(),
        source: Some("conformance".into()),
        ingress: Ingress::Http,
        data: json!({}).to_string(),
        http: None,
    }
}

fn hook_event(event_type: &str, hook_id: &str) -> NewEvent {
    NewEvent {
        event_type: event_type.into(),
        source: None,
        ingress: Ingress::Outbound,
        data: json!({"hook_id": hook_id}).to_string(),
        http: None,
    }
}

async fn hook_types(store: &dyn Store, id: &str) -> Vec<String> {
    let mut types = store
        .get_address(id, T0)
        .await
        .expect("get address")
        .expect("address exists")
        .hook_types;
    types.sort();
    types
}

pub async fn hooks_are_added_read_and_deleted(store: &dyn Store) {
    let limits = Limits::default();
    let a = new_address(store, None).await;
    assert!(hook_types(store, &a.id).await.is_empty());
    for _ in 0..3 {
        store
            .append_event(&a.id, event("x.y"), None, &limits, T0)
            .await
            .expect("append");
    }
    let first = new_hook(&["email.*", "request.answered"]);
    let second = new_hook(&["*"]);
    let added = store
        .add_hooks(
            &a.id,
            vec![first.clone(), second.clone()],
            MAX_HOOKS_PER_ADDRESS,
            T0 + 5,
        )
        .await
        .expect("add hooks");
    assert_eq!(added.len(), 2);
    let read = store
        .get_hook(&a.id, &first.id, T0 + 6)
        .await
        .expect("get hook");
    assert_eq!(read, added[0]);
    assert_eq!(read.url, first.url);
    assert_eq!(read.types, first.types);
    assert_eq!(read.headers, first.headers);
    assert_eq!(read.secret, first.secret, "the secret is kept usable");
    assert_eq!(read.format, HookFormat::Standard);
    assert_eq!(read.status, HookStatus::Active);
    assert_eq!(read.created_at, T0 + 5);
    assert_eq!(
        read.delivery.delivered_through, 3,
        "the cursor starts at the feed's head"
    );
    assert_eq!(read.delivery.pending_to, None);
    let listed = store.list_hooks(&a.id, T0 + 6).await.expect("list hooks");
    assert_eq!(
        listed.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        vec![first.id.as_str(), second.id.as_str()],
        "oldest first"
    );
    assert_eq!(
        hook_types(store, &a.id).await,
        vec!["*", "email.*", "request.answered"]
    );

    store
        .delete_hook(&a.id, &second.id, T0 + 7)
        .await
        .expect("delete");
    assert!(matches!(
        store.get_hook(&a.id, &second.id, T0 + 8).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.delete_hook(&a.id, &second.id, T0 + 8).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store.list_hooks(&a.id, T0 + 8).await.expect("list").len(),
        1
    );
    assert_eq!(
        hook_types(store, &a.id).await,
        vec!["email.*", "request.answered"]
    );
    let other = new_address(store, None).await;
    assert!(
        matches!(
            store.get_hook(&other.id, &first.id, T0 + 8).await,
            Err(StoreError::NotFound)
        ),
        "a hook is found only under its own address"
    );
}

pub async fn hooks_are_capped_per_address(store: &dyn Store) {
    let a = new_address(store, None).await;
    let six: Vec<NewHook> = (0..MAX_HOOKS_PER_ADDRESS + 1)
        .map(|_| new_hook(&["*"]))
        .collect();
    assert!(matches!(
        store
            .add_hooks(&a.id, six.clone(), MAX_HOOKS_PER_ADDRESS, T0)
            .await,
        Err(StoreError::QuotaExceeded)
    ));
    assert!(
        store.list_hooks(&a.id, T0).await.expect("list").is_empty(),
        "nothing was added"
    );
    store
        .add_hooks(&a.id, six[..4].to_vec(), MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("four");
    assert!(matches!(
        store
            .add_hooks(&a.id, six[4..].to_vec(), MAX_HOOKS_PER_ADDRESS, T0)
            .await,
        Err(StoreError::QuotaExceeded)
    ));
    store
        .add_hooks(&a.id, six[4..5].to_vec(), MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("the fifth");
    assert!(matches!(
        store
            .add_hooks(&a.id, six[5..].to_vec(), MAX_HOOKS_PER_ADDRESS, T0)
            .await,
        Err(StoreError::QuotaExceeded)
    ));
    // A deleted hook frees its place.
    store
        .delete_hook(&a.id, &six[0].id, T0)
        .await
        .expect("delete");
    store
        .add_hooks(&a.id, six[5..].to_vec(), MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("a place was freed");
    assert_eq!(
        store.list_hooks(&a.id, T0).await.expect("list").len(),
        MAX_HOOKS_PER_ADDRESS
    );
}

pub async fn hooks_are_made_with_their_address(store: &dyn Store) {
    let id = ids::new_address_id();
    let hook = new_hook(&["request.*"]);
    store
        .create_address(NewAddress {
            id: id.clone(),
            name: None,
            task_id: None,
            email: format!("{id}@inbox.test"),
            created_at: T0,
            expires_at: None,
            token_hash: ids::hash_secret("token"),
            inbox_hash: ids::hash_secret("inbox"),
            verification: None,
            email_policy: None,
            hooks: vec![hook.clone()],
        })
        .await
        .expect("create");
    let listed = store.list_hooks(&id, T0).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, hook.id);
    assert_eq!(listed[0].secret, hook.secret);
    assert_eq!(listed[0].delivery.delivered_through, 0);
    assert_eq!(listed[0].created_at, T0);
    assert_eq!(hook_types(store, &id).await, vec!["request.*"]);
}

pub async fn a_hook_is_saved_by_compare_and_set(store: &dyn Store) {
    let limits = Limits::default();
    let a = new_address(store, None).await;
    let hook = new_hook(&["email.*"]);
    let added = store
        .add_hooks(&a.id, vec![hook.clone()], MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("add")
        .remove(0);

    let mut claim = added.clone();
    claim.delivery.pending_to = Some(4);
    claim.delivery.attempts = 1;
    claim.delivery.lease_until = Some(T0 + 30_000);
    claim.delivery.last_wake_at = Some(T0);
    let claimed = store
        .save_hook(&a.id, claim.clone(), Vec::new(), &limits, T0)
        .await
        .expect("save")
        .expect("written over the revision it read");
    assert_eq!(claimed.revision, added.revision + 1);
    assert_eq!(claimed.delivery, claim.delivery);
    assert_eq!(
        store.get_hook(&a.id, &hook.id, T0).await.expect("get"),
        claimed
    );

    // A second writer that read the same revision loses.
    let mut rival = added.clone();
    rival.delivery.pending_to = Some(9);
    assert_eq!(
        store
            .save_hook(&a.id, rival, Vec::new(), &limits, T0)
            .await
            .expect("save"),
        None
    );
    assert_eq!(
        store
            .get_hook(&a.id, &hook.id, T0)
            .await
            .expect("get")
            .delivery
            .pending_to,
        Some(4),
        "the loser changed nothing"
    );

    // Pausing takes its types off the address; activating puts them back.
    let mut paused = claimed.clone();
    paused.status = HookStatus::Paused;
    let paused = store
        .save_hook(&a.id, paused, Vec::new(), &limits, T0)
        .await
        .expect("save")
        .expect("written");
    assert!(hook_types(store, &a.id).await.is_empty());
    let mut active = paused;
    active.status = HookStatus::Active;
    store
        .save_hook(&a.id, active.clone(), Vec::new(), &limits, T0)
        .await
        .expect("save")
        .expect("written");
    assert_eq!(hook_types(store, &a.id).await, vec!["email.*"]);

    store
        .delete_hook(&a.id, &hook.id, T0)
        .await
        .expect("delete");
    assert!(matches!(
        store
            .save_hook(&a.id, active, Vec::new(), &limits, T0)
            .await,
        Err(StoreError::NotFound)
    ));
}

pub async fn a_hooks_reports_are_appended_with_its_state(store: &dyn Store) {
    let limits = Limits::default();
    let a = new_address(store, None).await;
    let hook = store
        .add_hooks(&a.id, vec![new_hook(&["*"])], MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("add")
        .remove(0);
    store
        .append_event(&a.id, event("email.received"), None, &limits, T0)
        .await
        .expect("append");
    let mut failed = hook.clone();
    failed.delivery.delivered_through = 1;
    failed.delivery.failed_ranges = 3;
    failed.status = HookStatus::Disabled;
    let reports = vec![
        hook_event("hook.failed", &hook.id),
        hook_event("hook.disabled", &hook.id),
    ];
    store
        .save_hook(&a.id, failed, reports, &limits, T0 + 1)
        .await
        .expect("save")
        .expect("written");
    let page = store
        .read_events(&a.id, 1, 10, u64::MAX, T0 + 1)
        .await
        .expect("read");
    let types: Vec<&str> = page.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, vec!["hook.failed", "hook.disabled"]);
    assert_eq!(page.events[0].sequence, 2);
    assert_eq!(store.last_sequence(&a.id, T0 + 1).await.expect("head"), 3);
    assert!(
        hook_types(store, &a.id).await.is_empty(),
        "a disabled hook wakes for nothing"
    );

    // A lost compare-and-set appends nothing.
    let stale: HookRecord = hook;
    assert_eq!(
        store
            .save_hook(
                &a.id,
                stale,
                vec![hook_event("hook.failed", "x")],
                &limits,
                T0 + 2
            )
            .await
            .expect("save"),
        None
    );
    assert_eq!(store.last_sequence(&a.id, T0 + 2).await.expect("head"), 3);
}

pub async fn a_hooks_reports_pass_a_full_feed(store: &dyn Store) {
    let limits = Limits {
        max_retained_events: 3,
        ..Limits::default()
    };
    let a = new_address(store, None).await;
    let hook = store
        .add_hooks(&a.id, vec![new_hook(&["*"])], MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("add")
        .remove(0);
    for _ in 0..3 {
        store
            .append_event(&a.id, event("x.y"), None, &limits, T0)
            .await
            .expect("append");
    }
    assert!(matches!(
        store
            .append_event(&a.id, event("x.y"), None, &limits, T0)
            .await,
        Err(StoreError::QuotaExceeded)
    ));
    let mut failed = hook.clone();
    failed.delivery.delivered_through = 3;
    failed.delivery.failed_ranges = 1;
    store
        .save_hook(
            &a.id,
            failed,
            vec![hook_event("hook.failed", &hook.id)],
            &limits,
            T0,
        )
        .await
        .expect("a report is appended on a full feed")
        .expect("written");
    assert_eq!(store.last_sequence(&a.id, T0).await.expect("head"), 4);
}

pub async fn hooks_go_with_their_address(store: &dyn Store) {
    let limits = Limits::default();
    let a = new_address(store, None).await;
    let hook = store
        .add_hooks(&a.id, vec![new_hook(&["*"])], MAX_HOOKS_PER_ADDRESS, T0)
        .await
        .expect("add")
        .remove(0);
    store
        .delete_address(&a.id, T0 + 1)
        .await
        .expect("delete address");
    assert!(matches!(
        store.list_hooks(&a.id, T0 + 2).await,
        Err(StoreError::AddressGone)
    ));
    assert!(matches!(
        store.get_hook(&a.id, &hook.id, T0 + 2).await,
        Err(StoreError::AddressGone)
    ));
    assert!(matches!(
        store
            .add_hooks(&a.id, vec![new_hook(&["*"])], MAX_HOOKS_PER_ADDRESS, T0 + 2)
            .await,
        Err(StoreError::AddressGone)
    ));
    assert!(matches!(
        store
            .save_hook(&a.id, hook, Vec::new(), &limits, T0 + 2)
            .await,
        Err(StoreError::AddressGone)
    ));
    let due = store.due_hooks(T0 + 2, 100).await.expect("due");
    assert!(
        !due.due.iter().any(|(id, _)| id == &a.id),
        "nothing is due for a deleted address"
    );
}
