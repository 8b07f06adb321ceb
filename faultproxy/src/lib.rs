//! A fault-injection proxy for DynamoDB's JSON-over-HTTP API (in practice: in front of DynamoDB
//! Local), to prove that a client never applies an ambiguous write twice.
//!
//! Every request is decided by one seeded RNG (or by a scripted [`Rule`], which goes first):
//! - **fail before forwarding** (probability `fail_rate`): answer at once, without forwarding,
//!   with a DynamoDB error the AWS SDK classifies as retryable, rotating through
//!   [`FailKind::ALL`]: HTTP 500 `InternalServerError` (retried for its status), HTTP 400
//!   `ThrottlingException` and HTTP 400 `ProvisionedThroughputExceededException` (retried as
//!   throttling errors by their code);
//! - **drop after forwarding** (probability `drop_rate`): forward the request, read the upstream's
//!   whole response (so the write has applied), then close the client connection without writing
//!   a byte of it: the caller sees its connection closed before the message completed, an IO
//!   error the SDK retries as transient — the ambiguous outcome of a real network failure;
//! - otherwise **forward** and relay the response faithfully (status, headers, body).
//!
//! Request bodies are forwarded byte for byte with their headers (SigV4 included: DynamoDB Local
//! does not verify signatures); hop-by-hop headers are not relayed. Counters are kept per kind
//! and per `X-Amz-Target` operation. `GET /__faultproxy/stats` answers them as JSON (a
//! [`Stats`]); `POST /__faultproxy/config` with a [`ConfigUpdate`] changes the rates, the seed
//! or the rules at run time. Requests under `/__faultproxy/` are never faulted or counted.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Paths under this prefix are the proxy's own (stats, config), never forwarded.
pub const ADMIN_PREFIX: &str = "/__faultproxy/";

/// The errors injected before forwarding. All are retryable for the AWS SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailKind {
    /// HTTP 500 `InternalServerError`.
    InternalServerError,
    /// HTTP 400 `ThrottlingException`.
    Throttling,
    /// HTTP 400 `ProvisionedThroughputExceededException`.
    ProvisionedThroughputExceeded,
}

impl FailKind {
    /// The rotation of random failures.
    pub const ALL: [FailKind; 3] = [
        FailKind::InternalServerError,
        FailKind::Throttling,
        FailKind::ProvisionedThroughputExceeded,
    ];

    pub fn status(self) -> StatusCode {
        match self {
            Self::InternalServerError => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Throttling | Self::ProvisionedThroughputExceeded => StatusCode::BAD_REQUEST,
        }
    }

    /// The error code, as the SDK reads it from `__type`.
    pub fn code(self) -> &'static str {
        match self {
            Self::InternalServerError => "InternalServerError",
            Self::Throttling => "ThrottlingException",
            Self::ProvisionedThroughputExceeded => "ProvisionedThroughputExceededException",
        }
    }

    /// The JSON body DynamoDB answers with.
    pub fn body(self) -> String {
        serde_json::json!({
            "__type": format!("com.amazonaws.dynamodb.v20120810#{}", self.code()),
            "message": "injected",
        })
        .to_string()
    }
}

/// What a [`Rule`] does to the requests it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Fail before forwarding with the next kind of the rotation.
    Fail,
    InternalServerError,
    Throttling,
    ProvisionedThroughputExceeded,
    /// Forward, then drop the response.
    Drop,
    /// Forward and relay faithfully.
    Pass,
}

/// A scripted fault: the next `count` requests of `operation` (any operation when `None`) get
/// `action`, before any random decision. The first matching rule with a count left applies.
///
/// `key` narrows a rule to the requests whose body contains that string — in practice one
/// address's partition key, since every item of an address carries its id in its key: a hot
/// partition. `per_second` then lets that many matching requests a second through untouched
/// (neither faulted nor counted against `count`) and gives the rest `action`, as DynamoDB lets a
/// partition have its share of throughput and throttles what is beyond it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The operation as named by `X-Amz-Target` after the dot, e.g. `TransactWriteItems`.
    #[serde(default)]
    pub operation: Option<String>,
    /// Only requests whose body contains this string (e.g. an address id).
    #[serde(default)]
    pub key: Option<String>,
    /// Matching requests let through untouched each second before `action` applies.
    #[serde(default)]
    pub per_second: Option<u32>,
    pub action: Action,
    #[serde(default = "one")]
    pub count: u32,
    /// The current one-second window of `per_second`: its start and the requests let through.
    #[serde(skip)]
    window: Option<(Instant, u32)>,
}

fn one() -> u32 {
    1
}

impl Rule {
    /// The next `count` requests of `operation` get `action`.
    pub fn new(operation: impl Into<String>, action: Action, count: u32) -> Self {
        Self {
            operation: Some(operation.into()),
            key: None,
            per_second: None,
            action,
            count,
            window: None,
        }
    }

    /// Every request whose body contains `key` — one address's partition, when `key` is its
    /// id — gets `action` beyond `per_second` a second, until the rules are replaced.
    pub fn hot_key(key: impl Into<String>, per_second: u32, action: Action) -> Self {
        Self {
            operation: None,
            key: Some(key.into()),
            per_second: Some(per_second),
            action,
            count: u32::MAX,
            window: None,
        }
    }

    fn matches(&self, op: &str, body: &[u8]) -> bool {
        self.count > 0
            && self.operation.as_deref().is_none_or(|o| o == op)
            && self
                .key
                .as_deref()
                .is_none_or(|k| contains(body, k.as_bytes()))
    }

    /// Whether this matching request is within the rule's share of the current second.
    fn within_budget(&mut self, now: Instant) -> bool {
        let Some(budget) = self.per_second else {
            return false;
        };
        let (start, used) = match self.window {
            Some((start, used)) if now.duration_since(start) < Duration::from_secs(1) => {
                (start, used)
            }
            _ => (now, 0),
        };
        let within = used < budget;
        self.window = Some((start, used.saturating_add(u32::from(within))));
        within
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Start-up settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Probability that a request is failed before forwarding.
    pub fail_rate: f64,
    /// Probability that a request is forwarded and its response dropped.
    pub drop_rate: f64,
    /// Seed of the RNG that decides every request.
    pub seed: u64,
    pub rules: Vec<Rule>,
}

impl FaultConfig {
    /// No random faults (rules can still be added).
    pub fn passthrough(seed: u64) -> Self {
        Self::rates(0.0, 0.0, seed)
    }

    pub fn rates(fail_rate: f64, drop_rate: f64, seed: u64) -> Self {
        Self {
            fail_rate,
            drop_rate,
            seed,
            rules: Vec::new(),
        }
    }
}

/// A change of configuration at run time (the body of `POST /__faultproxy/config`). Absent
/// fields stay as they are; `rules`, when given, replaces the rules; `seed` restarts the RNG.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigUpdate {
    #[serde(default)]
    pub fail_rate: Option<f64>,
    #[serde(default)]
    pub drop_rate: Option<f64>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub rules: Option<Vec<Rule>>,
}

/// The current configuration, as `POST /__faultproxy/config` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigView {
    pub fail_rate: f64,
    pub drop_rate: f64,
    pub seed: u64,
    pub rules: Vec<Rule>,
}

/// Requests failed before forwarding, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedBefore {
    pub total: u64,
    pub internal_server_error: u64,
    pub throttling: u64,
    pub provisioned_throughput_exceeded: u64,
}

/// The counters of one operation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationStats {
    pub requests: u64,
    pub forwarded: u64,
    pub failed_before: u64,
    pub dropped_after: u64,
    /// Read capacity units the upstream reported consumed (`ConsumedCapacity` of its relayed
    /// answers, for requests that asked for it), in thousandths.
    #[serde(default)]
    pub read_milli_units: u64,
    /// Write capacity units likewise, in thousandths.
    #[serde(default)]
    pub write_milli_units: u64,
}

/// Operations whose bare `CapacityUnits` total counts as read units (all others write).
const READ_OPERATIONS: [&str; 5] = [
    "GetItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "TransactGetItems",
];

/// The capacity units (read, write), in thousandths, that a DynamoDB answer to `op` reports
/// consumed: `ConsumedCapacity` as one object or a list of them; `ReadCapacityUnits` and
/// `WriteCapacityUnits` when given, else the bare `CapacityUnits` (all DynamoDB Local reports)
/// by the kind of operation. Nothing for a body that is not such JSON.
pub fn consumed_milli_units(op: &str, body: &[u8]) -> (u64, u64) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (0, 0);
    };
    let items: Vec<&serde_json::Value> = match v.get("ConsumedCapacity") {
        Some(serde_json::Value::Array(list)) => list.iter().collect(),
        Some(one @ serde_json::Value::Object(_)) => vec![one],
        _ => return (0, 0),
    };
    let milli = |x: f64| (x * 1000.0).round().max(0.0) as u64;
    let is_read = READ_OPERATIONS.contains(&op);
    let (mut read, mut write) = (0, 0);
    for c in items {
        let units = |k: &str| c.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
        let (r, w, total) = (
            units("ReadCapacityUnits"),
            units("WriteCapacityUnits"),
            units("CapacityUnits"),
        );
        if r != 0.0 || w != 0.0 {
            read += milli(r);
            write += milli(w);
        } else if is_read {
            read += milli(total);
        } else {
            write += milli(total);
        }
    }
    (read, write)
}

/// What the proxy did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests received (admin requests excluded).
    pub requests: u64,
    /// Requests sent upstream (their responses relayed or dropped).
    pub forwarded: u64,
    pub failed_before: FailedBefore,
    /// Responses read from upstream and then dropped.
    pub dropped_after: u64,
    /// Forwarded requests the upstream did not answer (answered 502 to the client).
    pub upstream_errors: u64,
    /// Per `X-Amz-Target` operation (`-` without the header).
    pub operations: BTreeMap<String, OperationStats>,
}

impl Stats {
    /// One line for logs: `requests=… forwarded=… failed_before=… (…) dropped_after=… …`.
    pub fn summary(&self) -> String {
        let ops: Vec<String> = self
            .operations
            .iter()
            .map(|(op, s)| {
                format!(
                    "{op}={}/{}/{}",
                    s.requests, s.failed_before, s.dropped_after
                )
            })
            .collect();
        format!(
            "requests={} forwarded={} failed_before={} (internal_server_error={} throttling={} \
             provisioned_throughput_exceeded={}) dropped_after={} upstream_errors={} \
             operations(requests/failed_before/dropped_after): {}",
            self.requests,
            self.forwarded,
            self.failed_before.total,
            self.failed_before.internal_server_error,
            self.failed_before.throttling,
            self.failed_before.provisioned_throughput_exceeded,
            self.dropped_after,
            self.upstream_errors,
            if ops.is_empty() {
                "none".to_owned()
            } else {
                ops.join(" ")
            }
        )
    }
}

/// Why the proxy could not start or take a configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("invalid upstream URL {0:?}: expected http://HOST:PORT")]
    Upstream(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// How one request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Fail(FailKind),
    Drop,
    Forward,
}

/// Why a connection was closed without an answer.
#[derive(Debug, thiserror::Error)]
enum Closed {
    #[error("response dropped on purpose")]
    Dropped,
    #[error("reading the request body: {0}")]
    RequestBody(hyper::Error),
}

struct State {
    fail_rate: f64,
    drop_rate: f64,
    seed: u64,
    rng: StdRng,
    next_fail: usize,
    rules: Vec<Rule>,
    stats: Stats,
}

fn check_rates(fail: f64, drop: f64) -> Result<(), Error> {
    let ok = |r: f64| r.is_finite() && (0.0..=1.0).contains(&r);
    if !ok(fail) || !ok(drop) {
        return Err(Error::Config(format!(
            "rates must be between 0 and 1 (fail {fail}, drop {drop})"
        )));
    }
    if fail + drop > 1.0 + 1e-9 {
        return Err(Error::Config(format!(
            "fail rate + drop rate must not exceed 1 (fail {fail}, drop {drop})"
        )));
    }
    Ok(())
}

impl State {
    fn new(config: FaultConfig) -> Result<Self, Error> {
        check_rates(config.fail_rate, config.drop_rate)?;
        Ok(Self {
            fail_rate: config.fail_rate,
            drop_rate: config.drop_rate,
            seed: config.seed,
            rng: StdRng::seed_from_u64(config.seed),
            next_fail: 0,
            rules: config.rules,
            stats: Stats::default(),
        })
    }

    fn view(&self) -> ConfigView {
        ConfigView {
            fail_rate: self.fail_rate,
            drop_rate: self.drop_rate,
            seed: self.seed,
            rules: self.rules.clone(),
        }
    }

    fn update(&mut self, u: ConfigUpdate) -> Result<(), Error> {
        let fail = u.fail_rate.unwrap_or(self.fail_rate);
        let drop = u.drop_rate.unwrap_or(self.drop_rate);
        check_rates(fail, drop)?;
        self.fail_rate = fail;
        self.drop_rate = drop;
        if let Some(seed) = u.seed {
            self.seed = seed;
            self.rng = StdRng::seed_from_u64(seed);
            self.next_fail = 0;
        }
        if let Some(rules) = u.rules {
            self.rules = rules;
        }
        Ok(())
    }

    fn next_kind(&mut self) -> FailKind {
        let kind = FailKind::ALL[self.next_fail % FailKind::ALL.len()];
        self.next_fail = self.next_fail.wrapping_add(1);
        kind
    }

    /// Decides one request of `op` with this body and counts it.
    fn decide(&mut self, op: &str, body: &[u8]) -> Decision {
        let now = Instant::now();
        let scripted = self
            .rules
            .iter_mut()
            .find(|r| r.matches(op, body))
            .map(|r| {
                if r.within_budget(now) {
                    Action::Pass
                } else {
                    r.count -= 1;
                    r.action
                }
            });
        self.rules.retain(|r| r.count > 0);
        let decision = match scripted {
            Some(Action::Fail) => Decision::Fail(self.next_kind()),
            Some(Action::InternalServerError) => Decision::Fail(FailKind::InternalServerError),
            Some(Action::Throttling) => Decision::Fail(FailKind::Throttling),
            Some(Action::ProvisionedThroughputExceeded) => {
                Decision::Fail(FailKind::ProvisionedThroughputExceeded)
            }
            Some(Action::Drop) => Decision::Drop,
            Some(Action::Pass) => Decision::Forward,
            None => {
                let x: f64 = self.rng.gen();
                if x < self.fail_rate {
                    Decision::Fail(self.next_kind())
                } else if x < self.fail_rate + self.drop_rate {
                    Decision::Drop
                } else {
                    Decision::Forward
                }
            }
        };
        let stats = &mut self.stats;
        stats.requests += 1;
        let per_op = stats.operations.entry(op.to_owned()).or_default();
        per_op.requests += 1;
        match decision {
            Decision::Fail(kind) => {
                per_op.failed_before += 1;
                stats.failed_before.total += 1;
                match kind {
                    FailKind::InternalServerError => stats.failed_before.internal_server_error += 1,
                    FailKind::Throttling => stats.failed_before.throttling += 1,
                    FailKind::ProvisionedThroughputExceeded => {
                        stats.failed_before.provisioned_throughput_exceeded += 1
                    }
                }
            }
            Decision::Drop | Decision::Forward => {
                per_op.forwarded += 1;
                stats.forwarded += 1;
            }
        }
        decision
    }
}

struct Shared {
    state: Mutex<State>,
    /// Scheme and authority of the upstream (path `/`).
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Headers that belong to one connection, never relayed.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "expect"
    )
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if !is_hop_by_hop(name) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// The operation named by `X-Amz-Target` (`DynamoDB_20120810.PutItem` → `PutItem`), `-` if none.
pub fn operation_of(headers: &HeaderMap) -> String {
    headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .map(|t| t.rsplit('.').next().unwrap_or(t).to_owned())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "-".to_owned())
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn injected(kind: FailKind) -> Response<Full<Bytes>> {
    let mut r = respond(kind.status(), "application/x-amz-json-1.0", kind.body());
    r.headers_mut().insert(
        "x-amzn-requestid",
        HeaderValue::from_static("faultproxy-injected"),
    );
    r
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    let body = serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    respond(status, "application/json", body)
}

async fn admin(shared: &Shared, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Closed> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map_err(Closed::RequestBody)?
        .to_bytes();
    let error = |status, message: String| json(status, &serde_json::json!({ "error": message }));
    Ok(match (method, path.trim_start_matches(ADMIN_PREFIX)) {
        (Method::GET, "stats") => json(StatusCode::OK, &shared.state().stats),
        (Method::POST, "config") => match serde_json::from_slice::<ConfigUpdate>(&body) {
            Ok(update) => {
                let mut state = shared.state();
                match state.update(update) {
                    Ok(()) => json(StatusCode::OK, &state.view()),
                    Err(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
                }
            }
            Err(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
        },
        (Method::GET, "config") => json(StatusCode::OK, &shared.state().view()),
        _ => error(
            StatusCode::NOT_FOUND,
            "GET /__faultproxy/stats, GET|POST /__faultproxy/config".into(),
        ),
    })
}

/// Sends the request upstream and reads the whole response, counting the capacity it reports
/// consumed (whether or not the response is then dropped: the upstream did the work).
async fn forward(
    shared: &Shared, op: &str, parts: http::request::Parts, body: Bytes,
) -> Result<Response<Full<Bytes>>, String> {
    let mut uri = shared.upstream.clone().into_parts();
    if let Some(pq) = parts.uri.path_and_query() {
        uri.path_and_query = Some(pq.clone());
    }
    let uri = Uri::from_parts(uri).map_err(|e| e.to_string())?;
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = parts.method;
    *req.uri_mut() = uri;
    copy_headers(&parts.headers, req.headers_mut());
    let resp = shared
        .client
        .request(req)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let (rparts, rbody) = resp.into_parts();
    let bytes = rbody
        .collect()
        .await
        .map_err(|e| format!("reading the upstream response: {e}"))?
        .to_bytes();
    let (read, write) = consumed_milli_units(op, &bytes);
    if read > 0 || write > 0 {
        let mut state = shared.state();
        let per_op = state.stats.operations.entry(op.to_owned()).or_default();
        per_op.read_milli_units += read;
        per_op.write_milli_units += write;
    }
    let mut out = Response::new(Full::new(bytes));
    *out.status_mut() = rparts.status;
    copy_headers(&rparts.headers, out.headers_mut());
    Ok(out)
}

async fn handle(
    shared: Arc<Shared>, req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Closed> {
    if req.uri().path().starts_with(ADMIN_PREFIX) {
        return admin(&shared, req).await;
    }
    let op = operation_of(req.headers());
    let (parts, body) = req.into_parts();
    // The whole request is read in every case, as DynamoDB would before answering.
    let body = body
        .collect()
        .await
        .map_err(Closed::RequestBody)?
        .to_bytes();
    let decision = shared.state().decide(&op, &body);
    match decision {
        Decision::Fail(kind) => Ok(injected(kind)),
        Decision::Forward | Decision::Drop => match forward(&shared, &op, parts, body).await {
            Ok(resp) if decision == Decision::Drop => {
                let mut state = shared.state();
                state.stats.dropped_after += 1;
                state.stats.operations.entry(op).or_default().dropped_after += 1;
                drop(state);
                tracing::debug!(status = %resp.status(), "dropping the upstream's response");
                Err(Closed::Dropped)
            }
            Ok(resp) => Ok(resp),
            Err(e) => {
                tracing::warn!(error = %e, "upstream request failed");
                shared.state().stats.upstream_errors += 1;
                Ok(respond(
                    StatusCode::BAD_GATEWAY,
                    "application/json",
                    serde_json::json!({ "error": format!("faultproxy: upstream: {e}") })
                        .to_string(),
                ))
            }
        },
    }
}

/// A running proxy. Dropping it does not stop it; call [`FaultProxy::shutdown`].
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `listen` (port 0: any free port) and forwards to `upstream`
    /// (`http://HOST:PORT`).
    pub async fn start(
        listen: SocketAddr, upstream: &str, config: FaultConfig,
    ) -> Result<Self, Error> {
        let parsed: Uri = upstream
            .parse()
            .map_err(|_| Error::Upstream(upstream.to_owned()))?;
        if parsed.scheme_str() != Some("http")
            || parsed.authority().is_none()
            || parsed.path_and_query().is_some_and(|p| p.as_str() != "/")
        {
            return Err(Error::Upstream(upstream.to_owned()));
        }
        let mut base = parsed.into_parts();
        base.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        let upstream_uri =
            Uri::from_parts(base).map_err(|_| Error::Upstream(upstream.to_owned()))?;
        let state = State::new(config)?;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| Error::Listen {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: listen,
            source,
        })?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            upstream: upstream_uri,
            client,
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(listener, Arc::clone(&shared), stopped));
        Ok(Self {
            addr,
            shared,
            stop,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stats(&self) -> Stats {
        self.shared.state().stats.clone()
    }

    pub fn config(&self) -> ConfigView {
        self.shared.state().view()
    }

    /// Applies `update` (see [`ConfigUpdate`]).
    pub fn update(&self, update: ConfigUpdate) -> Result<ConfigView, Error> {
        let mut state = self.shared.state();
        state.update(update)?;
        Ok(state.view())
    }

    /// Sets both rates.
    pub fn set_rates(&self, fail_rate: f64, drop_rate: f64) -> Result<(), Error> {
        self.update(ConfigUpdate {
            fail_rate: Some(fail_rate),
            drop_rate: Some(drop_rate),
            ..ConfigUpdate::default()
        })
        .map(|_| ())
    }

    /// Adds a rule after the existing ones.
    pub fn push_rule(&self, rule: Rule) {
        self.shared.state().rules.push(rule);
    }

    /// Stops listening, closes every connection and returns the final counters.
    pub async fn shutdown(self) -> Stats {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.shared.state().stats.clone()
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = Arc::clone(&shared);
                    connections.spawn(async move {
                        let service = service_fn(move |req| handle(Arc::clone(&shared), req));
                        if let Err(e) = hyper::server::conn::http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                        {
                            tracing::debug!(error = %e, "connection closed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(fail: f64, drop: f64, seed: u64) -> State {
        State::new(FaultConfig::rates(fail, drop, seed)).expect("valid config")
    }

    #[test]
    fn rates_are_checked() {
        assert!(State::new(FaultConfig::rates(1.1, 0.0, 0)).is_err());
        assert!(State::new(FaultConfig::rates(0.6, 0.6, 0)).is_err());
        assert!(State::new(FaultConfig::rates(f64::NAN, 0.0, 0)).is_err());
        assert!(State::new(FaultConfig::rates(0.5, 0.5, 0)).is_ok());
        let mut s = state(0.0, 0.0, 1);
        assert!(s
            .update(ConfigUpdate {
                drop_rate: Some(-0.1),
                ..Default::default()
            })
            .is_err());
        assert_eq!(s.drop_rate, 0.0);
    }

    #[test]
    fn failures_rotate_through_every_kind() {
        let mut s = state(1.0, 0.0, 3);
        let kinds: Vec<Decision> = (0..4).map(|_| s.decide("PutItem", b"")).collect();
        assert_eq!(
            kinds,
            vec![
                Decision::Fail(FailKind::InternalServerError),
                Decision::Fail(FailKind::Throttling),
                Decision::Fail(FailKind::ProvisionedThroughputExceeded),
                Decision::Fail(FailKind::InternalServerError),
            ]
        );
        assert_eq!(s.stats.failed_before.total, 4);
        assert_eq!(s.stats.failed_before.internal_server_error, 2);
        assert_eq!(s.stats.operations["PutItem"].failed_before, 4);
        assert_eq!(s.stats.forwarded, 0);
    }

    #[test]
    fn decisions_follow_the_seed_and_the_rates() {
        let run = |seed| {
            let mut s = state(0.25, 0.25, seed);
            (0..2000).map(|_| s.decide("X", b"")).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same decisions");
        assert_ne!(a, run(8), "another seed, other decisions");
        let fails = a.iter().filter(|d| matches!(d, Decision::Fail(_))).count();
        let drops = a.iter().filter(|d| **d == Decision::Drop).count();
        assert!((400..600).contains(&fails), "about 25% failed: {fails}");
        assert!((400..600).contains(&drops), "about 25% dropped: {drops}");
    }

    #[test]
    fn rules_go_first_and_match_their_operation() {
        let mut s = state(0.0, 0.0, 1);
        s.rules
            .push(Rule::new("TransactWriteItems", Action::Drop, 1));
        s.rules.push(Rule {
            operation: None,
            ..Rule::new("", Action::Throttling, 1)
        });
        assert_eq!(
            s.decide("GetItem", b""),
            Decision::Fail(FailKind::Throttling),
            "the catch-all rule"
        );
        assert_eq!(s.decide("GetItem", b""), Decision::Forward);
        assert_eq!(s.decide("TransactWriteItems", b""), Decision::Drop);
        assert_eq!(s.decide("TransactWriteItems", b""), Decision::Forward);
        assert!(s.rules.is_empty());
    }

    #[test]
    fn a_hot_key_is_throttled_beyond_its_share_and_others_pass() {
        let mut s = state(0.0, 0.0, 1);
        s.rules
            .push(Rule::hot_key("addr_hot", 3, Action::Throttling));
        let hot = br#"{"Key":{"pk":{"S":"A#addr_hot"}}}"#;
        let cold = br#"{"Key":{"pk":{"S":"A#addr_cold"}}}"#;
        let hot_decisions: Vec<Decision> = (0..5).map(|_| s.decide("GetItem", hot)).collect();
        assert_eq!(
            hot_decisions,
            vec![
                Decision::Forward,
                Decision::Forward,
                Decision::Forward,
                Decision::Fail(FailKind::Throttling),
                Decision::Fail(FailKind::Throttling),
            ],
            "three a second pass, the rest are throttled"
        );
        for _ in 0..10 {
            assert_eq!(s.decide("PutItem", cold), Decision::Forward);
        }
        assert_eq!(s.rules.len(), 1, "the rule lasts until replaced");
        // The next second has a share of its own.
        if let Some((start, used)) = s.rules[0].window {
            s.rules[0].window = Some((start - Duration::from_secs(2), used));
        }
        assert_eq!(s.decide("Query", hot), Decision::Forward);
        let rule: Rule = serde_json::from_str(
            r#"{"key": "addr_x", "per_second": 0, "action": "throttling", "count": 9}"#,
        )
        .expect("a rule with a key parses");
        assert_eq!(rule.key.as_deref(), Some("addr_x"));
    }

    #[test]
    fn consumed_capacity_is_read_from_answers() {
        assert_eq!(
            consumed_milli_units("GetItem", br#"{"ConsumedCapacity":{"CapacityUnits":0.5}}"#),
            (500, 0)
        );
        assert_eq!(
            consumed_milli_units(
                "TransactWriteItems",
                br#"{"ConsumedCapacity":[{"CapacityUnits":4.0},{"CapacityUnits":2.0}]}"#
            ),
            (0, 6000)
        );
        assert_eq!(
            consumed_milli_units(
                "UpdateItem",
                br#"{"ConsumedCapacity":{"CapacityUnits":3,"ReadCapacityUnits":1,"WriteCapacityUnits":2}}"#
            ),
            (1000, 2000)
        );
        assert_eq!(consumed_milli_units("Query", b"not json"), (0, 0));
        assert_eq!(consumed_milli_units("Query", br#"{"Items":[]}"#), (0, 0));
    }

    #[test]
    fn operation_is_read_from_the_target_header() {
        let mut h = HeaderMap::new();
        assert_eq!(operation_of(&h), "-");
        h.insert(
            "x-amz-target",
            HeaderValue::from_static("DynamoDB_20120810.TransactWriteItems"),
        );
        assert_eq!(operation_of(&h), "TransactWriteItems");
    }

    #[test]
    fn injected_bodies_name_the_error_type() {
        let v: serde_json::Value =
            serde_json::from_str(&FailKind::Throttling.body()).expect("json");
        assert_eq!(
            v["__type"],
            "com.amazonaws.dynamodb.v20120810#ThrottlingException"
        );
        assert_eq!(FailKind::InternalServerError.status(), 500);
        assert_eq!(FailKind::ProvisionedThroughputExceeded.status(), 400);
    }
}
