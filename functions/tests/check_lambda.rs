//! `agentaddress-check` (the invariant checker of `agentaddress_blackbox::check`) against the
//! local Lambda stack: the real function binaries under `cargo lambda watch` over DynamoDB
//! Local, with the server's default limits, and wake hooks to a receiver of the checker's.
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL`; without it this test
//! fails loudly, never skips. Each function has 8 instances that serve one request at a time,
//! so the workload uses 8 clients (plus one or two consumers per active address). The seed is
//! fixed (override with `AGENTADDRESS_CHECK_SEED`), and so is the count of operations (12,000;
//! override with `AGENTADDRESS_CHECK_LAMBDA_OPS`).

use agentaddress_blackbox::check::{self, Config};

use agentaddress_blackbox::stack_env as env;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checker_finds_no_anomaly_on_the_lambda_stack() {
    let url = env("AGENTADDRESS_LAMBDA_URL");
    let seed = match std::env::var("AGENTADDRESS_CHECK_SEED") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("AGENTADDRESS_CHECK_SEED={s:?} is not a u64: {e}")),
        _ => 3_141_592,
    };
    // Fewer than serve's 20,000: every request here is an invocation through `cargo lambda
    // watch` (tens per second on this machine, beside the rest of the suite). The soak
    // (docs/PERFORMANCE.md) is where the volume is; override with AGENTADDRESS_CHECK_LAMBDA_OPS.
    let ops: u64 = match std::env::var("AGENTADDRESS_CHECK_LAMBDA_OPS") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("AGENTADDRESS_CHECK_LAMBDA_OPS={s:?} is not a count: {e}")),
        _ => 12_000,
    };
    let mut config = Config::new(&url, ops, 8, seed);
    // Email through the raw-MIME webhook door (`email-api`, the stored copy in the S3
    // emulator) is part of the mix.
    config.email_ingest_secret = Some(env("AGENTADDRESS_TEST_INGEST_SECRET"));
    // Each address has a wake hook to the checker's receiver on loopback (the local stack
    // allows private receivers): every matching event must be covered by a signed 2xx wake,
    // sent by the `wake` function from the wake queue (docs/API.md §19).
    config.wakes = true;
    config.verbose = true;
    println!("agentaddress-check: seed {seed} against {url}");
    let report = check::run(config).await.expect("the check could not run");
    println!("{}", report.summary());
    println!("{}", report.last_line());
    assert!(
        report.ops >= ops,
        "only {} of {ops} operations were issued",
        report.ops
    );
    for (kind, label) in [
        ("put_cas_increment", "200"),
        ("deliver_idempotent", "202"),
        ("deliver_idempotent", "200"),
        ("poll", "200"),
        ("ack", "200"),
        ("email", "200"),
    ] {
        let n = report
            .by_kind
            .get(kind)
            .and_then(|h| h.get(label))
            .copied()
            .unwrap_or(0);
        assert!(n > 0, "the workload never got {label} for {kind}");
    }
    assert!(
        report.anomalies.is_empty(),
        "{} anomalies:\n{}",
        report.anomalies.len(),
        report.summary()
    );
}
