//! Linear: `Linear-Signature`, the hex HMAC-SHA256 of the body keyed by the webhook's signing
//! secret, and the body's `webhookTimestamp` (Unix milliseconds), which must be within the
//! tolerance (<https://linear.app/developers/webhooks#securing-webhooks>). The delivery id is
//! `Linear-Delivery`; a body is named `linear.{type}` (docs/API.md §3, §15).

use serde_json::{Map, Value};

use super::{
    as_key, body_mac, hex_signature, one_header, within, Checked, Reason, Signed,
    VerificationConfig,
};

pub(super) const HEADERS: &[&str] = &["linear-signature", "linear-delivery", "linear-event"];

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    hex_signature(config, d, "linear-signature", "")?;
    // Signed with the body: a body without its timestamp cannot be checked for a replay.
    let ms = serde_json::from_slice::<Value>(d.body)
        .ok()
        .and_then(|v| v.get("webhookTimestamp").and_then(Value::as_i64))
        .ok_or(Reason::BadSignature)?;
    if !within(ms.div_euclid(1000), config.tolerance_seconds, d.now) {
        return Err(Reason::TimestampOutOfTolerance);
    }
    Ok(one_header(d.headers, "linear-delivery")
        .ok()
        .and_then(as_key))
}

pub(super) fn sign(secret: &str, id: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("linear-signature", body_mac(secret, body)),
        ("linear-delivery", id.to_owned()),
    ]
}

/// `linear.{type}` for a body sent with Linear's headers.
pub(super) fn event_type(headers: &[(&str, &str)], body: &Map<String, Value>) -> Option<String> {
    if !super::has_any(headers, HEADERS) {
        return None;
    }
    super::provider_type("linear", body.get("type")?.as_str()?)
}
