//! The verifier on hand-made histories: a consistent one passes, and each tampered copy —
//! a lost increment, a consumer gap, a duplicate idempotent event, a 500, a lost 2xx write, a
//! stale read, a phantom write — is reported under its own kind.

use serde_json::{json, Value};

use super::verify;
use crate::check::history::{
    lossy_body, Anomaly, History, Op, OpKind, Outcome, Phase, LOSSY_BODIES,
};
use crate::check::workload::SIGNED_PREFIX;

const T: &str = "2026-11-30T11:04:10.123Z";
const T2: &str = "2026-11-30T11:04:11.456Z";

fn updated(seq: u64, key: &str, value: Value) -> Value {
    json!({"id": format!("evt_{seq}"), "sequence": seq, "type": "state.updated", "source": "state",
           "ingress_surface": "state", "received_at": T, "acknowledged_at": null,
           "data": {"key": key, "revision": seq, "value": value}})
}

fn deleted(seq: u64, key: &str) -> Value {
    json!({"id": format!("evt_{seq}"), "sequence": seq, "type": "state.deleted", "source": "state",
           "ingress_surface": "state", "received_at": T, "acknowledged_at": null,
           "data": {"key": key, "revision": seq}})
}

fn delivered(seq: u64, data: Value) -> Value {
    let signed = data["marker"]
        .as_str()
        .is_some_and(|m| m.starts_with(SIGNED_PREFIX));
    json!({"id": format!("evt_{seq}"), "sequence": seq, "type": "check.delivery", "source": null,
           "ingress_surface": "http", "received_at": T, "acknowledged_at": null, "data": data,
           "http": {"content_type": "application/json", "headers": {}},
           "verification": verification(signed)})
}

/// An http event's `verification` on the checker's addresses (all verify signatures).
fn verification(signed: bool) -> Value {
    if signed {
        json!({"scheme": "standard-webhooks", "verified": true})
    } else {
        json!({"scheme": "standard-webhooks", "verified": false, "reason": "missing_signature"})
    }
}

fn put_ok(key: &str, value: Value, rev: u64) -> Outcome {
    Outcome::json(
        200,
        json!({"key": key, "value": value, "revision": rev, "updated_at": T,
               "event": {"id": format!("evt_{rev}"), "sequence": rev}}),
    )
}

fn page(events: Vec<Value>, after: u64) -> Outcome {
    let next = events
        .last()
        .and_then(|e| e["sequence"].as_u64())
        .unwrap_or(after);
    Outcome::json(
        200,
        json!({"events": events, "next_cursor": next, "has_more": false}),
    )
}

fn size(key: &str, value: &Value) -> u64 {
    key.len() as u64 + value.to_string().len() as u64 + 64
}

/// Builds a history for one address, each op one time step after the previous.
struct B {
    h: History,
    t: u64,
}

impl B {
    fn new() -> Self {
        Self {
            h: History {
                limits: json!({"max_retained_events": 1000, "event_retention_seconds": 2_592_000}),
                addresses: vec!["addr_one".into()],
                ops: Vec::new(),
                wakes: None,
            },
            t: 0,
        }
    }

    fn op(&mut self, client: &str, phase: Phase, kind: OpKind, outcome: Outcome) -> usize {
        self.t += 10;
        self.h.ops.push(Op {
            client: client.into(),
            phase,
            address: (kind != OpKind::Create).then_some(0),
            kind,
            start_us: self.t,
            end_us: self.t + 5,
            outcome,
        });
        self.h.ops.len() - 1
    }

    fn w(&mut self, kind: OpKind, outcome: Outcome) -> usize {
        self.op("w0", Phase::Workload, kind, outcome)
    }

    fn poll(&mut self, consumer: usize, after: u64, events: Vec<Value>) -> usize {
        let o = page(events, after);
        self.op(
            &format!("c{consumer}"),
            Phase::Drain,
            OpKind::Poll {
                consumer,
                after,
                limit: 100,
                wait: 0.0,
                filtered: false,
            },
            o,
        )
    }

    /// A poll of a filtered consumer (`types=state.*`) answered `events`, with `next_cursor`.
    fn filtered_poll(&mut self, consumer: usize, after: u64, events: Vec<Value>, next: u64) {
        self.op(
            &format!("c{consumer}"),
            Phase::Drain,
            OpKind::Poll {
                consumer,
                after,
                limit: 100,
                wait: 0.0,
                filtered: true,
            },
            Outcome::json(
                200,
                json!({"events": events, "next_cursor": next, "has_more": false}),
            ),
        );
    }

    /// The final read-back, given the state the feed leaves.
    fn finals(&mut self, last: u64, state: &[(&str, u64, Value)], absent: &[&str]) {
        let bytes: u64 = state.iter().map(|(k, _, v)| size(k, v)).sum();
        self.op(
            "final",
            Phase::Final,
            OpKind::Inspect,
            Outcome::json(
                200,
                json!({"address": {"id": "addr_one"},
                       "usage": {"last_sequence": last, "retained_events": last,
                                 "state_keys": state.len(), "state_bytes": bytes},
                       "limits": {"max_retained_events": 1000}}),
            ),
        );
        let keys: Vec<Value> = state
            .iter()
            .map(|(k, r, v)| json!({"key": k, "revision": r, "size": size(k, v), "updated_at": T}))
            .collect();
        self.op(
            "final",
            Phase::Final,
            OpKind::ListState,
            Outcome::json(
                200,
                json!({"keys": keys, "state_keys": state.len(), "state_bytes": bytes,
                       "limits": {"max_keys": 32, "max_bytes": 65536}}),
            ),
        );
        for (k, r, v) in state {
            self.op(
                "final",
                Phase::Final,
                OpKind::ReadKey { key: (*k).into() },
                Outcome::json(
                    200,
                    json!({"key": k, "value": v, "revision": r, "updated_at": T}),
                ),
            );
        }
        for k in absent {
            self.op(
                "final",
                Phase::Final,
                OpKind::ReadKey { key: (*k).into() },
                Outcome::json(
                    404,
                    json!({"error": {"code": "not_found", "message": "No such key."}}),
                ),
            );
        }
    }
}

fn put(key: &str, value: Value, if_revision: Option<u64>) -> OpKind {
    OpKind::Put {
        key: key.into(),
        value,
        if_revision,
    }
}

fn deliver(key: &str) -> OpKind {
    OpKind::Deliver {
        idempotency_key: Some(key.into()),
        data: json!({"marker": key}),
        other_body: false,
    }
}

fn accepted(seq: u64, duplicate: bool) -> Outcome {
    Outcome::json(
        if duplicate { 200 } else { 202 },
        json!({"duplicate": duplicate, "event": {"id": format!("evt_{seq}"), "sequence": seq}}),
    )
}

/// Two CAS increments, a delivery and its duplicate, a write and its conditional delete, one
/// consumer reading all five events and acking one, the read-back.
fn consistent() -> B {
    let mut b = B::new();
    b.op(
        "setup",
        Phase::Setup,
        OpKind::Create,
        Outcome::json(
            429,
            json!({"error": {"code": "rate_limited", "message": "Slow down.", "retry_after_seconds": 7}}),
        ),
    );
    b.w(
        OpKind::ReadKey {
            key: "counter-0".into(),
        },
        Outcome::json(
            404,
            json!({"error": {"code": "not_found", "message": "No such key."}}),
        ),
    );
    b.w(
        put("counter-0", json!(1), Some(0)),
        put_ok("counter-0", json!(1), 1),
    );
    b.w(
        put("counter-0", json!(2), Some(1)),
        put_ok("counter-0", json!(2), 2),
    );
    b.w(deliver("k1"), accepted(3, false));
    b.w(deliver("k1"), accepted(3, true));
    let reg = json!({"w": "w0.5"});
    b.w(
        put("reg-0", reg.clone(), None),
        put_ok("reg-0", reg.clone(), 4),
    );
    b.w(
        OpKind::Delete {
            key: "reg-0".into(),
            if_revision: 4,
        },
        Outcome::json(
            200,
            json!({"key": "reg-0", "deleted": true, "revision": 5,
                   "event": {"id": "evt_5", "sequence": 5}}),
        ),
    );
    b.poll(
        0,
        0,
        vec![
            updated(1, "counter-0", json!(1)),
            updated(2, "counter-0", json!(2)),
            delivered(3, json!({"marker": "k1"})),
            updated(4, "reg-0", reg),
            deleted(5, "reg-0"),
        ],
    );
    b.op(
        "c0",
        Phase::Drain,
        OpKind::Ack {
            event_id: "evt_3".into(),
        },
        Outcome::json(
            200,
            json!({"event": {"id": "evt_3", "sequence": 3, "acknowledged_at": T2}}),
        ),
    );
    b.finals(5, &[("counter-0", 2, json!(2))], &["reg-0"]);
    b
}

fn kinds(anomalies: &[Anomaly]) -> Vec<&'static str> {
    anomalies.iter().map(|a| a.kind).collect()
}

#[track_caller]
fn assert_reports(h: &History, kind: &str) {
    let found = verify(h);
    assert!(
        found.iter().any(|a| a.kind == kind),
        "expected a {kind} anomaly, got {:?}",
        found.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
}

#[test]
fn a_consistent_history_has_no_anomaly() {
    let b = consistent();
    let found = verify(&b.h);
    assert_eq!(
        found,
        Vec::<Anomaly>::new(),
        "{:?}",
        found.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
}

#[test]
fn a_lost_increment_is_a_lost_update() {
    // Two clients read the counter as 1 (revision 1) and both PUT 2 with if_revision 1: a
    // correct server answers one of them 409. Here both "succeed" (revisions 2 and 6) and the
    // feed holds the value 2 twice.
    let mut b = consistent();
    let last = b.h.ops.len();
    b.h.ops.truncate(last - 4); // drop the read-back, re-added below
    b.w(
        put("counter-0", json!(2), Some(1)),
        put_ok("counter-0", json!(2), 6),
    );
    b.poll(0, 5, vec![updated(6, "counter-0", json!(2))]);
    b.finals(6, &[("counter-0", 6, json!(2))], &["reg-0"]);
    let found = verify(&b.h);
    let k = kinds(&found);
    assert!(k.contains(&"lost_update"), "{found:?}");
    assert!(k.contains(&"cas_violation"), "{found:?}");
    assert!(
        found
            .iter()
            .any(|a| a.kind == "lost_update" && a.detail.contains("after 3 increments")),
        "the count check names the 3 successes against the final value 2: {found:?}"
    );
}

#[test]
fn a_gap_in_a_consumers_sequences_is_reported() {
    // The feed as it reads after the ack of event 3.
    let Some(poll) = consistent()
        .h
        .ops
        .iter()
        .find(|o| matches!(o.kind, OpKind::Poll { .. }))
        .map(|o| o.outcome.body()["events"].clone())
    else {
        panic!("no poll");
    };
    let mut all = poll.as_array().cloned().unwrap_or_default();
    assert_eq!(all.len(), 5);
    all[2]["acknowledged_at"] = json!(T2);
    let more = |b: &mut B, i: usize| {
        if let Outcome::Answer { body, .. } = &mut b.h.ops[i].outcome {
            body["has_more"] = json!(true);
        }
    };

    // Consumer 1 reads the feed in two pages, but its second page skips sequence 4.
    let mut b = consistent();
    let p = b.poll(1, 0, all[..3].to_vec());
    more(&mut b, p);
    b.poll(1, 3, vec![all[4].clone()]);
    let found = verify(&b.h);
    assert_eq!(kinds(&found), vec!["consumer_gap"], "{found:?}");

    // A consumer that is served sequence 3 again.
    let mut b = consistent();
    let p = b.poll(2, 0, all[..3].to_vec());
    more(&mut b, p);
    b.poll(2, 3, all[2..].to_vec());
    let found = verify(&b.h);
    let k = kinds(&found);
    assert!(k.contains(&"consumer_duplicate"), "{found:?}");
    assert!(
        k.contains(&"unexpected_response"),
        "a page at or before after: {found:?}"
    );

    // A consumer that stops early.
    let mut b = consistent();
    let p = b.poll(3, 0, all[..2].to_vec());
    more(&mut b, p);
    let found = verify(&b.h);
    assert_eq!(kinds(&found), vec!["consumer_incomplete"], "{found:?}");
}

#[test]
fn a_duplicate_idempotent_event_is_reported() {
    let mut b = consistent();
    // A retry of k1 made a second event (6) and was answered 202 with it.
    let last = b.h.ops.len();
    b.h.ops.truncate(last - 4);
    b.w(deliver("k1"), accepted(6, false));
    b.poll(0, 5, vec![delivered(6, json!({"marker": "k1"}))]);
    b.finals(6, &[("counter-0", 2, json!(2))], &["reg-0"]);
    let found = verify(&b.h);
    let k = kinds(&found);
    assert!(k.contains(&"duplicate_event"), "{found:?}");
    assert!(
        k.contains(&"idempotency"),
        "the retry named another event: {found:?}"
    );
}

#[test]
fn a_retry_answered_with_another_event_id_is_reported() {
    let mut b = consistent();
    b.w(
        deliver("k1"),
        Outcome::json(
            200,
            json!({"duplicate": true, "event": {"id": "evt_9", "sequence": 3}}),
        ),
    );
    assert_reports(&b.h, "idempotency");
}

#[test]
fn server_errors_and_answers_outside_the_spec_are_reported() {
    let mut b = consistent();
    b.w(
        put("reg-1", json!(1), None),
        Outcome::json(
            500,
            json!({"error": {"code": "internal", "message": "An internal error occurred."}}),
        ),
    );
    assert_reports(&b.h, "server_error");

    let mut b = consistent();
    b.w(
        put("reg-1", json!(1), None),
        Outcome::json(
            429,
            json!({"error": {"code": "rate_limited", "message": "x", "retry_after_seconds": 3}}),
        ),
    );
    assert_reports(&b.h, "unexpected_response");

    let mut b = consistent();
    b.w(
        put("reg-1", json!(1), Some(4)),
        Outcome::json(
            409,
            json!({"error": {"code": "revision_conflict", "message": "stale"}}),
        ),
    );
    assert_reports(&b.h, "unexpected_response");

    // A 503 unavailable, a reset and a gateway's 502 (not agentaddress's answer) are unknown
    // outcomes, not anomalies; a 500 from agentaddress itself is one.
    let mut b = consistent();
    b.w(
        put("reg-1", json!(1), None),
        Outcome::json(
            503,
            json!({"error": {"code": "unavailable", "message": "Try again."}}),
        ),
    );
    b.w(
        put("reg-2", json!(1), None),
        Outcome::Transport("connection reset".into()),
    );
    assert_eq!(verify(&b.h), Vec::<Anomaly>::new());
    b.w(
        put("reg-1", json!(1), None),
        Outcome::Answer {
            status: 502,
            body: Value::Null,
            json: false,
            raw: "Bad Gateway".into(),
            content_type: None,
            retry_after: None,
        },
    );
    assert_eq!(verify(&b.h), Vec::<Anomaly>::new());
    b.w(
        put("reg-2", json!(1), None),
        Outcome::json(
            500,
            json!({"error": {"code": "internal", "message": "An internal error occurred."}}),
        ),
    );
    assert_reports(&b.h, "server_error");

    // GET state whose totals are not those of the keys it lists (two reads, torn).
    let mut b = consistent();
    b.w(
        OpKind::ListState,
        Outcome::json(
            200,
            json!({"keys": [{"key": "counter-0", "revision": 2, "size": 74, "updated_at": T}],
                   "state_keys": 2, "state_bytes": 150,
                   "limits": {"max_keys": 32, "max_bytes": 65536}}),
        ),
    );
    assert_eq!(kinds(&verify(&b.h)), vec!["torn_read"]);
}

#[test]
fn a_write_answered_2xx_but_missing_afterwards_is_lost() {
    // Answered 200 at revision 6 before a crash; after the restart the feed ends at 5.
    let mut b = consistent();
    b.w(
        put("reg-1", json!({"w": 1}), None),
        put_ok("reg-1", json!({"w": 1}), 6),
    );
    let found = verify(&b.h);
    assert!(kinds(&found).contains(&"lost_write"), "{found:?}");
    // The same write with an unknown outcome may be missing.
    let mut b = consistent();
    b.w(
        put("reg-1", json!({"w": 1}), None),
        Outcome::Transport("connection refused".into()),
    );
    assert_eq!(verify(&b.h), Vec::<Anomaly>::new());
}

#[test]
fn an_unanswered_write_that_landed_is_accepted_but_a_phantom_is_not() {
    let build = |value: Value| {
        let mut b = consistent();
        let last = b.h.ops.len();
        b.h.ops.truncate(last - 4);
        b.w(
            put("counter-0", json!(3), Some(2)),
            Outcome::Transport("connection reset by peer".into()),
        );
        b.poll(0, 5, vec![updated(6, "counter-0", value.clone())]);
        b.finals(6, &[("counter-0", 6, value)], &["reg-0"]);
        b
    };
    let landed = build(json!(3));
    assert_eq!(verify(&landed.h), Vec::<Anomaly>::new());
    // An unanswered unconditional write may land once, not twice.
    let twice = |times: u64| {
        let mut b = consistent();
        let last = b.h.ops.len();
        b.h.ops.truncate(last - 4);
        let v = json!({"w": "w0.9"});
        b.w(
            put("reg-1", v.clone(), None),
            Outcome::Transport("connection reset by peer".into()),
        );
        let events: Vec<Value> = (6..6 + times)
            .map(|s| updated(s, "reg-1", v.clone()))
            .collect();
        b.poll(0, 5, events);
        b.finals(
            5 + times,
            &[("counter-0", 2, json!(2)), ("reg-1", 5 + times, v)],
            &["reg-0"],
        );
        verify(&b.h)
    };
    assert_eq!(twice(1), Vec::<Anomaly>::new());
    assert_eq!(kinds(&twice(2)), vec!["phantom_write"]);

    let phantom = build(json!(7));
    let found = verify(&phantom.h);
    let k = kinds(&found);
    assert!(k.contains(&"phantom_write"), "{found:?}");
    assert!(k.contains(&"lost_update"), "7 after 2: {found:?}");
}

#[test]
fn a_poll_that_misses_an_answered_write_is_a_stale_read() {
    let mut b = consistent();
    // A consumer polls after every write was answered, and gets an empty "no more" page.
    b.poll(4, 0, vec![]);
    assert_reports(&b.h, "stale_read");
}

#[test]
fn a_final_state_that_is_not_the_replay_is_reported() {
    let mut b = consistent();
    let Some(read) = b.h.ops.iter_mut().rev().find(|o| {
        o.kind
            == OpKind::ReadKey {
                key: "counter-0".into(),
            }
    }) else {
        panic!("no final read");
    };
    read.outcome = Outcome::json(
        200,
        json!({"key": "counter-0", "value": 1, "revision": 2, "updated_at": T}),
    );
    assert_reports(&b.h, "final_state");
}

#[test]
fn acks_must_keep_their_first_time() {
    let mut b = consistent();
    b.op(
        "c0",
        Phase::Drain,
        OpKind::Ack {
            event_id: "evt_3".into(),
        },
        Outcome::json(
            200,
            json!({"event": {"id": "evt_3", "sequence": 3, "acknowledged_at": T}}),
        ),
    );
    assert_reports(&b.h, "ack_mismatch");
}

/// An `http.request` event holding `data`.
fn raw_event(seq: u64, data: Value) -> Value {
    json!({"id": format!("evt_{seq}"), "sequence": seq, "type": "http.request", "source": null,
           "ingress_surface": "http", "received_at": T, "acknowledged_at": null, "data": data,
           "http": {"content_type": "application/json", "headers": {}},
           "verification": verification(false)})
}

/// The consistent history plus a lossy delivery answered `outcome`, its event read back as
/// `event` (none: not in the feed).
fn with_lossy(kind: usize, outcome: Outcome, event: Option<Value>) -> Vec<Anomaly> {
    let mut b = consistent();
    let last = b.h.ops.len();
    b.h.ops.truncate(last - 4);
    b.w(
        OpKind::DeliverRaw {
            idempotency_key: "r1".into(),
            body: lossy_body(kind, "r1"),
        },
        outcome,
    );
    let n = u64::from(event.is_some());
    b.poll(0, 5, event.into_iter().collect());
    b.finals(5 + n, &[("counter-0", 2, json!(2))], &["reg-0"]);
    verify(&b.h)
}

#[test]
fn lossy_bodies_read_back_as_their_exact_text() {
    for kind in 0..LOSSY_BODIES {
        let body = lossy_body(kind, "r1");
        let exact = json!({"content_type": "application/json", "text": body});
        let found = with_lossy(kind, accepted(6, false), Some(raw_event(6, exact.clone())));
        assert_eq!(found, Vec::<Anomaly>::new(), "kind {kind}");
        // A duplicate answer naming the same event is fine too.
        let found = with_lossy(kind, accepted(6, true), Some(raw_event(6, exact)));
        assert_eq!(found, Vec::<Anomaly>::new(), "kind {kind}");
    }
}

#[test]
fn a_lossy_body_kept_as_json_or_changed_is_reported() {
    for kind in 0..LOSSY_BODIES {
        let body = lossy_body(kind, "r1");
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert!(!parsed.is_null(), "kind {kind} parses");
        // Re-encoded (a repeated key or `1E5` changes), or any other text than the body.
        let compact = parsed.to_string();
        let other = json!({"content_type": "application/json", "text": format!("{body}\n")});
        let wrong_type = json!({"content_type": "text/plain", "text": body});
        let mut cases = vec![parsed, other, wrong_type];
        if compact != body {
            cases.push(json!({"content_type": "application/json", "text": compact}));
        }
        for data in cases {
            let found = with_lossy(kind, accepted(6, false), Some(raw_event(6, data)));
            let k = kinds(&found);
            assert!(k.contains(&"body_changed"), "kind {kind}: {found:?}");
            assert!(k.contains(&"lost_write"), "kind {kind}: {found:?}");
        }
    }
}

#[test]
fn a_lossy_delivery_answered_but_missing_or_misnamed_is_reported() {
    let found = with_lossy(0, accepted(6, false), None);
    assert!(kinds(&found).contains(&"lost_write"), "{found:?}");
    let exact = json!({"content_type": "application/json", "text": lossy_body(1, "r1")});
    let misnamed = Outcome::json(
        202,
        json!({"duplicate": false, "event": {"id": "evt_9", "sequence": 6}}),
    );
    let found = with_lossy(1, misnamed, Some(raw_event(6, exact)));
    assert!(kinds(&found).contains(&"idempotency"), "{found:?}");
}

fn emailed(seq: u64, marker: &str) -> Value {
    json!({"id": format!("evt_{seq}"), "sequence": seq, "type": "email.received",
           "source": crate::check::history::EMAIL_SENDER, "ingress_surface": "email",
           "received_at": T, "acknowledged_at": null, "data": {"subject": marker}})
}

fn email_accepted() -> Outcome {
    Outcome::json(
        200,
        json!({"accepted": ["addr_one@inbox.test"], "rejected": []}),
    )
}

/// An email history: the consistent one, then email `m1` sent `attempts` times (each answered
/// by `outcome`), and a feed holding `events` email events of `m1` after it.
fn with_emails(outcome: &Outcome, attempts: usize, events: &[&str]) -> History {
    let mut b = consistent();
    let last = b.h.ops.len();
    b.h.ops.truncate(last - 4);
    for _ in 0..attempts {
        b.w(
            OpKind::Email {
                marker: "m1".into(),
            },
            outcome.clone(),
        );
    }
    let feed: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(n, m)| emailed(6 + n as u64, m))
        .collect();
    let last_seq = 5 + events.len() as u64;
    b.poll(0, 5, feed);
    b.finals(last_seq, &[("counter-0", 2, json!(2))], &["reg-0"]);
    b.h
}

#[test]
fn emails_land_once_or_are_reported() {
    // Sent twice (a resend), one event: consistent.
    assert_eq!(
        verify(&with_emails(&email_accepted(), 2, &["m1"])),
        Vec::<Anomaly>::new()
    );
    // Accepted but missing.
    assert_reports(&with_emails(&email_accepted(), 1, &[]), "lost_write");
    // Two events for one message.
    assert_reports(
        &with_emails(&email_accepted(), 2, &["m1", "m1"]),
        "duplicate_event",
    );
    // An email nobody sent.
    assert_reports(
        &with_emails(&email_accepted(), 1, &["m1", "m9"]),
        "phantom_event",
    );
    // Refused (feed full) yet in the feed.
    let refused = Outcome::json(
        200,
        json!({"accepted": [], "rejected": [{"rcpt": "addr_one@inbox.test", "code": "quota_exceeded",
                                             "smtp": "452 4.2.2 Mailbox full", "temporary": true}]}),
    );
    assert_reports(&with_emails(&refused, 1, &["m1"]), "phantom_event");
    // An unknown outcome may or may not have landed.
    let unknown = Outcome::Transport("connection reset by peer".into());
    assert_eq!(
        verify(&with_emails(&unknown, 1, &["m1"])),
        Vec::<Anomaly>::new()
    );
    assert_eq!(
        verify(&with_emails(&unknown, 1, &[])),
        Vec::<Anomaly>::new()
    );
    // An answer outside the door's contract.
    assert_reports(
        &with_emails(&Outcome::json(200, json!({"accepted": []})), 1, &[]),
        "unexpected_response",
    );
}

/// Every address of a run verifies signatures: a signed delivery read back unverified, or an
/// unsigned one read back verified, or an http event without `verification`, is reported.
#[test]
fn a_wrong_verification_on_an_event_is_reported() {
    for wrong in [
        verification(false),
        json!(null),
        json!({"scheme": "github", "verified": true}),
    ] {
        let mut b = consistent();
        let mut event = delivered(6, json!({"marker": format!("{SIGNED_PREFIX}1")}));
        event["verification"] = wrong.clone();
        b.poll(1, 5, vec![event]);
        assert_reports(&b.h, "unexpected_response");
    }
    let mut b = consistent();
    let mut event = delivered(6, json!({"marker": "unsigned"}));
    event["verification"] = verification(true);
    b.poll(1, 5, vec![event]);
    assert_reports(&b.h, "unexpected_response");
}

/// A wake of `addr_one` covering `from..=to`.
fn wake(from: u64, to: u64, signed: bool) -> crate::check::history::WakeSeen {
    crate::check::history::WakeSeen {
        address_id: "addr_one".into(),
        webhook_id: format!("hk_x_{to}"),
        from,
        to,
        signed,
    }
}

#[test]
fn every_delivery_must_be_covered_by_a_signed_wake_within_the_feed() {
    let mut b = consistent();
    // Wakes not checked: nothing to say.
    assert_eq!(verify(&b.h), Vec::<Anomaly>::new());
    // Checked, and the delivery at 3 was never woken for (a wake of 1..=2 does not cover it).
    b.h.wakes = Some(vec![wake(1, 2, true)]);
    assert_eq!(kinds(&verify(&b.h)), vec!["unwoken_event"]);
    // Covered by a range that ends past it: consistent.
    b.h.wakes = Some(vec![wake(1, 2, true), wake(3, 5, true)]);
    assert_eq!(verify(&b.h), Vec::<Anomaly>::new());
    // A wake that does not verify, and one past the feed's end.
    b.h.wakes = Some(vec![wake(1, 5, false)]);
    assert_eq!(kinds(&verify(&b.h)), vec!["unsigned_wake"]);
    b.h.wakes = Some(vec![wake(1, 6, true)]);
    assert_eq!(kinds(&verify(&b.h)), vec!["wake_beyond_feed"]);
    // Another address's wakes cover nothing here.
    let mut other = wake(1, 5, true);
    other.address_id = "addr_two".into();
    b.h.wakes = Some(vec![other]);
    assert_eq!(kinds(&verify(&b.h)), vec!["unwoken_event"]);
}

/// A filtered consumer (docs/API.md §21) sees exactly the feed's matching events: one that
/// misses one, or is given one that does not match, is reported.
#[test]
fn a_filtered_consumer_sees_exactly_the_matching_events() {
    let b = consistent();
    let Some(Outcome::Answer { body: poll, .. }) =
        b.h.ops
            .iter()
            .find(|o| matches!(o.kind, OpKind::Poll { .. }))
            .map(|o| o.outcome.clone())
    else {
        panic!("no poll");
    };
    let all = poll["events"].as_array().cloned().unwrap_or_default();
    let last = all.last().and_then(|e| e["sequence"].as_u64()).unwrap_or(0);
    let matching: Vec<Value> = all
        .iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.starts_with("state.")))
        .cloned()
        .collect();
    assert!(matching.len() >= 2 && matching.len() < all.len(), "{all:?}");

    let mut b = consistent();
    b.filtered_poll(9, 0, matching.clone(), last);
    let found = verify(&b.h);
    assert!(found.is_empty(), "{found:?}");

    let mut b = consistent();
    b.filtered_poll(9, 0, matching[1..].to_vec(), last);
    assert_eq!(kinds(&verify(&b.h)), vec!["consumer_gap"]);

    let mut b = consistent();
    b.filtered_poll(9, 0, all.clone(), last);
    let found = kinds(&verify(&b.h));
    assert!(found.contains(&"filtered_mismatch"), "{found:?}");

    let mut b = consistent();
    b.filtered_poll(9, 0, matching[..1].to_vec(), last);
    assert_eq!(kinds(&verify(&b.h)), vec!["consumer_incomplete"]);
}

fn timer_event(seq: u64, marker: &str, id: &str) -> Value {
    json!({"id": format!("evt_{seq}"), "sequence": seq, "type": crate::check::history::TIMER_TYPE,
           "source": "timer", "ingress_surface": "timer", "received_at": T,
           "acknowledged_at": null, "data": {"timer_id": id, "data": {"marker": marker}}})
}

/// A timer history: the consistent one, then timer `t1` set (201, id `tmr_1`), cancels
/// answered `cancels`, time passing well beyond its due time, and a feed holding `events`
/// timer events (marker, timer id) after it.
fn with_timers(cancels: &[Outcome], events: &[(&str, &str)]) -> History {
    let mut b = consistent();
    let last = b.h.ops.len();
    b.h.ops.truncate(last - 4);
    b.w(
        OpKind::SetTimer {
            marker: "t1".into(),
            in_seconds: 1,
        },
        Outcome::json(
            201,
            json!({"timer": {"id": "tmr_1", "type": "timer.check", "fire_at": T,
                             "status": "pending"}}),
        ),
    );
    for c in cancels {
        b.w(
            OpKind::CancelTimer {
                timer_id: "tmr_1".into(),
            },
            c.clone(),
        );
    }
    b.t += 10_000_000;
    let feed: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(n, (m, id))| timer_event(6 + n as u64, m, id))
        .collect();
    let last_seq = 5 + events.len() as u64;
    b.poll(0, 5, feed);
    b.finals(last_seq, &[("counter-0", 2, json!(2))], &["reg-0"]);
    b.h
}

#[test]
fn timers_fire_once_or_are_reported() {
    let cancelled = Outcome::json(
        200,
        json!({"timer": {"id": "tmr_1", "status": "cancelled"}}),
    );
    let fired = Outcome::json(
        409,
        json!({"error": {"code": "timer_fired", "message": "fired"}}),
    );
    assert_eq!(
        verify(&with_timers(&[], &[("t1", "tmr_1")])),
        Vec::<Anomaly>::new()
    );
    assert_eq!(
        verify(&with_timers(std::slice::from_ref(&cancelled), &[])),
        Vec::<Anomaly>::new()
    );
    assert_eq!(
        verify(&with_timers(
            std::slice::from_ref(&fired),
            &[("t1", "tmr_1")]
        )),
        Vec::<Anomaly>::new()
    );
    assert_reports(&with_timers(&[], &[]), "lost_write");
    assert_reports(
        &with_timers(&[], &[("t1", "tmr_1"), ("t1", "tmr_1")]),
        "duplicate_event",
    );
    assert_reports(
        &with_timers(&[cancelled], &[("t1", "tmr_1")]),
        "cancelled_timer_fired",
    );
    assert_reports(&with_timers(&[fired], &[]), "lost_write");
    assert_reports(
        &with_timers(&[], &[("t1", "tmr_1"), ("t9", "tmr_9")]),
        "phantom_event",
    );
}
