//! Shopify: `X-Shopify-Hmac-Sha256`, the base64 HMAC-SHA256 of the body keyed by the app's
//! client secret (<https://shopify.dev/docs/apps/build/webhooks/subscribe/https>). No timestamp
//! is signed. The delivery id is `X-Shopify-Webhook-Id`; a delivery is named
//! `shopify.{X-Shopify-Topic}` (docs/API.md §3, §15).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::Mac;

use super::{as_key, mac, one_header, Checked, Reason, Signed, VerificationConfig};

pub(super) const HEADERS: &[&str] = &[
    "x-shopify-hmac-sha256",
    "x-shopify-topic",
    "x-shopify-webhook-id",
    "x-shopify-event-id",
    "x-shopify-shop-domain",
    "x-shopify-api-version",
    "x-shopify-triggered-at",
];

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    let header = one_header(d.headers, "x-shopify-hmac-sha256")?;
    let sig = STANDARD.decode(header).map_err(|_| Reason::BadSignature)?;
    let mut m = mac(config.secret.expose().as_bytes());
    m.update(d.body);
    m.verify_slice(&sig).map_err(|_| Reason::BadSignature)?;
    Ok(one_header(d.headers, "x-shopify-webhook-id")
        .ok()
        .and_then(as_key))
}

pub(super) fn sign(secret: &str, id: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    let mut m = mac(secret.as_bytes());
    m.update(body);
    vec![
        (
            "x-shopify-hmac-sha256",
            STANDARD.encode(m.finalize().into_bytes()),
        ),
        ("x-shopify-webhook-id", id.to_owned()),
    ]
}

/// `shopify.{topic}` for a delivery with `X-Shopify-Topic`.
pub(super) fn event_type(headers: &[(&str, &str)]) -> Option<String> {
    super::named_by_header(headers, "x-shopify-topic", "shopify")
}
