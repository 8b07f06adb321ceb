//! The benchmark harness itself, end to end with tiny phases: it starts `agentaddress serve`
//! and etcd, drives every phase against both, finds no error, and prints the summary line in
//! the documented format with real figures. (Speed is measured by `scripts/bench`, not here.)
//! `scripts/test` installs etcd (Debian package `etcd-server`); without it this test fails.

use std::path::PathBuf;
use std::process::Command;

fn sibling(name: &str) -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_agentaddress-bench"));
    let path = bench.with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo nextest run --workspace does)",
        path.display()
    );
    path
}

fn etcd() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("etcd is not installed: apt-get install etcd-server (scripts/test does)")
    })
}

#[test]
fn every_phase_runs_against_both_systems_and_the_summary_line_is_complete() {
    let work = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_agentaddress-bench"))
        .arg("--agentaddress")
        .arg(sibling("agentaddress"))
        .arg("--etcd")
        .arg(etcd())
        .arg("--work-dir")
        .arg(work.path())
        .args([
            "--quick",
            "--seconds",
            "1",
            "--clients",
            "4",
            "--idle-polls",
            "300",
        ])
        .output()
        .expect("run agentaddress-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed\n{stdout}\n{stderr}");
    assert!(!stdout.contains("error:"), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    let re = regex::Regex::new(
        r"^summary: cas_writes_per_s=(\d+) etcd_cas_writes_per_s=(\d+) ratio_cas_vs_etcd=([\d.]+) delivery_p50_ms=([\d.]+) delivery_p99_ms=([\d.]+) idle_polls_rss_mb=([\d.]+)$",
    )
    .expect("regex");
    let caps = re
        .captures(last)
        .unwrap_or_else(|| panic!("no summary line at the end:\n{stdout}"));
    let n = |i: usize| caps[i].parse::<f64>().expect("number");
    assert!(n(1) > 0.0 && n(2) > 0.0, "{last}");
    // A and B are printed rounded to integers, the ratio from the unrounded figures: at the
    // tiny counts of this smoke run the rounding alone moves A/B by several percent.
    let (lo, hi) = ((n(1) - 0.5) / (n(2) + 0.5), (n(1) + 0.5) / (n(2) - 0.5));
    assert!(
        n(3) >= lo - 0.005 && n(3) <= hi + 0.005,
        "ratio is A/B ({lo:.3}..{hi:.3}): {last}"
    );
    assert!(n(4) <= n(5), "p50 ≤ p99: {last}");
    assert!(n(6) > 1.0, "an RSS was read: {last}");
    // Every idle poll and watch was held open when the server was measured.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("idle: requests held open")
                && l.split_whitespace().filter(|w| *w == "300").count() == 2),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("idle HTTP/2 (100 conns): held open")
                && l.split_whitespace().any(|w| w == "300")),
        "every HTTP/2 idle poll was held open: {stdout}"
    );
    // The email phase: SMTP messages accepted, and every delay sample seen by a long poll.
    let email = regex::Regex::new(
        r"^email \(SMTP, 4 senders, 10 KB \+ a 50 KB attachment\): messages_per_s=(\d+) smtp_p50_ms=([\d.]+) smtp_p99_ms=([\d.]+) delay_p50_ms=([\d.]+) delay_p99_ms=([\d.]+) delay_samples=(\d+) serve_cpu_pct=(\d+)$",
    )
    .expect("regex");
    let m = stdout
        .lines()
        .find_map(|l| email.captures(l))
        .unwrap_or_else(|| panic!("no email line: {stdout}"));
    let e = |i: usize| m[i].parse::<f64>().expect("number");
    assert!(e(1) > 0.0, "messages were accepted: {stdout}");
    assert!(e(2) <= e(3) && e(4) <= e(5), "p50 ≤ p99: {stdout}");
    assert!(e(6) >= 20.0, "every delay sample was seen: {stdout}");
    // The summary's idle figure is the HTTP/2 one, and the line before it says so.
    let h2 = stdout
        .lines()
        .find(|l| l.starts_with("idle HTTP/2 (100 conns): RSS MB"))
        .and_then(|l| l.split_whitespace().nth(6))
        .unwrap_or_else(|| panic!("no HTTP/2 RSS row: {stdout}"));
    assert_eq!(format!("{:.1}", n(6)), h2, "{stdout}");
}
