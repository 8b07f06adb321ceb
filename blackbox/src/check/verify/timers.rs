//! Timers (docs/API.md §20): each timer the workload set (its marker, the Idempotency-Key) has
//! exactly one event once its time passed before the feed's end was read — none if a cancel
//! was answered 200, one if a cancel was answered 409 `timer_fired` — every answer to its
//! creation names the same timer, and no timer event is one the workload never set.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::{excerpt, Verifier};
use crate::check::history::{OpKind, TIMER_TYPE};

impl Verifier<'_> {
    pub(super) fn timers(
        &mut self, a: usize, ops: &[usize], feed: &BTreeMap<u64, (usize, &Value)>,
    ) {
        let h = self.h;
        let addr = Some(a);
        // marker → its creation attempts; timer id → its marker; timer id → cancels.
        let mut sets: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        let mut ids: HashMap<&str, &str> = HashMap::new();
        let mut cancels: HashMap<&str, Vec<usize>> = HashMap::new();
        for &i in ops {
            match &h.ops[i].kind {
                OpKind::SetTimer { marker, .. } => {
                    sets.entry(marker.as_str()).or_default().push(i);
                    if let Some(id) = h.ops[i].outcome.body()["timer"]["id"].as_str() {
                        if h.ops[i].outcome.is(201) || h.ops[i].outcome.is(200) {
                            if let Some(other) = ids.insert(id, marker.as_str()) {
                                if other != marker {
                                    let d = format!("timer {id} answered for {other} and {marker}");
                                    self.push("timer_mismatch", addr, Some(i), d);
                                }
                            }
                        }
                    }
                }
                OpKind::CancelTimer { timer_id } => {
                    cancels.entry(timer_id.as_str()).or_default().push(i)
                }
                _ => {}
            }
        }
        let mut in_feed: HashMap<&str, Vec<u64>> = HashMap::new();
        for (&s, &(_, e)) in feed {
            if e["source"] != "timer" {
                continue;
            }
            let marker = e["data"]["data"]["marker"].as_str().unwrap_or_default();
            if !sets.contains_key(marker) {
                let d = format!("timer event {s} was never set: {}", excerpt(&e.to_string()));
                self.push("phantom_event", addr, None, d);
                continue;
            }
            let id = e["data"]["timer_id"].as_str().unwrap_or_default();
            if e["type"] != TIMER_TYPE
                || e["ingress_surface"] != "timer"
                || ids.get(id).is_some_and(|m| *m != marker)
            {
                let d = format!("timer event {s} is not as set: {}", excerpt(&e.to_string()));
                self.push("malformed_event", addr, None, d);
            }
            in_feed.entry(marker).or_default().push(s);
        }
        // When the feed's end was last read (a consumer's poll that answered 200).
        let last_read = ops
            .iter()
            .map(|&i| &h.ops[i])
            .filter(|o| matches!(o.kind, OpKind::Poll { .. }) && o.outcome.is(200))
            .map(|o| o.start_us)
            .max()
            .unwrap_or(0);
        for (marker, attempts) in sets {
            let events = in_feed.get(marker).map_or(&[][..], |v| v);
            if events.len() > 1 {
                let d = format!("timer {marker} fired {} times: {events:?}", events.len());
                self.push("duplicate_event", addr, Some(attempts[0]), d);
                continue;
            }
            let created: Vec<usize> = attempts
                .iter()
                .copied()
                .filter(|&i| h.ops[i].outcome.is(201) || h.ops[i].outcome.is(200))
                .collect();
            let ambiguous = attempts.iter().any(|&i| h.ops[i].outcome.is_ambiguous());
            let Some(&first) = created.first() else {
                if !events.is_empty() && !ambiguous {
                    let d = format!("timer {marker} was refused every time but fired");
                    self.push("phantom_event", addr, Some(attempts[0]), d);
                }
                continue;
            };
            let id = h.ops[first].outcome.body()["timer"]["id"]
                .as_str()
                .unwrap_or_default();
            let its_cancels = cancels.get(id).map_or(&[][..], |v| v);
            let cancelled = its_cancels.iter().find(|&&i| h.ops[i].outcome.is(200));
            let too_late = its_cancels.iter().find(|&&i| h.ops[i].outcome.is(409));
            let cancel_unknown = its_cancels.iter().any(|&i| h.ops[i].outcome.is_ambiguous());
            match (cancelled, too_late, events.len()) {
                (Some(&i), _, 1) => {
                    let d = format!("timer {marker} was cancelled (200) but fired");
                    self.push("cancelled_timer_fired", addr, Some(i), d);
                }
                (Some(&i), Some(_), _) => {
                    let d = format!("timer {marker} answered both cancelled and timer_fired");
                    self.push("timer_mismatch", addr, Some(i), d);
                }
                (None, Some(&i), 0) => {
                    let d = format!("timer {marker} answered timer_fired but is not in the feed");
                    self.push("lost_write", addr, Some(i), d);
                }
                (None, None, 0) if !cancel_unknown => {
                    // It must have fired if its time passed before the feed was last read.
                    let OpKind::SetTimer { in_seconds, .. } = h.ops[first].kind else {
                        continue;
                    };
                    let due_us = h.ops[first].end_us + in_seconds * 1_000_000 + 2_000_000;
                    if last_read > due_us {
                        let d = format!(
                            "timer {marker} was set (due {in_seconds} s later) but never fired"
                        );
                        self.push("lost_write", addr, Some(first), d);
                    }
                }
                _ => {}
            }
        }
    }
}
