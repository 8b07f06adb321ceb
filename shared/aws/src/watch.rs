//! Watches: "wake me at T for address A", for a named purpose ([`Watch`]). DynamoDB has no
//! timer service, so a watch is a message on the purge queue delayed until T, in hops of at most
//! 15 minutes (SQS's longest delay): the purge function's handler of a message that falls due
//! before T sends the next hop, and one that falls due at T does the watch's work
//! ([`crate::handle_purge_message`]).
//!
//! One watch of each purpose is pending per address: the address's socket counter item
//! (`A#{id}` / `WN`, purged with the address) keeps when the pending message of each purpose
//! falls due ([`Watch::attribute`]), and a message is sent only once that due time is recorded
//! by a conditional write ([`Claim`]): a message goes on only while the record is still its
//! own due time, so a duplicate delivery (SQS delivers at least once) or a message superseded by
//! an earlier watch ends there instead of forking a second chain.
//!
//! - [`Watch::Expiry`] (`sockets`): an address that expires while sockets are subscribed; at
//!   its expiry they are told `gone` (docs/API.md §17).
//! - [`Watch::Timers`] (`timers`): the address's earliest pending timer; at its `fire_at` the
//!   due timers fire and the watch moves on to the next one (docs/API.md §20).

use std::time::Duration;

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;

use crate::capacity::Tally;
use crate::domain::Millis;
use crate::item::*;
use crate::retry::resend_on_conflict;
use crate::store::StoreResult;
use crate::DynamoStore;

/// The sort key of the item that keeps the pending watches' due times: the address's socket
/// counter (`sockets`).
pub(crate) const WATCH_SK: &str = crate::sockets::COUNTER_SK;

/// What a watch wakes an address for (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Watch {
    /// The address's expiry, for its subscribed sockets (docs/API.md §17).
    Expiry,
    /// The address's earliest pending timer (docs/API.md §20).
    Timers,
}

impl Watch {
    /// The watch item's attribute holding when this purpose's pending message falls due.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Watch::Expiry => "watch_until",
            Watch::Timers => "timer_watch_until",
        }
    }
}

/// On what condition a watch's next message is sent.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Claim {
    /// No watch of the purpose is pending (a subscribe's expiry watch: a pending one goes on
    /// while sockets are subscribed, whenever it falls due).
    NonePending,
    /// No watch of the purpose falls due by this message's due time (a new timer's: a pending
    /// watch due later is superseded, and ends when it falls due). One that fell due by now is
    /// not pending: if its handler is still at work, whichever of the two writes second fails
    /// its condition, so one watch goes on.
    NoneSooner,
    /// The pending watch is still the one that fell due at this time (a watch message's).
    Continues(Millis),
}

impl DynamoStore {
    /// Records when the next `watch` message of `address_id` falls due (if `claim` holds) and
    /// sends it, delayed until `at` or as long as SQS allows. `false`: the claim did not hold
    /// (another watch is pending), nothing sent. Without a purge queue, nothing.
    pub(crate) async fn watch_from(
        &self, address_id: &str, watch: Watch, at: Millis, now: Millis, claim: Claim,
    ) -> StoreResult<bool> {
        use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
        let Some(queue) = &self.purge else {
            return Ok(false);
        };
        let delay = delay_until(at, now);
        let due = now.saturating_add(Millis::try_from(delay.as_millis()).unwrap_or(Millis::MAX));
        // Each condition also admits our own due time: a re-send of this very write after an
        // attempt that applied (the SDK's retry of a lost answer) goes on to send the message.
        let condition = match claim {
            Claim::NonePending => "attribute_not_exists(#w) OR #w < :now OR #w = :due",
            Claim::NoneSooner => "attribute_not_exists(#w) OR #w <= :now OR #w >= :due",
            Claim::Continues(_) => "#w = :previous OR #w = :due",
        };
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(address_id), WATCH_SK.into())))
            .update_expression("SET #w = :due")
            .condition_expression(condition)
            .expression_attribute_names("#w", watch.attribute())
            .expression_attribute_values(":due", n(due))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        update = match claim {
            Claim::NonePending | Claim::NoneSooner => {
                update.expression_attribute_values(":now", n(now))
            }
            Claim::Continues(previous) => {
                update.expression_attribute_values(":previous", n(previous))
            }
        };
        let recorded = resend_on_conflict(|| update.clone().send())
            .await
            .tally(&self.metrics);
        if let Err(e) = recorded {
            return match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(false),
                _ => Err(sdk_err("UpdateItem watch", e)),
            };
        }
        let sent = queue
            .send(&crate::PurgeMessage::watch(address_id, watch, due), delay)
            .await;
        if sent.is_err() {
            // No message behind it: a later claim may start the watch again.
            let _ = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(pk(address_id), WATCH_SK.into())))
                .update_expression("REMOVE #w")
                .condition_expression("#w = :due")
                .expression_attribute_names("#w", watch.attribute())
                .expression_attribute_values(":due", n(due))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .tally(&self.metrics);
        }
        sent.map(|()| true)
    }
}

/// The delay of a watch's message falling due at `at`: whole seconds, rounded up (so that it is
/// never early), at most SQS's longest delay (the watch then goes on from there).
pub(crate) fn delay_until(at: Millis, now: Millis) -> Duration {
    let ms = u64::try_from(at.saturating_sub(now)).unwrap_or(0);
    Duration::from_secs(ms.div_ceil(1000)).min(crate::purge::MAX_QUEUE_DELAY)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{delay_until, Watch};

    #[test]
    fn a_watch_falls_due_never_early_and_in_hops_of_15_minutes() {
        assert_eq!(delay_until(10_000, 10_000), Duration::ZERO);
        assert_eq!(delay_until(9_000, 10_000), Duration::ZERO);
        assert_eq!(delay_until(10_001, 10_000), Duration::from_secs(1));
        assert_eq!(delay_until(70_000, 10_000), Duration::from_secs(60));
        assert_eq!(delay_until(70_500, 10_000), Duration::from_secs(61));
        assert_eq!(
            delay_until(10_000 + 7_200_000, 10_000),
            Duration::from_secs(900)
        );
    }

    #[test]
    fn each_purpose_keeps_its_own_due_time() {
        assert_ne!(Watch::Expiry.attribute(), Watch::Timers.attribute());
    }
}
