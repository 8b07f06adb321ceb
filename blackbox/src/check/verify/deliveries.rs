//! Deliveries: each delivery marker (an Idempotency-Key) has exactly one event when any attempt
//! got a 2xx, every 2xx names it, a reused key with another body never lands; and bodies that
//! parsing would change are kept as their exact text.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::{excerpt, Verifier};
use crate::check::history::{OpKind, DELIVERY_TYPE, EMAIL_SENDER, EMAIL_TYPE, RAW_TYPE};

impl Verifier<'_> {
    /// Emails through the webhook door: each marker whose attempt was accepted has exactly one
    /// `email.received` event (resends included), none was refused and still landed, and no
    /// email event is one we never sent.
    fn emails(&mut self, a: usize, ops: &[usize], feed: &BTreeMap<u64, (usize, &Value)>) {
        let h = self.h;
        let addr = Some(a);
        let mut sent: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &i in ops {
            if let OpKind::Email { marker } = &h.ops[i].kind {
                sent.entry(marker.as_str()).or_default().push(i);
            }
        }
        let mut in_feed: HashMap<&str, Vec<u64>> = HashMap::new();
        for (&s, &(_, e)) in feed {
            if e["type"] != EMAIL_TYPE {
                continue;
            }
            let marker = e["data"]["subject"].as_str().unwrap_or_default();
            if !sent.contains_key(marker) {
                let d = format!("email event {s} ({marker:?}) was never sent");
                self.push("phantom_event", addr, None, d);
                continue;
            }
            if e["ingress_surface"] != "email" || e["source"] != EMAIL_SENDER {
                let d = format!(
                    "email event {s} is not as sent: {}",
                    excerpt(&e.to_string())
                );
                self.push("malformed_event", addr, None, d);
            }
            in_feed.entry(marker).or_default().push(s);
        }
        for (marker, attempts) in sent {
            let events = in_feed.get(marker).map_or(&[][..], |v| v);
            let accepted: Vec<usize> = attempts
                .iter()
                .copied()
                .filter(|&i| {
                    let o = &h.ops[i].outcome;
                    o.is(200)
                        && o.body()["accepted"]
                            .as_array()
                            .is_some_and(|v| !v.is_empty())
                })
                .collect();
            let ambiguous = attempts.iter().any(|&i| h.ops[i].outcome.is_ambiguous());
            if events.len() > 1 {
                let d = format!("email {marker} produced events {events:?}");
                self.push("duplicate_event", addr, None, d);
            } else if events.is_empty() && !accepted.is_empty() {
                let d = format!("email {marker} was accepted but is not in the feed");
                self.push("lost_write", addr, Some(accepted[0]), d);
            } else if !events.is_empty() && accepted.is_empty() && !ambiguous {
                let d = format!("email {marker} was refused every time but is in the feed");
                self.push("phantom_event", addr, Some(attempts[0]), d);
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

    pub(super) fn deliveries(
        &mut self, a: usize, ops: &[usize], feed: &BTreeMap<u64, (usize, &Value)>,
    ) {
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
        self.emails(a, ops, feed);
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
}
