//! The SES door's pure parts (docs/API.md §10): what SES tells us about a message it stored in
//! S3, and the S3 event notification that announces the object. No I/O.
//!
//! SES's receipt rule writes the raw message to `inbound/{ses-message-id}` with its own header
//! fields prepended at the top:
//!
//! ```text
//! Return-Path: <sender@example.com>
//! Received: from mail-wr1-f41.google.com (mail-wr1-f41.google.com [209.85.221.41])
//!  by inbound-smtp.eu-west-1.amazonaws.com with SMTP id 8hj0v…
//!  for ada+orders@inbox.example;
//!  Fri, 11 Sep 2015 20:32:33 +0000 (UTC)
//! X-SES-Spam-Verdict: PASS
//! X-SES-Virus-Verdict: PASS
//! Received-SPF: pass (spfCheck: …) client-ip=…; envelope-from=…; helo=…;
//! Authentication-Results: amazonses.com;
//!  spf=pass (spfCheck: …) smtp.mailfrom=…;
//!  dkim=pass header.i=@example.com;
//!  dmarc=pass header.from=example.com;
//! X-SES-RECEIPT: …
//! X-SES-DKIM-SIGNATURE: …
//! Received: by mail-wr1-f41.google.com with SMTP id …   <- the sender's own headers start here
//! ```
//!
//! Everything below SES's block was written by the sender (or the relays before SES), who can
//! forge any header, an `Authentication-Results: amazonses.com` included. So SES's verdicts are
//! read only from the *trusted zone*: the header fields before the first `Received:` field that
//! is not SES's own (SES's is `by inbound-smtp….amazonaws.com`).
//!
//! Every function here reads hostile bytes: only the header block is looked at (up to the first
//! blank line), at most [`MAX_HEADER_BYTES`] and [`MAX_HEADER_FIELDS`] of it, and nothing
//! panics.

use std::borrow::Cow;
use std::collections::HashSet;

use mail_parser::{Address, Header, HeaderName, MessageParser};
use serde::Deserialize;

use crate::{parse_recipient, AuthResults, AuthVerdict, Envelope};

/// Most bytes of a message's header block looked at.
pub const MAX_HEADER_BYTES: usize = 256 * 1024;
/// Most header fields looked at.
pub const MAX_HEADER_FIELDS: usize = 2_000;
/// Most recipients [`ses_envelope`] derives from the header fields.
pub const MAX_HEADER_RECIPIENTS: usize = 100;
/// Largest SQS message body [`s3_notification`] parses (SQS's own limit is 256 KiB).
pub const MAX_NOTIFICATION_BYTES: usize = 1024 * 1024;
/// Most records of one S3 event notification.
pub const MAX_NOTIFICATION_RECORDS: usize = 100;
/// Longest object key, decoded (S3's own limit).
pub const MAX_OBJECT_KEY_BYTES: usize = 1024;
/// Longest SES message id taken from an object key.
pub const MAX_SES_MESSAGE_ID_BYTES: usize = 200;
/// The `authserv-id` of the `Authentication-Results` SES adds.
pub const SES_AUTHSERV_ID: &str = "amazonses.com";

/// Why an SQS message body is not an S3 event notification the email consumer can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SesError {
    /// The body is over [`MAX_NOTIFICATION_BYTES`].
    #[error("S3 notification of {size} bytes exceeds the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    /// The body is not JSON, or not of the shape of an S3 event notification (serde_json's
    /// message, cut to 200 characters).
    #[error("malformed S3 notification: {0}")]
    Malformed(String),
    /// Neither `Records` nor an `s3:TestEvent`.
    #[error("not an S3 event notification")]
    NotS3,
    /// `Records` is empty.
    #[error("S3 notification without records")]
    NoRecords,
    /// More records than [`MAX_NOTIFICATION_RECORDS`].
    #[error("S3 notification with {count} records exceeds the limit of {limit}")]
    TooManyRecords { count: usize, limit: usize },
    /// A record of another event than `ObjectCreated:*` (shown cut to 64 characters).
    #[error("unexpected S3 event {0:?}: only ObjectCreated:* is handled")]
    UnexpectedEvent(String),
    /// An empty bucket name.
    #[error("S3 notification record without a bucket name")]
    NoBucket,
    /// The object key is empty, over [`MAX_OBJECT_KEY_BYTES`], badly URL-encoded or not UTF-8.
    #[error("bad object key in S3 notification: {0}")]
    BadKey(&'static str),
}

/// What an S3 event notification announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum S3Notification {
    /// The `s3:TestEvent` S3 sends when the notification configuration is put: nothing to do
    /// (the consumer deletes it; it must not go to the dead-letter queue).
    Test,
    /// Objects created, in the order of the records.
    Objects(Vec<S3Object>),
}

/// One object an S3 event notification announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Object {
    /// The bucket's name.
    pub bucket: String,
    /// The object's key, decoded (S3 sends it URL-encoded, `+` for a space).
    pub key: String,
    /// The object's size in bytes, when the record gives it.
    pub size: Option<u64>,
}

/// SPF, DKIM and DMARC as SES evaluated them, from the `Authentication-Results: amazonses.com`
/// field in SES's own header block (docs/API.md §10, `auth`).
///
/// - Only the first such field of the trusted zone counts (see the module docs); a forged one
///   further down is ignored. Without one, all three are [`AuthVerdict::None`].
/// - SPF is the field's `spf` result; when it has none, the first `Received-SPF` field of the
///   trusted zone. DKIM is `pass` when any `dkim` result passes, else the first one. DMARC is
///   the first `dmarc` result.
/// - Results map to RFC 8601 names: `hardfail` is `fail`, `policy` (a signature the verifier
///   would not accept) is `fail`, anything unknown is `none`.
pub fn ses_auth(raw: &[u8]) -> AuthResults {
    let Some(headers) = Headers::parse(raw) else {
        return AuthResults::default();
    };
    let mut results: Option<Vec<(String, AuthVerdict)>> = None;
    let mut received_spf: Option<AuthVerdict> = None;
    for header in headers.trusted_zone() {
        match header.name {
            HeaderName::AuthenticationResults if results.is_none() => {
                results = ses_results(&headers.text(header));
            }
            HeaderName::ReceivedSpf if received_spf.is_none() => {
                let text = strip_comments(&headers.text(header));
                received_spf = Some(verdict(text.split_whitespace().next().unwrap_or_default()));
            }
            _ => {}
        }
    }
    let Some(results) = results else {
        return AuthResults::default();
    };
    let first = |method: &str| results.iter().find(|(m, _)| m == method).map(|&(_, v)| v);
    let dkim = if results
        .iter()
        .any(|(m, v)| m == "dkim" && *v == AuthVerdict::Pass)
    {
        Some(AuthVerdict::Pass)
    } else {
        first("dkim")
    };
    AuthResults {
        spf: first("spf").or(received_spf).unwrap_or_default(),
        dkim: dkim.unwrap_or_default(),
        dmarc: first("dmarc").unwrap_or_default(),
    }
}

/// The envelope of a message SES stored, as far as its header fields tell it.
///
/// - `mail_from`: the addr-spec of the first `Return-Path` field of the trusted zone (SES
///   writes it); empty for `<>` or when there is none.
/// - `rcpt_to`: the address of the `for` clause of the message's top `Received` field when that
///   field is SES's own (`by inbound-smtp….amazonaws.com`) and the address is of `domain`
///   ([`parse_recipient`]: case-insensitive, `+tag` allowed), as written. SES leaves the clause
///   out when the message has several recipients; then every address of `domain` in `To`,
///   `Cc`, `Delivered-To` and `X-Original-To`, in the order of the fields, de-duplicated
///   case-insensitively, at most [`MAX_HEADER_RECIPIENTS`]. (A recipient named in none of them,
///   a `Bcc`, is not found.)
pub fn ses_envelope(raw: &[u8], domain: &str) -> Envelope {
    let Some(headers) = Headers::parse(raw) else {
        return Envelope::default();
    };
    let mail_from = headers
        .trusted_zone()
        .find(|h| h.name == HeaderName::ReturnPath)
        .and_then(|h| h.value.as_address())
        .and_then(Address::first)
        .and_then(|a| a.address())
        .map(|a| a.trim().to_owned())
        .unwrap_or_default();

    let top_rcpt = headers
        .fields
        .iter()
        .find(|h| h.name == HeaderName::Received)
        .map(|h| received(&headers.text(h)))
        .filter(|r| r.by_ses)
        .and_then(|r| r.for_addr)
        .filter(|a| parse_recipient(a, domain).is_some());
    if let Some(rcpt) = top_rcpt {
        return Envelope {
            mail_from,
            rcpt_to: vec![rcpt],
        };
    }

    let x_original_to = HeaderName::Other("X-Original-To".into());
    let mut seen = HashSet::new();
    let mut rcpt_to = Vec::new();
    let fields = headers.fields.iter().filter(|h| {
        matches!(
            h.name,
            HeaderName::To | HeaderName::Cc | HeaderName::DeliveredTo
        ) || h.name == x_original_to
    });
    'fields: for header in fields {
        let Some(address) = header.value.as_address() else {
            continue;
        };
        for addr in address.iter().filter_map(|a| a.address()).map(str::trim) {
            if parse_recipient(addr, domain).is_none() || !seen.insert(addr.to_lowercase()) {
                continue;
            }
            rcpt_to.push(addr.to_owned());
            if rcpt_to.len() >= MAX_HEADER_RECIPIENTS {
                break 'fields;
            }
        }
    }
    Envelope { mail_from, rcpt_to }
}

/// Parses the body of an SQS message sent by an S3 event notification: S3's test event, or the
/// objects created (docs/API.md §10, the SES door). Only `ObjectCreated:*` records are
/// accepted; any other record, a body over [`MAX_NOTIFICATION_BYTES`], more than
/// [`MAX_NOTIFICATION_RECORDS`] records, or anything not of this shape is an error (the
/// consumer leaves the message to the dead-letter queue).
pub fn s3_notification(body: &str) -> Result<S3Notification, SesError> {
    if body.len() > MAX_NOTIFICATION_BYTES {
        return Err(SesError::TooLarge {
            size: body.len(),
            limit: MAX_NOTIFICATION_BYTES,
        });
    }
    // serde_json's message may quote the offending value: cut it, it is logged.
    let parsed: NotificationBody = serde_json::from_str(body)
        .map_err(|e| SesError::Malformed(e.to_string().chars().take(200).collect()))?;
    let Some(records) = parsed.records else {
        return match parsed.event.as_deref() {
            Some("s3:TestEvent") => Ok(S3Notification::Test),
            _ => Err(SesError::NotS3),
        };
    };
    if records.is_empty() {
        return Err(SesError::NoRecords);
    }
    if records.len() > MAX_NOTIFICATION_RECORDS {
        return Err(SesError::TooManyRecords {
            count: records.len(),
            limit: MAX_NOTIFICATION_RECORDS,
        });
    }
    records
        .into_iter()
        .map(|record| {
            if !record.event_name.starts_with("ObjectCreated:") {
                return Err(SesError::UnexpectedEvent(
                    record.event_name.chars().take(64).collect(),
                ));
            }
            if record.s3.bucket.name.is_empty() {
                return Err(SesError::NoBucket);
            }
            Ok(S3Object {
                bucket: record.s3.bucket.name,
                key: decode_key(&record.s3.object.key)?,
                size: record.s3.object.size,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(S3Notification::Objects)
}

/// The SES message id of the object key `{prefix}{id}` (e.g. `inbound/` and SES's id): the
/// rest of the key when it is 1 to [`MAX_SES_MESSAGE_ID_BYTES`] bytes of `[A-Za-z0-9._-]`, and
/// not `.` or `..`; else `None`.
pub fn ses_message_id<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let id = key.strip_prefix(prefix)?;
    let valid = !id.is_empty()
        && id.len() <= MAX_SES_MESSAGE_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && id != "."
        && id != ".."
        && id != SES_SETUP_NOTIFICATION;
    valid.then_some(id)
}

/// The object SES writes under the prefix when a receipt rule with an S3 action is created (to
/// prove it may write): not a received message.
pub const SES_SETUP_NOTIFICATION: &str = "AMAZON_SES_SETUP_NOTIFICATION";

// ---------------------------------------------------------------------------------------------
// S3 event notifications

#[derive(Deserialize)]
struct NotificationBody {
    #[serde(rename = "Records")]
    records: Option<Vec<Record>>,
    #[serde(rename = "Event")]
    event: Option<String>,
}

#[derive(Deserialize)]
struct Record {
    #[serde(rename = "eventName")]
    event_name: String,
    s3: RecordS3,
}

#[derive(Deserialize)]
struct RecordS3 {
    bucket: RecordBucket,
    object: RecordObject,
}

#[derive(Deserialize)]
struct RecordBucket {
    name: String,
}

#[derive(Deserialize)]
struct RecordObject {
    key: String,
    size: Option<u64>,
}

/// Decodes an object key as S3 notifications encode it: form-style URL encoding (`+` is a
/// space, `%XX` a byte), the bytes UTF-8.
fn decode_key(encoded: &str) -> Result<String, SesError> {
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut input = encoded.bytes();
    while let Some(b) = input.next() {
        match b {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hi = input.next().and_then(hex_digit);
                let lo = input.next().and_then(hex_digit);
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(SesError::BadKey("bad %-escape"));
                };
                bytes.push(hi << 4 | lo);
            }
            _ => bytes.push(b),
        }
        if bytes.len() > MAX_OBJECT_KEY_BYTES {
            return Err(SesError::BadKey("longer than 1024 bytes"));
        }
    }
    if bytes.is_empty() {
        return Err(SesError::BadKey("empty"));
    }
    String::from_utf8(bytes).map_err(|_| SesError::BadKey("not UTF-8"))
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

// ---------------------------------------------------------------------------------------------
// Header fields

/// A message's bounded header block ([`header_block`]) and its fields, in order.
struct Headers<'a> {
    /// The block, ending with a line break (one is added when the message ends without: the
    /// parser drops a last field that has none).
    block: Cow<'a, [u8]>,
    /// Address fields (`Return-Path`, `To`, `Cc`, `Delivered-To`, `X-Original-To`) are parsed
    /// and decoded; every other field's value is left to [`Headers::text`].
    fields: Vec<Header<'static>>,
}

impl<'a> Headers<'a> {
    /// `None` when `raw` has no header field.
    fn parse(raw: &'a [u8]) -> Option<Self> {
        let block = header_block(raw);
        if block.is_empty() {
            return None;
        }
        let block = if block.ends_with(b"\n") {
            Cow::Borrowed(block)
        } else {
            Cow::Owned([block, b"\n"].concat())
        };
        // mail-parser promises not to panic; like `parse_bounded`, do not bet the function on it.
        let fields = std::panic::catch_unwind(|| {
            let message = MessageParser::new()
                .header_address(HeaderName::ReturnPath)
                .header_address(HeaderName::To)
                .header_address(HeaderName::Cc)
                .header_address(HeaderName::DeliveredTo)
                .header_address(HeaderName::Other("X-Original-To".into()))
                .default_header_ignore()
                .parse_headers(block.as_ref())?;
            let part = message.parts.into_iter().next()?;
            Some(part.headers.into_iter().map(Header::into_owned).collect())
        })
        .ok()??;
        Some(Self { block, fields })
    }

    /// The fields SES's verdicts are read from: those before the first `Received` field that
    /// is not SES's own.
    fn trusted_zone(&self) -> impl Iterator<Item = &Header<'static>> + '_ {
        self.fields
            .iter()
            .take_while(|h| h.name != HeaderName::Received || received(&self.text(h)).by_ses)
    }

    /// A field's value as text: the raw bytes (lossily UTF-8), unfolded.
    fn text(&self, header: &Header<'_>) -> String {
        let start = usize::try_from(header.offset_start).unwrap_or(usize::MAX);
        let end = usize::try_from(header.offset_end).unwrap_or(usize::MAX);
        let bytes = self.block.get(start..end).unwrap_or_default();
        String::from_utf8_lossy(bytes).replace(['\r', '\n'], " ")
    }
}

/// The bounded header block of `raw`: the lines before the first empty line, cut before the
/// line that would start field number [`MAX_HEADER_FIELDS`] + 1, and to the whole lines within
/// the first [`MAX_HEADER_BYTES`]. Linear, no allocation.
fn header_block(raw: &[u8]) -> &[u8] {
    let bounded = raw.get(..MAX_HEADER_BYTES).unwrap_or(raw);
    let mut end = 0;
    let mut fields = 0usize;
    while let Some(rest) = bounded.get(end..).filter(|r| !r.is_empty()) {
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(nl) => (rest.get(..nl).unwrap_or_default(), end + nl + 1),
            // The last line: whole only when the message ends there.
            None if bounded.len() == raw.len() => (rest, bounded.len()),
            None => break,
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match line.first() {
            None => break,
            Some(b) if !b.is_ascii_whitespace() => {
                fields += 1;
                if fields > MAX_HEADER_FIELDS {
                    break;
                }
            }
            Some(_) => {}
        }
        end = next;
    }
    bounded.get(..end).unwrap_or_default()
}

/// What a `Received` field says about the hop.
#[derive(Debug, Default, PartialEq, Eq)]
struct Hop {
    /// The `by` host is SES's inbound SMTP endpoint (`inbound-smtp….amazonaws.com`).
    by_ses: bool,
    /// The address of the `for` clause, without `<>`.
    for_addr: Option<String>,
}

/// Reads the `by` and `for` clauses of a `Received` value (RFC 5321 §4.4: tokens, then `;`
/// and the date; comments dropped).
fn received(value: &str) -> Hop {
    let text = strip_comments(value);
    let tokens = text.rsplit_once(';').map_or(text.as_str(), |(t, _)| t);
    let mut hop = Hop::default();
    let mut words = tokens.split_whitespace();
    while let Some(word) = words.next() {
        if word.eq_ignore_ascii_case("by") {
            if let Some(host) = words.next() {
                let host = host.trim_end_matches('.').to_ascii_lowercase();
                hop.by_ses = host.starts_with("inbound-smtp") && host.ends_with(".amazonaws.com");
            }
        } else if word.eq_ignore_ascii_case("for") && hop.for_addr.is_none() {
            hop.for_addr = words
                .next()
                .map(|a| a.trim_start_matches('<').trim_end_matches('>'))
                .filter(|a| !a.is_empty())
                .map(str::to_owned);
        }
    }
    hop
}

/// The `method` → result pairs of an `Authentication-Results` value (RFC 8601 §2.2), methods
/// lower-cased; `None` when its `authserv-id` is not [`SES_AUTHSERV_ID`].
fn ses_results(value: &str) -> Option<Vec<(String, AuthVerdict)>> {
    let text = strip_comments(value);
    let mut parts = split_unquoted(&text, ';').into_iter();
    let authserv_id = parts.next()?.split_whitespace().next()?.trim_matches('"');
    if !authserv_id.eq_ignore_ascii_case(SES_AUTHSERV_ID) {
        return None;
    }
    Some(
        parts
            .filter_map(|resinfo| {
                let (method, result) = resinfo.split_once('=')?;
                let method = method.split('/').next()?.trim().to_ascii_lowercase();
                let result = result.split_whitespace().next()?.trim_matches('"');
                (!method.is_empty()).then(|| (method, verdict(result)))
            })
            .collect(),
    )
}

/// An RFC 8601 / RFC 7208 result name as a verdict.
fn verdict(result: &str) -> AuthVerdict {
    match result.to_ascii_lowercase().as_str() {
        "pass" => AuthVerdict::Pass,
        "fail" | "hardfail" | "policy" => AuthVerdict::Fail,
        "softfail" => AuthVerdict::Softfail,
        "neutral" => AuthVerdict::Neutral,
        "temperror" => AuthVerdict::Temperror,
        "permerror" => AuthVerdict::Permerror,
        _ => AuthVerdict::None,
    }
}

/// `value` with its RFC 5322 comments (nested, with quoted pairs) replaced by a space; quoted
/// strings are kept as they are.
fn strip_comments(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut depth = 0usize;
    let mut quoted = false;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted || depth > 0 => {
                let next = chars.next();
                if depth == 0 {
                    out.push(c);
                    out.extend(next);
                }
            }
            '"' if depth == 0 => {
                quoted = !quoted;
                out.push(c);
            }
            '(' if !quoted => depth += 1,
            ')' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push(' ');
                }
            }
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    out
}

/// `text` split on `sep` outside quoted strings.
fn split_unquoted(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(text.get(start..i).unwrap_or_default());
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(text.get(start..).unwrap_or_default());
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DOMAIN: &str = "inbox.example";

    /// SES's block, as SES prepends it to a message it stores (modelled on the samples of the
    /// SES developer guide): one recipient, so the `for` clause is there.
    const SES_TOP: &str = "Return-Path: <bounces+srs=ab12=cd@mail.example.com>
Received: from mail-wr1-f41.google.com (mail-wr1-f41.google.com [209.85.221.41])
 by inbound-smtp.eu-west-1.amazonaws.com with SMTP id 8hj0vq1cu4oj3bh1a2eqm4jgol0rphe56bsjs0o1
 for ada+orders@inbox.example;
 Fri, 11 Sep 2015 20:32:33 +0000 (UTC)
X-SES-Spam-Verdict: PASS
X-SES-Virus-Verdict: PASS
Received-SPF: pass (spfCheck: domain of mail.example.com designates 209.85.221.41 as permitted sender) client-ip=209.85.221.41; envelope-from=bounces+srs=ab12=cd@mail.example.com; helo=mail-wr1-f41.google.com;
Authentication-Results: amazonses.com;
 spf=pass (spfCheck: domain of mail.example.com designates 209.85.221.41 as permitted sender) smtp.mailfrom=bounces+srs=ab12=cd@mail.example.com;
 dkim=pass header.i=@example.com;
 dmarc=pass header.from=example.com;
X-SES-RECEIPT: AEFBQUFBQUFBQUFFQzRjcU1mRWdUNUZGMFhQSzNoN2tHdHRPSndCTVRuUk1BNUFCSGQ=
X-SES-DKIM-SIGNATURE: a=rsa-sha256; q=dns/txt; b=Kw3/yK5zmTHpQ8ifnvuEdAQ2Vm0=; c=relaxed/simple; s=ihchhvubuqgjsxyuhssfvqohv7z3u4hn; d=amazonses.com; t=1442003553; v=1; bh=frcCV1k9oG9oKj3dpUqdJg1PxRT2RSN/XKdLCPjaYaY=; h=From:To:Cc:Bcc:Subject:Date:Message-ID:MIME-Version:Content-Type:X-SES-RECEIPT;
";

    /// The sender's own header fields and body, after SES's block. It forges SES's verdicts
    /// (all `pass`) and a `Return-Path`, below its own `Received`.
    const SENDER_PART: &str = "Received: by mail-wr1-f41.google.com with SMTP id q19so83216137wrb.1
        for <ada+orders@inbox.example>; Fri, 11 Sep 2015 13:32:32 -0700 (PDT)
Authentication-Results: amazonses.com; spf=pass smtp.mailfrom=ceo@example.com;
 dkim=pass header.i=@example.com; dmarc=pass header.from=example.com
Received-SPF: pass (forged) client-ip=192.0.2.1;
Return-Path: <forged@evil.example>
DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=example.com; s=sel; h=from:to:subject; bh=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=; b=dGVzdA==
MIME-Version: 1.0
From: Grace <grace@example.com>
Date: Fri, 11 Sep 2015 13:32:32 -0700
Message-ID: <CAEddgb2L3m=xyz@mail.example.com>
Subject: Your order
To: Ada <ada+orders@inbox.example>, \"Bob, B.\" <bob@other.example>
Cc: lin@inbox.example
Content-Type: text/plain; charset=UTF-8

To: body@inbox.example

Hello Ada.
";

    fn crlf(text: &str) -> Vec<u8> {
        text.replace('\n', "\r\n").into_bytes()
    }

    fn message(ses_top: &str, sender_part: &str) -> Vec<u8> {
        crlf(&format!("{ses_top}{sender_part}"))
    }

    fn auth(spf: AuthVerdict, dkim: AuthVerdict, dmarc: AuthVerdict) -> AuthResults {
        AuthResults { spf, dkim, dmarc }
    }

    /// SES's block with another `Authentication-Results` (and `Received-SPF`) value.
    fn ses_top_with(auth_results: &str, received_spf: &str) -> String {
        let mut top = String::new();
        for line in SES_TOP.lines() {
            if line.starts_with(' ') && top.ends_with("AUTH\n") {
                continue; // the genuine field's continuation lines
            }
            if line.starts_with("Authentication-Results:") {
                top.push_str("AUTH\n");
                continue;
            }
            if line.starts_with("Received-SPF:") {
                if !received_spf.is_empty() {
                    top.push_str(&format!("Received-SPF: {received_spf}\n"));
                }
                continue;
            }
            top.push_str(line);
            top.push('\n');
        }
        let replacement = if auth_results.is_empty() {
            String::new()
        } else {
            format!("Authentication-Results: {auth_results}\n")
        };
        top.replace("AUTH\n", &replacement)
    }

    use AuthVerdict::{Fail, Neutral, None as NoVerdict, Pass, Permerror, Softfail, Temperror};

    #[test]
    fn auth_is_read_from_ses_block() {
        let raw = message(SES_TOP, SENDER_PART);
        assert_eq!(ses_auth(&raw), auth(Pass, Pass, Pass));
        // The same with bare LF line endings.
        let lf = format!("{SES_TOP}{SENDER_PART}");
        assert_eq!(ses_auth(lf.as_bytes()), auth(Pass, Pass, Pass));
    }

    #[test]
    fn forged_lower_verdicts_are_ignored() {
        let top = ses_top_with(
            "amazonses.com; spf=softfail (spfCheck: transitioning) smtp.mailfrom=ceo@example.com; dkim=none; dmarc=fail header.from=example.com;",
            "softfail (spfCheck: transitioning) client-ip=192.0.2.9;",
        );
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            auth(Softfail, NoVerdict, Fail)
        );
        // Without SES's own field, the forged one below the sender's `Received` still does
        // not count: all `none`, the zone's `Received-SPF` notwithstanding.
        let top = ses_top_with("", "pass (spfCheck: ok) client-ip=192.0.2.9;");
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            AuthResults::default()
        );
        // A forged SES field right below SES's `Received` but after a foreign one is out too.
        let raw = crlf(
            "Received: from a by inbound-smtp.us-east-1.amazonaws.com with SMTP id x; Fri, 11 Sep 2015 20:32:33 +0000
Received: from evil by mx.evil.example; Fri, 11 Sep 2015 20:32:30 +0000
Authentication-Results: amazonses.com; spf=pass; dkim=pass; dmarc=pass
From: x@evil.example

hi
",
        );
        assert_eq!(ses_auth(&raw), AuthResults::default());
    }

    #[test]
    fn only_the_first_ses_field_counts() {
        let top = ses_top_with("amazonses.com; spf=fail; dkim=fail; dmarc=fail", "");
        let top = top.replace(
            "X-SES-RECEIPT:",
            "Authentication-Results: amazonses.com; spf=pass; dkim=pass; dmarc=pass\nX-SES-RECEIPT:",
        );
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            auth(Fail, Fail, Fail)
        );
    }

    #[test]
    fn other_authserv_ids_are_ignored() {
        let top = ses_top_with("mx.google.com; spf=pass; dkim=pass; dmarc=pass", "");
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            AuthResults::default()
        );
        let top = ses_top_with("amazonses.com.evil.example; spf=pass", "");
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            AuthResults::default()
        );
        // A foreign field first, then SES's: SES's counts.
        let top = ses_top_with("mx.evil.example; spf=pass; dkim=pass; dmarc=pass", "").replace(
            "X-SES-RECEIPT:",
            "Authentication-Results: amazonses.com; spf=neutral; dkim=temperror; dmarc=permerror\nX-SES-RECEIPT:",
        );
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            auth(Neutral, Temperror, Permerror)
        );
    }

    #[test]
    fn ses_newer_layout_with_spf_properties_as_segments() {
        // Recent SES messages put the SPF check's properties in `;`-separated segments.
        let top = ses_top_with(
            "amazonses.com;\n spf=pass (spfCheck: domain of _spf.google.com designates 209.85.208.44 as permitted sender) client-ip=209.85.208.44; envelope-from=x@gmail.com; helo=mail-ed1-f44.google.com;\n dkim=pass header.i=@gmail.com;\n dmarc=pass header.from=gmail.com;",
            "",
        );
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            auth(Pass, Pass, Pass)
        );
    }

    #[test]
    fn spf_falls_back_to_received_spf() {
        let top = ses_top_with(
            "amazonses.com; dkim=pass header.i=@example.com; dmarc=pass header.from=example.com;",
            "neutral (spfCheck: 192.0.2.1 is neither permitted nor denied) client-ip=192.0.2.1;",
        );
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            auth(Neutral, Pass, Pass)
        );
        // The field's own spf wins.
        let top = ses_top_with(
            "amazonses.com; spf=fail; dkim=none",
            "pass client-ip=192.0.2.1;",
        );
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            auth(Fail, NoVerdict, NoVerdict)
        );
        // No spf anywhere in the zone (the sender's `Received-SPF` is below it).
        let top = ses_top_with("amazonses.com; dkim=pass", "");
        assert_eq!(
            ses_auth(&message(&top, SENDER_PART)),
            auth(NoVerdict, Pass, NoVerdict)
        );
    }

    #[test]
    fn dkim_passes_when_any_signature_does() {
        let cases = [
            (
                "dkim=fail header.i=@a.example; dkim=pass header.i=@b.example",
                Pass,
            ),
            (
                "dkim=temperror header.i=@a.example; dkim=fail header.i=@b.example",
                Temperror,
            ),
            ("dkim=neutral; dkim=policy", Neutral),
            ("dkim=policy (key too short)", Fail),
        ];
        for (dkim, want) in cases {
            let top = ses_top_with(&format!("amazonses.com; spf=pass; {dkim}"), "");
            assert_eq!(ses_auth(&message(&top, SENDER_PART)).dkim, want, "{dkim}");
        }
    }

    #[test]
    fn results_map_to_rfc_8601_names() {
        let cases = [
            ("pass", Pass),
            ("PASS", Pass),
            ("fail", Fail),
            ("hardfail", Fail),
            ("policy", Fail),
            ("softfail", Softfail),
            ("neutral", Neutral),
            ("none", NoVerdict),
            ("temperror", Temperror),
            ("permerror", Permerror),
            ("error", NoVerdict),
            ("bogus", NoVerdict),
            ("", NoVerdict),
        ];
        for (result, want) in cases {
            let top = ses_top_with(&format!("amazonses.com; dmarc={result} header.from=x"), "");
            assert_eq!(
                ses_auth(&message(&top, SENDER_PART)).dmarc,
                want,
                "{result:?}"
            );
        }
    }

    #[test]
    fn rfc_8601_syntax() {
        let cases = [
            // A version after the authserv-id; methods with versions; odd case and spacing.
            (
                "amazonses.com 1; SPF/2 = Pass smtp.mailfrom=a@b; DKIM=fail; DMARC = none",
                auth(Pass, Fail, NoVerdict),
            ),
            // A quoted authserv-id; comments that look like results, with `;` inside.
            (
                "\"amazonses.com\"; spf=fail (not spf=pass; really) smtp.mailfrom=a@b; dkim=pass (x (nested) y)",
                auth(Fail, Pass, NoVerdict),
            ),
            // A quoted reason with `;` and `(` inside.
            (
                "amazonses.com; dkim=fail reason=\"bad; (sig\" header.d=x; dmarc=pass",
                auth(NoVerdict, Fail, Pass),
            ),
            // The no-result form.
            ("amazonses.com; none", AuthResults::default()),
            // A comment before the authserv-id.
            ("(SES) amazonses.com; spf=softfail", auth(Softfail, NoVerdict, NoVerdict)),
        ];
        for (value, want) in cases {
            let top = ses_top_with(value, "");
            assert_eq!(ses_auth(&message(&top, SENDER_PART)), want, "{value}");
        }
    }

    #[test]
    fn no_headers_no_verdicts() {
        for raw in [
            &b""[..],
            b"\r\n\r\nAuthentication-Results: amazonses.com; spf=pass",
            b"garbage",
        ] {
            assert_eq!(ses_auth(raw), AuthResults::default());
            assert_eq!(ses_envelope(raw, DOMAIN), Envelope::default());
        }
    }

    #[test]
    fn envelope_from_ses_block() {
        let raw = message(SES_TOP, SENDER_PART);
        assert_eq!(
            ses_envelope(&raw, DOMAIN),
            Envelope {
                mail_from: "bounces+srs=ab12=cd@mail.example.com".into(),
                rcpt_to: vec!["ada+orders@inbox.example".into()],
            }
        );
        // The domain matches case-insensitively; the address is kept as SES wrote it.
        let top = SES_TOP.replace("for ada+orders@inbox.example;", "for <Ada@INBOX.Example>;");
        assert_eq!(
            ses_envelope(&message(&top, SENDER_PART), "Inbox.EXAMPLE").rcpt_to,
            vec!["Ada@INBOX.Example".to_owned()]
        );
    }

    #[test]
    fn null_or_missing_return_path_is_empty() {
        let top = SES_TOP.replace("<bounces+srs=ab12=cd@mail.example.com>", "<>");
        assert_eq!(
            ses_envelope(&message(&top, SENDER_PART), DOMAIN).mail_from,
            ""
        );
        // Without SES's, the sender's own (below its `Received`) is not taken.
        let top = SES_TOP.replace("Return-Path: <bounces+srs=ab12=cd@mail.example.com>\n", "");
        let envelope = ses_envelope(&message(&top, SENDER_PART), DOMAIN);
        assert_eq!(envelope.mail_from, "");
        assert_eq!(
            envelope.rcpt_to,
            vec!["ada+orders@inbox.example".to_owned()]
        );
    }

    #[test]
    fn several_recipients_come_from_the_address_fields() {
        // SES leaves the `for` clause out when a message has several recipients.
        let top = SES_TOP.replace(" for ada+orders@inbox.example;\n", "");
        let sender = "Received: by mx.example.com with SMTP id q19
X-Original-To: Lin@Inbox.Example
Delivered-To: grace+x@INBOX.example
From: Grace <grace@example.com>
To: =?UTF-8?B?QWTDoQ==?= <ada@inbox.example>, \"Bob, B.\" <bob@other.example>,
 team: carol@inbox.example, dan@elsewhere.example;
Cc: ADA@Inbox.Example, grace+x@inbox.example, lin@inbox.example
Subject: hi

To: body@inbox.example
";
        let envelope = ses_envelope(&message(&top, sender), DOMAIN);
        assert_eq!(envelope.mail_from, "bounces+srs=ab12=cd@mail.example.com");
        assert_eq!(
            envelope.rcpt_to,
            vec![
                "Lin@Inbox.Example",
                "grace+x@INBOX.example",
                "ada@inbox.example",
                "carol@inbox.example",
            ]
        );
    }

    #[test]
    fn for_clause_of_another_domain_or_hop_is_not_taken() {
        // Another domain: the address fields decide.
        let top = SES_TOP.replace("for ada+orders@inbox.example;", "for ada@other.example;");
        assert_eq!(
            ses_envelope(&message(&top, SENDER_PART), DOMAIN).rcpt_to,
            vec!["ada+orders@inbox.example", "lin@inbox.example"]
        );
        // A top `Received` that is not SES's: its `for` clause is the sender's claim.
        let raw = crlf(
            "Received: from evil by mx.evil.example with SMTP id 1 for <boss@inbox.example>; Fri, 11 Sep 2015 20:32:30 +0000
To: ada@inbox.example

hi
",
        );
        assert_eq!(
            ses_envelope(&raw, DOMAIN).rcpt_to,
            vec!["ada@inbox.example"]
        );
        // A host that merely contains amazonaws.com.
        let top = SES_TOP.replace(
            "by inbound-smtp.eu-west-1.amazonaws.com",
            "by inbound-smtp.eu-west-1.amazonaws.com.evil.example",
        );
        assert_eq!(
            ses_envelope(&message(&top, SENDER_PART), DOMAIN).rcpt_to,
            vec!["ada+orders@inbox.example", "lin@inbox.example"]
        );
    }

    #[test]
    fn header_recipients_are_capped() {
        let top = SES_TOP.replace(" for ada+orders@inbox.example;\n", "");
        let to: Vec<String> = (0..150).map(|i| format!("a{i}@inbox.example")).collect();
        let sender = format!("To: {}\nSubject: many\n\nhi\n", to.join(",\n "));
        let rcpt_to = ses_envelope(&message(&top, &sender), DOMAIN).rcpt_to;
        assert_eq!(rcpt_to.len(), MAX_HEADER_RECIPIENTS);
        assert_eq!(rcpt_to, to.get(..MAX_HEADER_RECIPIENTS).unwrap_or_default());
    }

    #[test]
    fn only_the_bounded_header_block_is_read() {
        // SES's verdicts after 2,000 fields (all within the zone) are not read; at the 2,000th
        // they are.
        let received = "Received: from a by inbound-smtp.us-east-1.amazonaws.com with SMTP id x for ada@inbox.example; Fri, 11 Sep 2015 20:32:33 +0000\n";
        let auth_results =
            "Authentication-Results: amazonses.com; spf=pass; dkim=pass; dmarc=pass\n";
        for (pad, want) in [
            (MAX_HEADER_FIELDS - 2, auth(Pass, Pass, Pass)),
            (MAX_HEADER_FIELDS - 1, AuthResults::default()),
        ] {
            let raw = format!(
                "{received}{}{auth_results}\nbody\n",
                "X-Pad: 1\n".repeat(pad)
            );
            assert_eq!(ses_auth(raw.as_bytes()), want, "{pad}");
        }
        // Past 256 KiB of header block, nothing more is read.
        let long = format!("X-Long: {}\n", "a".repeat(MAX_HEADER_BYTES));
        let raw = format!("{received}{long}To: bob@inbox.example\n\nhi\n");
        let envelope = ses_envelope(raw.as_bytes(), DOMAIN);
        assert_eq!(envelope.rcpt_to, vec!["ada@inbox.example"]);
        let raw = format!("{long}To: bob@inbox.example\n\nhi\n");
        assert!(ses_envelope(raw.as_bytes(), DOMAIN).rcpt_to.is_empty());
        // A message that is only header fields, without a final line break.
        let raw =
            "Received: from a by inbound-smtp.us-east-1.amazonaws.com; x\nTo: bob@inbox.example";
        assert_eq!(
            ses_envelope(raw.as_bytes(), DOMAIN).rcpt_to,
            vec!["bob@inbox.example"]
        );
    }

    #[test]
    fn header_block_bounds() {
        assert_eq!(
            header_block(b"A: 1\r\nB: 2\r\n\r\nC: 3\r\n"),
            b"A: 1\r\nB: 2\r\n"
        );
        assert_eq!(header_block(b"A: 1\n folded\nB: 2"), b"A: 1\n folded\nB: 2");
        assert_eq!(header_block(b"\nA: 1\n"), b"");
        let many = "F: x\n".repeat(MAX_HEADER_FIELDS + 5);
        assert_eq!(header_block(many.as_bytes()).len(), 5 * MAX_HEADER_FIELDS);
        let big = format!("A: 1\nB: {}\n", "b".repeat(MAX_HEADER_BYTES));
        assert_eq!(header_block(big.as_bytes()), b"A: 1\n");
    }

    #[test]
    fn received_clauses() {
        let hop = received(
            "from mail-wr1-f41.google.com (mail-wr1-f41.google.com [209.85.221.41])  by inbound-smtp.eu-west-1.amazonaws.com with SMTP id 8hj0v  for ada+orders@inbox.example;  Fri, 11 Sep 2015 20:32:33 +0000 (UTC)",
        );
        assert_eq!(
            hop,
            Hop {
                by_ses: true,
                for_addr: Some("ada+orders@inbox.example".into())
            }
        );
        // A `by`/`for` inside a comment is no clause.
        let hop =
            received("from x (by inbound-smtp.us-east-1.amazonaws.com for a@b) by mx.example; d");
        assert_eq!(hop, Hop::default());
        let hop = received("from x BY Inbound-SMTP.us-east-1.AmazonAWS.com. FOR <a@b>; d");
        assert!(hop.by_ses);
        assert_eq!(hop.for_addr.as_deref(), Some("a@b"));
    }

    const TEST_EVENT: &str = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-01-05T10:00:00.000Z","Bucket":"agentaddress-email","RequestId":"5582815E1AEA5ADF","HostId":"8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"}"#;

    fn record(event_name: &str, key: &str, size: &str) -> String {
        format!(
            r#"{{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"eu-west-1","eventTime":"2026-01-05T10:00:01.123Z","eventName":"{event_name}","userIdentity":{{"principalId":"AWS:AROAEXAMPLE"}},"requestParameters":{{"sourceIPAddress":"10.0.0.1"}},"responseElements":{{"x-amz-request-id":"C3D13FE58DE4C810","x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"}},"s3":{{"s3SchemaVersion":"1.0","configurationId":"inbound","bucket":{{"name":"agentaddress-email","ownerIdentity":{{"principalId":"A3NL1KOZZKExample"}},"arn":"arn:aws:s3:::agentaddress-email"}},"object":{{"key":"{key}"{size},"eTag":"d41d8cd98f00b204e9800998ecf8427e","sequencer":"0055AED6DCD90281E5"}}}}}}"#
        )
    }

    fn records(records: &[String]) -> String {
        format!(r#"{{"Records":[{}]}}"#, records.join(","))
    }

    fn object(key: &str, size: Option<u64>) -> S3Object {
        S3Object {
            bucket: "agentaddress-email".into(),
            key: key.into(),
            size,
        }
    }

    #[test]
    fn test_event_is_recognised() {
        assert_eq!(s3_notification(TEST_EVENT), Ok(S3Notification::Test));
        assert_eq!(
            s3_notification(r#"{"Event":"s3:ObjectCreated:Put"}"#),
            Err(SesError::NotS3)
        );
        assert_eq!(s3_notification(r#"{"foo":1}"#), Err(SesError::NotS3));
    }

    #[test]
    fn created_objects_are_listed_with_decoded_keys() {
        let body = records(&[
            record("ObjectCreated:Put", "inbound/abc%2Bdef", r#","size":123"#),
            record(
                "ObjectCreated:CompleteMultipartUpload",
                "inbound/a+b%20c",
                "",
            ),
            record("ObjectCreated:Copy", "inbound/caf%C3%A9", r#","size":0"#),
        ]);
        assert_eq!(
            s3_notification(&body),
            Ok(S3Notification::Objects(vec![
                object("inbound/abc+def", Some(123)),
                object("inbound/a b c", None),
                object("inbound/café", Some(0)),
            ]))
        );
    }

    #[test]
    fn other_events_are_errors() {
        let body = records(&[record("ObjectRemoved:Delete", "inbound/x", "")]);
        assert_eq!(
            s3_notification(&body),
            Err(SesError::UnexpectedEvent("ObjectRemoved:Delete".into()))
        );
        let body = records(&[
            record("ObjectCreated:Put", "inbound/x", ""),
            record("s3:ReducedRedundancyLostObject", "inbound/y", ""),
        ]);
        assert!(matches!(
            s3_notification(&body),
            Err(SesError::UnexpectedEvent(_))
        ));
        let long = "x".repeat(500);
        let body = records(&[record(&long, "inbound/x", "")]);
        let Err(SesError::UnexpectedEvent(shown)) = s3_notification(&body) else {
            panic!("expected UnexpectedEvent");
        };
        assert_eq!(shown.len(), 64);
    }

    #[test]
    fn notification_bounds() {
        assert_eq!(
            s3_notification(r#"{"Records":[]}"#),
            Err(SesError::NoRecords)
        );
        let many: Vec<String> = (0..=MAX_NOTIFICATION_RECORDS)
            .map(|i| record("ObjectCreated:Put", &format!("inbound/m{i}"), ""))
            .collect();
        assert_eq!(
            s3_notification(&records(&many)),
            Err(SesError::TooManyRecords {
                count: MAX_NOTIFICATION_RECORDS + 1,
                limit: MAX_NOTIFICATION_RECORDS
            })
        );
        let at_limit = many.get(..MAX_NOTIFICATION_RECORDS).unwrap_or_default();
        let Ok(S3Notification::Objects(objects)) = s3_notification(&records(at_limit)) else {
            panic!("100 records are fine");
        };
        assert_eq!(objects.len(), MAX_NOTIFICATION_RECORDS);
        let huge = format!(
            r#"{{"Records":[],"pad":"{}"}}"#,
            "x".repeat(MAX_NOTIFICATION_BYTES)
        );
        assert_eq!(
            s3_notification(&huge),
            Err(SesError::TooLarge {
                size: huge.len(),
                limit: MAX_NOTIFICATION_BYTES
            })
        );
    }

    #[test]
    fn malformed_notifications_are_errors() {
        let malformed = [
            "",
            "not json",
            "[]",
            r#"{"Records":{}}"#,
            r#"{"Records":[{"eventName":"ObjectCreated:Put"}]}"#,
            r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":-1}}}]}"#,
            r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":"12"}}}]}"#,
            r#"{"Records":[{"eventName":"ObjectCreated:Put","eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}"#,
        ];
        for body in malformed {
            assert!(
                matches!(s3_notification(body), Err(SesError::Malformed(_))),
                "{body}"
            );
        }
        // Deep nesting: past serde_json's recursion limit where a value is parsed, skipped
        // (iteratively, no stack) where it is ignored.
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            s3_notification(&format!(r#"{{"Records":{deep}}}"#)),
            Err(SesError::Malformed(_))
        ));
        let deep_map = format!("{}1{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000));
        assert!(matches!(
            s3_notification(&format!(r#"{{"Records":[{{"eventName":{deep_map}}}]}}"#)),
            Err(SesError::Malformed(_))
        ));
        assert_eq!(
            s3_notification(&format!(r#"{{"Records":[],"x":{deep}}}"#)),
            Err(SesError::NoRecords)
        );
        let long_value = format!(
            r#"{{"Records":[{{"eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"b"}},"object":{{"key":"k","size":"{}"}}}}}}]}}"#,
            "9".repeat(10_000)
        );
        let Err(SesError::Malformed(why)) = s3_notification(&long_value) else {
            panic!("expected Malformed");
        };
        assert!(why.chars().count() <= 200, "{why}");
        let bucket = r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":""},"object":{"key":"k"}}}]}"#;
        assert_eq!(s3_notification(bucket), Err(SesError::NoBucket));
    }

    #[test]
    fn bad_keys_are_errors() {
        let long = "k".repeat(MAX_OBJECT_KEY_BYTES + 1);
        for key in [
            "",
            "inbound/%zz",
            "inbound/%4",
            "inbound/%",
            "inbound/%FF",
            &long,
        ] {
            let body = records(&[record("ObjectCreated:Put", key, "")]);
            assert!(
                matches!(s3_notification(&body), Err(SesError::BadKey(_))),
                "{key:?}"
            );
        }
        let max = "k".repeat(MAX_OBJECT_KEY_BYTES);
        assert_eq!(decode_key(&max).as_deref(), Ok(max.as_str()));
    }

    #[test]
    fn message_ids_from_keys() {
        let id = "8hj0vq1cu4oj3bh1a2eqm4jgol0rphe56bsjs0o1";
        let key = format!("inbound/{id}");
        assert_eq!(ses_message_id(&key, "inbound/"), Some(id));
        assert_eq!(
            ses_message_id("inbound/A.b_c-9", "inbound/"),
            Some("A.b_c-9")
        );
        assert_eq!(
            ses_message_id("inbound/AMAZON_SES_SETUP_NOTIFICATION", "inbound/"),
            None,
            "SES's setup notification is not a message"
        );
        let max = format!("inbound/{}", "a".repeat(MAX_SES_MESSAGE_ID_BYTES));
        assert!(ses_message_id(&max, "inbound/").is_some());
        let over = format!("inbound/{}", "a".repeat(MAX_SES_MESSAGE_ID_BYTES + 1));
        for key in [
            "inbound/",
            "inbound",
            "mail/abc",
            "xinbound/abc",
            "inbound/a/b",
            "inbound/a b",
            "inbound/a+b",
            "inbound/é",
            "inbound/.",
            "inbound/..",
            "inbound/AMAZON_SES_SETUP_NOTIFICATION\0",
            &over,
        ] {
            assert_eq!(ses_message_id(key, "inbound/"), None, "{key:?}");
        }
    }

    /// Header-ish lines, to give the parsers something close to what they expect.
    fn header_line() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("Received: from a by inbound-smtp.us-east-1.amazonaws.com with SMTP id x for ada@inbox.example; d\n".to_owned()),
            Just("Received: from a by mx.example; d\n".to_owned()),
            Just("Authentication-Results: amazonses.com; spf=pass; dkim=fail; dmarc=pass\n".to_owned()),
            Just("Return-Path: <>\n".to_owned()),
            Just("To: a@inbox.example, \"x\" <b@inbox.example>\n".to_owned()),
            Just("\n".to_owned()),
            Just(" folded (comment \\( ;\n".to_owned()),
            "[A-Za-z-]{1,20}: [ -~]{0,60}\n",
            "[ -~\t\r(\"\\\\;=<>@]{0,80}\n",
        ]
    }

    proptest! {
        #[test]
        fn parsers_never_panic_on_bytes(raw in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = ses_auth(&raw);
            let envelope = ses_envelope(&raw, DOMAIN);
            prop_assert!(envelope.rcpt_to.len() <= MAX_HEADER_RECIPIENTS);
            let _ = s3_notification(&String::from_utf8_lossy(&raw));
            let _ = ses_message_id(&String::from_utf8_lossy(&raw), "inbound/");
        }

        #[test]
        fn envelope_recipients_are_of_the_domain(
            lines in proptest::collection::vec(header_line(), 0..40),
        ) {
            let raw = lines.concat();
            let _ = ses_auth(raw.as_bytes());
            let envelope = ses_envelope(raw.as_bytes(), DOMAIN);
            prop_assert!(envelope.rcpt_to.len() <= MAX_HEADER_RECIPIENTS);
            let mut seen = HashSet::new();
            for rcpt in &envelope.rcpt_to {
                prop_assert!(parse_recipient(rcpt, DOMAIN).is_some(), "{}", rcpt);
                prop_assert!(seen.insert(rcpt.to_lowercase()), "duplicate {}", rcpt);
            }
        }

        #[test]
        fn keys_round_trip_through_s3_encoding(key in "\\PC{1,200}") {
            prop_assume!(key.len() <= MAX_OBJECT_KEY_BYTES);
            let encoded: String = form_urlencoded::byte_serialize(key.as_bytes()).collect();
            let body = records(&[record("ObjectCreated:Put", &encoded, "")]);
            let want = S3Notification::Objects(vec![object(&key, None)]);
            prop_assert_eq!(s3_notification(&body), Ok(want));
        }
    }
}
