//! The author of a message (docs/API.md §10): the one mailbox of its one `From` field, or none
//! when that is ambiguous.
//!
//! RFC 5322 §3.6 wants exactly one `From` field; RFC 7489 §6.6.1 leaves a message with no
//! `From`, several `From` fields or several mailboxes outside DMARC ("typically rejected"),
//! and mail readers differ on which mailbox such a message shows. So an ambiguous author is
//! never anyone: the event's `from` is null, its DMARC verdict is `permerror` (never `pass`),
//! and the SMTP door with `--smtp-check-auth` refuses the message. The event's `from` and the
//! mailbox whose DMARC policy is evaluated both come from [`author`] / [`author_of`], the same
//! parse of the same header block, so they always agree.

use mail_parser::{Address, Header, HeaderName, HeaderValue, MessageParser};

use crate::limits::{prescan, EmailLimits};
use crate::Refusal;

/// Who wrote a message, as its `From` field says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Author {
    /// One `From` field naming one mailbox.
    One {
        /// `Name <addr>` (or `addr`), as `data.from` shows it.
        shown: String,
        /// The addr-spec, lower-cased: the event's `source`, the domain DMARC evaluates.
        mailbox: String,
    },
    /// No single author: nothing may be attributed to any mailbox.
    Ambiguous(Ambiguity),
}

/// Why a message has no single author.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ambiguity {
    /// No `From` field.
    NoFrom,
    /// More than one `From` field.
    SeveralFromFields,
    /// One `From` field with more than one mailbox (or a group).
    SeveralMailboxes,
    /// A `From` field whose mailbox has no `local@domain` addr-spec.
    Unparseable,
}

impl Ambiguity {
    /// For logs and SMTP replies.
    pub fn as_str(self) -> &'static str {
        match self {
            Ambiguity::NoFrom => "no From field",
            Ambiguity::SeveralFromFields => "more than one From field",
            Ambiguity::SeveralMailboxes => "more than one mailbox in From",
            Ambiguity::Unparseable => "no parseable mailbox in From",
        }
    }
}

impl Author {
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Author::Ambiguous(_))
    }
}

/// The author of `raw`, read from its header block alone. A message that the bounds refuse
/// (too large, too complex, no header fields) is that refusal: its door answers it as such.
pub fn author(raw: &[u8], limits: &EmailLimits) -> Result<Author, Refusal> {
    prescan(raw, limits)?;
    let message = std::panic::catch_unwind(|| MessageParser::default().parse_headers(raw))
        .map_err(|_| Refusal::Unparseable)?
        .ok_or(Refusal::Unparseable)?;
    let headers = message.root_part().headers.as_slice();
    if headers.is_empty() {
        return Err(Refusal::NoHeaders);
    }
    Ok(author_of(headers))
}

/// The author named by a header block (the top-level one of a parsed message).
pub(crate) fn author_of(headers: &[Header<'_>]) -> Author {
    let mut froms = headers.iter().filter(|h| h.name == HeaderName::From);
    let Some(from) = froms.next() else {
        return Author::Ambiguous(Ambiguity::NoFrom);
    };
    if froms.next().is_some() {
        return Author::Ambiguous(Ambiguity::SeveralFromFields);
    }
    let addr = match &from.value {
        HeaderValue::Address(Address::List(list)) => match list.as_slice() {
            [one] => one,
            [] => return Author::Ambiguous(Ambiguity::Unparseable),
            _ => return Author::Ambiguous(Ambiguity::SeveralMailboxes),
        },
        // RFC 5322's From is a mailbox-list: a group is not one mailbox.
        HeaderValue::Address(Address::Group(_)) => {
            return Author::Ambiguous(Ambiguity::SeveralMailboxes)
        }
        _ => return Author::Ambiguous(Ambiguity::Unparseable),
    };
    let spec = addr.address().map(str::trim).unwrap_or_default();
    let well_formed = spec.rsplit_once('@').is_some_and(|(local, domain)| {
        !local.is_empty()
            && !domain.is_empty()
            && !spec.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    if !well_formed {
        return Author::Ambiguous(Ambiguity::Unparseable);
    }
    Author::One {
        shown: crate::message::show(addr.name(), spec),
        mailbox: spec.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(headers: &str) -> Author {
        let raw = format!("{headers}Subject: s\r\n\r\nbody\r\n");
        author(raw.as_bytes(), &EmailLimits::default())
            .unwrap_or_else(|e| panic!("{headers:?}: refused: {e:?}"))
    }

    #[test]
    fn one_from_with_one_mailbox_is_the_author() {
        assert_eq!(
            of("From: Ada <Ada@Example.COM>\r\n"),
            Author::One {
                shown: "Ada <Ada@Example.COM>".into(),
                mailbox: "ada@example.com".into()
            }
        );
        assert_eq!(
            of("FROM: bank@bank.test\r\n"),
            Author::One {
                shown: "bank@bank.test".into(),
                mailbox: "bank@bank.test".into()
            }
        );
    }

    #[test]
    fn anything_else_has_no_author() {
        for (headers, why) in [
            ("To: x@y.test\r\n", Ambiguity::NoFrom),
            (
                "From: evil@evil.test\r\nFrom: bank@bank.test\r\n",
                Ambiguity::SeveralFromFields,
            ),
            (
                "From: evil@evil.test\r\nfrom: evil@evil.test\r\n",
                Ambiguity::SeveralFromFields,
            ),
            (
                "From: evil@evil.test, bank@bank.test\r\n",
                Ambiguity::SeveralMailboxes,
            ),
            (
                "From: a@bank.test, b@bank.test\r\n",
                Ambiguity::SeveralMailboxes,
            ),
            ("From: Banks: a@bank.test;\r\n", Ambiguity::SeveralMailboxes),
            ("From: bank.test\r\n", Ambiguity::Unparseable),
            ("From: <@bank.test>\r\n", Ambiguity::Unparseable),
            ("From:\r\n", Ambiguity::Unparseable),
        ] {
            assert_eq!(of(headers), Author::Ambiguous(why), "{headers:?}");
        }
    }

    #[test]
    fn refused_messages_are_their_refusal() {
        let limits = EmailLimits::default();
        assert_eq!(author(b"", &limits), Err(Refusal::Unparseable));
        assert!(author(&vec![b'a'; limits.max_raw_bytes + 1], &limits).is_err());
    }
}
