//! Why a message is refused, and the permanent SMTP reply each refusal maps to.

/// An SMTP reply: basic code, enhanced status code (RFC 3463) and text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmtpReply {
    pub code: u16,
    pub enhanced: &'static str,
    pub text: &'static str,
}

impl std::fmt::Display for SmtpReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.code, self.enhanced, self.text)
    }
}

/// A message this service will never accept. Every refusal is permanent (5xx): resending the
/// same bytes cannot succeed.
///
/// | refusal          | reply                                              |
/// |------------------|----------------------------------------------------|
/// | `TooLarge`       | `552 5.3.4 Message size exceeds fixed limit`       |
/// | `DataTooLarge`   | `552 5.3.4 Message headers exceed the event limit` |
/// | `TooComplex`     | `554 5.6.0 Message structure too complex`          |
/// | `NoHeaders`      | `554 5.6.0 Message has no header fields`           |
/// | `Unparseable`    | `554 5.6.0 Message could not be parsed`            |
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The raw message is over [`crate::EmailLimits::max_raw_bytes`].
    #[error("message of {size} bytes exceeds the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    /// Even with `html` dropped and `text` empty, `data` is over the data limit (huge
    /// recipient lists, subjects or attachment lists).
    #[error("the event data exceeds {limit} bytes even without its body")]
    DataTooLarge { limit: usize },
    /// Too many parts, header fields, or nesting levels.
    #[error("message too complex: {why}")]
    TooComplex { why: &'static str },
    /// The message starts with its body: no header field at all.
    #[error("message has no header fields")]
    NoHeaders,
    /// The parser found nothing, or gave up.
    #[error("message could not be parsed")]
    Unparseable,
}

impl Refusal {
    /// The permanent SMTP reply for this refusal (also the webhook's answer).
    pub fn smtp_reply(&self) -> SmtpReply {
        match self {
            Refusal::TooLarge { .. } => SmtpReply {
                code: 552,
                enhanced: "5.3.4",
                text: "Message size exceeds fixed limit",
            },
            Refusal::DataTooLarge { .. } => SmtpReply {
                code: 552,
                enhanced: "5.3.4",
                text: "Message headers exceed the event limit",
            },
            Refusal::TooComplex { .. } => SmtpReply {
                code: 554,
                enhanced: "5.6.0",
                text: "Message structure too complex",
            },
            Refusal::NoHeaders => SmtpReply {
                code: 554,
                enhanced: "5.6.0",
                text: "Message has no header fields",
            },
            Refusal::Unparseable => SmtpReply {
                code: 554,
                enhanced: "5.6.0",
                text: "Message could not be parsed",
            },
        }
    }
}
