//! What both systems are measured with, in the same shapes: latency histograms and tallies,
//! the timed throughput phase, the delay phase's figures and shape, the idle measurement.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::{Config, Delay, Idle, Throughput};
use crate::procstat::{rss_mb, CpuMeter};

fn histogram() -> Histogram<u64> {
    // 1 µs .. 120 s at 3 significant digits; `new_with_bounds` only fails on bad bounds.
    Histogram::new_with_bounds(1, 120_000_000, 3).unwrap_or_else(|_| {
        Histogram::new(3).unwrap_or_else(|e| panic!("hdrhistogram refused 3 digits: {e}"))
    })
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return f64::NAN;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

/// What one agent of a throughput phase saw.
pub(super) struct Tally {
    pub(super) hist: Histogram<u64>,
    pub(super) ok: u64,
    pub(super) conflicts: u64,
    pub(super) errors: Vec<String>,
}

impl Tally {
    pub(super) fn new() -> Self {
        Self {
            hist: histogram(),
            ok: 0,
            conflicts: 0,
            errors: Vec::new(),
        }
    }

    pub(super) fn time(&mut self, since: Instant) {
        self.hist
            .saturating_record(since.elapsed().as_micros().max(1) as u64);
    }

    pub(super) fn error(&mut self, what: String) {
        if self.errors.len() < 3 {
            self.errors.push(what);
        }
    }

    pub(super) fn merge(&mut self, other: Tally) {
        let _ = self.hist.add(&other.hist);
        self.ok += other.ok;
        self.conflicts += other.conflicts;
        for e in other.errors {
            self.error(e);
        }
    }
}

async fn gather(handles: Vec<tokio::task::JoinHandle<Tally>>) -> Tally {
    let mut all = Tally::new();
    for h in handles {
        match h.await {
            Ok(t) => all.merge(t),
            Err(e) => all.error(format!("an agent task failed: {e}")),
        }
    }
    all
}

fn throughput(t: &Tally, wall: Duration, cpu: &CpuMeter) -> Throughput {
    Throughput {
        per_s: t.ok as f64 / wall.as_secs_f64(),
        p50_ms: ms(&t.hist, 0.5),
        p99_ms: ms(&t.hist, 0.99),
        max_ms: if t.hist.is_empty() {
            f64::NAN
        } else {
            t.hist.max() as f64 / 1000.0
        },
        cpu_pct: cpu.percent(),
    }
}

/// One throughput phase: `agents` tasks, each made by `agent(i, deadline)`, run until the
/// phase's deadline. Returns the phase's throughput, with the server's CPU over the phase, and
/// its CAS conflicts per second; the agents' first errors go to `errors`.
pub(super) async fn phase<F, Fut>(
    cfg: &Config, pid: u32, agents: usize, errors: &mut Vec<String>, agent: F,
) -> (Throughput, f64)
where
    F: Fn(usize, Instant) -> Fut,
    Fut: std::future::Future<Output = Tally> + Send + 'static,
{
    let deadline = Instant::now() + cfg.phase;
    let cpu = CpuMeter::start(pid);
    let started = Instant::now();
    let handles = (0..agents)
        .map(|i| tokio::spawn(agent(i, deadline)))
        .collect();
    let t = gather(handles).await;
    let wall = started.elapsed();
    errors.extend(t.errors.iter().cloned());
    (
        throughput(&t, wall, &cpu),
        t.conflicts as f64 / wall.as_secs_f64(),
    )
}

/// What the delay phase's consumers saw: event (or key) → the moment it reached them.
type Seen = HashMap<String, Instant>;

/// Waits for the delay phase's consumers (`who`: each stops at the stop event) and measures
/// the delay of every event in `sent` from what they saw; problems go to `errors`.
pub(super) async fn delay_result(
    consumers: Vec<tokio::task::JoinHandle<Result<Seen, String>>>, sent: &Seen, who: &str,
    errors: &mut Vec<String>,
) -> Delay {
    let mut seen = HashMap::new();
    for c in consumers {
        match tokio::time::timeout(Duration::from_secs(60), c).await {
            Ok(Ok(Ok(s))) => seen.extend(s),
            Ok(Ok(Err(e))) => errors.push(e),
            Ok(Err(e)) => errors.push(format!("delay {who}: {e}")),
            Err(_) => errors.push(format!("delay {who}: no stop event within 60 s")),
        }
    }
    let (d, missing) = delay_figures(sent, &seen);
    if missing > 0 {
        errors.push(format!("delay: {missing} events never reached a {who}"));
    }
    d
}

fn delay_figures(sent: &HashMap<String, Instant>, seen: &HashMap<String, Instant>) -> (Delay, u64) {
    let mut h = histogram();
    let mut missing = 0;
    for (id, at) in sent {
        match seen.get(id) {
            Some(got) => {
                h.saturating_record(got.saturating_duration_since(*at).as_micros().max(1) as u64)
            }
            None => missing += 1,
        }
    }
    (
        Delay {
            p50_ms: ms(&h, 0.5),
            p99_ms: ms(&h, 0.99),
            max_ms: if h.is_empty() {
                f64::NAN
            } else {
                h.max() as f64 / 1000.0
            },
            samples: h.len(),
        },
        missing,
    )
}

/// About 1 KB of JSON.
pub(super) fn kilobyte() -> Value {
    json!({"pad": "x".repeat(1000)})
}

pub(super) fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

pub(super) const DELAY_FEEDS: usize = 8;

/// Deliveries per second in the delay phase (the consumers are waiting, not saturated).
pub(super) const DELAY_GAP: Duration = Duration::from_millis(4);

/// Starts `f` for every item, 500 at a time, so the listen backlog never overflows.
pub(super) async fn start_in_batches<T, F, Fut>(
    items: Vec<T>, f: F,
) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let mut handles = Vec::with_capacity(items.len());
    for (n, item) in items.into_iter().enumerate() {
        let fut = f(item);
        handles.push(tokio::spawn(async move {
            let _ = fut.await;
        }));
        if n % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    handles
}

/// Waits for the held requests to settle, then samples the server's RSS and its CPU over 5 s.
pub(super) async fn measure_idle(
    pid: u32, held: &[tokio::task::JoinHandle<()>], established: Option<&AtomicUsize>,
) -> Idle {
    let settle = Instant::now() + Duration::from_secs(20);
    // etcd: until every watch has been created; agentaddress: a fixed 3 s.
    match established {
        Some(n) => {
            while n.load(Ordering::Relaxed) < held.len() && Instant::now() < settle {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        None => tokio::time::sleep(Duration::from_secs(3)).await,
    }
    let cpu = CpuMeter::start(pid);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu_pct = cpu.percent();
    let rss = rss_mb(pid).0;
    let open = held.iter().filter(|h| !h.is_finished()).count();
    let open = match established {
        Some(n) => open.min(n.load(Ordering::Relaxed)),
        None => open,
    };
    for h in held {
        h.abort();
    }
    Idle {
        held: open,
        rss_mb: rss,
        cpu_pct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_is_measured_from_the_2xx_and_missing_events_are_counted() {
        let t0 = Instant::now();
        let sent = HashMap::from([
            ("a".to_owned(), t0),
            ("b".to_owned(), t0),
            ("c".to_owned(), t0),
        ]);
        let seen = HashMap::from([
            ("a".to_owned(), t0 + Duration::from_millis(2)),
            ("b".to_owned(), t0 + Duration::from_millis(40)),
        ]);
        let (d, missing) = delay_figures(&sent, &seen);
        assert_eq!(missing, 1);
        assert_eq!(d.samples, 2);
        assert!((d.p50_ms - 2.0).abs() < 0.01, "{d:?}");
        assert!((d.max_ms - 40.0).abs() < 0.05, "{d:?}");
    }
}
