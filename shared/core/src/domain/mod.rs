//! The domain: ids, secrets, time, limits, validation, the inbox envelope rule and email sender
//! rules.
//! Pure code with no I/O, so every deployment applies exactly the same rules.

pub mod client;
pub mod delivery;
pub mod email_policy;
pub mod envelope;
pub mod hooks;
pub mod ids;
pub mod label;
pub mod limits;
pub mod mail_out;
pub mod patterns;
pub mod request;
pub mod socket;
pub mod state;
pub mod time;
pub mod timer;
pub mod verification;
pub mod viewer;

pub use limits::Limits;
pub use time::{Clock, ManualClock, Millis, SystemClock};

/// A rule of the contract that an input breaks; the message is shown to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Invalid {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// Where an event came from (`ingress_surface` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    Http,
    State,
    Email,
    /// A person answering a request, or its expiry (docs/API.md §12).
    Request,
    /// Outbound email: a send, or its failure (docs/API.md §16).
    Outbound,
    /// A timer firing (docs/API.md §20).
    Timer,
}

impl Ingress {
    pub fn as_str(self) -> &'static str {
        match self {
            Ingress::Http => "http",
            Ingress::State => "state",
            Ingress::Email => "email",
            Ingress::Request => "request",
            Ingress::Outbound => "outbound",
            Ingress::Timer => "timer",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "http" => Some(Ingress::Http),
            "state" => Some(Ingress::State),
            "email" => Some(Ingress::Email),
            "request" => Some(Ingress::Request),
            "outbound" => Some(Ingress::Outbound),
            "timer" => Some(Ingress::Timer),
            _ => None,
        }
    }
}
