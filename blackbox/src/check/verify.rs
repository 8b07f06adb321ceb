//! The pure verification step: a [`History`] in, the anomalies it proves out.
//!
//! Every request is checked twice: on its own (status, error code and body shape must be what
//! docs/API.md allows for that request) and against the feed. The feed of each address is assembled
//! from everything the consumers (and single-event reads) saw; then:
//! - each consumer saw 1..=L exactly once, in order, with `after = next_cursor` chained
//!   (L = the address's final `usage.last_sequence`); one sequence is one event everywhere;
//! - every 2xx state write is the feed's event at its revision (same key, same value), every
//!   state event of the feed is a write that was answered 2xx or whose outcome is unknown, and
//!   its `if_revision` held against the replay of the feed before it;
//! - counters go 1, 2, 3, … (two writes of the same value = a lost update), and
//!   successes ≤ final value ≤ successes + unknown outcomes;
//! - each delivery marker (an Idempotency-Key) has exactly one event when any attempt got a
//!   2xx (at most one otherwise), every 2xx names that event, and a reused key with another
//!   body never lands;
//! - each body that parsing would change (nested 125 deep, a repeated key, `1E5`) is one
//!   `http.request` event holding its exact text, as docs/API.md ("Inbox.") says;
//! - real time: a read sent after a write was answered 2xx sees it (feed pages that say
//!   `has_more: false`, usage, state reads, acks);
//! - the final state list and every key equal the replay of the feed.
//!
//! Outcomes that are unknown (no answer, or 503) may or may not have been applied: either is
//! accepted, a contradiction never is.
//!
//! This file runs the checks and assembles each address's feed; the checks themselves are in
//! `verify/`: `conformance` (each request on its own), `consumers`, `state` (the replay of the
//! feed, counters, the final state), `deliveries`, `timers`, `acks` and `reads` (real time).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::history::{Anomaly, History, OpKind, Phase};

mod acks;
mod conformance;
mod consumers;
mod deliveries;
mod reads;
mod state;
mod timers;

use reads::Answered;

/// Checks a history; an empty answer means every invariant held.
pub fn verify(h: &History) -> Vec<Anomaly> {
    let mut v = Verifier { h, out: Vec::new() };
    for (i, op) in h.ops.iter().enumerate() {
        v.conformance(i, op);
    }
    for a in 0..h.addresses.len() {
        v.address(a);
    }
    v.out
}

struct Verifier<'h> {
    h: &'h History,
    out: Vec<Anomaly>,
}

fn excerpt(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Two reads of the same sequence agree: identical but for `acknowledged_at`, which may go
/// from null to a time but never change once set.
fn same_event(a: &Value, b: &Value) -> bool {
    let (Some(ma), Some(mb)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let keys: HashSet<&String> = ma.keys().chain(mb.keys()).collect();
    keys.into_iter().all(|k| {
        if k == "acknowledged_at" {
            ma.get(k).is_none_or(Value::is_null)
                || mb.get(k).is_none_or(Value::is_null)
                || ma.get(k) == mb.get(k)
        } else {
            ma.get(k) == mb.get(k)
        }
    })
}

impl Verifier<'_> {
    fn push(&mut self, kind: &'static str, address: Option<usize>, op: Option<usize>, d: String) {
        self.out.push(Anomaly {
            kind,
            address,
            op,
            detail: d,
        });
    }

    // ---------------------------------------------------------------- one address, whole

    fn address(&mut self, a: usize) {
        let h = self.h;
        let ops: Vec<usize> = (0..h.ops.len())
            .filter(|&i| h.ops[i].address == Some(a))
            .collect();
        let addr = Some(a);

        // The final last_sequence.
        let final_usage = ops
            .iter()
            .rev()
            .map(|&i| &h.ops[i])
            .find(|o| o.phase == Phase::Final && o.kind == OpKind::Inspect && o.outcome.is(200))
            .map(|o| o.outcome.body()["usage"].clone());

        // The feed, from every read of it.
        let mut feed: BTreeMap<u64, (usize, &Value)> = BTreeMap::new();
        let mut ids: HashMap<&str, u64> = HashMap::new();
        for &i in &ops {
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
                let (Some(s), Some(id)) = (e["sequence"].as_u64(), e["id"].as_str()) else {
                    continue; // reported by conformance
                };
                match feed.get(&s) {
                    Some((j, first)) if !same_event(first, e) => {
                        let d = format!(
                            "sequence {s} read as {} by op #{j} and as {} here",
                            excerpt(&first.to_string()),
                            excerpt(&e.to_string())
                        );
                        self.push("event_mismatch", addr, Some(i), d);
                    }
                    Some(_) => {}
                    None => {
                        feed.insert(s, (i, e));
                    }
                }
                match ids.get(id) {
                    Some(&other) if other != s => {
                        let d = format!("event id {id} at sequences {other} and {s}");
                        self.push("event_mismatch", addr, Some(i), d);
                    }
                    Some(_) => {}
                    None => {
                        ids.insert(id, s);
                    }
                }
            }
        }
        let last = match &final_usage {
            Some(u) => u["last_sequence"].as_u64().unwrap_or(0),
            None => {
                self.push(
                    "incomplete_history",
                    addr,
                    None,
                    "no final GET {root}: the final last_sequence is unknown".into(),
                );
                feed.keys().next_back().copied().unwrap_or(0)
            }
        };
        let missing: Vec<u64> = (1..=last).filter(|s| !feed.contains_key(s)).collect();
        if !missing.is_empty() {
            let d = format!(
                "{} of sequences 1..={last} never read by anyone, e.g. {:?}",
                missing.len(),
                &missing[..missing.len().min(10)]
            );
            self.push("feed_gap", addr, None, d);
        }
        if let Some((&s, &(i, _))) = feed.range(last + 1..).next() {
            let d = format!("sequence {s} read, but the final last_sequence is {last}");
            self.push("feed_beyond_usage", addr, Some(i), d);
        }

        self.consumers(a, &ops, last, &feed);

        // Writes answered 2xx, by the sequence they claim, and the real-time index.
        let mut claims: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut answered = Vec::new();
        for &i in &ops {
            let o = &h.ops[i];
            let claimed = match (&o.kind, o.outcome.status()) {
                (OpKind::Put { .. } | OpKind::Delete { .. }, Some(200)) => {
                    o.outcome.body()["revision"].as_u64()
                }
                (OpKind::Deliver { .. } | OpKind::DeliverRaw { .. }, Some(200 | 202)) => {
                    o.outcome.body()["event"]["sequence"].as_u64()
                }
                _ => None,
            };
            if let Some(s) = claimed {
                answered.push((o.end_us, s));
                if !matches!(o.kind, OpKind::Deliver { .. } | OpKind::DeliverRaw { .. }) {
                    claims.entry(s).or_default().push(i);
                }
            }
        }
        let answered = Answered::new(answered);
        for (s, who) in &claims {
            if who.len() > 1 {
                let d = format!("{} state writes answered 200 with revision {s}", who.len());
                self.push("duplicate_revision", addr, Some(who[1]), d);
            }
        }

        // Replay the feed's state events; match them to requests.
        let replay = self.replay(a, &ops, &feed, &claims, last);

        // Every 2xx state write is in the feed.
        for (s, who) in &claims {
            if !feed.contains_key(s) || *s > last {
                for &i in who {
                    let d = format!(
                        "{} answered 200 with revision {s}, which is not in the feed (1..={last})",
                        h.ops[i].kind.name()
                    );
                    self.push("lost_write", addr, Some(i), d);
                }
            }
        }

        self.counters(a, &ops, &replay.counter_last);
        self.deliveries(a, &ops, &feed);
        self.timers(a, &ops, &feed);
        self.wakes(a, &feed, last);
        self.acks(a, &ops, &ids);
        self.reads(a, &ops, &feed, &ids, &replay, &answered, last);
        self.final_state(a, &ops, &replay, final_usage.as_ref(), last);
    }
}

impl Verifier<'_> {
    /// With wakes checked (docs/API.md §19): every wake for the address verified with its
    /// hook's secret and lies within the feed, and every delivery of [`DELIVERY_TYPE`] in the
    /// feed lies in the range of a wake the receiver answered.
    fn wakes(&mut self, a: usize, feed: &BTreeMap<u64, (usize, &Value)>, last: u64) {
        let Some(wakes) = &self.h.wakes else { return };
        let Some(id) = self.h.addresses.get(a) else {
            return;
        };
        let mine: Vec<&super::history::WakeSeen> =
            wakes.iter().filter(|w| &w.address_id == id).collect();
        let addr = Some(a);
        for w in &mine {
            if !w.signed {
                let d = format!(
                    "wake {} does not verify with its hook's secret",
                    w.webhook_id
                );
                self.push("unsigned_wake", addr, None, d);
            }
            if w.from == 0 || w.from > w.to || w.to > last {
                let d = format!(
                    "wake {} covers {}..={}, the feed ends at {last}",
                    w.webhook_id, w.from, w.to
                );
                self.push("wake_beyond_feed", addr, None, d);
            }
        }
        let unwoken: Vec<u64> = feed
            .iter()
            .filter(|(_, (_, e))| e["type"] == super::history::DELIVERY_TYPE)
            .map(|(s, _)| *s)
            .filter(|s| !mine.iter().any(|w| w.from <= *s && *s <= w.to))
            .collect();
        if !unwoken.is_empty() {
            let d = format!(
                "{} deliveries no answered wake covered, e.g. sequences {:?} ({} wakes seen)",
                unwoken.len(),
                &unwoken[..unwoken.len().min(10)],
                mine.len()
            );
            self.push("unwoken_event", addr, None, d);
        }
    }
}

#[cfg(test)]
mod tests;
