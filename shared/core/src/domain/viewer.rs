//! One-time sign-in codes of the inbox viewer (docs/API.md §13, "Sign-in links"): the CLI asks
//! for a code with the read token, opens `{base}/inbox#code=…`, and the page trades the code for
//! the read token once, so the token never appears in a URL.
//!
//! The read token is stored only as a hash, so the service cannot give it back from what it
//! keeps. A code therefore carries it: the token is sealed with an AEAD (ChaCha20-Poly1305, from
//! *ring*) under a key derived from the code with HKDF-SHA-256, the address id as associated
//! data. The store keeps the code's SHA-256 (to find the record) and the sealed token: neither
//! gives the key, so nothing at rest reveals the token; only the holder of the code can open
//! it, and the store answers a code once.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::rngs::OsRng;
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::hkdf::{Salt, HKDF_SHA256};

use super::ids::{self, random_b64};
use super::Millis;

/// The prefix of a viewer sign-in code.
pub const VIEWER_CODE_PREFIX: &str = "avc_";
/// How long a code can be redeemed: 5 minutes.
pub const VIEWER_CODE_VALID_MS: Millis = 5 * 60 * 1000;
/// Redeem attempts per client (an IPv4 address or an IPv6 /64) per minute, right or wrong.
pub const REDEEMS_PER_MINUTE: u64 = 20;
/// Codes one address may ask for per minute.
pub const VIEWER_CODES_PER_MINUTE: u64 = 10;
/// The longest `code` a redeem looks up; anything longer is no code of ours.
pub const MAX_CODE_LEN: usize = 128;

/// The HKDF salt and info: a key of this purpose only, from this code only.
const KDF_SALT: &[u8] = b"agentaddress viewer-code v1";
const KDF_INFO: &[u8] = b"read-token seal key";

/// A new code: `avc_` and 256 random bits from the OS CSPRNG.
pub fn new_viewer_code() -> String {
    format!("{VIEWER_CODE_PREFIX}{}", random_b64(32))
}

/// Whether `code` looks like a code this service issues (a cheap check before a lookup).
pub fn is_code_shaped(code: &str) -> bool {
    code.len() <= MAX_CODE_LEN
        && code.starts_with(VIEWER_CODE_PREFIX)
        && ids::is_valid_id(code.get(VIEWER_CODE_PREFIX.len()..).unwrap_or(""))
}

/// The hash a code is stored and found by (SHA-256, hex, as every secret: docs/API.md §0).
pub fn code_hash(code: &str) -> String {
    ids::hash_secret(code)
}

/// Sealing or opening failed: a corrupted record (or a code that is not this record's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the sealed read token cannot be opened")]
pub struct SealError;

fn key_of(code: &str) -> Result<LessSafeKey, SealError> {
    let prk = Salt::new(HKDF_SHA256, KDF_SALT).extract(code.as_bytes());
    let okm = prk
        .expand(&[KDF_INFO], &CHACHA20_POLY1305)
        .map_err(|_| SealError)?;
    Ok(LessSafeKey::new(UnboundKey::from(okm)))
}

/// `read_token` sealed under the key of `code`, bound to `address_id`: base64url of the nonce,
/// the ciphertext and the tag.
pub fn seal_token(code: &str, address_id: &str, read_token: &str) -> Result<String, SealError> {
    let key = key_of(code)?;
    let mut nonce = [0u8; NONCE_LEN];
    OsRng.fill_bytes(&mut nonce);
    let mut sealed = read_token.as_bytes().to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(address_id.as_bytes()),
        &mut sealed,
    )
    .map_err(|_| SealError)?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    Ok(URL_SAFE_NO_PAD.encode(out))
}

/// The read token of [`seal_token`]'s output, given the same code and address id.
pub fn open_token(code: &str, address_id: &str, sealed: &str) -> Result<String, SealError> {
    let bytes = URL_SAFE_NO_PAD.decode(sealed).map_err(|_| SealError)?;
    if bytes.len() < NONCE_LEN {
        return Err(SealError);
    }
    let (nonce, body) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError)?;
    let mut body = body.to_vec();
    let plain = key_of(code)?
        .open_in_place(nonce, Aad::from(address_id.as_bytes()), &mut body)
        .map_err(|_| SealError)?;
    String::from_utf8(plain.to_vec()).map_err(|_| SealError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_long_random_and_shaped() {
        let a = new_viewer_code();
        let b = new_viewer_code();
        assert_ne!(a, b);
        assert!(a.starts_with("avc_") && a.len() == 4 + 43, "{a}");
        assert!(is_code_shaped(&a));
        for bad in [
            "",
            "avc_",
            "aat_x",
            "avc_a b",
            "avc_é",
            &format!("avc_{}", "x".repeat(200)),
        ] {
            assert!(!is_code_shaped(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_the_code_opens_the_sealed_token_of_its_address() {
        let code = new_viewer_code();
        let token = ids::new_read_token();
        let sealed = seal_token(&code, "addr_a", &token).expect("seal");
        assert!(!sealed.contains(&token));
        assert_ne!(sealed, seal_token(&code, "addr_a", &token).expect("seal"));
        assert_eq!(open_token(&code, "addr_a", &sealed), Ok(token.clone()));
        // Another code, another address, the code's stored hash, a changed byte: nothing.
        assert_eq!(
            open_token(&new_viewer_code(), "addr_a", &sealed),
            Err(SealError)
        );
        assert_eq!(open_token(&code, "addr_b", &sealed), Err(SealError));
        assert_eq!(
            open_token(&code_hash(&code), "addr_a", &sealed),
            Err(SealError)
        );
        let mut bytes = URL_SAFE_NO_PAD.decode(&sealed).expect("base64");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = URL_SAFE_NO_PAD.encode(bytes);
        assert_eq!(open_token(&code, "addr_a", &tampered), Err(SealError));
        assert_eq!(open_token(&code, "addr_a", "!!"), Err(SealError));
        assert_eq!(open_token(&code, "addr_a", ""), Err(SealError));
    }

    #[test]
    fn the_stored_hash_is_the_codes_sha256() {
        let code = new_viewer_code();
        assert!(ids::verify_secret(&code, &code_hash(&code)));
        assert!(!ids::verify_secret(&new_viewer_code(), &code_hash(&code)));
    }
}
