//! One log line per request with the route template, never the concrete path: inbox URLs carry
//! secrets, and headers (tokens) are never logged; and the request's metrics
//! ([`crate::metrics::request`]), labelled the same way.
//!
//! A tower layer rather than `axum::middleware::from_fn`: `from_fn` boxes a clone of the inner
//! service and the middleware's future for every request, about a kilobyte that a long poll
//! keeps for its whole wait. This future lives inline in the route's own.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use http::Method;
use tower::{Layer, Service};

/// `.layer(RequestLogLayer)` on a router.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestLogLayer;

impl<S> Layer<S> for RequestLogLayer {
    type Service = RequestLog<S>;

    fn layer(&self, inner: S) -> RequestLog<S> {
        RequestLog { inner }
    }
}

#[derive(Debug, Clone)]
pub struct RequestLog<S> {
    inner: S,
}

impl<S> Service<Request> for RequestLog<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = RequestLogFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let method = req.method().clone();
        // `MatchedPath` is a shared string: cloning it allocates nothing.
        let route = req.extensions().get::<MatchedPath>().cloned();
        RequestLogFuture {
            inner: self.inner.call(req),
            method,
            route,
            started: Instant::now(),
        }
    }
}

pin_project_lite::pin_project! {
    pub struct RequestLogFuture<F> {
        #[pin]
        inner: F,
        method: Method,
        route: Option<MatchedPath>,
        started: Instant,
    }
}

impl<F, E> Future for RequestLogFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        if let Ok(response) = &result {
            let method = &*this.method;
            let route = this
                .route
                .as_ref()
                .map_or("(unmatched)", MatchedPath::as_str);
            let status = response.status().as_u16();
            let took = this.started.elapsed();
            crate::metrics::request(method.as_str(), route, status, took);
            // Milliseconds to two decimals (`ms=0.21`): the nearest f64 to a number of
            // hundredths prints with at most two decimals, in text and JSON logs alike.
            let ms = (took.as_secs_f64() * 100_000.0).round() / 100.0;
            if status >= 500 {
                tracing::warn!(%method, %route, status, ms, "request");
            } else {
                tracing::info!(%method, %route, status, ms, "request");
            }
        }
        Poll::Ready(result)
    }
}
