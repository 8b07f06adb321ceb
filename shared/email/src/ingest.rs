//! The one pipeline every door ends in (docs/API.md §10): recipients resolved to addresses, the
//! message parsed once into each address's `email.received` event, and each event committed
//! with the raw message by [`Emails::append_email`]. Doors (the SMTP session, the raw-MIME
//! webhook, SES on AWS) differ only in how they get the bytes and the envelope, and in how they
//! answer each recipient's outcome ([`Rejection::smtp_reply`], [`Rejection::code`]).
//!
//! An address's sender rules (docs/API.md §10, "Sender rules") are applied here for every door:
//! the envelope's sender before the message is parsed, its author and authentication verdicts
//! after; a refused address gets [`Rejection::SenderRefused`] (`550 5.7.1`), its refusal is
//! counted ([`Addresses::count_email_refusal`]), and nothing is appended to it.

use agentaddress_core::domain::email_policy::{PolicyFailure, SenderAuth};
use agentaddress_core::domain::{Ingress, Limits, Millis};
use agentaddress_core::store::{
    prelude::*, AddressRecord, EventRef, NewEmail, NewEvent, StoreError,
};
use serde_json::Value;

use crate::{
    parse_message, parse_recipient, AuthResults, AuthVerdict, EmailLimits, Envelope, Provider,
    Recipient, Refusal, SmtpReply, EVENT_TYPE,
};

/// A message as a door received it.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    /// The message as received (RFC 822 bytes).
    pub raw: &'a [u8],
    /// `MAIL FROM` (empty for the null sender).
    pub mail_from: &'a str,
    /// The recipients the door accepted, as given.
    pub rcpt_to: &'a [String],
    pub provider: Provider,
    pub auth: AuthResults,
    /// The provider's own message id (SES), used as the `email_id`.
    pub email_id_hint: Option<&'a str>,
}

/// Why one recipient did not get the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Not an address of this domain, or no address has this email.
    #[error("no such recipient")]
    UnknownRecipient,
    /// The address was deleted or has expired.
    #[error("the address was deleted or has expired")]
    AddressGone,
    /// The address's feed holds its maximum of retained events (temporary).
    #[error("the address's feed is full")]
    FeedFull,
    /// The address keeps its most bytes of stored messages (temporary).
    #[error("the address's stored email is at its limit")]
    StorageFull,
    /// More recipients than one message may name (temporary: send the rest again).
    #[error("too many recipients")]
    TooManyRecipients,
    /// The message itself is refused (permanent).
    #[error("{0}")]
    Message(Refusal),
    /// The address's sender rules refuse the message (permanent): counted, never appended.
    #[error("refused by the recipient's sender rules: {0}")]
    SenderRefused(PolicyFailure),
    /// The store was unavailable; the sender should retry.
    #[error("the store is unavailable")]
    Unavailable,
    /// A bug; details are logged by the caller, never sent.
    #[error("internal error")]
    Internal,
}

impl Rejection {
    /// The SMTP reply for this recipient (docs/API.md §10).
    pub fn smtp_reply(&self) -> SmtpReply {
        let (code, enhanced, text) = match self {
            Rejection::UnknownRecipient => (550, "5.1.1", "No such recipient here"),
            Rejection::AddressGone => (550, "5.1.1", "Recipient address was deleted or expired"),
            Rejection::FeedFull => (452, "4.2.2", "Mailbox full, try again later"),
            Rejection::StorageFull => (452, "4.2.2", "Mailbox storage full, try again later"),
            Rejection::TooManyRecipients => (452, "4.5.3", "Too many recipients"),
            Rejection::Message(refusal) => return refusal.smtp_reply(),
            Rejection::SenderRefused(PolicyFailure::EnvelopeSender) => (
                550,
                "5.7.1",
                "Sender not allowed by the recipient's sender rules",
            ),
            Rejection::SenderRefused(PolicyFailure::Author) => (
                550,
                "5.7.1",
                "Message author not allowed by the recipient's sender rules",
            ),
            Rejection::SenderRefused(PolicyFailure::Auth) => (
                550,
                "5.7.1",
                "Message not authenticated as the recipient's sender rules require",
            ),
            Rejection::Unavailable | Rejection::Internal => {
                (451, "4.3.0", "Temporary failure, try again later")
            }
        };
        SmtpReply {
            code,
            enhanced,
            text,
        }
    }

    /// The error code of docs/API.md §9 for the webhook door's `rejected` list.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::UnknownRecipient => "not_found",
            Rejection::AddressGone => "address_gone",
            Rejection::FeedFull | Rejection::StorageFull => "quota_exceeded",
            Rejection::TooManyRecipients => "invalid_request",
            Rejection::Message(Refusal::TooLarge { .. } | Refusal::DataTooLarge { .. }) => {
                "payload_too_large"
            }
            Rejection::Message(_) | Rejection::SenderRefused(_) => "invalid_request",
            Rejection::Unavailable => "unavailable",
            Rejection::Internal => "internal",
        }
    }

    /// Whether the sender may succeed by sending the same message again later.
    pub fn is_temporary(&self) -> bool {
        self.smtp_reply().code < 500
    }

    /// What an SMTP server answers at `RCPT` for `address` when the envelope's sender is
    /// `mail_from` (empty: the null sender): the refusal of its sender rules, if they refuse
    /// already — the sender matches no `allow` pattern, or they require authentication that
    /// this server does not evaluate (`checks_auth` false: nothing could pass, so the message
    /// is refused before it is sent; fail closed). The caller counts it.
    pub fn at_rcpt(address: &AddressRecord, mail_from: &str, checks_auth: bool) -> Option<Self> {
        let policy = address.email_policy.as_ref()?;
        if !policy.allows(mail_from) {
            return Some(Rejection::SenderRefused(PolicyFailure::EnvelopeSender));
        }
        (!checks_auth && policy.require_auth().is_some())
            .then_some(Rejection::SenderRefused(PolicyFailure::Auth))
    }
}

/// The verdicts the sender rules read: `pass` or not; DMARC only for a message with a single
/// author (`single_author`).
fn sender_auth(auth: AuthResults, single_author: bool) -> SenderAuth {
    SenderAuth {
        spf: auth.spf == AuthVerdict::Pass,
        dkim: auth.dkim == AuthVerdict::Pass,
        dmarc: single_author && auth.dmarc == AuthVerdict::Pass,
    }
}

/// Counts one refusal of `address_id`'s sender rules. A store that cannot count does not make
/// the refusal temporary: it is logged.
async fn count_refusal(store: &dyn Store, address_id: &str, failure: PolicyFailure, now: Millis) {
    tracing::info!(address = %address_id, %failure, "email refused by the address's sender rules");
    if let Err(e) = store.count_email_refusal(address_id, now).await {
        tracing::warn!(address = %address_id, error = %e, "counting a refused email failed");
    }
}

/// One recipient that got the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The recipient as given.
    pub rcpt: String,
    pub address_id: String,
    pub event: EventRef,
    /// The message was already in this address's feed (a retry): nothing new was appended.
    pub duplicate: bool,
}

/// One recipient that did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The recipient as given.
    pub rcpt: String,
    pub rejection: Rejection,
}

/// What became of a message, per recipient, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivery {
    pub accepted: Vec<Accepted>,
    pub rejected: Vec<Rejected>,
}

/// The bounds a message is parsed with: the raw limit of `limits`, and its inbox body limit
/// for `data`.
pub fn email_limits(limits: &Limits) -> EmailLimits {
    EmailLimits {
        max_raw_bytes: usize::try_from(limits.max_email_bytes).unwrap_or(usize::MAX),
        max_data_bytes: usize::try_from(limits.max_inbox_bytes).unwrap_or(usize::MAX),
        ..EmailLimits::default()
    }
}

/// The live address a recipient names, with its `+tag`; what an SMTP server checks at `RCPT`.
pub async fn resolve(
    store: &dyn Store, rcpt: &str, domain: &str, now: Millis,
) -> Result<(AddressRecord, Recipient), Rejection> {
    let recipient = parse_recipient(rcpt, domain).ok_or(Rejection::UnknownRecipient)?;
    match store.address_by_email(&recipient.key, now).await {
        Ok(Some(address)) if address.is_gone(now) => Err(Rejection::AddressGone),
        Ok(Some(address)) => Ok((address, recipient)),
        Ok(None) => Err(Rejection::UnknownRecipient),
        Err(e) => Err(from_store(e)),
    }
}

/// Delivers `inbound` to each of its recipients: one event per address (recipients naming the
/// same address, with or without a `+tag`, share it; its `tag` is the first one's), each
/// committed with the raw message, idempotently on the message's `email_id`.
///
/// Each event's `envelope.rcpt_to` lists only the recipients that reached its address, so no
/// address learns another's (Bcc) recipients. The message is parsed once, whatever the number
/// of recipients.
pub async fn deliver_email(
    store: &dyn Store, inbound: &Inbound<'_>, domain: &str, limits: &Limits, now: Millis,
) -> Delivery {
    let mut delivery = Delivery::default();
    let max = usize::try_from(limits.max_email_recipients).unwrap_or(usize::MAX);
    let (within, over) = inbound.rcpt_to.split_at(inbound.rcpt_to.len().min(max));
    for rcpt in over {
        delivery.rejected.push(Rejected {
            rcpt: rcpt.clone(),
            rejection: Rejection::TooManyRecipients,
        });
    }

    // Recipients, grouped by address in the order first seen.
    let mut targets: Vec<(AddressRecord, Option<String>, Vec<String>)> = Vec::new();
    for rcpt in within {
        match resolve(store, rcpt, domain, now).await {
            Ok((address, recipient)) => {
                match targets.iter_mut().find(|(a, _, _)| a.id == address.id) {
                    Some((_, _, rcpts)) => rcpts.push(rcpt.clone()),
                    None => targets.push((address, recipient.tag, vec![rcpt.clone()])),
                }
            }
            Err(rejection) => delivery.rejected.push(Rejected {
                rcpt: rcpt.clone(),
                rejection,
            }),
        }
    }
    // The envelope's sender, by each address's rules: a refused address is counted once,
    // whatever the number of its recipients, and its recipients are not parsed for.
    let mut allowed = Vec::with_capacity(targets.len());
    for (address, tag, rcpts) in targets {
        let envelope_ok = address
            .email_policy
            .as_ref()
            .is_none_or(|p| p.allows(inbound.mail_from));
        if envelope_ok {
            allowed.push((address, tag, rcpts));
            continue;
        }
        let failure = PolicyFailure::EnvelopeSender;
        count_refusal(store, &address.id, failure, now).await;
        for rcpt in rcpts {
            delivery.rejected.push(Rejected {
                rcpt,
                rejection: Rejection::SenderRefused(failure),
            });
        }
    }
    let targets = allowed;
    if targets.is_empty() {
        return delivery;
    }

    // One parse for every address: with every accepted recipient and the longest tag, `data` is
    // at its largest, so each address's copy (fewer recipients, its own tag) fits too.
    let all: Vec<String> = targets.iter().flat_map(|(_, _, r)| r.clone()).collect();
    let longest_tag = targets
        .iter()
        .filter_map(|(_, tag, _)| tag.as_deref())
        .max_by_key(|t| t.len());
    let envelope = Envelope {
        mail_from: inbound.mail_from.to_owned(),
        rcpt_to: all,
    };
    let parsed = match parse_message(
        inbound.raw,
        &envelope,
        longest_tag,
        inbound.provider,
        inbound.auth,
        inbound.email_id_hint,
        &email_limits(limits),
    ) {
        Ok(parsed) => parsed,
        Err(refusal) => {
            for (_, _, rcpts) in targets {
                for rcpt in rcpts {
                    delivery.rejected.push(Rejected {
                        rcpt,
                        rejection: Rejection::Message(refusal.clone()),
                    });
                }
            }
            return delivery;
        }
    };

    // The author (the `source` when `from` shows one: "The author", docs/API.md §10) and the
    // verdicts, for the sender rules.
    let single_author = parsed.data.get("from").is_some_and(|f| !f.is_null());
    let author = parsed.source.as_deref().filter(|_| single_author);
    let auth = sender_auth(inbound.auth, single_author);

    for (address, tag, rcpts) in targets {
        if let Some(policy) = &address.email_policy {
            if let Err(failure) = policy.check(inbound.mail_from, author, auth) {
                count_refusal(store, &address.id, failure, now).await;
                for rcpt in rcpts {
                    delivery.rejected.push(Rejected {
                        rcpt,
                        rejection: Rejection::SenderRefused(failure),
                    });
                }
                continue;
            }
        }
        let mut data = parsed.data.clone();
        if let Value::Object(map) = &mut data {
            map.insert("tag".into(), tag.map_or(Value::Null, Value::String));
            if let Some(Value::Object(env)) = map.get_mut("envelope") {
                env.insert(
                    "rcpt_to".into(),
                    Value::Array(rcpts.iter().cloned().map(Value::String).collect()),
                );
            }
        }
        let email = NewEmail {
            email_id: parsed.email_id.clone(),
            raw: inbound.raw.to_vec(),
            event: NewEvent {
                event_type: EVENT_TYPE.into(),
                source: parsed.source.clone(),
                ingress: Ingress::Email,
                data: data.to_string(),
                http: None,
            },
        };
        // A request for a person that expired before this message gets its event first.
        let appended = match store.append_due(&address, limits, now).await {
            Ok(()) => store.append_email(&address.id, email, limits, now).await,
            Err(e) => Err(e),
        };
        match appended {
            Ok(appended) => {
                for rcpt in rcpts {
                    delivery.accepted.push(Accepted {
                        rcpt,
                        address_id: address.id.clone(),
                        event: appended.event.clone(),
                        duplicate: appended.duplicate,
                    });
                }
            }
            Err(e) => {
                if let StoreError::Internal(detail) | StoreError::Unavailable(detail) = &e {
                    tracing::warn!(%detail, address = %address.id, "storing an email failed");
                }
                let rejection = from_store(e);
                for rcpt in rcpts {
                    delivery.rejected.push(Rejected {
                        rcpt,
                        rejection: rejection.clone(),
                    });
                }
            }
        }
    }
    delivery
}

fn from_store(e: StoreError) -> Rejection {
    match e {
        StoreError::AddressNotFound => Rejection::UnknownRecipient,
        StoreError::AddressGone => Rejection::AddressGone,
        StoreError::QuotaExceeded => Rejection::FeedFull,
        StoreError::EmailStorageFull => Rejection::StorageFull,
        StoreError::Unavailable(_) => Rejection::Unavailable,
        _ => Rejection::Internal,
    }
}
