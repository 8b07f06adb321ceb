//! The bounds on a message, and the linear pre-scan that enforces them before the MIME parser
//! sees the bytes.
//!
//! mail-parser 0.11 parses nested multiparts and unencoded `message/rfc822` parts iteratively
//! (an explicit stack, no recursion), and recurses into base64/quoted-printable-encoded
//! `message/*` parts at most 3 levels deep. It does not bound the number of parts or header
//! fields, each of which costs memory: a 10 MB message of `--b` lines would become millions of
//! parts. So the pre-scan counts, in one pass, an upper bound of both, and refuses the message
//! when either is far over its limit. Every nesting level is a part, so the part bound also
//! bounds the parser's stack; the exact number of parts and the nesting depth are then checked
//! on the parsed tree (`message.rs`), iteratively: that is where the contract's "more than
//! 1,000 parts" is decided (docs/API.md §10).
//!
//! Where a part can start: the parser finds a delimiter `--{boundary}` anywhere, not only at
//! the start of a line (`x--b` starts a part too), and reads the new part's header block from
//! right after the boundary, on the same line. A line starts at most one part (the part's
//! header block, or its body, takes the rest of the line). So the upper bound counts every
//! line that contains `--`, closing delimiters included: it over-counts (a closing delimiter
//! starts nothing, nor does a line of dashes in a text), which is why the pre-scan allows
//! [`PRESCAN_PARTS_FACTOR`] times the limit and the parsed tree is held to the limit itself.
//!
//! A base64- or quoted-printable-encoded `message/rfc822` (or `message/global`) part hides its
//! structure from the pre-scan, and the parser parses it after decoding: such a message is
//! refused. RFC 2046 §5.2.1 allows only 7bit, 8bit and binary for `message/rfc822`. The
//! pre-scan finds them by following header blocks (the top one, one from each line that
//! contains `--` — its own text included, since a header may follow the boundary on the same
//! line —, one after each `message/*` or digest part's header block).

use crate::Refusal;

/// Default largest raw message, in bytes (10 MB).
pub const DEFAULT_MAX_RAW_BYTES: usize = 10_000_000;
/// Default largest serialized `data`, in bytes: the default inbox body limit (docs/API.md §6).
pub const DEFAULT_MAX_DATA_BYTES: usize = 1_000_000;
/// Default most MIME parts (containers included, nested messages included).
pub const DEFAULT_MAX_PARTS: usize = 1_000;
/// The pre-scan's upper bound of parts over-counts (see the module docs): it refuses a message
/// only past this many times [`EmailLimits::max_parts`]; the parsed tree is held to the limit.
pub const PRESCAN_PARTS_FACTOR: usize = 4;
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
    /// Most MIME parts (every part counts, containers and the parts of nested messages
    /// included): a message with more is refused ([`Refusal::TooComplex`]).
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

/// Refuses a message over the raw size limit, whose pre-scanned upper bound of parts is over
/// [`PRESCAN_PARTS_FACTOR`] times its limit, or whose upper bound of header fields is over its
/// limit. Linear in the message, no allocation.
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
        if line.first().is_some_and(|b| !b.is_ascii_whitespace())
            && line.iter().take(100).any(|&b| b == b':')
        {
            field_lines += 1;
        }
        if line.windows(2).any(|w| w == b"--") {
            // A part may start here (a delimiter, anywhere in the line), its header block
            // beginning on this line; or the line is a header of the block being read (a
            // `boundary="--…"` parameter). Both are assumed: what the open block noted is kept.
            delimiter_lines += 1;
            let mut next = block.take().unwrap_or_default();
            next.delimiter_line(line);
            block = Some(next);
            continue;
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
    // A part starts on a line that contains `--`, or is the body of a `message/*` part (named
    // in a Content-Type, or implicit: every part of a multipart/digest). So this is an upper
    // bound; it counts closing delimiters too, hence the factor.
    let message_parts = count_ci(raw, b"message/");
    let digest_parts = if has_digest { delimiter_lines } else { 0 };
    let parts = 1usize
        .saturating_add(delimiter_lines)
        .saturating_add(message_parts)
        .saturating_add(digest_parts);
    if parts > limits.max_parts.saturating_mul(PRESCAN_PARTS_FACTOR) {
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
    /// A line that contains `--`: a header may begin anywhere in it (right after a boundary),
    /// so what it names is noted wherever it is. The field a folded next line continues is
    /// the last one named. Its Content-Type alone counts for the digest rule (an earlier one
    /// may belong to the block before the delimiter).
    fn delimiter_line(&mut self, line: &[u8]) {
        let content_type = rfind_ci(line, b"content-type");
        let encoding = rfind_ci(line, b"content-transfer-encoding");
        self.content_type = content_type.is_some();
        self.last = match (content_type, encoding) {
            (Some(t), Some(e)) if t > e => Field::ContentType,
            (_, Some(_)) => Field::Encoding,
            (Some(_), None) => Field::ContentType,
            (None, None) => Field::Other,
        };
        self.message |=
            contains_ci(line, b"message/rfc822") || contains_ci(line, b"message/global");
        self.encoded |= contains_ci(line, b"base64") || contains_ci(line, b"quoted-printable");
    }

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

/// Where the last occurrence of `needle` starts in `hay`, ignoring ASCII case.
fn rfind_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .rposition(|w| w.eq_ignore_ascii_case(needle))
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
        let many = "--b\n".repeat(4_001);
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
        // The parser takes `--b` anywhere in a line as a delimiter: counted as well.
        let inside = "x--b\n\nx\n".repeat(4_001);
        assert!(matches!(
            prescan(inside.as_bytes(), &limits),
            Err(Refusal::TooComplex { .. })
        ));
        // A header block may start right after the boundary, on the delimiter's own line.
        let same_line =
            "--bContent-Type: message/rfc822\r\nContent-Transfer-Encoding: base64\r\n\r\nLS1i\r\n";
        assert_eq!(
            prescan(same_line.as_bytes(), &limits),
            Err(Refusal::TooComplex {
                why: "encoded message/rfc822 part"
            })
        );
        // A header of the open block that holds `--` keeps what the block noted before it.
        let param = "Content-Transfer-Encoding: base64\r\nContent-Type: message/rfc822; x=\"--\"\r\n\r\nLS1i\r\n";
        assert!(prescan(param.as_bytes(), &limits).is_err());
        // Exactly the limit's worth of delimiter lines, closing one included, is not refused
        // here: the parsed tree is held to the limit itself.
        let thousand = "--b\n".repeat(1_001);
        assert_eq!(prescan(thousand.as_bytes(), &limits), Ok(()));
        let fields = "x: y\n".repeat(30_000);
        assert!(matches!(
            prescan(fields.as_bytes(), &limits),
            Err(Refusal::TooComplex { .. })
        ));
    }
}
