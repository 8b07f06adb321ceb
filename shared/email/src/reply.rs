//! `reply_text`: the new text of a reply, without the quoted history and the signature
//! (docs/API.md §10, "The reply's text").
//!
//! A small, line-based rule set, linear in the text (no regular expressions): every line is
//! classified once, and each rule looks at a bounded number of lines around it and a bounded
//! number of bytes of each. What it removes:
//!
//! - **quoted lines**: lines whose first character other than a space or tab is `>`;
//! - **the attribution** above a block of quoted lines (blank lines between them allowed): one
//!   to three lines (mail clients wrap it) ending in `:` (or `：`) in one of the shapes
//!   `On … wrote:`, `Am … schrieb …:` / `… schrieb:`, `Le … a écrit :`, `El … escribió:`,
//!   `… <x@y>:` (Gmail in Japanese), `… のメッセージ:` / `… のメール:` / `…に…が書きました:`
//!   (`書きました`);
//! - **unquoted history**, from its first line to the end: a line `-----Original Message-----`
//!   (also `Ursprüngliche Nachricht`, `Message d'origine`, `Mensaje original`, `元のメッセージ`)
//!   or a header block that Outlook writes above the message it answers: a `From:` line (`Von:`,
//!   `De :`, `De:`, `差出人:`; `*From:*` too) directly followed by `Subject:` and at least one
//!   of `Sent:`/`Date:` and `To:` (`Betreff:`, `Gesendet:`/`Datum:`, `An:`; `Objet :`,
//!   `Envoyé :`/`Date :`, `À :`; `Asunto:`, `Enviado:`/`Enviado el:`/`Fecha:`, `Para:`; `件名:`,
//!   `送信日時:`/`日付:`, `宛先:`; `Cc:` may stand among them), with the line of underscores or
//!   dashes above it if there is one;
//! - **the signature**: from a line `-- ` (or `--`) to the end of the reply (RFC 3676 §4.3);
//! - **a device signature** as the reply's last line: `Sent from my …`, `Get Outlook for …`,
//!   `Von meinem … gesendet`, `Envoyé de mon …`, `Enviado desde mi …`, `…から送信`.
//!
//! A forward is the message itself: with a subject starting `Fwd:`, `Fw:`, `WG:`, `TR:`, `RV:`,
//! `Enc:` or `転送:` nothing is removed, and from a forward marker line (`---------- Forwarded
//! message ---------`, `Begin forwarded message:`, `-------- Weitergeleitete Nachricht
//! --------`, `Début du message réexpédié :`, `Inicio del mensaje reenviado:`, `転送された
//! メッセージ`…) on, the text is kept as it is.
//!
//! What is kept: the remaining lines as they were, blank lines at both ends dropped and a run
//! of blank lines around a removed part shown as one. On any doubt the answer is `text` itself:
//! when no rule removed anything, when nothing would be left, when the text has more than
//! [`MAX_LINES`] lines before its history starts, and when the extraction fails. It is never
//! longer than `text`.

use std::borrow::Cow;

/// Lines examined. A text with more lines and no unquoted history among them is left whole.
pub const MAX_LINES: usize = 50_000;
/// Bytes of a line examined for a label or a marker.
const HEAD_BYTES: usize = 120;
/// Bytes of one to three joined lines examined as an attribution.
const ATTRIBUTION_BYTES: usize = 600;
/// Lines of an Outlook header block after its `From:` line.
const HEADER_BLOCK_LINES: usize = 6;

/// The new text of `text`, a reply's body (docs/API.md §10): quoted history and signature
/// removed, or `text` itself on any doubt. `subject` tells a forward, which is kept whole.
/// Never panics; never longer than `text`.
pub fn reply_text<'a>(text: &'a str, subject: Option<&str>) -> Cow<'a, str> {
    let extracted = std::panic::catch_unwind(|| extract(text, subject));
    match extracted {
        Ok(Some(reply)) if reply.len() <= text.len() && !reply.trim().is_empty() => {
            Cow::Owned(reply)
        }
        _ => Cow::Borrowed(text),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Blank,
    Quoted,
    Text,
}

struct Line<'a> {
    /// The line with its terminator.
    raw: &'a str,
    /// Without `\n` and `\r`.
    body: &'a str,
    kind: Kind,
}

fn classify(raw: &str) -> Line<'_> {
    let body = raw.trim_end_matches(['\n', '\r']);
    let kind = if body.trim().is_empty() {
        Kind::Blank
    } else if body.trim_start_matches([' ', '\t']).starts_with('>') {
        Kind::Quoted
    } else {
        Kind::Text
    };
    Line { raw, body, kind }
}

/// `None` when nothing is removed (the answer is `text`).
fn extract(text: &str, subject: Option<&str>) -> Option<String> {
    if subject.is_some_and(is_forward_subject) {
        return None;
    }
    let mut lines: Vec<Line<'_>> = Vec::new();
    let mut rest = text;
    // The reply ends at unquoted history (`cut`, dropped) or at a forward (kept as it is).
    let mut cut = false;
    let mut forward_from: Option<&str> = None;
    while !rest.is_empty() {
        if lines.len() == MAX_LINES {
            break;
        }
        let len = rest.find('\n').map_or(rest.len(), |i| i + 1);
        let (raw, after) = rest.split_at(len);
        let line = classify(raw);
        if line.kind == Kind::Text {
            let head = head(line.body, HEAD_BYTES);
            if is_forward_marker(head) {
                forward_from = Some(rest);
                break;
            }
            if is_original_marker(head) {
                cut = true;
                break;
            }
        }
        lines.push(line);
        rest = after;
    }
    // An Outlook header block ends the reply too, and is earlier than a marker found above.
    if let Some(i) = (0..lines.len()).find(|&i| header_block_at(&lines, i)) {
        lines.truncate(separator_above(&lines, i));
        cut = true;
        forward_from = None;
    }
    if !cut && forward_from.is_none() && !rest.is_empty() {
        return None; // over MAX_LINES lines, none of them history
    }
    let lines = lines.as_slice();
    let mut removed = vec![false; lines.len()];
    let mut removed_any = cut;

    // Quoted lines, and the attribution above each block of them.
    for i in 0..lines.len() {
        if lines[i].kind != Kind::Quoted {
            continue;
        }
        removed[i] = true;
        removed_any = true;
        let starts_block = i == 0 || lines[i - 1].kind != Kind::Quoted;
        if starts_block {
            if let Some(range) = attribution_above(lines, i) {
                for r in range {
                    removed[r] = true;
                }
            }
        }
    }
    // The signature, to the end of the reply.
    if let Some(sig) = (0..lines.len()).find(|&i| {
        !removed[i] && lines[i].kind == Kind::Text && is_signature_delimiter(lines[i].body)
    }) {
        // Blank lines stay: they separate what follows (a forward) and are trimmed at the end.
        for (r, line) in removed.iter_mut().zip(lines).skip(sig) {
            *r = *r || line.kind != Kind::Blank;
        }
        removed_any = true;
    }
    // A device signature as the last line.
    if let Some(last) = (0..lines.len())
        .rev()
        .find(|&i| !removed[i] && lines[i].kind != Kind::Blank)
    {
        if is_device_signature(lines[last].body) {
            removed[last] = true;
            removed_any = true;
        }
    }
    if !removed_any {
        return None;
    }

    let mut out = String::with_capacity(text.len().min(1 << 20));
    let mut blanks: Vec<&str> = Vec::new();
    let mut removed_since = false;
    for (line, &gone) in lines.iter().zip(&removed) {
        if gone {
            removed_since = true;
            continue;
        }
        if line.kind == Kind::Blank {
            if !out.is_empty() {
                blanks.push(line.raw);
            }
            continue;
        }
        push_blanks(&mut out, &blanks, removed_since);
        blanks.clear();
        removed_since = false;
        out.push_str(line.raw);
    }
    if let Some(forward) = forward_from {
        push_blanks(&mut out, &blanks, removed_since);
        out.push_str(forward);
    }
    out.truncate(out.trim_end().len());
    Some(out)
}

/// The blank lines between two kept lines: as they were, or one when a part was removed
/// between them.
fn push_blanks(out: &mut String, blanks: &[&str], removed_since: bool) {
    if out.is_empty() {
        return;
    }
    if removed_since {
        if let Some(first) = blanks.first() {
            out.push_str(first);
        }
    } else {
        blanks.iter().for_each(|b| out.push_str(b));
    }
}

/// At most `max` bytes of `s`, ending on a character boundary.
fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

/// `s` without leading and trailing whitespace (NBSP and narrow NBSP included) and stars.
fn bare(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '*')
}

fn is_forward_subject(subject: &str) -> bool {
    let s = subject.trim_start().to_lowercase();
    [
        "fwd:",
        "fw:",
        "wg:",
        "tr:",
        "rv:",
        "enc:",
        "転送:",
        "転送：",
    ]
    .iter()
    .any(|p| s.starts_with(p))
}

/// The words of a marker line: dashes, underscores, whitespace and a final colon stripped,
/// lower-cased.
fn marker_words(line: &str) -> String {
    line.trim_matches(|c: char| c.is_whitespace() || c == '-' || c == '_')
        .trim_end_matches([':', '：'])
        .trim()
        .to_lowercase()
}

fn is_original_marker(line: &str) -> bool {
    let t = line.trim();
    if !(t.starts_with("---") || t.starts_with("___")) {
        return false;
    }
    matches!(
        marker_words(t).as_str(),
        "original message"
            | "original-nachricht"
            | "ursprüngliche nachricht"
            | "message d'origine"
            | "message d’origine"
            | "mensaje original"
            | "元のメッセージ"
    )
}

fn is_forward_marker(line: &str) -> bool {
    // Cheap first: a marker is short, and starts with dashes or ends with a colon.
    let t = line.trim();
    if t.len() > 80 || !(t.starts_with('-') || t.ends_with([':', '：'])) {
        return false;
    }
    matches!(
        marker_words(line).as_str(),
        "forwarded message"
            | "begin forwarded message"
            | "weitergeleitete nachricht"
            | "anfang der weitergeleiteten nachricht"
            | "message transféré"
            | "début du message réexpédié"
            | "début du message transféré"
            | "mensaje reenviado"
            | "inicio del mensaje reenviado"
            | "comienzo del mensaje reenviado"
            | "転送されたメッセージ"
            | "転送メッセージ"
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    From,
    Sent,
    To,
    Cc,
    Subject,
}

/// Outlook's labels, compared ignoring ASCII case (so both cases of `À` are listed).
const LABELS: &[(&str, Label)] = &[
    ("from", Label::From),
    ("von", Label::From),
    ("de", Label::From),
    ("差出人", Label::From),
    ("sent", Label::Sent),
    ("date", Label::Sent),
    ("gesendet", Label::Sent),
    ("datum", Label::Sent),
    ("envoyé", Label::Sent),
    ("enviado", Label::Sent),
    ("enviado el", Label::Sent),
    ("fecha", Label::Sent),
    ("送信日時", Label::Sent),
    ("日付", Label::Sent),
    ("日時", Label::Sent),
    ("to", Label::To),
    ("an", Label::To),
    ("à", Label::To),
    ("À", Label::To),
    ("para", Label::To),
    ("宛先", Label::To),
    ("cc", Label::Cc),
    ("subject", Label::Subject),
    ("betreff", Label::Subject),
    ("objet", Label::Subject),
    ("asunto", Label::Subject),
    ("件名", Label::Subject),
];

/// The label of a header-like line (`From: …`, `De : …`, `*Sent:* …`, `件名：…`), when it is one
/// of Outlook's.
fn label(body: &str) -> Option<Label> {
    let h = head(body, HEAD_BYTES);
    let colon = h.find([':', '：'])?;
    if colon > 24 {
        return None; // longer than any label (`*Enviado el:*`, `送信日時`)
    }
    let name = bare(h.get(..colon)?);
    LABELS
        .iter()
        .find(|(l, _)| l.eq_ignore_ascii_case(name))
        .map(|&(_, label)| label)
}

/// An Outlook header block starts at line `i`: `From:`, and on the lines right below it
/// `Subject:` and at least one of sent/date and to (`Cc:` may stand among them).
fn header_block_at(lines: &[Line<'_>], i: usize) -> bool {
    let Some(first) = lines.get(i) else {
        return false;
    };
    if first.kind != Kind::Text || label(first.body) != Some(Label::From) {
        return false;
    }
    let mut seen = [false; 3];
    for line in lines.iter().skip(i + 1).take(HEADER_BLOCK_LINES) {
        if line.kind != Kind::Text {
            break;
        }
        match label(line.body) {
            Some(Label::Sent) => seen[0] = true,
            Some(Label::To) => seen[1] = true,
            Some(Label::Subject) => seen[2] = true,
            Some(Label::Cc) => {}
            Some(Label::From) | None => break,
        }
    }
    seen[2] && (seen[0] || seen[1])
}

/// Where unquoted history starting at line `i` begins: at the line of underscores or dashes
/// above it (blank lines between allowed), if there is one.
fn separator_above(lines: &[Line<'_>], i: usize) -> usize {
    let mut j = i;
    while j > 0 && lines[j - 1].kind == Kind::Blank {
        j -= 1;
    }
    match j.checked_sub(1).and_then(|k| lines.get(k).map(|l| (k, l))) {
        Some((k, l)) if l.kind == Kind::Text && is_separator(l.body) => k,
        _ => i,
    }
}

fn is_separator(body: &str) -> bool {
    let t = body.trim();
    t.len() >= 8 && (t.bytes().all(|b| b == b'_') || t.bytes().all(|b| b == b'-'))
}

fn is_signature_delimiter(body: &str) -> bool {
    body == "-- " || body == "--"
}

fn is_device_signature(body: &str) -> bool {
    let t = body.trim();
    if t.chars().count() > 60 {
        return false;
    }
    let l = t.to_lowercase();
    l.starts_with("sent from my ")
        || l.starts_with("get outlook for ")
        || (l.starts_with("von meinem ") && l.ends_with(" gesendet"))
        || l.starts_with("envoyé de mon ")
        || l.starts_with("enviado desde mi ")
        || (l.ends_with("から送信") && l.chars().count() <= 30)
}

/// The lines of the attribution right above the quoted block starting at `q` (blank lines
/// between allowed): the longest of one to three unquoted lines that reads as one, where a
/// joined one must start as an attribution does.
fn attribution_above(lines: &[Line<'_>], q: usize) -> Option<std::ops::Range<usize>> {
    let mut p = q;
    while p > 0 && lines[p - 1].kind == Kind::Blank {
        p -= 1;
    }
    let last = p.checked_sub(1)?;
    for k in (1..=3usize).rev() {
        let Some(first) = (last + 1).checked_sub(k) else {
            continue;
        };
        let group = lines.get(first..=last)?;
        if group.iter().any(|l| l.kind != Kind::Text) {
            continue;
        }
        if group.iter().map(|l| l.body.len() + 1).sum::<usize>() > ATTRIBUTION_BYTES {
            continue;
        }
        let joined = group
            .iter()
            .map(|l| l.body.trim())
            .collect::<Vec<_>>()
            .join(" ");
        if is_attribution(&joined) && (k == 1 || starts_attribution(group[0].body)) {
            return Some(first..last + 1);
        }
    }
    None
}

/// Whether a line can begin a wrapped attribution: `On `, `Am `, `Le `, `El `, or a date.
fn starts_attribution(body: &str) -> bool {
    let t = body.trim_start();
    let l = head(t, 8).to_lowercase();
    ["on ", "am ", "le ", "el "]
        .iter()
        .any(|p| l.starts_with(p))
        || t.chars().next().is_some_and(|c| c.is_ascii_digit())
}

/// Whether `s` (one or more lines joined with spaces) is an attribution line.
fn is_attribution(s: &str) -> bool {
    let s = s.trim_end();
    let Some(head) = s.strip_suffix(':').or_else(|| s.strip_suffix('：')) else {
        return false;
    };
    let head = head.trim_end();
    // `a\u{a0}écrit\u{a0}:` as `a écrit :`.
    let lower = head.to_lowercase().replace(['\u{a0}', '\u{202f}'], " ");
    let starts = |p: &str| lower.starts_with(p);
    lower.ends_with(" wrote")
        || lower.ends_with(" schrieb")
        || (starts("am ") && lower.contains(" schrieb "))
        || lower.ends_with(" écrit")
        || lower.ends_with(" escribió")
        || lower.ends_with(" escribio")
        || head.ends_with("書きました")
        || head.ends_with("のメッセージ")
        || head.ends_with("のメール")
        || ends_with_mailbox(head)
}

/// `… <x@y>` or `… (<x@y>)`.
fn ends_with_mailbox(head: &str) -> bool {
    let h = head.trim_end_matches(')');
    h.strip_suffix('>')
        .and_then(|h| h.rfind('<').and_then(|i| h.get(i + 1..)))
        .is_some_and(|addr| addr.contains('@') && !addr.contains(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> String {
        reply_text(text, Some("Re: x")).into_owned()
    }

    #[test]
    fn nothing_to_remove_is_the_text_itself() {
        for text in ["Hello there.\r\n", "", "  \n", "a\n\n\nb\n", "wrote:\n"] {
            assert!(matches!(reply_text(text, None), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn quoted_block_and_its_attribution_go() {
        let text = "Sounds good.\r\n\r\nOn Tue, Dec 1, 2026 at 10:00 AM Ada <ada@example.com> wrote:\r\n\r\n> Thursday?\r\n>\r\n> Ada\r\n";
        assert_eq!(reply(text), "Sounds good.");
    }

    #[test]
    fn a_wrapped_attribution_goes_whole() {
        let text = "Yes.\n\nOn Tue, Dec 1, 2026 at 10:00 AM Ada Augusta Lovelace-Byron <\nada.lovelace@analytical-engine.example> wrote:\n\n> Thursday?\n";
        assert_eq!(reply(text), "Yes.");
        let text = "Ja.\n\nAm Di., 1. Dez. 2026 um 10:00 Uhr schrieb Ada Augusta Lovelace <\nada@example.com>:\n\n> Donnerstag?\n";
        assert_eq!(reply(text), "Ja.");
    }

    #[test]
    fn a_line_ending_in_a_colon_is_no_attribution_unless_it_reads_as_one() {
        let text = "I agree with this part:\n> the quote\nand this.\n";
        assert_eq!(reply(text), "I agree with this part:\nand this.");
    }

    #[test]
    fn interleaved_answers_are_kept_in_order() {
        let text = "On 12/1/26 10:00 AM, Ada wrote:\n> One?\n\nYes.\n\n> Two?\n\nNo.\n\n-- \nBob\n";
        assert_eq!(reply(text), "Yes.\n\nNo.");
    }

    #[test]
    fn outlook_header_block_needs_two_more_labels() {
        let text = "Done.\n\n________________________________\nFrom: Ada <ada@example.com>\nSent: Tuesday\nTo: Bob\nSubject: x\n\nold\n";
        assert_eq!(reply(text), "Done.");
        let text = "From: the team\nTo: everyone\nHello.\n";
        assert!(matches!(reply_text(text, None), Cow::Borrowed(_)));
    }

    #[test]
    fn original_message_marker_cuts() {
        let text = "Ok.\n-----Ursprüngliche Nachricht-----\nVon: Ada\nalt\n";
        assert_eq!(reply(text), "Ok.");
    }

    #[test]
    fn forwards_are_kept() {
        let text = "FYI\n\n---------- Forwarded message ---------\nFrom: Ada <ada@example.com>\nDate: Tue\nSubject: x\nTo: Bob\n\n> quoted inside\n";
        assert!(matches!(reply_text(text, Some("Re: x")), Cow::Borrowed(_)));
        let signed = format!("Look.\n-- \nBob\n\n{}", &text[5..]);
        assert_eq!(
            reply_text(&signed, None),
            format!("Look.\n\n{}", text[5..].trim_end())
        );
        let outlook =
            "See below.\n\nFrom: Ada <ada@example.com>\nSent: Tue\nTo: Bob\nSubject: x\n\nbody\n";
        assert!(matches!(
            reply_text(outlook, Some("FW: x")),
            Cow::Borrowed(_)
        ));
        assert_eq!(reply_text(outlook, Some("RE: x")), "See below.");
    }

    #[test]
    fn nothing_left_is_the_text() {
        for text in [
            "> all quoted\n> here\n",
            "-- \nsig only\n",
            "On x, Ada wrote:\n> q\n",
        ] {
            assert_eq!(reply_text(text, None), text);
        }
    }

    #[test]
    fn signature_and_device_line_go() {
        assert_eq!(reply("Hi\n\nSent from my iPhone\n"), "Hi");
        assert_eq!(reply("Hi\n--\nBob\nCEO\n"), "Hi");
        assert_eq!(
            reply("Hi\n---\nnot a signature\n"),
            "Hi\n---\nnot a signature\n"
        );
    }

    #[test]
    fn never_longer_and_bounded_on_hostile_text() {
        let many = "> q\n".repeat(MAX_LINES + 10);
        assert_eq!(reply_text(&many, None), many.as_str());
        let long_line = format!("{}\n> q\n", "x".repeat(1_000_000));
        assert_eq!(reply(&long_line), "x".repeat(1_000_000));
        let colons = format!("{}:\n> q\n", "<@".repeat(100_000));
        assert_eq!(reply(&colons), format!("{}:", "<@".repeat(100_000)));
        for text in ["\u{1}>\r\r\n", "é\n> ü", "日本\r\n>", "\n\n\n"] {
            assert!(reply_text(text, None).len() <= text.len());
        }
    }
}
