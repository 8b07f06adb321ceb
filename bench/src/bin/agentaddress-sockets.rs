//! What idle wake-up sockets (`GET /api/v1/ws`, docs/API.md §17) cost `agentaddress serve`
//! (docs/PERFORMANCE.md, "Wake-up sockets"), measured as the event streams of
//! `agentaddress-streams` are:
//! - **at rest**: 10,000 addresses, one socket subscribed to each (a connection each), opened
//!   in batches of 500; after 3 s the server's RSS, and its CPU over 16 s, from `/proc/<pid>`;
//! - **notify latency**: then one producer delivers to the sockets' addresses round-robin at
//!   250/s; the delay of a sample is the moment its `notify` frame arrives minus the moment the
//!   producer got its 2xx (HdrHistogram, µs).
//!
//! `agentaddress-sockets --agentaddress target/release/agentaddress [--sockets 10000]
//! [--samples 2000]`
//!
//! `--against URL` measures a running deployment instead (the local Lambda stack:
//! `scripts/lambda-local --prebuilt-workspace`, then `--against http://127.0.0.1:9000
//! --sockets 20`): the sockets at the addresses' `endpoints.ws_url`, notify latency only (the
//! sockets are held by the WebSocket API, not by a process of ours).
#![forbid(unsafe_code)]

#[path = "../procstat.rs"]
mod procstat;
#[path = "../waiters.rs"]
mod waiters;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

#[derive(Parser, Debug)]
struct Args {
    /// The `agentaddress` binary (a release build).
    #[arg(long, required_unless_present = "against", conflicts_with = "against")]
    agentaddress: Option<PathBuf>,
    /// A running deployment's base URL: measure its sockets' notify latency only.
    #[arg(long, value_name = "URL")]
    against: Option<String>,
    /// Sockets held open, one per address.
    #[arg(long, default_value_t = 10_000)]
    sockets: usize,
    /// Deliveries whose notify latency is measured (250 a second).
    #[arg(long, default_value_t = 2_000)]
    samples: usize,
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let (mut server, base, pid) = match (&args.agentaddress, &args.against) {
        (_, Some(url)) => (None, url.trim_end_matches('/').to_owned(), None),
        (Some(bin), None) => {
            let (server, base) = waiters::start(bin, &dir.path().join("bench.db")).await?;
            let pid = server.id().ok_or("no server pid")?;
            (Some(server), base, Some(pid))
        }
        (None, None) => return Err("--agentaddress or --against".into()),
    };
    println!("sockets: agentaddress at {base} (pid {pid:?})");
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("client: {e}"))?;

    let started = Instant::now();
    let addresses = waiters::create_addresses(&http, &base, args.sockets).await?;
    println!(
        "sockets: {} addresses in {:.1?}",
        addresses.len(),
        started.elapsed()
    );

    // Sockets: each subscribes to its address and reports every notify's arrival.
    // The socket's URL, as the addresses' endpoints give it.
    let first = addresses.first().ok_or("no address")?;
    let details: Value = http
        .get(&first.root)
        .bearer_auth(&first.token)
        .send()
        .await
        .map_err(|e| format!("GET root: {e}"))?
        .json()
        .await
        .map_err(|e| format!("GET root: {e}"))?;
    let ws_url = details["endpoints"]["ws_url"]
        .as_str()
        .ok_or_else(|| format!("no endpoints.ws_url: {details}"))?
        .to_owned();
    let open = Arc::new(AtomicUsize::new(0));
    let (arrivals_tx, mut arrivals) = mpsc::unbounded_channel::<(usize, Instant)>();
    let mut tasks = Vec::with_capacity(addresses.len());
    for (i, a) in addresses.iter().enumerate() {
        let url = ws_url.clone();
        let subscribe =
            json!({"action": "subscribe", "address_id": a.id, "read_token": a.token}).to_string();
        let open = Arc::clone(&open);
        let tx = arrivals_tx.clone();
        tasks.push(tokio::spawn(async move {
            let Ok((mut ws, _)) = tokio_tungstenite::connect_async(url).await else {
                return;
            };
            if ws.send(Message::Text(subscribe.into())).await.is_err() {
                return;
            }
            let mut counted = false;
            while let Some(Ok(frame)) = ws.next().await {
                let at = Instant::now();
                let Message::Text(t) = frame else { continue };
                let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                match v["type"].as_str() {
                    Some("subscribed") if !counted => {
                        counted = true;
                        open.fetch_add(1, Ordering::Relaxed);
                    }
                    Some("notify") => {
                        let _ = tx.send((i, at));
                    }
                    _ => {}
                }
            }
            if counted {
                open.fetch_sub(1, Ordering::Relaxed);
            }
        }));
        if pid.is_none() {
            // One $connect and one subscribe at a time or so: the local stack's Invoke API
            // (cargo lambda) fails requests past its few function instances.
            tokio::time::sleep(Duration::from_millis(50)).await;
        } else if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    let settle = Instant::now() + Duration::from_secs(60);
    while open.load(Ordering::Relaxed) < addresses.len() && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss, cpu_pct) = match pid {
        Some(pid) => {
            let cpu = procstat::CpuMeter::start(pid);
            tokio::time::sleep(Duration::from_secs(16)).await;
            let cpu_pct = cpu.percent();
            (procstat::rss_mb(pid).0, cpu_pct)
        }
        None => (0.0, 0.0),
    };
    let held = open.load(Ordering::Relaxed);
    println!(
        "sockets: at rest (a connection each): {held} subscribed, server RSS {rss:.1} MB, CPU {cpu_pct:.1} % over 16 s (0: not ours to measure)"
    );

    // Delivery delay: one producer, round-robin over the addresses, 250/s.
    let waiters::Delays {
        histogram: h,
        missing,
        errors,
    } = waiters::delivery_delays(
        &addresses,
        args.samples,
        "bench.socket",
        &mut arrivals,
        // On the Lambda stack the notify is posted before the delivery is answered.
        if pid.is_some() {
            waiters::Since::Answer
        } else {
            waiters::Since::Request
        },
    )
    .await?;
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "sockets: notify latency over {} samples: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {missing} missing, {errors} delivery errors",
        h.len(),
        ms(0.5),
        ms(0.99),
        h.max() as f64 / 1000.0
    );
    println!(
        "summary: sockets_open={held} sockets_rss_mb={rss:.1} sockets_cpu_pct={cpu_pct:.1} notify_p50_ms={:.2} notify_p99_ms={:.2}",
        ms(0.5),
        ms(0.99)
    );
    for t in &tasks {
        t.abort();
    }
    if let Some(server) = server.as_mut() {
        let _ = server.kill().await;
    }
    if held < addresses.len() || missing > 0 || errors > 0 {
        return Err(format!(
            "{held} of {} sockets subscribed, {missing} notifies missing, {errors} delivery errors",
            addresses.len()
        ));
    }
    Ok(())
}
