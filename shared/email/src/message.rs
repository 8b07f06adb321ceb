//! `parse_message`: a raw message to the `email.received` event's `source` and `data`.

use std::borrow::Cow;

use mail_parser::{Address, HeaderValue, Message, MessageParser, PartType};
use serde::Serialize;
use serde_json::{json, Value};

use crate::author::{author_of, Author};
use crate::limits::{prescan, EmailLimits};
use crate::{attachment, id, reply, truncate, Refusal};

/// The event type of an inbound email.
pub const EVENT_TYPE: &str = "email.received";
/// The event's `ingress_surface`.
pub const INGRESS_SURFACE: &str = "email";
/// Every key of `data`, in order.
pub const DATA_KEYS: [&str; 21] = [
    "email_id",
    "message_id",
    "in_reply_to",
    "references",
    "from",
    "reply_to",
    "to",
    "cc",
    "tag",
    "subject",
    "auto_reply",
    "date",
    "text",
    "reply_text",
    "html",
    "truncated",
    "attachments",
    "envelope",
    "size",
    "provider",
    "auth",
];

/// The SMTP envelope (or the provider's equivalent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Envelope {
    /// `MAIL FROM`, as given (empty for the null sender `<>`).
    pub mail_from: String,
    /// `RCPT TO`, as given.
    pub rcpt_to: Vec<String>,
}

/// How the message reached the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Smtp,
    Ses,
    Webhook,
}

/// One authentication verdict (RFC 8601 result names); `None` when not evaluated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthVerdict {
    Pass,
    Fail,
    Softfail,
    Neutral,
    #[default]
    None,
    Temperror,
    Permerror,
}

/// SPF, DKIM and DMARC verdicts, evaluated by the caller (this crate does not evaluate them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AuthResults {
    pub spf: AuthVerdict,
    pub dkim: AuthVerdict,
    pub dmarc: AuthVerdict,
}

/// A parsed message: what the event needs besides its type and ingress surface.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedEmail {
    /// The idempotency key (also `data.email_id`).
    pub email_id: String,
    /// The event's `source`: the lower-cased addr-spec of the author (the one mailbox of the
    /// one `From` field), else of `MAIL FROM`; `None` when neither names a mailbox.
    pub source: Option<String>,
    /// The event's `data`: an object with [`DATA_KEYS`] in order, at most
    /// `limits.max_data_bytes` when serialized.
    pub data: Value,
}

/// Parses `raw` into the event of the contract (see the crate docs), or refuses it.
///
/// `tag` is the recipient's `+tag` ([`crate::parse_recipient`]); `email_id_hint` a provider's
/// own message id (SES), used as the `email_id` when it is a valid id.
pub fn parse_message(
    raw: &[u8], envelope: &Envelope, tag: Option<&str>, provider: Provider, auth: AuthResults,
    email_id_hint: Option<&str>, limits: &EmailLimits,
) -> Result<ParsedEmail, Refusal> {
    let message = parse_bounded(raw, limits)?;

    // The author is one mailbox of one From field, or nobody (docs/API.md §10): an ambiguous
    // `From` shows no `from`, and a DMARC verdict computed for it (by the door, for whichever
    // mailbox it chose) is `permerror`, so it never looks authenticated.
    let (from, auth) = match author_of(&message.root_part().headers) {
        Author::One { shown, mailbox } => (Some((shown, mailbox)), auth),
        Author::Ambiguous(_) if auth != AuthResults::default() => (
            None,
            AuthResults {
                dmarc: AuthVerdict::Permerror,
                ..auth
            },
        ),
        Author::Ambiguous(_) => (None, auth),
    };
    let source = from
        .as_ref()
        .map(|(_, addr)| addr.clone())
        .or_else(|| mailbox(&envelope.mail_from));
    let message_id = message
        .message_id()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let email_id = id::email_id(
        email_id_hint,
        message_id,
        source.as_deref().unwrap_or_default(),
        raw,
    );
    let references: Vec<String> = ids(message.references()).map(angle).collect();
    let in_reply_to = ids(message.in_reply_to()).next().map(angle);
    let date = message
        .date()
        .filter(|d| d.is_valid())
        .and_then(|d| chrono::DateTime::from_timestamp(d.to_timestamp(), 0))
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));

    let text: Vec<Cow<'_, str>> = (0..message.text_body.len())
        .filter_map(|i| message.body_text(i))
        .collect();
    let html: Vec<&str> = message
        .html_body
        .iter()
        .filter_map(|&i| match message.parts.get(i as usize).map(|p| &p.body) {
            Some(PartType::Html(html)) => Some(html.as_ref()),
            _ => None,
        })
        .collect();

    let text = (!text.is_empty()).then(|| text.join("\n"));
    let subject = message.subject();
    let reply_text = text
        .as_deref()
        .map(|t| reply::reply_text(t, subject).into_owned());

    let data = json!({
        "email_id": email_id,
        "message_id": message_id.map(angle),
        "in_reply_to": in_reply_to,
        "references": references,
        "from": from.map(|(shown, _)| shown),
        "reply_to": message.reply_to().and_then(first_addr).map(|(shown, _)| shown),
        "to": all_addrs(message.to()),
        "cc": all_addrs(message.cc()),
        "tag": tag,
        "subject": subject,
        "auto_reply": auto_reply(&message),
        "date": date,
        "text": text,
        "reply_text": reply_text,
        "html": if html.is_empty() { None } else { Some(html.join("\n")) },
        "truncated": false,
        "attachments": attachment::list(&message),
        "envelope": envelope,
        "size": raw.len(),
        "provider": provider,
        "auth": auth,
    });
    let Value::Object(mut data) = data else {
        return Err(Refusal::Unparseable);
    };
    truncate::fit(&mut data, limits.max_data_bytes)?;
    Ok(ParsedEmail {
        email_id,
        source,
        data: Value::Object(data),
    })
}

/// Pre-scans `raw`, parses it, refuses a message without header fields (a panic in the parser becomes [`Refusal::Unparseable`]: the
/// release profile unwinds), and checks the parsed tree's parts and nesting.
pub(crate) fn parse_bounded<'x>(
    raw: &'x [u8], limits: &EmailLimits,
) -> Result<Message<'x>, Refusal> {
    prescan(raw, limits)?;
    let message = std::panic::catch_unwind(|| MessageParser::default().parse(raw))
        .map_err(|_| Refusal::Unparseable)?
        .ok_or(Refusal::Unparseable)?;
    if message.parts.first().is_none_or(|p| p.headers.is_empty()) {
        return Err(Refusal::NoHeaders);
    }
    check_tree(&message, limits)?;
    Ok(message)
}

/// Counts every part (nested messages included) and measures the deepest nesting of
/// multiparts and messages, with an explicit stack (no recursion).
fn check_tree(message: &Message<'_>, limits: &EmailLimits) -> Result<(), Refusal> {
    let too_many = Refusal::TooComplex {
        why: "too many MIME parts",
    };
    let mut parts = 0usize;
    let mut visits = 0usize;
    // (message, part id within it, depth)
    let mut stack: Vec<(&Message<'_>, u32, usize)> = vec![(message, 0, 0)];
    parts += message.parts.len();
    while let Some((msg, part_id, depth)) = stack.pop() {
        visits += 1;
        if visits > limits.max_parts.saturating_mul(2) || parts > limits.max_parts {
            return Err(too_many);
        }
        if depth > limits.max_nesting {
            return Err(Refusal::TooComplex {
                why: "nested too deeply",
            });
        }
        let Some(part) = msg.parts.get(part_id as usize) else {
            continue;
        };
        match &part.body {
            PartType::Multipart(children) => {
                stack.extend(children.iter().map(|&c| (msg, c, depth + 1)));
            }
            PartType::Message(inner) => {
                parts += inner.parts.len();
                stack.push((inner, 0, depth + 1));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether the message says it was sent by a program, not a person (docs/API.md §10): an
/// `Auto-Submitted` other than `no` (RFC 3834), any `X-Autoreply` or `X-Autorespond`, or
/// `Precedence: auto_reply`, `bulk` or `junk` (names and values case-insensitive).
fn auto_reply(message: &Message<'_>) -> bool {
    // The value's first word: `auto-replied; owner-email=…` and `bulk (comment)` alike.
    let word = |value: &str| {
        value
            .trim()
            .split([';', '(', ' ', '\t', '\r', '\n'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    message.headers_raw().any(|(name, value)| {
        if name.eq_ignore_ascii_case("auto-submitted") {
            let w = word(value);
            !w.is_empty() && w != "no"
        } else if name.eq_ignore_ascii_case("precedence") {
            matches!(word(value).as_str(), "auto_reply" | "bulk" | "junk")
        } else {
            name.eq_ignore_ascii_case("x-autoreply") || name.eq_ignore_ascii_case("x-autorespond")
        }
    })
}

/// Message ids of an `In-Reply-To` or `References` header, in order.
fn ids<'a>(value: &'a HeaderValue<'_>) -> Box<dyn Iterator<Item = &'a str> + 'a> {
    match value {
        HeaderValue::Text(t) => Box::new(std::iter::once(t.as_ref())),
        HeaderValue::TextList(l) => Box::new(l.iter().map(|t| t.as_ref())),
        _ => Box::new(std::iter::empty()),
    }
}

fn angle(id: &str) -> String {
    format!(
        "<{}>",
        id.trim().trim_start_matches('<').trim_end_matches('>')
    )
}

/// `(shown, addr-spec lower-cased)` of an address header's first mailbox.
fn first_addr(address: &Address<'_>) -> Option<(String, String)> {
    address.iter().find_map(|a| {
        let spec = a.address()?.trim();
        (!spec.is_empty()).then(|| (show(a.name(), spec), spec.to_lowercase()))
    })
}

fn all_addrs(address: Option<&Address<'_>>) -> Vec<String> {
    address
        .map(|a| {
            a.iter()
                .filter_map(|a| {
                    let spec = a.address()?.trim();
                    (!spec.is_empty()).then(|| show(a.name(), spec))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `Name <addr>` (the name quoted when it needs to be), or `addr`.
pub(crate) fn show(name: Option<&str>, spec: &str) -> String {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => spec.to_owned(),
        Some(n)
            if n.chars()
                .all(|c| c.is_alphanumeric() || " !#$%&'*+-/=?^_`{|}~".contains(c)) =>
        {
            format!("{n} <{spec}>")
        }
        Some(n) => format!(
            "\"{}\" <{spec}>",
            n.replace('\\', "\\\\").replace('"', "\\\"")
        ),
    }
}

/// The lower-cased mailbox of an envelope address (`<a@b>` or `a@b`), if it is one.
fn mailbox(addr: &str) -> Option<String> {
    let addr = addr
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (addr.contains('@') && !addr.chars().any(char::is_whitespace)).then(|| addr.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(headers: &str, body: &str) -> Value {
        let raw = format!("From: a@example.com\r\nSubject: Re: x\r\n{headers}\r\n{body}");
        parse_message(
            raw.as_bytes(),
            &Envelope::default(),
            None,
            Provider::Smtp,
            AuthResults::default(),
            None,
            &EmailLimits::default(),
        )
        .map(|p| p.data)
        .unwrap_or_else(|e| panic!("{headers:?}: refused: {e:?}"))
    }

    fn auto(headers: &str) -> Value {
        data(headers, "body\r\n")["auto_reply"].clone()
    }

    #[test]
    fn auto_submitted_other_than_no_is_an_auto_reply() {
        for yes in [
            "Auto-Submitted: auto-replied\r\n",
            "Auto-Submitted: auto-generated\r\n",
            "auto-submitted: Auto-Replied; owner-email=\"x@example.com\"\r\n",
            "Auto-Submitted: auto-notified (vacation)\r\n",
            "Auto-Submitted:\r\n auto-replied\r\n",
            "Auto-Submitted: no\r\nAuto-Submitted: auto-replied\r\n",
        ] {
            assert_eq!(auto(yes), true, "{yes:?}");
        }
        for no in [
            "Auto-Submitted: no\r\n",
            "Auto-Submitted: NO\r\n",
            "Auto-Submitted: no (a person wrote this)\r\n",
            "Auto-Submitted:\r\n",
            "",
        ] {
            assert_eq!(auto(no), false, "{no:?}");
        }
    }

    #[test]
    fn x_autoreply_and_x_autorespond_are_auto_replies_whatever_their_value() {
        for yes in [
            "X-Autoreply: yes\r\n",
            "X-AutoReply: YES\r\n",
            "x-autoreply: \r\n",
            "X-Autorespond: Out of office\r\n",
            "X-AUTORESPOND: 1\r\n",
        ] {
            assert_eq!(auto(yes), true, "{yes:?}");
        }
        for no in [
            "X-Autoreplied: yes\r\n",
            "X-Auto-Response-Suppress: All\r\n",
        ] {
            assert_eq!(auto(no), false, "{no:?}");
        }
    }

    #[test]
    fn precedence_auto_reply_bulk_and_junk_are_auto_replies() {
        for yes in [
            "Precedence: auto_reply\r\n",
            "Precedence: bulk\r\n",
            "PRECEDENCE: Junk\r\n",
            "Precedence: bulk (newsletter)\r\n",
        ] {
            assert_eq!(auto(yes), true, "{yes:?}");
        }
        for no in [
            "Precedence: list\r\n",
            "Precedence: first-class\r\n",
            "Precedence: bulky\r\n",
        ] {
            assert_eq!(auto(no), false, "{no:?}");
        }
    }

    #[test]
    fn reply_text_sits_after_text_and_is_null_with_it() {
        let d = data(
            "",
            "Yes.\r\n\r\nOn Tue, Ada <ada@example.com> wrote:\r\n> May I?\r\n",
        );
        assert_eq!(d["reply_text"], "Yes.");
        let keys: Vec<&str> = d
            .as_object()
            .map_or(vec![], |o| o.keys().map(String::as_str).collect());
        assert_eq!(keys, DATA_KEYS);
        let no_text = data(
            "Content-Type: multipart/mixed; boundary=\"b\"\r\n",
            "--b\r\nContent-Type: image/png\r\n\r\nxx\r\n--b--\r\n",
        );
        assert_eq!(no_text["text"], Value::Null);
        assert_eq!(no_text["reply_text"], Value::Null);
    }
}
