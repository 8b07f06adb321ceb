//! A wake hooks' receiver for black-box tests (docs/API.md §19): an HTTP server on 127.0.0.1
//! that records every request it is sent and answers the status it is told, shared by the
//! tests against `serve` and against the local Lambda stack.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

/// A receiver on loopback: what it was sent, and the status it answers now.
#[derive(Default)]
pub struct Receiver {
    seen: Mutex<Vec<(HeaderMap, Bytes)>>,
    pub status: AtomicU16,
}

impl Receiver {
    /// Every request so far: its headers and body.
    pub fn seen(&self) -> Vec<(HeaderMap, Bytes)> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Answers `status` from now on.
    pub fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// Waits until it has been sent `n` requests; panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<(HeaderMap, Bytes)> {
        let start = Instant::now();
        loop {
            let seen = self.seen();
            if seen.len() >= n {
                return seen;
            }
            assert!(
                start.elapsed() < within,
                "{} wakes after {within:?}, {n} expected",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Starts a receiver answering 200; it and its URL (`http://127.0.0.1:PORT/wake`).
pub async fn receiver() -> (Arc<Receiver>, String) {
    let r = Arc::new(Receiver {
        status: AtomicU16::new(200),
        ..Receiver::default()
    });
    let kept = r.clone();
    let app = axum::Router::new().route(
        "/wake",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let r = kept.clone();
            async move {
                r.seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((headers, body));
                StatusCode::from_u16(r.status.load(Ordering::SeqCst))
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let url = format!("http://{}/wake", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (r, url)
}

/// Header `name` of a request; panics when it is missing.
pub fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// The wake a request carried (its JSON body).
pub fn wake_of(request: &(HeaderMap, Bytes)) -> Value {
    serde_json::from_slice(&request.1).expect("a JSON wake")
}
