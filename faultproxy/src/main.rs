//! `agentaddress-faultproxy`: the fault-injection proxy of [`agentaddress_faultproxy`] as a
//! process. Its first stdout line is `faultproxy listening on http://IP:PORT` (so a parent can
//! read the port); SIGTERM or SIGINT print one `faultproxy stats: …` line and exit 0.
#![forbid(unsafe_code)]

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use agentaddress_faultproxy::{FaultConfig, FaultProxy};
use clap::Parser;

/// A fault-injection proxy for DynamoDB (Local): fails requests before forwarding (HTTP 500,
/// throttling errors) and drops responses after forwarding (the write applied, the caller sees
/// its connection closed). GET /__faultproxy/stats answers the counters as JSON;
/// POST /__faultproxy/config {"fail_rate", "drop_rate", "seed", "rules"} changes them.
#[derive(Debug, Parser)]
#[command(name = "agentaddress-faultproxy", version)]
struct Args {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where DynamoDB answers, e.g. http://127.0.0.1:8000.
    #[arg(long)]
    upstream: String,
    /// Probability (0..1) that a request is answered with an injected error without forwarding.
    #[arg(long, default_value_t = 0.0)]
    fail_rate: f64,
    /// Probability (0..1) that a request is forwarded and its response then dropped.
    #[arg(long, default_value_t = 0.0)]
    drop_rate: f64,
    /// Seed of the RNG that decides each request (default: random).
    #[arg(long)]
    seed: Option<u64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FAULTPROXY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("faultproxy: error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let seed = args.seed.unwrap_or_else(rand::random);
    let config = FaultConfig::rates(args.fail_rate, args.drop_rate, seed);
    let proxy = match FaultProxy::start(args.listen, &args.upstream, config).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("faultproxy: error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "faultproxy listening on {}", proxy.url());
    let _ = writeln!(
        out,
        "faultproxy upstream {} fail_rate={} drop_rate={} seed={}",
        args.upstream, args.fail_rate, args.drop_rate, seed
    );
    let _ = out.flush();
    drop(out);

    let signal = wait_for_signal().await;
    let stats = proxy.shutdown().await;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "faultproxy stats: {}", stats.summary());
    let _ = out.flush();
    match signal {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultproxy: error: cannot wait for signals: {e}");
            ExitCode::from(2)
        }
    }
}

async fn wait_for_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
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
        // scripts/lambda-local --faults' invocation.
        let a = Args::try_parse_from([
            "agentaddress-faultproxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:8000",
            "--fail-rate",
            "0.05",
            "--drop-rate",
            "0.02",
            "--seed",
            "7",
        ])
        .expect("lambda-local's invocation");
        assert_eq!(a.listen, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!(a.upstream, "http://127.0.0.1:8000");
        assert_eq!((a.fail_rate, a.drop_rate, a.seed), (0.05, 0.02, Some(7)));
        let a = Args::try_parse_from(["x", "--upstream=http://127.0.0.1:8000"]).expect("defaults");
        assert_eq!(a.listen, SocketAddr::from(([127, 0, 0, 1], 0)));
        assert_eq!((a.fail_rate, a.drop_rate, a.seed), (0.0, 0.0, None));
    }

    #[test]
    fn a_mistyped_flag_or_value_is_an_error() {
        for argv in [
            &[
                "x",
                "--upstream",
                "http://127.0.0.1:8000",
                "--fail_rate",
                "0.1",
            ][..],
            &[
                "x",
                "--upstream",
                "http://127.0.0.1:8000",
                "--listen",
                "localhost",
            ][..],
            &["x", "--listen", "127.0.0.1:0"][..],
        ] {
            let e = Args::try_parse_from(argv).expect_err("must not parse");
            assert_eq!(e.exit_code(), 2, "{argv:?}: {e}");
        }
    }
}
