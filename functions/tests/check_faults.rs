//! Fault injection end to end: `agentaddress-check` against a second local Lambda stack whose
//! DynamoDB traffic goes through `agentaddress-faultproxy` (`scripts/lambda-local --faults`),
//! which fails a share of requests before forwarding them (500s, throttling) and drops a share
//! of responses after forwarding them (the write applied, the function sees a reset). The
//! checker must still find 0 anomalies: an ambiguous outcome is never applied twice, and never
//! answered with a wrong definite answer.
//!
//! `scripts/test` starts that stack and passes `AGENTADDRESS_LAMBDA_FAULTS_URL` (the API) and
//! `AGENTADDRESS_FAULTPROXY_URL` (the proxy, for its counters); without them this test fails
//! loudly, never skips.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentaddress_blackbox::check::{self, Config};
use agentaddress_blackbox::Client;
use serde_json::Value;

use agentaddress_blackbox::stack_env as env;

async fn stats(proxy: &str) -> Value {
    let url = format!("{proxy}/__faultproxy/stats");
    let r = reqwest::get(&url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Injected failures before forwarding, all kinds together.
fn failed_before(s: &Value) -> u64 {
    count(&s["failed_before"]["total"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checker_finds_no_anomaly_with_dynamodb_faults() {
    let url = env("AGENTADDRESS_LAMBDA_FAULTS_URL");
    let proxy = env("AGENTADDRESS_FAULTPROXY_URL");
    let ops: u64 = std::env::var("AGENTADDRESS_CHECK_FAULT_OPS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(6_000);
    let seed = 2_718_281;
    let before = stats(&proxy).await;

    let mut config = Config::new(&url, ops, 8, seed);
    // Email through the raw-MIME webhook door (`email-api`, the stored copy in the S3
    // emulator) is part of the mix.
    config.email_ingest_secret = Some(env("AGENTADDRESS_TEST_INGEST_SECRET"));
    config.verbose = true;
    println!(
        "agentaddress-check: seed {seed}, {ops} operations against {url} (faults via {proxy})"
    );
    let report = check::run(config).await.expect("the check could not run");
    let after = stats(&proxy).await;

    let requests = count(&after["requests"]) - count(&before["requests"]);
    let failed = failed_before(&after) - failed_before(&before);
    let dropped = count(&after["dropped_after"]) - count(&before["dropped_after"]);
    let tx = |s: &Value, field: &str| count(&s["operations"]["TransactWriteItems"][field]);
    let tx_dropped = tx(&after, "dropped_after") - tx(&before, "dropped_after");
    let tx_failed = tx(&after, "failed_before") - tx(&before, "failed_before");
    println!("{}", report.summary());
    println!(
        "faultproxy during the check: {requests} DynamoDB requests, {failed} failed before \
         forwarding, {dropped} responses dropped after forwarding (TransactWriteItems: {tx_failed} \
         failed, {tx_dropped} dropped); {} HTTP outcomes unknown to the checker",
        report.unknown_outcomes()
    );
    println!("{}", report.last_line());

    assert!(
        report.ops >= ops,
        "only {} of {ops} operations were issued",
        report.ops
    );
    // The faults really were in the path, on the writes that matter.
    assert!(
        requests > 1000,
        "only {requests} DynamoDB requests went through the proxy"
    );
    assert!(failed > 0, "no request was failed before forwarding");
    assert!(
        tx_dropped > 0,
        "no append transaction had its response dropped: the ambiguous path was not exercised"
    );
    let emails = report
        .by_kind
        .get("email")
        .and_then(|h| h.get("200"))
        .copied()
        .unwrap_or(0);
    assert!(emails > 0, "no email was appended through the faults");
    assert!(
        report.anomalies.is_empty(),
        "{} anomalies with DynamoDB faults:\n{}",
        report.anomalies.len(),
        report.summary()
    );
}

/// One `POST /__faultproxy/config` with these rules (replacing the proxy's; the random rates
/// stay as they are).
async fn set_rules(proxy: &str, rules: Value) {
    let url = format!("{proxy}/__faultproxy/config");
    let r = reqwest::Client::new()
        .post(&url)
        .json(&serde_json::json!({ "rules": rules }))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    assert!(r.status().is_success(), "POST {url}: {}", r.status());
}

/// A hot partition: every DynamoDB request naming `id` beyond `per_second` a second is
/// throttled, as DynamoDB throttles a partition beyond its share.
fn hot(id: &str, per_second: u32) -> Value {
    serde_json::json!({"key": id, "per_second": per_second, "action": "throttling", "count": u32::MAX})
}

/// Requests naming `id` go through untouched (no random fault): the latency probe's addresses.
fn untouched(id: &str) -> Value {
    serde_json::json!({"key": id, "action": "pass", "count": u32::MAX})
}

fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort();
    let i = (samples.len() * 99).div_ceil(100).saturating_sub(1);
    samples.get(i).copied().unwrap_or_default()
}

/// What the hot sender got for one delivery.
#[derive(Debug)]
struct Sent {
    key: String,
    status: u16,
    retry_after: bool,
    code: String,
}

/// docs/SCALE.md, "Hot addresses": DynamoDB throttling one address's partition (the fault
/// proxy throttles every request naming that address beyond a few a second) degrades that
/// address alone. Its deliveries are answered 503 `unavailable` with `Retry-After` once the
/// SDK's retries are spent, nothing of a refused delivery is written (each is accepted as new
/// when re-sent with its key later), the checker — whose most contended address is throttled
/// the same way — finds 0 anomalies, and deliveries to other addresses keep their latency: the
/// p99 in the windows with the hot sender stays within 2× of the windows without it. Windows of
/// each kind alternate during one run, so the load of other tests weighs on both alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_address_degrades_alone() {
    let url = env("AGENTADDRESS_LAMBDA_FAULTS_URL");
    let proxy = env("AGENTADDRESS_FAULTPROXY_URL");
    const WINDOW: Duration = Duration::from_secs(8);
    const HOT_PER_SECOND: u32 = 8;
    const SENDERS: usize = 3;

    let client = Client::behind_gateway(&url);
    let hot_address = client.new_address().await;
    let mut probes = Vec::new();
    for _ in 0..3 {
        probes.push(client.new_address().await);
    }
    let cold_rules: Vec<Value> = probes.iter().map(|a| untouched(&a.id)).collect();
    set_rules(&proxy, Value::Array(cold_rules.clone())).await;

    // The checker runs the whole time; its first address (the one its clients contend for)
    // is hot in the hot windows.
    let mut config = Config::new(&url, 1_500, 4, 1_618_033);
    config.verbose = false;
    let progress = config.progress.clone();
    let checker = tokio::spawn(check::run(config));

    let is_hot = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    // The noisy sender: deliveries to the hot address as fast as they are answered, never
    // waiting for Retry-After. Each outcome is kept.
    let outcomes: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let mut senders = Vec::new();
    for s in 0..SENDERS {
        let (client, a, is_hot, stop, outcomes) = (
            client.clone(),
            hot_address.clone(),
            is_hot.clone(),
            stop.clone(),
            outcomes.clone(),
        );
        senders.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if !is_hot.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                n += 1;
                let key = format!("hot-{s}-{n}");
                let body = serde_json::json!({"type": "hot.ping", "data": {"key": key}});
                let r = client.deliver(&a, &body, Some(&key)).await;
                let sent = Sent {
                    status: r.status,
                    retry_after: r.headers.get("retry-after").is_some(),
                    code: r.code().to_owned(),
                    key,
                };
                outcomes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(sent);
            }
        }));
    }

    // The probe: one delivery at a time to the cold addresses, timed, by the kind of window.
    let mut cold: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut windows = [0u32; 2];
    let mut hot_id = String::new();
    let mut n = 0u64;
    let started = Instant::now();
    loop {
        let done = progress.workload_done();
        let kind = usize::from(!done && windows[0] > windows[1]);
        if done && windows[0] >= 3 && windows[1] >= 3 {
            break;
        }
        if hot_id.is_empty() {
            hot_id = progress.addresses().first().cloned().unwrap_or_default();
        }
        let mut rules = cold_rules.clone();
        if kind == 1 {
            rules.insert(0, hot(&hot_address.id, HOT_PER_SECOND));
            if !hot_id.is_empty() {
                rules.insert(0, hot(&hot_id, HOT_PER_SECOND));
            }
        }
        set_rules(&proxy, Value::Array(rules)).await;
        is_hot.store(kind == 1, Ordering::Relaxed);
        windows[kind] += 1;
        let window_end = Instant::now() + WINDOW;
        while Instant::now() < window_end {
            n += 1;
            let a = &probes[(n % 3) as usize];
            let t = Instant::now();
            let r = client
                .deliver(
                    a,
                    &serde_json::json!({"type": "probe", "data": {"n": n}}),
                    None,
                )
                .await;
            cold[kind].push(t.elapsed());
            r.expect_status(202, "a delivery to a cold address");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    is_hot.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.await.expect("a hot sender panicked");
    }
    set_rules(&proxy, Value::Array(cold_rules)).await;
    let report = checker
        .await
        .expect("the checker panicked")
        .expect("the check could not run");
    println!("{}", report.summary());

    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap_or_else(|e| e.into_inner()));
    let refused: Vec<&Sent> = outcomes.iter().filter(|o| o.status == 503).collect();
    let accepted: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.status == 202)
        .map(|o| o.key.as_str())
        .collect();
    let (base, with_hot) = (p99(&mut cold[0]), p99(&mut cold[1]));
    println!(
        "hot address: {} deliveries, {} accepted, {} refused 503; cold probe: {} + {} deliveries \
         in {} + {} windows of {WINDOW:?}; p99 without the hot sender {base:?}, with it \
         {with_hot:?} ({:.2}×); {:.0} s",
        outcomes.len(),
        accepted.len(),
        refused.len(),
        cold[0].len(),
        cold[1].len(),
        windows[0],
        windows[1],
        with_hot.as_secs_f64() / base.as_secs_f64().max(1e-9),
        started.elapsed().as_secs_f64()
    );
    let others: Vec<_> = outcomes
        .iter()
        .filter(|o| o.status != 503 && o.status != 202)
        .collect();
    assert!(
        others.is_empty(),
        "answers other than 202 or 503: {others:?}"
    );
    assert!(
        !refused.is_empty(),
        "the hot address was never refused: the throttle did not bite"
    );
    for o in &refused {
        assert_eq!(
            o.code, "unavailable",
            "{}: a throttled delivery's code",
            o.key
        );
        assert!(
            o.retry_after,
            "{}: a throttled delivery carries Retry-After",
            o.key
        );
    }
    assert!(
        report.anomalies.is_empty(),
        "{} anomalies with a hot address:\n{}",
        report.anomalies.len(),
        report.summary()
    );
    // Nothing half-written: every refused delivery is new when re-sent, every accepted one is a
    // duplicate, and the feed holds each exactly once.
    for o in &refused {
        let body = serde_json::json!({"type": "hot.ping", "data": {"key": o.key}});
        client
            .deliver(&hot_address, &body, Some(&o.key))
            .await
            .expect_status(202, "a refused delivery re-sent");
    }
    for key in &accepted {
        let body = serde_json::json!({"type": "hot.ping", "data": {"key": key}});
        let r = client.deliver(&hot_address, &body, Some(key)).await;
        r.expect_status(200, "an accepted delivery re-sent");
    }
    let feed = client.read_all(&hot_address).await;
    let mut keys: Vec<&str> = feed
        .iter()
        .filter_map(|e| e["data"]["key"].as_str())
        .collect();
    assert_eq!(keys.len(), outcomes.len(), "one event per delivery");
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), outcomes.len(), "no delivery appended twice");
    assert!(
        with_hot <= base * 2,
        "the cold addresses' p99 with the hot sender ({with_hot:?}) is over twice the p99 \
         without it ({base:?})"
    );
}
