//! The wake queue (docs/API.md §19, "Deployments"): after a commit that appends an event one of
//! its address's active hooks wakes for (the hooks' types ride with the address on META, so
//! the append decides without another read), and after a hook is made active again, the
//! address is sent to this queue; its consumer (the `wake` function) tries each of the
//! address's hooks with the delivery machine of every deployment
//! (`agentaddress_api::wake_delivery::consume_wake`) and hides the message until a retry, a
//! debounce or another try's lease is due.
//!
//! The message is sent after the commit, never inside it: a function that stops between the
//! two (a timeout, a crash) leaves the wake to the address's next matching append or
//! reactivation — nothing is lost, since what is pending is read from each hook's cursor, only
//! delayed. A send that fails is logged and the commit still answers as committed.

use crate::store::{StoreError, StoreResult};

/// Where an append that wakes an address's hooks sends the address. A trait object, like the
/// purge queue: only the programs given one link the SQS client.
#[async_trait::async_trait]
pub trait WakeQueue: std::fmt::Debug + Send + Sync {
    /// Sends `message`; [`StoreError::Unavailable`] when the queue did not take it.
    async fn send(&self, message: &WakeMessage) -> StoreResult<()>;
}

/// A message of the wake queue: the address whose hooks to try.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WakeMessage {
    pub address_id: String,
}

impl WakeMessage {
    /// The message's body (JSON).
    pub fn to_body(&self) -> String {
        serde_json::json!({ "address_id": self.address_id }).to_string()
    }

    /// The message of `body`; `None` when it is not one.
    pub fn from_body(body: &str) -> Option<Self> {
        serde_json::from_str::<Self>(body)
            .ok()
            .filter(|m| crate::domain::ids::is_valid_id(&m.address_id))
    }
}

/// The SQS wake queue.
#[derive(Debug, Clone)]
pub struct SqsWakeQueue {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
}

#[async_trait::async_trait]
impl WakeQueue for SqsWakeQueue {
    async fn send(&self, message: &WakeMessage) -> StoreResult<()> {
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(message.to_body())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| StoreError::Unavailable(format!("SendMessage: {e:?}")))
    }
}

impl crate::DynamoStore {
    /// After a commit that appended an event of `event_type` to `address_id` whose hooks'
    /// types are `hook_types` (as read with the address): sends the address to the wake queue
    /// when one of them wakes for it. Never fails the commit (see the module docs).
    pub(crate) async fn queue_wake_for(
        &self, address_id: &str, hook_types: &[String], event_type: &str,
    ) {
        if crate::domain::hooks::wakes_for(hook_types, event_type) {
            self.queue_wake(address_id).await;
        }
    }

    /// Sends `address_id` to the wake queue, if the store has one; a failure is logged.
    pub(crate) async fn queue_wake(&self, address_id: &str) {
        let Some(queue) = &self.wakes else {
            return;
        };
        let message = WakeMessage {
            address_id: address_id.to_owned(),
        };
        if let Err(e) = queue.send(&message).await {
            tracing::warn!(
                address_id = %address_id, error = %e,
                "cannot queue the address's wake; its next matching append or reactivation sends it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_and_junk_is_none() {
        let m = WakeMessage {
            address_id: crate::domain::ids::new_address_id(),
        };
        assert_eq!(WakeMessage::from_body(&m.to_body()), Some(m));
        assert_eq!(WakeMessage::from_body("{}"), None);
        assert_eq!(WakeMessage::from_body("not json"), None);
        assert_eq!(
            WakeMessage::from_body(r#"{"address_id": "../etc"}"#),
            None,
            "an id of the wrong shape is no message"
        );
    }
}
