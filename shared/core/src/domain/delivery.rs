//! A delivery to an inbox URL (docs/API.md §3): the bytes received, checked against the
//! address's verification (§15), become the event to append and its idempotency claim — or a
//! refusal, when the address refuses unverified deliveries and this one did not verify.

use std::borrow::Cow;

use super::envelope::{self, Envelope};
use super::ids;
use super::verification::{self, Reason, VerificationConfig};
use super::Millis;

/// What a delivery becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The event ([`envelope::from_delivery`]); at an address that verifies deliveries, its
    /// `http` record holds the verification's outcome (docs/API.md §15).
    pub envelope: Envelope,
    /// The idempotency claim, when the delivery has a key (docs/API.md §3).
    pub claim: Option<Claim>,
}

/// An idempotency claim: the SHA-256 (hex) of the key, and of the body it was first sent with
/// (the same key with another body is `idempotency_key_reused`, docs/API.md §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub key_hash: String,
    pub body_hash: String,
}

/// Receives a delivery of `body` (the exact bytes received) with `headers` (name, value as
/// received), at an address verifying with `verification` (or none), with the
/// `Idempotency-Key` `key` (already checked: docs/API.md §3), sent to `url` (the address's
/// public inbox URL with the query as received: what Twilio signs), at `now`.
///
/// `Err` names why an address that refuses unverified deliveries refuses this one (401
/// `signature_invalid`, docs/API.md §15). A verified delivery without its own key is keyed by
/// the provider's delivery id, so that a provider's redelivery is a duplicate.
pub fn receive(
    headers: &[(&str, &[u8])], body: &[u8], verification: Option<&VerificationConfig>,
    key: Option<Vec<u8>>, url: Option<&str>, now: Millis,
) -> Result<Delivery, Reason> {
    // On the exact bytes received, before anything else reads them.
    let checked = verification.map(|config| {
        (
            config.reject_unverified,
            verification::verify_signed(
                config,
                &verification::Signed {
                    headers,
                    body,
                    url,
                    now,
                },
            ),
        )
    });
    if let Some((true, v)) = &checked {
        if let Some(reason) = v.reason {
            return Err(reason);
        }
    }
    let checked = checked.map(|(_, v)| v);
    let key = match (key, &checked) {
        (Some(k), _) => Some(k),
        (None, Some(v)) => v.delivery_id.clone().map(String::into_bytes),
        (None, None) => None,
    };
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    let content_type = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| text(v));
    let pairs: Vec<(&str, Cow<'_, str>)> = headers
        .iter()
        .map(|(name, v)| (*name, String::from_utf8_lossy(v)))
        .collect();
    let envelope = envelope::from_verified_delivery(
        content_type.as_deref(),
        pairs.iter().map(|(name, v)| (*name, v.as_ref())),
        body,
        checked.as_ref(),
    );
    Ok(Delivery {
        envelope,
        claim: key.map(|k| Claim {
            key_hash: ids::sha256_hex(&k),
            body_hash: ids::sha256_hex(body),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn config(reject_unverified: bool) -> VerificationConfig {
        VerificationConfig::new("github", "s3cret", Some(reject_unverified), None)
            .expect("valid config")
    }

    fn http(d: &Delivery) -> Value {
        serde_json::from_str(&d.envelope.http).expect("http record")
    }

    #[test]
    fn an_address_without_verification_applies_the_envelope_rule() {
        let headers: &[(&str, &[u8])] = &[
            ("content-type", b"application/json"),
            ("user-agent", b"curl"),
        ];
        let body = br#"{"type":"x","data":1}"#;
        let d = receive(headers, body, None, None, None, 0).expect("accepted");
        assert_eq!(
            d.envelope,
            envelope::from_delivery(
                Some("application/json"),
                [("content-type", "application/json"), ("user-agent", "curl")],
                body
            )
        );
        assert_eq!(d.claim, None);
        let d = receive(headers, body, None, Some(b"k".to_vec()), None, 0).expect("accepted");
        assert_eq!(
            d.claim,
            Some(Claim {
                key_hash: ids::sha256_hex(b"k"),
                body_hash: ids::sha256_hex(body),
            })
        );
    }

    #[test]
    fn an_unverified_delivery_is_refused_or_recorded_as_such() {
        let headers: &[(&str, &[u8])] = &[("x-github-delivery", b"d-1")];
        assert_eq!(
            receive(headers, b"{}", Some(&config(true)), None, None, 0),
            Err(Reason::MissingSignature)
        );
        let d = receive(headers, b"{}", Some(&config(false)), None, None, 0).expect("recorded");
        assert_eq!(
            http(&d)["verification"],
            json!({"scheme": "github", "verified": false, "reason": "missing_signature"})
        );
        // Only a verified delivery is keyed by its provider's delivery id.
        assert_eq!(d.claim, None);
    }

    #[test]
    fn a_verified_delivery_is_keyed_by_its_delivery_id_unless_it_has_a_key() {
        let config = config(true);
        let body = b"{}";
        let signed = verification::sign(&config, "d-1", 0, body);
        let headers: Vec<(&str, &[u8])> = signed
            .iter()
            .map(|(name, v)| (*name, v.as_bytes()))
            .collect();
        let d = receive(&headers, body, Some(&config), None, None, 0).expect("verified");
        assert_eq!(
            http(&d)["verification"],
            json!({"scheme": "github", "verified": true})
        );
        assert_eq!(d.claim.map(|c| c.key_hash), Some(ids::sha256_hex(b"d-1")));
        let d = receive(
            &headers,
            body,
            Some(&config),
            Some(b"own".to_vec()),
            None,
            0,
        )
        .expect("verified");
        assert_eq!(d.claim.map(|c| c.key_hash), Some(ids::sha256_hex(b"own")));
    }
}
