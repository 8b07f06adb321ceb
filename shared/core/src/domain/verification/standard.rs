//! Standard Webhooks (<https://www.standardwebhooks.com/>): `webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64>` over `{id}.{timestamp}.{body}`, keyed by the base64 after
//! `whsec_`. The delivery id is `webhook-id`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::Mac;

use super::{
    as_key, mac, one_header, unix_seconds, within, Checked, HmacSha256, Reason, Signed,
    VerificationConfig, MAX_SIGNATURES, STANDARD_KEY_MAX_BYTES, STANDARD_KEY_MIN_BYTES,
};

pub(super) const HEADERS: &[&str] = &["webhook-id", "webhook-timestamp", "webhook-signature"];

pub(super) fn check_secret(secret: &str) -> Result<(), String> {
    key(secret).map(|_| ()).ok_or_else(|| {
        format!(
            "`secret` for standard-webhooks must be `whsec_` followed by the base64 of {STANDARD_KEY_MIN_BYTES} to {STANDARD_KEY_MAX_BYTES} bytes."
        )
    })
}

/// The HMAC key of a Standard Webhooks secret: the base64 after `whsec_`.
fn key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix("whsec_")?;
    if encoded.len() > 4 * STANDARD_KEY_MAX_BYTES {
        return None;
    }
    let key = STANDARD.decode(encoded).ok()?;
    (STANDARD_KEY_MIN_BYTES..=STANDARD_KEY_MAX_BYTES)
        .contains(&key.len())
        .then_some(key)
}

/// The MAC of a message: HMAC-SHA256 keyed by the secret's key over `{id}.{timestamp}.{body}` —
/// the one rule both directions use (a delivery verified here, a wake signed by a hook,
/// docs/API.md §14 and §19). `None`: not a Standard Webhooks secret.
pub(super) fn message_mac(
    secret: &str, id: &str, timestamp: &str, body: &[u8],
) -> Option<HmacSha256> {
    let mut m = mac(&key(secret)?);
    m.update(id.as_bytes());
    m.update(b".");
    m.update(timestamp.as_bytes());
    m.update(b".");
    m.update(body);
    Some(m)
}

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    let id = one_header(d.headers, "webhook-id")?;
    let timestamp = one_header(d.headers, "webhook-timestamp")?;
    let signatures = one_header(d.headers, "webhook-signature")?;
    let t = unix_seconds(timestamp)?;
    let base =
        message_mac(config.secret.expose(), id, timestamp, d.body).ok_or(Reason::BadSignature)?;
    let entries: Vec<&str> = signatures.split(' ').filter(|s| !s.is_empty()).collect();
    if entries.len() > MAX_SIGNATURES {
        return Err(Reason::BadSignature);
    }
    // Any `v1,` signature that matches verifies; other versions (`v1a,` asymmetric) are not ours.
    let matched = entries
        .iter()
        .filter_map(|e| e.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .any(|sig| base.clone().verify_slice(&sig).is_ok());
    if !matched {
        return Err(Reason::BadSignature);
    }
    if !within(t, config.tolerance_seconds, d.now) {
        return Err(Reason::TimestampOutOfTolerance);
    }
    Ok(as_key(id))
}

/// The headers a Standard Webhooks sender adds to `body`.
pub(super) fn sign(
    secret: &str, id: &str, timestamp: i64, body: &[u8],
) -> Vec<(&'static str, String)> {
    let Some(m) = message_mac(secret, id, &timestamp.to_string(), body) else {
        return Vec::new();
    };
    let sig = STANDARD.encode(m.finalize().into_bytes());
    vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", format!("v1,{sig}")),
    ]
}
