//! `agentaddress-lambda-waits`: what waiting long polls would cost one Lambda execution
//! environment in the runtime's concurrent mode (Lambda Managed Instances, where one
//! environment takes up to `PerExecutionEnvironmentMaxConcurrency` requests at once):
//! docs/SCALE.md, "The runtime's concurrent mode".
//!
//! It drives the real router in-process over the real `DynamoStore` — the events function's
//! code — with N idle long polls waiting at once (nothing arrives; each runs its query loop for
//! its whole `wait`), for each N of `--polls`, and reports this process's CPU (100 % = one vCPU
//! busy), its resident memory, and the DynamoDB requests the loops sent. The anchor, in the same
//! run: one poll at a time, as a single-concurrency environment holds it.
//!
//! `AGENTADDRESS_TABLE=… AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000
//! agentaddress-lambda-waits [--polls 1,50,200,800] [--wait 25]` (a release build: the CPU
//! figures are the point).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::{self as api, ApiConfig, AppState};
use agentaddress_aws::AwsConfig;
use axum::Router;
use clap::Parser;
use serde_json::{json, Value};

#[path = "../in_process.rs"]
mod in_process;
#[path = "../procstat.rs"]
mod procstat;

#[derive(Parser, Debug)]
#[command(name = "agentaddress-lambda-waits", version)]
struct Args {
    /// Numbers of idle long polls held at once, one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1,50,200,800")]
    polls: Vec<usize>,
    /// Their `wait` seconds.
    #[arg(long, default_value_t = 25)]
    wait: u64,
}

/// One request to the router, as the waits' host.
async fn call(
    app: &Router, method: &str, uri: &str, token: Option<&str>, body: Option<&Value>,
) -> (u16, Value) {
    in_process::call(app, "waits.local", method, uri, token, body).await
}

fn main() {
    let args = Args::parse();
    // Two workers, as an environment of one or two vCPUs runs the concurrent runtime's tasks.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agentaddress-lambda-waits: error: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(args)) {
        eprintln!("agentaddress-lambda-waits: error: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), String> {
    let service = ServiceConfig::from_env()?;
    let aws = AwsConfig::from_env()?;
    let sdk = agentaddress_aws::sdk_config().await;
    let store = aws.store_with(&sdk, service.tombstone_seconds);
    let mut config = ApiConfig::from(&service);
    config.limits.polls_per_minute = 1_000_000;
    config.limits.creations_per_minute = 1_000_000;
    config.max_waiting_polls = 0;
    let app = api::router(AppState::new(Arc::new(store.clone()), config));
    let most = args.polls.iter().copied().max().unwrap_or(0);
    let mut addresses = Vec::with_capacity(most);
    for _ in 0..most {
        let (status, created) = call(
            &app,
            "POST",
            "/api/v1/addresses",
            None,
            Some(&json!({"name": "waits"})),
        )
        .await;
        if status != 201 {
            return Err(format!("create address: {status} {created}"));
        }
        let s = |p: &str| {
            created
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match (s("/address/id"), s("/credentials/read_token")) {
            (Some(id), Some(token)) => addresses.push((id, token)),
            _ => return Err(format!("create address: {created}")),
        }
    }
    let addresses = Arc::new(addresses);
    let pid = std::process::id();
    println!(
        "| idle polls at once | wait s | CPU % of one vCPU | CPU ms per poll-second | RSS MiB \
         | RSS KiB per poll | DynamoDB requests per poll-second | answered |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &args.polls {
        let (rss_before, _) = procstat::rss_mb(pid);
        let before = store.metrics();
        let cpu = procstat::CpuMeter::start(pid);
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(n);
        for i in 0..n {
            let (app, addresses, wait) = (app.clone(), addresses.clone(), args.wait);
            tasks.push(tokio::spawn(async move {
                let (id, token) = &addresses[i];
                let uri = format!("/api/v1/addresses/{id}/events?after=0&wait={wait}");
                call(&app, "GET", &uri, Some(token), None).await.0
            }));
        }
        // Memory is sampled while every poll waits (halfway).
        tokio::time::sleep(Duration::from_secs(args.wait / 2)).await;
        let (rss_waiting, _) = procstat::rss_mb(pid);
        let mut answered = 0;
        for t in tasks {
            if t.await.map_err(|e| e.to_string())? == 200 {
                answered += 1;
            }
        }
        let percent = cpu.percent();
        let wall = started.elapsed().as_secs_f64();
        let requests = store.metrics().requests - before.requests;
        let poll_seconds = n as f64 * wall;
        println!(
            "| {n} | {} | {percent:.1} | {:.3} | {rss_waiting:.1} | {:.1} | {:.2} | {answered}/{n} |",
            args.wait,
            percent / 100.0 * wall * 1000.0 / poll_seconds,
            ((rss_waiting - rss_before) * 1024.0 / n as f64).max(0.0),
            requests as f64 / poll_seconds,
        );
    }
    Ok(())
}
