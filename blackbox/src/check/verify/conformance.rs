//! Each request on its own: its status, error code and body shape must be what docs/API.md
//! allows for that request (events, times and ids included).

use serde_json::Value;

use super::{excerpt, Verifier};
use crate::check::history::{filter_matches, Op, OpKind, Outcome, FILTER};
use crate::check::workload::SIGNED_PREFIX;

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
    if !matches!(surface, "http" | "state" | "email" | "timer") {
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
    if surface == "http" {
        return verification_problem(e);
    }
    None
}

/// Every address of a run verifies Standard Webhooks signatures (the workload creates them
/// with [`SIGNING_SECRET`](crate::check::workload::SIGNING_SECRET)), so each http event
/// carries `verification` (docs/API.md §15): verified exactly when the workload signed it (its
/// marker is the signed `webhook-id`), else unverified for a missing signature.
fn verification_problem(e: &Value) -> Option<String> {
    let v = &e["verification"];
    let signed = e["data"]["marker"]
        .as_str()
        .is_some_and(|m| m.starts_with(SIGNED_PREFIX));
    let right = v["scheme"] == "standard-webhooks"
        && if signed {
            v["verified"] == true && v.get("reason").is_none_or(Value::is_null)
        } else {
            v["verified"] == false && v["reason"] == "missing_signature"
        };
    (!right).then(|| {
        format!(
            "a {} delivery's verification is {v}",
            if signed { "signed" } else { "unsigned" }
        )
    })
}

impl Verifier<'_> {
    pub(super) fn conformance(&mut self, i: usize, op: &Op) {
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
            // The webhook door (docs/API.md §10): each recipient accepted, or rejected with an
            // error code, its SMTP reply and whether a resend may succeed.
            (OpKind::Email { .. }, 200) => {
                let listed = |field: &str| body[field].as_array().map(Vec::len);
                match (listed("accepted"), listed("rejected")) {
                    (Some(a), Some(r)) if a + r == 1 => {}
                    _ => return Err("one recipient must be either accepted or rejected".into()),
                }
                for r in body["rejected"].as_array().into_iter().flatten() {
                    let known = matches!(
                        r["code"].as_str(),
                        Some("quota_exceeded" | "unavailable" | "address_gone")
                    );
                    if !known || !r["smtp"].is_string() || !r["temporary"].is_boolean() {
                        return Err(format!("a rejection the workload cannot cause: {r}"));
                    }
                }
                Ok(())
            }
            (OpKind::Deliver { other_body, .. }, 422)
                if *other_body && code == "idempotency_key_reused" =>
            {
                Ok(())
            }
            (
                OpKind::Poll {
                    after,
                    limit,
                    filtered,
                    ..
                },
                200,
            ) => {
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
                    if *filtered && !filter_matches(e["type"].as_str().unwrap_or("")) {
                        return Err(format!(
                            "event {s} of type {} does not match {FILTER}",
                            e["type"]
                        ));
                    }
                    last = s;
                }
                let cursor = body["next_cursor"].as_u64();
                if *filtered {
                    // The last sequence examined (docs/API.md §21): at or past the last match.
                    if cursor.is_none_or(|c| c < last) {
                        return Err("next_cursor is before the last event returned".into());
                    }
                } else if cursor != Some(last) {
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
            (OpKind::SetTimer { .. }, 201 | 200) => {
                let t = &body["timer"];
                if !t["id"].as_str().is_some_and(|id| id.starts_with("tmr_")) {
                    return Err("timer.id is not a timer id".into());
                }
                ts(&t["fire_at"], "timer.fire_at")?;
                match (status, t["status"].as_str()) {
                    (201, Some("pending")) | (200, Some("pending" | "fired" | "cancelled")) => {
                        Ok(())
                    }
                    _ => Err(format!("timer.status {} for {status}", t["status"])),
                }
            }
            (OpKind::SetTimer { .. }, 409) if code == "quota_exceeded" => Ok(()),
            (OpKind::CancelTimer { timer_id }, 200) => {
                if body["timer"]["id"].as_str() != Some(timer_id)
                    || body["timer"]["status"] != "cancelled"
                {
                    return Err("not the timer, cancelled".into());
                }
                Ok(())
            }
            (OpKind::CancelTimer { .. }, 409) if code == "timer_fired" => Ok(()),
            _ => Err("not an answer the API contract allows for this request".into()),
        }
    }
}
