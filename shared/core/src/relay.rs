//! Calling out: the outbound mail relay (docs/API.md §16: an SMTP smarthost for
//! `agentaddress serve`, SES on AWS) and the wake hooks' caller (§19). Implementations live
//! with their clients (`agentaddress-outbound`); the API only sees these traits.

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

/// What a hook's receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub status: u16,
    /// Its `Retry-After`, if any (read by `crate::domain::hooks::try_outcome`).
    pub retry_after: Option<String>,
    /// From the start of the call to the answer's head.
    pub elapsed: std::time::Duration,
}

/// Why a wake got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSent {
    /// The URL, or an address its host resolves to, may not be called (`invalid_hook_url`).
    #[error("{0}")]
    Refused(String),
    /// No answer: the name did not resolve, the connection failed, TLS failed, or the time ran
    /// out (`hook_unreachable`; retried).
    #[error("{0}")]
    Unreachable(String),
}

/// Calls wake hooks' URLs (docs/API.md §19), safe by construction: never at an address that
/// is not public unless private receivers are allowed, no redirect followed, the time and the
/// answer read bounded (`agentaddress_outbound::wake::WakeSender`).
#[async_trait]
pub trait HookCaller: Send + Sync + 'static {
    /// Whether private receivers (and `http://`) are allowed.
    fn allows_private(&self) -> bool;

    /// Checks a hook URL when a hook is made: its form, and every address its host resolves to.
    async fn check(&self, url: &str) -> Result<(), crate::domain::hooks::HookUrlRefused>;

    /// POSTs `body` with `headers` to `url`, checked again on the addresses actually used.
    async fn call(
        &self, url: &str, headers: &[(String, String)], body: Vec<u8>,
    ) -> Result<Answered, NotSent>;
}
