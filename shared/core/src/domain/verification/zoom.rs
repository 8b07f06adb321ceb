//! Zoom: `x-zm-signature: v0=<hex>` HMAC-SHA256 of `v0:{x-zm-request-timestamp}:{body}` keyed
//! by the app's secret token
//! (<https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events>). The handshake is
//! `{"event": "endpoint.url_validation", "payload": {"plainToken"}}`, answered with
//! `encryptedToken`, the hex HMAC-SHA256 of the plain token under the same secret; a body is
//! named `zoom.{event}` (docs/API.md §3, §15).

use serde_json::{Map, Value};

use super::{body_mac, timed_hex, Checked, Signed, VerificationConfig};

pub(super) const HEADERS: &[&str] = &[
    "x-zm-signature",
    "x-zm-request-timestamp",
    "x-zm-trackingid",
];
const SIGNATURE: &str = "x-zm-signature";
const TIMESTAMP: &str = "x-zm-request-timestamp";
pub(super) const VALIDATION_EVENT: &str = "endpoint.url_validation";

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    timed_hex::verify(config, d, SIGNATURE, TIMESTAMP)?;
    Ok(None)
}

pub(super) fn sign(secret: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    timed_hex::sign(secret, timestamp, body, SIGNATURE, TIMESTAMP)
}

/// Zoom's URL validation: the plain token, when `body` is one.
pub(super) fn plain_token(body: &Map<String, Value>) -> Option<Option<&str>> {
    (body.get("event").and_then(Value::as_str) == Some(VALIDATION_EVENT)).then(|| {
        body.get("payload")
            .and_then(|p| p.get("plainToken"))
            .and_then(Value::as_str)
    })
}

/// The answer's `encryptedToken`.
pub(super) fn encrypted_token(secret: &str, plain_token: &str) -> String {
    body_mac(secret, plain_token.as_bytes())
}

/// `zoom.{event}` for a body sent with Zoom's headers.
pub(super) fn event_type(headers: &[(&str, &str)], body: &Map<String, Value>) -> Option<String> {
    if !super::has_any(headers, &[SIGNATURE, TIMESTAMP]) {
        return None;
    }
    super::provider_type("zoom", body.get("event")?.as_str()?)
}
