//! The bounds on a message, and the linear pre-scan that enforces them before the MIME parser
//! sees the bytes.
//!
//! mail-parser 0.11 parses nested multiparts and unencoded `message/rfc822` parts iteratively
//! (an explicit stack, no recursion), and recurses into base64/quoted-printable-encoded
//! `message/*` parts at most 3 levels deep. It does not bound the number of parts or header
//! fields, each of which costs memory: a 10 MB message of `--b` lines would become millions of
//! parts. So the pre-scan counts, in one pass, an upper bound of both, and refuses the message
//! when either is over its limit. Every nesting level is a part, so the part bound also bounds
//! the parser's stack; the actual nesting depth is then checked on the parsed tree
//! (`message.rs`), iteratively.
//!
//! A base64- or quoted-printable-encoded `message/rfc822` (or `message/global`) part hides its
//! structure from the pre-scan, and the parser parses it after decoding: such a message is
//! refused. RFC 2046 §5.2.1 allows only 7bit, 8bit and binary for `message/rfc822`. The
//! pre-scan finds them by following header blocks (the top one, one after each delimiter line,
//! one after each `message/*` or digest part's header block).

use crate::Refusal;

/// Default largest raw message, in bytes (10 MB).
pub const DEFAULT_MAX_RAW_BYTES: usize = 10_000_000;
/// Default largest serialized `data`, in bytes: the default inbox body limit (docs/API.md §6).
pub const DEFAULT_MAX_DATA_BYTES: usize = 1_000_000;
/// Default most MIME parts (containers included, nested messages included).
pub const DEFAULT_MAX_PARTS: usize = 1_000;
/// Default deepest nesting of multiparts and `message/rfc822` parts.
pub const DEFAULT_MAX_NESTING: usize = 32;
/// Default most lines that may be header fields (a line not starting with white space that
/// has a `:` in its first 100 bytes), over the whole message.
pub const DEFAULT_MAX_HEADER_FIELDS: usize = 20_000;

/// The bounds every message is held to. `Default` gives the constants above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailLimits {
    /// Largest raw message; over it: [`Refusal::TooLarge`] (`552 5.3.4`).
    pub max_raw_bytes: usize,
    /// Largest serialized `data` (the inbox body limit); `html` is dropped, then `text` cut.
    pub max_data_bytes: usize,
    /// Most MIME parts; over it: [`Refusal::TooComplex`].
    pub max_parts: usize,
    /// Deepest nesting; over it: [`Refusal::TooComplex`].
    pub max_nesting: usize,
    /// Most header-field-like lines; over it: [`Refusal::TooComplex`].
    pub max_header_fields: usize,
}

impl Default for EmailLimits {
    fn default() -> Self {
        Self {
            max_raw_bytes: DEFAULT_MAX_RAW_BYTES,
            max_data_bytes: DEFAULT_MAX_DATA_BYTES,
            max_parts: DEFAULT_MAX_PARTS,
            max_nesting: DEFAULT_MAX_NESTING,
            max_header_fields: DEFAULT_MAX_HEADER_FIELDS,
        }
    }
}

/// Refuses a message over the raw size limit, or whose pre-scanned upper bounds of parts or
/// header fields are over their limits. Linear in the message, no allocation.
pub(crate) fn prescan(raw: &[u8], limits: &EmailLimits) -> Result<(), Refusal> {
    if raw.len() > limits.max_raw_bytes {
        return Err(Refusal::TooLarge {
            size: raw.len(),
            limit: limits.max_raw_bytes,
        });
    }
    let has_digest = contains_ci(raw, b"digest");
    let mut delimiter_lines = 0usize;
    let mut field_lines = 0usize;
    let mut block = Some(HeaderBlock::default());
    for line in raw.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.starts_with(b"--") {
            delimiter_lines += 1;
            block = Some(HeaderBlock::default());
            continue;
        }
        if line.first().is_some_and(|b| !b.is_ascii_whitespace())
            && line.iter().take(100).any(|&b| b == b':')
        {
            field_lines += 1;
        }
        let Some(current) = block.as_mut() else {
            continue;
        };
        if !line.is_empty() {
            current.line(line);
            continue;
        }
        if current.message && current.encoded {
            return Err(Refusal::TooComplex {
                why: "encoded message/rfc822 part",
            });
        }
        // The body of a message part (or of a digest's part without Content-Type) starts
        // with the inner message's header block.
        let inner = current.message || (has_digest && !current.content_type);
        block = inner.then(HeaderBlock::default);
    }
    if block.is_some_and(|b| b.message && b.encoded) {
        return Err(Refusal::TooComplex {
            why: "encoded message/rfc822 part",
        });
    }
    // A part starts after a delimiter line, or is the body of a `message/*` part (named in a
    // Content-Type, or implicit: every part of a multipart/digest). So this is an upper bound.
    let message_parts = count_ci(raw, b"message/");
    let digest_parts = if has_digest { delimiter_lines } else { 0 };
    let parts = 1usize
        .saturating_add(delimiter_lines)
        .saturating_add(message_parts)
        .saturating_add(digest_parts);
    if parts > limits.max_parts {
        return Err(Refusal::TooComplex {
            why: "too many MIME parts",
        });
    }
    if field_lines > limits.max_header_fields {
        return Err(Refusal::TooComplex {
            why: "too many header fields",
        });
    }
    Ok(())
}

/// What the pre-scan notes of one header block.
#[derive(Default, Clone, Copy)]
struct HeaderBlock {
    /// The field the last line belongs to (for folded lines).
    last: Field,
    content_type: bool,
    /// Content-Type is message/rfc822 or message/global: the parser parses its body.
    message: bool,
    /// Content-Transfer-Encoding is base64 or quoted-printable.
    encoded: bool,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Field {
    #[default]
    Other,
    ContentType,
    Encoding,
}

impl HeaderBlock {
    fn line(&mut self, line: &[u8]) {
        let value = if line.first().is_some_and(|b| b.is_ascii_whitespace()) {
            line
        } else {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                self.last = Field::Other;
                return;
            };
            let name = line.get(..colon).unwrap_or_default().trim_ascii();
            self.last = if name.eq_ignore_ascii_case(b"content-type") {
                self.content_type = true;
                Field::ContentType
            } else if name.eq_ignore_ascii_case(b"content-transfer-encoding") {
                Field::Encoding
            } else {
                Field::Other
            };
            line.get(colon + 1..).unwrap_or_default()
        };
        match self.last {
            Field::ContentType => {
                self.message |=
                    contains_ci(value, b"message/rfc822") || contains_ci(value, b"message/global");
            }
            Field::Encoding => {
                self.encoded |=
                    contains_ci(value, b"base64") || contains_ci(value, b"quoted-printable");
            }
            Field::Other => {}
        }
    }
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Occurrences of `needle` (lower-case ASCII) in `hay`, ignoring ASCII case.
fn count_ci(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .filter(|w| w.eq_ignore_ascii_case(needle))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_checked_first() {
        let limits = EmailLimits {
            max_raw_bytes: 10,
            ..EmailLimits::default()
        };
        assert_eq!(
            prescan(&[b'-'; 11], &limits),
            Err(Refusal::TooLarge {
                size: 11,
                limit: 10
            })
        );
        assert_eq!(prescan(b"a: b\n\nhi", &limits), Ok(()));
    }

    #[test]
    fn parts_and_fields_are_bounded() {
        let limits = EmailLimits::default();
        let many = "--b\n".repeat(2_000);
        assert!(matches!(
            prescan(many.as_bytes(), &limits),
            Err(Refusal::TooComplex { .. })
        ));
        let hidden =
            "Content-Type: message/rfc822\r\nContent-Transfer-Encoding: base64\r\n\r\nLS1i\r\n";
        assert_eq!(
            prescan(hidden.as_bytes(), &limits),
            Err(Refusal::TooComplex {
                why: "encoded message/rfc822 part"
            })
        );
        let folded = "From: a\r\nContent-Type:\r\n message/rfc822\r\nContent-Transfer-Encoding:\r\n\tBASE64\r\n\r\n";
        assert!(prescan(folded.as_bytes(), &limits).is_err());
        let plain = "From: a\r\nContent-Type: message/rfc822\r\n\r\nFrom: b\r\n\r\nhi\r\n";
        assert_eq!(prescan(plain.as_bytes(), &limits), Ok(()));
        let fields = "x: y\n".repeat(30_000);
        assert!(matches!(
            prescan(fields.as_bytes(), &limits),
            Err(Refusal::TooComplex { .. })
        ));
    }
}
