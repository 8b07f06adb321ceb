//! What open event streams (`GET {root}/events/stream`, docs/API.md §14) cost `agentaddress
//! serve` (docs/PERFORMANCE.md, "Event streams"), measured as the idle long polls of
//! `agentaddress-bench` are:
//! - **at rest**: 10,000 addresses, one stream open on each (HTTP/1.1, a connection each; with
//!   `--http2`, 100 h2c connections of 100 streams), started in batches of 500; after 3 s the
//!   server's RSS, and its CPU over 16 s — one heartbeat interval (15 s) and a little more, so
//!   that every stream's heartbeat comment is sent within it (the heartbeats received are
//!   counted) — from `/proc/<pid>`;
//! - **delivery delay**: then one producer delivers to the streams' addresses round-robin at
//!   250/s, each delivery to an address with an open stream; the delay of a sample is the
//!   moment its event's `id:` line arrives on the stream minus the moment the producer got
//!   its 2xx (HdrHistogram, µs).
//!
//! `agentaddress-streams --agentaddress target/release/agentaddress [--streams 10000]
//! [--samples 2000] [--http2]`
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
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Parser, Debug)]
struct Args {
    /// The `agentaddress` binary (a release build).
    #[arg(long)]
    agentaddress: PathBuf,
    /// Streams held open, one per address.
    #[arg(long, default_value_t = 10_000)]
    streams: usize,
    /// Deliveries whose delay is measured (250 a second).
    #[arg(long, default_value_t = 2_000)]
    samples: usize,
    /// Streams over 100 HTTP/2 connections (h2c) instead of a connection each.
    #[arg(long)]
    http2: bool,
}

const HTTP2_CONNECTIONS: usize = 100;

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let (mut server, base) =
        waiters::start(&args.agentaddress, &dir.path().join("bench.db")).await?;
    let pid = server.id().ok_or("no server pid")?;
    println!("streams: agentaddress at {base} (pid {pid})");
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("client: {e}"))?;

    let started = Instant::now();
    let addresses = waiters::create_addresses(&http, &base, args.streams).await?;
    println!(
        "streams: {} addresses in {:.1?}",
        addresses.len(),
        started.elapsed()
    );

    // Streams: each reports when its answer's head arrived, and every event id with the
    // moment its line arrived.
    let clients: Vec<reqwest::Client> = if args.http2 {
        (0..HTTP2_CONNECTIONS)
            .map(|_| {
                reqwest::Client::builder()
                    .http2_prior_knowledge()
                    .tcp_nodelay(true)
                    .build()
                    .map_err(|e| format!("h2 client: {e}"))
            })
            .collect::<Result<_, _>>()?
    } else {
        vec![reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(0)
            .build()
            .map_err(|e| format!("client: {e}"))?]
    };
    let open = Arc::new(AtomicUsize::new(0));
    let heartbeats = Arc::new(AtomicUsize::new(0));
    let (arrivals_tx, mut arrivals) = mpsc::unbounded_channel::<(usize, Instant)>();
    let mut tasks = Vec::with_capacity(addresses.len());
    for (i, a) in addresses.iter().enumerate() {
        let req = clients[i % clients.len()]
            .get(format!("{}/events/stream", a.root))
            .bearer_auth(&a.token);
        let open = Arc::clone(&open);
        let heartbeats = Arc::clone(&heartbeats);
        let tx = arrivals_tx.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(mut resp) = req.send().await else {
                return;
            };
            if resp.status() != 200 {
                return;
            }
            open.fetch_add(1, Ordering::Relaxed);
            while let Ok(Some(chunk)) = resp.chunk().await {
                let at = Instant::now();
                for line in chunk.split(|b| *b == b'\n') {
                    if line.starts_with(b"id: ") {
                        let _ = tx.send((i, at));
                    } else if line.starts_with(b":") {
                        heartbeats.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            open.fetch_sub(1, Ordering::Relaxed);
        }));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    let settle = Instant::now() + Duration::from_secs(60);
    while open.load(Ordering::Relaxed) < addresses.len() && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let beats = heartbeats.load(Ordering::Relaxed);
    let cpu = procstat::CpuMeter::start(pid);
    tokio::time::sleep(Duration::from_secs(16)).await;
    let cpu_pct = cpu.percent();
    let beats = heartbeats.load(Ordering::Relaxed) - beats;
    let (rss, _) = procstat::rss_mb(pid);
    let held = open.load(Ordering::Relaxed);
    let how = if args.http2 {
        format!("HTTP/2, {HTTP2_CONNECTIONS} connections")
    } else {
        "HTTP/1.1, a connection each".to_owned()
    };
    println!(
        "streams: at rest ({how}): {held} open, server RSS {rss:.1} MB, CPU {cpu_pct:.1} % over 16 s ({beats} heartbeats received)"
    );

    // Delivery delay: one producer, round-robin over the addresses, 250/s.
    let waiters::Delays {
        histogram: h,
        missing,
        errors,
    } = waiters::delivery_delays(
        &addresses,
        args.samples,
        "bench.stream",
        &mut arrivals,
        waiters::Since::Answer,
    )
    .await?;
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "streams: delivery delay over {} samples: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {missing} missing, {errors} delivery errors",
        h.len(),
        ms(0.5),
        ms(0.99),
        h.max() as f64 / 1000.0
    );
    println!(
        "summary: streams_open={held} streams_rss_mb={rss:.1} streams_cpu_pct={cpu_pct:.1} stream_delay_p50_ms={:.2} stream_delay_p99_ms={:.2}",
        ms(0.5),
        ms(0.99)
    );
    for t in &tasks {
        t.abort();
    }
    let _ = server.kill().await;
    if held < addresses.len() || missing > 0 || errors > 0 {
        return Err(format!(
            "{held} of {} streams open, {missing} events missing, {errors} delivery errors",
            addresses.len()
        ));
    }
    Ok(())
}
