//! Holding `data` to the byte limit: `html` is dropped first, then `text` and `reply_text` are
//! cut at character boundaries, and `truncated` is set.
//!
//! How the room left is shared: `reply_text` keeps at most half of it, `text` the rest (all of
//! it that `reply_text` leaves), so the reply is kept whole whenever it fits in half; when
//! `reply_text` equals `text`, both are the same prefix of half the room. `reply_text` never
//! ends up longer than `text`, and `text` is the longest prefix that fits beside it.

use serde_json::{Map, Value};

use crate::Refusal;

fn json_len(data: &Map<String, Value>) -> usize {
    serde_json::to_vec(data).map_or(usize::MAX, |v| v.len())
}

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Bytes `text` takes inside a JSON string.
fn escaped(text: &str) -> usize {
    text.chars().map(escaped_len).sum()
}

/// The longest prefix of `text` whose JSON-escaped form fits in `budget` bytes; always ends on
/// a character boundary.
pub(crate) fn cut_to(text: &str, budget: usize) -> &str {
    let mut used = 0usize;
    for (i, c) in text.char_indices() {
        used = used.saturating_add(escaped_len(c));
        if used > budget {
            return text.get(..i).unwrap_or_default();
        }
    }
    text
}

/// The longest prefix of `text` of at most `max` bytes, on a character boundary.
fn prefix_bytes(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// Cuts `text` and `reply` (a reply's text, at most as long as `text`) to share `budget`
/// escaped bytes (see the module's docs).
fn share<'a>(text: &'a str, reply: &'a str, budget: usize) -> (&'a str, &'a str) {
    if reply == text {
        let kept = cut_to(text, budget / 2);
        return (kept, kept);
    }
    let mut reply = cut_to(reply, budget / 2);
    let mut kept = cut_to(text, budget - escaped(reply));
    if reply.len() > kept.len() {
        // Text that escapes to more bytes than the reply (control characters) keeps fewer
        // bytes: the reply is held to the text's length, and the text takes the room freed.
        reply = prefix_bytes(reply, kept.len());
        kept = cut_to(text, budget - escaped(reply));
    }
    (kept, reply)
}

fn take_string(data: &mut Map<String, Value>, key: &str) -> Option<String> {
    match data.get_mut(key) {
        Some(Value::String(s)) => Some(std::mem::take(s)),
        _ => None,
    }
}

/// Makes the serialized `data` at most `limit` bytes, or refuses when even an empty body does
/// not fit.
pub(crate) fn fit(data: &mut Map<String, Value>, limit: usize) -> Result<(), Refusal> {
    if json_len(data) <= limit {
        return Ok(());
    }
    data.insert("truncated".into(), Value::Bool(true));
    data.insert("html".into(), Value::Null);
    if json_len(data) <= limit {
        return Ok(());
    }
    // Both emptied (a null stays null) to measure the rest.
    let text = take_string(data, "text");
    let reply = take_string(data, "reply_text");
    let base = json_len(data);
    if base > limit {
        return Err(Refusal::DataTooLarge { limit });
    }
    let text = text.unwrap_or_default();
    let reply = reply.unwrap_or_default();
    let (text_kept, reply_kept) = share(&text, &reply, limit - base);
    for (key, kept) in [("text", text_kept), ("reply_text", reply_kept)] {
        if let Some(Value::String(s)) = data.get_mut(key) {
            kept.clone_into(s);
        }
    }
    if json_len(data) > limit {
        return Err(Refusal::DataTooLarge { limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_char_boundaries_and_counts_escapes() {
        assert_eq!(cut_to("héllo", 2), "h");
        assert_eq!(cut_to("héllo", 3), "hé");
        assert_eq!(cut_to("a\"b", 2), "a");
        assert_eq!(cut_to("a\u{1}b", 6), "a");
        assert_eq!(cut_to("日本", 5), "日");
        assert_eq!(cut_to("abc", 10), "abc");
    }

    #[test]
    fn text_and_reply_share_the_room() {
        // Equal: the same prefix of half the room each.
        assert_eq!(share("abcdef", "abcdef", 4), ("ab", "ab"));
        // A short reply is kept whole, the text takes the rest.
        assert_eq!(share("ok\n> quoted history", "ok", 10), ("ok\n> qu", "ok"));
        // A long reply keeps half.
        assert_eq!(share("0123456789", "012345678", 8), ("0123", "0123"));
        // Text that escapes long never leaves the reply longer.
        let text = "\u{1}\u{1}\u{1}\nabcdefgh";
        let (t, r) = share(text, "abcdefgh", 24);
        assert!(r.len() <= t.len(), "{t:?} {r:?}");
        assert!(escaped(t) + escaped(r) <= 24);
        assert_eq!(share("", "", 0), ("", ""));
    }
}
