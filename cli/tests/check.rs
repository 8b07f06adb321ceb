//! `agentaddress-check` (the invariant checker of `agentaddress_blackbox::check`) against a real
//! `agentaddress serve` started with default settings: once undisturbed, and once while the
//! server is SIGKILLed at random moments and restarted on the same database file and port.
//!
//! The seed is fixed (override with `AGENTADDRESS_CHECK_SEED`) so a failure can be replayed;
//! the report — per-kind status histogram, anomalies — is printed either way.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use agentaddress_blackbox::check::{self, Config, Report};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::process::Child;

fn seed(default: u64) -> u64 {
    match std::env::var("AGENTADDRESS_CHECK_SEED") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("AGENTADDRESS_CHECK_SEED={s:?} is not a u64: {e}")),
        _ => default,
    }
}

/// The email ingest secret the servers are started with: the checker's mix then sends email
/// through the raw-MIME webhook door too.
const INGEST_SECRET: &str = "checker-ingest-secret-0123456789";

/// Starts `agentaddress serve --listen LISTEN --db DB` (default settings, and the email ingest
/// secret) and returns it with the base URL from its first stdout line.
async fn spawn(db: &Path, listen: &str) -> (Child, String) {
    common::spawn_serve(db, listen, &["--email-ingest-secret", INGEST_SECRET]).await
}

fn show(report: &Report) {
    println!("{}", report.summary());
    println!("{}", report.last_line());
}

/// `count` of `kind` answered with outcome `label`.
fn count(report: &Report, kind: &str, label: &str) -> u64 {
    report
        .by_kind
        .get(kind)
        .and_then(|h| h.get(label))
        .copied()
        .unwrap_or(0)
}

/// The run exercised what it claims to: successful and conflicting CAS increments, accepted
/// deliveries and their duplicates, rejected reused keys, feed polls and acks.
fn assert_mix(report: &Report) {
    for (kind, label) in [
        ("put_cas_increment", "200"),
        ("put_cas_increment", "409 revision_conflict"),
        ("deliver_idempotent", "202"),
        ("deliver_idempotent", "200"),
        ("deliver_other_body", "422 idempotency_key_reused"),
        ("deliver_lossy", "202"),
        ("delete_conditional", "200"),
        ("poll", "200"),
        ("ack", "200"),
        ("email", "200"),
    ] {
        assert!(
            count(report, kind, label) > 0,
            "the workload never got {label} for {kind}:\n{}",
            report.summary()
        );
    }
    assert!(
        report.events > 0 && report.consumers > 0,
        "{}",
        report.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checker_finds_no_anomaly_on_serve_with_default_settings() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, base) = common::spawn_serve(
        &dir.path().join("agentaddress.db"),
        "127.0.0.1:0",
        &[
            "--email-ingest-secret",
            INGEST_SECRET,
            "--allow-private-hooks",
        ],
    )
    .await;
    let ops = 20_000;
    let mut config = Config::new(&base, ops, 16, seed(20_261_130));
    config.verbose = true;
    // Every address has a wake hook for the deliveries, to a receiver on loopback: each
    // delivery must be covered by a signed wake.
    config.wakes = true;
    config.email_ingest_secret = Some(INGEST_SECRET.into());
    println!("agentaddress-check: seed {}", config.seed);
    let report = check::run(config).await.expect("the check could not run");
    show(&report);
    assert!(
        report.ops >= ops,
        "only {} of {ops} operations were issued",
        report.ops
    );
    assert_mix(&report);
    assert!(
        report.anomalies.is_empty(),
        "{} anomalies:\n{}",
        report.anomalies.len(),
        report.summary()
    );
}

/// A free TCP port on 127.0.0.1 (the server is restarted on the same one).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("local_addr").port()
}

async fn restart(db: &Path, listen: &str, base: &str) -> Child {
    let started = Instant::now();
    loop {
        let (child, b) = spawn(db, listen).await;
        if b == base {
            return child;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the restarted server listens on {b}, not {base}"
        );
        drop(child);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checker_finds_no_anomaly_while_serve_is_killed_and_restarted() {
    const KILLS: usize = 6;
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("agentaddress.db");
    let listen = format!("127.0.0.1:{}", free_port());
    let (first, base) = spawn(&db, &listen).await;
    let ops = 12_000;
    let seed = seed(7_070_707);
    let mut config = Config::new(&base, ops, 12, seed);
    config.email_ingest_secret = Some(INGEST_SECRET.into());
    config.verbose = true;
    println!("agentaddress-check: seed {seed}");
    let progress = config.progress.clone();
    let checker = tokio::spawn(check::run(config));

    // Kill points: one random request count in each of KILLS equal slices of 10 %..85 % of the
    // run, so kills are spread out and all fall while the workload runs.
    let mut rng = StdRng::seed_from_u64(seed ^ 0xdead);
    let slice = ops * 75 / 100 / KILLS as u64;
    let points: Vec<u64> = (0..KILLS as u64)
        .map(|i| ops / 10 + i * slice + rng.gen_range(0..slice))
        .collect();
    let mut server = Some(first);
    let mut kills = Vec::new();
    for p in points {
        while progress.issued() < p && !progress.workload_done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if progress.workload_done() {
            break;
        }
        if let Some(mut child) = server.take() {
            child.start_kill().expect("SIGKILL the server");
            child.wait().await.expect("reap the killed server");
        }
        kills.push(progress.issued());
        // Down for a moment: requests in flight were cut, new ones are refused.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..400))).await;
        server = Some(restart(&db, &listen, &base).await);
    }
    let report = checker
        .await
        .expect("the checker task failed")
        .expect("the check could not run");
    show(&report);
    println!(
        "SIGKILLed and restarted {} times, at requests {kills:?}; {} requests had an unknown outcome",
        kills.len(),
        report.unknown_outcomes()
    );
    assert!(
        kills.len() >= 5,
        "only {} kills happened while the workload ran (at {kills:?})",
        kills.len()
    );
    assert!(
        report.unknown_outcomes() > 0,
        "no request was cut or refused: the kills missed the workload"
    );
    assert!(report.ops >= ops, "only {} of {ops} operations", report.ops);
    assert_mix(&report);
    assert!(
        report.anomalies.is_empty(),
        "{} anomalies after {} kills:\n{}",
        report.anomalies.len(),
        kills.len(),
        report.summary()
    );
    drop(server);
}
