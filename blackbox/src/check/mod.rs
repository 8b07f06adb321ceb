//! `agentaddress-check`: a concurrent invariant checker for any agentaddress deployment, in
//! the spirit of Jepsen and etcd's robustness tests.
//!
//! [`run`] drives a deployment over HTTP only — C concurrent clients doing a seeded random mix
//! of CAS increments, unconditional and create-only writes, conditional deletes, inbox
//! deliveries with Idempotency-Keys (retried on purpose, also concurrently), single-event and
//! state reads, plus long-poll consumers that read every feed with `after = next_cursor` and
//! ack some events — records every request and its outcome in a [`History`], reads everything
//! back, and hands the history to the pure [`verify`], which lists the [`Anomaly`]s: lost
//! updates, writes answered 2xx that are not in the feed, events no request made, consumer gaps
//! or duplicates, more than one event per Idempotency-Key, stale reads, 5xx answers other than
//! 503 `unavailable`, and any answer docs/API.md does not allow for its request. A 429 is a correct
//! answer, honoured with its `Retry-After`; an unanswered request or a 503 is an unknown outcome
//! that may or may not have been applied.

mod history;
mod http;
mod verify;
mod wakes;
mod workload;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

pub use history::{
    Anomaly, History, Op, OpKind, Outcome, Phase, WakeSeen, COUNTER_PREFIX, DELIVERY_TYPE,
};
pub use http::Progress;
pub use verify::verify;

/// What to run against.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL of the deployment (`http://127.0.0.1:8080`).
    pub url: String,
    /// Stop starting new steps once this many HTTP requests have been issued.
    pub ops: u64,
    /// Concurrent workload clients (consumers come on top: one or two per address).
    pub clients: usize,
    /// Seeds every random choice of the workload.
    pub seed: u64,
    /// `wait` of the consumers' long polls (clamped by the server to its maximum).
    pub poll_wait_seconds: f64,
    /// Per-request timeout (above the server's 29 s long-poll bound).
    pub request_timeout: Duration,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// Live figures, for a driver that acts while the check runs (the crash test).
    pub progress: Arc<Progress>,
    /// The server's email ingest secret: with it, the mix also sends email through the
    /// raw-MIME webhook door (docs/API.md §10), and each must land once in its feed.
    pub email_ingest_secret: Option<String>,
    /// Wake hooks (docs/API.md §19): every address is made with a hook for the workload's
    /// deliveries, pointing at a receiver the checker runs on 127.0.0.1 (the server must allow
    /// private receivers), and every delivery in a feed must be covered by a signed wake.
    pub wakes: bool,
}

impl Config {
    pub fn new(url: &str, ops: u64, clients: usize, seed: u64) -> Self {
        Self {
            url: url.to_owned(),
            ops,
            clients,
            seed,
            poll_wait_seconds: 5.0,
            request_timeout: Duration::from_secs(40),
            verbose: false,
            progress: Arc::new(Progress::default()),
            email_ingest_secret: None,
            wakes: false,
        }
    }
}

/// What a run did and found.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    /// HTTP requests issued (every phase), all of them recorded and checked.
    pub ops: u64,
    pub anomalies: Vec<Anomaly>,
    pub duration: Duration,
    pub addresses: usize,
    /// Events in all feeds at the end (sum of the final `last_sequence`s).
    pub events: u64,
    pub consumers: usize,
    /// Requests by kind, then by outcome (`200`, `409 revision_conflict`, `transport`).
    pub by_kind: BTreeMap<&'static str, BTreeMap<String, u64>>,
    pub history: History,
}

impl Report {
    /// `N operations, K anomalies`.
    pub fn last_line(&self) -> String {
        format!(
            "{} operations, {} anomalies",
            self.ops,
            self.anomalies.len()
        )
    }

    /// Requests whose outcome was unknown (no answer or 503).
    pub fn unknown_outcomes(&self) -> u64 {
        self.history
            .ops
            .iter()
            .filter(|o| o.outcome.is_ambiguous())
            .count() as u64
    }

    /// The per-kind summary (without the last line).
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let secs = self.duration.as_secs_f64();
        let _ = writeln!(
            s,
            "seed {}: {} requests in {secs:.1} s ({:.0}/s), {} addresses, {} events, {} consumers, \
             {} unknown outcomes",
            self.seed,
            self.ops,
            self.ops as f64 / secs.max(0.001),
            self.addresses,
            self.events,
            self.consumers,
            self.unknown_outcomes(),
        );
        let mut latencies: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for op in &self.history.ops {
            latencies
                .entry(op.kind.name())
                .or_default()
                .push(op.end_us.saturating_sub(op.start_us));
        }
        for l in latencies.values_mut() {
            l.sort_unstable();
        }
        let pct = |l: &[u64], p: f64| {
            let i = ((l.len().saturating_sub(1)) as f64 * p).round() as usize;
            l.get(i).map_or(0.0, |&us| us as f64 / 1000.0)
        };
        for (kind, hist) in &self.by_kind {
            let total: u64 = hist.values().sum();
            let parts: Vec<String> = hist.iter().map(|(l, n)| format!("{l}: {n}")).collect();
            let l = latencies.get(kind).map_or(&[][..], |v| v);
            let _ = writeln!(
                s,
                "  {kind:<20} {total:>7}  p50 {:>7.1} ms  p99 {:>7.1} ms  {}",
                pct(l, 0.5),
                pct(l, 0.99),
                parts.join(", ")
            );
        }
        if !self.anomalies.is_empty() {
            let mut by: BTreeMap<&str, usize> = BTreeMap::new();
            for a in &self.anomalies {
                *by.entry(a.kind).or_default() += 1;
            }
            let _ = writeln!(s, "anomalies by kind:");
            for (k, n) in by {
                let _ = writeln!(s, "  {k:<20} {n:>7}");
            }
            for a in self.anomalies.iter().take(30) {
                let _ = writeln!(s, "  {a}");
                if let Some(op) = a.op.and_then(|i| self.history.ops.get(i)) {
                    let _ = writeln!(
                        s,
                        "      op: {} {} {:?} at {:.3}..{:.3} s → {}",
                        op.client,
                        op.kind.name(),
                        op.phase,
                        op.start_us as f64 / 1e6,
                        op.end_us as f64 / 1e6,
                        op.outcome.label()
                    );
                }
            }
            if self.anomalies.len() > 30 {
                let _ = writeln!(s, "  … and {} more", self.anomalies.len() - 30);
            }
        }
        s
    }
}

/// Runs the workload against `config.url`, then verifies what it recorded. `Err` when the run
/// could not even start (no address could be created).
pub async fn run(config: Config) -> Result<Report, String> {
    let rec = http::Recorder::new(Arc::clone(&config.progress), config.request_timeout)?;
    let receiver = match config.wakes {
        true => Some(wakes::Receiver::start().await?),
        false => None,
    };
    let ctx = Arc::new(workload::Ctx::new(&config, rec, receiver));
    ctx.run().await?;
    let duration = ctx.rec.elapsed();
    let history = History {
        limits: ctx.limits(),
        addresses: ctx.address_ids(),
        ops: ctx.rec.take(),
        wakes: ctx.wakes_seen(),
    };
    let anomalies = verify(&history);
    Ok(report(config.seed, history, anomalies, duration))
}

fn report(seed: u64, history: History, anomalies: Vec<Anomaly>, duration: Duration) -> Report {
    let mut by_kind: BTreeMap<&'static str, BTreeMap<String, u64>> = BTreeMap::new();
    let mut consumers = std::collections::BTreeSet::new();
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    for op in &history.ops {
        *by_kind
            .entry(op.kind.name())
            .or_default()
            .entry(op.outcome.label())
            .or_default() += 1;
        if let OpKind::Poll { consumer, .. } = op.kind {
            consumers.insert(consumer);
        }
        if let (Phase::Final, OpKind::Inspect, Some(a)) = (op.phase, &op.kind, op.address) {
            if let Some(ls) = op.outcome.body()["usage"]["last_sequence"].as_u64() {
                last.insert(a, ls);
            }
        }
    }
    Report {
        seed,
        ops: history.ops.len() as u64,
        anomalies,
        duration,
        addresses: history.addresses.len(),
        events: last.values().sum(),
        consumers: consumers.len(),
        by_kind,
        history,
    }
}
