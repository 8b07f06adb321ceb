//! Meta (WhatsApp, Messenger, Instagram, Facebook Graph webhooks): `X-Hub-Signature-256:
//! sha256=<hex>`, the HMAC-SHA256 of the body keyed by the app secret, and the subscription
//! handshake `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…`, answered with the
//! challenge when the token is the address's `verify_token`
//! (<https://developers.facebook.com/docs/graph-api/webhooks/getting-started>). No timestamp
//! and no delivery id (docs/API.md §15, §22).

use super::{body_mac, hex_signature, Checked, Signed, VerificationConfig};

pub(super) const HEADERS: &[&str] = &["x-hub-signature-256"];

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    hex_signature(config, d, "x-hub-signature-256", "sha256=")?;
    Ok(None)
}

pub(super) fn sign(secret: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![(
        "x-hub-signature-256",
        format!("sha256={}", body_mac(secret, body)),
    )]
}
