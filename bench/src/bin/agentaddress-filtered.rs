//! `agentaddress-filtered`: what a filtered read costs in time (docs/API.md §21), against a
//! running deployment (`serve`, or the local Lambda stack), started with a poll limit that
//! lets `--samples` reads through (`AGENTADDRESS_POLLS_PER_MINUTE=100000`).
//!
//! One address holds a full feed at the default limits: 999 small events of type `noise`, then
//! one `wanted`. Timed, one at a time, `--samples` times each:
//! - **anchor**: `GET events?after=0&limit=100`, a page of 100 events unfiltered;
//! - **filtered, no match**: `GET events?after=0&types=other` — 1,000 events examined, none
//!   returned (`next_cursor` 1000);
//! - **filtered, the last matches**: `GET events?after=0&types=wanted` — 1,000 examined, the
//!   last one returned.
//!
//! Prints p50, p99 and max of each, and each filtered read's p50 as a ratio of the anchor's.

use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

#[derive(Debug, Parser)]
#[command(name = "agentaddress-filtered", version)]
struct Args {
    /// Base URL of the deployment.
    #[arg(long)]
    url: String,
    /// Reads timed per kind.
    #[arg(long, default_value_t = 200)]
    samples: usize,
}

async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let http = reqwest::Client::new();
    let base = args.url.trim_end_matches('/').to_owned();
    let (status, created) = json_of(
        http.post(format!("{base}/api/v1/addresses"))
            .json(&json!({"name": "filtered bench"}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("create: {e}")),
    )
    .await;
    assert_eq!(status, 201, "create: {created}");
    let token = created["read_token"]
        .as_str()
        .or_else(|| created["credentials"]["read_token"].as_str())
        .unwrap_or_else(|| panic!("no read token in {created}"))
        .to_owned();
    let inbox = created["endpoints"]["inbox_url"]
        .as_str()
        .unwrap_or_else(|| panic!("no inbox_url in {created}"))
        .to_owned();
    let events = created["endpoints"]["events_url"]
        .as_str()
        .unwrap_or_else(|| panic!("no events_url in {created}"))
        .to_owned();
    for n in 1..=1_000u32 {
        let t = if n == 1_000 { "wanted" } else { "noise" };
        let (s, v) = json_of(
            http.post(&inbox)
                .json(&json!({"type": t, "data": {"n": n}}))
                .send()
                .await
                .unwrap_or_else(|e| panic!("deliver: {e}")),
        )
        .await;
        assert_eq!(s, 202, "deliver: {v}");
    }
    let mut p50s = Vec::new();
    for (label, query, returned, cursor) in [
        (
            "anchor: a page of 100, unfiltered",
            "after=0&limit=100",
            100,
            100,
        ),
        (
            "filtered, 1,000 examined, no match",
            "after=0&types=other",
            0,
            1_000,
        ),
        (
            "filtered, 1,000 examined, the last matches",
            "after=0&types=wanted",
            1,
            1_000,
        ),
    ] {
        let mut h = Histogram::<u64>::new(3).unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..args.samples {
            let started = Instant::now();
            let (s, v) = json_of(
                http.get(format!("{events}?{query}"))
                    .bearer_auth(&token)
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("read: {e}")),
            )
            .await;
            let took = started.elapsed();
            assert_eq!(s, 200, "{query}: {v}");
            assert_eq!(
                v["events"].as_array().map(Vec::len),
                Some(returned),
                "{query}"
            );
            assert_eq!(v["next_cursor"], cursor, "{query}: {v}");
            h.record(u64::try_from(took.as_micros()).unwrap_or(u64::MAX))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let ms = |us: u64| Duration::from_micros(us).as_secs_f64() * 1000.0;
        let p50 = ms(h.value_at_quantile(0.5));
        p50s.push(p50);
        let ratio = p50 / p50s[0];
        println!(
            "{label}: p50 {p50:.2} ms, p99 {:.2} ms, max {:.2} ms over {} reads ({ratio:.2}x the anchor's p50)",
            ms(h.value_at_quantile(0.99)),
            ms(h.max()),
            args.samples
        );
    }
}
