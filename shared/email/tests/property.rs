//! Properties over hostile input: never a panic; an accepted message's `data` has every key of
//! the contract and fits the limit; attachment ids listed are found again.

mod common;

use agentaddress_email::{attachment, EmailLimits};
use common::{check_shape, corpus, parse_with};
use proptest::prelude::*;

const CORPUS: &[&str] = &[
    "plain.eml",
    "alternative.eml",
    "html_only.eml",
    "attachment.eml",
    "rfc2047.eml",
    "quoted_printable.eml",
    "gmail_reply.eml",
    "outlook.eml",
    "apple_mail.eml",
    "digest.eml",
    "calendar.eml",
    "cp1251.eml",
    "gb2312.eml",
    "evil_filenames.eml",
];

fn limits(max_data_bytes: usize) -> EmailLimits {
    EmailLimits {
        max_data_bytes,
        max_parts: 64,
        max_nesting: 8,
        ..EmailLimits::default()
    }
}

fn check(raw: &[u8], max_data_bytes: usize) {
    let limits = limits(max_data_bytes);
    if let Ok(parsed) = parse_with(raw, &limits) {
        check_shape(&parsed, max_data_bytes);
        if let Some(atts) = parsed.data["attachments"].as_array() {
            for a in atts {
                let id = a["id"].as_str().unwrap_or_default();
                let got = attachment(raw, id, &limits);
                assert!(got.is_some(), "listed attachment {id} found again");
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let piece = prop_oneof![
        Just(b"\r\n--".to_vec()),
        Just(b"\r\n\r\n".to_vec()),
        Just(b"=?utf-8?B?".to_vec()),
        Just(b"Content-Type: multipart/mixed; boundary=\"x\"\r\n".to_vec()),
        Just(b"Content-Type: message/rfc822\r\n\r\n".to_vec()),
        Just(b"Content-Transfer-Encoding: base64\r\n".to_vec()),
        Just(b"=\r\n".to_vec()),
        Just(vec![0u8, 0xff, 0xc3]),
        proptest::collection::vec(any::<u8>(), 0..16),
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), piece).prop_map(|(i, p)| Mutation::Insert(i, p)),
        (any::<usize>(), 0usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 0usize..256).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(raw: &mut Vec<u8>, m: &Mutation) {
    let at = |i: usize, raw: &Vec<u8>| {
        if raw.is_empty() {
            0
        } else {
            i % (raw.len() + 1)
        }
    };
    match m {
        Mutation::Flip(i, b) => {
            if !raw.is_empty() {
                let i = i % raw.len();
                raw[i] = *b;
            }
        }
        Mutation::Insert(i, p) => {
            let i = at(*i, raw);
            raw.splice(i..i, p.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let i = at(*i, raw);
            let end = (i + n).min(raw.len());
            raw.drain(i..end);
        }
        Mutation::Duplicate(i, n) => {
            let i = at(*i, raw);
            let end = (i + n).min(raw.len());
            let copy = raw[i..end].to_vec();
            raw.splice(i..i, copy);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..2048),
                                   limit in 300usize..4096) {
        check(&raw, limit);
    }

    #[test]
    fn headers_then_arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..2048),
                                                limit in 300usize..4096) {
        let mut raw = b"From: a@b.example\r\nContent-Type: multipart/mixed; boundary=\"x\"\r\n\r\n".to_vec();
        raw.extend(body);
        check(&raw, limit);
    }

    #[test]
    fn mutated_corpus_never_panics(which in 0..CORPUS.len(),
                                   mutations in proptest::collection::vec(mutation(), 1..8),
                                   limit in 300usize..8192) {
        let mut raw = corpus(CORPUS[which]);
        for m in &mutations {
            apply(&mut raw, m);
        }
        check(&raw, limit);
    }
}
