//! Acknowledgements: every ack of an event answers the same first `acknowledged_at`, and every
//! read of an event agrees with the acks (acked only once an ack was sent, and acked once one
//! was answered 200).

use std::collections::HashMap;

use serde_json::Value;

use super::Verifier;
use crate::check::history::OpKind;

impl Verifier<'_> {
    pub(super) fn acks(&mut self, a: usize, ops: &[usize], ids: &HashMap<&str, u64>) {
        let h = self.h;
        let addr = Some(a);
        // event id → (first acknowledged_at answered, earliest end of a 200 ack, earliest start
        // of any ack)
        let mut acked: HashMap<&str, (Option<&Value>, u64, u64)> = HashMap::new();
        for &i in ops {
            let o = &h.ops[i];
            let OpKind::Ack { event_id } = &o.kind else {
                continue;
            };
            let entry = acked
                .entry(event_id.as_str())
                .or_insert((None, u64::MAX, u64::MAX));
            entry.2 = entry.2.min(o.start_us);
            match o.outcome.status() {
                Some(200) => {
                    let ev = &o.outcome.body()["event"];
                    let at = &ev["acknowledged_at"];
                    match entry.0 {
                        Some(first) if first != at => {
                            let d = format!(
                                "event {event_id} acknowledged at {first} and later at {at}"
                            );
                            self.push("ack_mismatch", addr, Some(i), d);
                        }
                        Some(_) => {}
                        None => entry.0 = Some(at),
                    }
                    entry.1 = entry.1.min(o.end_us);
                    if let Some(&s) = ids.get(event_id.as_str()) {
                        if ev["sequence"].as_u64() != Some(s) {
                            let d =
                                format!("ack of {event_id} answered {ev}, the feed has it at {s}");
                            self.push("ack_mismatch", addr, Some(i), d);
                        }
                    }
                }
                Some(404) if ids.contains_key(event_id.as_str()) => {
                    let d = format!("ack of {event_id}, which is in the feed, answered 404");
                    self.push("unexpected_response", addr, Some(i), d);
                }
                _ => {}
            }
        }
        // Every read of an event agrees with the acks.
        for &i in ops {
            let o = &h.ops[i];
            let events: Vec<&Value> = match (&o.kind, o.outcome.status()) {
                (OpKind::Poll { .. }, Some(200)) => o.outcome.body()["events"]
                    .as_array()
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
                (OpKind::ReadEvent { .. }, Some(200)) => vec![&o.outcome.body()["event"]],
                _ => continue,
            };
            for e in events {
                let id = e["id"].as_str().unwrap_or("");
                let at = &e["acknowledged_at"];
                match (acked.get(id), at.is_null()) {
                    (None, false) => {
                        let d =
                            format!("event {id} shows acknowledged_at {at}, but was never acked");
                        self.push("ack_mismatch", addr, Some(i), d);
                    }
                    (Some((_, _, first_start)), false) if *first_start > o.end_us => {
                        let d = format!(
                            "event {id} shows acknowledged_at {at} before any ack was sent"
                        );
                        self.push("ack_mismatch", addr, Some(i), d);
                    }
                    (Some((Some(first), _, _)), false) if *first != at => {
                        let d =
                            format!("event {id} shows acknowledged_at {at}, its ack said {first}");
                        self.push("ack_mismatch", addr, Some(i), d);
                    }
                    (Some((_, ok_end, _)), true) if *ok_end < o.start_us => {
                        let d = format!(
                            "event {id} read as unacknowledged after its ack was answered 200"
                        );
                        self.push("stale_read", addr, Some(i), d);
                    }
                    _ => {}
                }
            }
        }
    }
}
