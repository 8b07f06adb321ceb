//! `email_id`: the idempotency key of a delivered message.

use agentaddress_core::domain::ids::is_valid_id;
use sha2::{Digest, Sha256};

/// Prefix of the ids this crate derives.
pub const EMAIL_PREFIX: &str = "eml_";
/// Hex digits of SHA-256 kept (128 bits): `eml_` + 32 = 36 characters, within the id syntax.
const HASH_HEX: usize = 32;

/// The `email_id` of a message.
///
/// - A provider's own id (`hint`, e.g. SES's message id) is used as is when it is a valid id
///   (`^[A-Za-z0-9_-]{1,64}$`), else hashed.
/// - Otherwise `eml_` + SHA-256 of the `Message-ID` and the sender's mailbox when the message
///   has a `Message-ID`: a retry (a provider redelivering, an SMTP client that lost the `250`
///   and resends through another relay) carries the same `Message-ID`, while the bytes may
///   differ (relays prepend `Received`). The sender is mixed in so one sender cannot collide
///   with another's ids by reusing their `Message-ID`.
/// - Without a `Message-ID`, `eml_` + SHA-256 of the raw bytes: identical resends still match.
pub fn email_id(hint: Option<&str>, message_id: Option<&str>, sender: &str, raw: &[u8]) -> String {
    let mut h = Sha256::new();
    match (hint, message_id) {
        (Some(hint), _) if is_valid_id(hint) => return hint.to_owned(),
        (Some(hint), _) => {
            h.update(b"hint\0");
            h.update(hint.as_bytes());
        }
        (None, Some(mid)) => {
            h.update(b"mid\0");
            h.update(mid.as_bytes());
            h.update(b"\0");
            h.update(sender.as_bytes());
        }
        (None, None) => {
            h.update(b"raw\0");
            h.update(raw);
        }
    }
    let hex = hex::encode(h.finalize());
    format!("{EMAIL_PREFIX}{}", hex.get(..HASH_HEX).unwrap_or(&hex))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_and_deterministic() {
        let a = email_id(None, Some("x@y"), "a@b", b"one");
        assert_eq!(a, email_id(None, Some("x@y"), "a@b", b"two"));
        assert_ne!(a, email_id(None, Some("x@y"), "c@b", b"one"));
        assert!(is_valid_id(&a) && a.starts_with("eml_") && a.len() == 36);
        assert_eq!(email_id(Some("ses-123"), None, "", b""), "ses-123");
        let bad = email_id(Some("not valid!"), None, "", b"");
        assert!(is_valid_id(&bad) && bad.starts_with("eml_"));
        assert_ne!(
            email_id(None, None, "", b"a"),
            email_id(None, None, "", b"b")
        );
    }
}
