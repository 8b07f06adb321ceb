//! The checker's wake receiver (docs/API.md §19). With [`super::Config::wakes`], every address
//! the workload makes has a wake hook for the workload's deliveries ([`DELIVERY_TYPE`]) pointing
//! at this receiver on loopback (the server must allow private receivers). The receiver
//! answers every wake 204 and records it — its range and whether its Standard Webhooks
//! signature verifies with the secret its hook was made with — and [`super::verify`] checks
//! that every delivery in a feed lies in the range of a wake the receiver answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::history::{WakeSeen, DELIVERY_TYPE};

/// The hook every address of the run is made with (the create body's `hooks`).
pub(crate) fn hook(url: &str) -> Value {
    serde_json::json!([{ "url": url, "types": [DELIVERY_TYPE] }])
}

#[derive(Default)]
pub(crate) struct Receiver {
    pub url: String,
    /// Each address's hook secret, from its create answer.
    secrets: Mutex<HashMap<String, String>>,
    seen: Mutex<Vec<WakeSeen>>,
}

impl Receiver {
    /// Listens on 127.0.0.1 (a free port) until the process ends.
    pub async fn start() -> Result<Arc<Self>, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("the wake receiver cannot listen: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("the wake receiver's address: {e}"))?;
        let receiver = Arc::new(Self {
            url: format!("http://{addr}/wake"),
            ..Self::default()
        });
        let app = axum::Router::new()
            .route("/wake", axum::routing::post(wake))
            .with_state(Arc::clone(&receiver));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(receiver)
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Address `address_id`'s hook was made with `secret`.
    pub fn expect(&self, address_id: &str, secret: &str) {
        Self::lock(&self.secrets).insert(address_id.to_owned(), secret.to_owned());
    }

    /// Every wake received so far.
    pub fn seen(&self) -> Vec<WakeSeen> {
        Self::lock(&self.seen).clone()
    }

    /// The highest sequence the wakes of `address_id` covered (0: none).
    pub fn covered(&self, address_id: &str) -> u64 {
        Self::lock(&self.seen)
            .iter()
            .filter(|w| w.address_id == address_id)
            .map(|w| w.to)
            .max()
            .unwrap_or(0)
    }

    /// Whether the wake's signature verifies with its address's secret.
    fn signed(&self, address_id: &str, headers: &HeaderMap, body: &[u8]) -> bool {
        let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
        let (Some(id), Some(t), Some(signature)) = (
            header("webhook-id"),
            header("webhook-timestamp").and_then(|t| t.parse::<i64>().ok()),
            header("webhook-signature"),
        ) else {
            return false;
        };
        let Some(secret) = Self::lock(&self.secrets).get(address_id).cloned() else {
            return false;
        };
        crate::verification::standard_headers(&secret, id, t, body)
            .iter()
            .any(|(name, value)| {
                name == "webhook-signature" && signature.split(' ').any(|s| s == value)
            })
    }
}

async fn wake(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let Ok(wake) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let (Some(address_id), Some(from), Some(to)) = (
        wake["address_id"].as_str(),
        wake["from_sequence"].as_u64(),
        wake["to_sequence"].as_u64(),
    ) else {
        return StatusCode::BAD_REQUEST;
    };
    let seen = WakeSeen {
        address_id: address_id.to_owned(),
        webhook_id: headers
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        from,
        to,
        signed: r.signed(address_id, &headers, &body),
    };
    Receiver::lock(&r.seen).push(seen);
    StatusCode::NO_CONTENT
}
