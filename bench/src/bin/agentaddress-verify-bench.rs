//! Deliveries per second with and without a webhook signing secret (docs/API.md §15), same
//! server, same run: three addresses — plain, plain with an `Idempotency-Key` on each delivery,
//! and one with a Standard Webhooks secret (its deliveries keyed by their `webhook-id`) — each
//! driven in turn (A, B, C, A, B, C, …) by `--concurrency` clients posting 1 KB JSON bodies — the
//! verified address's signed as a Standard Webhooks sender signs them (each with its own
//! `webhook-id`, so none is a duplicate). Prints each round and the median of each.
//!
//! `agentaddress serve --max-retained-events 10000000` first (the default keeps 1,000 events),
//! then `agentaddress-verify-bench --url http://127.0.0.1:8080`.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use clap::Parser;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// The Standard Webhooks spec's example secret.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[derive(Debug, Parser)]
#[command(name = "agentaddress-verify-bench", version)]
struct Args {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Seconds per round.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Rounds per address (alternating).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

struct Target {
    inbox: String,
    /// Sends an `Idempotency-Key` of its own (what a verified delivery gets from its
    /// `webhook-id`), to tell the cost of verifying from the cost of an idempotency record.
    keyed: bool,
    /// The Standard Webhooks key, when the address verifies.
    key: Option<Vec<u8>>,
}

async fn create(http: &reqwest::Client, url: &str, body: Value) -> Result<String, String> {
    let r = http
        .post(format!("{url}/api/v1/addresses"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("create: {e}"))?;
    if r.status().as_u16() != 201 {
        return Err(format!("create: HTTP {}", r.status()));
    }
    let v: Value = r.json().await.map_err(|e| format!("create: {e}"))?;
    v["endpoints"]["inbox_url"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "create: no inbox_url".to_owned())
}

async fn round(
    http: &reqwest::Client, target: &Arc<Target>, body: &Arc<Vec<u8>>, seconds: u64,
    concurrency: usize, ids: &Arc<AtomicU64>,
) -> Result<f64, String> {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (http, target, body, ids) = (http.clone(), target.clone(), body.clone(), ids.clone());
        let (done, failed) = (done.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let mut req = http
                    .post(&target.inbox)
                    .header("content-type", "application/json");
                if target.keyed {
                    let id = format!("key_{}", ids.fetch_add(1, Ordering::Relaxed));
                    req = req.header("idempotency-key", id);
                }
                if let Some(key) = &target.key {
                    let id = format!("msg_{}", ids.fetch_add(1, Ordering::Relaxed));
                    let t = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs())
                        .to_string();
                    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else {
                        return;
                    };
                    m.update(format!("{id}.{t}.").as_bytes());
                    m.update(&body);
                    let sig = STANDARD.encode(m.finalize().into_bytes());
                    req = req
                        .header("webhook-id", id)
                        .header("webhook-timestamp", t)
                        .header("webhook-signature", format!("v1,{sig}"));
                }
                match req.body(body.as_ref().clone()).send().await {
                    Ok(r) if r.status().as_u16() == 202 => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("client task: {e}"))?;
    }
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(format!("{failed} deliveries were not answered 202"));
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let http = reqwest::Client::new();
    let plain = Arc::new(Target {
        inbox: create(&http, &args.url, json!({"name": "bench plain"})).await?,
        keyed: false,
        key: None,
    });
    let keyed = Arc::new(Target {
        inbox: create(&http, &args.url, json!({"name": "bench keyed"})).await?,
        keyed: true,
        key: None,
    });
    let verified = Arc::new(Target {
        inbox: create(
            &http,
            &args.url,
            json!({"name": "bench verified", "verification": {"scheme": "standard-webhooks", "secret": SECRET, "reject_unverified": true}}),
        )
        .await?,
        keyed: false,
        key: Some(
            STANDARD
                .decode(SECRET.trim_start_matches("whsec_"))
                .map_err(|e| e.to_string())?,
        ),
    });
    // 1 KB of JSON, as the main benchmark's deliveries.
    let body = Arc::new(
        json!({"type": "bench.delivery", "data": {"pad": "x".repeat(960)}})
            .to_string()
            .into_bytes(),
    );
    let ids = Arc::new(AtomicU64::new(0));
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..args.rounds {
        let (s, n) = (args.seconds, args.concurrency);
        let x = round(&http, &plain, &body, s, n, &ids).await?;
        let k = round(&http, &keyed, &body, s, n, &ids).await?;
        let y = round(&http, &verified, &body, s, n, &ids).await?;
        println!(
            "round {}: plain {x:.0}/s, plain with Idempotency-Key {k:.0}/s, verified {y:.0}/s",
            r + 1
        );
        a.push(x);
        b.push(y);
        c.push(k);
    }
    let (x, y, k) = (median(a), median(b), median(c));
    println!(
        "summary: deliveries_per_s_plain={x:.0} deliveries_per_s_keyed={k:.0} \
         deliveries_per_s_verified={y:.0} verified_vs_plain={:.3} verified_vs_keyed={:.3}",
        y / x,
        y / k
    );
    Ok(())
}
