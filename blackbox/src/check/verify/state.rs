//! State: the replay of the feed's state events matched to the writes (revisions and
//! `if_revision`), counters without lost updates, and the final state and usage against the
//! replay.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::{excerpt, Verifier};
use crate::check::history::{
    OpKind, Phase, COUNTER_PREFIX, DELIVERY_TYPE, EMAIL_TYPE, RAW_TYPE, TIMER_TYPE,
};

fn compact_len(v: &Value) -> u64 {
    serde_json::to_string(v).map_or(0, |s| s.len() as u64)
}

/// The size docs/API.md §7 gives a key: key bytes + compact JSON of the value + 64.
fn entry_size(key: &str, value: &Value) -> u64 {
    key.len() as u64 + compact_len(value) + 64
}

impl Verifier<'_> {
    pub(super) fn replay(
        &mut self, a: usize, ops: &[usize], feed: &BTreeMap<u64, (usize, &Value)>,
        claims: &HashMap<u64, Vec<usize>>, last: u64,
    ) -> Replay {
        let h = self.h;
        let addr = Some(a);
        // Unknown-outcome state writes, by key.
        let mut unknown: HashMap<&str, Vec<usize>> = HashMap::new();
        for &i in ops {
            let o = &h.ops[i];
            if let OpKind::Put { key, .. } | OpKind::Delete { key, .. } = &o.kind {
                if o.outcome.is_ambiguous() {
                    unknown.entry(key.as_str()).or_default().push(i);
                }
            }
        }
        let mut r = Replay::default();
        let mut used: HashSet<usize> = HashSet::new();
        for (&s, &(_, e)) in feed.range(..=last) {
            let ty = e["type"].as_str().unwrap_or("");
            let deleted = match ty {
                "state.updated" => false,
                "state.deleted" => true,
                DELIVERY_TYPE => {
                    if e["ingress_surface"] != "http" || e["data"]["marker"].as_str().is_none() {
                        let d = format!("delivery event {s} is not as delivered: {e}");
                        self.push("malformed_event", addr, None, d);
                    }
                    continue;
                }
                RAW_TYPE => continue, // a lossy body's text: checked with the deliveries
                EMAIL_TYPE => continue, // checked with the emails
                TIMER_TYPE => continue, // checked with the timers
                _ => {
                    let d = format!("event {s} of type {ty:?}, which no request of ours makes");
                    self.push("phantom_event", addr, None, d);
                    continue;
                }
            };
            let data = &e["data"];
            let Some(key) = data["key"].as_str() else {
                let d = format!("state event {s} without data.key: {e}");
                self.push("malformed_event", addr, None, d);
                continue;
            };
            if e["source"] != "state"
                || e["ingress_surface"] != "state"
                || data["revision"].as_u64() != Some(s)
                || (!deleted && data.get("value").is_none())
            {
                let d = format!(
                    "state event {s} must have source and ingress_surface \"state\" and \
                     data.revision = its sequence: {e}"
                );
                self.push("malformed_event", addr, None, d);
            }
            let value = &data["value"];
            let prev = r.state.get(key).map(|(rev, _)| *rev);
            let holds = |kind: &OpKind| match kind {
                OpKind::Put { if_revision, .. } => match if_revision {
                    None => true,
                    Some(0) => prev.is_none(),
                    Some(n) => prev == Some(*n),
                },
                OpKind::Delete { if_revision, .. } => prev == Some(*if_revision),
                _ => false,
            };
            let matches = |kind: &OpKind| match kind {
                OpKind::Put {
                    key: k, value: v, ..
                } => !deleted && k == key && v == value,
                OpKind::Delete { key: k, .. } => deleted && k == key,
                _ => false,
            };
            match claims.get(&s) {
                Some(who) => {
                    for &i in who {
                        let kind = &h.ops[i].kind;
                        if !matches(kind) {
                            let d = format!(
                                "{} answered 200 with revision {s}, but the feed's event {s} is {}",
                                kind.name(),
                                excerpt(&e.to_string())
                            );
                            self.push("lost_write", addr, Some(i), d);
                        } else if !holds(kind) {
                            let d = format!(
                                "{} on {key} applied at revision {s} while the key's revision was \
                                 {prev:?}",
                                kind.name()
                            );
                            self.push("cas_violation", addr, Some(i), d);
                        }
                    }
                }
                None => {
                    // An unanswered write explains at most one event: applied twice is a bug.
                    let candidates = unknown.get(key).map_or(&[][..], |v| v);
                    let found = candidates.iter().copied().find(|i| {
                        !used.contains(i) && matches(&h.ops[*i].kind) && holds(&h.ops[*i].kind)
                    });
                    if let Some(i) = found {
                        used.insert(i);
                    } else {
                        let d = format!(
                            "feed event {s} ({ty} of {key}, value {}) matches no write answered \
                             200 with that revision nor any unanswered write whose condition held \
                             (key revision before it: {prev:?})",
                            excerpt(&value.to_string())
                        );
                        self.push("phantom_write", addr, None, d);
                    }
                }
            }
            if key.starts_with(COUNTER_PREFIX) {
                let before = r.counter_last.get(key).copied().unwrap_or(0);
                match (deleted, value.as_u64()) {
                    (false, Some(v)) if v == before + 1 => {}
                    _ => {
                        let d = format!(
                            "counter {key}: event {s} wrote {} after {before} (expected {})",
                            if deleted {
                                "a delete".into()
                            } else {
                                value.to_string()
                            },
                            before + 1
                        );
                        self.push("lost_update", addr, None, d);
                    }
                }
                r.counter_last
                    .insert(key.to_owned(), value.as_u64().unwrap_or(before));
            }
            r.events
                .entry(key.to_owned())
                .or_default()
                .push((s, deleted));
            if deleted {
                r.state.remove(key);
            } else {
                r.state.insert(key.to_owned(), (s, value.clone()));
            }
        }
        r
    }

    pub(super) fn counters(&mut self, a: usize, ops: &[usize], last_values: &HashMap<String, u64>) {
        let h = self.h;
        let mut tally: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for &i in ops {
            let o = &h.ops[i];
            if let OpKind::Put { key, .. } = &o.kind {
                if !key.starts_with(COUNTER_PREFIX) {
                    continue;
                }
                let t = tally.entry(key.as_str()).or_default();
                if o.outcome.is(200) {
                    t.0 += 1;
                } else if o.outcome.is_ambiguous() {
                    t.1 += 1;
                }
            }
        }
        for (key, (ok, unknown)) in tally {
            let m = last_values.get(key).copied().unwrap_or(0);
            if m < ok {
                let d = format!("counter {key} = {m} after {ok} increments answered 200");
                self.push("lost_update", Some(a), None, d);
            } else if m > ok + unknown {
                let d = format!(
                    "counter {key} = {m}, more than {ok} increments answered 200 + {unknown} unanswered"
                );
                self.push("phantom_write", Some(a), None, d);
            }
        }
    }

    pub(super) fn final_state(
        &mut self, a: usize, ops: &[usize], replay: &Replay, usage: Option<&Value>, last: u64,
    ) {
        let h = self.h;
        let addr = Some(a);
        let bytes: u64 = replay
            .state
            .iter()
            .map(|(k, (_, v))| entry_size(k, v))
            .sum();
        if let Some(u) = usage {
            let keys = replay.state.len() as u64;
            if u["state_keys"].as_u64() != Some(keys) || u["state_bytes"].as_u64() != Some(bytes) {
                let d = format!(
                    "final usage {u}, but the replay of the feed holds {keys} keys of {bytes} bytes"
                );
                self.push("final_state", addr, None, d);
            }
            let retention = h.limits["event_retention_seconds"].as_u64().unwrap_or(0);
            if retention >= 86_400 && u["retained_events"].as_u64() != Some(last) {
                let d = format!("final usage {u}: retained_events should be all {last} events");
                self.push("usage", addr, None, d);
            }
        }
        let finals: Vec<usize> = ops
            .iter()
            .copied()
            .filter(|&i| h.ops[i].phase == Phase::Final)
            .collect();
        let list = finals
            .iter()
            .rev()
            .find(|&&i| h.ops[i].kind == OpKind::ListState && h.ops[i].outcome.is(200));
        match list {
            None => self.push(
                "incomplete_history",
                addr,
                None,
                "no final GET {state_url}".into(),
            ),
            Some(&i) => {
                let listed: BTreeMap<&str, (Option<u64>, Option<u64>)> = h.ops[i].outcome.body()
                    ["keys"]
                    .as_array()
                    .map_or(&[][..], |v| v)
                    .iter()
                    .filter_map(|k| {
                        Some((
                            k["key"].as_str()?,
                            (k["revision"].as_u64(), k["size"].as_u64()),
                        ))
                    })
                    .collect();
                let expected: BTreeMap<&str, (Option<u64>, Option<u64>)> = replay
                    .state
                    .iter()
                    .map(|(k, (r, v))| (k.as_str(), (Some(*r), Some(entry_size(k, v)))))
                    .collect();
                if listed != expected {
                    let d = format!(
                        "GET state lists (key, revision, size) {listed:?}; the replay of the feed \
                         gives {expected:?}"
                    );
                    self.push("final_state", addr, Some(i), d);
                }
            }
        }
        for &i in &finals {
            let o = &h.ops[i];
            let OpKind::ReadKey { key } = &o.kind else {
                continue;
            };
            let want = replay.state.get(key.as_str());
            let b = o.outcome.body();
            let fine = match (o.outcome.status(), want) {
                (Some(200), Some((r, v))) => b["revision"].as_u64() == Some(*r) && &b["value"] == v,
                (Some(404), None) => true,
                (Some(200 | 404), _) => false,
                _ => true, // not an answer: another read decides
            };
            if !fine {
                let d = format!(
                    "final GET state/{key} answered {} {}; the replay of the feed gives {want:?}",
                    o.outcome.label(),
                    excerpt(&b.to_string())
                );
                self.push("final_state", addr, Some(i), d);
            }
        }
    }
}

/// The state the feed's events produce, and each key's events.
#[derive(Default)]
pub(super) struct Replay {
    pub(super) state: BTreeMap<String, (u64, Value)>,
    pub(super) counter_last: HashMap<String, u64>,
    /// key → (sequence, is a delete), ascending.
    pub(super) events: HashMap<String, Vec<(u64, bool)>>,
}

impl Replay {
    /// The last event of `key` at or before sequence `at`.
    pub(super) fn last_event_at(&self, key: &str, at: u64) -> Option<(u64, bool)> {
        let v = self.events.get(key)?;
        let n = v.partition_point(|&(s, _)| s <= at);
        n.checked_sub(1).map(|i| v[i])
    }
}
