//! Measures what each API operation costs on DynamoDB: requests sent and capacity units
//! consumed (`ReturnConsumedCapacity=TOTAL`), by driving the real router in-process over the
//! real `DynamoStore`. Point it at DynamoDB Local (or a real table) with the SDK's variables:
//!
//! `AGENTADDRESS_TABLE=… AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 agentaddress-costs [--idle-seconds 25]
//! [--conversation-samples 40] [--idle-samples 0] [--json docs/costs.json]`
//!
//! `scripts/costs` does all of that. Prints a Markdown table; with `--json`, also writes the
//! measured rows into docs/costs.json, which `scripts/scale` reads.
#![forbid(unsafe_code)]

use agentaddress_core::store::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::{self as api, ApiConfig, AppState, PollChecks};
use agentaddress_aws::AwsConfig;
use agentaddress_aws::{CapacityUsage, DynamoStore, MessageBucket};
use agentaddress_core::store::StoreResult;
use axum::body::Body;
use axum::http::Request;
use axum::Router;
use clap::Parser;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

#[path = "../in_process.rs"]
mod in_process;

/// Measures what each API operation costs on DynamoDB: requests sent and capacity units
/// consumed (`ReturnConsumedCapacity=TOTAL`), by driving the real router in-process over the
/// real `DynamoStore`, then the query loop's delivery delay. Point it at DynamoDB Local (or a
/// real table) with the SDK's variables and the functions' (`AGENTADDRESS_TABLE=…
/// AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000`); `scripts/costs` does all of that.
/// Prints a Markdown table.
#[derive(Debug, Parser)]
#[command(name = "agentaddress-costs", version)]
struct Args {
    /// `wait` seconds of the measured idle long poll.
    #[arg(long, value_name = "SECONDS", default_value_t = 25)]
    idle_seconds: u64,
    /// Delivery-delay samples of an event arriving in the first 2 s of a poll (a conversation
    /// in progress; 0: none).
    #[arg(long, value_name = "N", default_value_t = 40)]
    conversation_samples: usize,
    /// Delivery-delay samples of an event arriving at any moment of a 25 s poll (an idle
    /// address; 0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    idle_samples: usize,
    /// Also write the measured rows into this units file (docs/costs.json, which
    /// `scripts/scale` reads): the rows of the tables this run measures are replaced, with the
    /// date and this command; everything else in the file (rows measured elsewhere, prices, the
    /// Lambda assumptions) is kept.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
}

struct Bench {
    app: Router,
    store: DynamoStore,
}

/// One request to the router, as the bench's host.
async fn call(
    app: &Router, method: &str, uri: &str, token: Option<&str>, body: Option<Value>,
) -> (u16, Value) {
    in_process::call(app, "costs.local", method, uri, token, body.as_ref()).await
}

impl Bench {
    async fn call(
        &self, method: &str, uri: &str, token: Option<&str>, body: Option<Value>,
    ) -> (u16, Value) {
        call(&self.app, method, uri, token, body).await
    }

    /// Runs `f`, returning what it cost.
    async fn measure<F, Fut>(&self, f: F) -> (CapacityUsage, Duration)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let before = self.store.metrics();
        let t = Instant::now();
        f().await;
        let elapsed = t.elapsed();
        let after = self.store.metrics();
        (
            CapacityUsage {
                requests: after.requests - before.requests,
                read_units: after.read_units - before.read_units,
                write_units: after.write_units - before.write_units,
            },
            elapsed,
        )
    }
}

/// The email bucket, counting the S3 requests made through it.
#[derive(Debug)]
struct CountingBucket {
    inner: Arc<dyn MessageBucket>,
    requests: AtomicU64,
}

impl CountingBucket {
    fn new(inner: Arc<dyn MessageBucket>) -> Self {
        Self {
            inner,
            requests: AtomicU64::new(0),
        }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl MessageBucket for CountingBucket {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn get(&self, key: &str, max_bytes: u64) -> StoreResult<Option<Vec<u8>>> {
        self.count();
        self.inner.get(key, max_bytes).await
    }
    async fn put(&self, key: &str, body: Vec<u8>) -> StoreResult<()> {
        self.count();
        self.inner.put(key, body).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.count();
        self.inner.delete(key).await
    }
    async fn delete_prefix(&self, prefix: &str, budget: usize) -> StoreResult<(u64, bool)> {
        // A list and a batch delete per page: counted as two.
        self.count();
        self.count();
        self.inner.delete_prefix(prefix, budget).await
    }
    async fn download_url(
        &self, key: &str, content_type: &str, disposition: &str, ttl: std::time::Duration,
    ) -> StoreResult<String> {
        // Signed locally: no request to S3 (the client's GET is S3's, counted by nobody here).
        self.inner
            .download_url(key, content_type, disposition, ttl)
            .await
    }
}

/// A message to `to`, as SES stores it, with an attachment of `attachment_bytes`.
fn ses_message(ses_id: &str, to: &str, attachment_bytes: usize) -> Vec<u8> {
    use base64::Engine;
    let text = "Hello, this is the text of a typical short message.\r\n".repeat(60);
    let mut raw = format!(
        "Return-Path: <ada@example.com>\r\n\
         Received: from mail.example.com by inbound-smtp.us-east-1.amazonaws.com with SMTP id \
         {ses_id} for {to}; Tue, 01 Dec 2026 10:00:00 +0000\r\n\
         Authentication-Results: amazonses.com; spf=pass smtp.mailfrom=example.com; dkim=pass \
         header.i=@example.com; dmarc=pass header.from=example.com;\r\n\
         From: Ada <ada@example.com>\r\nTo: {to}\r\nSubject: Costs\r\n\
         Message-ID: <{ses_id}@example.com>\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
         --b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{text}"
    );
    if attachment_bytes > 0 {
        let data: Vec<u8> = (0..attachment_bytes).map(|i| (i % 251) as u8).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(data);
        raw.push_str("--b\r\nContent-Type: application/pdf\r\n");
        raw.push_str("Content-Disposition: attachment; filename=\"report.pdf\"\r\n");
        raw.push_str("Content-Transfer-Encoding: base64\r\n\r\n");
        for line in b64.as_bytes().chunks(76) {
            raw.push_str(&String::from_utf8_lossy(line));
            raw.push_str("\r\n");
        }
    }
    raw.push_str("--b--\r\n");
    raw.into_bytes()
}

/// What receiving an email costs on AWS (the `email` function: read SES's object, deliver,
/// remove the object), and what reading it back costs (the `email-api` function).
async fn email_costs(
    b: &Bench, bucket: &CountingBucket, service: &ServiceConfig, token: &str, created: &Value,
) {
    let config = ApiConfig::from(service);
    let to = created["address"]["email"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let root = path(&created["endpoints"]["events_url"])
        .trim_end_matches("/events")
        .to_owned();
    println!();
    println!("| email operation | DynamoDB requests | read units | write units | S3 requests | ms (local) |");
    println!("|---|---|---|---|---|---|");
    for (label, attachment) in [
        ("receive an email, 3 KB, no attachment", 0usize),
        (
            "receive an email with a 200 KB attachment (275 KB raw)",
            200_000,
        ),
    ] {
        let ses_id = format!(
            "costs{}",
            agentaddress_core::domain::ids::new_address_id()
                .to_ascii_lowercase()
                .replace('_', "")
        );
        let raw = ses_message(&ses_id, &to, attachment);
        let key = format!("inbound/{ses_id}");
        bucket
            .inner
            .put(&key, raw)
            .await
            .unwrap_or_else(|e| panic!("put {key}: {e}"));
        let s3_before = bucket.requests();
        let mut event_id = String::new();
        let (u, d) = b
            .measure(|| async {
                // What the `email` function does for one notification.
                let raw = bucket
                    .get(&key, agentaddress_aws::MAX_OBJECT_BYTES)
                    .await
                    .unwrap_or_else(|e| panic!("get: {e}"))
                    .unwrap_or_else(|| panic!("{key} is missing"));
                let outcome = agentaddress_email::deliver_ses(
                    &b.store,
                    &raw,
                    &ses_id,
                    &config.email_domain,
                    &config.limits,
                    agentaddress_core::domain::Clock::now(&agentaddress_core::domain::SystemClock),
                    None,
                )
                .await;
                match outcome {
                    agentaddress_email::ProviderOutcome::Settled(d) if d.accepted.len() == 1 => {
                        event_id = d.accepted[0].event.id.clone();
                    }
                    other => panic!("not delivered: {other:?}"),
                }
                bucket
                    .delete(&key)
                    .await
                    .unwrap_or_else(|e| panic!("delete: {e}"));
            })
            .await;
        email_row(label, u, bucket.requests() - s3_before, d);
        if attachment > 0 {
            for (what, rest) in [
                ("download its attachment", "attachments/att_2"),
                ("download its raw message", "raw"),
            ] {
                let s3_before = bucket.requests();
                let (u, d) = b
                    .measure(|| async {
                        let (s, v) = b
                            .call(
                                "GET",
                                &format!("{root}/events/{event_id}/{rest}"),
                                Some(token),
                                None,
                            )
                            .await;
                        assert_eq!(s, 200, "{v}");
                    })
                    .await;
                email_row(what, u, bucket.requests() - s3_before, d);
            }
        }
    }
    println!();
}

fn email_row(what: &str, u: CapacityUsage, s3: u64, d: Duration) {
    record("email", what, &u, d, &[("s3_requests", s3)]);
    println!(
        "| {what} | {} | {:.1} | {:.1} | {s3} | {:.1} |",
        u.requests,
        u.read_units,
        u.write_units,
        d.as_secs_f64() * 1000.0
    );
}

/// The read token of a create answer.
fn read_token(created: &Value) -> String {
    created["credentials"]["read_token"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn path(url: &Value) -> String {
    let s = url.as_str().unwrap_or("");
    s.strip_prefix("http://costs.local").unwrap_or(s).to_owned()
}

/// A filtered page (docs/API.md §21) over 1,000 events none of which match: what its 1,000
/// examined items cost, beside a page of 100 of the same events unfiltered (the anchor).
async fn filtered_costs(b: &Bench) {
    let (s, created) = b
        .call(
            "POST",
            "/api/v1/addresses",
            None,
            Some(json!({"name": "filtered"})),
        )
        .await;
    assert_eq!(s, 201, "{created}");
    let token = read_token(&created);
    let inbox = path(&created["endpoints"]["inbox_url"]);
    let events = path(&created["endpoints"]["events_url"]);
    for n in 0..1_000 {
        let (s, v) = b
            .call(
                "POST",
                &inbox,
                None,
                Some(json!({"type": "noise", "data": {"n": n}})),
            )
            .await;
        assert_eq!(s, 202, "{v}");
    }
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "GET",
                    &format!("{events}?after=0&limit=100"),
                    Some(&token),
                    None,
                )
                .await;
            assert_eq!(s, 200, "{v}");
            assert_eq!(v["events"].as_array().map(Vec::len), Some(100));
        })
        .await;
    row("filtered", "read a page of 100 small events (anchor)", u, d);
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "GET",
                    &format!("{events}?after=0&types=wanted.*"),
                    Some(&token),
                    None,
                )
                .await;
            assert_eq!(s, 200, "{v}");
            assert_eq!(v["events"].as_array().map(Vec::len), Some(0));
            assert_eq!(v["next_cursor"], 1_000, "{v}");
        })
        .await;
    row(
        "filtered",
        "filtered page over 1,000 small non-matching events",
        u,
        d,
    );
}

/// Prints a row of the per-operation or filtered table, recording it (in `table` of
/// docs/costs.json) for `--json`.
fn row(table: &'static str, what: &str, u: CapacityUsage, d: Duration) {
    record(table, what, &u, d, &[]);
    print_row(what, u, d);
}

fn print_row(what: &str, u: CapacityUsage, d: Duration) {
    println!(
        "| {what} | {} | {:.1} | {:.1} | {:.1} |",
        u.requests,
        u.read_units,
        u.write_units,
        d.as_secs_f64() * 1000.0
    );
}

#[tokio::main]
async fn main() {
    let Args {
        idle_seconds: idle,
        conversation_samples,
        idle_samples,
        json,
    } = Args::parse();
    let service = ServiceConfig::from_env().unwrap_or_else(|e| panic!("{e}"));
    let aws = AwsConfig::from_env().unwrap_or_else(|e| panic!("{e}"));
    let sdk = agentaddress_aws::sdk_config().await;
    let bucket = Arc::new(CountingBucket::new(
        aws.email_bucket_with(&sdk).unwrap_or_else(|| {
            panic!("AGENTADDRESS_EMAIL_BUCKET is not set (scripts/costs creates a bucket)")
        }),
    ));
    let store = aws
        .store_with(&sdk, service.tombstone_seconds)
        .with_email_bucket(bucket.clone());
    let mut config = ApiConfig::from(&service);
    config.limits.polls_per_minute = 10_000;
    config.limits.creations_per_minute = 10_000;
    // The same service with the earlier, sparser long-poll checks: the anchor of the
    // delivery-delay and idle-poll figures, measured in the same run.
    let sparse = api::router(AppState::new(
        Arc::new(store.clone()),
        ApiConfig {
            poll_checks: PollChecks::SPARSE,
            max_waiting_polls: 0,
            ..config.clone()
        },
    ));
    let app = api::router(AppState::new(Arc::new(store.clone()), config));
    let b = Bench { app, store };
    let kb = "x".repeat(1000);

    println!("| operation | DynamoDB requests | read units | write units | ms (local) |");
    println!("|---|---|---|---|---|");
    let mut created = Value::Null;
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "POST",
                    "/api/v1/addresses",
                    None,
                    Some(json!({"name": "costs"})),
                )
                .await;
            assert_eq!(s, 201, "{v}");
            created = v;
        })
        .await;
    row("per_operation", "create address", u, d);
    let token = read_token(&created);
    let inbox = path(&created["endpoints"]["inbox_url"]);
    let events = path(&created["endpoints"]["events_url"]);
    let state = path(&created["endpoints"]["state_url"]);

    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "POST",
                    &inbox,
                    None,
                    Some(json!({"type": "t", "data": {"pad": kb}})),
                )
                .await;
            assert_eq!(s, 202, "{v}");
        })
        .await;
    row("per_operation", "inbox delivery, 1 KB", u, d);

    let (s, v) = b
        .call(
            "PUT",
            &format!("{state}/k"),
            Some(&token),
            Some(json!({"value": kb, "if_revision": 0})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let rev = v["revision"].as_u64().unwrap_or(0);
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "PUT",
                    &format!("{state}/k"),
                    Some(&token),
                    Some(json!({"value": kb, "if_revision": rev})),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        })
        .await;
    row("per_operation", "state CAS write, 1 KB", u, d);

    for _ in 0..10 {
        b.call(
            "POST",
            &inbox,
            None,
            Some(json!({"type": "t", "data": {"pad": kb}})),
        )
        .await;
    }
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "GET",
                    &format!("{events}?after=3&limit=10"),
                    Some(&token),
                    None,
                )
                .await;
            assert_eq!(s, 200, "{v}");
            assert_eq!(v["events"].as_array().map(Vec::len), Some(10));
        })
        .await;
    row("per_operation", "read a page of ten 1 KB events", u, d);

    filtered_costs(&b).await;

    let root = events.trim_end_matches("/events").to_owned();
    let (s, v) = b.call("GET", &root, Some(&token), None).await;
    assert_eq!(s, 200, "{v}");
    let last = v["usage"]["last_sequence"].as_u64().unwrap_or(0);
    // The idle poll with the current checks, and (with delay samples asked for) with the
    // earlier ones as the anchor.
    let schedules = [
        (&b.app, String::new()),
        (&sparse, ", before (checks grow to 1.5 s)".to_owned()),
    ];
    for (app, label) in schedules.iter().take(if idle_samples > 0 { 2 } else { 1 }) {
        let (u, d) = b
            .measure(|| async {
                let (s, v) = call(
                    app,
                    "GET",
                    &format!("{events}?after={last}&wait={idle}"),
                    Some(&token),
                    None,
                )
                .await;
                assert_eq!(s, 200, "{v}");
            })
            .await;
        let what = format!("idle long poll, {idle} s{label}");
        if label.is_empty() {
            // The earlier schedule's row is an anchor of docs/PERFORMANCE.md, not a cost.
            record("per_operation", &what, &u, d, &[]);
        }
        print_row(&what, u, d);
    }

    email_costs(&b, &bucket, &service, &token, &created).await;
    outbound_costs(&b.store, &service).await;
    socket_costs(&b.store, &service).await;
    wake_costs(&b.store, &service).await;

    // Delivery delay of the query loop, for events that arrive (a) during the first 2 s of a
    // poll, as in a conversation in progress where the agent polls again right after each
    // answer, and (b) at any moment of a 25 s poll of an idle address.
    // The latter also with the earlier schedule, as the anchor.
    for (label, app, window_ms, samples) in [
        (
            "arrival in the first 2 s of a poll",
            &b.app,
            2_000u64,
            conversation_samples,
        ),
        (
            "arrival at any moment of a 25 s poll",
            &b.app,
            24_000,
            idle_samples,
        ),
        (
            "arrival at any moment of a 25 s poll, before (checks grow to 1.5 s)",
            &sparse,
            24_000,
            idle_samples,
        ),
    ] {
        let mut delays = delivery_delays(app, window_ms, samples).await;
        if delays.is_empty() {
            continue;
        }
        delays.sort();
        let pct = |p: f64| {
            delays[((delays.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
        };
        println!(
            "query-loop delivery delay, {label}: n={} p50 {:.0} ms p90 {:.0} ms p99 {:.0} ms max {:.0} ms",
            delays.len(),
            pct(0.5),
            pct(0.9),
            pct(0.99),
            pct(1.0)
        );
    }
    if let Some(path) = json {
        let rows = MEASURED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let args: Vec<String> = std::env::args().skip(1).collect();
        let run = Run {
            date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
            command: format!("agentaddress-costs {}", args.join(" ")),
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        };
        write_units_file(&path, &rows, &run)
            .unwrap_or_else(|e| panic!("--json {}: {e}", path.display()));
        println!("wrote {} measured rows into {}", rows.len(), path.display());
    }
}

/// A row of one of docs/COSTS.md's tables as this run measured it, for `--json`.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    /// The table's key in docs/costs.json (`per_operation`, `email`, …).
    table: &'static str,
    /// The row's first cell, as in docs/COSTS.md.
    label: String,
    requests: u64,
    read_units: f64,
    write_units: f64,
    ms: f64,
    /// The table's other columns (`s3_requests`, `ses_messages`, …).
    counts: Vec<(&'static str, u64)>,
}

/// Every row printed so far, in order.
static MEASURED: Mutex<Vec<Measured>> = Mutex::new(Vec::new());

/// Keeps a printed row for `--json`, rounded as it is printed.
fn record(
    table: &'static str, label: &str, u: &CapacityUsage, d: Duration,
    counts: &[(&'static str, u64)],
) {
    let tenth = |x: f64| (x * 10.0).round() / 10.0;
    MEASURED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Measured {
            table,
            label: label.to_owned(),
            requests: u.requests,
            read_units: tenth(u.read_units),
            write_units: tenth(u.write_units),
            ms: tenth(d.as_secs_f64() * 1000.0),
            counts: counts.to_vec(),
        });
}

/// What `--json` says of the run.
struct Run {
    date: String,
    command: String,
    build: &'static str,
}

/// Reads the units file at `path` (or starts one), merges `rows` into it and writes it back.
fn write_units_file(path: &Path, rows: &[Measured], run: &Run) -> Result<(), String> {
    let mut doc = match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(e) => return Err(e.to_string()),
    };
    merge_measured(&mut doc, rows, run)?;
    let mut text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| e.to_string())
}

/// Merges measured rows into a units file: a row of the same table and label gets the new
/// figures (keeping its id, its function and any `billed_*` correction); a new one is appended;
/// each table measured, and the file, get this run's `measured`. Nothing else changes.
fn merge_measured(doc: &mut Value, rows: &[Measured], run: &Run) -> Result<(), String> {
    let root = doc
        .as_object_mut()
        .ok_or("the units file is not a JSON object")?;
    root.insert(
        "measured".into(),
        json!({
            "date": run.date,
            "command": run.command,
            "source": "Measured by agentaddress-costs (scripts/costs) on DynamoDB Local: the real \
                router and DynamoStore in-process, every DynamoDB call with \
                ReturnConsumedCapacity=TOTAL. Tables this run did not measure keep their own \
                \"measured\".",
        }),
    );
    let tables = root
        .entry("tables")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("\"tables\" is not an object")?;
    for r in rows {
        let table = tables
            .entry(r.table)
            .or_insert_with(|| json!({"section": r.table, "rows": []}))
            .as_object_mut()
            .ok_or_else(|| format!("table {} is not an object", r.table))?;
        table.insert(
            "measured".into(),
            json!({"date": run.date, "command": run.command, "build": run.build}),
        );
        let list = table
            .entry("rows")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .ok_or_else(|| format!("the rows of {} are not a list", r.table))?;
        let at = match list
            .iter()
            .position(|x| x["label"].as_str() == Some(r.label.as_str()))
        {
            Some(at) => at,
            None => {
                list.push(json!({"id": slug(&r.label), "label": r.label}));
                list.len() - 1
            }
        };
        let entry = list[at]
            .as_object_mut()
            .ok_or_else(|| format!("a row of {} is not an object", r.table))?;
        entry.insert("requests".into(), json!(r.requests));
        entry.insert("read_units".into(), json!(r.read_units));
        entry.insert("write_units".into(), json!(r.write_units));
        entry.insert("ms".into(), json!(r.ms));
        for (column, n) in &r.counts {
            entry.insert((*column).into(), json!(n));
        }
    }
    Ok(())
}

/// A row's id from its label: `inbox delivery, 1 KB` → `inbox_delivery_1_kb`.
fn slug(label: &str) -> String {
    let mut id = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c.to_ascii_lowercase());
        } else if !id.is_empty() && !id.ends_with('_') {
            id.push('_');
        }
    }
    id.trim_end_matches('_').to_owned()
}

/// The poster of the socket rows: takes every frame (an API Gateway message each), counting
/// them.
#[derive(Debug, Default)]
struct CountingPoster(AtomicU64);

#[async_trait::async_trait]
impl agentaddress_aws::ConnectionPoster for CountingPoster {
    async fn post(
        &self, _connection_id: &str, _frame: &[u8],
    ) -> Result<(), agentaddress_aws::PostError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// What the wake-up socket adds on AWS (docs/API.md §17): the `ws` function's answer to a
/// subscribe, its `$disconnect`, and what a delivery's notifier adds, with and without a
/// subscribed socket.
async fn socket_costs(store: &DynamoStore, service: &ServiceConfig) {
    use agentaddress_core::domain::{Clock, SystemClock};

    let poster = Arc::new(CountingPoster::default());
    let store = store.clone().with_sockets(poster.clone());
    let mut config = ApiConfig::from(service);
    config.limits.creations_per_minute = 10_000;
    let state = AppState::new(Arc::new(store.clone()), config.clone());
    let b = Bench {
        app: api::router(state.clone()),
        store: store.clone(),
    };
    let posts = || poster.0.load(Ordering::Relaxed);
    println!();
    println!(
        "| socket operation | DynamoDB requests | read units | write units | API Gateway messages posted | ms (local) |"
    );
    println!("|---|---|---|---|---|---|");
    let srow = |what: &str, u: CapacityUsage, d: Duration, messages: u64| {
        record("sockets", what, &u, d, &[("apigw_messages", messages)]);
        println!(
            "| {what} | {} | {:.1} | {:.1} | {messages} | {:.1} |",
            u.requests,
            u.read_units,
            u.write_units,
            d.as_secs_f64() * 1000.0
        );
    };
    let mut addresses = Vec::new();
    for _ in 0..2 {
        let (s, created) = b
            .call("POST", "/api/v1/addresses", None, Some(json!({})))
            .await;
        assert_eq!(s, 201, "{created}");
        addresses.push((
            created["address"]["id"].as_str().unwrap_or("").to_owned(),
            read_token(&created),
            path(&created["endpoints"]["inbox_url"]),
        ));
    }
    let (id, token, inbox) = &addresses[0];
    let connection = "costsConnId=";
    let (u, d) = b
        .measure(|| async {
            // The `ws` function's subscribe: the token check, the subscription, the feed's head.
            let now = SystemClock.now();
            let record = agentaddress_api::socket::authorize(&state, id, token, now)
                .await
                .unwrap_or_else(|e| panic!("authorize: {e:?}"));
            let until = now + 2 * 3_600_000;
            let done = store
                .subscribe_socket(id, connection, None, until, now)
                .await
                .unwrap_or_else(|e| panic!("subscribe: {e}"));
            assert_eq!(done, agentaddress_aws::Subscribed::Yes);
            store
                .watch_expiry(id, record.expires_at, until, now)
                .await
                .unwrap_or_else(|e| panic!("watch: {e}"));
            store
                .last_sequence(id, now)
                .await
                .unwrap_or_else(|e| panic!("head: {e}"));
        })
        .await;
    srow("subscribe (the `ws` function)", u, d, 0);
    let kb = "x".repeat(1000);
    for (label, inbox) in [
        ("inbox delivery, 1 KB, one socket subscribed", inbox),
        (
            "inbox delivery, 1 KB, no socket subscribed",
            &addresses[1].2,
        ),
    ] {
        let before = posts();
        let (u, d) = b
            .measure(|| async {
                let (s, v) = b
                    .call(
                        "POST",
                        inbox,
                        None,
                        Some(json!({"type": "t", "data": {"pad": kb}})),
                    )
                    .await;
                assert_eq!(s, 202, "{v}");
            })
            .await;
        srow(label, u, d, posts() - before);
    }
    let (u, d) = b
        .measure(|| async {
            let dropped = store
                .drop_connection(connection, SystemClock.now())
                .await
                .unwrap_or_else(|e| panic!("$disconnect: {e}"));
            assert_eq!(dropped, vec![id.clone()]);
        })
        .await;
    srow("`$disconnect` (the `ws` function)", u, d, 0);
}

/// The relay of the outbound rows: takes every message (SES's `SendEmail`, priced per message
/// in docs/COSTS.md), counting them and keeping the last.
#[derive(Default)]
struct CountingRelay {
    sent: std::sync::Mutex<Vec<agentaddress_core::relay::Mail>>,
}

#[async_trait::async_trait]
impl agentaddress_core::relay::Relay for CountingRelay {
    fn kind(&self) -> &'static str {
        "counting"
    }
    async fn send(
        &self, mail: &agentaddress_core::relay::Mail,
    ) -> Result<(), agentaddress_core::relay::RelayError> {
        self.sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(mail.clone());
        Ok(())
    }
}

/// The send queue of the outbound rows: counts `SendMessage`s.
#[derive(Default)]
struct CountingQueue(AtomicU64);

#[async_trait::async_trait]
impl agentaddress_core::relay::Dispatch for CountingQueue {
    async fn dispatch(&self, _address_id: &str, _send_id: &str) -> Result<(), String> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// What outbound email costs (docs/API.md §16): adding and confirming a contact (with its
/// code mail), recording a send (with its `SendMessage`), and the send function's delivery of
/// it (claim, SES, record).
async fn outbound_costs(store: &DynamoStore, service: &ServiceConfig) {
    use agentaddress_api::send_delivery::{consume_send, Outbound, RetryPolicy};
    let relay = Arc::new(CountingRelay::default());
    let queue = Arc::new(CountingQueue::default());
    let outbound = Arc::new(Outbound {
        from: "Agents <mail@agents.example>".into(),
        relay: relay.clone(),
        dispatch: queue.clone(),
        retry: RetryPolicy::default(),
    });
    let mut config = ApiConfig::from(service);
    config.limits.creations_per_minute = 10_000;
    let limits = config.limits.clone();
    let app = api::router(
        AppState::new(Arc::new(store.clone()), config).with_outbound(Some(outbound.clone())),
    );
    let b = Bench {
        app,
        store: store.clone(),
    };
    let (s, created) = b
        .call("POST", "/api/v1/addresses", None, Some(json!({})))
        .await;
    assert_eq!(s, 201, "{created}");
    let token = read_token(&created);
    let id = created["address"]["id"].as_str().unwrap_or("").to_owned();
    let root = format!("/api/v1/addresses/{id}");
    let sent = || {
        relay
            .sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    };
    let queued = || queue.0.load(Ordering::Relaxed);

    println!();
    println!(
        "| outbound operation | DynamoDB requests | read units | write units | SES messages | SQS messages | ms (local) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let orow = |what: &str, u: CapacityUsage, d: Duration, ses: usize, sqs: u64| {
        record(
            "outbound",
            what,
            &u,
            d,
            &[("ses_messages", ses as u64), ("sqs_messages", sqs)],
        );
        println!(
            "| {what} | {} | {:.1} | {:.1} | {ses} | {sqs} | {:.1} |",
            u.requests,
            u.read_units,
            u.write_units,
            d.as_secs_f64() * 1000.0
        );
    };
    let (before_ses, before_sqs) = (sent(), queued());
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "POST",
                    &format!("{root}/email/contacts"),
                    Some(&token),
                    Some(json!({"email": "ada@example.com"})),
                )
                .await;
            assert_eq!(s, 202, "{v}");
        })
        .await;
    orow(
        "add a contact (code mailed)",
        u,
        d,
        sent() - before_ses,
        queued() - before_sqs,
    );
    let code = {
        let mails = relay
            .sent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let text = mails.last().map(|m| m.text.clone()).unwrap_or_default();
        let at = text.find("code: ").map_or(0, |i| i + 6);
        text[at..].chars().take(6).collect::<String>()
    };
    let (before_ses, before_sqs) = (sent(), queued());
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "POST",
                    &format!("{root}/email/contacts"),
                    Some(&token),
                    Some(json!({"email": "ada@example.com", "code": code})),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        })
        .await;
    orow(
        "confirm a contact",
        u,
        d,
        sent() - before_ses,
        queued() - before_sqs,
    );
    let text = "Hello, this is the text of a typical short message.\n".repeat(20);
    let send_body = json!({"to": "ada@example.com", "subject": "Costs", "text": text});
    let (before_ses, before_sqs) = (sent(), queued());
    let mut event = Value::Null;
    let (u, d) = b
        .measure(|| async {
            let req = Request::builder()
                .method("POST")
                .uri(format!("{root}/email/send"))
                .header("host", "costs.local")
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .header("idempotency-key", "costs-1")
                .body(Body::from(send_body.to_string()))
                .unwrap_or_else(|e| panic!("request: {e}"));
            let resp = b
                .app
                .clone()
                .oneshot(req)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(resp.status().as_u16(), 202);
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            event = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        })
        .await;
    orow(
        "record a send, 1 KB text (the outbound function)",
        u,
        d,
        sent() - before_ses,
        queued() - before_sqs,
    );
    // The send's id: the local part of its Message-ID (docs/API.md §16).
    let send_id = {
        let event_id = event["event"]["id"].as_str().unwrap_or("");
        let e = store
            .get_event(
                &id,
                event_id,
                agentaddress_core::domain::Clock::now(&agentaddress_core::domain::SystemClock),
            )
            .await
            .unwrap_or_else(|e| panic!("the email.sent event: {e}"));
        let data: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
        data["message_id"]
            .as_str()
            .and_then(|m| m.strip_prefix('<'))
            .and_then(|m| m.split('@').next())
            .unwrap_or_else(|| panic!("no message id in {data}"))
            .to_owned()
    };
    let (before_ses, before_sqs) = (sent(), queued());
    let (u, d) = b
        .measure(|| async {
            let later = consume_send(
                store,
                &outbound,
                &limits,
                &agentaddress_core::domain::SystemClock,
                &id,
                &send_id,
            )
            .await
            .unwrap_or_else(|e| panic!("deliver: {e}"));
            assert_eq!(later, None, "delivered");
        })
        .await;
    orow(
        "deliver a send (the send function)",
        u,
        d,
        sent() - before_ses,
        queued() - before_sqs,
    );
}

/// The wake queue of the wake rows: counts `SendMessage`s.
#[derive(Debug, Default)]
struct CountingWakeQueue(AtomicU64);

#[async_trait::async_trait]
impl agentaddress_aws::WakeQueue for CountingWakeQueue {
    async fn send(&self, _message: &agentaddress_aws::WakeMessage) -> StoreResult<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The receiver of the wake rows: answers 204 at once, counting the wakes it was sent.
#[derive(Debug, Default)]
struct CountingReceiver(AtomicU64);

#[async_trait::async_trait]
impl agentaddress_core::relay::HookCaller for CountingReceiver {
    fn allows_private(&self) -> bool {
        false
    }
    async fn check(
        &self, _url: &str,
    ) -> Result<(), agentaddress_core::domain::hooks::HookUrlRefused> {
        Ok(())
    }
    async fn call(
        &self, _url: &str, _headers: &[(String, String)], _body: Vec<u8>,
    ) -> Result<agentaddress_core::relay::Answered, agentaddress_core::relay::NotSent> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(agentaddress_core::relay::Answered {
            status: 204,
            retry_after: None,
            elapsed: Duration::ZERO,
        })
    }
}

/// What wake hooks cost (docs/API.md §19): making a hook, a delivery that wakes it (its
/// `SendMessage` to the wake queue), one that does not, and the `wake` function's handling of
/// the message (`consume_address`: the hooks read, the claim, the receiver's call, the record).
async fn wake_costs(store: &DynamoStore, service: &ServiceConfig) {
    use agentaddress_api::wake_delivery::{consume_address, Waking};
    let queue = Arc::new(CountingWakeQueue::default());
    let store = store.clone().with_wake_queue(queue.clone());
    let receiver = Arc::new(CountingReceiver::default());
    let mut config = ApiConfig::from(service);
    config.limits.creations_per_minute = 10_000;
    let limits = config.limits.clone();
    let app = api::router(
        AppState::new(Arc::new(store.clone()), config).with_hook_caller(Some(receiver.clone())),
    );
    let b = Bench {
        app,
        store: store.clone(),
    };
    let waking = Waking {
        caller: receiver.clone(),
        base_url: "https://agentaddress.example".into(),
    };
    let (s, created) = b
        .call("POST", "/api/v1/addresses", None, Some(json!({})))
        .await;
    assert_eq!(s, 201, "{created}");
    let token = read_token(&created);
    let id = created["address"]["id"].as_str().unwrap_or("").to_owned();
    let inbox = path(&created["endpoints"]["inbox_url"]);
    let root = format!("/api/v1/addresses/{id}");
    let queued = || queue.0.load(Ordering::Relaxed);
    let woken = || receiver.0.load(Ordering::Relaxed);
    let kb = "x".repeat(1000);

    println!();
    println!(
        "| wake operation | DynamoDB requests | read units | write units | SQS messages | receiver requests | ms (local) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let wrow = |what: &str, u: CapacityUsage, d: Duration, sqs: u64, calls: u64| {
        record(
            "wakes",
            what,
            &u,
            d,
            &[("sqs_messages", sqs), ("receiver_requests", calls)],
        );
        println!(
            "| {what} | {} | {:.1} | {:.1} | {sqs} | {calls} | {:.1} |",
            u.requests,
            u.read_units,
            u.write_units,
            d.as_secs_f64() * 1000.0
        );
    };
    let (q, w) = (queued(), woken());
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "POST",
                    &format!("{root}/hooks"),
                    Some(&token),
                    Some(json!({"url": "https://receiver.example/wake", "types": ["order.*"]})),
                )
                .await;
            assert_eq!(s, 201, "{v}");
        })
        .await;
    wrow("add a hook", u, d, queued() - q, woken() - w);
    let (q, w) = (queued(), woken());
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "POST",
                    &inbox,
                    None,
                    Some(json!({"type": "other.thing", "data": {"pad": kb}})),
                )
                .await;
            assert_eq!(s, 202, "{v}");
        })
        .await;
    wrow(
        "inbox delivery, 1 KB, of a type no hook names",
        u,
        d,
        queued() - q,
        woken() - w,
    );
    let (q, w) = (queued(), woken());
    let (u, d) = b
        .measure(|| async {
            let (s, v) = b
                .call(
                    "POST",
                    &inbox,
                    None,
                    Some(json!({"type": "order.paid", "data": {"pad": kb}})),
                )
                .await;
            assert_eq!(s, 202, "{v}");
        })
        .await;
    wrow(
        "inbox delivery, 1 KB, that wakes a hook",
        u,
        d,
        queued() - q,
        woken() - w,
    );
    let (q, w) = (queued(), woken());
    let (u, d) = b
        .measure(|| async {
            let later = consume_address(
                &store,
                &waking,
                &limits,
                &agentaddress_core::domain::SystemClock,
                &id,
            )
            .await
            .unwrap_or_else(|e| panic!("wake: {e}"));
            assert_eq!(later, None, "delivered");
        })
        .await;
    wrow(
        "the wake (the wake function, one hook)",
        u,
        d,
        queued() - q,
        woken() - w,
    );
}

/// Addresses waited on at once while measuring delivery delays: each lane is its own address
/// (one delivery must wake one poll), so a sample's delay is not another's.
const DELAY_LANES: usize = 8;

/// `samples` delivery delays: a 25 s poll starts, an event is delivered to its address at a
/// pseudo-random moment in the poll's first `window_ms`, and the delay runs from the delivery's
/// 202 to the poll's answer. Samples run in up to [`DELAY_LANES`] lanes at once.
async fn delivery_delays(app: &Router, window_ms: u64, samples: usize) -> Vec<Duration> {
    let lanes = samples.min(DELAY_LANES);
    let mut tasks = Vec::new();
    for lane in 0..lanes {
        let app = app.clone();
        // This lane's share of the samples.
        let n = samples / lanes + usize::from(lane < samples % lanes);
        tasks.push(tokio::spawn(async move {
            let (s, created) = call(
                &app,
                "POST",
                "/api/v1/addresses",
                None,
                Some(json!({"name": format!("delay-{lane}")})),
            )
            .await;
            assert_eq!(s, 201, "{created}");
            let token = read_token(&created);
            let inbox = path(&created["endpoints"]["inbox_url"]);
            let events = path(&created["endpoints"]["events_url"]);
            let mut after = 0;
            let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ (lane as u64 + 1).wrapping_mul(0x9e37_79b9);
            let mut delays = Vec::new();
            for _ in 0..n {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = Duration::from_millis(seed % window_ms);
                let poll = {
                    let app = app.clone();
                    let token = token.clone();
                    let uri = format!("{events}?after={after}&wait=25");
                    tokio::spawn(async move {
                        let r = call(&app, "GET", &uri, Some(&token), None).await;
                        (r, Instant::now())
                    })
                };
                tokio::time::sleep(at).await;
                let (s, v) = call(&app, "POST", &inbox, None, Some(json!({"type": "wake"}))).await;
                let delivered = Instant::now();
                assert_eq!(s, 202, "{v}");
                let ((s, v), returned) = poll.await.unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(s, 200, "{v}");
                assert_eq!(
                    v["events"].as_array().map(Vec::len),
                    Some(1),
                    "the poll answers with the delivery: {v}"
                );
                after = v["next_cursor"].as_u64().unwrap_or(after);
                delays.push(returned.saturating_duration_since(delivered));
            }
            delays
        }));
    }
    let mut delays = Vec::new();
    for t in tasks {
        delays.extend(t.await.unwrap_or_else(|e| panic!("a delay lane: {e}")));
    }
    delays
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
        let a = Args::try_parse_from(["agentaddress-costs"]).expect("defaults");
        assert_eq!(
            (a.idle_seconds, a.conversation_samples, a.idle_samples),
            (25, 40, 0)
        );
        // scripts/bench-lambda's invocation (through scripts/costs).
        let a = Args::try_parse_from([
            "agentaddress-costs",
            "--idle-seconds",
            "25",
            "--conversation-samples",
            "40",
            "--idle-samples",
            "12",
        ])
        .expect("bench-lambda's invocation");
        assert_eq!(
            (a.idle_seconds, a.conversation_samples, a.idle_samples),
            (25, 40, 12)
        );
        let a =
            Args::try_parse_from(["agentaddress-costs", "--idle-seconds=5"]).expect("--flag=value");
        assert_eq!(a.idle_seconds, 5);
    }

    #[test]
    fn json_takes_the_units_file() {
        let a = Args::try_parse_from(["agentaddress-costs", "--json", "docs/costs.json"])
            .expect("--json PATH");
        assert_eq!(a.json, Some(PathBuf::from("docs/costs.json")));
        assert_eq!(
            Args::try_parse_from(["agentaddress-costs"]).unwrap().json,
            None
        );
        let e = Args::try_parse_from(["agentaddress-costs", "--json"]).expect_err("no path");
        assert_eq!(e.exit_code(), 2);
    }

    fn run() -> Run {
        Run {
            date: "2027-01-02".into(),
            command: "agentaddress-costs --json docs/costs.json".into(),
            build: "release",
        }
    }

    fn measured(table: &'static str, label: &str, write_units: f64) -> Measured {
        Measured {
            table,
            label: label.into(),
            requests: 3,
            read_units: 2.0,
            write_units,
            ms: 12.5,
            counts: vec![("s3_requests", 1)],
        }
    }

    #[test]
    fn a_measured_row_replaces_its_figures_and_keeps_the_rest() {
        let mut doc = json!({
            "about": "a units file",
            "measured": {"date": "2026-12-06", "command": "scripts/costs"},
            "tables": {
                "email": {
                    "section": "Email",
                    "note": "kept",
                    "measured": {"date": "2026-12-02", "command": "scripts/costs", "build": "debug", "note": "old run"},
                    "rows": [
                        {"id": "mine", "label": "receive", "requests": 7, "read_units": 5.0,
                         "write_units": 12.0, "ms": 37.4, "s3_requests": 3,
                         "billed_write_units": 14.0, "function": "email"}
                    ]
                },
                "timers": {"section": "Timers", "measured": {"date": "2026-12-06"}, "rows": []}
            },
            "prices": {"lambda_arm64_gb_second": 1.33334e-05}
        });
        merge_measured(
            &mut doc,
            &[
                measured("email", "receive", 13.0),
                measured("email", "download its raw message, 1 MB", 0.0),
                measured("sockets", "subscribe", 2.0),
            ],
            &run(),
        )
        .unwrap();
        let rows = &doc["tables"]["email"]["rows"];
        assert_eq!(
            rows[0],
            json!({"id": "mine", "label": "receive", "requests": 3, "read_units": 2.0,
                   "write_units": 13.0, "ms": 12.5, "s3_requests": 1,
                   "billed_write_units": 14.0, "function": "email"})
        );
        assert_eq!(rows[1]["id"], "download_its_raw_message_1_mb");
        assert_eq!(rows[1]["write_units"], json!(0.0));
        assert_eq!(doc["tables"]["email"]["note"], "kept");
        assert_eq!(
            doc["tables"]["email"]["measured"],
            json!({"date": "2027-01-02", "command": "agentaddress-costs --json docs/costs.json", "build": "release"})
        );
        // A table this run did not measure keeps its own run; a new one is added.
        assert_eq!(
            doc["tables"]["timers"]["measured"],
            json!({"date": "2026-12-06"})
        );
        assert_eq!(doc["tables"]["sockets"]["rows"][0]["id"], "subscribe");
        assert_eq!(doc["measured"]["date"], "2027-01-02");
        assert_eq!(
            doc["prices"],
            json!({"lambda_arm64_gb_second": 1.33334e-05})
        );
        // Figures are written as the tables print them.
        let text = serde_json::to_string_pretty(&doc).unwrap();
        assert!(text.contains("\"write_units\": 13.0,"), "{text}");
        assert!(text.contains("\"ms\": 12.5,"), "{text}");
    }

    /// docs/costs.json is written in the writer's own format, so that `--json` changes only
    /// the figures it measures; every row has the fields scripts/scale reads.
    #[test]
    fn the_committed_units_file_is_in_the_writers_format() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/costs.json");
        let text = std::fs::read_to_string(path).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let mut again = serde_json::to_string_pretty(&doc).unwrap();
        again.push('\n');
        assert!(
            again == text,
            "docs/costs.json is not as serde_json writes it"
        );
        let mut ids = std::collections::HashSet::new();
        for (name, table) in doc["tables"].as_object().unwrap() {
            for r in table["rows"].as_array().unwrap() {
                let id = r["id"].as_str().unwrap();
                assert!(ids.insert(id.to_owned()), "{name}: id {id} twice");
                assert!(r["label"].is_string(), "{name}/{id}");
                assert!(r["requests"].is_u64(), "{name}/{id}");
                assert!(r["read_units"].is_number(), "{name}/{id}");
                assert!(r["write_units"].is_number(), "{name}/{id}");
            }
        }
        assert!(doc["measured"]["date"].is_string());
        assert!(doc["measured"]["command"].is_string());
    }

    #[test]
    fn a_mistyped_flag_or_value_is_an_error() {
        for argv in [
            &["agentaddress-costs", "--idle-sample", "12"][..],
            &["agentaddress-costs", "--idle-seconds", "-1"][..],
            &["agentaddress-costs", "--conversation-samples", "many"][..],
            &["agentaddress-costs", "25"][..],
        ] {
            let e = Args::try_parse_from(argv).expect_err("must not parse");
            assert_eq!(e.exit_code(), 2, "{argv:?}: {e}");
        }
    }
}
