//! Issuing requests and recording each one, with its outcome, into the history.
//!
//! Unlike [`crate::Client`], nothing here panics on a transport failure: a refused or reset
//! connection, a timeout or a cut body is recorded as [`Outcome::Transport`] — an unknown
//! outcome the verifier must accept either way.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use super::history::{Op, OpKind, Outcome, Phase};

/// Live figures of a running check, for whoever drives it (the crash test kills the server at
/// chosen request counts).
#[derive(Debug, Default)]
pub struct Progress {
    issued: AtomicU64,
    workload_done: AtomicBool,
    /// The ids of the addresses created so far, in order.
    addresses: Mutex<Vec<String>>,
}

impl Progress {
    /// HTTP requests sent so far (all phases).
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    /// The random mix has stopped (consumers may still be draining).
    pub fn workload_done(&self) -> bool {
        self.workload_done.load(Ordering::Relaxed)
    }

    /// The ids of the addresses the check has created so far, in order (the first is the one
    /// the workload's clients contend for most: the hot-address test throttles it).
    pub fn addresses(&self) -> Vec<String> {
        self.addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn created(&self, id: &str) {
        self.addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(id.to_owned());
    }

    pub(crate) fn finish_workload(&self) {
        self.workload_done.store(true, Ordering::Relaxed);
    }
}

/// One request to send.
pub(crate) struct Req {
    pub method: Method,
    pub url: String,
    pub token: Option<String>,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<Vec<u8>>,
}

impl Req {
    pub fn new(method: Method, url: String) -> Self {
        Self {
            method,
            url,
            token: None,
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn bearer(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn json(self, body: &Value) -> Self {
        let mut r = self.header("content-type", "application/json");
        r.body = Some(body.to_string().into_bytes());
        r
    }
}

/// Sends requests and records them.
pub(crate) struct Recorder {
    http: reqwest::Client,
    started: Instant,
    ops: Mutex<Vec<Op>>,
    pub progress: Arc<Progress>,
}

impl Recorder {
    pub fn new(progress: Arc<Progress>, timeout: Duration) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(256)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(Self {
            http,
            started: Instant::now(),
            ops: Mutex::new(Vec::new()),
            progress,
        })
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Sends `req`, records it as `kind` by `client` in `phase`, and returns the outcome.
    pub async fn send(
        &self, client: &str, phase: Phase, address: Option<usize>, kind: OpKind, req: Req,
    ) -> Outcome {
        self.progress.issued.fetch_add(1, Ordering::Relaxed);
        let start_us = self.now_us();
        let outcome = self.exchange(req).await;
        let end_us = self.now_us();
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Op {
                client: client.to_owned(),
                phase,
                address,
                kind,
                start_us,
                end_us,
                outcome: outcome.clone(),
            });
        outcome
    }

    async fn exchange(&self, req: Req) -> Outcome {
        let mut b = self.http.request(req.method, &req.url);
        if let Some(t) = &req.token {
            b = b.bearer_auth(t);
        }
        for (k, v) in &req.headers {
            b = b.header(*k, v.as_str());
        }
        if let Some(body) = req.body {
            b = b.body(body);
        }
        let resp = match b.send().await {
            Ok(r) => r,
            Err(e) => return Outcome::Transport(error_chain(&e)),
        };
        let status = resp.status().as_u16();
        let header = |name: reqwest::header::HeaderName| {
            resp.headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let content_type = header(reqwest::header::CONTENT_TYPE);
        let retry_after = header(reqwest::header::RETRY_AFTER);
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return Outcome::Transport(format!("reading the body: {}", error_chain(&e))),
        };
        let (body, json, raw) = match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => (v, true, String::new()),
            Err(_) => (
                Value::Null,
                false,
                String::from_utf8_lossy(&bytes[..bytes.len().min(500)]).into_owned(),
            ),
        };
        Outcome::Answer {
            status,
            body,
            json,
            raw,
            content_type,
            retry_after,
        }
    }

    /// `f` of the ops recorded so far.
    pub fn with_ops<R>(&self, f: impl FnOnce(&[Op]) -> R) -> R {
        f(&self.ops.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The recorded ops, taken out (at the end of the run).
    pub fn take(&self) -> Vec<Op> {
        std::mem::take(&mut *self.ops.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
