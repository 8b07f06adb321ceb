//! `agentaddress-scale-sim`: docs/SCALE.md's "Simulation here" — many addresses against the
//! local Lambda stack, measuring per operation what DynamoDB did (requests and capacity units,
//! read off the wire by the fault proxy in front of DynamoDB Local, with no fault injected) and
//! what the functions took (latency), and from those the Lambda concurrency the same traffic
//! would hold on AWS.
//!
//! Start the stack with the proxy in the path and no faults, creations unthrottled:
//!
//! ```sh
//! AGENTADDRESS_CREATIONS_PER_MINUTE=1000000 AGENTADDRESS_POLLS_PER_MINUTE=1000000 \
//!   scripts/lambda-local --port 9400 --prebuilt-workspace --no-reload --faults fail=0,drop=0
//! agentaddress-scale-sim --url http://127.0.0.1:9400 --proxy http://127.0.0.1:PROXY_PORT \
//!   --addresses 10000
//! ```
//!
//! (`lambda-local` prints the proxy's URL: `fault proxy: http://… -> …`.) Phases, each over
//! every address with `--clients` requests in flight: create; one 1 KB delivery; one 1 KB state
//! CAS write (`if_revision: 0`); one page read (`after=0`, the one event); then `--waiters`
//! long polls of `--wait` seconds held at once on as many addresses with nothing arriving.
//! Prints a Markdown table, and with `--json PATH` writes the figures.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(name = "agentaddress-scale-sim", version)]
struct Args {
    /// The local Lambda stack's API (started with `--faults fail=0,drop=0`).
    #[arg(long)]
    url: String,
    /// The fault proxy in front of its DynamoDB (its counters are read between phases).
    #[arg(long)]
    proxy: String,
    /// Addresses created, each then written and read once per phase.
    #[arg(long, default_value_t = 10_000)]
    addresses: usize,
    /// Requests in flight at once in the create, delivery, CAS and page phases.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Idle long polls held at once in the last phase (0: none).
    #[arg(long, default_value_t = 200)]
    waiters: usize,
    /// Their `wait` seconds.
    #[arg(long, default_value_t = 25)]
    wait: u64,
    /// Also write the figures here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone)]
struct Address {
    token: String,
    inbox: String,
    events: String,
    state: String,
}

/// What DynamoDB did, as the proxy counted it.
#[derive(Debug, Clone, Copy, Default)]
struct Units {
    requests: u64,
    read_milli: u64,
    write_milli: u64,
}

impl Units {
    fn minus(self, before: Units) -> Units {
        Units {
            requests: self.requests.saturating_sub(before.requests),
            read_milli: self.read_milli.saturating_sub(before.read_milli),
            write_milli: self.write_milli.saturating_sub(before.write_milli),
        }
    }
}

async fn proxy_units(http: &reqwest::Client, proxy: &str) -> Result<Units, String> {
    let url = format!("{proxy}/__faultproxy/stats");
    let v: Value = http
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let mut u = Units::default();
    let Some(ops) = v["operations"].as_object() else {
        return Err(format!("GET {url}: no operations in {v}"));
    };
    for op in ops.values() {
        u.requests += op["forwarded"].as_u64().unwrap_or(0);
        u.read_milli += op["read_milli_units"].as_u64().unwrap_or(0);
        u.write_milli += op["write_milli_units"].as_u64().unwrap_or(0);
    }
    Ok(u)
}

/// One phase's figures.
struct Phase {
    name: &'static str,
    /// The docs/costs.json row it compares with.
    model: &'static str,
    ops: usize,
    failed: usize,
    seconds: f64,
    latency: Histogram<u64>,
    units: Units,
}

impl Phase {
    fn per_op(&self, milli: u64) -> f64 {
        milli as f64 / 1000.0 / self.ops.max(1) as f64
    }

    fn mean_ms(&self) -> f64 {
        self.latency.mean() / 1000.0
    }

    /// Little's law: requests a second × seconds each = environments busy at once.
    fn concurrency(&self) -> f64 {
        (self.ops as f64 / self.seconds.max(1e-9)) * self.mean_ms() / 1000.0
    }

    fn row(&self) -> String {
        format!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {} | {:.2} | {:.2} | {:.2} | {:.1} | `{}` |",
            self.name,
            self.ops,
            self.ops as f64 / self.seconds.max(1e-9),
            self.latency.value_at_quantile(0.5) as f64 / 1000.0,
            self.latency.value_at_quantile(0.99) as f64 / 1000.0,
            self.failed,
            self.units.requests as f64 / self.ops.max(1) as f64,
            self.per_op(self.units.read_milli),
            self.per_op(self.units.write_milli),
            self.concurrency(),
            self.model,
        )
    }

    fn json(&self) -> Value {
        json!({
            "phase": self.name,
            "model_row": self.model,
            "ops": self.ops,
            "failed": self.failed,
            "seconds": self.seconds,
            "per_second": self.ops as f64 / self.seconds.max(1e-9),
            "p50_ms": self.latency.value_at_quantile(0.5) as f64 / 1000.0,
            "p99_ms": self.latency.value_at_quantile(0.99) as f64 / 1000.0,
            "mean_ms": self.mean_ms(),
            "dynamodb_requests_per_op": self.units.requests as f64 / self.ops.max(1) as f64,
            "read_units_per_op": self.per_op(self.units.read_milli),
            "write_units_per_op": self.per_op(self.units.write_milli),
            "concurrency": self.concurrency(),
        })
    }
}

fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 120_000_000, 3).map_err(|e| e.to_string())
}

/// Runs `request(i)` for every `i` in `0..n`, `clients` at a time, timing each, as the phase
/// `name` (compared with the model's row `model`); an answer is good when its status is `ok`. The proxy's counters are read before and after.
async fn phase<F, Fut>(
    http: &reqwest::Client, proxy: &str, (name, model): (&'static str, &'static str), n: usize,
    clients: usize, ok: u16, request: F,
) -> Result<(Phase, Vec<Value>), String>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<reqwest::Response, reqwest::Error>>,
{
    let before = proxy_units(http, proxy).await?;
    let started = Instant::now();
    let answers: Vec<(Duration, Option<(u16, Value)>)> = futures::stream::iter(0..n)
        .map(|i| {
            let sent = request(i);
            async move {
                let t = Instant::now();
                let answer = match sent.await {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        Some((status, r.json::<Value>().await.unwrap_or(Value::Null)))
                    }
                    Err(_) => None,
                };
                (t.elapsed(), answer)
            }
        })
        .buffered(clients)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let after = proxy_units(http, proxy).await?;
    let mut latency = histogram()?;
    let mut failed = 0;
    let mut bodies = Vec::with_capacity(n);
    for (took, answer) in answers {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        latency.saturating_record(micros.max(1));
        match answer {
            Some((status, body)) if status == ok => bodies.push(body),
            other => {
                if failed < 3 {
                    eprintln!("scale-sim: {name}: {other:?}");
                }
                failed += 1;
                bodies.push(Value::Null);
            }
        }
    }
    let p = Phase {
        name,
        model,
        ops: n,
        failed,
        seconds,
        latency,
        units: after.minus(before),
    };
    eprintln!("scale-sim: {}", p.row());
    Ok((p, bodies))
}

fn address(created: &Value) -> Option<Address> {
    let s = |p: &str| {
        created
            .pointer(p)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Some(Address {
        token: s("/credentials/read_token")?,
        inbox: s("/endpoints/inbox_url")?,
        events: s("/endpoints/events_url")?,
        state: s("/endpoints/state_url")?,
    })
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if let Err(e) = run(args).await {
        eprintln!("agentaddress-scale-sim: error: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(args.wait + 30))
        .pool_max_idle_per_host(args.clients.max(args.waiters) + 8)
        .build()
        .map_err(|e| e.to_string())?;
    let base = args.url.trim_end_matches('/').to_owned();
    let proxy = args.proxy.trim_end_matches('/').to_owned();
    let n = args.addresses;
    let c = args.clients;
    let mut phases = Vec::new();

    let create_url = format!("{base}/api/v1/addresses");
    let (p, bodies) = phase(
        &http,
        &proxy,
        ("create", "create_address"),
        n,
        c,
        201,
        |i| {
            http.post(&create_url)
                .json(&json!({"name": format!("sim {i}"), "task_id": "scale-sim"}))
                .send()
        },
    )
    .await?;
    phases.push(p);
    let addresses: Arc<Vec<Address>> = Arc::new(bodies.iter().filter_map(address).collect());
    if addresses.len() < n {
        return Err(format!(
            "only {} of {n} addresses were created",
            addresses.len()
        ));
    }

    let kb = "x".repeat(1_000);
    let (p, _) = phase(
        &http,
        &proxy,
        ("delivery, 1 KB", "delivery_1kb"),
        n,
        c,
        202,
        |i| {
            http.post(&addresses[i].inbox)
                .json(&json!({"type": "sim.delivery", "data": {"pad": kb}}))
                .send()
        },
    )
    .await?;
    phases.push(p);

    let (p, _) = phase(
        &http,
        &proxy,
        ("state CAS write, 1 KB", "state_cas_1kb"),
        n,
        c,
        200,
        |i| {
            http.put(format!("{}/progress", addresses[i].state))
                .bearer_auth(&addresses[i].token)
                .json(&json!({"value": {"pad": kb}, "if_revision": 0}))
                .send()
        },
    )
    .await?;
    phases.push(p);

    let (p, _) = phase(
        &http,
        &proxy,
        ("page read (2 events)", "page_of_ten"),
        n,
        c,
        200,
        |i| {
            http.get(format!("{}?after=0", addresses[i].events))
                .bearer_auth(&addresses[i].token)
                .send()
        },
    )
    .await?;
    phases.push(p);

    let w = args.waiters.min(n);
    if w > 0 {
        let wait = args.wait;
        let (p, _) = phase(
            &http,
            &proxy,
            ("idle long poll", "idle_long_poll_25s"),
            w,
            w,
            200,
            |i| {
                http.get(format!("{}?after=2&wait={wait}", addresses[i].events))
                    .bearer_auth(&addresses[i].token)
                    .send()
            },
        )
        .await?;
        phases.push(p);
    }

    println!(
        "{n} addresses on {base}, {c} requests in flight ({w} idle long polls of {} s held at \
         once)\n",
        args.wait
    );
    println!(
        "| phase | requests | per s | p50 ms | p99 ms | failed | DynamoDB requests each | read \
         units each | write units each | Lambda concurrency (rate × mean duration) | model row |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for p in &phases {
        println!("{}", p.row());
    }
    if let Some(path) = &args.json {
        let doc = json!({
            "addresses": n,
            "clients": c,
            "waiters": w,
            "wait_seconds": args.wait,
            "phases": phases.iter().map(Phase::json).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let failed: usize = phases.iter().map(|p| p.failed).sum();
    if failed > 0 {
        return Err(format!("{failed} requests failed"));
    }
    Ok(())
}
