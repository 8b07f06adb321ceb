//! Slack: `X-Slack-Signature: v0=<hex>` HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{body}`
//! keyed by the app's signing secret
//! (<https://api.slack.com/authentication/verifying-requests-from-slack>). The delivery id is
//! an Events API callback's `event_id` (Slack retries with the same one); the handshake is
//! `{"type": "url_verification", "challenge"}`; an event callback is named
//! `slack.{event.type}` (docs/API.md §3, §15).

use serde_json::{Map, Value};

use super::{as_key, timed_hex, Checked, Signed, VerificationConfig};

pub(super) const HEADERS: &[&str] = &[
    "x-slack-signature",
    "x-slack-request-timestamp",
    "x-slack-retry-num",
    "x-slack-retry-reason",
];
const SIGNATURE: &str = "x-slack-signature";
const TIMESTAMP: &str = "x-slack-request-timestamp";

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    timed_hex::verify(config, d, SIGNATURE, TIMESTAMP)?;
    let id = serde_json::from_slice::<Value>(d.body)
        .ok()
        .and_then(|v| v.get("event_id").and_then(Value::as_str).and_then(as_key));
    Ok(id)
}

pub(super) fn sign(secret: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    timed_hex::sign(secret, timestamp, body, SIGNATURE, TIMESTAMP)
}

/// Slack's URL verification: the challenge, when `body` is one.
pub(super) fn challenge(body: &Map<String, Value>) -> Option<Option<&str>> {
    (body.get("type").and_then(Value::as_str) == Some("url_verification"))
        .then(|| body.get("challenge").and_then(Value::as_str))
}

/// `slack.{event.type}` for an event callback sent with Slack's headers.
pub(super) fn event_type(headers: &[(&str, &str)], body: &Map<String, Value>) -> Option<String> {
    if !super::has_any(headers, &[SIGNATURE, TIMESTAMP])
        || body.get("type").and_then(Value::as_str) != Some("event_callback")
    {
        return None;
    }
    let inner = body.get("event")?.get("type")?.as_str()?;
    super::provider_type("slack", inner)
}
