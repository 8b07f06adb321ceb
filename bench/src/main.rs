//! `agentaddress-bench`: the load generator of `scripts/bench`.
//!
//! Starts `agentaddress serve` (embedded SQLite, `synchronous=FULL`) and then a single-member
//! etcd (default durability) on loopback, one after the other, and drives both with the same
//! shapes over HTTP/1.1 JSON:
//!
//! | phase   | agentaddress                                 | etcd (v3 JSON gateway)                          |
//! |---------|----------------------------------------------|-------------------------------------------------|
//! | cas     | `PUT state/{key}` with `if_revision`, 1 KB    | txn: compare `mod_revision`, put; else range     |
//! | deliver | `POST {inbox_url}`, 1 KB                     | txn on the feed's counter key: put counter+event |
//! | read    | `GET events?after=R&limit=10`                 | range of 10 event keys after R                  |
//! | delay   | long poll `after=cursor&wait=25` per feed     | watch on the feed's prefix                      |
//! | idle    | 10,000 long polls held open: HTTP/1.1, a connection each; then HTTP/2, 100 connections | 10,000 watches held open (HTTP/1.1) |
//! | email   | SMTP (`serve --smtp-listen`): 10 KB messages with a 50 KB attachment from 16 senders; then the delay from `250` to a waiting long poll | — (no mail door) |
//!
//! Latencies go to HdrHistograms (microseconds, 3 significant digits). The server's RSS and CPU
//! come from `/proc/<pid>`. The last line is the summary line `scripts/bench` documents.
#![forbid(unsafe_code)]

mod procstat;
mod systems;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use systems::{Config, Figures, Variant};

#[derive(Debug, Parser)]
#[command(about = "agentaddress serve against etcd: same shapes, same run")]
struct Args {
    /// The `agentaddress` binary (a release build).
    #[arg(long)]
    agentaddress: PathBuf,
    /// The `etcd` binary.
    #[arg(long, default_value = "etcd")]
    etcd: PathBuf,
    /// Where databases and logs go (emptied first).
    #[arg(long, default_value = "target/bench")]
    work_dir: PathBuf,
    /// Short phases (about a minute per system).
    #[arg(long)]
    quick: bool,
    /// Concurrent agents in the throughput phases.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Seconds per throughput phase (default 8 with --quick, else 30).
    #[arg(long)]
    seconds: Option<u64>,
    /// Long polls (and etcd watches) held open in the idle phase.
    #[arg(long, default_value_t = 10_000)]
    idle_polls: usize,
    /// Also run agentaddress with each optimisation turned off (before/after ratios).
    #[arg(long)]
    ablations: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let seconds = args.seconds.unwrap_or(if args.quick { 8 } else { 30 });
    let config = Config {
        clients: args.clients.max(1),
        phase: Duration::from_secs(seconds.max(1)),
        idle_polls: args.idle_polls,
        delay_samples: if args.quick { 1_000 } else { 4_000 },
        work_dir: args.work_dir.clone(),
    };
    if let Err(e) = std::fs::create_dir_all(&config.work_dir) {
        eprintln!("bench: cannot create {}: {e}", config.work_dir.display());
        return ExitCode::FAILURE;
    }
    println!(
        "bench: {} agents, {} s per throughput phase, {} idle polls, {} delay samples, work dir {}",
        config.clients,
        seconds,
        config.idle_polls,
        config.delay_samples,
        config.work_dir.display()
    );

    let ours = match systems::run_agentaddress(&args.agentaddress, &config, Variant::Default).await
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bench: agentaddress: {e}");
            return ExitCode::FAILURE;
        }
    };
    let etcd = match systems::run_etcd(&args.etcd, &config).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bench: etcd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ablations = Vec::new();
    if args.ablations {
        for v in [Variant::NoGroupCommit, Variant::NoWakeups] {
            match systems::run_agentaddress(&args.agentaddress, &config, v).await {
                Ok(f) => ablations.push((v, f)),
                Err(e) => {
                    eprintln!("bench: agentaddress ({}): {e}", v.label());
                    return ExitCode::FAILURE;
                }
            }
        }
    }

    print_table(&ours, &etcd);
    for (v, f) in &ablations {
        print_ablation(*v, &ours, f);
    }
    let mut failures = ours.errors.clone();
    failures.extend(etcd.errors.iter().map(|e| format!("etcd: {e}")));
    for e in &failures {
        println!("error: {e}");
    }
    // The idle figure of the summary: 10,000 polls held the way a server is meant to hold many
    // of them, multiplexed on HTTP/2 (a client waiting on many addresses, or a proxy in front
    // speaking h2c upstream). The table above has the HTTP/1.1 figure beside it.
    let idle_rss = match &ours.idle_http2 {
        Some(h2) => {
            println!(
                "idle polls: {:.1} MB over HTTP/2 ({} connections), {:.1} MB over HTTP/1.1 (a connection per poll); the summary has the HTTP/2 figure",
                h2.rss_mb,
                systems::HTTP2_CONNECTIONS,
                ours.idle.rss_mb
            );
            h2.rss_mb
        }
        None => ours.idle.rss_mb,
    };
    if let Some(m) = &ours.email {
        println!(
            "email (SMTP, {} senders, 10 KB + a 50 KB attachment): messages_per_s={:.0} \
             smtp_p50_ms={:.2} smtp_p99_ms={:.2} delay_p50_ms={:.2} delay_p99_ms={:.2} \
             delay_samples={} serve_cpu_pct={:.0}",
            args.clients.max(1),
            m.smtp.per_s,
            m.smtp.p50_ms,
            m.smtp.p99_ms,
            m.delay.p50_ms,
            m.delay.p99_ms,
            m.delay.samples,
            m.smtp.cpu_pct
        );
    }
    println!(
        "summary: cas_writes_per_s={:.0} etcd_cas_writes_per_s={:.0} ratio_cas_vs_etcd={:.2} \
         delivery_p50_ms={:.2} delivery_p99_ms={:.2} idle_polls_rss_mb={:.1}",
        ours.cas.per_s,
        etcd.cas.per_s,
        ratio(ours.cas.per_s, etcd.cas.per_s),
        ours.delay.p50_ms,
        ours.delay.p99_ms,
        idle_rss
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

fn row(name: &str, ours: f64, etcd: f64, digits: usize) {
    let cell = |v: f64, digits: usize| {
        if v.is_nan() {
            "-".to_owned()
        } else {
            format!("{v:.digits$}")
        }
    };
    println!(
        "{name:<38} {:>14} {:>14} {:>8}",
        cell(ours, digits),
        cell(etcd, digits),
        cell(ratio(ours, etcd), 2)
    );
}

fn print_table(o: &Figures, e: &Figures) {
    println!();
    println!(
        "{:<38} {:>14} {:>14} {:>8}",
        "figure", "agentaddress", "etcd", "ratio"
    );
    for (name, a, b) in [
        ("cas", &o.cas, &e.cas),
        ("deliver", &o.deliver, &e.deliver),
        ("read", &o.read, &e.read),
    ] {
        row(&format!("{name}: ops/s"), a.per_s, b.per_s, 0);
        row(&format!("{name}: latency p50 ms"), a.p50_ms, b.p50_ms, 2);
        row(&format!("{name}: latency p99 ms"), a.p99_ms, b.p99_ms, 2);
        row(&format!("{name}: latency max ms"), a.max_ms, b.max_ms, 2);
        row(&format!("{name}: server CPU %"), a.cpu_pct, b.cpu_pct, 0);
    }
    row(
        "cas: conflicts (hot key) per s",
        o.cas_conflicts_per_s,
        e.cas_conflicts_per_s,
        0,
    );
    row("delivery delay p50 ms", o.delay.p50_ms, e.delay.p50_ms, 2);
    row("delivery delay p99 ms", o.delay.p99_ms, e.delay.p99_ms, 2);
    row("delivery delay max ms", o.delay.max_ms, e.delay.max_ms, 2);
    row(
        "delivery delay samples",
        o.delay.samples as f64,
        e.delay.samples as f64,
        0,
    );
    row(
        "server peak RSS MB (load phases)",
        o.peak_rss_mb,
        e.peak_rss_mb,
        1,
    );
    row(
        "idle: requests held open",
        o.idle.held as f64,
        e.idle.held as f64,
        0,
    );
    row("idle: server RSS MB", o.idle.rss_mb, e.idle.rss_mb, 1);
    row("idle: server CPU %", o.idle.cpu_pct, e.idle.cpu_pct, 1);
    if let Some(h2) = &o.idle_http2 {
        // etcd's JSON gateway takes HTTP/1.1 only: its column stays empty.
        let name = format!("idle HTTP/2 ({} conns):", systems::HTTP2_CONNECTIONS);
        row(&format!("{name} held open"), h2.held as f64, f64::NAN, 0);
        row(&format!("{name} RSS MB"), h2.rss_mb, f64::NAN, 1);
        row(&format!("{name} CPU %"), h2.cpu_pct, f64::NAN, 1);
    }
    println!();
}

fn print_ablation(v: Variant, on: &Figures, off: &Figures) {
    println!("ablation: {} (optimisation on / off, same run)", v.label());
    match v {
        Variant::NoGroupCommit => {
            println!(
                "  cas ops/s {:.0} / {:.0} = {:.2}x; deliver ops/s {:.0} / {:.0} = {:.2}x",
                on.cas.per_s,
                off.cas.per_s,
                ratio(on.cas.per_s, off.cas.per_s),
                on.deliver.per_s,
                off.deliver.per_s,
                ratio(on.deliver.per_s, off.deliver.per_s)
            );
        }
        Variant::NoWakeups => {
            println!(
                "  delivery delay p50 {:.2} / {:.2} ms = {:.2}x faster; p99 {:.2} / {:.2} ms; idle CPU {:.1} / {:.1} %",
                on.delay.p50_ms,
                off.delay.p50_ms,
                ratio(off.delay.p50_ms, on.delay.p50_ms),
                on.delay.p99_ms,
                off.delay.p99_ms,
                on.idle.cpu_pct,
                off.idle.cpu_pct
            );
        }
        Variant::Default => {}
    }
}
