//! The outbound mail relay (docs/API.md §16): what hands a message to the world — an SMTP
//! smarthost for `agentaddress serve`, SES on AWS. Implementations live with their clients
//! (`agentaddress-outbound`); the API only sees this trait.

use async_trait::async_trait;

/// One message to send, every field already checked by [`crate::domain::mail_out`]: addresses
/// are plain, the subject one line, message ids well-formed. The relay builds the RFC 5322
/// message (its own encoding of every header: nothing here is pasted into one raw).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    /// The operator's sender, e.g. `Agents <mail@agents.example>`.
    pub from: String,
    pub to: String,
    pub reply_to: Option<String>,
    pub subject: String,
    pub text: String,
    /// `<…>`.
    pub message_id: String,
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
}

/// Why the relay did not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Worth trying again later: the relay could not be reached, timed out, or answered 4xx.
    #[error("temporary relay failure: {0}")]
    Temporary(String),
    /// The relay refused the message for good (5xx, an address it will not deliver to).
    #[error("the relay refused the message: {0}")]
    Permanent(String),
}

/// Hands messages to a relay. `Ok` means the relay accepted the message (for SMTP: `250` after
/// the data).
#[async_trait]
pub trait Relay: Send + Sync + 'static {
    /// `smtp` or `ses`, for logs and `/healthz`.
    fn kind(&self) -> &'static str;

    async fn send(&self, mail: &Mail) -> Result<(), RelayError>;
}

/// How a recorded send reaches its delivery: `serve` wakes its delivery loop; on AWS the send is
/// put on the send queue, whose function delivers it (docs/API.md §16).
#[async_trait]
pub trait Dispatch: Send + Sync + 'static {
    /// Hands on send `send_id` of `address_id`. An error leaves the send pending and is
    /// answered 503: a retry of the request with its Idempotency-Key hands it on again.
    async fn dispatch(&self, address_id: &str, send_id: &str) -> Result<(), String>;
}
