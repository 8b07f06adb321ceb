//! What `serve` adds to the API for the two HTTP versions it speaks on one port.
//!
//! **HTTP/2** carries the host in the `:authority` pseudo-header, which hyper puts in the
//! request's URI, not in a `Host` header. The API builds its absolute URLs (`inbox_url`,
//! `events_url`…) from `Host`, so an HTTP/2 request without one gets it from the authority,
//! as RFC 9113 §8.3.1 says a server should treat them alike.
//!
//! **HTTP/1**: `Connection: close` on an answer given before the request's body was read to
//! its end.
//!
//! Some answers are given without reading the body: a 413 refuses a declared `Content-Length`
//! over the limit before reading a byte, and a 401 or 404 on an inbox URL is decided from the
//! path alone. hyper then cannot find where the next request starts, so it closes the
//! connection after the answer — but silently: the answer still looks keep-alive. A client
//! with a connection pool (reqwest, curl's multi, most SDKs) puts the connection back and sends
//! its next request on a socket that is closing, and that request fails with "connection
//! closed before message completed" although the server was fine. Saying `Connection: close`
//! makes the client open a fresh connection instead. HTTP/2 streams don't have this problem
//! (an unread body ends its stream only), so they pass through untouched.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tower::{Layer, Service};

/// `.layer(PerVersionLayer)` on the router. A tower layer, not `axum::middleware::from_fn`,
/// which boxes a service clone and a future per request: memory a long poll would keep for
/// its whole wait.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerVersionLayer;

impl<S> Layer<S> for PerVersionLayer {
    type Service = PerVersion<S>;

    fn layer(&self, inner: S) -> PerVersion<S> {
        PerVersion { inner }
    }
}

#[derive(Debug, Clone)]
pub struct PerVersion<S> {
    inner: S,
}

impl<S> Service<Request> for PerVersion<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = PerVersionFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let http1 = matches!(
            req.version(),
            Version::HTTP_09 | Version::HTTP_10 | Version::HTTP_11
        );
        let mut read_to_end = None;
        if !http1 {
            if !req.headers().contains_key(header::HOST) {
                let authority = req
                    .uri()
                    .authority()
                    .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
                if let Some(host) = authority {
                    req.headers_mut().insert(header::HOST, host);
                }
            }
        } else if !req.body().is_end_stream() {
            // A body to read (no body at all — a GET, `Content-Length: 0` — leaves nothing
            // unread): watch whether the handler reads it to its end.
            let flag = Arc::new(AtomicBool::new(false));
            let (parts, body) = req.into_parts();
            let body = Body::new(Tracked {
                inner: body,
                read_to_end: Arc::clone(&flag),
            });
            req = Request::from_parts(parts, body);
            read_to_end = Some(flag);
        }
        PerVersionFuture {
            inner: self.inner.call(req),
            read_to_end,
        }
    }
}

pin_project_lite::pin_project! {
    pub struct PerVersionFuture<F> {
        #[pin]
        inner: F,
        // Set for an HTTP/1 request with a body.
        read_to_end: Option<Arc<AtomicBool>>,
    }
}

impl<F, E> Future for PerVersionFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut result = std::task::ready!(this.inner.poll(cx));
        if let (Ok(response), Some(flag)) = (&mut result, this.read_to_end.as_ref()) {
            if !flag.load(Ordering::Acquire) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
        }
        Poll::Ready(result)
    }
}

/// A request body that records whether it was read to its end.
struct Tracked {
    inner: Body,
    read_to_end: Arc<AtomicBool>,
}

impl Tracked {
    fn mark_if_ended(&self) {
        if self.inner.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
        }
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.read_to_end.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(_))) => self.mark_if_ended(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
