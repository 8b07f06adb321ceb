//! The HTTP side of the client: one request, its JSON answer, or a `CliError` with the
//! server's error code (or `unreachable` / `bad_response`).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Map, Value};

use super::error::{CliError, Result};

/// How long to wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take, on top of a long poll's `wait`. The contract answers every
/// request within 29 s.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(35);

/// The answer of [`Api::download`].
pub struct Download {
    pub bytes: Vec<u8>,
    pub content_type: Option<String>,
    pub disposition: Option<String>,
}

pub struct Api {
    http: reqwest::Client,
    /// The server URL without a trailing `/`.
    base: String,
}

impl Api {
    pub fn new(base: &str) -> Result<Self> {
        let base = base.trim().trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base).map_err(|e| {
            CliError::new(
                "usage",
                format!("the server URL '{base}' is not a URL: {e}"),
            )
        })?;
        if !matches!(parsed.scheme(), "http" | "https")
            || parsed.host_str().is_none()
            || parsed.query().is_some()
            || parsed.fragment().is_some()
        {
            return Err(CliError::new(
                "usage",
                format!(
                    "the server URL '{base}' must be an http:// or https:// URL without a query"
                ),
            ));
        }
        let http = reqwest::Client::builder()
            .user_agent(concat!("agentaddress-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            // A redirect could carry the bearer token elsewhere: never follow one.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| CliError::new("internal", format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { http, base })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `{base}/api/v1/{path}`; `path` is made of validated ids and keys only.
    pub fn url(&self, path: &str) -> String {
        format!("{}/api/v1/{path}", self.base)
    }

    /// Sends one request and returns the JSON of a 2xx answer (`null` for an empty body).
    pub async fn call(
        &self, method: Method, path: &str, query: &[(&str, String)], token: Option<&str>,
        body: Option<&Value>, extra_wait: Duration,
    ) -> Result<Value> {
        self.send(method, path, query, token, body, extra_wait, None)
            .await
    }

    /// [`Api::call`] with a JSON body and an optional `Idempotency-Key`.
    pub async fn call_with_key(
        &self, method: Method, path: &str, token: Option<&str>, body: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Value> {
        self.send(
            method,
            path,
            &[],
            token,
            Some(body),
            Duration::ZERO,
            idempotency_key,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self, method: Method, path: &str, query: &[(&str, String)], token: Option<&str>,
        body: Option<&Value>, extra_wait: Duration, idempotency_key: Option<&str>,
    ) -> Result<Value> {
        let mut request = self
            .http
            .request(method, self.url(path))
            .timeout(REQUEST_TIMEOUT + extra_wait)
            .header(reqwest::header::ACCEPT, "application/json");
        if !query.is_empty() {
            request = request.query(query);
        }
        if let Some(token) = token {
            // `bearer_auth` marks the header sensitive: it is never shown in debug output.
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        let response = request.send().await.map_err(|e| self.network_error(&e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = response.bytes().await.map_err(|e| self.network_error(&e))?;
        if status.is_success() {
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(&bytes).map_err(|_| {
                CliError::new(
                    "bad_response",
                    format!("the server answered HTTP {status} with a body that is not JSON"),
                )
                .with("http_status", status.as_u16().into())
            });
        }
        let error = server_error(status, &bytes);
        // `Retry-After` (429, 503) for clients that retry (`wait`), when the body lacks it.
        Err(match retry_after {
            Some(secs) if error.get("retry_after_seconds").is_none() => {
                error.with("retry_after_seconds", secs.into())
            }
            _ => error,
        })
    }

    /// Downloads the bytes of a 2xx answer (at most `max_bytes`) with its `Content-Type` and
    /// `Content-Disposition`; an error answer is a `CliError` as for [`Api::call`].
    pub async fn download(&self, path: &str, token: &str, max_bytes: usize) -> Result<Download> {
        let mut response = self
            .http
            .get(self.url(path))
            .timeout(REQUEST_TIMEOUT)
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| self.network_error(&e))?;
        // A download too large for the deployment to answer itself (on AWS) is a 303 to a
        // short-lived link that needs no token (docs/API.md §11): followed once, without it.
        if response.status() == StatusCode::SEE_OTHER {
            let link = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| reqwest::Url::parse(l).ok())
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .ok_or_else(|| {
                    CliError::new(
                        "bad_response",
                        "the server redirected the download without a usable link",
                    )
                })?;
            response = self
                .http
                .get(link)
                .timeout(REQUEST_TIMEOUT)
                .send()
                .await
                .map_err(|e| self.network_error(&e))?;
        }
        let status = response.status();
        let header = |name: reqwest::header::HeaderName| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header(reqwest::header::CONTENT_TYPE);
        let disposition = header(reqwest::header::CONTENT_DISPOSITION);
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.network_error(&e))? {
            if bytes.len() + chunk.len() > max_bytes {
                return Err(CliError::new(
                    "bad_response",
                    format!("the download is larger than {max_bytes} bytes"),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(server_error(status, &bytes));
        }
        Ok(Download {
            bytes,
            content_type,
            disposition,
        })
    }

    fn network_error(&self, e: &reqwest::Error) -> CliError {
        let what = if e.is_timeout() {
            format!("no answer in time from the server at {}", self.base)
        } else if e.is_connect() {
            format!("cannot connect to the server at {}", self.base)
        } else {
            format!("the connection to the server at {} failed", self.base)
        };
        // The innermost cause (e.g. "Connection refused"); reqwest's own message names the URL.
        let mut detail = String::new();
        let mut next = std::error::Error::source(e);
        while let Some(cause) = next {
            detail = format!(": {cause}");
            next = cause.source();
        }
        CliError::new("unreachable", format!("{what}{detail}"))
    }
}

/// The error of a non-2xx answer: the server's own `{"error": {...}}` when it sent one.
fn server_error(status: StatusCode, bytes: &[u8]) -> CliError {
    let parsed = serde_json::from_slice::<Value>(bytes).ok();
    let error = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(Value::as_object)
        .filter(|e| e.get("code").is_some_and(Value::is_string));
    match error {
        Some(error) => {
            CliError::from_server(error.clone()).with("http_status", status.as_u16().into())
        }
        None => {
            let (code, message) = match status.as_u16() {
                429 => (
                    "rate_limited",
                    format!("the server (or a gateway in front of it) answered HTTP {status}; retry later"),
                ),
                502..=504 => (
                    "unavailable",
                    format!("the server (or a gateway in front of it) answered HTTP {status}; retry later"),
                ),
                300..=399 => (
                    "bad_response",
                    format!(
                        "the server answered with a redirect (HTTP {status}), which is never \
                         followed: give the final URL with --url"
                    ),
                ),
                _ => (
                    "bad_response",
                    format!("the server answered HTTP {status} without an agentaddress error"),
                ),
            };
            CliError::new(code, message).with("http_status", status.as_u16().into())
        }
    }
}

/// A JSON object field, or `bad_response`.
pub fn field<'a>(value: &'a Value, path: &[&str]) -> Result<&'a Value> {
    let mut v = value;
    for name in path {
        v = v.get(name).ok_or_else(|| {
            CliError::new(
                "bad_response",
                format!("the server's answer has no '{}'", path.join(".")),
            )
        })?;
    }
    Ok(v)
}

/// A string field, or `bad_response`.
pub fn string_field(value: &Value, path: &[&str]) -> Result<String> {
    field(value, path)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| {
            CliError::new(
                "bad_response",
                format!(
                    "'{}' in the server's answer is not a string",
                    path.join(".")
                ),
            )
        })
}

/// An optional string field (absent or `null` → `None`).
pub fn optional_string(value: &Value, path: &[&str]) -> Option<String> {
    let mut v = value;
    for name in path {
        v = v.get(name)?;
    }
    v.as_str().map(str::to_owned)
}

/// An object, for adding fields to an answer before printing it.
pub fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => {
            let mut map = Map::new();
            map.insert("value".into(), other);
            map
        }
    }
}
