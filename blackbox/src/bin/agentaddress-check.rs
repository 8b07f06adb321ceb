//! `agentaddress-check --url URL --ops N --clients C [--seed S]`: drives a deployment with C
//! concurrent clients doing a random mix over HTTP, records every request and response, and
//! checks the invariants (see `agentaddress_blackbox::check`). Prints a summary per request
//! kind and, as its last line, `N operations, K anomalies`. Exits 1 when K > 0, 2 when the run
//! could not start.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use agentaddress_blackbox::check::{self, Config};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "agentaddress-check", version, about)]
struct Args {
    /// Base URL of the deployment.
    #[arg(long, env = "AGENTADDRESS_CHECK_URL")]
    url: String,
    /// HTTP requests to issue (the workload stops starting new steps there).
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    /// Concurrent workload clients.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    clients: u16,
    /// Seed of every random choice (default: from the clock; printed at start).
    #[arg(long)]
    seed: Option<u64>,
    /// `wait` seconds of the consumers' long polls.
    #[arg(long, default_value_t = 5.0)]
    poll_wait: f64,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
    /// The server's email ingest secret: the mix then also sends email through the raw-MIME
    /// webhook door, and checks each lands once.
    #[arg(
        long,
        env = "AGENTADDRESS_CHECK_EMAIL_INGEST_SECRET",
        hide_env_values = true
    )]
    email_ingest_secret: Option<String>,
    /// Check wake hooks (docs/API.md §19): every address gets a hook for the deliveries to a
    /// receiver on 127.0.0.1 (so the deployment must run on this machine and allow private
    /// receivers), and every delivery must be covered by a signed wake.
    #[arg(long)]
    wakes: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    println!("agentaddress-check: seed {seed}");
    let mut config = Config::new(&args.url, args.ops, usize::from(args.clients), seed);
    config.poll_wait_seconds = args.poll_wait.max(0.0);
    config.verbose = !args.quiet;
    config.email_ingest_secret = args.email_ingest_secret;
    config.wakes = args.wakes;
    match check::run(config).await {
        Ok(report) => {
            print!("{}", report.summary());
            println!("{}", report.last_line());
            if report.anomalies.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("agentaddress-check: cannot run: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_flags_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn the_documented_invocations_parse() {
        // The README's invocation.
        let a = Args::try_parse_from([
            "agentaddress-check",
            "--url",
            "http://127.0.0.1:8080",
            "--ops",
            "20000",
            "--clients",
            "16",
            "--seed",
            "42",
        ])
        .expect("the README's invocation");
        assert_eq!(a.url, "http://127.0.0.1:8080");
        assert_eq!((a.ops, a.clients, a.seed), (20_000, 16, Some(42)));
        let a = Args::try_parse_from([
            "agentaddress-check",
            "--url=http://127.0.0.1:9000",
            "--poll-wait=0.5",
            "--quiet",
        ])
        .expect("--flag=value");
        assert_eq!((a.ops, a.clients, a.seed), (20_000, 16, None));
        assert!(a.quiet && a.poll_wait == 0.5);
    }

    #[test]
    fn a_mistyped_flag_or_value_is_an_error() {
        for argv in [
            &["x", "--url", "http://127.0.0.1:8080", "--op", "10"][..],
            &["x", "--url", "http://127.0.0.1:8080", "--clients", "0"][..],
            &["x", "--url", "http://127.0.0.1:8080", "--seed", "s"][..],
            &["x", "--url", "http://127.0.0.1:8080", "extra"][..],
        ] {
            let e = Args::try_parse_from(argv).expect_err("must not parse");
            assert_eq!(e.exit_code(), 2, "{argv:?}: {e}");
        }
    }
}
