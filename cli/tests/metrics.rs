//! `agentaddress serve --metrics-listen` (README, "Metrics"): the exposition is read by the
//! Prometheus reference client's parser (Python's `prometheus_client`, in the tools venv that
//! scripts/test installs), every metric has its type, and requests move their counters.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use agentaddress_blackbox::Client;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

/// The tools venv's Python (scripts/aws-deps), which has `prometheus_client`.
fn python() -> PathBuf {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/test, which installs the tools venv with prometheus-client",
        py.display()
    );
    py
}

/// `GET url`, parsed by `prometheus_client.parser`: family name → {type, samples: [[name,
/// labels, value]]}. Panics when the parser refuses the text.
async fn scrape(url: &str) -> Value {
    let r = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        r.headers()
    );
    let text = r.text().await.unwrap_or_default();
    let mut child = tokio::process::Command::new(python())
        .args([
            "-c",
            "import json, sys\n\
             from prometheus_client.parser import text_string_to_metric_families\n\
             out = {}\n\
             for f in text_string_to_metric_families(sys.stdin.read()):\n\
             \x20   out[f.name] = {'type': f.type, 'samples': [[s.name, s.labels, s.value] for s in f.samples]}\n\
             print(json.dumps(out))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python");
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        stdin
            .write_all(text.as_bytes())
            .await
            .expect("write to python");
    }
    let out = child.wait_with_output().await.expect("python");
    assert!(
        out.status.success(),
        "prometheus_client refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("parser output")
}

/// The value of `sample` with exactly `labels` (a subset match), or 0.
fn value(m: &Value, family: &str, sample: &str, labels: &[(&str, &str)]) -> f64 {
    m[family]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s[0] == sample)
        .filter(|s| labels.iter().all(|(k, v)| s[1][*k] == *v))
        .map(|s| s[2].as_f64().unwrap_or(0.0))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_parses_the_metrics_and_requests_move_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_child, base, mut rest) = common::spawn_serve_with(
        &dir.path().join("metrics.db"),
        "127.0.0.1:0",
        &["--metrics-listen", "127.0.0.1:0", "--polls-per-minute", "3"],
        "warn",
        Stdio::inherit(),
    )
    .await;
    let mut line = String::new();
    rest.read_line(&mut line)
        .await
        .expect("read serve's stdout");
    let url = line
        .trim()
        .strip_prefix("agentaddress metrics on ")
        .unwrap_or_else(|| panic!("no metrics line: {line:?}"))
        .to_owned();
    let c = Client::new(&base);

    // Not on the public port.
    let r = c.get(&c.url("/metrics"), None).await;
    r.expect_error(404, "not_found", "metrics are not on the public port");

    let before = scrape(&url).await;
    let a = c.new_address().await;
    c.deliver(&a, &json!({"type": "m.test"}), None)
        .await
        .expect_status(202, "deliver");
    // A long poll, waiting while we scrape.
    let poll = {
        let (c, a) = (c.clone(), a.clone());
        tokio::spawn(async move { c.events(&a, "after=1&wait=3").await })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let during = scrape(&url).await;
    let r = poll.await.expect("poll");
    r.expect_status(200, "the long poll");
    // An event stream, open while we scrape.
    let stream = reqwest::Client::new()
        .get(format!("{}/stream?after=1", a.events_url))
        .bearer_auth(&a.token)
        .send()
        .await
        .expect("open a stream");
    assert_eq!(stream.status(), 200);
    let streaming = scrape(&url).await;
    drop(stream);
    // Past the poll rate limit (3 a minute, in fixed one-minute windows): polls until one is
    // refused (a window may end between two polls and let three more through).
    let mut refused = false;
    for _ in 0..8 {
        if c.events(&a, "after=0").await.status == 429 {
            refused = true;
            break;
        }
    }
    assert!(refused, "a poll past the limit is refused");
    let after = scrape(&url).await;

    for (family, kind) in [
        ("agentaddress_http_requests", "counter"),
        ("agentaddress_http_request_duration_seconds", "histogram"),
        ("agentaddress_long_polls_open", "gauge"),
        ("agentaddress_streams_open", "gauge"),
        ("agentaddress_rate_limited", "counter"),
        ("agentaddress_store_commit_batch_size", "histogram"),
        ("agentaddress_store_commit_seconds", "histogram"),
    ] {
        assert_eq!(after[family]["type"], kind, "{family}: {}", after[family]);
    }
    let created = |m: &Value| {
        value(
            m,
            "agentaddress_http_requests",
            "agentaddress_http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/api/v1/addresses"),
                ("status", "201"),
            ],
        )
    };
    assert_eq!(created(&before), 0.0);
    assert_eq!(created(&after), 1.0, "one creation counted once");
    let delivered = value(
        &after,
        "agentaddress_http_requests",
        "agentaddress_http_requests_total",
        &[
            ("route", "/api/v1/inbox/{address_id}/{inbox_secret}"),
            ("status", "202"),
        ],
    );
    assert_eq!(
        delivered, 1.0,
        "the inbox route by its template, never its secret"
    );
    assert_eq!(
        value(
            &streaming,
            "agentaddress_streams_open",
            "agentaddress_streams_open",
            &[]
        ),
        1.0,
        "the open stream is counted"
    );
    let text = serde_json::to_string(&after).unwrap_or_default();
    assert!(!text.contains(&a.token), "no token in the metrics");
    let secret = a.inbox_url.rsplit('/').next().unwrap_or_default();
    assert!(!text.contains(secret), "no inbox secret in the metrics");
    assert_eq!(
        value(
            &during,
            "agentaddress_long_polls_open",
            "agentaddress_long_polls_open",
            &[]
        ),
        1.0,
        "the waiting poll is open"
    );
    assert_eq!(
        value(
            &after,
            "agentaddress_long_polls_open",
            "agentaddress_long_polls_open",
            &[]
        ),
        0.0
    );
    assert!(
        value(
            &after,
            "agentaddress_rate_limited",
            "agentaddress_rate_limited_total",
            &[]
        ) >= 1.0,
        "the refused poll is counted"
    );
    let commits = value(
        &after,
        "agentaddress_store_commit_seconds",
        "agentaddress_store_commit_seconds_count",
        &[],
    );
    assert!(
        commits >= 2.0,
        "the creation and the delivery committed: {commits}"
    );
    let polls = value(
        &after,
        "agentaddress_http_request_duration_seconds",
        "agentaddress_http_request_duration_seconds_bucket",
        &[
            ("route", "/api/v1/addresses/{address_id}/events"),
            ("le", "+Inf"),
        ],
    );
    assert!(polls >= 2.0, "the polls' latencies are recorded: {polls}");
}
