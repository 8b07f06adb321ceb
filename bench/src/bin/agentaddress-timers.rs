//! `agentaddress-timers`: how late timers fire (docs/API.md §20), and what many pending timers
//! cost `serve` (docs/PERFORMANCE.md, "Timers").
//!
//! **Lateness** (`--timers N`, both deployments): N timers on N/100 addresses, their `fire_at`
//! spread over `--spread` seconds starting `--lead` seconds ahead (long enough to set them all:
//! on the local Lambda stack, 1,000 take about a minute); nobody reads the feeds until every timer is
//! past its time by 15 s, so each fired on the background path (`serve`'s scheduler; on AWS the
//! delayed purge-queue messages). Lateness is each event's `received_at` minus its timer's
//! `fire_at`, both the server's clock. Goals: p99 ≤ 1 s on `serve`, ≤ 5 s on AWS. Every timer
//! must have fired exactly once.
//!
//! **Pending** (`--pending N`, with `--agentaddress`: a server this bench starts): N timers a day
//! ahead on N/100 addresses; the server's RSS before and after, then the server is stopped and
//! started again on the same database: the time until it answers `/healthz`, beside the same
//! restart of an empty database (the anchor), and its RSS after.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::time::Instant;

// Only its RSS reading is used here.
#[allow(dead_code)]
#[path = "../procstat.rs"]
mod procstat;
#[path = "../waiters.rs"]
mod waiters;

#[derive(Parser, Debug)]
#[command(name = "agentaddress-timers", version)]
struct Args {
    /// The `agentaddress` binary (a release build): the bench starts its own `serve`.
    #[arg(long, required_unless_present = "url", conflicts_with = "url")]
    agentaddress: Option<PathBuf>,
    /// A running deployment's base URL (started with `AGENTADDRESS_CREATIONS_PER_MINUTE` high
    /// enough for N/100 addresses).
    #[arg(long)]
    url: Option<String>,
    /// Timers whose lateness is measured.
    #[arg(long, default_value_t = 1_000)]
    timers: usize,
    /// Seconds over which their times are spread.
    #[arg(long, default_value_t = 10)]
    spread: u64,
    /// Seconds from now to the first timer's time: setting all N must take less.
    #[arg(long, default_value_t = 5)]
    lead: u64,
    /// Pending timers held (needs `--agentaddress`); 0 skips that part.
    #[arg(long, default_value_t = 0)]
    pending: usize,
}

const PER_ADDRESS: usize = 100;

fn millis(v: &Value) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Sets `n` timers on `addresses` (at most 100 each), timer `i` at `fire_at(i)`: their ids and
/// `fire_at`s (ms), by id.
async fn set_timers(
    http: &reqwest::Client, addresses: &[waiters::Address], n: usize,
    fire_at: impl Fn(usize) -> String,
) -> Result<HashMap<String, i64>, String> {
    let jobs: Vec<(usize, &waiters::Address, String)> = (0..n)
        .map(|i| (i, &addresses[i / PER_ADDRESS], fire_at(i)))
        .collect();
    let answers: Vec<Result<(String, i64), String>> = futures::stream::iter(jobs)
        .map(|(i, a, at)| {
            let http = http.clone();
            async move {
                let r = http
                    .post(format!("{}/timers", a.root))
                    .bearer_auth(&a.token)
                    .json(&json!({"fire_at": at, "type": "timer.bench", "data": {"i": i}}))
                    .send()
                    .await
                    .map_err(|e| format!("set a timer: {e}"))?;
                let status = r.status().as_u16();
                let b: Value = r.json().await.map_err(|e| format!("set a timer: {e}"))?;
                if status != 201 {
                    return Err(format!("set a timer: {status} {b}"));
                }
                let id = b["timer"]["id"].as_str().unwrap_or_default().to_owned();
                let at = millis(&b["timer"]["fire_at"]).ok_or("no fire_at")?;
                Ok((id, at))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    answers.into_iter().collect()
}

/// Every event of address `a`.
async fn feed(http: &reqwest::Client, a: &waiters::Address) -> Result<Vec<Value>, String> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let r = http
            .get(format!("{}/events?after={after}&limit=100", a.root))
            .bearer_auth(&a.token)
            .send()
            .await
            .map_err(|e| format!("read: {e}"))?;
        let b: Value = r.json().await.map_err(|e| format!("read: {e}"))?;
        let page = b["events"].as_array().cloned().unwrap_or_default();
        events.extend(page);
        after = b["next_cursor"].as_u64().unwrap_or(after);
        if b["has_more"] != true {
            return Ok(events);
        }
    }
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn lateness(http: &reqwest::Client, base: &str, args: &Args) -> Result<(), String> {
    let addresses =
        waiters::create_addresses(http, base, args.timers.div_ceil(PER_ADDRESS)).await?;
    let start = now_ms() + i64::try_from(args.lead * 1000).unwrap_or(5_000);
    let spread_ms = i64::try_from(args.spread * 1000).unwrap_or(0);
    let n = args.timers;
    let set_at = Instant::now();
    let timers = set_timers(http, &addresses, n, |i| {
        rfc3339(start + spread_ms * i64::try_from(i).unwrap_or(0) / i64::try_from(n).unwrap_or(1))
    })
    .await?;
    println!(
        "timers: {n} set on {} addresses in {:.1?}",
        addresses.len(),
        set_at.elapsed()
    );
    let last = timers.values().copied().max().unwrap_or(start);
    let wait = u64::try_from(last + 15_000 - now_ms()).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let mut h = Histogram::<u64>::new(3).map_err(|e| format!("histogram: {e}"))?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut early = 0;
    for a in &addresses {
        for e in feed(http, a).await? {
            let id = e["data"]["timer_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let (Some(at), Some(received)) = (timers.get(&id), millis(&e["received_at"])) else {
                continue;
            };
            *seen.entry(id).or_default() += 1;
            if received < *at {
                early += 1;
            }
            h.record(u64::try_from(received - at).unwrap_or(0).max(1))
                .map_err(|e| format!("record: {e}"))?;
        }
    }
    let missing = timers.keys().filter(|id| !seen.contains_key(*id)).count();
    let twice = seen.values().filter(|n| **n > 1).count();
    println!(
        "timers: lateness over {} fired: p50 {} ms, p99 {} ms, max {} ms; {missing} not fired, \
         {twice} fired twice, {early} early",
        h.len(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.max()
    );
    if missing > 0 || twice > 0 || early > 0 {
        return Err("a timer did not fire exactly once, at or after its time".into());
    }
    Ok(())
}

/// Restarts `server` on `db` and times it until `/healthz` answers; the new server, its base
/// and the time.
async fn restart(
    bin: &std::path::Path, db: &std::path::Path, mut server: tokio::process::Child,
) -> Result<(tokio::process::Child, String, Duration), String> {
    server.kill().await.map_err(|e| format!("kill: {e}"))?;
    let _ = server.wait().await;
    let started = Instant::now();
    let (server, base) = waiters::start(bin, db).await?;
    let http = reqwest::Client::new();
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((server, base, started.elapsed()))
}

async fn pending(bin: &std::path::Path, n: usize) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let (anchor_db, db) = (dir.path().join("empty.db"), dir.path().join("pending.db"));
    let (anchor, _) = waiters::start(bin, &anchor_db).await?;
    let (anchor, _, anchor_start) = restart(bin, &anchor_db, anchor).await?;
    let anchor_rss = anchor.id().map_or(0.0, |p| procstat::rss_mb(p).0);
    drop(anchor);

    let (server, base) = waiters::start(bin, &db).await?;
    let pid = server.id().ok_or("no pid")?;
    let before = procstat::rss_mb(pid).0;
    let http = reqwest::Client::new();
    let addresses = waiters::create_addresses(&http, &base, n.div_ceil(PER_ADDRESS)).await?;
    let day = now_ms() + 86_400_000;
    let set_at = Instant::now();
    set_timers(&http, &addresses, n, |i| {
        rfc3339(day + i64::try_from(i).unwrap_or(0))
    })
    .await?;
    let took = set_at.elapsed();
    let after = procstat::rss_mb(pid).0;
    println!(
        "pending: {n} timers on {} addresses set in {took:.1?} ({:.0}/s); serve RSS {before:.1} MB \
         before, {after:.1} MB after",
        addresses.len(),
        n as f64 / took.as_secs_f64()
    );
    let (server, _, start) = restart(bin, &db, server).await?;
    let rss = server.id().map_or(0.0, |p| procstat::rss_mb(p).0);
    println!(
        "pending: restart with {n} pending timers: healthy in {start:.1?} (anchor, an empty \
         database: {anchor_start:.1?}; ratio {:.2}); RSS {rss:.1} MB (anchor {anchor_rss:.1} MB)",
        start.as_secs_f64() / anchor_start.as_secs_f64().max(1e-6)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("client: {e}"))?;
    if args.timers > 0 {
        let (server, base) = match (&args.agentaddress, &args.url) {
            (_, Some(url)) => (None, url.trim_end_matches('/').to_owned()),
            (Some(bin), None) => {
                let (server, base) = waiters::start(bin, &dir.path().join("bench.db")).await?;
                (Some(server), base)
            }
            (None, None) => return Err("--agentaddress or --url".into()),
        };
        println!("timers: agentaddress at {base}");
        lateness(&http, &base, &args).await?;
        drop(server);
    }
    if args.pending > 0 {
        let bin = args
            .agentaddress
            .as_deref()
            .ok_or("--pending needs --agentaddress")?;
        pending(bin, args.pending).await?;
    }
    Ok(())
}
