//! Request-level checks every route shares, on both deployments, before routing decides
//! anything (docs/API.md, "Request hygiene"):
//!
//! - `Host`: at most one; a host name, IPv4 address or `[IPv6]` address with an optional port
//!   1–65535 (no userinfo); required on HTTP/1.1 requests that the serving layer marks with
//!   [`SocketRequest`] (`serve`; the Lambda adapter's requests are built from API Gateway
//!   events, with or without a Host, and in-process requests are built by the MCP endpoint);
//! - a request target with an authority (absolute-form on HTTP/1.1, `:authority` on HTTP/2, the
//!   URL the Lambda adapter builds) is checked the same way and replaces `Host`, so the URLs the
//!   API hands out are built from it;
//! - `Transfer-Encoding`: `chunked` is the only transfer coding (501 `not_supported` otherwise,
//!   before the body is read);
//! - `Authorization`, `If-Match`, `Idempotency-Key`: at most one each.
//!
//! These checks look only at the message's own header lines, never at ids, tokens or stored
//! data, so answering them before authentication reveals nothing (docs/API.md, "Authentication
//! first"). A tower layer with an inline future, like `request_log`, so a long poll keeps no
//! boxed middleware state for its whole wait.

use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderName, HeaderValue, Request, Version};
use tower::{Layer, Service};

use super::ApiError;

/// A request extension: the request was read off a client's connection by the server itself
/// (`agentaddress serve`), so an HTTP/1.1 request without `Host` is refused (docs/API.md,
/// "Request hygiene"). The serving layer inserts it; requests without it (the Lambda adapter's,
/// the MCP endpoint's in-process ones, tests driving the router) may lack `Host`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SocketRequest;

/// `.layer(HygieneLayer)` on a router.
#[derive(Debug, Clone, Copy, Default)]
pub struct HygieneLayer;

impl<S> Layer<S> for HygieneLayer {
    type Service = Hygiene<S>;

    fn layer(&self, inner: S) -> Hygiene<S> {
        Hygiene { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Hygiene<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for Hygiene<S>
where
    S: Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = HygieneFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        match check(&mut req) {
            Ok(()) => HygieneFuture::Inner {
                inner: self.inner.call(req),
            },
            Err(e) => HygieneFuture::Refused {
                response: Some(e.into_response()),
            },
        }
    }
}

pin_project_lite::pin_project! {
    #[project = HygieneFutureProj]
    pub enum HygieneFuture<F> {
        Inner { #[pin] inner: F },
        Refused { response: Option<Response> },
    }
}

impl<F, E> Future for HygieneFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            HygieneFutureProj::Inner { inner } => inner.poll(cx),
            HygieneFutureProj::Refused { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                // Polled again after completion: answer the same way rather than panic.
                None => Poll::Ready(Ok(
                    ApiError::Internal("hygiene future polled twice".into()).into_response()
                )),
            },
        }
    }
}

/// Headers that may appear once at most, with the name the error message uses.
const SINGLETONS: [(&str, &str); 3] = [
    ("authorization", "Authorization"),
    ("if-match", "If-Match"),
    ("idempotency-key", "Idempotency-Key"),
];

/// All the checks, in the order docs/API.md lists them; on success `Host` holds the authority
/// the API builds its URLs from (when the request named one).
pub fn check<B>(req: &mut Request<B>) -> Result<(), ApiError> {
    let from_socket = req.extensions().get::<SocketRequest>().is_some();
    let version = req.version();
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    let host = check_host(req.headers(), version, from_socket, authority.as_deref())?;
    check_transfer_encoding(req.headers())?;
    check_singletons(req.headers())?;
    if let Some(h) = host {
        req.headers_mut().insert(header::HOST, h);
    }
    Ok(())
}

/// The `Host` rules; returns the value `Host` must be set to (the target's authority) if any.
fn check_host(
    headers: &HeaderMap, version: Version, from_socket: bool, authority: Option<&str>,
) -> Result<Option<HeaderValue>, ApiError> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(ApiError::invalid("Send the Host header once."));
    }
    match first {
        None if version == Version::HTTP_11 && from_socket => {
            return Err(ApiError::invalid(
                "An HTTP/1.1 request must carry a Host header.",
            ));
        }
        Some(v) if !v.to_str().is_ok_and(is_valid_authority) => {
            return Err(ApiError::invalid(
                "The Host header must be a host name, an IPv4 address or an [IPv6] address, \
                 with an optional port from 1 to 65535.",
            ));
        }
        None | Some(_) => {}
    }
    match authority {
        None => Ok(None),
        Some(a) if is_valid_authority(a) => Ok(HeaderValue::from_str(a).ok()),
        Some(_) => Err(ApiError::invalid(
            "The request target's authority must be a host name, an IPv4 address or an [IPv6] \
             address, with an optional port from 1 to 65535 (and no user information).",
        )),
    }
}

fn check_transfer_encoding(headers: &HeaderMap) -> Result<(), ApiError> {
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let Ok(text) = value.to_str() else {
            return Err(unsupported_coding("(not ASCII)"));
        };
        for coding in text.split(',') {
            let name = coding.split(';').next().unwrap_or("").trim();
            if !name.is_empty() && !name.eq_ignore_ascii_case("chunked") {
                return Err(unsupported_coding(name));
            }
        }
    }
    Ok(())
}

fn unsupported_coding(name: &str) -> ApiError {
    let name: String = name.chars().take(40).collect();
    ApiError::NotSupported(format!(
        "Transfer-Encoding `{name}` is not supported: send the body as is, with Content-Length \
         or `Transfer-Encoding: chunked` only."
    ))
}

fn check_singletons(headers: &HeaderMap) -> Result<(), ApiError> {
    for (name, label) in SINGLETONS {
        if headers
            .get_all(HeaderName::from_static(name))
            .iter()
            .count()
            > 1
        {
            return Err(ApiError::invalid(format!("Send the {label} header once.")));
        }
    }
    Ok(())
}

/// An authority the API can put in the URLs it hands out: a host (a name of letters, digits,
/// `-`, `.`, `_` and `~`; an IPv4 address; an `[IPv6]` address) and an optional port 1–65535.
/// No userinfo, no percent-encoding, at most 255 bytes (docs/API.md, "Request hygiene").
pub fn is_valid_authority(text: &str) -> bool {
    if text.is_empty() || text.len() > 255 {
        return false;
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return false;
        };
        if inside.parse::<Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => (text, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (&text[..text.len() - after.len()], Some(p)),
                None => return false,
            },
        }
    } else {
        match text.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if let Some(p) = port {
        let digits = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
        if !digits || !matches!(p.parse::<u32>(), Ok(1..=65535)) {
            return false;
        }
    }
    if host.starts_with('[') {
        return true;
    }
    if host.parse::<Ipv4Addr>().is_ok() {
        return true;
    }
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn request(version: Version, uri: &str, headers: &[(&str, &str)], socket: bool) -> Request<()> {
        let mut builder = Request::builder().version(version).uri(uri);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let mut req = builder.body(()).expect("request");
        if socket {
            req.extensions_mut().insert(SocketRequest);
        }
        req
    }

    fn status(r: Result<(), ApiError>) -> Option<(StatusCode, &'static str)> {
        r.err().map(|e| (e.status(), e.code()))
    }

    const BAD: Option<(StatusCode, &str)> = Some((StatusCode::BAD_REQUEST, "invalid_request"));

    #[test]
    fn authorities() {
        for good in [
            "a.com",
            "A-b_c~d.example",
            "a.com:1",
            "a.com:65535",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]",
            "[2001:db8::1]:443",
            "localhost",
        ] {
            assert!(is_valid_authority(good), "{good}");
        }
        for bad in [
            "",
            "a.com:99999",
            "a.com:0",
            "a.com:",
            "a.com:8x",
            "a.com:-1",
            "user@a.com",
            "user:pw@a.com",
            "a.com, b.com",
            "a com",
            "a%41.com",
            "[::1",
            "[::1]x",
            "[zz]",
            "::1",
            "a.com:80:80",
            ":80",
            "a/b",
        ] {
            assert!(!is_valid_authority(bad), "{bad}");
        }
        assert!(!is_valid_authority(&"a".repeat(256)));
    }

    #[test]
    fn host_is_required_on_http11_from_a_socket_only() {
        let mut r = request(Version::HTTP_11, "/healthz", &[], true);
        assert_eq!(status(check(&mut r)), BAD);
        let mut r = request(Version::HTTP_10, "/healthz", &[], true);
        assert_eq!(status(check(&mut r)), None);
        // The Lambda adapter's requests (and in-process ones) are not marked.
        let mut r = request(Version::HTTP_11, "/healthz", &[], false);
        assert_eq!(status(check(&mut r)), None);
        let mut r = request(Version::HTTP_2, "/healthz", &[], true);
        assert_eq!(status(check(&mut r)), None);
        let mut r = request(Version::HTTP_11, "/healthz", &[("host", "a.com")], true);
        assert_eq!(status(check(&mut r)), None);
        assert_eq!(r.headers()[header::HOST], "a.com");
    }

    #[test]
    fn bad_or_repeated_hosts_are_refused_everywhere() {
        for socket in [true, false] {
            let mut r = request(
                Version::HTTP_11,
                "/",
                &[("host", "a.com"), ("host", "a.com")],
                socket,
            );
            assert_eq!(status(check(&mut r)), BAD);
            let mut r = request(Version::HTTP_10, "/", &[("host", "a.com:99999")], socket);
            assert_eq!(status(check(&mut r)), BAD);
        }
    }

    #[test]
    fn the_targets_authority_replaces_host() {
        let mut r = request(
            Version::HTTP_11,
            "http://b.example:8080/api/v1/addresses",
            &[("host", "a.com")],
            true,
        );
        assert_eq!(status(check(&mut r)), None);
        assert_eq!(r.headers()[header::HOST], "b.example:8080");
        // Without any Host (HTTP/2 `:authority`, a Lambda URL built from the domain name).
        let mut r = request(Version::HTTP_2, "https://c.example/x", &[], true);
        assert_eq!(status(check(&mut r)), None);
        assert_eq!(r.headers()[header::HOST], "c.example");
        let mut r = request(
            Version::HTTP_11,
            "http://user@b.example/",
            &[("host", "a.com")],
            true,
        );
        assert_eq!(status(check(&mut r)), BAD);
        assert_eq!(r.headers()[header::HOST], "a.com");
    }

    #[test]
    fn only_chunked_is_a_transfer_coding() {
        let host = ("host", "a.com");
        let mut r = request(
            Version::HTTP_11,
            "/",
            &[host, ("transfer-encoding", "gzip, chunked")],
            true,
        );
        let e = check(&mut r).expect_err("gzip");
        assert_eq!(
            (e.status(), e.code()),
            (StatusCode::NOT_IMPLEMENTED, "not_supported")
        );
        assert!(e.to_string().contains("gzip"), "{e}");
        for ok in ["chunked", "Chunked", " chunked ", ",chunked"] {
            let mut r = request(
                Version::HTTP_11,
                "/",
                &[host, ("transfer-encoding", ok)],
                true,
            );
            assert_eq!(status(check(&mut r)), None, "{ok}");
        }
        let mut r = request(
            Version::HTTP_11,
            "/",
            &[
                host,
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "br"),
            ],
            true,
        );
        assert_eq!(
            status(check(&mut r)),
            Some((StatusCode::NOT_IMPLEMENTED, "not_supported"))
        );
    }

    #[test]
    fn singleton_headers_once() {
        for (name, label) in SINGLETONS {
            let mut r = request(
                Version::HTTP_11,
                "/",
                &[("host", "a.com"), (name, "1"), (name, "1")],
                true,
            );
            let e = check(&mut r).expect_err(name);
            assert_eq!(e.code(), "invalid_request");
            assert_eq!(e.to_string(), format!("Send the {label} header once."));
            let mut r = request(
                Version::HTTP_11,
                "/",
                &[("host", "a.com"), (name, "1")],
                true,
            );
            assert_eq!(status(check(&mut r)), None, "{name}");
        }
    }
}
