//! Each consumer of the feed: `after` chained through `next_cursor`, and 1..=L seen exactly
//! once, in order.

use std::collections::BTreeMap;

use super::Verifier;
use crate::check::history::OpKind;

impl Verifier<'_> {
    /// Each consumer: `after` chained through `next_cursor`, and 1..=last seen exactly once.
    pub(super) fn consumers(&mut self, a: usize, ops: &[usize], last: u64) {
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
}
