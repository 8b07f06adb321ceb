//! Recipient addresses: `{local}[+{tag}]@{domain}`, matched case-insensitively.

/// Longest recipient address accepted (RFC 5321: a path is at most 256 octets with its `<>`).
pub const MAX_ADDRESS_LEN: usize = 254;
/// Longest local part (RFC 5321 §4.5.3.1.1).
pub const MAX_LOCAL_LEN: usize = 64;

/// A recipient this service delivers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    /// The mailbox, lower-cased, without its `+tag`: `{local}@{domain}`.
    pub key: String,
    /// The `+tag`, lower-cased, when one was given (an empty tag is none).
    pub tag: Option<String>,
}

/// The recipient for `addr` (an envelope `RCPT TO` address, with or without `<>`) when it is
/// in `domain`; `None` for another domain, an over-long address, a quoted or otherwise unusual
/// local part, or garbage. The domain matches case-insensitively (a trailing `.` is ignored).
pub fn parse_recipient(addr: &str, domain: &str) -> Option<Recipient> {
    let addr = addr.trim();
    let addr = match addr.strip_prefix('<') {
        Some(rest) => rest.strip_suffix('>')?,
        None => addr,
    };
    if addr.is_empty() || addr.len() > MAX_ADDRESS_LEN {
        return None;
    }
    let (local, addr_domain) = addr.rsplit_once('@')?;
    let want = domain.trim().trim_end_matches('.');
    if want.is_empty() || !addr_domain.trim_end_matches('.').eq_ignore_ascii_case(want) {
        return None;
    }
    if local.is_empty() || local.len() > MAX_LOCAL_LEN || !local.bytes().all(is_local_byte) {
        return None;
    }
    if local.starts_with('.') || local.ends_with('.') || local.contains("..") {
        return None;
    }
    let (base, tag) = match local.split_once('+') {
        Some((base, tag)) => (base, Some(tag)),
        None => (local, None),
    };
    if base.is_empty() {
        return None;
    }
    Some(Recipient {
        key: format!(
            "{}@{}",
            base.to_ascii_lowercase(),
            want.to_ascii_lowercase()
        ),
        tag: tag
            .filter(|t| !t.is_empty())
            .map(|t| t.to_ascii_lowercase()),
    })
}

/// RFC 5322 `atext` and `.`, ASCII only (no quoted local parts, no `@`, no white space).
fn is_local_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~.".contains(&b)
}
