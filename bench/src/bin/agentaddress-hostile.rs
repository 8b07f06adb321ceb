//! What hostile clients cost `agentaddress serve` (docs/PERFORMANCE.md, "Hostile clients"),
//! each figure beside its anchor from the same run:
//! - **slowloris**: a normal client's request latency (a delivery, a feed read, a health
//!   check, one after another on a keep-alive connection) with 1,000 slowloris connections
//!   open — each sends a request head one header line every 2 s and is reopened when the
//!   server closes it — against the same client on an otherwise idle server;
//! - **slow readers**: the server's peak RSS while 100 clients that read slowly (a 4 KiB
//!   receive buffer) each fetch a 4 MB page, with the page budget as shipped and with it out
//!   of the way (`--page-memory-mib 65536`).
//!
//! `agentaddress-hostile --agentaddress target/release/agentaddress [--seconds S]`
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::process::{Child, Command};
use tokio::time::Instant;

#[derive(Parser, Debug)]
struct Args {
    /// The `agentaddress` binary (a release build).
    #[arg(long)]
    agentaddress: PathBuf,
    /// Seconds of each latency phase.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Slowloris connections held open.
    #[arg(long, default_value_t = 1000)]
    slowloris: usize,
    /// Slow readers of a 4 MB page.
    #[arg(long, default_value_t = 100)]
    readers: usize,
}

struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

async fn start(bin: &Path, extra: &[&str]) -> Result<Server, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let mut child = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("bench.db"))
        .args(["--polls-per-minute", "1000000000"])
        .args(extra)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .map_err(|e| format!("stdout: {e}"))?;
    let addr = line
        .trim()
        .strip_prefix("agentaddress listening on http://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("unexpected first line {line:?}"))?;
    Ok(Server {
        child,
        addr,
        _dir: dir,
    })
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

struct Addr {
    token: String,
    inbox: String,
    events: String,
}

async fn create(http: &reqwest::Client, base: &str) -> Result<Addr, String> {
    let created: Value = http
        .post(format!("{base}/api/v1/addresses"))
        .json(&json!({"name": "hostile bench"}))
        .send()
        .await
        .map_err(|e| format!("create: {e}"))?
        .json()
        .await
        .map_err(|e| format!("create: {e}"))?;
    let s = |p: &str| {
        created
            .pointer(p)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("create answer lacks {p}: {created}"))
    };
    Ok(Addr {
        token: s("/credentials/read_token")?,
        inbox: s("/endpoints/inbox_url")?,
        events: s("/endpoints/events_url")?,
    })
}

/// The normal client: deliver, read the feed, health check, in turn, for `seconds`.
async fn normal_client(base: &str, seconds: u64) -> Result<Histogram<u64>, String> {
    let http = reqwest::Client::new();
    let a = create(&http, base).await?;
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let started = Instant::now();
        let status = match n % 3 {
            0 => http
                .post(&a.inbox)
                .json(&json!({"type": "bench", "data": {"n": n}}))
                .send()
                .await
                .map(|r| r.status()),
            1 => http
                .get(format!(
                    "{}?after={}&limit=10",
                    a.events,
                    n.saturating_sub(10)
                ))
                .bearer_auth(&a.token)
                .send()
                .await
                .map(|r| r.status()),
            _ => http
                .get(format!("{base}/healthz"))
                .send()
                .await
                .map(|r| r.status()),
        }
        .map_err(|e| format!("a normal request failed: {e}"))?;
        if !status.is_success() {
            return Err(format!("a normal request got {status}"));
        }
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        hist.record(micros.max(1)).map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(hist)
}

async fn connect_from(to: SocketAddr, from: [u8; 4], rcvbuf: Option<u32>) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::from((from, 0))).ok()?;
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size).ok()?;
    }
    socket.connect(to).await.ok()
}

/// Holds `count` slowloris connections open until `stop`; returns how many were opened.
async fn slowloris(to: SocketAddr, count: usize, stop: Instant) -> usize {
    let mut socks: Vec<Option<TcpStream>> = Vec::with_capacity(count);
    let mut opened = 0usize;
    let from = |i: usize| [127, 0, 9, 1 + (i % 8) as u8];
    for i in 0..count {
        let s = connect_from(to, from(i), None).await;
        opened += usize::from(s.is_some());
        socks.push(s);
    }
    let mut round = 0u64;
    while Instant::now() < stop {
        for (i, slot) in socks.iter_mut().enumerate() {
            let line = match slot {
                Some(_) if round == 0 => "GET /healthz HTTP/1.1\r\n".to_owned(),
                Some(_) => format!("X-Loris-{round}: 1\r\n"),
                None => String::new(),
            };
            let alive = match slot.as_mut() {
                Some(s) => s.write_all(line.as_bytes()).await.is_ok(),
                None => false,
            };
            if !alive {
                // Closed by the server's header timeout: open another, as an attacker would.
                *slot = connect_from(to, from(i), None).await;
                if let Some(s) = slot.as_mut() {
                    opened += 1;
                    let _ = s.write_all(b"GET /healthz HTTP/1.1\r\n").await;
                }
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    opened
}

fn line(name: &str, h: &Histogram<u64>) -> String {
    format!(
        "{name}: {} requests, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0
    )
}

/// Peak RSS of a server while `readers` slow readers each fetch a 4 MB page.
async fn slow_readers(bin: &Path, readers: usize, extra: &[&str]) -> Result<(f64, f64), String> {
    let mut server = start(bin, extra).await?;
    let pid = server.child.id().ok_or("no pid")?;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    let a = create(&http, &base).await?;
    let pad = "y".repeat(250_000);
    for i in 0..16 {
        let status = http
            .post(&a.inbox)
            .json(&json!({"i": i, "pad": pad}))
            .send()
            .await
            .map_err(|e| format!("deliver: {e}"))?
            .status();
        if !status.is_success() {
            return Err(format!("deliver: {status}"));
        }
    }
    let before = rss_mb(pid);
    let path = a
        .events
        .strip_prefix(&base)
        .ok_or("events_url is not on the server")?;
    let request = format!(
        "GET {path}?after=0 HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {}\r\n\r\n",
        a.token
    );
    let mut socks = Vec::new();
    for _ in 0..readers {
        let mut s = connect_from(server.addr, [127, 0, 0, 1], Some(4096))
            .await
            .ok_or("cannot connect a reader")?;
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        socks.push(s);
    }
    let mut peak = before;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        peak = peak.max(rss_mb(pid));
    }
    // Drain them, so the figure is of readers that do finish.
    for mut s in socks {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
        }
    }
    let _ = server.child.kill().await;
    Ok((before, peak))
}

async fn run(args: Args) -> Result<(), String> {
    println!(
        "hostile: {} s latency phases, {} slowloris connections, {} slow readers",
        args.seconds, args.slowloris, args.readers
    );
    let server = start(&args.agentaddress, &[]).await?;
    let base = format!("http://{}", server.addr);
    let quiet = normal_client(&base, args.seconds).await?;
    println!("{}", line("normal client, idle server", &quiet));
    let stop = Instant::now() + Duration::from_secs(args.seconds + 30);
    let loris = tokio::spawn(slowloris(server.addr, args.slowloris, stop));
    // Let the slowloris connections open and start dripping.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let busy = normal_client(&base, args.seconds).await?;
    println!(
        "{}",
        line(
            &format!("normal client, {} slowloris connections", args.slowloris),
            &busy
        )
    );
    loris.abort();
    let p99 = |h: &Histogram<u64>| h.value_at_quantile(0.99) as f64 / 1000.0;
    println!(
        "slowloris: p99 {:.2} ms against {:.2} ms idle (ratio {:.2})",
        p99(&busy),
        p99(&quiet),
        p99(&busy) / p99(&quiet).max(0.001)
    );
    drop(server);

    let (before, with_budget) = slow_readers(&args.agentaddress, args.readers, &[]).await?;
    println!(
        "{} slow readers of 4 MB pages, page budget as shipped (64 MiB): RSS {before:.1} MB before, peak {with_budget:.1} MB",
        args.readers
    );
    let (before_off, without) = slow_readers(
        &args.agentaddress,
        args.readers,
        &["--page-memory-mib", "65536"],
    )
    .await?;
    println!(
        "{} slow readers of 4 MB pages, budget out of the way: RSS {before_off:.1} MB before, peak {without:.1} MB",
        args.readers
    );
    println!(
        "summary: slowloris_p99_ms={:.2} idle_p99_ms={:.2} slow_readers_rss_mb={with_budget:.1} slow_readers_rss_mb_unbounded={without:.1} ratio_rss={:.2}",
        p99(&busy),
        p99(&quiet),
        with_budget / without.max(0.001)
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentaddress-hostile: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
