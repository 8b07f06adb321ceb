//! Conformance cases of the waiting slots (docs/API.md §6, "Waiting polls"): at most `cap` are
//! held at once, concurrently too; a slot handed back is free again; a slot never handed back
//! frees itself at its time.
//!
//! The slots are shared by a whole deployment (on DynamoDB, items outside any address), so
//! this case takes its times from the wall clock, not from `T0`, and hands back every slot it
//! took: run again on the same table, it finds the slots free.

use super::T0;
use crate::store::Store;

fn wall_clock() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4));
    now.max(T0)
}

pub async fn wait_slots_are_capped_handed_back_and_free_themselves(store: &dyn Store) {
    let cap = 3;
    let now = wall_clock();
    let until = now + 30_000;
    let mut held = Vec::new();
    for _ in 0..cap {
        let slot = store
            .acquire_wait_slot(cap, until, now)
            .await
            .expect("acquire")
            .expect("a slot within the cap");
        assert!(!held.contains(&slot), "each slot is its own");
        held.push(slot);
    }
    assert_eq!(
        store
            .acquire_wait_slot(cap, until, now)
            .await
            .expect("acquire"),
        None,
        "the cap is reached"
    );
    assert_eq!(
        store
            .acquire_wait_slot(0, until, now)
            .await
            .expect("acquire"),
        None,
        "a cap of 0 holds nothing"
    );
    // One handed back: one free again (and handing it back twice is harmless).
    let back = held.remove(0);
    store.release_wait_slot(&back).await.expect("release");
    store.release_wait_slot(&back).await.expect("release again");
    store
        .release_wait_slot("3.0.ws_unknown")
        .await
        .expect("an unknown slot");
    held.push(
        store
            .acquire_wait_slot(cap, until, now)
            .await
            .expect("acquire")
            .expect("the slot handed back"),
    );
    assert_eq!(
        store
            .acquire_wait_slot(cap, until, now)
            .await
            .expect("acquire"),
        None
    );
    // Never handed back: past their time the slots are free.
    let later = until + 1;
    let mut fresh = Vec::new();
    for _ in 0..cap {
        fresh.push(
            store
                .acquire_wait_slot(cap, later + 30_000, later)
                .await
                .expect("acquire")
                .expect("expired slots free themselves"),
        );
    }
    assert_eq!(
        store
            .acquire_wait_slot(cap, later + 30_000, later)
            .await
            .expect("acquire"),
        None
    );
    for slot in held.iter().chain(&fresh) {
        store.release_wait_slot(slot).await.expect("release");
    }

    // Many at once: exactly `cap` get one.
    let at = later + 60_000;
    let tries: Vec<_> = (0..8)
        .map(|_| store.acquire_wait_slot(cap, at + 30_000, at))
        .collect();
    let got: Vec<String> = futures::future::join_all(tries)
        .await
        .into_iter()
        .filter_map(|r| r.expect("acquire"))
        .collect();
    assert_eq!(got.len(), 3, "{got:?}");
    for slot in &got {
        store.release_wait_slot(slot).await.expect("release");
    }
}
