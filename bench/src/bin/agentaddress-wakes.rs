//! `agentaddress-wakes`: how fast a wake hook starts the next run (docs/API.md §19), against a
//! running deployment on this machine (`serve --allow-private-hooks`, or the local Lambda stack,
//! which allows private receivers).
//!
//! A receiver on 127.0.0.1 answers every wake 204 and notes when it came.
//! - **delay**: `--samples` deliveries, one at a time, each to one of a few addresses with a
//!   hook (no debounce); a sample is the time from the delivery's 202 to the receiver's request
//!   of the wake covering it.
//! - **throughput**: `--hooks` addresses with a hook each; one delivery to each, all at once
//!   (`--concurrency` in flight); wakes per second from the first delivery sent to the last wake
//!   received.
//!
//! Prints one line per phase (p50, p99, max; wakes/s).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::StatusCode;
use clap::Parser;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::sync::Notify;

#[derive(Debug, Parser)]
#[command(name = "agentaddress-wakes", version)]
struct Args {
    /// Base URL of the deployment.
    #[arg(long)]
    url: String,
    /// Delay samples (deliveries waited for one at a time).
    #[arg(long, default_value_t = 1_000)]
    samples: usize,
    /// Addresses with a hook in the throughput phase (one delivery each).
    #[arg(long, default_value_t = 1_000)]
    hooks: usize,
    /// Deliveries in flight at once in the throughput phase.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up on a wake after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

/// Wakes received: address id → the highest `to_sequence` and when it came.
#[derive(Default)]
struct Received {
    wakes: Mutex<HashMap<String, (u64, Instant)>>,
    count: std::sync::atomic::AtomicU64,
    changed: Notify,
}

impl Received {
    fn covered(&self, id: &str) -> Option<(u64, Instant)> {
        self.wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .copied()
    }
}

async fn receiver() -> Result<(Arc<Received>, String), String> {
    let received = Arc::new(Received::default());
    let r = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/wake",
        axum::routing::post(move |body: Bytes| {
            let r = Arc::clone(&r);
            async move {
                let at = Instant::now();
                let wake: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if let (Some(id), Some(to)) =
                    (wake["address_id"].as_str(), wake["to_sequence"].as_u64())
                {
                    let mut wakes = r.wakes.lock().unwrap_or_else(PoisonError::into_inner);
                    let entry = wakes.entry(id.to_owned()).or_insert((0, at));
                    if to > entry.0 {
                        *entry = (to, at);
                    }
                }
                r.count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                r.changed.notify_waiters();
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let url = format!(
        "http://{}/wake",
        listener.local_addr().map_err(|e| format!("{e}"))?
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((received, url))
}

struct Address {
    id: String,
    inbox: String,
}

/// Creates an address with a hook to `receiver` (waiting out 429s).
async fn create(http: &reqwest::Client, base: &str, receiver: &str) -> Result<Address, String> {
    loop {
        let r = http
            .post(format!("{base}/api/v1/addresses"))
            .json(&json!({"hooks": [{"url": receiver}]}))
            .send()
            .await
            .map_err(|e| format!("create: {e}"))?;
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        match status {
            201 => {
                return Ok(Address {
                    id: v["address"]["id"].as_str().unwrap_or_default().to_owned(),
                    inbox: v["endpoints"]["inbox_url"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                })
            }
            429 => {
                let wait = v["error"]["retry_after_seconds"].as_u64().unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait.max(1))).await;
            }
            s => return Err(format!("create answered {s}: {v}")),
        }
    }
}

/// Delivers one event; its sequence, and when the 202 came.
async fn deliver(http: &reqwest::Client, a: &Address) -> Result<(u64, Instant), String> {
    loop {
        let r = http
            .post(&a.inbox)
            .json(&json!({"type": "bench.wake"}))
            .send()
            .await
            .map_err(|e| format!("deliver: {e}"))?;
        let at = Instant::now();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        match status {
            202 => return Ok((v["event"]["sequence"].as_u64().unwrap_or(0), at)),
            429 | 503 => tokio::time::sleep(Duration::from_millis(200)).await,
            s => return Err(format!("deliver answered {s}: {v}")),
        }
    }
}

/// Waits until a wake of `a` covers `sequence`; when it came.
async fn woken(r: &Received, a: &Address, sequence: u64, timeout: Duration) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        let changed = r.changed.notified();
        if let Some((to, at)) = r.covered(&a.id) {
            if to >= sequence {
                return Some(at);
            }
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), changed).await;
    }
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let base = args.url.trim_end_matches('/').to_owned();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(40))
        .build()
        .map_err(|e| e.to_string())?;
    let timeout = Duration::from_secs(args.timeout);
    let (received, url) = receiver().await?;

    // Delay: one delivery at a time, over a few addresses.
    if args.samples > 0 {
        let mut addresses = Vec::new();
        for _ in 0..4 {
            addresses.push(create(&http, &base, &url).await?);
        }
        let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let mut lost = 0;
        for i in 0..args.samples {
            let a = &addresses[i % addresses.len()];
            let (sequence, accepted) = deliver(&http, a).await?;
            match woken(&received, a, sequence, timeout).await {
                Some(at) => {
                    let us = at.saturating_duration_since(accepted).as_micros();
                    h.record(u64::try_from(us).unwrap_or(u64::MAX).max(1))
                        .map_err(|e| e.to_string())?;
                }
                None => lost += 1,
            }
        }
        println!(
            "delay from a delivery's 202 to its wake: n = {}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {lost} not woken within {} s",
            h.len(),
            ms(&h, 0.5),
            ms(&h, 0.99),
            h.max() as f64 / 1000.0,
            args.timeout
        );
    }

    // Throughput: one delivery to each of `hooks` addresses, at once.
    if args.hooks > 0 {
        let made = futures::stream::iter(0..args.hooks)
            .map(|_| create(&http, &base, &url))
            .buffer_unordered(args.concurrency)
            .collect::<Vec<_>>()
            .await;
        let addresses = made.into_iter().collect::<Result<Vec<_>, _>>()?;
        let before = received.count.load(std::sync::atomic::Ordering::Relaxed);
        let start = Instant::now();
        let sequences = futures::stream::iter(addresses.iter())
            .map(|a| deliver(&http, a))
            .buffered(args.concurrency)
            .collect::<Vec<_>>()
            .await;
        let sent = start.elapsed();
        let mut last = start;
        let mut lost = 0;
        for (a, delivered) in addresses.iter().zip(sequences) {
            let (sequence, _) = delivered?;
            match woken(&received, a, sequence, timeout).await {
                Some(at) => last = last.max(at),
                None => lost += 1,
            }
        }
        let took = last.saturating_duration_since(start);
        let wakes = received.count.load(std::sync::atomic::Ordering::Relaxed) - before;
        println!(
            "throughput: {} hooks, {wakes} wakes in {:.2} s ({:.0} wakes/s; the deliveries took {:.2} s), {lost} not woken within {} s",
            addresses.len(),
            took.as_secs_f64(),
            wakes as f64 / took.as_secs_f64().max(0.001),
            sent.as_secs_f64(),
            args.timeout
        );
    }
    Ok(())
}
