//! What hostile clients cost `agentaddress serve` (docs/PERFORMANCE.md, "Hostile clients"),
//! each figure beside its anchor from the same run:
//! - **slowloris**: a normal client's request latency (a delivery, a feed read, a health
//!   check, one after another on a keep-alive connection) with 1,000 slowloris connections
//!   open — each sends a request head one header line every 2 s and is reopened when the
//!   server closes it — against the same client on an otherwise idle server;
//! - **slow readers**: the server's peak RSS while 100 clients that read slowly (a 4 KiB
//!   receive buffer) each fetch a 4 MB page, with the page budget as shipped and with it out
//!   of the way (`--page-memory-mib 65536 --page-memory-per-client-mib 65536`);
//! - **zero-window HTTP/2 streams**: the server's peak RSS while 400 HTTP/2 streams (4
//!   connections of 100) ask for pages of ~1 MB events and keep their flow-control window
//!   closed, and whether the server ends those connections;
//! - **slow event streams**: the server's peak RSS while 200 event streams read ~1 MB events
//!   4 KiB at a time;
//! - **stalled SMTP DATA**: how long a legitimate sender from a third IP waits for its `250`
//!   while 26 clients from two other IPs hold `DATA` open and send nothing.
//!
//! The last three run against `--agentaddress` and, when given, against `--anchor` (an older
//! build, e.g. of the commit before these defences) in the same run.
//!
//! `agentaddress-hostile --agentaddress target/release/agentaddress [--anchor OLD] [--seconds S]`
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
    /// Another `agentaddress` binary to run the memory and SMTP shapes against as the anchor.
    #[arg(long)]
    anchor: Option<PathBuf>,
    /// HTTP/2 streams with a closed window (100 per connection).
    #[arg(long, default_value_t = 400)]
    zero_window_streams: usize,
    /// Slow readers of event streams.
    #[arg(long, default_value_t = 200)]
    sse_readers: usize,
}

struct Server {
    child: Child,
    addr: SocketAddr,
    /// The SMTP door, when started with `--smtp-listen`.
    smtp: Option<SocketAddr>,
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
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .await
        .map_err(|e| format!("stdout: {e}"))?;
    let addr = line
        .trim()
        .strip_prefix("agentaddress listening on http://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("unexpected first line {line:?}"))?;
    let mut smtp = None;
    if extra.contains(&"--smtp-listen") {
        line.clear();
        stdout
            .read_line(&mut line)
            .await
            .map_err(|e| format!("stdout: {e}"))?;
        smtp = Some(
            line.trim()
                .strip_prefix("agentaddress smtp listening on ")
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| format!("unexpected second line {line:?}"))?,
        );
    }
    Ok(Server {
        child,
        addr,
        smtp,
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

/// Delivers `n` events of about 950 KB each to a new address of `base`.
async fn big_feed(base: &str, n: usize) -> Result<Addr, String> {
    let http = reqwest::Client::new();
    let a = create(&http, base).await?;
    let pad = "z".repeat(950_000);
    for i in 0..n {
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
    Ok(a)
}

/// The peak of `pid`'s RSS (MB) sampled every 100 ms for `span`.
async fn peak_rss(pid: u32, span: Duration) -> f64 {
    let until = Instant::now() + span;
    let mut peak = rss_mb(pid);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(rss_mb(pid));
    }
    peak
}

/// What a memory shape measured: RSS before, the peak during it, and (HTTP/2) how many of the
/// stalled connections the server ended within 60 s.
struct Memory {
    before: f64,
    peak: f64,
    /// 5 s after the clients are gone.
    after: f64,
    closed: Option<(usize, usize)>,
}

/// `streams` HTTP/2 streams (100 per connection) asking for a feed of ~1 MB events with a
/// flow-control window of 0, held for 8 s.
async fn zero_window(bin: &Path, streams: usize) -> Result<Memory, String> {
    let mut server = start(bin, &[]).await?;
    let pid = server.child.id().ok_or("no pid")?;
    let base = format!("http://{}", server.addr);
    let a = big_feed(&base, 24).await?;
    let before = rss_mb(pid);
    let uri = format!("{}?after=0", a.events);
    let mut held = Vec::new();
    let mut senders = Vec::new();
    let mut connections = Vec::new();
    for c in 0..streams.div_ceil(100) {
        let tcp = connect_from(server.addr, [127, 0, 0, 1], None)
            .await
            .ok_or("cannot connect")?;
        let (mut h2, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .map_err(|e| format!("h2 handshake: {e}"))?;
        connections.push(tokio::spawn(connection));
        for _ in 0..(streams - c * 100).min(100) {
            h2 = h2.ready().await.map_err(|e| format!("h2: {e}"))?;
            let request = http::Request::get(&uri)
                .header("authorization", format!("Bearer {}", a.token))
                .body(())
                .map_err(|e| format!("request: {e}"))?;
            let (answer, _) = h2
                .send_request(request, true)
                .map_err(|e| format!("h2 request: {e}"))?;
            held.push(answer);
        }
        senders.push(h2);
    }
    let peak = peak_rss(pid, Duration::from_secs(8)).await;
    let total = connections.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut closed = 0;
    for connection in connections {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, connection).await.is_ok() {
            closed += 1;
        }
    }
    drop((held, senders));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = rss_mb(pid);
    let _ = server.child.kill().await;
    Ok(Memory {
        before,
        peak,
        after,
        closed: Some((closed, total)),
    })
}

/// `readers` event streams over a feed of ~1 MB events, each reading 4 KiB every 100 ms
/// through a 4 KiB receive buffer, for 10 s.
async fn slow_streams(bin: &Path, readers: usize) -> Result<Memory, String> {
    let mut server = start(bin, &[]).await?;
    let pid = server.child.id().ok_or("no pid")?;
    let base = format!("http://{}", server.addr);
    let a = big_feed(&base, 12).await?;
    let before = rss_mb(pid);
    let path = a
        .events
        .strip_prefix(&base)
        .ok_or("events_url is not on the server")?;
    let request = format!(
        "GET {path}/stream?after=0 HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\
         Authorization: Bearer {}\r\n\r\n",
        a.token
    );
    let stop = Instant::now() + Duration::from_secs(10);
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let mut s = connect_from(server.addr, [127, 0, 0, 1], Some(4096))
            .await
            .ok_or("cannot connect a reader")?;
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        tasks.push(tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while Instant::now() < stop {
                match tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }));
    }
    let peak = peak_rss(pid, Duration::from_secs(10)).await;
    for t in tasks {
        let _ = t.await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = rss_mb(pid);
    let _ = server.child.kill().await;
    Ok(Memory {
        before,
        peak,
        after,
        closed: None,
    })
}

/// Milliseconds a legitimate sender from 127.0.0.4 waits for `250` to its message while 26
/// clients from 127.0.0.2 and 127.0.0.3 hold DATA open after a few bytes (`Err`: it was
/// refused, with the reply and when).
async fn stalled_data(bin: &Path) -> Result<Result<f64, String>, String> {
    let mut server = start(bin, &["--smtp-listen", "127.0.0.1:0"]).await?;
    let smtp = server.smtp.take().ok_or("no SMTP door")?;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{base}/api/v1/addresses"))
        .json(&json!({"name": "smtp bench"}))
        .send()
        .await
        .map_err(|e| format!("create: {e}"))?
        .json()
        .await
        .map_err(|e| format!("create: {e}"))?;
    let rcpt = created
        .pointer("/address/email")
        .and_then(Value::as_str)
        .ok_or("no email")?
        .to_owned();
    let mut stalled = Vec::new();
    for i in 0..26u8 {
        let from = [127, 0, 0, 2 + i % 2];
        let mut s = connect_from(smtp, from, None)
            .await
            .ok_or("cannot connect to SMTP")?;
        let script = format!("EHLO stall\r\nMAIL FROM:<s@x.test>\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n");
        let _ = s.write_all(script.as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = s.write_all(b"Subject: stall\r\n").await;
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut s = connect_from(smtp, [127, 0, 0, 4], None)
        .await
        .ok_or("cannot connect to SMTP")?;
    let started = Instant::now();
    let message = format!(
        "EHLO ok\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n\
         Subject: hello\r\n\r\nhi\r\n.\r\nQUIT\r\n"
    );
    s.write_all(message.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let outcome = loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(line) = text
            .lines()
            .find(|l| l.starts_with("250 2.0.0") || l.starts_with("452") || l.starts_with("421"))
        {
            break if line.starts_with("250") {
                Ok(started.elapsed().as_secs_f64() * 1000.0)
            } else {
                Err(format!(
                    "{line} after {:.1} s",
                    started.elapsed().as_secs_f64()
                ))
            };
        }
        match tokio::time::timeout(Duration::from_secs(120), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break Err(format!("no answer: {text:?}")),
        }
    };
    drop(stalled);
    let _ = server.child.kill().await;
    Ok(outcome)
}

fn memory_line(what: &str, label: &str, m: &Memory) -> String {
    let closed = m
        .closed
        .map(|(c, t)| format!(", {c} of {t} connections ended by the server"))
        .unwrap_or_default();
    format!(
        "{what} ({label}): RSS {:.1} MB before, peak {:.1} MB (+{:.1} MB), {:.1} MB 5 s after the clients left{closed}",
        m.before,
        m.peak,
        m.peak - m.before,
        m.after
    )
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
        &[
            "--page-memory-mib",
            "65536",
            "--page-memory-per-client-mib",
            "65536",
        ],
    )
    .await?;
    println!(
        "{} slow readers of 4 MB pages, budget out of the way: RSS {before_off:.1} MB before, peak {without:.1} MB",
        args.readers
    );
    let mut summary = format!(
        "summary: slowloris_p99_ms={:.2} idle_p99_ms={:.2} slow_readers_rss_mb={with_budget:.1} slow_readers_rss_mb_unbounded={without:.1} ratio_rss={:.2}",
        p99(&busy),
        p99(&quiet),
        with_budget / without.max(0.001)
    );
    let mut binaries = vec![("this build", args.agentaddress.clone())];
    if let Some(anchor) = &args.anchor {
        binaries.push(("anchor", anchor.clone()));
    }
    let mut growth = Vec::new();
    for (label, bin) in &binaries {
        let z = zero_window(bin, args.zero_window_streams).await?;
        println!(
            "{}",
            memory_line(
                &format!("{} zero-window HTTP/2 streams", args.zero_window_streams),
                label,
                &z
            )
        );
        let e = slow_streams(bin, args.sse_readers).await?;
        println!(
            "{}",
            memory_line(
                &format!("{} slow event streams", args.sse_readers),
                label,
                &e
            )
        );
        let smtp = stalled_data(bin).await?;
        match &smtp {
            Ok(ms) => println!(
                "stalled SMTP DATA ({label}): the third IP's message got 250 after {ms:.1} ms"
            ),
            Err(why) => {
                println!("stalled SMTP DATA ({label}): the third IP's message was refused: {why}")
            }
        }
        growth.push((z.peak - z.before, e.peak - e.before, smtp));
    }
    if let Some((z, e, smtp)) = growth.first() {
        summary.push_str(&format!(
            " zero_window_growth_mb={z:.1} sse_growth_mb={e:.1} smtp_third_ip_ms={}",
            smtp.as_ref()
                .map_or("refused".to_owned(), |ms| format!("{ms:.1}"))
        ));
    }
    if let (Some((z, e, _)), Some((za, ea, _))) = (growth.first(), growth.get(1)) {
        summary.push_str(&format!(
            " anchor_zero_window_growth_mb={za:.1} anchor_sse_growth_mb={ea:.1} ratio_zero_window={:.2} ratio_sse={:.2}",
            z / za.max(0.001),
            e / ea.max(0.001)
        ));
    }
    println!("{summary}");
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
