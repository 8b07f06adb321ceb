//! The character rule of the labels a client gives an address, `name` and `task_id`
//! (docs/API.md, "Create."): they are shown to people and to agents, so they may not hide text.

use super::Invalid;

/// The Unicode `Bidi_Control` characters: ALM, LRM, RLM, LRE..RLO and LRI..PDI. They reorder
/// how the text around them is displayed without being visible themselves (also used for the
/// filenames of email attachments, docs/API.md §10).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Refuses control characters (U+0000–U+001F, U+007F–U+009F: NUL, newlines, escapes) and
/// bidirectional formatting characters in `field`'s value.
pub fn validate_label(field: &str, value: &str) -> Result<(), Invalid> {
    match value
        .chars()
        .find(|&c| c.is_control() || is_bidi_control(c))
    {
        Some(c) => Err(Invalid::new(format!(
            "`{field}` may not contain control characters or bidirectional formatting \
             characters (found U+{:04X})",
            u32::from(c)
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_and_emoji_are_labels() {
        for ok in ["build 42", "déjà vu", "日本語", "👨‍👩‍👧", "a\u{00A0}b", "שלום"]
        {
            assert!(validate_label("name", ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn controls_and_bidi_formatting_are_refused() {
        for bad in [
            "a\0b",
            "tab\there",
            "line\n",
            "\u{1b}[31m",
            "\u{7f}",
            "\u{85}",
            "\u{9f}",
            "\u{061C}",
            "\u{200E}",
            "\u{200F}",
            "\u{202A}",
            "\u{202B}",
            "\u{202C}",
            "\u{202D}",
            "evil\u{202E}txt.exe",
            "\u{2066}",
            "\u{2067}",
            "\u{2068}",
            "\u{2069}",
        ] {
            let e = validate_label("task_id", bad).expect_err(bad);
            assert!(e.0.starts_with("`task_id` may not contain"), "{bad:?}: {e}");
        }
        let e = validate_label("name", "x\u{202E}").expect_err("RLO");
        assert!(e.0.contains("U+202E"), "{e}");
    }
}
