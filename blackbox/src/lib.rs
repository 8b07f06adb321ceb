//! The black-box HTTP suite: scenarios that walk an agent's life against any agentaddress
//! deployment, given only its base URL. It depends on nothing but HTTP, so the same scenarios
//! run against `agentaddress serve` and against the Lambda stack.
//!
//! Scenarios read the server's limits from `GET {root}` instead of assuming defaults, honour
//! `429 Retry-After` when creating addresses, and panic with a clear message on a violation.
#![forbid(unsafe_code)]

pub mod check;
pub mod email;
pub mod filtered;
pub mod hooks;
pub mod mcp;
pub mod requests;
pub mod scenarios;
pub mod senders;
pub mod sockets;
pub mod sse;
pub mod timers;
pub mod verification;

use std::time::Duration;

use serde_json::{json, Value};

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub json: Value,
    /// The body as received (`text` is its lossy UTF-8 reading).
    pub bytes: Vec<u8>,
}

impl Resp {
    /// `error.code` of an error answer, or `""`.
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    /// Panics unless the status is `status`, showing the body.
    #[track_caller]
    pub fn expect_status(&self, status: u16, what: &str) -> &Self {
        assert_eq!(
            self.status, status,
            "{what}: expected HTTP {status}, got {} with body {}",
            self.status, self.text
        );
        self
    }

    /// Panics unless this is the error `code` with HTTP `status`.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str, what: &str) -> &Self {
        self.expect_status(status, what);
        assert_eq!(self.code(), code, "{what}: body {}", self.text);
        assert!(
            self.json["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: an error carries a message: {}",
            self.text
        );
        self
    }
}

/// An HTTP client bound to one deployment.
#[derive(Debug, Clone)]
pub struct Client {
    pub base: String,
    http: reqwest::Client,
    /// A gateway stands in front of the functions (API Gateway; locally cargo-lambda's
    /// emulator): see [`Client::behind_gateway`].
    gateway: bool,
}

/// An address as its creator holds it.
#[derive(Debug, Clone)]
pub struct Address {
    pub id: String,
    pub token: String,
    pub inbox_url: String,
    pub root: String,
    pub events_url: String,
    pub state_url: String,
    pub created: Value,
}

impl Address {
    /// The address in a create answer (of `POST /api/v1/addresses` or of MCP's
    /// `create_return_address`) from the server at `base`; panics naming what the answer lacks.
    pub fn from_created(base: &str, created: &Value) -> Address {
        let s = |p: &str| {
            created
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("create answer lacks {p}: {created}"))
                .to_owned()
        };
        let id = s("/address/id");
        Address {
            root: format!("{base}/api/v1/addresses/{id}"),
            events_url: s("/endpoints/events_url"),
            state_url: s("/endpoints/state_url"),
            inbox_url: s("/endpoints/inbox_url"),
            token: s("/credentials/read_token"),
            id,
            created: created.clone(),
        }
    }
}

/// A setting of the local Lambda stack, which `scripts/test` starts and passes in the environment
/// (`AGENTADDRESS_LAMBDA_URL`, `…_TABLE`, `…_BUCKET`…). Without it, the test fails loudly: it
/// never skips.
pub fn stack_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_owned(),
        _ => panic!("{name} is not set: run scripts/test, which starts the local Lambda stack"),
    }
}

/// A client of the local Lambda stack's API ([`stack_env`] `AGENTADDRESS_LAMBDA_URL`, through
/// its gateway: [`Client::behind_gateway`]).
pub fn stack_client() -> Client {
    Client::behind_gateway(&stack_env("AGENTADDRESS_LAMBDA_URL"))
}

impl Client {
    pub fn new(base: &str) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(40))
            .pool_max_idle_per_host(64)
            .build()
            .expect("cannot build an HTTP client");
        Self {
            base: base.trim_end_matches('/').to_owned(),
            http,
            gateway: false,
        }
    }

    /// A client of the Lambda stack, where a gateway stands between the client and the
    /// functions. Besides a gateway's own 5xx, it retries an idempotent request that got no
    /// answer at all (a reset, or nothing within the timeout): cargo-lambda's emulator now and
    /// then drops an answer its function gave. [`Client::new`] (for `serve`) never retries a
    /// request that got no answer: that is a server bug there.
    pub fn behind_gateway(base: &str) -> Self {
        Self {
            gateway: true,
            ..Self::new(base)
        }
    }

    /// A fresh client (no pooled connections) of the same server, in the same mode.
    pub fn reconnected(&self) -> Self {
        Self {
            gateway: self.gateway,
            ..Self::new(&self.base)
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a request; `path_or_url` may be absolute or a path under the base URL.
    pub async fn send(
        &self, method: &str, path_or_url: &str, token: Option<&str>, headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Resp {
        let url = if path_or_url.starts_with("http") {
            path_or_url.to_owned()
        } else {
            self.url(path_or_url)
        };
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .unwrap_or_else(|e| panic!("bad method {method}: {e}"));
        let idempotent = method == reqwest::Method::GET
            || method == reqwest::Method::PUT
            || (method == reqwest::Method::POST && url.ends_with("/ack"));
        let mut attempt = 0;
        loop {
            let r = match self
                .send_once(&method, &url, token, headers, body.clone())
                .await
            {
                Ok(r) => r,
                Err(e) if self.gateway && idempotent && attempt < 3 => {
                    attempt += 1;
                    eprintln!("blackbox: no answer through the gateway: {e}; retry {attempt}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            // A 5xx that is not agentaddress's own error envelope came from the gateway in
            // front (API Gateway, or cargo-lambda's emulator, which now and then answers its
            // own 500 although the function answered). Clients retry those on idempotent
            // requests — GET, PUT (the same value again), ack (idempotent by the contract);
            // our own 5xx answers are never retried, so they still fail a test.
            let from_gateway = r.status >= 500 && r.json["error"]["code"].as_str().is_none();
            if from_gateway && idempotent && attempt < 3 {
                attempt += 1;
                eprintln!(
                    "blackbox: gateway answered {} to {method} {url} (not from agentaddress): {}; retry {attempt}",
                    r.status, r.text
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            return r;
        }
    }

    async fn send_once(
        &self, method: &reqwest::Method, url: &str, token: Option<&str>, headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Resp, String> {
        let mut req = self.http.request(method.clone(), url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        // `{:?}` too: reqwest's message alone ("error sending request") hides the cause.
        let resp = req
            .send()
            .await
            .map_err(|e| format!("{method} {url} failed: {e} ({e:?})"))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| format!("reading the answer of {method} {url} failed: {e} ({e:?})"))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Resp {
            status,
            headers,
            text,
            json,
            bytes: bytes.to_vec(),
        })
    }

    pub async fn get(&self, url: &str, token: Option<&str>) -> Resp {
        self.send("GET", url, token, &[], None).await
    }

    pub async fn json(&self, method: &str, url: &str, token: Option<&str>, body: &Value) -> Resp {
        self.send(
            method,
            url,
            token,
            &[("content-type", "application/json")],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    /// Creates an address, waiting out `429` answers (creation is rate limited per IP).
    pub async fn create_address(&self, body: &Value) -> Address {
        let r = self.create(body).await;
        r.expect_status(201, "create address");
        Address::from_created(&self.base, &r.json)
    }

    /// `POST /api/v1/addresses` with `body`, waiting out `429 rate_limited` (tests share the
    /// deployment's creation limit); the first other answer.
    pub async fn create(&self, body: &Value) -> Resp {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        self.send_past_limit(
            "POST",
            "/api/v1/addresses",
            None,
            &[("content-type", "application/json")],
            Some(bytes),
        )
        .await
    }

    /// [`Client::send`], waiting out `429 rate_limited` (tests running at once share a
    /// deployment's rate limits, such as the creation limit); the first other answer.
    pub async fn send_past_limit(
        &self, method: &str, path_or_url: &str, token: Option<&str>, headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Resp {
        for _ in 0..5 {
            let r = self
                .send(method, path_or_url, token, headers, body.clone())
                .await;
            if r.status != 429 {
                return r;
            }
            let secs = r.json["error"]["retry_after_seconds"].as_u64().unwrap_or(5);
            tokio::time::sleep(Duration::from_secs(secs.min(61))).await;
        }
        panic!("{method} {path_or_url} stayed rate limited");
    }

    pub async fn new_address(&self) -> Address {
        self.create_address(&json!({"name": "blackbox", "task_id": "suite"}))
            .await
    }

    /// Delivers a JSON body to an inbox, with an optional Idempotency-Key.
    pub async fn deliver(&self, a: &Address, body: &Value, key: Option<&str>) -> Resp {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(k) = key {
            headers.push(("idempotency-key", k));
        }
        self.send(
            "POST",
            &a.inbox_url,
            None,
            &headers,
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    /// Like [`Client::deliver`], but `None` when the request fails at the transport level (the
    /// server went away), for crash tests.
    pub async fn try_deliver(&self, a: &Address, body: &Value, key: Option<&str>) -> Option<Resp> {
        let mut req = self
            .http
            .post(&a.inbox_url)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let resp = req.send().await.ok()?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.ok()?;
        Some(Resp {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            bytes: bytes.to_vec(),
        })
    }

    /// One page of the feed.
    pub async fn events(&self, a: &Address, query: &str) -> Resp {
        self.get(&format!("{}?{query}", a.events_url), Some(&a.token))
            .await
    }

    /// The whole feed from `after = 0`, following `next_cursor` (few requests: pages of 100).
    pub async fn read_all(&self, a: &Address) -> Vec<Value> {
        let mut after = 0u64;
        let mut all = Vec::new();
        loop {
            let r = self.events(a, &format!("after={after}&limit=100")).await;
            r.expect_status(200, "read the feed");
            let events = r.json["events"].as_array().cloned().unwrap_or_default();
            all.extend(events);
            after = r.json["next_cursor"]
                .as_u64()
                .unwrap_or_else(|| panic!("next_cursor missing: {}", r.text));
            if !r.json["has_more"].as_bool().unwrap_or(false) {
                return all;
            }
        }
    }

    /// The server's limits as `GET {root}` reports them.
    pub async fn limits(&self, a: &Address) -> Value {
        let r = self.get(&a.root, Some(&a.token)).await;
        r.expect_status(200, "inspect address");
        r.json["limits"].clone()
    }
}

/// A deployment whose process can be stopped and started again on the same data.
pub trait Restartable: Send {
    /// Stops the server abruptly (as a crash would) and starts it again on the same data and
    /// base URL; returns once it answers.
    fn restart(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server whose first connection is closed without an answer; later ones get a 200.
    async fn drops_the_first_request() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local_addr");
        tokio::spawn(async move {
            let mut first = true;
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                if first {
                    first = false;
                    continue; // dropped: closed with no answer
                }
                let _ = sock
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                    )
                    .await;
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn behind_a_gateway_a_get_without_an_answer_is_retried() {
        let base = drops_the_first_request().await;
        let r = Client::behind_gateway(&base).get("/x", None).await;
        assert_eq!(r.status, 200);
    }

    #[tokio::test]
    async fn behind_a_gateway_a_post_without_an_answer_is_not_retried() {
        let base = drops_the_first_request().await;
        let c = Client::behind_gateway(&base);
        let sent = tokio::spawn(async move { c.send("POST", "/x", None, &[], None).await });
        assert!(sent.await.is_err(), "a delivery is not retried");
    }

    #[tokio::test]
    async fn a_get_without_an_answer_from_serve_fails() {
        let base = drops_the_first_request().await;
        let c = Client::new(&base);
        let sent = tokio::spawn(async move { c.get("/x", None).await });
        assert!(sent.await.is_err(), "no retry without a gateway");
    }
}
