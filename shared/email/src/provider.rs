//! Messages a provider stored before anything was delivered: SES on AWS (docs/API.md §10, "On
//! AWS"). SES's receipt rule writes the raw message to the email bucket with its own headers on
//! top; the envelope and the SPF/DKIM/DMARC verdicts come from those headers ([`crate::ses`]),
//! and the message goes through the one pipeline ([`deliver_email`]) with SES's message id as its
//! `email_id`, so a redelivered notification or a replay never makes a second event.

use agentaddress_core::domain::{Limits, Millis};
use agentaddress_core::store::Store;

use crate::{deliver_email, parse_recipient, ses_auth, ses_envelope, Delivery, Inbound, Provider};

/// What a provider's stored message came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderOutcome {
    /// Every recipient was settled: delivered, or refused for good (no such address, a deleted
    /// one, its sender rules). The stored copy may go.
    Settled(Delivery),
    /// A recipient should get it later (a full feed, the store unavailable…): try again.
    Retry(Delivery, String),
    /// The message itself is refused (why): retrying cannot help, but an operator may fix and
    /// replay it (the dead-letter queue keeps the notification).
    Refused(String),
    /// The message names no recipient of the domain (of the replaying address, for a replay).
    NoRecipient,
}

impl ProviderOutcome {
    /// Why the provider should see the message again (a queue consumer reports it as failed),
    /// or `None` when it is settled.
    pub fn failure(&self, domain: &str) -> Option<String> {
        match self {
            ProviderOutcome::Settled(_) => None,
            ProviderOutcome::Retry(_, why) => Some(why.clone()),
            ProviderOutcome::Refused(why) => Some(format!("refused: {why}")),
            ProviderOutcome::NoRecipient => {
                Some(format!("the message names no recipient of {domain}"))
            }
        }
    }
}

/// Delivers the message SES stored as `email_id` to the recipients its SES headers name —
/// only those of the address whose email is `only` when given (a replay by that address).
pub async fn deliver_ses(
    store: &dyn Store, raw: &[u8], email_id: &str, domain: &str, limits: &Limits, now: Millis,
    only: Option<&str>,
) -> ProviderOutcome {
    let envelope = ses_envelope(raw, domain);
    let rcpt_to: Vec<String> = match only {
        Some(email) => {
            let want = parse_recipient(email, domain).map(|r| r.key);
            envelope
                .rcpt_to
                .into_iter()
                .filter(|r| parse_recipient(r, domain).map(|p| p.key) == want && want.is_some())
                .collect()
        }
        None => envelope.rcpt_to,
    };
    if rcpt_to.is_empty() {
        return ProviderOutcome::NoRecipient;
    }
    let inbound = Inbound {
        raw,
        mail_from: &envelope.mail_from,
        rcpt_to: &rcpt_to,
        provider: Provider::Ses,
        auth: ses_auth(raw),
        email_id_hint: Some(email_id),
    };
    let delivery = deliver_email(store, &inbound, domain, limits, now).await;
    outcome(delivery)
}

/// Sorts a delivery into settled, retry or poison.
pub fn outcome(delivery: Delivery) -> ProviderOutcome {
    use crate::Rejection;
    let mut retry = None;
    for r in &delivery.rejected {
        match &r.rejection {
            Rejection::Message(refusal) => return ProviderOutcome::Refused(refusal.to_string()),
            // Refused for good, each for its own address: the others may have it.
            Rejection::UnknownRecipient | Rejection::AddressGone | Rejection::SenderRefused(_) => {}
            other => {
                retry.get_or_insert_with(|| format!("{}: {other}", r.rcpt));
            }
        }
    }
    match retry {
        Some(why) => ProviderOutcome::Retry(delivery, why),
        None => ProviderOutcome::Settled(delivery),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Rejected, Rejection};

    fn delivery(rejections: &[Rejection]) -> Delivery {
        Delivery {
            accepted: Vec::new(),
            rejected: rejections
                .iter()
                .map(|r| Rejected {
                    rcpt: "a@inbox.test".into(),
                    rejection: r.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn recipients_refused_for_good_settle_the_message() {
        let d = delivery(&[Rejection::UnknownRecipient, Rejection::AddressGone]);
        assert_eq!(outcome(d.clone()), ProviderOutcome::Settled(d));
        // Sender rules refuse for good (docs/API.md §10): dropped, never dead-lettered.
        use agentaddress_core::domain::email_policy::PolicyFailure;
        let d = delivery(&[
            Rejection::SenderRefused(PolicyFailure::Auth),
            Rejection::SenderRefused(PolicyFailure::EnvelopeSender),
        ]);
        assert_eq!(outcome(d.clone()), ProviderOutcome::Settled(d));
        assert_eq!(outcome(delivery(&[])).failure("inbox.test"), None);
    }

    #[test]
    fn a_temporary_rejection_brings_the_message_back() {
        for r in [
            Rejection::FeedFull,
            Rejection::StorageFull,
            Rejection::Unavailable,
            Rejection::Internal,
        ] {
            let o = outcome(delivery(&[Rejection::UnknownRecipient, r.clone()]));
            assert!(matches!(o, ProviderOutcome::Retry(..)), "{r:?}: {o:?}");
            assert!(o.failure("inbox.test").is_some());
        }
    }

    #[test]
    fn a_refused_message_is_refused_whatever_else_happened() {
        let refusal = crate::Refusal::TooComplex {
            why: "nested too deeply",
        };
        let o = outcome(delivery(&[
            Rejection::FeedFull,
            Rejection::Message(refusal.clone()),
        ]));
        assert_eq!(o, ProviderOutcome::Refused(refusal.to_string()));
        assert_eq!(
            o.failure("inbox.test").as_deref(),
            Some("refused: message too complex: nested too deeply")
        );
        assert_eq!(
            ProviderOutcome::NoRecipient
                .failure("inbox.test")
                .as_deref(),
            Some("the message names no recipient of inbox.test")
        );
    }
}
