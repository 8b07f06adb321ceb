//! GitHub: `X-Hub-Signature-256: sha256=<hex>` HMAC-SHA256 of the body; the delivery id is
//! `X-GitHub-Delivery`; the event type is `github.{X-GitHub-Event}` (docs/API.md §3).

use super::{as_key, body_mac, hex_signature, one_header, Checked, Signed, VerificationConfig};

pub(super) const HEADERS: &[&str] = &["x-github-event", "x-github-delivery", "x-hub-signature-256"];

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    hex_signature(config, d, "x-hub-signature-256", "sha256=")?;
    // `X-GitHub-Delivery` is not signed, but is trusted only once the body verified.
    Ok(one_header(d.headers, "x-github-delivery")
        .ok()
        .and_then(as_key))
}

pub(super) fn sign(secret: &str, id: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        (
            "x-hub-signature-256",
            format!("sha256={}", body_mac(secret, body)),
        ),
        ("x-github-delivery", id.to_owned()),
    ]
}

/// `github.{event}` for a delivery with `X-GitHub-Event`.
pub(super) fn event_type(headers: &[(&str, &str)]) -> Option<String> {
    super::named_by_header(headers, "x-github-event", "github")
}
