//! The load generator's HTTP client (HTTP/1.1, or HTTP/2 with prior knowledge) and its JSON
//! answers.

use std::time::Duration;

use serde_json::Value;

#[derive(Clone)]
pub(super) struct Http {
    pub(super) c: reqwest::Client,
}

impl Http {
    pub(super) fn new(timeout: Option<Duration>) -> Self {
        let mut b = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60));
        if let Some(t) = timeout {
            b = b.timeout(t);
        }
        Self {
            c: b.build().unwrap_or_else(|_| reqwest::Client::new()),
        }
    }

    /// A client that speaks HTTP/2 without TLS (h2c) from the first byte: all its requests
    /// are streams of one connection.
    pub(super) fn http2_prior_knowledge(timeout: Duration) -> Result<Self, String> {
        reqwest::Client::builder()
            .http2_prior_knowledge()
            .tcp_nodelay(true)
            .timeout(timeout)
            .build()
            .map(|c| Self { c })
            .map_err(|e| format!("cannot build an HTTP/2 client: {e}"))
    }

    pub(super) async fn send(&self, req: reqwest::RequestBuilder) -> Result<(u16, Value), String> {
        let resp = req
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| format!("reading the body failed: {e}"))?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, body))
    }

    pub(super) async fn post(
        &self, url: &str, token: Option<&str>, body: &Value,
    ) -> Result<(u16, Value), String> {
        let mut req = self.c.post(url).json(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }

    pub(super) async fn put(
        &self, url: &str, token: &str, body: &Value,
    ) -> Result<(u16, Value), String> {
        self.send(self.c.put(url).bearer_auth(token).json(body))
            .await
    }

    pub(super) async fn get(&self, url: &str, token: &str) -> Result<(u16, Value), String> {
        self.send(self.c.get(url).bearer_auth(token)).await
    }
}
