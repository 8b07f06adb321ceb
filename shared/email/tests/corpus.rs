//! The corpus under tests/corpus: each message yields the event the contract describes (the
//! specific fields asserted) or the specific refusal. Big hostile messages are generated here.

mod common;

use agentaddress_email::{
    attachment, parse_message, AuthResults, AuthVerdict, EmailLimits, Provider, Refusal,
};
use common::{accept, corpus, parse};
use serde_json::json;

#[test]
fn plain_text() {
    let d = accept("plain.eml");
    assert_eq!(d["from"], "Ada Lovelace <Ada@Example.COM>");
    assert_eq!(d["message_id"], "<plain-1@example.com>");
    assert_eq!(d["subject"], "Hello");
    assert_eq!(d["date"], "2026-12-01T09:00:00Z");
    assert_eq!(d["text"], "Hello there.\r\n");
    assert_eq!(d["html"], json!(null));
    assert_eq!(d["to"], json!(["addr_abc@inbox.example"]));
    assert_eq!(d["truncated"], false);
    assert_eq!(d["size"], corpus("plain.eml").len());
    assert_eq!(d["provider"], "smtp");
    assert_eq!(
        d["auth"],
        json!({"spf": "none", "dkim": "none", "dmarc": "none"})
    );
    assert_eq!(
        d["envelope"],
        json!({"mail_from": "bounce@sender.example", "rcpt_to": ["addr_abc@inbox.example"]})
    );
    let parsed = parse(&corpus("plain.eml")).expect("accepted");
    assert_eq!(parsed.source.as_deref(), Some("ada@example.com"));
}

#[test]
fn multipart_alternative() {
    let d = accept("alternative.eml");
    assert_eq!(d["text"], "plain version");
    assert_eq!(d["html"], "<p>html <b>version</b></p>");
    assert_eq!(d["from"], "\"Bob, Jr.\" <bob@example.org>");
    assert_eq!(d["to"], json!(["a@inbox.example", "C <c@inbox.example>"]));
    assert_eq!(d["cc"], json!(["d@example.net"]));
    assert_eq!(d["attachments"], json!([]));
}

#[test]
fn html_only_derives_text() {
    let d = accept("html_only.eml");
    assert!(d["html"]
        .as_str()
        .is_some_and(|h| h.contains("<h1>Title</h1>")));
    let text = d["text"].as_str().expect("text derived");
    assert!(text.contains("Title") && text.contains("Some & text") && !text.contains('<'));
}

fn pdf_bytes() -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n".to_vec();
    for _ in 0..20 {
        pdf.extend(0..=255u8);
    }
    pdf.extend_from_slice(b"\n%%EOF\n");
    pdf
}

#[test]
fn attachment_listed_and_round_trips() {
    let d = accept("attachment.eml");
    assert_eq!(d["text"], "See attached.");
    let pdf = pdf_bytes();
    assert_eq!(
        d["attachments"],
        json!([{"id": "att_2", "filename": "report.pdf", "content_type": "application/pdf",
                "size": pdf.len(), "content_id": "report@example.com"}])
    );
    let raw = corpus("attachment.eml");
    let got = attachment(&raw, "att_2", &EmailLimits::default()).expect("found");
    assert_eq!(got.filename, "report.pdf");
    assert_eq!(got.content_type, "application/pdf");
    assert_eq!(
        agentaddress_core::domain::ids::sha256_hex(&got.bytes),
        agentaddress_core::domain::ids::sha256_hex(&pdf)
    );
    // Stable across parses; unknown or non-canonical ids find nothing.
    assert_eq!(accept("attachment.eml")["attachments"], d["attachments"]);
    for unknown in [
        "att_0",
        "att_1",
        "att_3",
        "att_02",
        "att_+2",
        "att_",
        "x",
        "att_99999999999",
    ] {
        assert_eq!(
            attachment(&raw, unknown, &EmailLimits::default()),
            None,
            "{unknown}"
        );
    }
}

#[test]
fn rfc2047_headers_in_many_charsets() {
    let d = accept("rfc2047.eml");
    assert_eq!(d["subject"], "Grüße aus Köln ✓");
    assert_eq!(d["from"], "\"Ünïcödé ✓\" <x@example.com>");
    assert_eq!(accept("rfc2047_latin1.eml")["subject"], "Café crème");
    assert_eq!(accept("rfc2047_sjis.eml")["subject"], "日本語の件名");
    assert_eq!(accept("rfc2047_koi8r.eml")["subject"], "Привет мир");
}

#[test]
fn quoted_printable_body() {
    let d = accept("quoted_printable.eml");
    let text = d["text"].as_str().expect("text");
    assert!(text.starts_with("Ça va? Une ligne très longue"));
    assert!(text.contains("soixante-seize caractères."));
    assert!(!text.contains("=\r\n"));
}

#[test]
fn gmail_reply_threads() {
    let d = accept("gmail_reply.eml");
    assert_eq!(d["in_reply_to"], "<orig-2@mail.gmail.com>");
    assert_eq!(
        d["references"],
        json!(["<orig-1@example.com>", "<orig-2@mail.gmail.com>"])
    );
    assert_eq!(d["message_id"], "<CAGmail123+abc@mail.gmail.com>");
    assert_eq!(d["date"], "2026-12-02T17:15:30Z");
    assert!(d["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("Looks good.")));
    assert!(d["html"]
        .as_str()
        .is_some_and(|h| h.contains("<div dir=\"ltr\">") && h.contains("Tuesday")));
}

#[test]
fn outlook_shaped() {
    let d = accept("outlook.eml");
    assert_eq!(d["subject"], "RE: Quarterly numbers");
    assert_eq!(d["in_reply_to"], "<q-1@example.com>");
    assert_eq!(d["text"], "Numbers attached.\r\n");
    assert_eq!(d["date"], "2026-12-03T14:02:11Z");
    assert_eq!(d["from"], "Linus <linus@contoso.onmicrosoft.com>");
}

#[test]
fn apple_mail_shaped() {
    let d = accept("apple_mail.eml");
    assert_eq!(d["text"], "Here it is.");
    assert!(d["html"]
        .as_str()
        .is_some_and(|h| h.contains("cid:photo@icloud")));
    assert_eq!(d["date"], "2026-12-03T23:00:00Z");
    let atts = d["attachments"].as_array().expect("attachments");
    assert_eq!(atts.len(), 1);
    assert_eq!(atts[0]["filename"], "photo.png");
    assert_eq!(atts[0]["content_type"], "image/png");
    assert_eq!(atts[0]["content_id"], "photo@icloud");
    let id = atts[0]["id"].as_str().expect("id");
    let png = attachment(&corpus("apple_mail.eml"), id, &EmailLimits::default()).expect("found");
    assert!(png.bytes.starts_with(b"\x89PNG\r\n\x1a\n") && png.bytes.len() == 48);
}

#[test]
fn digest_lists_each_message() {
    let d = accept("digest.eml");
    assert_eq!(d["text"], "Today's topics: 1. First 2. Second");
    let atts = d["attachments"].as_array().expect("attachments");
    assert_eq!(atts.len(), 2);
    let raw = corpus("digest.eml");
    for (a, body) in atts.iter().zip(["first body", "second body"]) {
        assert_eq!(a["content_type"], "message/rfc822");
        let got = attachment(&raw, a["id"].as_str().expect("id"), &EmailLimits::default())
            .expect("found");
        assert!(String::from_utf8_lossy(&got.bytes).contains(body));
    }
}

#[test]
fn calendar_invite() {
    let d = accept("calendar.eml");
    assert_eq!(d["text"], "You are invited.");
    let atts = d["attachments"].as_array().expect("attachments");
    assert_eq!(atts.len(), 1);
    assert_eq!(atts[0]["filename"], "invite.ics");
    assert_eq!(atts[0]["content_type"], "text/calendar");
    let ics = attachment(&corpus("calendar.eml"), "att_2", &EmailLimits::default()).expect("ics");
    assert!(ics.bytes.starts_with(b"BEGIN:VCALENDAR"));
}

#[test]
fn non_utf8_bodies() {
    assert_eq!(
        accept("cp1251.eml")["text"],
        "Съешь же ещё этих мягких французских булок\r\n"
    );
    assert_eq!(accept("gb2312.eml")["text"], "你好，世界\r\n");
}

#[test]
fn broken_boundary_keeps_the_body() {
    let d = accept("broken_boundary.eml");
    assert_eq!(d["subject"], "broken");
    let atts = d["attachments"].as_array().expect("attachments");
    assert_eq!(atts.len(), 1);
    assert_eq!(atts[0]["content_type"], "text/plain");
}

#[test]
fn bad_base64_is_kept_not_fatal() {
    let d = accept("bad_base64.eml");
    assert_eq!(d["text"], "ok");
    assert_eq!(d["attachments"][0]["filename"], "x.bin");
}

#[test]
fn bad_quoted_printable_is_best_effort() {
    let text = accept("bad_qp.eml")["text"]
        .as_str()
        .expect("text")
        .to_owned();
    assert!(text.starts_with("broken =ZZ escape and "));
}

#[test]
fn lying_and_unknown_charsets() {
    let d = accept("lying_charset.eml");
    let text = d["text"].as_str().expect("text");
    assert!(text.starts_with("not utf8: ") && text.contains('\u{fffd}'));
    assert_eq!(
        accept("unknown_charset.eml")["text"],
        "plain ascii under an unknown charset\r\n"
    );
}

#[test]
fn rfc2047_garbage_is_left_readable() {
    let d = accept("rfc2047_garbage.eml");
    assert!(d["subject"].as_str().is_some_and(|s| s.ends_with("ok")));
    assert_eq!(d["text"], "body\r\n");
}

#[test]
fn nul_bytes_survive_as_json_escapes() {
    let d = accept("nul_bytes.eml");
    assert_eq!(d["subject"], "nul\u{0}here");
    assert_eq!(d["text"], "body\u{0}with\u{0}nuls\r\n");
}

#[test]
fn evil_filenames_are_sanitized() {
    let d = accept("evil_filenames.eml");
    let names: Vec<&str> = d["attachments"]
        .as_array()
        .expect("attachments")
        .iter()
        .filter_map(|a| a["filename"].as_str())
        .collect();
    assert_eq!(names, ["passwd", "y", "abc.txt"]);
    let got = attachment(
        &corpus("evil_filenames.eml"),
        "att_2",
        &EmailLimits::default(),
    )
    .expect("found");
    assert_eq!(
        (got.filename.as_str(), got.bytes.as_slice()),
        ("passwd", &b"root"[..])
    );
}

/// A message whose author is ambiguous (docs/API.md §10) is attributed to no one: `from` is
/// null, `source` is the envelope's sender, and a DMARC verdict a door computed for it (for
/// whichever mailbox it chose) becomes `permerror`; a door that evaluated nothing keeps `none`.
#[test]
fn an_ambiguous_author_is_no_one() {
    let pass = AuthResults {
        spf: AuthVerdict::Pass,
        dkim: AuthVerdict::Pass,
        dmarc: AuthVerdict::Pass,
    };
    let parse_auth = |raw: &str, auth: AuthResults| {
        parse_message(
            raw.as_bytes(),
            &common::envelope(),
            None,
            Provider::Ses,
            auth,
            None,
            &EmailLimits::default(),
        )
        .unwrap_or_else(|e| panic!("{raw:?}: refused: {e:?}"))
    };
    for froms in [
        "From: evil@evil.test\r\nFrom: Bank <bank@bank.test>\r\n",
        "From: evil@evil.test, Bank <bank@bank.test>\r\n",
        "From: bank.test\r\n",
        "",
    ] {
        let raw = format!("{froms}To: a@inbox.example\r\nSubject: pay\r\n\r\nbody\r\n");
        let parsed = parse_auth(&raw, pass);
        assert_eq!(parsed.data["from"], json!(null), "{froms:?}");
        assert_eq!(
            parsed.source.as_deref(),
            Some("bounce@sender.example"),
            "{froms:?}"
        );
        assert_eq!(
            parsed.data["auth"],
            json!({"spf": "pass", "dkim": "pass", "dmarc": "permerror"}),
            "{froms:?}"
        );
        let unevaluated = parse_auth(&raw, AuthResults::default());
        assert_eq!(unevaluated.data["auth"]["dmarc"], "none", "{froms:?}");
    }
    let one = parse_auth(
        "From: Bank <Bank@Bank.test>\r\nSubject: pay\r\n\r\nbody\r\n",
        pass,
    );
    assert_eq!(one.data["from"], "Bank <Bank@Bank.test>");
    assert_eq!(one.source.as_deref(), Some("bank@bank.test"));
    assert_eq!(one.data["auth"]["dmarc"], "pass");
}

// ----- generated hostile messages -----

const HEAD: &str = "From: x@example.com\r\nTo: a@inbox.example\r\nSubject: big\r\n";

#[test]
fn one_megabyte_header_line() {
    let raw = format!("{HEAD}X-Long: {}\r\n\r\nbody\r\n", "a".repeat(1_000_000));
    let parsed = parse(raw.as_bytes()).expect("accepted");
    assert_eq!(parsed.data["subject"], "big");
    assert_eq!(parsed.data["text"], "body\r\n");
    let raw = format!(
        "From: x@example.com\r\nSubject: {}\r\n\r\nbody\r\n",
        "s".repeat(1_000_000)
    );
    assert_eq!(
        parse(raw.as_bytes()),
        Err(Refusal::DataTooLarge { limit: 1_000_000 })
    );
}

#[test]
fn ten_thousand_parts_refused() {
    let mut raw = format!("{HEAD}Content-Type: multipart/mixed; boundary=\"P\"\r\n\r\n");
    for i in 0..10_000 {
        raw.push_str(&format!(
            "--P\r\nContent-Type: text/plain\r\n\r\npart {i}\r\n"
        ));
    }
    raw.push_str("--P--\r\n");
    let refusal = parse(raw.as_bytes()).expect_err("refused");
    assert_eq!(
        refusal,
        Refusal::TooComplex {
            why: "too many MIME parts"
        }
    );
    assert_eq!(
        refusal.smtp_reply().to_string(),
        "554 5.6.0 Message structure too complex"
    );
}

/// A multipart/mixed of `leaves` text parts: `leaves + 1` MIME parts, the container included,
/// with its closing delimiter.
fn multipart_of(leaves: usize) -> String {
    let mut raw = format!("{HEAD}Content-Type: multipart/mixed; boundary=\"P\"\r\n\r\n");
    for i in 0..leaves {
        raw.push_str(&format!(
            "--P\r\nContent-Type: text/plain\r\n\r\npart {i}\r\n"
        ));
    }
    raw.push_str("--P--\r\n");
    raw
}

/// docs/API.md §10 refuses "more than 1,000 parts": exactly 1,000 (the container and 999
/// leaves; the closing delimiter starts no part) is accepted, 1,001 is refused.
#[test]
fn exactly_a_thousand_parts_accepted_one_more_refused() {
    let ok =
        parse(multipart_of(999).as_bytes()).expect("a message of exactly 1,000 parts was refused");
    assert!(
        ok.data["text"]
            .as_str()
            .is_some_and(|t| t.contains("part 0") && t.contains("part 998")),
        "{}",
        ok.data["text"]
    );
    assert_eq!(
        parse(multipart_of(1_000).as_bytes()),
        Err(Refusal::TooComplex {
            why: "too many MIME parts"
        })
    );
}

/// The parser finds a delimiter anywhere in a line (`x--P`), and reads the header block that
/// follows a boundary on the same line: neither hides parts from the bounds.
#[test]
fn delimiters_inside_lines_are_bounded_too() {
    let mut raw = format!("{HEAD}Content-Type: multipart/mixed; boundary=\"P\"\r\n\r\n");
    for i in 0..1_000 {
        raw.push_str(&format!("x--P\r\n\r\npart {i}\r\n"));
    }
    raw.push_str("--P--\r\n");
    assert_eq!(
        parse(raw.as_bytes()),
        Err(Refusal::TooComplex {
            why: "too many MIME parts"
        })
    );
    let mut inner = String::from("Content-Type: multipart/mixed; boundary=\"i\"\r\n\r\n");
    for _ in 0..10 {
        inner.push_str("--i\r\n\r\nx\r\n");
    }
    let encoded = base64_lines(inner.as_bytes());
    let raw = format!(
        "{HEAD}Content-Type: multipart/mixed; boundary=\"o\"\r\n\r\n--oContent-Type: \
         message/rfc822\r\nContent-Transfer-Encoding: base64\r\n\r\n{encoded}--o--\r\n"
    );
    assert_eq!(
        parse(raw.as_bytes()),
        Err(Refusal::TooComplex {
            why: "encoded message/rfc822 part"
        })
    );
}

#[test]
fn multipart_nested_a_thousand_deep_refused() {
    let mut raw = HEAD.to_owned();
    for i in 0..1_000 {
        raw.push_str(&format!(
            "Content-Type: multipart/mixed; boundary=\"b{i}\"\r\n\r\n--b{i}\r\n"
        ));
    }
    raw.push_str("Content-Type: text/plain\r\n\r\ndeep\r\n");
    for i in (0..1_000).rev() {
        raw.push_str(&format!("--b{i}--\r\n"));
    }
    assert!(matches!(
        parse(raw.as_bytes()),
        Err(Refusal::TooComplex { .. })
    ));
}

#[test]
fn multipart_nested_within_bounds_accepted_deeper_refused() {
    let nested = |depth: usize| {
        let mut raw = HEAD.to_owned();
        for i in 0..depth {
            raw.push_str(&format!(
                "Content-Type: multipart/mixed; boundary=\"b{i}\"\r\n\r\n--b{i}\r\n"
            ));
        }
        raw.push_str("Content-Type: text/plain\r\n\r\ndeep\r\n");
        for i in (0..depth).rev() {
            raw.push_str(&format!("--b{i}--\r\n"));
        }
        raw
    };
    let ok = parse(nested(10).as_bytes()).expect("10 deep is fine");
    assert_eq!(ok.data["text"], "deep");
    assert_eq!(
        parse(nested(100).as_bytes()),
        Err(Refusal::TooComplex {
            why: "nested too deeply"
        })
    );
}

#[test]
fn message_rfc822_nested_deeply_refused() {
    let mut raw = String::new();
    for _ in 0..200 {
        raw.push_str("From: x@example.com\r\nContent-Type: message/rfc822\r\n\r\n");
    }
    raw.push_str("From: y@example.com\r\nSubject: innermost\r\n\r\nhi\r\n");
    assert_eq!(
        parse(raw.as_bytes()),
        Err(Refusal::TooComplex {
            why: "nested too deeply"
        })
    );
    let mut many = String::new();
    for _ in 0..5_000 {
        many.push_str("From: x@example.com\r\nContent-Type: message/rfc822\r\n\r\n");
    }
    assert!(matches!(
        parse(many.as_bytes()),
        Err(Refusal::TooComplex { .. })
    ));
}

#[test]
fn too_many_header_fields_refused() {
    let raw = format!("{HEAD}{}\r\nbody\r\n", "X-A: b\r\n".repeat(30_000));
    assert_eq!(
        parse(raw.as_bytes()),
        Err(Refusal::TooComplex {
            why: "too many header fields"
        })
    );
}

#[test]
fn over_the_raw_limit_refused_first() {
    let raw = vec![b'a'; 10_000_001];
    let refusal = parse(&raw).expect_err("refused");
    assert_eq!(
        refusal,
        Refusal::TooLarge {
            size: 10_000_001,
            limit: 10_000_000
        }
    );
    assert_eq!(refusal.smtp_reply().code, 552);
    assert_eq!(refusal.smtp_reply().enhanced, "5.3.4");
}

#[test]
fn nothing_parseable_refused() {
    assert_eq!(parse(b""), Err(Refusal::Unparseable));
    assert_eq!(parse(b"\r\n\r\nbody only"), Err(Refusal::NoHeaders));
    assert_eq!(
        Refusal::NoHeaders.smtp_reply().to_string(),
        "554 5.6.0 Message has no header fields"
    );
}

#[test]
fn encoded_message_rfc822_hiding_parts_refused() {
    // 10,000 parts inside a base64-encoded message/rfc822: invisible to a scan of the raw
    // bytes, so the encoded message part itself is refused (RFC 2046 §5.2.1 forbids it).
    let mut inner = String::from("Content-Type: multipart/mixed; boundary=\"i\"\r\n\r\n");
    for _ in 0..10_000 {
        inner.push_str("--i\r\n\r\nx\r\n");
    }
    let encoded = base64_lines(inner.as_bytes());
    let raw = format!(
        "{HEAD}Content-Type: multipart/mixed; boundary=\"o\"\r\n\r\n--o\r\n\
         Content-Type: message/rfc822\r\nContent-Transfer-Encoding: base64\r\n\r\n{encoded}--o--\r\n"
    );
    assert_eq!(
        parse(raw.as_bytes()),
        Err(Refusal::TooComplex {
            why: "encoded message/rfc822 part"
        })
    );
}

fn base64_lines(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for (n, chunk) in bytes.chunks(3).enumerate() {
        let b = [chunk.first(), chunk.get(1), chunk.get(2)].map(|b| b.copied().unwrap_or(0));
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((v >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
        if n % 19 == 18 {
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    out
}
