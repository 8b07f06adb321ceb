//! agentaddress inbound email, the store-independent parsing step (docs/API.md §10).
//!
//! Every accepted message appends one event to the recipient's feed:
//!
//! - `type` = `email.received`, `ingress_surface` = `email`;
//! - `source` = the sender's mailbox: the lower-cased addr-spec of the author, the one mailbox
//!   of the one `From` field ([`author`]); the envelope's `MAIL FROM` when the message has no
//!   single author (no `From`, several, several mailboxes, none parseable);
//! - `data` = the object built by [`parse_message`], keys in this order: `email_id`,
//!   `message_id`, `in_reply_to`, `references`, `from`, `reply_to`, `to`, `cc`, `tag`,
//!   `subject`, `auto_reply`, `date`, `text`, `reply_text`, `html`, `truncated`,
//!   `attachments`, `envelope`, `size`, `provider`, `auth` ([`DATA_KEYS`]).
//!
//! Headers are decoded (RFC 2047, any charset to UTF-8); `text` comes from the text parts (or
//! is derived from the HTML when there is none); `reply_text` is `text` without a reply's quoted
//! history and signature ([`reply_text`]); `html` is the HTML part as sent; `auto_reply` says a
//! program sent it (`Auto-Submitted`, `X-Autoreply`, `Precedence`). `data` obeys a byte limit
//! (the inbox body limit): `html` is dropped first, then `text` and `reply_text` are cut at
//! character boundaries, and `truncated` is set. `date` is RFC 3339 UTC when `Date` parses,
//! else null. `size` is the raw message's byte length. `auth` carries the SPF, DKIM and DMARC
//! verdicts evaluated by the caller ([`AuthResults`]).
//!
//! `email_id` is the idempotency key: the same message delivered twice (a provider retry, an
//! SMTP client that lost the `250`) yields the same `email_id` (see [`email_id`]). Attachment
//! ids are derived from the part's position, so [`attachment`] can re-parse the stored raw
//! message and find the same part.
//!
//! Recipients ([`parse_recipient`]) match case-insensitively; `{local}+{tag}@{domain}` delivers
//! to `{local}@{domain}` and records `tag`.
//!
//! [`deliver_email`] is the pipeline every door (SMTP, the raw-MIME webhook, SES) ends in: recipients
//! resolved, the message parsed once, and each address's event committed with the raw message
//! by the store ([`agentaddress_core::store::Emails::append_email`]).
//!
//! [`ses`] holds the SES door's pure parts: SES's SPF/DKIM/DMARC verdicts ([`ses_auth`]) and
//! the envelope ([`ses_envelope`]) of a message SES stored in S3, the S3 event notification
//! that announces it ([`s3_notification`]), and SES's message id from the object key
//! ([`ses_message_id`]).
//!
//! Everything here is hostile input. A message is refused permanently ([`Refusal`], each with
//! its SMTP reply) when it is over the raw size limit (default 10 MB) or too complex; the
//! bounds ([`EmailLimits`]) are checked by a linear pre-scan before the MIME parser sees the
//! bytes, and again on the parsed tree.
#![forbid(unsafe_code)]

mod attachment;
mod author;
mod id;
mod ingest;
mod limits;
mod message;
mod provider;
mod recipient;
mod refusal;
mod reply;
pub mod ses;
mod truncate;

pub use attachment::{attachment, sanitize_filename, Attachment};
pub use author::{author, Ambiguity, Author};
pub use id::email_id;
pub use ingest::{
    deliver_email, email_limits, resolve, Accepted, Delivery, Inbound, Rejected, Rejection,
};
pub use limits::EmailLimits;
pub use message::{
    parse_message, AuthResults, AuthVerdict, Envelope, ParsedEmail, Provider, DATA_KEYS,
    EVENT_TYPE, INGRESS_SURFACE,
};
pub use provider::{deliver_ses, outcome, ProviderOutcome};
pub use recipient::{parse_recipient, Recipient};
pub use refusal::{Refusal, SmtpReply};
pub use reply::reply_text;
pub use ses::{
    s3_notification, ses_auth, ses_envelope, ses_message_id, S3Notification, S3Object, SesError,
};
