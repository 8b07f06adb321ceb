//! A small load generator over HTTP: inbox delivery throughput with C concurrent senders, and
//! the delay from an inbox 2xx to a waiting long poll returning the event.
//!
//! `agentaddress-loadgen --url http://127.0.0.1:8080 [--clients 16] [--seconds 10] [--samples 40]`
//!
//! Latencies go to HdrHistograms (microseconds, 3 significant digits); the figures are printed
//! in milliseconds.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use agentaddress_blackbox::Client;
use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::json;

/// A small load generator over HTTP: inbox delivery throughput with C concurrent senders, and
/// the delay from an inbox 2xx to a waiting long poll returning the event. Prints one line
/// each: `deliveries: N in S s = R/s with C senders; latency p50 … ms p99 … ms max … ms` and
/// `long-poll wake-up after delivery 2xx: n=N p50 … ms p99 … ms max … ms`.
#[derive(Debug, Parser)]
#[command(name = "agentaddress-loadgen", version)]
struct Args {
    /// Base URL of the deployment.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Concurrent senders of the throughput phase, each to its own address.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Seconds of the throughput phase (a sender also stops after 990 deliveries: the feed
    /// quota is per address).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Long-poll wake-up samples (a fresh address every 25).
    #[arg(long, default_value_t = 40)]
    samples: usize,
}

/// 1 µs .. 120 s at 3 significant digits (longer values are clamped to 120 s).
fn histogram() -> Histogram<u64> {
    // `new_with_bounds` only fails on bad bounds, and these are good.
    Histogram::new_with_bounds(1, 120_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).expect("hdrhistogram refused 3 digits"))
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1));
}

/// The value at quantile `q` in milliseconds (`NaN` when nothing was recorded).
fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return f64::NAN;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

#[tokio::main]
async fn main() {
    let Args {
        url,
        clients,
        seconds,
        samples,
    } = Args::parse();
    let c = Client::new(&url);

    // Throughput: each sender has its own address (the feed quota is per address).
    let payload = json!({"type": "bench", "data": {"pad": "x".repeat(1000)}});
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut senders = Vec::new();
    for _ in 0..clients {
        let a = c.new_address().await;
        let c = c.clone();
        let payload = payload.clone();
        senders.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline && lat.len() < 990 {
                let t = Instant::now();
                let r = c.deliver(&a, &payload, None).await;
                assert_eq!(r.status, 202, "{}", r.text);
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let started = Instant::now();
    let mut lat = histogram();
    for s in senders {
        // A sender that panicked (its assertion is on stderr) adds nothing.
        for d in s.await.unwrap_or_default() {
            record(&mut lat, d);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "deliveries: {} in {:.2} s = {:.0}/s with {clients} senders; latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        lat.len(),
        elapsed,
        lat.len() as f64 / elapsed,
        ms(&lat, 0.5),
        ms(&lat, 0.99),
        ms(&lat, 1.0)
    );

    // Wake-up delay: a poller waits on an empty tail; we deliver and time inbox 2xx → poll answer.
    let mut delays = histogram();
    let mut a = c.new_address().await;
    let mut polls_on_address = 0;
    let mut after = 0u64;
    for _ in 0..samples {
        if polls_on_address == 25 {
            a = c.new_address().await;
            polls_on_address = 0;
            after = 0;
        }
        polls_on_address += 1;
        let poller = {
            let c = c.clone();
            let a = a.clone();
            tokio::spawn(async move {
                let r = c.events(&a, &format!("after={after}&wait=20")).await;
                (r, Instant::now())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = c.deliver(&a, &json!({"type": "wake"}), None).await;
        let acked = Instant::now();
        assert_eq!(r.status, 202, "{}", r.text);
        let (p, returned) = poller.await.expect("poller");
        assert_eq!(p.status, 200, "{}", p.text);
        after = p.json["next_cursor"].as_u64().unwrap_or(after);
        record(&mut delays, returned.saturating_duration_since(acked));
    }
    println!(
        "long-poll wake-up after delivery 2xx: n={} p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        delays.len(),
        ms(&delays, 0.5),
        ms(&delays, 0.99),
        ms(&delays, 1.0)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_flags_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn the_documented_invocations_parse() {
        let a = Args::try_parse_from(["agentaddress-loadgen"]).expect("defaults");
        assert_eq!(
            (a.url.as_str(), a.clients, a.seconds, a.samples),
            ("http://127.0.0.1:8080", 16, 10, 40)
        );
        let a = Args::try_parse_from([
            "agentaddress-loadgen",
            "--url",
            "http://127.0.0.1:9000",
            "--clients",
            "4",
            "--seconds=3",
            "--samples",
            "7",
        ])
        .expect("every flag");
        assert_eq!(
            (a.url.as_str(), a.clients, a.seconds, a.samples),
            ("http://127.0.0.1:9000", 4, 3, 7)
        );
    }

    #[test]
    fn a_mistyped_flag_or_value_is_an_error() {
        for argv in [
            &["agentaddress-loadgen", "--client", "4"][..],
            &["agentaddress-loadgen", "--clients", "four"][..],
            &["agentaddress-loadgen", "--seconds"][..],
            &["agentaddress-loadgen", "http://127.0.0.1:8080"][..],
        ] {
            let e = Args::try_parse_from(argv).expect_err("must not parse");
            assert_eq!(e.exit_code(), 2, "{argv:?}: {e}");
        }
    }

    #[test]
    fn percentiles_come_from_the_histogram_in_milliseconds() {
        let mut h = histogram();
        assert!(ms(&h, 0.5).is_nan());
        for i in 1..=100u64 {
            record(&mut h, Duration::from_millis(i));
        }
        assert_eq!(h.len(), 100);
        // 3 significant digits: within 0.1% of the exact figure.
        for (q, exact) in [(0.5, 50.0), (0.99, 99.0), (1.0, 100.0)] {
            let got = ms(&h, q);
            assert!((got - exact).abs() <= exact * 0.001, "q {q}: {got} ms");
        }
        // Sub-microsecond durations count as 1 µs; beyond the bounds they clamp, not panic.
        record(&mut h, Duration::from_nanos(10));
        record(&mut h, Duration::from_secs(1_000));
        assert_eq!(h.len(), 102);
    }
}
