//! Conformance cases of filtered reads (docs/API.md §21): only matching events are returned,
//! the cursor passes over the others, and a read examines a bounded range.

use serde_json::json;

use super::{limits, new_address, T0};
use crate::domain::patterns::TypePatterns;
use crate::domain::{Ingress, Millis};
use crate::store::{MatchingPage, NewEvent, Store, TypeFilter};

const MIB4: u64 = 4 * 1024 * 1024;

fn typed(event_type: &str, data: serde_json::Value) -> NewEvent {
    NewEvent {
        event_type: event_type.into(),
        source: Some("conformance".into()),
        ingress: Ingress::Http,
        data: data.to_string(),
        http: None,
    }
}

async fn append_typed(store: &dyn Store, id: &str, event_type: &str, at: Millis) -> u64 {
    store
        .append_event(
            id,
            typed(event_type, json!({"t": event_type})),
            None,
            &limits(),
            at,
        )
        .await
        .expect("append")
        .event
        .sequence
}

fn filter(types: &[&str], examine: usize) -> TypeFilter {
    TypeFilter {
        types: TypePatterns::parse(types).expect("patterns"),
        examine,
    }
}

async fn read(
    store: &dyn Store, id: &str, after: u64, f: &TypeFilter, limit: usize, max_bytes: u64,
    now: Millis,
) -> MatchingPage {
    store
        .read_matching(id, after, f, limit, max_bytes, now)
        .await
        .expect("filtered read")
}

fn seqs(p: &MatchingPage) -> Vec<u64> {
    p.page.events.iter().map(|e| e.sequence).collect()
}

pub async fn filtered_reads_return_matches_and_pass_the_others(store: &dyn Store) {
    let a = new_address(store, None).await;
    for t in ["a.one", "b.two", "a.three", "c"] {
        append_typed(store, &a.id, t, T0).await;
    }
    let p = read(store, &a.id, 0, &filter(&["a.*"], 1000), 100, MIB4, T0).await;
    assert_eq!(seqs(&p), vec![1, 3]);
    assert_eq!(p.page.events[1].event_type, "a.three");
    assert_eq!(
        p.examined_through, 4,
        "the cursor passes the last non-match"
    );
    assert!(!p.page.has_more);
    let p = read(store, &a.id, 0, &filter(&["c", "b.*"], 1000), 100, MIB4, T0).await;
    assert_eq!(seqs(&p), vec![2, 4]);
    let p = read(store, &a.id, 1, &filter(&["nothing"], 1000), 100, MIB4, T0).await;
    assert!(p.page.events.is_empty());
    assert_eq!(p.examined_through, 4);
    assert!(!p.page.has_more);
    let p = read(store, &a.id, 4, &filter(&["*"], 1000), 100, MIB4, T0).await;
    assert!(p.page.events.is_empty());
    assert_eq!(p.examined_through, 4, "nothing examined: the cursor stays");
    // Expired events are neither returned nor examined.
    let later = T0 + limits().retention_ms();
    append_typed(store, &a.id, "a.late", later - 1).await;
    let p = read(store, &a.id, 0, &filter(&["a.*"], 1000), 100, MIB4, later).await;
    assert_eq!(seqs(&p), vec![5]);
    assert_eq!(p.examined_through, 5);
}

pub async fn filtered_reads_examine_a_bounded_range(store: &dyn Store) {
    let a = new_address(store, None).await;
    for t in ["x", "x", "x", "x", "x", "y", "x"] {
        append_typed(store, &a.id, t, T0).await;
    }
    let y = filter(&["y"], 3);
    let p = read(store, &a.id, 0, &y, 100, MIB4, T0).await;
    assert!(p.page.events.is_empty());
    assert_eq!(p.examined_through, 3, "three examined");
    assert!(p.page.has_more, "events lie beyond the examined ones");
    let p = read(store, &a.id, 3, &y, 100, MIB4, T0).await;
    assert_eq!(seqs(&p), vec![6]);
    assert_eq!(p.examined_through, 6);
    assert!(p.page.has_more);
    let p = read(store, &a.id, 6, &y, 100, MIB4, T0).await;
    assert!(p.page.events.is_empty());
    assert_eq!(p.examined_through, 7);
    assert!(!p.page.has_more);
}

pub async fn filtered_pages_are_cut_at_limit_and_bytes(store: &dyn Store) {
    let a = new_address(store, None).await;
    // Large events (over DynamoDB's item, so stored in chunks), matching and not.
    let big: String = (0..700_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    append_typed(store, &a.id, "y", T0).await;
    store
        .append_event(&a.id, typed("x", json!({"big": big})), None, &limits(), T0)
        .await
        .expect("append a large x");
    store
        .append_event(&a.id, typed("y", json!({"big": big})), None, &limits(), T0)
        .await
        .expect("append a large y");
    append_typed(store, &a.id, "x", T0).await;
    append_typed(store, &a.id, "y", T0).await;
    let y = filter(&["y"], 1000);
    let p = read(store, &a.id, 0, &y, 100, MIB4, T0).await;
    assert_eq!(seqs(&p), vec![1, 3, 5]);
    assert_eq!(p.page.events[1].data, json!({"big": big}).to_string());
    assert_eq!(p.examined_through, 5);
    let p = read(store, &a.id, 0, &y, 2, MIB4, T0).await;
    assert_eq!(seqs(&p), vec![1, 3]);
    assert_eq!(
        p.examined_through, 4,
        "cut at its limit: through the non-match before the first match left out"
    );
    assert!(p.page.has_more);
    let p = read(store, &a.id, 0, &y, 1, MIB4, T0).await;
    assert_eq!(seqs(&p), vec![1]);
    assert_eq!(p.examined_through, 2, "the large non-match is passed over");
    let p = read(store, &a.id, 0, &y, 100, 1, T0).await;
    assert_eq!(seqs(&p), vec![1], "a page always holds one available event");
    assert_eq!(p.examined_through, 2);
    assert!(p.page.has_more);
    let p = read(store, &a.id, 2, &y, 100, 1, T0).await;
    assert_eq!(seqs(&p), vec![3]);
    assert_eq!(p.examined_through, 4);
    assert!(p.page.has_more);
}
