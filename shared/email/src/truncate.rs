//! Holding `data` to the byte limit: `html` is dropped first, then `text` is cut at a character
//! boundary, and `truncated` is set.

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
    let text = match data.get_mut("text") {
        Some(Value::String(s)) => std::mem::take(s),
        _ => String::new(),
    };
    let base = json_len(data);
    if base > limit {
        return Err(Refusal::DataTooLarge { limit });
    }
    let kept = cut_to(&text, limit - base);
    data.insert("text".into(), Value::String(kept.to_owned()));
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
}
