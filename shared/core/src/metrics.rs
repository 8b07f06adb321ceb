//! The operational metrics (README, "Metrics"): every name, its labels, its unit and its help
//! text in one place, recorded through the `metrics` facade. Without an installed recorder
//! (the Lambda functions today, the tests) recording costs a few atomic loads and nothing is
//! kept; `agentaddress serve --metrics-listen` installs a Prometheus one.

use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};

/// Requests answered: labels `method`, `route` (the route template, never the path: inbox URLs
/// carry secrets) and `status`.
pub const HTTP_REQUESTS: &str = "agentaddress_http_requests_total";
/// Time from a request's arrival to its answer (a long poll's whole wait included): labels
/// `method`, `route`.
pub const HTTP_REQUEST_SECONDS: &str = "agentaddress_http_request_duration_seconds";
/// Requests refused with 429 `rate_limited`: label `route`.
pub const RATE_LIMITED: &str = "agentaddress_rate_limited_total";
/// Long polls waiting now.
pub const LONG_POLLS_OPEN: &str = "agentaddress_long_polls_open";
/// Waits refused because every waiting slot was held (docs/API.md §6, "Waiting polls").
pub const WAITS_REFUSED: &str = "agentaddress_waits_refused_total";
/// Event streams open now (docs/API.md §14).
pub const STREAMS_OPEN: &str = "agentaddress_streams_open";
/// Requests the store could not serve (HTTP 503 `unavailable` or 500 `internal`): label `kind`.
pub const STORE_ERRORS: &str = "agentaddress_store_errors_total";
/// Writes committed together by the embedded store's writer (group commit).
pub const COMMIT_BATCH: &str = "agentaddress_store_commit_batch_size";
/// One group commit, `BEGIN` to `COMMIT` returned (its fsync included).
pub const COMMIT_SECONDS: &str = "agentaddress_store_commit_seconds";
/// SMTP sessions started.
pub const SMTP_SESSIONS: &str = "agentaddress_smtp_sessions_total";
/// SMTP sessions open now.
pub const SMTP_SESSIONS_OPEN: &str = "agentaddress_smtp_sessions_open";
/// SMTP commands and messages refused: label `code` (the reply code, `550`, `452`, …).
pub const SMTP_REFUSALS: &str = "agentaddress_smtp_refusals_total";

/// The upper bounds of the latency histograms, in seconds: from a fast write to a whole long
/// poll (25 s).
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 26.0, 60.0,
];
/// The upper bounds of the group-commit size histogram.
pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Registers each metric's help text and unit with the installed recorder.
pub fn describe() {
    describe_counter!(
        HTTP_REQUESTS,
        "Requests answered, by route template and status."
    );
    describe_histogram!(
        HTTP_REQUEST_SECONDS,
        Unit::Seconds,
        "Time from a request's arrival to its answer (a long poll's wait included)."
    );
    describe_counter!(RATE_LIMITED, "Requests refused with 429 rate_limited.");
    describe_gauge!(LONG_POLLS_OPEN, "Long polls waiting now.");
    describe_counter!(
        WAITS_REFUSED,
        "Long polls and request waits refused (503) because every waiting slot was held."
    );
    describe_gauge!(STREAMS_OPEN, "Event streams open now.");
    describe_counter!(
        STORE_ERRORS,
        "Requests the store could not serve (503 or 500)."
    );
    describe_histogram!(COMMIT_BATCH, "Writes committed together (group commit).");
    describe_histogram!(
        COMMIT_SECONDS,
        Unit::Seconds,
        "One group commit, BEGIN to COMMIT returned, fsync included."
    );
    describe_counter!(SMTP_SESSIONS, "SMTP sessions started.");
    describe_gauge!(SMTP_SESSIONS_OPEN, "SMTP sessions open now.");
    describe_counter!(
        SMTP_REFUSALS,
        "SMTP commands and messages refused, by reply code."
    );
}

/// A request answered.
pub fn request(method: &str, route: &str, status: u16, took: Duration) {
    let (method, route) = (method.to_owned(), route.to_owned());
    counter!(HTTP_REQUESTS, "method" => method.clone(), "route" => route.clone(),
        "status" => status.to_string())
    .increment(1);
    histogram!(HTTP_REQUEST_SECONDS, "method" => method, "route" => route.clone())
        .record(took.as_secs_f64());
    if status == 429 {
        counter!(RATE_LIMITED, "route" => route).increment(1);
    }
}

/// A wait refused: every waiting slot was held.
pub fn wait_refused() {
    counter!(WAITS_REFUSED).increment(1);
}

/// A request the store could not serve: `kind` is `unavailable` or `internal`.
pub fn store_error(kind: &'static str) {
    counter!(STORE_ERRORS, "kind" => kind).increment(1);
}

/// A group commit of `writes` writes that took `took`.
pub fn commit(writes: usize, took: Duration) {
    histogram!(COMMIT_BATCH).record(writes as f64);
    histogram!(COMMIT_SECONDS).record(took.as_secs_f64());
}

/// An SMTP session started: counted, and open until the guard drops.
pub fn smtp_session() -> Open {
    counter!(SMTP_SESSIONS).increment(1);
    Open::new(SMTP_SESSIONS_OPEN)
}

/// An SMTP refusal with reply `code`.
pub fn smtp_refusal(code: u16) {
    counter!(SMTP_REFUSALS, "code" => code.to_string()).increment(1);
}

/// Counts one open thing in `gauge` while it lives: a long poll, an SMTP session.
#[derive(Debug)]
pub struct Open(&'static str);

impl Open {
    pub fn new(name: &'static str) -> Self {
        gauge!(name).increment(1.0);
        Open(name)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        gauge!(self.0).decrement(1.0);
    }
}
