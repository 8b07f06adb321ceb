//! Local init time of Lambda function binaries: starts each with `AWS_LAMBDA_RUNTIME_API`
//! pointing at a stand-in Runtime API on loopback and times process start → its first
//! `GET /2018-06-01/runtime/invocation/next` (the moment the runtime is ready for an event:
//! what Lambda bills as init). Five starts per binary; prints the median and the slowest.
//!
//! `agentaddress-lambda-init [--env K=V]... BINARY...`
#![forbid(unsafe_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

const STARTS: usize = 5;

/// Local init time of Lambda function binaries: starts each with `AWS_LAMBDA_RUNTIME_API`
/// pointing at a stand-in Runtime API on loopback and times process start → its first
/// `GET /2018-06-01/runtime/invocation/next` (the moment the runtime is ready for an event:
/// what Lambda bills as init). Five starts per binary; prints the median and the slowest.
#[derive(Debug, Parser)]
#[command(name = "agentaddress-lambda-init", version)]
struct Args {
    /// An environment variable for every binary started, as K=V (repeatable).
    #[arg(long, value_name = "K=V", value_parser = key_value)]
    env: Vec<(String, String)>,
    /// The function binaries to time, one after the other.
    #[arg(value_name = "BINARY")]
    binaries: Vec<String>,
}

fn key_value(kv: &str) -> Result<(String, String), String> {
    kv.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| "expected K=V".to_owned())
}

async fn one_start(bin: &str, env: &[(String, String)]) -> Result<Duration, String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let api = listener
        .local_addr()
        .map_err(|e| format!("local addr: {e}"))?;
    let started = Instant::now();
    let mut child = Command::new(bin)
        .env("AWS_LAMBDA_RUNTIME_API", api.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "init-bench")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "init-bench")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "init-bench")
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let result = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (mut sock, _) = listener
                .accept()
                .await
                .map_err(|e| format!("accept: {e}"))?;
            let mut buf = vec![0u8; 4096];
            let n = sock
                .read(&mut buf)
                .await
                .map_err(|e| format!("read: {e}"))?;
            let head = String::from_utf8_lossy(&buf[..n]);
            if head.starts_with("GET /2018-06-01/runtime/invocation/next") {
                return Ok(started.elapsed());
            }
        }
    })
    .await
    .map_err(|_| format!("{bin} did not ask for an event within 10 s"))
    .and_then(|r| r);
    let _ = child.kill();
    let _ = child.wait();
    result
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Args {
        env,
        binaries: bins,
    } = Args::parse();
    let mut failed = false;
    println!(
        "{:<28} {:>12} {:>12}",
        "function binary", "init p50 ms", "init max ms"
    );
    for bin in &bins {
        let mut times = Vec::new();
        for _ in 0..STARTS {
            match one_start(bin, &env).await {
                Ok(d) => times.push(d),
                Err(e) => {
                    eprintln!("{e}");
                    failed = true;
                    break;
                }
            }
        }
        times.sort();
        if let (Some(mid), Some(max)) = (times.get(times.len() / 2), times.last()) {
            let name = std::path::Path::new(bin)
                .file_name()
                .map_or_else(|| bin.clone(), |n| n.to_string_lossy().into_owned());
            println!(
                "{name:<28} {:>12.1} {:>12.1}",
                mid.as_secs_f64() * 1000.0,
                max.as_secs_f64() * 1000.0
            );
        }
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn kv(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn the_flags_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn the_documented_invocations_parse() {
        // scripts/bench-lambda's invocation.
        let a = Args::try_parse_from([
            "agentaddress-lambda-init",
            "--env",
            "AGENTADDRESS_TABLE=agentaddress",
            "--env",
            "AGENTADDRESS_PURGE_QUEUE_URL=http://127.0.0.1:4566/000000000000/agentaddress-purge",
            "--env",
            "AGENTADDRESS_PUBLIC_URL=http://127.0.0.1:9000",
            "target/release/agentaddress-inbox",
            "target/release/agentaddress-events",
        ])
        .expect("bench-lambda's invocation");
        assert_eq!(
            a.env,
            [
                kv("AGENTADDRESS_TABLE", "agentaddress"),
                kv(
                    "AGENTADDRESS_PURGE_QUEUE_URL",
                    "http://127.0.0.1:4566/000000000000/agentaddress-purge"
                ),
                kv("AGENTADDRESS_PUBLIC_URL", "http://127.0.0.1:9000"),
            ]
        );
        assert_eq!(
            a.binaries,
            [
                "target/release/agentaddress-inbox",
                "target/release/agentaddress-events"
            ]
        );
        // Flags and binaries in any order, `--env=K=V`, an empty value, `=` in the value.
        let a = Args::try_parse_from(["x", "bin-a", "--env=A=", "bin-b", "--env", "B=c=d"])
            .expect("mixed order");
        assert_eq!(a.env, [kv("A", ""), kv("B", "c=d")]);
        assert_eq!(a.binaries, ["bin-a", "bin-b"]);
        let a = Args::try_parse_from(["x"]).expect("nothing to time");
        assert!(a.env.is_empty() && a.binaries.is_empty());
    }

    #[test]
    fn a_mistyped_flag_or_value_is_an_error() {
        for argv in [
            &["x", "--envs", "A=B", "bin"][..],
            &["x", "-e", "A=B", "bin"][..],
            &["x", "--env", "A", "bin"][..],
            &["x", "bin", "--env"][..],
        ] {
            let e = Args::try_parse_from(argv).expect_err("must not parse");
            assert_eq!(e.exit_code(), 2, "{argv:?}: {e}");
        }
    }
}
