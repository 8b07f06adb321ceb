//! The two HTTP versions on one port: the HTTP/2 preface sniff on a connection's first bytes,
//! and [`PerVersionLayer`], which adds what each version needs to its requests and answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use agentaddress_api::hygiene::SocketRequest;
use axum::body::{Body, HttpBody};
use axum::extract::connect_info::ConnectInfo;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use axum::response::Response;
use tower::{Layer, Service};

use super::stalls::InFlightBody;
use super::timeouts::{body_timeout_response, BodyClock, BodyFlags, Tracked};
use super::{Conn, Guarded, InFlight};

/// The start of the HTTP/2 connection preface: no HTTP/1 request starts so.
const PREFACE: &[u8] = b"PRI ";

impl<I> Guarded<I> {
    /// Looks for the HTTP/2 preface in the connection's first bytes: an HTTP/2 connection's
    /// idle time is counted from its start, not as an HTTP/1 request head.
    pub(super) fn sniff(&mut self, read: &[u8]) {
        let Some(seen) = self.preface else {
            return;
        };
        let take = read.len().min(PREFACE.len() - seen);
        if read[..take] != PREFACE[seen..seen + take] {
            self.preface = None;
        } else if seen + take == PREFACE.len() {
            self.preface = None;
            self.state.http2.store(true, Ordering::Relaxed);
        } else {
            self.preface = Some(seen + take);
        }
    }
}

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
        let conn = req
            .extensions()
            .get::<ConnectInfo<Conn>>()
            .map(|c| c.0.clone());
        let in_flight = conn.as_ref().map(|conn| {
            req.extensions_mut().insert(ConnectInfo(conn.addr));
            if http1 {
                // Read off a socket by hyper: HTTP/1.1 without `Host` is refused.
                req.extensions_mut().insert(SocketRequest);
            } else {
                conn.state.http2.store(true, Ordering::Relaxed);
            }
            conn.state.begin()
        });
        if !http1 && !req.headers().contains_key(header::HOST) {
            let authority = req
                .uri()
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
            if let Some(host) = authority {
                req.headers_mut().insert(header::HOST, host);
            }
        }
        let mut body_flags = None;
        if !req.body().is_end_stream() {
            // A body to read (no body at all — a GET, `Content-Length: 0` — leaves nothing
            // unread): watch whether the handler reads it to its end, and in time.
            let flags = Arc::new(BodyFlags::default());
            let (parts, body) = req.into_parts();
            let body = Body::new(Tracked {
                inner: body,
                flags: Arc::clone(&flags),
                clock: conn.map(|c| BodyClock::new(&c.state.limits)),
            });
            req = Request::from_parts(parts, body);
            body_flags = Some(flags);
        }
        PerVersionFuture {
            inner: self.inner.call(req),
            http1,
            body_flags,
            in_flight,
        }
    }
}

pin_project_lite::pin_project! {
    pub struct PerVersionFuture<F> {
        #[pin]
        inner: F,
        http1: bool,
        // Set for a request with a body.
        body_flags: Option<Arc<BodyFlags>>,
        // Set on `serve`'s connections; moves into the answer's body.
        in_flight: Option<InFlight>,
    }
}

impl<F, E> Future for PerVersionFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        let Ok(mut response) = result else {
            return Poll::Ready(result);
        };
        if let Some(flags) = this.body_flags.as_ref() {
            if flags.timed_out.load(Ordering::Acquire) {
                response = body_timeout_response();
            }
            if *this.http1 && !flags.read_to_end.load(Ordering::Acquire) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
        }
        if response.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
            // An upgraded connection (the wake-up socket) is never idle in the HTTP sense:
            // it stays busy for as long as it lives, so the idle and header timeouts leave it
            // alone. The count is raised for good instead of holding the token, which would
            // keep the connection's state alive after the connection is gone.
            if let Some(in_flight) = this.in_flight.take() {
                in_flight.0.in_flight.fetch_add(1, Ordering::AcqRel);
                in_flight.0.upgraded.store(true, Ordering::Release);
            }
        }
        if let Some(in_flight) = this.in_flight.take() {
            response = response.map(|body| Body::new(InFlightBody::new(body, in_flight)));
        }
        Poll::Ready(Ok(response))
    }
}
