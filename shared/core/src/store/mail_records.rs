//! What the store keeps of outbound email (docs/API.md §16): contacts with their confirmation
//! codes, and sends with their delivery state. The [`super::Store`] methods that read and write
//! them are each one atomic step; the rules they apply are in
//! [`crate::domain::mail_out`].

use crate::domain::mail_out::{ContactStatus, SendStatus};
use crate::domain::Millis;

use super::{EventRef, IdempotencyClaim, NewEvent};

/// A contact of an address. The code's hash, expiry and tries are the store's: the API never
/// shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContactRecord {
    /// Lower-cased ([`crate::domain::mail_out::parse_contact_email`]).
    pub email: String,
    pub status: ContactStatus,
    pub created_at: Millis,
    pub confirmed_at: Option<Millis>,
    /// The hash of the last code mailed ([`crate::domain::mail_out::code_hash`]), until it is
    /// used.
    pub code_hash: Option<String>,
    pub code_expires_at: Option<Millis>,
    /// Tries of the current code (right or wrong).
    pub code_tries: u32,
    /// The UTC day [`ContactRecord::code_mails`] counts in.
    pub code_day: i64,
    /// Codes mailed on `code_day`.
    pub code_mails: u32,
}

/// A code to mail to a contact (created pending when new).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCode {
    pub email: String,
    pub code_hash: String,
    pub expires_at: Millis,
    /// The client asking for it (its client key: an IPv4 address or an IPv6 /64), whose code
    /// mails of the day are counted ([`crate::domain::Limits::code_mails_per_client_per_day`]).
    pub client: String,
}

/// Which server-wide daily cap on code mails refused one (docs/API.md §16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeMailCap {
    /// The recipient's mailbox was mailed its codes of the day, by all addresses together
    /// ([`crate::domain::Limits::code_mails_per_recipient_per_day`]).
    Recipient,
    /// The asking client asked for its code mails of the day, for all addresses together
    /// ([`crate::domain::Limits::code_mails_per_client_per_day`]).
    Client,
}

/// What [`super::Contacts::issue_contact_code`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeIssued {
    /// The code is stored (and counted): mail it now.
    Issued(ContactRecord),
    /// The contact is confirmed already: nothing changed, nothing is to be mailed.
    AlreadyConfirmed(ContactRecord),
}

/// What [`super::Contacts::check_contact_code`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeCheck {
    /// The code was right: the contact is confirmed from now on.
    Confirmed(ContactRecord),
    /// Confirmed before: nothing changed.
    AlreadyConfirmed(ContactRecord),
    /// Wrong; this try counted, `tries_left` remain.
    Wrong { tries_left: u32 },
    /// Every try of this code is used: a new code must be asked for.
    Spent,
    /// The code is past its expiry (or none was mailed): a new code must be asked for.
    Expired,
}

/// A send to record: its event, its idempotency claim, and the message as it will be mailed.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSend {
    pub id: String,
    pub claim: IdempotencyClaim,
    pub message: OutboundMessage,
    /// The `email.sent` event.
    pub event: NewEvent,
}

/// The message of a send, as stored until it is delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundMessage {
    /// The confirmed contact (lower-cased).
    pub to: String,
    /// The address's own email: the message's `Reply-To`.
    pub reply_to: String,
    pub subject: String,
    pub text: String,
    /// `<…>`.
    pub message_id: String,
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
}

/// What [`super::Sends::record_send`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRecorded {
    pub send_id: String,
    /// The `email.sent` event.
    pub event: EventRef,
    /// `true` when an earlier send with the same Idempotency-Key and body recorded it.
    pub duplicate: bool,
    pub status: SendStatus,
}

/// A send as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRecord {
    pub id: String,
    pub address_id: String,
    pub event: EventRef,
    pub message: OutboundMessage,
    pub status: SendStatus,
    /// Delivery attempts begun (a claim counts one).
    pub attempts: u32,
    /// When the next attempt is due (pending sends).
    pub next_attempt_at: Option<Millis>,
    /// Until when an attempt holds it (a pending send being attempted).
    pub lease_until: Option<Millis>,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
}

/// How a delivery attempt ended, for [`super::Sends::finish_send`].
#[derive(Debug, Clone, PartialEq)]
pub enum SendOutcome {
    /// The relay accepted the message.
    Sent,
    /// A temporary failure: try again at `next_attempt_at`.
    Retry {
        next_attempt_at: Millis,
        error: String,
    },
    /// Given up: marks the send failed and appends `event` (`email.send_failed`), even over the
    /// feed quota (the send kept a slot free for its answer).
    Failed { error: String, event: NewEvent },
}
