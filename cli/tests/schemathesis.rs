//! Schemathesis fuzzes a real `agentaddress serve` from its own `/openapi.json`
//! (`scripts/schemathesis`): every operation, with `not_a_server_error` and the response
//! conformance checks (status code, content type, headers, schema).
//!
//! The server runs with raised creation and poll rate limits (the fuzzer sends hundreds of
//! creations and feed reads a minute; at the defaults most answers would be 429s, which
//! conform but test nothing else) and a 1 s longest wait (so fuzzed `wait` values do not hold
//! requests for 25 s; event streams, likewise, close after half a second), and outbound email
//! relayed through its own SMTP door. Needs `scripts/schemathesis --install-only` to have run (the test
//! command does it); without the venv this test fails and says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use agentaddress_api::RouteGroup;
use agentaddress_blackbox::Client;
use tokio::process::{Child, Command};

/// Test cases per operation and phase: ~1,000 requests in all, about a minute here.
const MAX_EXAMPLES: &str = "40";
/// A fixed seed, so a run is reproducible (`scripts/schemathesis --seed` explores others).
const SEED: &str = "20261130";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("the cli crate has a parent directory"))
        .to_path_buf()
}

/// The server, its base URL, and its stdout (kept open: the server prints its SMTP line there).
async fn spawn_server(
    db: &Path,
) -> (
    Child,
    String,
    tokio::io::BufReader<tokio::process::ChildStdout>,
) {
    // Outbound email on (docs/API.md §16), relayed through the server's own SMTP door: a code
    // mail to a fuzzed recipient is refused by it (550, answered 400) rather than the routes
    // answering 503 `outbound_not_configured`. The door's port is picked free first.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let smtp = format!("127.0.0.1:{port}");
    let relay = format!("smtp://{smtp}");
    common::spawn_serve_with(
        db,
        "127.0.0.1:0",
        &[
            "--smtp-listen",
            &smtp,
            "--email-from",
            "mail@inbox.localhost",
            "--smtp-relay",
            &relay,
            "--creations-per-minute",
            "100000",
            "--polls-per-minute",
            "100000",
            "--max-wait-seconds",
            "1",
            // Event streams close after half a second (a hidden testing flag), so that a
            // fuzzed stream does not hold its request for an hour (docs/API.md §14).
            "--stream-max-ms",
            "500",
        ],
        "warn",
        Stdio::inherit(),
    )
    .await
}

/// `(METHOD, path)` of every operation in an OpenAPI document.
fn operations(spec: &serde_json::Value) -> Vec<(String, String)> {
    let paths = spec["paths"]
        .as_object()
        .unwrap_or_else(|| panic!("/openapi.json has no paths: {spec}"));
    let mut ops: Vec<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .into_iter()
                .flat_map(|m| m.keys())
                .filter(|m| {
                    [
                        "get", "put", "post", "delete", "patch", "head", "options", "trace",
                    ]
                    .contains(&m.as_str())
                })
                .map(move |m| (m.to_ascii_uppercase(), path.clone()))
        })
        .collect();
    ops.sort();
    ops
}

/// `schemathesis: O of D operations tested, T test cases, F failures, E errors`.
fn parse_summary(line: &str) -> Option<[u64; 5]> {
    let rest = line.strip_prefix("schemathesis: ")?;
    let numbers: Vec<u64> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    let expected_shape = format!(
        "{} of {} operations tested, {} test cases, {} failures, {} errors",
        numbers.first()?,
        numbers.get(1)?,
        numbers.get(2)?,
        numbers.get(3)?,
        numbers.get(4)?
    );
    (rest == expected_shape && numbers.len() == 5)
        .then(|| [numbers[0], numbers[1], numbers[2], numbers[3], numbers[4]])
}

#[test]
fn summary_lines_parse() {
    assert_eq!(
        parse_summary(
            "schemathesis: 14 of 14 operations tested, 980 test cases, 0 failures, 0 errors"
        ),
        Some([14, 14, 980, 0, 0])
    );
    assert_eq!(parse_summary("schemathesis: 14 operations"), None);
    assert_eq!(parse_summary("14 of 14 operations tested"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing() {
    let root = repo_root();
    let venv_bin = root.join(".cache/schemathesis-venv/bin/schemathesis");
    assert!(
        venv_bin.is_file(),
        "schemathesis is not installed at {}: run `scripts/schemathesis --install-only` first \
         (the test command does)",
        venv_bin.display()
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let (mut server, base, _stdout) = spawn_server(&dir.path().join("agentaddress.db")).await;

    // The operations the server declares are exactly the routes of the HTTP API it serves
    // (`POST /api/mcp` is JSON-RPC, described in docs/MCP.md, not in the OpenAPI document).
    let c = Client::new(&base);
    let r = c.get("/openapi.json", None).await;
    r.expect_status(200, "GET /openapi.json");
    let declared = operations(&r.json);
    let mut routed: Vec<(String, String)> = RouteGroup::REST
        .iter()
        .flat_map(|g| g.endpoints())
        .map(|(m, p)| (m.to_string(), p))
        .collect();
    routed.sort();
    assert_eq!(
        declared, routed,
        "/openapi.json declares exactly the routes of the router"
    );

    let started = Instant::now();
    let out = Command::new(root.join("scripts/schemathesis"))
        .args([
            "--url",
            &base,
            "--max-examples",
            MAX_EXAMPLES,
            "--seed",
            SEED,
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("cannot run scripts/schemathesis");
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    println!("scripts/schemathesis took {elapsed:.1?}");

    assert!(
        server.try_wait().expect("server status").is_none(),
        "the server is still running after the fuzzing"
    );
    let last = stdout.lines().last().unwrap_or("");
    let [tested, of, cases, failures, errors] = parse_summary(last)
        .unwrap_or_else(|| panic!("no summary line at the end of the output: {last:?}"));
    assert!(
        out.status.success(),
        "scripts/schemathesis failed ({}): {last}",
        out.status
    );
    assert_eq!(failures, 0, "{last}");
    assert_eq!(errors, 0, "{last}");
    assert_eq!(
        of,
        declared.len() as u64,
        "schemathesis saw every declared operation: {last}"
    );
    assert_eq!(tested, of, "every operation was exercised: {last}");
    assert!(
        cases >= 20 * of,
        "at least 20 test cases per operation on average: {last}"
    );
    // Still answering after the fuzzing.
    c.get("/healthz", None)
        .await
        .expect_status(200, "healthz after fuzzing");
}
