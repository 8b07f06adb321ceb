//! Each consumer of the feed: `after` chained through `next_cursor`, and 1..=L seen exactly
//! once, in order; a filtered consumer (`types=` [`FILTER`], docs/API.md §21) sees exactly the
//! feed's matching events, once each, in order.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Verifier;
use crate::check::history::{filter_matches, OpKind, FILTER};

impl Verifier<'_> {
    /// Each consumer: `after` chained through `next_cursor`, and 1..=last seen exactly once —
    /// for a filtered consumer, the matching events of `feed` in 1..=last (an event no read
    /// showed is not judged).
    pub(super) fn consumers(
        &mut self, a: usize, ops: &[usize], last: u64, feed: &BTreeMap<u64, (usize, &Value)>,
    ) {
        let h = self.h;
        let mut by_consumer: BTreeMap<(usize, bool), Vec<usize>> = BTreeMap::new();
        for &i in ops {
            if let OpKind::Poll {
                consumer, filtered, ..
            } = h.ops[i].kind
            {
                by_consumer.entry((consumer, filtered)).or_default().push(i);
            }
        }
        if by_consumer.is_empty() && last > 0 {
            let d = format!("no consumer read this address's {last} events");
            self.push("consumer_incomplete", Some(a), None, d);
        }
        for ((c, filtered), polls) in by_consumer {
            let expected: Vec<u64> = if filtered {
                feed.range(1..=last)
                    .filter(|(_, (_, e))| filter_matches(e["type"].as_str().unwrap_or("")))
                    .map(|(s, _)| *s)
                    .collect()
            } else {
                (1..=last).collect()
            };
            let who = if filtered {
                format!("filtered consumer {c} ({FILTER})")
            } else {
                format!("consumer {c}")
            };
            if let Some((kind, i, d)) = self.consumer(&who, filtered, &polls, &expected) {
                self.push(kind, Some(a), Some(i), d);
            }
        }
    }

    /// The first problem of one consumer's `polls`, which should show `expected` in order,
    /// each once (and, `filtered`, only events matching [`FILTER`]).
    fn consumer(
        &self, who: &str, filtered: bool, polls: &[usize], expected: &[u64],
    ) -> Option<(&'static str, usize, String)> {
        let h = self.h;
        let mut expected = expected.iter().copied().peekable();
        let mut cursor = 0;
        let mut seen_last = 0u64;
        for &i in polls {
            let o = &h.ops[i];
            let OpKind::Poll { after, .. } = o.kind else {
                continue;
            };
            if after != cursor {
                let d = format!("{who} polled after={after}, its cursor was {cursor}");
                return Some(("consumer_order", i, d));
            }
            if !o.outcome.is(200) {
                continue;
            }
            let body = o.outcome.body();
            for e in body["events"].as_array().map_or(&[][..], |v| v) {
                let Some(s) = e["sequence"].as_u64() else {
                    continue;
                };
                if filtered && !filter_matches(e["type"].as_str().unwrap_or("")) {
                    let d = format!("{who} got {s} of type {}", e["type"]);
                    return Some(("filtered_mismatch", i, d));
                }
                if s <= seen_last {
                    let d = format!("{who} saw sequence {s} again (after {seen_last})");
                    return Some(("consumer_duplicate", i, d));
                }
                match expected.peek() {
                    Some(&m) if m < s => {
                        let d = format!("{who} jumped from {seen_last} to {s}: missed {m}");
                        return Some(("consumer_gap", i, d));
                    }
                    Some(&m) if m == s => {
                        expected.next();
                    }
                    _ => {}
                }
                seen_last = s;
            }
            cursor = body["next_cursor"].as_u64().unwrap_or(cursor);
        }
        expected.next().map(|m| {
            let d = format!("{who} stopped before sequence {m} (cursor {cursor})");
            let i = polls.last().copied().unwrap_or(0);
            ("consumer_incomplete", i, d)
        })
    }
}
