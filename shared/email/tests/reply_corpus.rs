//! `data.reply_text` (docs/API.md §10, "The reply's text") over tests/replies: replies as Gmail,
//! Outlook (desktop, on the web, for Mac, mobile), Apple Mail (macOS, iOS) and Thunderbird
//! write them, in English, German, French, Spanish and Japanese, each a whole message parsed by
//! `parse_message` (its charset and transfer encoding decoded as for any mail) beside the
//! reply text it must give. Then hostile input: the email corpus, mutated messages and
//! arbitrary text never make `reply_text` panic or longer than `text`, and stay linear.
//!
//! A case file (`tests/replies/{client}-{language}-{shape}.case`) is the raw message, then a
//! line `#### expected reply_text ####`, then the expected `reply_text`; both with LF line
//! ends in the file, CRLF (as mail travels) when compared.

mod common;

use std::time::{Duration, Instant};

use agentaddress_email::reply_text;
use common::{check_shape, parse};
use proptest::prelude::*;
use serde_json::Value;

const SEPARATOR: &[u8] = b"\n#### expected reply_text ####\n";

fn crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 20);
    for &b in bytes {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

struct Case {
    name: String,
    raw: Vec<u8>,
    expected: String,
}

fn cases() -> Vec<Case> {
    let dir = format!("{}/tests/replies", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".case"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let bytes =
                std::fs::read(format!("{dir}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"));
            let at = bytes
                .windows(SEPARATOR.len())
                .position(|w| w == SEPARATOR)
                .unwrap_or_else(|| panic!("{name}: no separator line"));
            let expected = String::from_utf8(crlf(
                bytes[at + SEPARATOR.len()..]
                    .strip_suffix(b"\n")
                    .unwrap_or_default(),
            ))
            .unwrap_or_else(|e| panic!("{name}: expected text is not UTF-8: {e}"));
            Case {
                raw: crlf(&bytes[..=at]),
                expected,
                name,
            }
        })
        .collect()
}

/// Every case gives its reply text through the whole parse path; the accuracy is printed
/// (`cargo nextest run -p agentaddress-email --test reply_corpus --no-capture`) and must be
/// 100 %.
#[test]
fn every_reply_shape_gives_its_reply_text() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut removed = 0usize;
    for case in &cases {
        let parsed = parse(&case.raw).unwrap_or_else(|e| panic!("{}: refused: {e:?}", case.name));
        check_shape(
            &parsed,
            agentaddress_email::EmailLimits::default().max_data_bytes,
        );
        let got = &parsed.data["reply_text"];
        if got != &Value::String(case.expected.clone()) {
            failures.push(format!(
                "{}:\n  text:     {:?}\n  expected: {:?}\n  got:      {got}",
                case.name, parsed.data["text"], case.expected
            ));
        }
        if parsed.data["reply_text"] != parsed.data["text"] {
            removed += 1;
        }
        assert_eq!(parsed.data["auto_reply"], false, "{}", case.name);
    }
    let passed = cases.len() - failures.len();
    println!(
        "reply_text corpus: {passed}/{} cases right ({:.1} %); history or a signature removed in {removed}",
        cases.len(),
        100.0 * passed as f64 / cases.len().max(1) as f64
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(cases.len() >= 30, "{} cases", cases.len());
    assert!(removed >= 30, "most cases remove something: {removed}");
}

/// The corpus covers each client and each language (the file names say which).
#[test]
fn the_corpus_covers_the_clients_and_languages() {
    let names: Vec<String> = cases().into_iter().map(|c| c.name).collect();
    for client in ["gmail-", "outlook-", "owa-", "apple-", "thunderbird-"] {
        assert!(
            names.iter().filter(|n| n.starts_with(client)).count() >= 5,
            "{client}"
        );
    }
    for lang in ["-en-", "-de-", "-fr-", "-es-", "-ja-"] {
        assert!(
            names.iter().filter(|n| n.contains(lang)).count() >= 4,
            "{lang}"
        );
    }
}

/// Kept whole: a forward, a message that quotes nothing, and a reply whose history was deleted.
#[test]
fn messages_without_history_keep_their_text() {
    for case in cases() {
        if ["forward", "new-message", "history-deleted"]
            .iter()
            .any(|s| case.name.contains(s))
        {
            let parsed = parse(&case.raw).expect("accepted");
            assert_eq!(
                parsed.data["reply_text"], parsed.data["text"],
                "{}",
                case.name
            );
        }
    }
}

/// The email test corpus (tests/corpus, hostile and odd messages included) through the parse
/// path: `check_shape` asserts `reply_text` is null exactly when `text` is, and never longer.
#[test]
fn the_email_corpus_keeps_reply_text_within_text() {
    let dir = format!("{}/tests/corpus", env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let path = entry.expect("entry").path();
        let raw = std::fs::read(&path).expect("read");
        if let Ok(parsed) = parse(&raw) {
            check_shape(
                &parsed,
                agentaddress_email::EmailLimits::default().max_data_bytes,
            );
            seen += 1;
        }
    }
    assert!(seen >= 20, "{seen} messages of the corpus parsed");
    let gmail = parse(&common::corpus("gmail_reply.eml")).expect("accepted");
    assert_eq!(
        gmail.data["reply_text"], "Looks good.",
        "{}",
        gmail.data["text"]
    );
}

fn check(text: &str) {
    let reply = reply_text(text, None);
    assert!(reply.len() <= text.len(), "{text:?} gave {reply:?}");
    if text.trim().is_empty() {
        assert_eq!(reply, text);
    }
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("> ".to_owned()),
        Just(">".to_owned()),
        Just("\r\n".to_owned()),
        Just("\n".to_owned()),
        Just("\r".to_owned()),
        Just(" ".to_owned()),
        Just("-- \n".to_owned()),
        Just("--\r\n".to_owned()),
        Just("On Tue, Ada <a@b> wrote:\n".to_owned()),
        Just("wrote:".to_owned()),
        Just("<a@b>:".to_owned()),
        Just("Am x schrieb y:\n".to_owned()),
        Just("a écrit :\n".to_owned()),
        Just("のメッセージ：\n".to_owned()),
        Just("From: a\n".to_owned()),
        Just("Sent: b\n".to_owned()),
        Just("Subject: c\n".to_owned()),
        Just("件名：d\n".to_owned()),
        Just("________________\n".to_owned()),
        Just("-----Original Message-----\n".to_owned()),
        Just("---------- Forwarded message ---------\n".to_owned()),
        Just("Sent from my iPhone\n".to_owned()),
        Just("\u{a0}\u{202f}\u{feff}é日".to_owned()),
        "\\PC{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics_nor_grows(pieces in proptest::collection::vec(piece(), 0..60)) {
        check(&pieces.concat());
    }

    #[test]
    fn arbitrary_unicode_never_panics_nor_grows(text in "\\PC{0,400}") {
        check(&text);
    }
}

/// Hostile shapes of 10 MB stay linear: each is done in well under what a quadratic scan of
/// 10 MB would need (hours), within seconds even in a debug build on a busy machine.
#[test]
fn ten_megabytes_of_hostile_text_stay_linear() {
    const SIZE: usize = 10_000_000;
    let fill = |unit: &str| unit.repeat(SIZE / unit.len());
    for (label, text) in [
        (
            "quote blocks with attributions",
            fill("On Tue, Ada <a@b> wrote:\n\n\n> q\n"),
        ),
        (
            "header labels without a subject",
            fill("From: a\nSent: b\nTo: c\nCc: d\n"),
        ),
        ("one long line", "<@".repeat(SIZE / 2)),
        ("blank lines", "\n".repeat(SIZE)),
        ("spaces then a quote", format!("{}>\n", " ".repeat(SIZE))),
        ("signature delimiters", fill("-- \n")),
        ("wrapped attribution starts", fill("On x <\nOn y <\n")),
    ] {
        let started = Instant::now();
        let reply = reply_text(&text, Some("Re: x"));
        let took = started.elapsed();
        assert!(reply.len() <= text.len(), "{label}");
        assert!(took < Duration::from_secs(20), "{label}: {took:?}");
    }
}
