//! A small load generator over HTTP: inbox delivery throughput with C concurrent senders, and
//! the delay from an inbox 2xx to a waiting long poll returning the event.
//!
//! `agentaddress-loadgen --url http://127.0.0.1:8080 [--clients 16] [--seconds 10] [--samples 40]`
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use agentaddress_blackbox::Client;
use serde_json::json;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let url = arg("--url", "http://127.0.0.1:8080");
    let clients: usize = arg("--clients", "16").parse().unwrap_or(16);
    let seconds: u64 = arg("--seconds", "10").parse().unwrap_or(10);
    let samples: usize = arg("--samples", "40").parse().unwrap_or(40);
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
    let mut lat = Vec::new();
    for s in senders {
        lat.extend(s.await.unwrap_or_default());
    }
    let elapsed = started.elapsed().as_secs_f64();
    lat.sort();
    println!(
        "deliveries: {} in {:.2} s = {:.0}/s with {clients} senders; latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        lat.len(),
        elapsed,
        lat.len() as f64 / elapsed,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );

    // Wake-up delay: a poller waits on an empty tail; we deliver and time inbox 2xx → poll answer.
    let mut delays = Vec::new();
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
        let (p, returned) = poller.await.unwrap_or_else(|e| panic!("poller: {e}"));
        assert_eq!(p.status, 200, "{}", p.text);
        after = p.json["next_cursor"].as_u64().unwrap_or(after);
        delays.push(returned.saturating_duration_since(acked));
    }
    delays.sort();
    println!(
        "long-poll wake-up after delivery 2xx: n={} p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        delays.len(),
        pct(&delays, 0.5),
        pct(&delays, 0.99),
        pct(&delays, 1.0)
    );
}
