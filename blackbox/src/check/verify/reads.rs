//! Real time: a read sent after a write was answered 2xx sees it (feed pages that say
//! `has_more: false`, usage, state reads, acks), and what it saw was committed.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::state::Replay;
use super::{excerpt, Verifier};
use crate::check::history::OpKind;

/// `(end_us, sequence)` of answered writes, sorted, with a running maximum: "the highest
/// sequence answered 2xx before time t".
pub(super) struct Answered {
    ends: Vec<u64>,
    max: Vec<u64>,
}

impl Answered {
    pub(super) fn new(mut writes: Vec<(u64, u64)>) -> Self {
        writes.sort_unstable();
        let mut m = 0;
        let max = writes
            .iter()
            .map(|&(_, s)| {
                m = m.max(s);
                m
            })
            .collect();
        Self {
            ends: writes.into_iter().map(|(e, _)| e).collect(),
            max,
        }
    }

    /// The highest sequence of a write answered strictly before `t` (0 if none).
    fn before(&self, t: u64) -> u64 {
        let n = self.ends.partition_point(|&e| e < t);
        if n == 0 {
            0
        } else {
            self.max[n - 1]
        }
    }
}

impl Verifier<'_> {
    /// Reads during the run: what they saw was committed, and not older than what had been
    /// answered 2xx before they were sent.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reads(
        &mut self, a: usize, ops: &[usize], feed: &BTreeMap<u64, (usize, &Value)>,
        ids: &HashMap<&str, u64>, replay: &Replay, answered: &Answered, last: u64,
    ) {
        let h = self.h;
        let addr = Some(a);
        for &i in ops {
            let o = &h.ops[i];
            let b = o.outcome.body();
            let floor = answered.before(o.start_us);
            match (&o.kind, o.outcome.status()) {
                (OpKind::Poll { .. }, Some(200)) => {
                    let cursor = b["next_cursor"].as_u64().unwrap_or(0);
                    if b["has_more"] == Value::Bool(false) && cursor < floor {
                        let d = format!(
                            "page ends at {cursor} with has_more false, but sequence {floor} was \
                             answered 2xx before this poll was sent"
                        );
                        self.push("stale_read", addr, Some(i), d);
                    }
                }
                (OpKind::Inspect, Some(200)) => {
                    let ls = b["usage"]["last_sequence"].as_u64().unwrap_or(0);
                    if ls < floor {
                        let d = format!(
                            "usage.last_sequence {ls}, but sequence {floor} was answered 2xx before"
                        );
                        self.push("stale_read", addr, Some(i), d);
                    }
                    if ls > last {
                        let d = format!("usage.last_sequence {ls} above the final {last}");
                        self.push("usage", addr, Some(i), d);
                    }
                }
                (OpKind::ReadKey { key }, Some(200)) => {
                    let r = b["revision"].as_u64().unwrap_or(0);
                    match feed.get(&r) {
                        Some((_, e))
                            if e["type"] == "state.updated"
                                && e["data"]["key"].as_str() == Some(key)
                                && e["data"]["value"] == b["value"] => {}
                        _ => {
                            let d = format!(
                                "read {key} = {} at revision {r}, which is not the feed's write \
                                 at {r}",
                                excerpt(&b["value"].to_string())
                            );
                            self.push("stale_read", addr, Some(i), d);
                        }
                    }
                    if let Some((s, _)) = replay.last_event_at(key, floor) {
                        if s > r {
                            let d = format!(
                                "read {key} at revision {r}, but its write at {s} was answered \
                                 before this read was sent"
                            );
                            self.push("stale_read", addr, Some(i), d);
                        }
                    }
                }
                (OpKind::ReadKey { key }, Some(404)) => {
                    let present_then = matches!(replay.last_event_at(key, floor), Some((_, false)));
                    let deleted_later = replay
                        .events
                        .get(key.as_str())
                        .is_some_and(|v| v.iter().any(|&(s, d)| d && s > floor));
                    if present_then && !deleted_later {
                        let d = format!(
                            "{key} read as missing, but it was written (answered before this \
                             read) and never deleted afterwards"
                        );
                        self.push("stale_read", addr, Some(i), d);
                    }
                }
                (OpKind::ReadEvent { event_id }, Some(404))
                    if ids.contains_key(event_id.as_str()) =>
                {
                    let d = format!("event {event_id}, which is in the feed, read as 404");
                    self.push("unexpected_response", addr, Some(i), d);
                }
                _ => {}
            }
        }
    }
}
