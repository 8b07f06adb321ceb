//! `data` obeys the byte limit: `html` dropped first, then `text` and `reply_text` cut at
//! character boundaries.

mod common;

use agentaddress_email::{EmailLimits, Refusal};
use common::{check_shape, parse_with};

fn message(text: &str, html: &str) -> Vec<u8> {
    format!(
        "From: x@example.com\r\nTo: a@inbox.example\r\nSubject: t\r\n\
         Content-Type: multipart/alternative; boundary=\"A\"\r\n\r\n\
         --A\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{text}\r\n\
         --A\r\nContent-Type: text/html; charset=utf-8\r\n\r\n{html}\r\n--A--\r\n"
    )
    .into_bytes()
}

fn limits(max_data_bytes: usize) -> EmailLimits {
    EmailLimits {
        max_data_bytes,
        ..EmailLimits::default()
    }
}

fn len(v: &serde_json::Value) -> usize {
    serde_json::to_vec(v).map(|v| v.len()).unwrap_or(usize::MAX)
}

#[test]
fn html_is_dropped_first() {
    let text = "ö".repeat(100);
    let html = format!("<p>{}</p>", "x".repeat(2_000));
    let raw = message(&text, &html);
    let full = parse_with(&raw, &EmailLimits::default()).expect("accepted");
    assert_eq!(full.data["truncated"], false);
    assert_eq!(full.data["html"], html.as_str());
    let limit = len(&full.data) - 1_000;
    let cut = parse_with(&raw, &limits(limit)).expect("accepted");
    check_shape(&cut, limit);
    assert_eq!(cut.data["truncated"], true);
    assert_eq!(cut.data["html"], serde_json::Value::Null);
    assert_eq!(cut.data["text"], text.as_str());
}

#[test]
fn then_text_is_cut_at_a_char_boundary() {
    // Two-, three- and four-byte characters, and characters JSON escapes. No quoted history:
    // `reply_text` equals `text`, and both are cut to the same prefix.
    let text = "aé€😀\"\\\t\u{1}".repeat(50);
    let raw = message(&text, "<p>html</p>");
    let mut empty = parse_with(&raw, &limits(1)).err();
    assert_eq!(empty.take(), Some(Refusal::DataTooLarge { limit: 1 }));
    let full = parse_with(&raw, &EmailLimits::default()).expect("accepted");
    assert_eq!(full.data["reply_text"], full.data["text"]);
    let full_len = len(&full.data);
    let mut seen_lengths = std::collections::BTreeSet::new();
    for limit in (full_len - 1_400)..full_len {
        let Ok(cut) = parse_with(&raw, &limits(limit)) else {
            continue;
        };
        check_shape(&cut, limit);
        assert_eq!(cut.data["truncated"], true);
        assert_eq!(cut.data["html"], serde_json::Value::Null);
        let kept = cut.data["text"].as_str().expect("text");
        assert!(text.starts_with(kept), "a prefix of the text");
        assert_eq!(cut.data["reply_text"], kept, "cut with the text");
        // Maximal: one more character (in both) would not fit.
        let Some(next) = text[kept.len()..].chars().next() else {
            continue; // dropping the html was enough
        };
        let longer = format!("{kept}{next}");
        let mut with_more = cut.data.clone();
        with_more["text"] = serde_json::Value::String(longer.clone());
        with_more["reply_text"] = serde_json::Value::String(longer);
        assert!(len(&with_more) > limit);
        seen_lengths.insert(kept.len());
    }
    assert!(seen_lengths.len() > 100, "many different cuts exercised");
}

/// A reply above long quoted history: the reply is kept whole while the text is cut, and the
/// text is then the longest prefix that fits beside it.
#[test]
fn a_short_reply_is_kept_whole_while_the_text_is_cut() {
    let quoted: String = (0..200).map(|i| format!("> quoted line {i}\r\n")).collect();
    let text = format!(
        "Yes, ship it.\r\n\r\nOn Tue, 1 Dec 2026, Ada <ada@example.com> wrote:\r\n{quoted}"
    );
    let raw = message(&text, "<p>html</p>");
    let full = parse_with(&raw, &EmailLimits::default()).expect("accepted");
    assert_eq!(full.data["reply_text"], "Yes, ship it.");
    let full_len = len(&full.data);
    for limit in [full_len - 100, full_len - 2_000, full_len - 4_000] {
        let cut = parse_with(&raw, &limits(limit)).expect("accepted");
        check_shape(&cut, limit);
        assert_eq!(cut.data["truncated"], true);
        assert_eq!(cut.data["reply_text"], "Yes, ship it.", "limit {limit}");
        let kept = cut.data["text"].as_str().expect("text");
        assert!(
            text.starts_with(kept) && kept.len() < text.len(),
            "limit {limit}"
        );
        let next = text[kept.len()..].chars().next().expect("cut");
        let mut with_more = cut.data.clone();
        with_more["text"] = serde_json::Value::String(format!("{kept}{next}"));
        assert!(
            len(&with_more) > limit,
            "the text is maximal at limit {limit}"
        );
    }
    // With very little room the reply keeps half of it, and is never longer than the text.
    let floor = {
        let mut bare = full.data.clone();
        bare["text"] = "".into();
        bare["reply_text"] = "".into();
        bare["html"] = serde_json::Value::Null;
        bare["truncated"] = true.into();
        len(&bare)
    };
    let cut = parse_with(&raw, &limits(floor + 10)).expect("accepted");
    check_shape(&cut, floor + 10);
    assert_eq!(cut.data["reply_text"], "Yes, ");
    assert_eq!(cut.data["text"], "Yes, ");
}

#[test]
fn refused_when_even_an_empty_body_does_not_fit() {
    let raw = message("hello", "<p>hi</p>");
    let full = parse_with(&raw, &EmailLimits::default()).expect("accepted");
    let mut bare = full.data.clone();
    bare["text"] = "".into();
    bare["reply_text"] = "".into();
    bare["html"] = serde_json::Value::Null;
    bare["truncated"] = true.into();
    let floor = len(&bare);
    assert!(parse_with(&raw, &limits(floor)).is_ok());
    assert_eq!(
        parse_with(&raw, &limits(floor - 1)),
        Err(Refusal::DataTooLarge { limit: floor - 1 })
    );
}
