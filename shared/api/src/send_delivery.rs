//! Outbound email's moving parts (docs/API.md §16): the operator's configuration
//! ([`Outbound`]: sender, relay, how a recorded send is handed on), one delivery attempt
//! ([`attempt_send`]: claim, relay, finish — the state machine of a send), and the embedded
//! deployment's delivery loop ([`DeliveryLoop`]). The routes are in `handlers::contacts`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{watch, Notify};

use crate::domain::mail_out::{self, SEND_ATTEMPTS, SEND_LEASE_MS};
use crate::domain::{Clock, Ingress, Limits, Millis};
use crate::relay::{Mail, Relay, RelayError};
use crate::store::{prelude::*, NewEvent, SendOutcome, SendRecord, StoreError};

pub use crate::relay::Dispatch;

/// The operator's outbound configuration. Without one, the routes of docs/API.md §16 answer
/// 503 `outbound_not_configured`.
#[derive(Clone)]
pub struct Outbound {
    /// The sender every message goes from (`From`), e.g. `Agents <mail@agents.example>`.
    pub from: String,
    pub relay: Arc<dyn Relay>,
    pub dispatch: Arc<dyn Dispatch>,
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("from", &self.from)
            .field("relay", &self.relay.kind())
            .field("retry", &self.retry)
            .finish()
    }
}

/// When temporary failures are tried again: after `first`, then 4× longer each time, for
/// `attempts` attempts in all; then the send is reported failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub attempts: u32,
}

impl Default for RetryPolicy {
    /// 30 s, 2 min, 8 min, 32 min, about 2 h: six attempts over about 2 h 45 min.
    fn default() -> Self {
        Self {
            first: Duration::from_secs(30),
            attempts: SEND_ATTEMPTS,
        }
    }
}

/// What one call of [`attempt_send`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The relay took the message.
    Sent,
    /// A temporary failure; tried again at this time.
    Retrying { next_attempt_at: Millis },
    /// Reported as `email.send_failed`.
    Failed { permanent: bool },
    /// Nothing to do: sent or failed already, not due, or another attempt holds it.
    Skipped,
    /// The address is gone: nothing is sent for it.
    AddressGone,
}

/// One delivery attempt of send `send_id` of `address_id`: claims it (so no other attempt
/// sends it at the same time), hands it to the relay, and records the outcome — sent, a retry
/// after a temporary failure, or `email.send_failed` after a permanent one or the last
/// attempt. An attempt cut off between the relay's answer and the record (a crash) is tried
/// again after its lease, with the same `Message-ID`.
pub async fn attempt_send(
    store: &dyn Store, outbound: &Outbound, limits: &Limits, clock: &dyn Clock, address_id: &str,
    send_id: &str,
) -> Result<Delivery, StoreError> {
    let now = clock.now();
    let send = match store
        .claim_send(address_id, send_id, now + SEND_LEASE_MS, now)
        .await
    {
        Ok(Some(send)) => send,
        Ok(None) => return Ok(Delivery::Skipped),
        Err(StoreError::AddressGone | StoreError::AddressNotFound) => {
            return Ok(Delivery::AddressGone)
        }
        Err(e) => return Err(e),
    };
    let result = outbound.relay.send(&mail_of(&outbound.from, &send)).await;
    let now = clock.now();
    let (outcome, delivery) = match result {
        Ok(()) => (SendOutcome::Sent, Delivery::Sent),
        Err(RelayError::Temporary(error)) if send.attempts < outbound.retry.attempts => {
            let first = i64::try_from(outbound.retry.first.as_millis()).unwrap_or(i64::MAX);
            let next_attempt_at = now + mail_out::retry_delay_ms(first, send.attempts);
            (
                SendOutcome::Retry {
                    next_attempt_at,
                    error,
                },
                Delivery::Retrying { next_attempt_at },
            )
        }
        Err(RelayError::Temporary(error)) => (
            failed(&send, error, false),
            Delivery::Failed { permanent: false },
        ),
        Err(RelayError::Permanent(error)) => (
            failed(&send, error, true),
            Delivery::Failed { permanent: true },
        ),
    };
    match &delivery {
        Delivery::Sent => {
            tracing::info!(%address_id, %send_id, attempt = send.attempts, "email sent")
        }
        other => {
            tracing::warn!(%address_id, %send_id, attempt = send.attempts, ?other, "email not sent")
        }
    }
    match store
        .finish_send(address_id, send_id, outcome, limits, now)
        .await
    {
        Ok(()) => Ok(delivery),
        Err(StoreError::AddressGone | StoreError::AddressNotFound) => Ok(Delivery::AddressGone),
        Err(e) => Err(e),
    }
}

/// What a queue consumer does with one message naming send `send_id` of `address_id` (the
/// send queue on AWS): one [`attempt_send`] attempt, then when to see the message again — `None`
/// when the send is done (sent, failed, its address gone), else the time it is due again (a
/// retry's, or the end of another attempt's lease), to hide the message until then.
pub async fn consume_send(
    store: &dyn Store, outbound: &Outbound, limits: &Limits, clock: &dyn Clock, address_id: &str,
    send_id: &str,
) -> Result<Option<Millis>, StoreError> {
    match attempt_send(store, outbound, limits, clock, address_id, send_id).await? {
        Delivery::Retrying { next_attempt_at } => Ok(Some(next_attempt_at)),
        Delivery::Skipped => match store.get_send(address_id, send_id, clock.now()).await {
            Ok(Some(send)) if send.status == crate::domain::mail_out::SendStatus::Pending => {
                let later = send.next_attempt_at.max(send.lease_until);
                Ok(Some(later.unwrap_or_else(|| clock.now() + 1_000)))
            }
            Ok(_) | Err(StoreError::AddressGone | StoreError::AddressNotFound) => Ok(None),
            Err(e) => Err(e),
        },
        Delivery::Sent | Delivery::Failed { .. } | Delivery::AddressGone => Ok(None),
    }
}

/// The message of a send, from the operator's sender, replies going to the address.
pub fn mail_of(from: &str, send: &SendRecord) -> Mail {
    let m = &send.message;
    Mail {
        from: from.to_owned(),
        to: m.to.clone(),
        reply_to: Some(m.reply_to.clone()),
        subject: m.subject.clone(),
        text: m.text.clone(),
        message_id: m.message_id.clone(),
        in_reply_to: m.in_reply_to.clone(),
        references: m.references.clone(),
    }
}

fn failed(send: &SendRecord, error: String, permanent: bool) -> SendOutcome {
    let error = clean_error(&error);
    SendOutcome::Failed {
        event: NewEvent {
            event_type: "email.send_failed".into(),
            source: None,
            ingress: Ingress::Outbound,
            data: mail_out::send_failed_data(
                &send.event.id,
                &send.message.to,
                &send.message.message_id,
                &error,
                permanent,
                send.attempts,
            ),
            http: None,
        },
        error,
    }
}

/// A relay's error as shown to the agent: one line, at most 300 characters.
pub fn clean_error(error: &str) -> String {
    error
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect()
}

/// The embedded deployment's delivery loop: attempts every due send, at once when woken by
/// [`LoopDispatch`] and otherwise every `tick` (retries, and sends a crash left pending).
pub struct DeliveryLoop {
    wake: Arc<Notify>,
}

/// [`Dispatch`] for [`DeliveryLoop`]: wakes it.
pub struct LoopDispatch(Arc<Notify>);

#[async_trait]
impl Dispatch for LoopDispatch {
    async fn dispatch(&self, _address_id: &str, _send_id: &str) -> Result<(), String> {
        self.0.notify_one();
        Ok(())
    }
}

impl Default for DeliveryLoop {
    fn default() -> Self {
        Self::new()
    }
}

impl DeliveryLoop {
    pub fn new() -> Self {
        Self {
            wake: Arc::new(Notify::new()),
        }
    }

    /// The [`Dispatch`] that wakes this loop.
    pub fn dispatch(&self) -> Arc<dyn Dispatch> {
        Arc::new(LoopDispatch(self.wake.clone()))
    }

    /// Runs until `shutdown` turns `true`.
    pub async fn run(
        self, store: Arc<dyn Store>, outbound: Arc<Outbound>, limits: Limits,
        clock: Arc<dyn Clock>, tick: Duration, mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            if *shutdown.borrow() {
                return;
            }
            match store.due_sends(clock.now(), 64).await {
                Ok(due) => {
                    let attempts = due.iter().map(|(address_id, send_id)| {
                        attempt_send(
                            store.as_ref(),
                            &outbound,
                            &limits,
                            clock.as_ref(),
                            address_id,
                            send_id,
                        )
                    });
                    for result in futures::future::join_all(attempts).await {
                        if let Err(e) = result {
                            tracing::warn!(error = %e, "a delivery attempt could not be recorded");
                        }
                    }
                    if due.len() == 64 {
                        continue;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot list the sends due"),
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}
