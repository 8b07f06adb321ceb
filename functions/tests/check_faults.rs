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

use agentaddress_blackbox::check::{self, Config};
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
