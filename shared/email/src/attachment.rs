//! Attachments: listed in `data.attachments` by [`crate::parse_message`], fetched again from the
//! stored raw message by [`attachment`].
//!
//! An attachment's id is `att_` and the index of its part in the top-level message's part list
//! (the parser's depth-first order of MIME parts). Parsing the same bytes gives the same
//! order, so the id found in an event finds the same part later. A nested `message/rfc822`
//! is one attachment (its raw bytes); its own parts are not listed.

use agentaddress_core::domain::label::is_bidi_control;
use mail_parser::{Message, MessagePart, MimeHeaders, PartType};
use serde_json::{json, Value};

use crate::limits::EmailLimits;
use crate::message::parse_bounded;

const PREFIX: &str = "att_";
/// Longest filename kept, in bytes.
pub const MAX_FILENAME_BYTES: usize = 255;
/// The filename of an attachment that has none (or none left after sanitizing).
pub const DEFAULT_FILENAME: &str = "attachment";
const MAX_CONTENT_TYPE: usize = 127;

/// A decoded attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// Sanitized: no path, no control or bidirectional formatting characters, never empty, at
    /// most 255 bytes.
    pub filename: String,
    /// `type/subtype`, lower-cased.
    pub content_type: String,
    /// The decoded bytes (a nested message: its raw bytes).
    pub bytes: Vec<u8>,
}

/// The attachment `attachment_id` of the raw message, as listed by [`crate::parse_message`];
/// `None` for an unknown id, or a message that is refused.
pub fn attachment(raw: &[u8], attachment_id: &str, limits: &EmailLimits) -> Option<Attachment> {
    let index: u32 = attachment_id.strip_prefix(PREFIX)?.parse().ok()?;
    if attachment_id != id(index) {
        return None; // `att_01`, `att_+1`: not an id this crate issues
    }
    let message = parse_bounded(raw, limits).ok()?;
    if !message.attachments.contains(&index) {
        return None;
    }
    let part = message.parts.get(index as usize)?;
    Some(Attachment {
        filename: filename(part),
        content_type: content_type(part),
        bytes: part.contents().to_vec(),
    })
}

fn id(index: u32) -> String {
    format!("{PREFIX}{index}")
}

/// The `data.attachments` list of a parsed message.
pub(crate) fn list(message: &Message<'_>) -> Vec<Value> {
    message
        .attachments
        .iter()
        .filter_map(|&i| {
            let part = message.parts.get(i as usize)?;
            Some(json!({
                "id": id(i),
                "filename": filename(part),
                "content_type": content_type(part),
                "size": part.len(),
                "content_id": part.content_id().map(|c| clean(c, 255)),
            }))
        })
        .collect()
}

fn filename(part: &MessagePart<'_>) -> String {
    sanitize_filename(part.attachment_name().unwrap_or_default())
}

fn content_type(part: &MessagePart<'_>) -> String {
    let declared = part.content_type().and_then(|ct| {
        let t = ct.ctype();
        let s = ct.subtype()?;
        let ok = |x: &str| {
            !x.is_empty()
                && x.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
        };
        (ok(t) && ok(s) && t.len() + s.len() < MAX_CONTENT_TYPE)
            .then(|| format!("{t}/{s}").to_ascii_lowercase())
    });
    // A multipart whose boundary never came is kept as a leaf: not a multipart any more.
    let declared = declared.filter(|ct| !ct.starts_with("multipart/"));
    declared.unwrap_or_else(|| {
        match part.body {
            PartType::Text(_) => "text/plain",
            PartType::Html(_) => "text/html",
            PartType::Message(_) => "message/rfc822",
            _ => "application/octet-stream",
        }
        .to_owned()
    })
}

/// Control and bidirectional formatting characters removed, bounded at a character boundary.
fn clean(s: &str, max: usize) -> String {
    let s: String = s.chars().filter(|&c| !hidden(c)).collect();
    crate::truncate::cut_to(&s, max).to_owned()
}

/// Characters a name may not keep: control characters, and the bidirectional formatting ones
/// (U+202E shows `invoice\u{202E}gpj.exe` as `invoiceexe.jpg`), as names elsewhere refuse them.
fn hidden(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// A filename safe to write anywhere: the last path segment (`/` and `\` both separate), no
/// control characters, no bidirectional formatting characters (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069), none of `:*?"<>|`, no leading dots or trailing dots and
/// spaces, at most [`MAX_FILENAME_BYTES`] (cut at a character boundary), and never empty
/// ([`DEFAULT_FILENAME`]).
pub fn sanitize_filename(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = last
        .chars()
        .filter(|&c| !hidden(c))
        .map(|c| if ":*?\"<>|".contains(c) { '_' } else { c })
        .collect();
    let trimmed = cleaned
        .trim_start_matches(|c: char| c == '.' || c.is_whitespace())
        .trim_end_matches(|c: char| c == '.' || c.is_whitespace());
    let mut end = trimmed.len().min(MAX_FILENAME_BYTES);
    while !trimmed.is_char_boundary(end) {
        end -= 1;
    }
    let bounded = trimmed.get(..end).unwrap_or_default().trim_end();
    if bounded.is_empty() {
        DEFAULT_FILENAME.to_owned()
    } else {
        bounded.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_are_sanitized() {
        assert_eq!(sanitize_filename("../../etc/passwd"), "passwd");
        assert_eq!(sanitize_filename("C:\\x\\y"), "y");
        assert_eq!(sanitize_filename("a\u{0}b\r\n.txt"), "ab.txt");
        assert_eq!(sanitize_filename(".."), DEFAULT_FILENAME);
        assert_eq!(sanitize_filename(""), DEFAULT_FILENAME);
        assert_eq!(sanitize_filename("x/"), DEFAULT_FILENAME);
        assert_eq!(sanitize_filename("a:b.txt"), "a_b.txt");
        // Bidirectional formatting characters go: the name shows what it is.
        assert_eq!(
            sanitize_filename("invoice\u{202E}gpj.exe"),
            "invoicegpj.exe"
        );
        for c in [
            '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}',
            '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ] {
            assert_eq!(
                sanitize_filename(&format!("a{c}b.pdf")),
                "ab.pdf",
                "U+{:04X}",
                u32::from(c)
            );
        }
        assert_eq!(sanitize_filename("\u{202E}"), DEFAULT_FILENAME);
        assert_eq!(sanitize_filename("שלום.txt"), "שלום.txt");
        let long = "é".repeat(300);
        let s = sanitize_filename(&long);
        assert!(s.len() <= MAX_FILENAME_BYTES && s.chars().all(|c| c == 'é'));
    }
}
