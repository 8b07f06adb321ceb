//! Identifiers and secrets. Ids are opaque `^[A-Za-z0-9_-]{1,64}$` strings; secrets carry 256
//! bits from the OS CSPRNG, are shown once, stored only as SHA-256 and compared in constant time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const ADDRESS_PREFIX: &str = "addr_";
pub const EVENT_PREFIX: &str = "evt_";
pub const READ_TOKEN_PREFIX: &str = "aat_";
pub const INBOX_SECRET_PREFIX: &str = "ais_";
const EVENT_NONCE_LEN: usize = 16;

pub(crate) fn random_b64(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    OsRng.fill_bytes(&mut buf);
    URL_SAFE_NO_PAD.encode(buf)
}

/// `true` when `s` is a well-formed id: 1..64 of `[A-Za-z0-9_-]`.
pub fn is_valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A new address id: `addr_` and 128 random bits.
pub fn new_address_id() -> String {
    format!("{ADDRESS_PREFIX}{}", random_b64(16))
}

/// A new waiting slot's id (docs/API.md §6, "Waiting polls"): `ws_` and 96 random bits.
pub fn new_wait_slot_id() -> String {
    format!("ws_{}", random_b64(12))
}

/// The key an address is found by from an email address: the address lower-cased (ASCII).
/// Matching is case-insensitive because real mail systems and people change the case of local
/// parts, while ids are case-sensitive; stores keep this key unique (docs/API.md §1, `email`).
/// ASCII only, like SQLite's `lower()`, so a key computed here equals one backfilled there.
pub fn email_key(email: &str) -> String {
    email.to_ascii_lowercase()
}

/// A new read token: `aat_` and 256 random bits.
pub fn new_read_token() -> String {
    format!("{READ_TOKEN_PREFIX}{}", random_b64(32))
}

/// A new inbox secret (the last path segment of the inbox URL): `ais_` and 256 random bits.
pub fn new_inbox_secret() -> String {
    format!("{INBOX_SECRET_PREFIX}{}", random_b64(32))
}

/// A new event id for `sequence`. The sequence is carried in the id (base 36 after a random
/// nonce), so a store can find an event by id with one keyed read; clients treat it as opaque.
pub fn new_event_id(sequence: u64) -> String {
    let nonce = random_b64(12);
    debug_assert_eq!(nonce.len(), EVENT_NONCE_LEN);
    format!("{EVENT_PREFIX}{nonce}{}", to_base36(sequence))
}

/// The sequence an event id was minted for, or `None` for ids this service never issues.
pub fn event_sequence(event_id: &str) -> Option<u64> {
    let rest = event_id.strip_prefix(EVENT_PREFIX)?;
    if !is_valid_id(event_id) || rest.len() <= EVENT_NONCE_LEN {
        return None;
    }
    let digits = rest.get(EVENT_NONCE_LEN..)?;
    if digits.len() > 13 || digits.starts_with('0') {
        return None;
    }
    u64::from_str_radix(digits, 36).ok().filter(|s| *s > 0)
}

fn to_base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// SHA-256 of a secret, hex-encoded: the only form in which secrets are stored.
pub fn hash_secret(secret: &str) -> String {
    sha256_hex(secret.as_bytes())
}

/// SHA-256 of arbitrary bytes, hex-encoded.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Constant-time check of a presented secret against a stored hash.
pub fn verify_secret(presented: &str, stored_hash: &str) -> bool {
    let presented = Sha256::digest(presented.as_bytes());
    match hex::decode(stored_hash) {
        Ok(stored) => presented.as_slice().ct_eq(&stored).into(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_keys_are_lower_cased() {
        assert_eq!(
            email_key("addr_3mJr0VZk-_x@Inbox.Example"),
            "addr_3mjr0vzk-_x@inbox.example"
        );
        assert_eq!(email_key(&email_key("A@B")), email_key("a@b"));
        assert_eq!(email_key("É@x"), "É@x", "ASCII only, like SQLite's lower()");
    }

    #[test]
    fn ids_are_well_formed_and_distinct() {
        let a = new_address_id();
        let b = new_address_id();
        assert!(a.starts_with("addr_") && is_valid_id(&a));
        assert_ne!(a, b);
        assert_eq!(a.len(), 5 + 22);
        let t = new_read_token();
        assert!(t.starts_with("aat_") && t.len() == 4 + 43);
        let s = new_inbox_secret();
        assert!(s.starts_with("ais_") && is_valid_id(&s));
    }

    #[test]
    fn id_validation() {
        assert!(is_valid_id("a"));
        assert!(is_valid_id(&"x".repeat(64)));
        assert!(!is_valid_id(&"x".repeat(65)));
        assert!(!is_valid_id(""));
        assert!(!is_valid_id("a b"));
        assert!(!is_valid_id("a/b"));
        assert!(!is_valid_id("é"));
    }

    #[test]
    fn event_ids_carry_their_sequence() {
        for seq in [1u64, 7, 35, 36, 1000, 123_456_789, u64::from(u32::MAX) * 7] {
            let id = new_event_id(seq);
            assert!(is_valid_id(&id), "{id}");
            assert_eq!(event_sequence(&id), Some(seq), "{id}");
        }
        assert_eq!(event_sequence("evt_short"), None);
        assert_eq!(event_sequence("addr_AAAAAAAAAAAAAAAA1"), None);
        assert_eq!(event_sequence("evt_AAAAAAAAAAAAAAAA"), None);
        assert_eq!(event_sequence("evt_AAAAAAAAAAAAAAAA0"), None);
        assert_eq!(event_sequence("evt_AAAAAAAAAAAAAAAA01"), None);
        assert_eq!(event_sequence("evt_AAAAAAAAAAAAAAAAzzzzzzzzzzzzzz"), None);
        assert_eq!(event_sequence("evt_AAAAAAAAAAAAAAAA!"), None);
    }

    #[test]
    fn secrets_verify_only_against_their_own_hash() {
        let t = new_read_token();
        let h = hash_secret(&t);
        assert_eq!(h.len(), 64);
        assert!(!h.contains(&t));
        assert!(verify_secret(&t, &h));
        assert!(!verify_secret(&new_read_token(), &h));
        assert!(!verify_secret(&t, "not-hex"));
        assert!(!verify_secret("", &h));
    }
}
