//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]` over `{t}.{body}`, keyed by the
//! endpoint's `whsec_…` secret as given. The delivery id is the event's `id`.

use hmac::Mac;
use serde_json::Value;

use super::{
    as_key, mac, one_header, unix_seconds, within, Checked, Reason, Signed, VerificationConfig,
    MAX_SIGNATURES, STRIPE_SUFFIX_MAX_CHARS, STRIPE_SUFFIX_MIN_CHARS,
};

pub(super) const HEADERS: &[&str] = &["stripe-signature"];

pub(super) fn check_secret(secret: &str) -> Result<(), String> {
    let ok = secret.strip_prefix("whsec_").is_some_and(|rest| {
        (STRIPE_SUFFIX_MIN_CHARS..=STRIPE_SUFFIX_MAX_CHARS).contains(&rest.len())
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`secret` for stripe must be `whsec_` followed by {STRIPE_SUFFIX_MIN_CHARS} to {STRIPE_SUFFIX_MAX_CHARS} ASCII letters, digits and `_` (the endpoint's signing secret)."
        ))
    }
}

pub(super) fn verify(config: &VerificationConfig, d: &Signed<'_>) -> Checked {
    let header = one_header(d.headers, "stripe-signature")?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in header.split(',') {
        let Some((k, v)) = item.split_once('=') else {
            return Err(Reason::BadSignature);
        };
        match k.trim() {
            "t" if timestamp.is_none() => timestamp = Some(v.trim()),
            "t" => return Err(Reason::BadSignature),
            "v1" => {
                signatures.push(v.trim());
                if signatures.len() > MAX_SIGNATURES {
                    return Err(Reason::BadSignature);
                }
            }
            // `v0` (test mode's old scheme) and anything Stripe adds later.
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(Reason::BadSignature)?;
    let t = unix_seconds(timestamp)?;
    if signatures.is_empty() {
        return Err(Reason::BadSignature);
    }
    let mut base = mac(config.secret.expose().as_bytes());
    base.update(timestamp.as_bytes());
    base.update(b".");
    base.update(d.body);
    let matched = signatures
        .iter()
        .filter_map(|h| hex::decode(h).ok())
        .any(|sig| base.clone().verify_slice(&sig).is_ok());
    if !matched {
        return Err(Reason::BadSignature);
    }
    if !within(t, config.tolerance_seconds, d.now) {
        return Err(Reason::TimestampOutOfTolerance);
    }
    // The delivery id is the event's `id`: Stripe sends the same event again with the same id.
    let id = serde_json::from_slice::<Value>(d.body)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).and_then(as_key));
    Ok(id)
}

pub(super) fn sign(secret: &str, timestamp: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let mut m = mac(secret.as_bytes());
    m.update(format!("{timestamp}.").as_bytes());
    m.update(body);
    let sig = hex::encode(m.finalize().into_bytes());
    vec![("stripe-signature", format!("t={timestamp},v1={sig}"))]
}
