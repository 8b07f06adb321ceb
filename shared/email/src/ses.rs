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
mod tests;
