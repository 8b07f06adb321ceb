//! Durable state rules (SPEC §7): key syntax and size accounting.

use super::limits::STATE_KEY_OVERHEAD;
use super::Invalid;

pub const MAX_KEY_LEN: usize = 128;

/// Keys are 1..128 characters of `[A-Za-z0-9._:-]`.
pub fn validate_key(key: &str) -> Result<(), Invalid> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Invalid::new(format!(
            "state key must be 1 to {MAX_KEY_LEN} characters long"
        )));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(Invalid::new(
            "state key may contain only letters, digits and . _ : -",
        ));
    }
    Ok(())
}

/// Bytes a key costs: the key, its value's compact JSON, and 64 bytes of metadata.
pub fn entry_size(key: &str, compact_value_json: &str) -> u64 {
    key.len() as u64 + compact_value_json.len() as u64 + STATE_KEY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(validate_key("a").is_ok());
        assert!(validate_key("task:1.step-2_x").is_ok());
        assert!(validate_key(&"k".repeat(128)).is_ok());
        assert!(validate_key(&"k".repeat(129)).is_err());
        assert!(validate_key("").is_err());
        assert!(validate_key("a/b").is_err());
        assert!(validate_key("a b").is_err());
        assert!(validate_key("ключ").is_err());
    }

    #[test]
    fn sizes_count_key_value_and_metadata() {
        assert_eq!(entry_size("k", "1"), 66);
        assert_eq!(entry_size("counter", "{\"n\":10}"), 7 + 8 + 64);
    }
}
