//! Messages a provider stored before anything was delivered: SES on AWS (docs/API.md §10, "On
//! AWS"). SES's receipt rule writes the raw message to the email bucket with its own headers on
//! top; the envelope and the SPF/DKIM/DMARC verdicts come from those headers ([`crate::ses`]),
//! and the message goes through the one pipeline ([`deliver`]) with SES's message id as its
//! `email_id`, so a redelivered notification or a replay never makes a second event.

use agentaddress_core::domain::{Limits, Millis};
use agentaddress_core::store::Store;

use crate::{deliver, parse_recipient, ses_auth, ses_envelope, Delivery, Inbound, Provider};

/// What a provider's stored message came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderOutcome {
    /// Every recipient was settled: delivered, or refused for good (no such address, a deleted
    /// one). The stored copy may go.
    Settled(Delivery),
    /// A recipient should get it later (a full feed, the store unavailable…): try again.
    Retry(Delivery, String),
    /// The message itself is refused, or names no recipient of ours: retrying cannot help, but
    /// an operator may fix and replay it (the dead-letter queue keeps the notification).
    Poison(String),
}

/// Delivers the message SES stored as `email_id` to the recipients its SES headers name —
/// only those of the address whose email is `only` when given (a replay by that address).
pub async fn deliver_ses(
    store: &dyn Store,
    raw: &[u8],
    email_id: &str,
    domain: &str,
    limits: &Limits,
    now: Millis,
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
        return ProviderOutcome::Poison(format!("the message names no recipient of {domain}"));
    }
    let inbound = Inbound {
        raw,
        mail_from: &envelope.mail_from,
        rcpt_to: &rcpt_to,
        provider: Provider::Ses,
        auth: ses_auth(raw),
        email_id_hint: Some(email_id),
    };
    let delivery = deliver(store, &inbound, domain, limits, now).await;
    outcome(delivery)
}

/// Sorts a delivery into settled, retry or poison.
pub fn outcome(delivery: Delivery) -> ProviderOutcome {
    use crate::Rejection;
    let mut retry = None;
    for r in &delivery.rejected {
        match &r.rejection {
            Rejection::Message(refusal) => {
                return ProviderOutcome::Poison(format!("refused: {refusal}"))
            }
            Rejection::UnknownRecipient | Rejection::AddressGone => {}
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
