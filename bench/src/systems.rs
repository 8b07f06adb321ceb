//! The two systems under test and the phases run against each.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::procstat::{rss_mb, CpuMeter};

pub struct Config {
    pub clients: usize,
    pub phase: Duration,
    pub idle_polls: usize,
    pub delay_samples: usize,
    pub work_dir: PathBuf,
}

/// agentaddress with everything on, or with one optimisation turned off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Default,
    /// One request per SQLite transaction (`AGENTADDRESS_SQLITE_GROUP_MAX=1`).
    NoGroupCommit,
    /// Long polls re-read the feed with backoff instead of waiting for the commit's wake-up.
    NoWakeups,
}

impl Variant {
    pub fn label(self) -> &'static str {
        match self {
            Variant::Default => "default",
            Variant::NoGroupCommit => "group commit",
            Variant::NoWakeups => "wake-ups",
        }
    }

    fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Variant::Default => &[],
            Variant::NoGroupCommit => &[("AGENTADDRESS_SQLITE_GROUP_MAX", "1")],
            Variant::NoWakeups => &[("AGENTADDRESS_SQLITE_WAKEUPS", "false")],
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Throughput {
    pub per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub cpu_pct: f64,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Delay {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub samples: u64,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Idle {
    pub held: usize,
    pub rss_mb: f64,
    pub cpu_pct: f64,
}

#[derive(Debug, Default)]
pub struct Figures {
    pub cas: Throughput,
    pub cas_conflicts_per_s: f64,
    pub deliver: Throughput,
    pub read: Throughput,
    pub delay: Delay,
    /// One connection per poll (HTTP/1.1; etcd: one watch per HTTP/1.1 request).
    pub idle: Idle,
    /// The same polls over HTTP/2 (h2c, `HTTP2_CONNECTIONS` connections) on a fresh server:
    /// agentaddress in its default variant only.
    pub idle_http2: Option<Idle>,
    pub peak_rss_mb: f64,
    pub errors: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Measurement helpers

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
struct Tally {
    hist: Histogram<u64>,
    ok: u64,
    conflicts: u64,
    errors: Vec<String>,
}

impl Tally {
    fn new() -> Self {
        Self {
            hist: histogram(),
            ok: 0,
            conflicts: 0,
            errors: Vec::new(),
        }
    }

    fn time(&mut self, since: Instant) {
        self.hist
            .saturating_record(since.elapsed().as_micros().max(1) as u64);
    }

    fn error(&mut self, what: String) {
        if self.errors.len() < 3 {
            self.errors.push(what);
        }
    }

    fn merge(&mut self, other: Tally) {
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
async fn phase<F, Fut>(
    cfg: &Config,
    pid: u32,
    agents: usize,
    errors: &mut Vec<String>,
    agent: F,
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
async fn delay_result(
    consumers: Vec<tokio::task::JoinHandle<Result<Seen, String>>>,
    sent: &Seen,
    who: &str,
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
fn kilobyte() -> Value {
    json!({"pad": "x".repeat(1000)})
}

// ---------------------------------------------------------------------------------------------
// Processes

struct Server {
    child: Child,
    pid: u32,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn fresh_dir(dir: &Path) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn log_file(path: &Path) -> Result<Stdio, String> {
    std::fs::File::create(path)
        .map(Stdio::from)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

async fn start_agentaddress(bin: &Path, cfg: &Config, v: Variant) -> Result<Server, String> {
    let dir = cfg
        .work_dir
        .join(format!("agentaddress-{}", v.label().replace(' ', "-")));
    fresh_dir(&dir)?;
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--db")
        .arg(dir.join("bench.db"))
        // Durability as shipped; quotas and rate limits out of the way of a load test.
        .env("AGENTADDRESS_SQLITE_SYNCHRONOUS", "full")
        .env("AGENTADDRESS_POLLS_PER_MINUTE", "1000000000")
        .env("AGENTADDRESS_CREATIONS_PER_MINUTE", "1000000000")
        .env("AGENTADDRESS_MAX_RETAINED_EVENTS", "10000000")
        // Every benchmark client connects from 127.0.0.1: no per-IP cap; the global cap is
        // whatever the descriptor limit allows.
        .env("AGENTADDRESS_MAX_CONNECTIONS", "1000000")
        .env("AGENTADDRESS_MAX_CONNECTIONS_PER_IP", "0")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file(&dir.join("serve.log"))?);
    for (k, val) in v.env() {
        cmd.env(k, val);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Reads the "listening on" line, then keeps draining stdout so the server never blocks.
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("agentaddress listening on ") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(url.trim().to_owned());
                }
            }
        }
    });
    let mut server = Server {
        child,
        pid,
        url: String::new(),
    };
    server.url = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .map_err(|_| "the server did not print its URL within 30 s".to_owned())?
        .map_err(|_| format!("the server exited; see {}", dir.join("serve.log").display()))?;
    Ok(server)
}

async fn start_etcd(bin: &Path, cfg: &Config) -> Result<Server, String> {
    let dir = cfg.work_dir.join("etcd");
    fresh_dir(&dir)?;
    let client = format!("http://127.0.0.1:{}", free_port()?);
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    let child = Command::new(bin)
        .arg("--name")
        .arg("bench")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--listen-client-urls")
        .arg(&client)
        .arg("--advertise-client-urls")
        .arg(&client)
        .arg("--listen-peer-urls")
        .arg(&peer)
        .arg("--initial-advertise-peer-urls")
        .arg(&peer)
        .arg("--initial-cluster")
        .arg(format!("bench={peer}"))
        .stdin(Stdio::null())
        .stdout(log_file(&dir.join("etcd.out"))?)
        .stderr(log_file(&dir.join("etcd.log"))?)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} (apt-get install etcd-server): {e}",
                bin.display()
            )
        })?;
    let server = Server {
        pid: child.id(),
        child,
        url: client.clone(),
    };
    let http = Http::new(Some(Duration::from_secs(2)));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http
            .post(
                &format!("{client}/v3/kv/range"),
                None,
                &json!({"key": b64("/")}),
            )
            .await;
        if matches!(r, Ok((200, _))) {
            return Ok(server);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "etcd did not answer within 30 s; see {}",
                dir.join("etcd.log").display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

#[derive(Clone)]
struct Http {
    c: reqwest::Client,
}

impl Http {
    fn new(timeout: Option<Duration>) -> Self {
        let mut b = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60));
        if let Some(t) = timeout {
            b = b.timeout(t);
        }
        Self {
            c: b.build().unwrap_or_else(|_| reqwest::Client::new()),
        }
    }

    /// A client that speaks HTTP/2 without TLS (h2c) from the first byte: all its requests
    /// are streams of one connection.
    fn http2_prior_knowledge(timeout: Duration) -> Result<Self, String> {
        reqwest::Client::builder()
            .http2_prior_knowledge()
            .tcp_nodelay(true)
            .timeout(timeout)
            .build()
            .map(|c| Self { c })
            .map_err(|e| format!("cannot build an HTTP/2 client: {e}"))
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<(u16, Value), String> {
        let resp = req
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| format!("reading the body failed: {e}"))?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, body))
    }

    async fn post(
        &self,
        url: &str,
        token: Option<&str>,
        body: &Value,
    ) -> Result<(u16, Value), String> {
        let mut req = self.c.post(url).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }

    async fn put(&self, url: &str, token: &str, body: &Value) -> Result<(u16, Value), String> {
        self.send(self.c.put(url).bearer_auth(token).json(body))
            .await
    }

    async fn get(&self, url: &str, token: &str) -> Result<(u16, Value), String> {
        self.send(self.c.get(url).bearer_auth(token)).await
    }
}

fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

fn unb64(v: &Value) -> String {
    v.as_str()
        .and_then(|s| B64.decode(s).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// etcd's JSON gateway writes 64-bit integers as strings.
fn num(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// agentaddress

#[derive(Debug, Clone)]
struct Address {
    root: String,
    token: String,
    inbox: String,
}

async fn create_addresses(http: &Http, base: &str, n: usize) -> Result<Vec<Address>, String> {
    let url = format!("{base}/api/v1/addresses");
    let results: Vec<Result<Address, String>> = futures::stream::iter(0..n)
        .map(|_| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let (status, b) = http.post(&url, None, &json!({})).await?;
                if status != 201 {
                    return Err(format!("create address: {status} {b}"));
                }
                let root = b["endpoints"]["events_url"]
                    .as_str()
                    .and_then(|u| u.strip_suffix("/events"))
                    .unwrap_or_default()
                    .to_owned();
                Ok(Address {
                    root,
                    token: b["credentials"]["read_token"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    inbox: b["endpoints"]["inbox_url"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                })
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

pub async fn run_agentaddress(bin: &Path, cfg: &Config, v: Variant) -> Result<Figures, String> {
    let server = start_agentaddress(bin, cfg, v).await?;
    println!(
        "bench: agentaddress ({}) at {} (pid {})",
        v.label(),
        server.url,
        server.pid
    );
    let http = Http::new(Some(Duration::from_secs(60)));
    let mut f = Figures::default();
    let c = cfg.clients;

    // cas: agents in fours share an address; each writes its own cold key three times for
    // every write to the address's shared hot key.
    let cas_addrs = create_addresses(&http, &server.url, c.div_ceil(4)).await?;
    (f.cas, f.cas_conflicts_per_s) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let a = cas_addrs[(i / 4) % cas_addrs.len()].clone();
        let http = http.clone();
        async move {
            let value = kilobyte();
            let urls = [
                format!("{}/state/cold-{i}", a.root),
                format!("{}/state/hot", a.root),
            ];
            let mut revs = [0u64; 2];
            let mut t = Tally::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let k = usize::from(n % 4 == 3);
                n += 1;
                loop {
                    let at = Instant::now();
                    let r = http
                        .put(
                            &urls[k],
                            &a.token,
                            &json!({"value": value, "if_revision": revs[k]}),
                        )
                        .await;
                    t.time(at);
                    match r {
                        Ok((200, b)) => {
                            revs[k] = b["revision"].as_u64().unwrap_or(0);
                            t.ok += 1;
                            break;
                        }
                        Ok((409, b)) if b["error"]["code"] == "revision_conflict" => {
                            t.conflicts += 1;
                            revs[k] = b["error"]["current_revision"].as_u64().unwrap_or(0);
                            if Instant::now() >= deadline {
                                break;
                            }
                        }
                        Ok((s, b)) => {
                            t.error(format!("cas: {s} {b}"));
                            break;
                        }
                        Err(e) => {
                            t.error(format!("cas: {e}"));
                            break;
                        }
                    }
                }
            }
            t
        }
    })
    .await;

    // deliver: one address per agent.
    let feeds = create_addresses(&http, &server.url, c).await?;
    (f.deliver, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let a = feeds[i].clone();
        let http = http.clone();
        async move {
            let body = json!({"type": "bench.delivery", "data": kilobyte()});
            let mut t = Tally::new();
            while Instant::now() < deadline {
                let at = Instant::now();
                let r = http.post(&a.inbox, None, &body).await;
                t.time(at);
                match r {
                    Ok((202, _)) => t.ok += 1,
                    Ok((s, b)) => t.error(format!("deliver: {s} {b}")),
                    Err(e) => t.error(format!("deliver: {e}")),
                }
            }
            t
        }
    })
    .await;

    // read: pages of 10 from a random point of the feeds just written.
    let mut lengths = Vec::new();
    for a in &feeds {
        let (_, b) = http.get(&a.root, &a.token).await?;
        lengths.push(b["usage"]["last_sequence"].as_u64().unwrap_or(0));
    }
    (f.read, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let (a, len) = (feeds[i].clone(), lengths[i]);
        let http = http.clone();
        async move {
            let mut t = Tally::new();
            let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1);
            while Instant::now() < deadline {
                x = xorshift(x);
                let after = x % len.saturating_sub(10).max(1);
                let want = len.saturating_sub(after).min(10) as usize;
                let at = Instant::now();
                let r = http
                    .get(
                        &format!("{}/events?after={after}&limit=10", a.root),
                        &a.token,
                    )
                    .await;
                t.time(at);
                match r {
                    Ok((200, b)) if b["events"].as_array().map(Vec::len) == Some(want) => t.ok += 1,
                    Ok((s, b)) => t.error(format!(
                        "read: {s}, {} events where {want} were expected",
                        b["events"].as_array().map_or(0, Vec::len)
                    )),
                    Err(e) => t.error(format!("read: {e}")),
                }
            }
            t
        }
    })
    .await;
    f.peak_rss_mb = rss_mb(server.pid).1;

    // delay: long-poll consumers on 8 feeds, one paced producer.
    f.delay = aa_delay(&http, &server.url, cfg, &mut f.errors).await?;

    // idle: many addresses, one long poll each, nothing arriving; HTTP/1.1 (a connection per
    // poll), then HTTP/2 on a fresh server (polls share connections, and their buffers).
    f.idle = aa_idle(&server, cfg, false).await?;
    if v == Variant::Default {
        drop(server);
        let fresh = start_agentaddress(bin, cfg, v).await?;
        f.idle_http2 = Some(aa_idle(&fresh, cfg, true).await?);
    }
    Ok(f)
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

const DELAY_FEEDS: usize = 8;
/// Deliveries per second in the delay phase (the consumers are waiting, not saturated).
const DELAY_GAP: Duration = Duration::from_millis(4);

async fn aa_delay(
    http: &Http,
    base: &str,
    cfg: &Config,
    errors: &mut Vec<String>,
) -> Result<Delay, String> {
    let addrs = create_addresses(http, base, DELAY_FEEDS).await?;
    let consumers: Vec<_> = addrs
        .iter()
        .map(|a| {
            let a = a.clone();
            let http = http.clone();
            tokio::spawn(async move {
                let mut seen = HashMap::new();
                let mut after = 0u64;
                loop {
                    let r = http
                        .get(
                            &format!("{}/events?after={after}&wait=25", a.root),
                            &a.token,
                        )
                        .await;
                    let now = Instant::now();
                    let b = match r {
                        Ok((200, b)) => b,
                        Ok((s, b)) => return Err(format!("delay poll: {s} {b}")),
                        Err(e) => return Err(format!("delay poll: {e}")),
                    };
                    after = b["next_cursor"].as_u64().unwrap_or(after);
                    for e in b["events"].as_array().into_iter().flatten() {
                        if e["type"] == "bench.stop" {
                            return Ok(seen);
                        }
                        seen.insert(e["id"].as_str().unwrap_or_default().to_owned(), now);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sent = HashMap::new();
    let body = json!({"type": "bench.delay", "data": kilobyte()});
    let mut tick = tokio::time::interval(DELAY_GAP);
    for s in 0..cfg.delay_samples {
        tick.tick().await;
        let a = &addrs[s % addrs.len()];
        match http.post(&a.inbox, None, &body).await {
            Ok((202, b)) => {
                sent.insert(
                    b["event"]["id"].as_str().unwrap_or_default().to_owned(),
                    Instant::now(),
                );
            }
            Ok((st, b)) => errors.push(format!("delay deliver: {st} {b}")),
            Err(e) => errors.push(format!("delay deliver: {e}")),
        }
    }
    for a in &addrs {
        http.post(&a.inbox, None, &json!({"type": "bench.stop"}))
            .await?;
    }
    Ok(delay_result(consumers, &sent, "long poll", errors).await)
}

/// Connections the HTTP/2 idle polls share (100 streams each for 10,000 polls: under hyper's
/// default limit of 200 concurrent streams per connection, so every poll reaches the server).
pub const HTTP2_CONNECTIONS: usize = 100;

async fn aa_idle(server: &Server, cfg: &Config, http2: bool) -> Result<Idle, String> {
    let http = Http::new(Some(Duration::from_secs(60)));
    let addrs = create_addresses(&http, &server.url, cfg.idle_polls).await?;
    let clients: Vec<Http> = if http2 {
        (0..HTTP2_CONNECTIONS)
            .map(|_| Http::http2_prior_knowledge(Duration::from_secs(60)))
            .collect::<Result<_, _>>()?
    } else {
        vec![http]
    };
    let addrs: Vec<(usize, Address)> = addrs.into_iter().enumerate().collect();
    let polls = start_in_batches(addrs, |(i, a)| {
        let http = clients[i % clients.len()].clone();
        async move {
            http.get(&format!("{}/events?after=0&wait=25", a.root), &a.token)
                .await
                .map(|_| ())
        }
    })
    .await;
    Ok(measure_idle(server.pid, &polls, None).await)
}

/// Starts `f` for every item, 500 at a time, so the listen backlog never overflows.
async fn start_in_batches<T, F, Fut>(items: Vec<T>, f: F) -> Vec<tokio::task::JoinHandle<()>>
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
async fn measure_idle(
    pid: u32,
    held: &[tokio::task::JoinHandle<()>],
    established: Option<&AtomicUsize>,
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

// ---------------------------------------------------------------------------------------------
// etcd

struct Etcd {
    http: Http,
    base: String,
}

enum Txn {
    Committed(u64),
    Failed(Value),
}

impl Etcd {
    async fn call(&self, path: &str, body: &Value) -> Result<Value, String> {
        match self
            .http
            .post(&format!("{}{path}", self.base), None, body)
            .await?
        {
            (200, b) => Ok(b),
            (s, b) => Err(format!("etcd {path}: {s} {b}")),
        }
    }

    /// A transaction: `compare` must all hold for `success` to run, else `failure` runs.
    async fn txn(&self, compare: Value, success: Value, failure: Value) -> Result<Txn, String> {
        let b = self
            .call(
                "/v3/kv/txn",
                &json!({"compare": compare, "success": success, "failure": failure}),
            )
            .await?;
        if b["succeeded"] == true {
            Ok(Txn::Committed(num(&b["header"]["revision"])))
        } else {
            Ok(Txn::Failed(b))
        }
    }
}

fn mod_equals(key: &str, rev: u64) -> Value {
    json!([{"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": rev.to_string()}])
}

fn put(key: &str, value: &str) -> Value {
    json!({"request_put": {"key": b64(key), "value": b64(value)}})
}

fn range(key: &str) -> Value {
    json!({"request_range": {"key": b64(key)}})
}

/// The first key of a failed transaction's range: (mod_revision, value).
fn ranged(b: &Value) -> (u64, String) {
    let kv = &b["responses"][0]["response_range"]["kvs"][0];
    (num(&kv["mod_revision"]), unb64(&kv["value"]))
}

/// Appends `payload` to the feed at `prefix`: the counter key and the event key in one txn
/// guarded by the counter's `mod_revision`. Returns the event key.
async fn etcd_append(
    e: &Etcd,
    prefix: &str,
    counter: &mut (u64, u64),
    payload: &str,
) -> Result<(String, u32), String> {
    let mut conflicts = 0;
    loop {
        let (rev, n) = *counter;
        let key = format!("{prefix}e/{:012}", n + 1);
        let ck = format!("{prefix}n");
        match e
            .txn(
                mod_equals(&ck, rev),
                json!([put(&ck, &(n + 1).to_string()), put(&key, payload)]),
                json!([range(&ck)]),
            )
            .await?
        {
            Txn::Committed(r) => {
                *counter = (r, n + 1);
                return Ok((key, conflicts));
            }
            Txn::Failed(b) => {
                conflicts += 1;
                let (r, v) = ranged(&b);
                *counter = (r, v.parse().unwrap_or(0));
            }
        }
    }
}

pub async fn run_etcd(bin: &Path, cfg: &Config) -> Result<Figures, String> {
    let server = start_etcd(bin, cfg).await?;
    println!("bench: etcd at {} (pid {})", server.url, server.pid);
    let etcd = Arc::new(Etcd {
        http: Http::new(Some(Duration::from_secs(60))),
        base: server.url.clone(),
    });
    let mut f = Figures::default();
    let c = cfg.clients;
    let value = kilobyte().to_string();

    // cas: the same fours and keys as agentaddress.
    (f.cas, f.cas_conflicts_per_s) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let e = Arc::clone(&etcd);
        let value = value.clone();
        async move {
            let keys = [
                format!("/s/{}/cold-{i}", i / 4),
                format!("/s/{}/hot", i / 4),
            ];
            let mut revs = [0u64; 2];
            let mut t = Tally::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let k = usize::from(n % 4 == 3);
                n += 1;
                loop {
                    let at = Instant::now();
                    let r = e
                        .txn(
                            mod_equals(&keys[k], revs[k]),
                            json!([put(&keys[k], &value)]),
                            json!([range(&keys[k])]),
                        )
                        .await;
                    t.time(at);
                    match r {
                        Ok(Txn::Committed(rev)) => {
                            revs[k] = rev;
                            t.ok += 1;
                            break;
                        }
                        Ok(Txn::Failed(b)) => {
                            t.conflicts += 1;
                            revs[k] = ranged(&b).0;
                            if Instant::now() >= deadline {
                                break;
                            }
                        }
                        Err(err) => {
                            t.error(format!("cas: {err}"));
                            break;
                        }
                    }
                }
            }
            t
        }
    })
    .await;

    // deliver: an append txn per event on each agent's own feed.
    let body = json!({"type": "bench.delivery", "data": kilobyte()}).to_string();
    (f.deliver, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let e = Arc::clone(&etcd);
        let body = body.clone();
        async move {
            let mut t = Tally::new();
            let mut counter = (0u64, 0u64);
            while Instant::now() < deadline {
                let at = Instant::now();
                let r = etcd_append(&e, &format!("/f/{i}/"), &mut counter, &body).await;
                t.time(at);
                match r {
                    Ok(_) => t.ok += 1,
                    Err(err) => t.error(format!("deliver: {err}")),
                }
            }
            t
        }
    })
    .await;

    // read: ranges of 10 event keys from a random point.
    let mut lengths = Vec::new();
    for i in 0..c {
        let b = etcd
            .call("/v3/kv/range", &json!({"key": b64(&format!("/f/{i}/n"))}))
            .await?;
        lengths.push(unb64(&b["kvs"][0]["value"]).parse::<u64>().unwrap_or(0));
    }
    (f.read, _) = phase(cfg, server.pid, c, &mut f.errors, |i, deadline| {
        let (e, len) = (Arc::clone(&etcd), lengths[i]);
        async move {
            let mut t = Tally::new();
            let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (i as u64 + 1);
            while Instant::now() < deadline {
                x = xorshift(x);
                let after = x % len.saturating_sub(10).max(1);
                let want = len.saturating_sub(after).min(10) as usize;
                let at = Instant::now();
                let r = e
                    .call(
                        "/v3/kv/range",
                        &json!({
                            "key": b64(&format!("/f/{i}/e/{:012}", after + 1)),
                            "range_end": b64(&format!("/f/{i}/e0")),
                            "limit": 10,
                        }),
                    )
                    .await;
                t.time(at);
                match r {
                    Ok(b) if b["kvs"].as_array().map_or(0, Vec::len) == want => t.ok += 1,
                    Ok(b) => t.error(format!(
                        "read: {} keys where {want} were expected",
                        b["kvs"].as_array().map_or(0, Vec::len)
                    )),
                    Err(err) => t.error(format!("read: {err}")),
                }
            }
            t
        }
    })
    .await;
    f.peak_rss_mb = rss_mb(server.pid).1;

    f.delay = etcd_delay(&etcd, cfg, &mut f.errors).await?;
    f.idle = etcd_idle(&server, cfg).await;
    Ok(f)
}

/// Reads newline-separated JSON messages from a watch stream; calls `on` with each and the
/// moment it arrived until `on` returns false or the stream ends.
async fn watch(
    http: &Http,
    base: &str,
    create: Value,
    mut on: impl FnMut(&Value, Instant) -> bool,
) -> Result<(), String> {
    let mut resp = http
        .c
        .post(format!("{base}/v3/watch"))
        .json(&json!({"create_request": create}))
        .send()
        .await
        .map_err(|e| format!("watch: {e}"))?;
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("watch: {e}"))? {
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        let mut stream = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
        let mut used = 0;
        while let Some(Ok(msg)) = stream.next() {
            used = stream.byte_offset();
            if !on(&msg, now) {
                return Ok(());
            }
        }
        buf.drain(..used);
    }
    Ok(())
}

async fn etcd_delay(
    etcd: &Arc<Etcd>,
    cfg: &Config,
    errors: &mut Vec<String>,
) -> Result<Delay, String> {
    let watching = Arc::new(AtomicUsize::new(0));
    let streams = Http::new(None);
    let consumers: Vec<_> = (0..DELAY_FEEDS)
        .map(|m| {
            let streams = streams.clone();
            let base = etcd.base.clone();
            let watching = Arc::clone(&watching);
            tokio::spawn(async move {
                let mut seen = HashMap::new();
                let create = json!({
                    "key": b64(&format!("/d/{m}/e/")),
                    "range_end": b64(&format!("/d/{m}/e0")),
                });
                watch(&streams, &base, create, |msg, now| {
                    if msg["result"]["created"] == true {
                        watching.fetch_add(1, Ordering::Relaxed);
                    }
                    for ev in msg["result"]["events"].as_array().into_iter().flatten() {
                        let key = unb64(&ev["kv"]["key"]);
                        if key.ends_with("/stop") {
                            return false;
                        }
                        seen.insert(key, now);
                    }
                    true
                })
                .await
                .map(|()| seen)
            })
        })
        .collect();
    let ready = Instant::now() + Duration::from_secs(10);
    while watching.load(Ordering::Relaxed) < DELAY_FEEDS && Instant::now() < ready {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = json!({"type": "bench.delay", "data": kilobyte()}).to_string();
    let mut counters = [(0u64, 0u64); DELAY_FEEDS];
    let mut sent = HashMap::new();
    let mut tick = tokio::time::interval(DELAY_GAP);
    for s in 0..cfg.delay_samples {
        tick.tick().await;
        let m = s % DELAY_FEEDS;
        match etcd_append(etcd, &format!("/d/{m}/"), &mut counters[m], &body).await {
            Ok((key, _)) => {
                sent.insert(key, Instant::now());
            }
            Err(e) => errors.push(format!("delay append: {e}")),
        }
    }
    for m in 0..DELAY_FEEDS {
        etcd.call(
            "/v3/kv/put",
            &json!({"key": b64(&format!("/d/{m}/e/stop")), "value": b64("stop")}),
        )
        .await?;
    }
    Ok(delay_result(consumers, &sent, "watch", errors).await)
}

async fn etcd_idle(server: &Server, cfg: &Config) -> Idle {
    let streams = Http::new(None);
    let created = Arc::new(AtomicUsize::new(0));
    let watches = start_in_batches((0..cfg.idle_polls).collect(), |k| {
        let streams = streams.clone();
        let base = server.url.clone();
        let created = Arc::clone(&created);
        async move {
            watch(
                &streams,
                &base,
                json!({"key": b64(&format!("/idle/{k}"))}),
                |msg, _| {
                    if msg["result"]["created"] == true {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                },
            )
            .await
        }
    })
    .await;
    measure_idle(server.pid, &watches, Some(&created)).await
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

    #[test]
    fn etcd_numbers_and_ranges_are_read_from_the_gateway_json() {
        let b = json!({"responses": [{"response_range": {"kvs": [
            {"key": b64("k"), "mod_revision": "42", "value": b64("7")}
        ]}}]});
        assert_eq!(ranged(&b), (42, "7".to_owned()));
        assert_eq!(
            ranged(&json!({"responses": [{"response_range": {}}]})),
            (0, String::new())
        );
        assert_eq!(num(&json!("18446744073709551615")), u64::MAX);
    }
}
