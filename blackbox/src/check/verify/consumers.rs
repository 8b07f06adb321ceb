//! Each consumer of the feed: `after` chained through `next_cursor`, and 1..=L seen exactly
//! once, in order; a filtered consumer (`types=` [`FILTER`], docs/API.md §21) sees exactly the
//! feed's matching events, once each, in order.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Verifier;
use crate::check::history::{filter_matches, OpKind, FILTER};

impl Verifier<'_> {
    /// Each consumer: `after` chained through `next_cursor`, and 1..=last seen exactly once
    /// (the matching ones of `feed` for a filtered consumer).
    pub(super) fn consumers(
        &mut self, a: usize, ops: &[usize], last: u64, feed: &BTreeMap<u64, (usize, &Value)>,
    ) {
        let h = self.h;
        let mut by_consumer: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut filtered: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &i in ops {
            if let OpKind::Poll {
                consumer,
                filtered: f,
                ..
            } = h.ops[i].kind
            {
                let into = if f { &mut filtered } else { &mut by_consumer };
                into.entry(consumer).or_default().push(i);
            }
        }
        for (c, polls) in filtered {
            self.filtered_consumer(a, c, &polls, last, feed);
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

    /// A filtered consumer: `after` chained through `next_cursor`; every event it saw matches
    /// [`FILTER`]; and it saw each matching event of `feed` in 1..=last once, in order (an
    /// event of the feed no read showed is not judged).
    fn filtered_consumer(
        &mut self, a: usize, c: usize, polls: &[usize], last: u64,
        feed: &BTreeMap<u64, (usize, &Value)>,
    ) {
        let h = self.h;
        let matching: Vec<u64> = feed
            .range(1..=last)
            .filter(|(_, (_, e))| filter_matches(e["type"].as_str().unwrap_or("")))
            .map(|(s, _)| *s)
            .collect();
        let mut expected = matching.iter().copied().peekable();
        let mut cursor = 0;
        let mut seen_last = 0u64;
        let mut problem: Option<(&'static str, usize, String)> = None;
        for &i in polls {
            let o = &h.ops[i];
            let OpKind::Poll { after, .. } = o.kind else {
                continue;
            };
            if after != cursor && problem.is_none() {
                let d =
                    format!("filtered consumer {c} polled after={after}, its cursor was {cursor}");
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
                if !filter_matches(e["type"].as_str().unwrap_or("")) {
                    let d = format!(
                        "filtered consumer {c} ({FILTER}) got {s} of type {}",
                        e["type"]
                    );
                    problem = Some(("filtered_mismatch", i, d));
                } else if s <= seen_last {
                    let d =
                        format!("filtered consumer {c} saw sequence {s} again (after {seen_last})");
                    problem = Some(("consumer_duplicate", i, d));
                } else {
                    // A matching event of the feed before this one was skipped.
                    match expected.peek() {
                        Some(&m) if m < s => {
                            let d = format!("filtered consumer {c} ({FILTER}) missed {m}, saw {s}");
                            problem = Some(("consumer_gap", i, d));
                        }
                        Some(&m) if m == s => {
                            expected.next();
                        }
                        _ => {}
                    }
                    seen_last = s;
                }
            }
            cursor = body["next_cursor"].as_u64().unwrap_or(cursor);
        }
        if problem.is_none() {
            if let Some(m) = expected.next() {
                let d = format!("filtered consumer {c} ({FILTER}) never saw {m} (cursor {cursor})");
                problem = Some(("consumer_incomplete", polls.last().copied().unwrap_or(0), d));
            }
        }
        if let Some((kind, i, d)) = problem {
            self.push(kind, Some(a), Some(i), d);
        }
    }
}
