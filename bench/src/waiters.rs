//! What `agentaddress-streams` and `agentaddress-sockets` share: starting `agentaddress
//! serve` for 10,000 waiters, creating their addresses, and the delivery phase — one producer
//! delivering round-robin at [`DELIVERIES_PER_S`], each delivery's delay measured to the moment
//! the waiter reports its arrival.

// Each bench binary includes this module and reads part of `Address`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub const DELIVERIES_PER_S: u64 = 250;

pub struct Address {
    pub id: String,
    pub root: String,
    pub token: String,
    pub inbox: String,
}

/// What the delivery phase measured: the delays (µs), deliveries whose arrival was never
/// reported, and deliveries that failed.
pub struct Delays {
    pub histogram: Histogram<u64>,
    pub missing: usize,
    pub errors: usize,
}

/// From when a sample's delay is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// The producer got its 2xx (serve: the wake-up follows the commit's answer).
    Answer,
    /// The producer sent the request (the Lambda stack: the appending function tells the
    /// sockets before it answers).
    Request,
}

/// Delivers `samples` events of `event_type` round-robin over `addresses` at
/// [`DELIVERIES_PER_S`]; `arrivals` reports (address index, moment) as the waiters see them.
pub async fn delivery_delays(
    addresses: &[Address], samples: usize, event_type: &str,
    arrivals: &mut mpsc::UnboundedReceiver<(usize, Instant)>, since: Since,
) -> Result<Delays, String> {
    let gap = Duration::from_micros(1_000_000 / DELIVERIES_PER_S);
    let mut sent: HashMap<usize, Instant> = HashMap::new();
    let mut seen: HashMap<usize, Instant> = HashMap::new();
    let mut errors = 0usize;
    let producer = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("client: {e}"))?;
    let samples = samples.min(addresses.len());
    let step = (addresses.len() / samples.max(1)).max(1);
    let mut next = Instant::now();
    for n in 0..samples {
        let i = (n * step) % addresses.len();
        tokio::time::sleep_until(next).await;
        next += gap;
        let started = Instant::now();
        let r = producer
            .post(&addresses[i].inbox)
            .json(&json!({"type": event_type, "data": {"n": n}}))
            .send()
            .await;
        match r {
            Ok(r) if r.status() == 202 => {
                sent.insert(
                    i,
                    match since {
                        Since::Answer => Instant::now(),
                        Since::Request => started,
                    },
                );
            }
            _ => errors += 1,
        }
        while let Ok((i, at)) = arrivals.try_recv() {
            seen.insert(i, at);
        }
    }
    let drain = Instant::now() + Duration::from_secs(5);
    while seen.len() < sent.len() && Instant::now() < drain {
        if let Ok(Some((i, at))) =
            tokio::time::timeout(Duration::from_millis(100), arrivals.recv()).await
        {
            seen.insert(i, at);
        }
    }
    let mut h = Histogram::<u64>::new(3).map_err(|e| format!("histogram: {e}"))?;
    let mut missing = 0;
    for (i, at) in &sent {
        match seen.get(i) {
            Some(arrived) => {
                let us = arrived.saturating_duration_since(*at).as_micros();
                h.record(u64::try_from(us).unwrap_or(u64::MAX).max(1))
                    .map_err(|e| format!("record: {e}"))?;
            }
            None => missing += 1,
        }
    }
    Ok(Delays {
        histogram: h,
        missing,
        errors,
    })
}

pub async fn start(agentaddress: &Path, db: &Path) -> Result<(Child, String), String> {
    let mut child = Command::new(agentaddress)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .env("AGENTADDRESS_SQLITE_SYNCHRONOUS", "full")
        .env("AGENTADDRESS_POLLS_PER_MINUTE", "1000000000")
        .env("AGENTADDRESS_CREATIONS_PER_MINUTE", "1000000000")
        // Every client connects from 127.0.0.1: no per-IP cap; the global cap is what the
        // descriptor limit allows.
        .env("AGENTADDRESS_MAX_CONNECTIONS", "1000000")
        .env("AGENTADDRESS_MAX_CONNECTIONS_PER_IP", "0")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", agentaddress.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .map_err(|_| "the server did not start within 30 s".to_owned())?
        .map_err(|e| format!("stdout: {e}"))?
        .ok_or("the server exited")?;
    let base = line
        .strip_prefix("agentaddress listening on ")
        .ok_or_else(|| format!("unexpected first line {line:?}"))?
        .trim()
        .to_owned();
    // Keep draining stdout so that the server never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, base))
}

pub async fn create_addresses(
    http: &reqwest::Client, base: &str, n: usize,
) -> Result<Vec<Address>, String> {
    let url = format!("{base}/api/v1/addresses");
    let results: Vec<Result<Address, String>> = futures::stream::iter(0..n)
        .map(|_| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let r = http
                    .post(&url)
                    .json(&json!({}))
                    .send()
                    .await
                    .map_err(|e| format!("create: {e}"))?;
                let status = r.status().as_u16();
                let b: Value = r.json().await.map_err(|e| format!("create: {e}"))?;
                if status != 201 {
                    return Err(format!("create address: {status} {b}"));
                }
                let s = |p: &str| {
                    b.pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                Ok(Address {
                    id: s("/address/id"),
                    root: s("/endpoints/events_url")
                        .strip_suffix("/events")
                        .unwrap_or_default()
                        .to_owned(),
                    token: s("/credentials/read_token"),
                    inbox: s("/endpoints/inbox_url"),
                })
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}
