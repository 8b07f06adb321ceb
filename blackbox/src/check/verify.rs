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

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::history::{
    Anomaly, History, Op, OpKind, Outcome, Phase, COUNTER_PREFIX, DELIVERY_TYPE, RAW_TYPE,
};

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

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339, UTC, milliseconds).
fn is_ts(v: &Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    let b = s.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// `^[A-Za-z0-9_-]{1,64}$`.
fn is_id(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

fn compact_len(v: &Value) -> u64 {
    serde_json::to_string(v).map_or(0, |s| s.len() as u64)
}

/// The size docs/API.md §7 gives a key: key bytes + compact JSON of the value + 64.
fn entry_size(key: &str, value: &Value) -> u64 {
    key.len() as u64 + compact_len(value) + 64
}

fn excerpt(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// A problem with one event object's shape, if any.
fn event_shape(e: &Value) -> Option<String> {
    if !is_id(&e["id"]) {
        return Some("event without a valid id".into());
    }
    if e["sequence"].as_u64().is_none_or(|s| s == 0) {
        return Some("event without a sequence ≥ 1".into());
    }
    if e["type"].as_str().is_none_or(str::is_empty) {
        return Some("event without a type".into());
    }
    if !(e["source"].is_null() || e["source"].is_string()) {
        return Some("event source is neither null nor a string".into());
    }
    let surface = e["ingress_surface"].as_str().unwrap_or("");
    if !matches!(surface, "http" | "state" | "email") {
        return Some(format!("ingress_surface {surface:?}"));
    }
    if !is_ts(&e["received_at"]) {
        return Some("received_at is not an RFC 3339 UTC time with milliseconds".into());
    }
    if !(e["acknowledged_at"].is_null() || is_ts(&e["acknowledged_at"])) {
        return Some("acknowledged_at is neither null nor a time".into());
    }
    if e.get("data").is_none() {
        return Some("event without data".into());
    }
    if surface == "http" && !e["http"].is_object() {
        return Some("an http event without its http record".into());
    }
    None
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

/// `(end_us, sequence)` of answered writes, sorted, with a running maximum: "the highest
/// sequence answered 2xx before time t".
struct Answered {
    ends: Vec<u64>,
    max: Vec<u64>,
}

impl Answered {
    fn new(mut writes: Vec<(u64, u64)>) -> Self {
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
    fn push(&mut self, kind: &'static str, address: Option<usize>, op: Option<usize>, d: String) {
        self.out.push(Anomaly {
            kind,
            address,
            op,
            detail: d,
        });
    }

    // ---------------------------------------------------------------- one request on its own

    fn conformance(&mut self, i: usize, op: &Op) {
        let Outcome::Answer {
            status,
            body,
            json,
            raw,
            retry_after,
            content_type,
        } = &op.outcome
        else {
            return; // no answer: nothing to check on its own
        };
        let status = *status;
        let what = op.kind.name();
        let code = op.outcome.code();
        if status >= 500 {
            if status == 503 && code == "unavailable" {
                if retry_after.is_none() {
                    self.push(
                        "unexpected_response",
                        op.address,
                        Some(i),
                        format!("{what}: 503 unavailable without a Retry-After header"),
                    );
                }
                return;
            }
            // Without agentaddress's error envelope the 5xx came from whatever is in front of
            // it (API Gateway, cargo-lambda's emulator): an unknown outcome, like a reset
            // connection (`Outcome::is_ambiguous`), counted in the summary — not a contract
            // violation of the server, which never answered.
            if op.outcome.is_gateway_error() {
                return;
            }
            let shown = if *json { body.to_string() } else { raw.clone() };
            self.push(
                "server_error",
                op.address,
                Some(i),
                format!("{what}: HTTP {status}: {}", excerpt(&shown)),
            );
            return;
        }
        if *json
            && !content_type
                .as_deref()
                .is_some_and(|c| c.to_ascii_lowercase().starts_with("application/json"))
        {
            self.push(
                "unexpected_response",
                op.address,
                Some(i),
                format!("{what}: HTTP {status} JSON answer with Content-Type {content_type:?}"),
            );
        }
        if !*json {
            self.push(
                "unexpected_response",
                op.address,
                Some(i),
                format!(
                    "{what}: HTTP {status} with a non-JSON body: {}",
                    excerpt(raw)
                ),
            );
            return;
        }
        if let (OpKind::ListState, 200) = (&op.kind, status) {
            // One answer, one moment: the totals are those of the keys listed.
            let keys = body["keys"].as_array().map_or(&[][..], |v| v);
            let sum: u64 = keys.iter().filter_map(|k| k["size"].as_u64()).sum();
            let (n, bytes) = (body["state_keys"].as_u64(), body["state_bytes"].as_u64());
            if n.is_some_and(|n| n != keys.len() as u64) || bytes.is_some_and(|b| b != sum) {
                self.push(
                    "torn_read",
                    op.address,
                    Some(i),
                    format!(
                        "GET state lists {} keys of {sum} bytes but says state_keys {n:?}, \
                         state_bytes {bytes:?}: {}",
                        keys.len(),
                        excerpt(&body.to_string())
                    ),
                );
            }
        }
        if let Err(problem) = self.expected(op, status, body) {
            self.push(
                "unexpected_response",
                op.address,
                Some(i),
                format!(
                    "{what}: HTTP {status}: {problem}: {}",
                    excerpt(&body.to_string())
                ),
            );
        }
    }

    /// Whether `status`/`body` is an answer docs/API.md allows for this request.
    fn expected(&self, op: &Op, status: u16, body: &Value) -> Result<(), String> {
        let code = body["error"]["code"].as_str().unwrap_or("");
        if status >= 400
            && (code.is_empty() || body["error"]["message"].as_str().is_none_or(str::is_empty))
        {
            return Err("an error without error.code and error.message".into());
        }
        if status == 429 {
            if code != "rate_limited" {
                return Err("429 that is not rate_limited".into());
            }
            if !matches!(op.kind, OpKind::Create | OpKind::Poll { .. }) {
                return Err("rate limited a request that has no rate limit".into());
            }
            let header = match &op.outcome {
                Outcome::Answer { retry_after, .. } => retry_after.clone(),
                Outcome::Transport(_) => None,
            };
            let secs = body["error"]["retry_after_seconds"].as_u64();
            return match (header.and_then(|h| h.trim().parse::<u64>().ok()), secs) {
                (Some(h), Some(s)) if h == s && s <= 60 => Ok(()),
                (h, s) => Err(format!(
                    "Retry-After header {h:?} and retry_after_seconds {s:?} must agree (≤ 60 s)"
                )),
            };
        }
        let id = |v: &Value, what: &str| {
            if is_id(v) {
                Ok(())
            } else {
                Err(format!("{what} is not an id"))
            }
        };
        let seq = |v: &Value, what: &str| match v.as_u64() {
            Some(n) if n >= 1 => Ok(n),
            _ => Err(format!("{what} is not a sequence ≥ 1")),
        };
        let ts = |v: &Value, what: &str| {
            if is_ts(v) {
                Ok(())
            } else {
                Err(format!(
                    "{what} is not an RFC 3339 UTC time with milliseconds"
                ))
            }
        };
        match (&op.kind, status) {
            (OpKind::Create, 201) => {
                id(&body["address"]["id"], "address.id")?;
                for p in [
                    "/credentials/read_token",
                    "/endpoints/inbox_url",
                    "/endpoints/events_url",
                    "/endpoints/state_url",
                ] {
                    if body.pointer(p).and_then(Value::as_str).is_none() {
                        return Err(format!("{p} missing"));
                    }
                }
                Ok(())
            }
            (OpKind::Inspect, 200) => {
                for f in [
                    "last_sequence",
                    "retained_events",
                    "state_keys",
                    "state_bytes",
                ] {
                    if body["usage"][f].as_u64().is_none() {
                        return Err(format!("usage.{f} missing"));
                    }
                }
                if body["limits"].is_object() {
                    Ok(())
                } else {
                    Err("limits missing".into())
                }
            }
            (OpKind::ListState, 200) => {
                let keys = body["keys"].as_array().ok_or("keys is not an array")?;
                for k in keys {
                    if k["key"].as_str().is_none() {
                        return Err("a key entry without key".into());
                    }
                    seq(&k["revision"], "keys[].revision")?;
                    ts(&k["updated_at"], "keys[].updated_at")?;
                    k["size"].as_u64().ok_or("keys[].size missing")?;
                }
                if body["state_keys"].as_u64().is_none() || body["state_bytes"].as_u64().is_none() {
                    return Err("state_keys / state_bytes missing".into());
                }
                if body["limits"]["max_keys"].as_u64().is_none()
                    || body["limits"]["max_bytes"].as_u64().is_none()
                {
                    return Err("limits.max_keys / max_bytes missing".into());
                }
                Ok(())
            }
            (OpKind::ReadKey { key }, 200) => {
                if body["key"].as_str() != Some(key) {
                    return Err("another key".into());
                }
                if body.get("value").is_none() {
                    return Err("no value".into());
                }
                seq(&body["revision"], "revision")?;
                ts(&body["updated_at"], "updated_at")
            }
            (OpKind::ReadKey { .. }, 404) | (OpKind::Delete { .. }, 404) if code == "not_found" => {
                Ok(())
            }
            (OpKind::Put { key, value, .. }, 200) => {
                if body["key"].as_str() != Some(key) {
                    return Err("another key".into());
                }
                if &body["value"] != value || body.get("value").is_none() {
                    return Err("not the value written".into());
                }
                let r = seq(&body["revision"], "revision")?;
                ts(&body["updated_at"], "updated_at")?;
                id(&body["event"]["id"], "event.id")?;
                if body["event"]["sequence"].as_u64() != Some(r) {
                    return Err("event.sequence is not the revision".into());
                }
                Ok(())
            }
            (OpKind::Put { if_revision, .. }, 409) if code == "revision_conflict" => {
                let current = &body["error"]["current_revision"];
                if body["error"].get("current_revision").is_none() {
                    return Err("revision_conflict without current_revision".into());
                }
                match (if_revision, current.as_u64()) {
                    (None, _) => Err("an unconditional write got revision_conflict".into()),
                    (Some(0), None) => {
                        Err("create-only conflict, yet the key has no current revision".into())
                    }
                    (Some(r), Some(c)) if *r == c => {
                        Err("conflict, yet current_revision equals if_revision".into())
                    }
                    (Some(_), None) if !current.is_null() => {
                        Err("current_revision is neither null nor an integer".into())
                    }
                    _ => Ok(()),
                }
            }
            (OpKind::Delete { key, .. }, 200) => {
                if body["key"].as_str() != Some(key) || body["deleted"] != Value::Bool(true) {
                    return Err("not {key, deleted: true}".into());
                }
                let r = seq(&body["revision"], "revision")?;
                id(&body["event"]["id"], "event.id")?;
                if body["event"]["sequence"].as_u64() != Some(r) {
                    return Err("event.sequence is not the revision".into());
                }
                Ok(())
            }
            (OpKind::Delete { if_revision, .. }, 409) if code == "revision_conflict" => {
                match body["error"]["current_revision"].as_u64() {
                    Some(c) if c != *if_revision => Ok(()),
                    Some(_) => Err("conflict, yet current_revision equals if_revision".into()),
                    None => Err("a conflicting delete of a present key needs its revision".into()),
                }
            }
            (OpKind::Put { .. } | OpKind::Deliver { .. } | OpKind::DeliverRaw { .. }, 409)
                if code == "quota_exceeded" =>
            {
                Ok(()) // checked against the feed in the address pass
            }
            (
                OpKind::Deliver {
                    idempotency_key, ..
                },
                202 | 200,
            ) => {
                if status == 200 && idempotency_key.is_none() {
                    return Err("a delivery without a key answered as a duplicate".into());
                }
                if body["duplicate"] != Value::Bool(status == 200) {
                    return Err("duplicate must be false on 202 and true on 200".into());
                }
                id(&body["event"]["id"], "event.id")?;
                seq(&body["event"]["sequence"], "event.sequence").map(|_| ())
            }
            (OpKind::DeliverRaw { .. }, 202 | 200) => {
                if body["duplicate"] != Value::Bool(status == 200) {
                    return Err("duplicate must be false on 202 and true on 200".into());
                }
                id(&body["event"]["id"], "event.id")?;
                seq(&body["event"]["sequence"], "event.sequence").map(|_| ())
            }
            (OpKind::Deliver { other_body, .. }, 422)
                if *other_body && code == "idempotency_key_reused" =>
            {
                Ok(())
            }
            (OpKind::Poll { after, limit, .. }, 200) => {
                let events = body["events"].as_array().ok_or("events is not an array")?;
                if events.len() as u64 > *limit {
                    return Err("more events than limit".into());
                }
                let mut last = *after;
                for e in events {
                    if let Some(p) = event_shape(e) {
                        return Err(p);
                    }
                    let s = e["sequence"].as_u64().unwrap_or(0);
                    if s <= last {
                        return Err(format!(
                            "sequence {s} after {last}: not ascending past after"
                        ));
                    }
                    last = s;
                }
                if body["next_cursor"].as_u64() != Some(last) {
                    return Err("next_cursor is not the last sequence returned (or after)".into());
                }
                if !body["has_more"].is_boolean() {
                    return Err("has_more is not a boolean".into());
                }
                Ok(())
            }
            (OpKind::ReadEvent { event_id }, 200) => {
                if let Some(p) = event_shape(&body["event"]) {
                    return Err(p);
                }
                if body["event"]["id"].as_str() != Some(event_id) {
                    return Err("another event".into());
                }
                Ok(())
            }
            (OpKind::Ack { event_id }, 200) => {
                if body["event"]["id"].as_str() != Some(event_id) {
                    return Err("another event".into());
                }
                seq(&body["event"]["sequence"], "event.sequence")?;
                ts(&body["event"]["acknowledged_at"], "event.acknowledged_at")
            }
            (OpKind::ReadEvent { .. } | OpKind::Ack { .. }, 404) if code == "not_found" => {
                Ok(()) // checked against the feed in the address pass
            }
            _ => Err("not an answer the API contract allows for this request".into()),
        }
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

        self.consumers(a, &ops, last);

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
        self.acks(a, &ops, &ids);
        self.reads(a, &ops, &feed, &ids, &replay, &answered, last);
        self.final_state(a, &ops, &replay, final_usage.as_ref(), last);
    }

    /// Each consumer: `after` chained through `next_cursor`, and 1..=last seen exactly once.
    fn consumers(&mut self, a: usize, ops: &[usize], last: u64) {
        let h = self.h;
        let mut by_consumer: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &i in ops {
            if let OpKind::Poll { consumer, .. } = h.ops[i].kind {
                by_consumer.entry(consumer).or_default().push(i);
            }
        }
        if by_consumer.is_empty() && last > 0 {
            let d = format!("no consumer read this address's {last} events");
            self.push("consumer_incomplete", Some(a), None, d);
        }
        for (c, polls) in by_consumer {
            let mut cursor = 0;
            let mut next = 1u64;
            let mut problem: Option<(&'static str, usize, String)> = None;
            for &i in &polls {
                let o = &h.ops[i];
                let OpKind::Poll { after, .. } = o.kind else {
                    continue;
                };
                if after != cursor && problem.is_none() {
                    let d = format!("consumer {c} polled after={after}, its cursor was {cursor}");
                    problem = Some(("consumer_order", i, d));
                }
                if !o.outcome.is(200) {
                    continue;
                }
                let body = o.outcome.body();
                for e in body["events"].as_array().map_or(&[][..], |v| v) {
                    let Some(s) = e["sequence"].as_u64() else {
                        continue;
                    };
                    if problem.is_some() {
                        continue;
                    }
                    if s < next {
                        let d = format!("consumer {c} saw sequence {s} again (expected {next})");
                        problem = Some(("consumer_duplicate", i, d));
                    } else if s > next {
                        let d = format!(
                            "consumer {c} jumped from {} to {s}: missed {next}..={}",
                            next - 1,
                            s - 1
                        );
                        problem = Some(("consumer_gap", i, d));
                    } else {
                        next += 1;
                    }
                }
                cursor = body["next_cursor"].as_u64().unwrap_or(cursor);
            }
            if problem.is_none() && next - 1 < last {
                let d = format!("consumer {c} stopped at sequence {} of {last}", next - 1);
                problem = Some(("consumer_incomplete", polls.last().copied().unwrap_or(0), d));
            }
            if let Some((kind, i, d)) = problem {
                self.push(kind, Some(a), Some(i), d);
            }
        }
    }

    fn replay(
        &mut self,
        a: usize,
        ops: &[usize],
        feed: &BTreeMap<u64, (usize, &Value)>,
        claims: &HashMap<u64, Vec<usize>>,
        last: u64,
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

    fn counters(&mut self, a: usize, ops: &[usize], last_values: &HashMap<String, u64>) {
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

    /// Bodies that parsing would change: each is one `http.request` event whose data is
    /// `{"content_type": "application/json", "text": <the exact body>}` (docs/API.md,
    /// "Inbox."), answered like any idempotent delivery.
    fn lossy_deliveries(&mut self, a: usize, ops: &[usize], feed: &BTreeMap<u64, (usize, &Value)>) {
        let h = self.h;
        let addr = Some(a);
        let mut sent: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in ops {
            if let OpKind::DeliverRaw { body, .. } = &h.ops[i].kind {
                sent.entry(body.as_str()).or_default().push(i);
            }
        }
        let mut in_feed: HashMap<&str, Vec<(u64, &Value)>> = HashMap::new();
        for (&s, &(_, e)) in feed {
            if e["type"] != RAW_TYPE {
                continue;
            }
            let data = &e["data"];
            let text = data["text"].as_str().filter(|t| {
                sent.contains_key(t)
                    && e["ingress_surface"] == "http"
                    && e["source"].is_null()
                    && data["content_type"] == "application/json"
                    && data.as_object().is_some_and(|d| d.len() == 2)
            });
            match text {
                Some(t) => in_feed.entry(t).or_default().push((s, e)),
                None => {
                    let d = format!(
                        "event {s} of type {RAW_TYPE} is not the exact text of a body sent: {}",
                        excerpt(&e.to_string())
                    );
                    self.push("body_changed", addr, None, d);
                }
            }
        }
        for (body, attempts) in sent {
            let events = in_feed.get(body).map_or(&[][..], |v| v);
            let name = match &h.ops[attempts[0]].kind {
                OpKind::DeliverRaw {
                    idempotency_key, ..
                } => idempotency_key.as_str(),
                _ => "?",
            };
            let ok: Vec<usize> = attempts
                .iter()
                .copied()
                .filter(|&i| h.ops[i].outcome.is(202) || h.ops[i].outcome.is(200))
                .collect();
            let accepted = ok.iter().filter(|&&i| h.ops[i].outcome.is(202)).count();
            if accepted > 1 {
                let d = format!("{accepted} attempts of lossy delivery {name} answered 202");
                self.push("duplicate_event", addr, Some(ok[1]), d);
            }
            if events.len() > 1 {
                let seqs: Vec<u64> = events.iter().map(|(s, _)| *s).collect();
                let d = format!("lossy delivery {name} produced events {seqs:?}");
                self.push("duplicate_event", addr, None, d);
            } else if events.is_empty() && !ok.is_empty() {
                let d = format!(
                    "lossy delivery {name} was answered 2xx but its exact text is not in the feed"
                );
                self.push("lost_write", addr, Some(ok[0]), d);
            }
            if let Some((s, e)) = events.first() {
                for &i in &ok {
                    let ev = &h.ops[i].outcome.body()["event"];
                    if ev["sequence"].as_u64() != Some(*s) || ev["id"] != e["id"] {
                        let d = format!(
                            "lossy delivery {name} answered {ev} but its event is {} at {s}",
                            e["id"]
                        );
                        self.push("idempotency", addr, Some(i), d);
                    }
                }
            }
        }
    }

    fn deliveries(&mut self, a: usize, ops: &[usize], feed: &BTreeMap<u64, (usize, &Value)>) {
        let h = self.h;
        let addr = Some(a);
        let mut by_marker: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in ops {
            if let OpKind::Deliver { data, .. } = &h.ops[i].kind {
                if let Some(m) = data["marker"].as_str() {
                    by_marker.entry(m).or_default().push(i);
                }
            }
        }
        let mut in_feed: HashMap<&str, Vec<(u64, &Value)>> = HashMap::new();
        for (&s, &(_, e)) in feed {
            if e["type"] == DELIVERY_TYPE {
                if let Some(m) = e["data"]["marker"].as_str() {
                    in_feed.entry(m).or_default().push((s, e));
                }
            }
        }
        for (m, events) in &in_feed {
            if !by_marker.contains_key(m) {
                let d = format!("delivery {m} at {:?} was never sent", events[0].0);
                self.push("phantom_event", addr, None, d);
            }
        }
        for (m, attempts) in by_marker {
            let events = in_feed.get(m).map_or(&[][..], |v| v);
            let first_body: Vec<usize> = attempts
                .iter()
                .copied()
                .filter(|&i| {
                    matches!(
                        h.ops[i].kind,
                        OpKind::Deliver {
                            other_body: false,
                            ..
                        }
                    )
                })
                .collect();
            let ok: Vec<usize> = first_body
                .iter()
                .copied()
                .filter(|&i| h.ops[i].outcome.is(202) || h.ops[i].outcome.is(200))
                .collect();
            let accepted = ok.iter().filter(|&&i| h.ops[i].outcome.is(202)).count();
            if accepted > 1 {
                let d = format!("{accepted} attempts of delivery {m} answered 202 (new event)");
                self.push("duplicate_event", addr, Some(ok[1]), d);
            }
            if events.len() > 1 {
                let seqs: Vec<u64> = events.iter().map(|(s, _)| *s).collect();
                let d = format!(
                    "delivery {m} produced {} events: sequences {seqs:?}",
                    seqs.len()
                );
                self.push("duplicate_event", addr, None, d);
            } else if events.is_empty() && !ok.is_empty() {
                let d = format!("delivery {m} was answered 2xx but is not in the feed");
                self.push("lost_write", addr, Some(ok[0]), d);
            }
            if let Some((s, e)) = events.first() {
                for &i in &ok {
                    let ev = &h.ops[i].outcome.body()["event"];
                    if ev["sequence"].as_u64() != Some(*s) || ev["id"] != e["id"] {
                        let d = format!(
                            "delivery {m} answered {ev} but its event is {} at {s}",
                            e["id"]
                        );
                        self.push("idempotency", addr, Some(i), d);
                    }
                }
                if let Some(&i) = first_body.first() {
                    if let OpKind::Deliver { data, .. } = &h.ops[i].kind {
                        if &e["data"] != data {
                            let d = format!(
                                "delivery {m}: the event's data {} is not the body sent {data}",
                                e["data"]
                            );
                            self.push("idempotency", addr, Some(i), d);
                        }
                    }
                }
            }
            for &i in &attempts {
                let o = &h.ops[i];
                if matches!(
                    o.kind,
                    OpKind::Deliver {
                        other_body: true,
                        ..
                    }
                ) && (o.outcome.is(202) || o.outcome.is(200))
                {
                    let d = format!("delivery {m}: the key reused with another body was accepted");
                    self.push("idempotency", addr, Some(i), d);
                }
            }
        }
        self.lossy_deliveries(a, ops, feed);
        // quota_exceeded is right only when the feed is really full.
        let max = self.h.limits["max_retained_events"]
            .as_u64()
            .unwrap_or(u64::MAX);
        for &i in ops {
            let o = &h.ops[i];
            if o.outcome.is(409) && o.outcome.code() == "quota_exceeded" {
                let at = feed.keys().next_back().copied().unwrap_or(0);
                if at < max {
                    let d =
                        format!("quota_exceeded while the feed holds at most {at} < {max} events");
                    self.push("unexpected_response", addr, Some(i), d);
                }
            }
        }
    }

    fn acks(&mut self, a: usize, ops: &[usize], ids: &HashMap<&str, u64>) {
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

    /// Reads during the run: what they saw was committed, and not older than what had been
    /// answered 2xx before they were sent.
    #[allow(clippy::too_many_arguments)]
    fn reads(
        &mut self,
        a: usize,
        ops: &[usize],
        feed: &BTreeMap<u64, (usize, &Value)>,
        ids: &HashMap<&str, u64>,
        replay: &Replay,
        answered: &Answered,
        last: u64,
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

    fn final_state(
        &mut self,
        a: usize,
        ops: &[usize],
        replay: &Replay,
        usage: Option<&Value>,
        last: u64,
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
struct Replay {
    state: BTreeMap<String, (u64, Value)>,
    counter_last: HashMap<String, u64>,
    /// key → (sequence, is a delete), ascending.
    events: HashMap<String, Vec<(u64, bool)>>,
}

impl Replay {
    /// The last event of `key` at or before sequence `at`.
    fn last_event_at(&self, key: &str, at: u64) -> Option<(u64, bool)> {
        let v = self.events.get(key)?;
        let n = v.partition_point(|&(s, _)| s <= at);
        n.checked_sub(1).map(|i| v[i])
    }
}

#[cfg(test)]
mod tests;
