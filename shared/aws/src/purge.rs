//! Purging a deleted (or expired) address's items: the queue DELETE sends it to, one purge step,
//! and the handler of one purge message. The same queue carries the watches (`watch`: delayed
//! messages that wake an address at a time, for the wake-up sockets' expiry and for timers).
//!
//! Every item of an address is in its partition (`A#{id}`) except the request items its
//! request entries name, so a step's `Query` of the partition finds them all: timers' items
//! (`T#`, `TX#`, `TC#`, `TK#`) and the watch item (`WN`) included.

use std::time::Duration;

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;

use crate::capacity::Tally;
use crate::domain::{ids, Limits, Millis};
use crate::item::*;
use crate::requests::{entry_request_id, request_key};
use crate::store::{StoreError, StoreResult};
use crate::watch::Watch;
use crate::{DynamoStore, Item};

/// Where DELETE sends the address to purge. A trait object, so that only the programs that
/// delete addresses or purge them ([`crate::AwsConfig::purge_queue_with`]: the `address` and
/// `purge` functions, `agentaddress purge-worker`, the tools) link the SQS client; every other
/// Lambda function stays without it (docs/PERFORMANCE.md, "Lambda mode").
#[async_trait::async_trait]
pub trait PurgeQueue: std::fmt::Debug + Send + Sync {
    /// Sends `message`, to be received after `delay` (whole seconds, at most
    /// [`MAX_QUEUE_DELAY`]); [`StoreError::Unavailable`] when the queue did not take it.
    async fn send(&self, message: &PurgeMessage, delay: Duration) -> StoreResult<()>;
}

/// The SQS purge queue.
#[derive(Debug, Clone)]
pub struct SqsPurgeQueue {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
}

#[async_trait::async_trait]
impl PurgeQueue for SqsPurgeQueue {
    async fn send(&self, message: &PurgeMessage, delay: Duration) -> StoreResult<()> {
        let delay = delay.min(MAX_QUEUE_DELAY).as_secs();
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(message.to_body())
            .delay_seconds(i32::try_from(delay).unwrap_or(0))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| StoreError::Unavailable(format!("SendMessage: {e:?}")))
    }
}

/// The longest delay SQS gives a message (its `DelaySeconds`: 15 minutes).
/// How many purge steps (of up to 500 items) one message gets before it is sent again: the
/// `purge` function and `agentaddress purge-worker` alike.
pub const PURGE_STEPS_PER_MESSAGE: usize = 8;

pub const MAX_QUEUE_DELAY: Duration = Duration::from_secs(900);

/// What one purge step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeProgress {
    pub deleted_items: u64,
    /// `false` when items remain: send the message again.
    pub done: bool,
}

impl DynamoStore {
    /// One step of purging a deleted (or expired) address: deletes up to `budget` of its
    /// items other than the META tombstone (and the request items its request entries name); the last step gives its email-key item the
    /// tombstone's TTL (the key is found until the tombstone is forgotten). Refuses a live
    /// address.
    pub async fn purge_address(
        &self, id: &str, budget: usize, now: Millis,
    ) -> StoreResult<PurgeProgress> {
        let Some(meta) = self.meta(id).await? else {
            return Ok(PurgeProgress {
                deleted_items: 0,
                done: true,
            });
        };
        if !crate::store::AddressRecord::from_item(&meta)?.is_gone(now) {
            return Err(StoreError::Internal(format!(
                "refusing to purge live address {id}"
            )));
        }
        // Its stored messages first: the email records name them until the items go.
        if let Some(bucket) = &self.bucket {
            let (_, more) = bucket
                .delete_prefix(&crate::bucket::mail_prefix(id), budget.max(1))
                .await?;
            if more {
                return Ok(PurgeProgress {
                    deleted_items: 0,
                    done: false,
                });
            }
        }
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", s(pk(id)))
            .projection_expression("pk, sk")
            .limit(i32::try_from(budget.max(1) + 1).unwrap_or(i32::MAX))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("Query purge", e))?;
        let budget = budget.max(1);
        let others: Vec<Item> = out
            .items()
            .iter()
            .filter(|i| get_s(i, "sk").as_deref() != Some("META"))
            .map(|i| {
                let f = Fields::of(i, "address");
                Ok(key(f.s("pk")?, f.s("sk")?))
            })
            .collect::<StoreResult<_>>()?;
        let more = out.last_evaluated_key().is_some() || others.len() > budget;
        let partition = &others[..others.len().min(budget)];
        // A request's item is outside the partition, named by its entry (open or closed): it
        // goes in an earlier batch than the entry, so that no failed step leaves it unnamed.
        let mut keys: Vec<Item> = partition
            .iter()
            .filter_map(|k| get_s(k, "sk"))
            .filter_map(|sk| entry_request_id(&sk).map(request_key))
            .collect();
        keys.extend_from_slice(partition);
        let found = keys.len();
        for batch in keys.chunks(25) {
            let mut requests = Vec::with_capacity(batch.len());
            for k in batch {
                let delete = aws_sdk_dynamodb::types::DeleteRequest::builder()
                    .set_key(Some(k.clone()))
                    .build()
                    .map_err(|e| StoreError::Internal(e.to_string()))?;
                requests.push(
                    aws_sdk_dynamodb::types::WriteRequest::builder()
                        .delete_request(delete)
                        .build(),
                );
            }
            for attempt in 0..8u32 {
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, requests.clone())
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .tally(&self.metrics)
                    .map_err(|e| sdk_err("BatchWriteItem", e))?;
                let left = out
                    .unprocessed_items()
                    .and_then(|m| m.get(&self.table))
                    .cloned()
                    .unwrap_or_default();
                if left.is_empty() {
                    break;
                }
                if attempt == 7 {
                    return Err(StoreError::Unavailable(
                        "BatchWriteItem left unprocessed items".into(),
                    ));
                }
                requests = left;
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
        }
        let done = !more;
        if done {
            self.expire_email_key_with(&meta, id).await?;
        }
        Ok(PurgeProgress {
            deleted_items: found as u64,
            done,
        })
    }

    /// Gives the address's email-key item the TTL of its META tombstone, so that the key is
    /// found (as the tombstone is) until the tombstone is forgotten, and then goes with it, as
    /// on the embedded store. A deleted address's key item had no TTL (or its expiry's);
    /// an expired address's already has this one. No key item (an address from before email
    /// keys), or one naming another address: nothing to do.
    async fn expire_email_key_with(&self, meta: &Item, id: &str) -> StoreResult<()> {
        let (Some(email), Some(ttl)) = (get_s(meta, "email"), get_i(meta, "ttl")) else {
            return Ok(());
        };
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(
                email_pk(&ids::email_key(&email)),
                EMAIL_SK.into(),
            )))
            .update_expression("SET #ttl = :ttl")
            .condition_expression("address_id = :id")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":ttl", n(ttl))
            .expression_attribute_values(":id", s(id))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
                match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(()),
                    _ => Err(sdk_err("UpdateItem email key ttl", e)),
                }
            }
        }
    }

    /// Sends `id` to the purge queue (if one is configured).
    pub async fn enqueue_purge(&self, id: &str) -> StoreResult<()> {
        let Some(q) = &self.purge else {
            return Ok(());
        };
        q.send(&PurgeMessage::new(id), Duration::ZERO).await
    }
}

/// The body of a purge queue message: which deleted address to purge (written by
/// [`DynamoStore::enqueue_purge`]), or, with `watch`, which address a watch wakes, and for what
/// (`watch`: [`Watch::Expiry`] tells its subscribed sockets `gone` once it has expired,
/// [`Watch::Timers`] fires its due timers). Read by [`handle_purge_message`].
///
/// On the queue: `{"address_id"}` for a purge, `{"address_id", "watch": "timers", "due"}` for a
/// timer watch; an expiry watch, older than the `watch` member, is still written
/// `{"address_id", "expiry_watch": true, "due"}`, so that the consumer of the version before
/// reads it alike during a deployment (the template updates the purge function before the
/// function that sends timer watches).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "WireMessage", into = "WireMessage")]
pub struct PurgeMessage {
    pub address_id: String,
    /// What the watch wakes the address for; `None`: a purge.
    pub watch: Option<Watch>,
    /// A watch's due time (ms since the epoch): the watch goes on only while the address's
    /// record of its pending message is still this, so a duplicate message ends instead of
    /// forking.
    pub due: Option<Millis>,
}

/// [`PurgeMessage`] as written on the queue.
#[derive(serde::Serialize, serde::Deserialize)]
struct WireMessage {
    address_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    watch: Option<Watch>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    expiry_watch: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due: Option<Millis>,
}

impl From<WireMessage> for PurgeMessage {
    fn from(w: WireMessage) -> Self {
        Self {
            address_id: w.address_id,
            watch: w.watch.or(w.expiry_watch.then_some(Watch::Expiry)),
            due: w.due,
        }
    }
}

impl From<PurgeMessage> for WireMessage {
    fn from(m: PurgeMessage) -> Self {
        let expiry_watch = m.watch == Some(Watch::Expiry);
        Self {
            address_id: m.address_id,
            watch: m.watch.filter(|_| !expiry_watch),
            expiry_watch,
            due: m.due,
        }
    }
}

impl PurgeMessage {
    pub fn new(address_id: &str) -> Self {
        Self {
            address_id: address_id.to_owned(),
            watch: None,
            due: None,
        }
    }

    /// A `watch` of `address_id`, falling due at `due`.
    pub fn watch(address_id: &str, watch: Watch, due: Millis) -> Self {
        Self {
            address_id: address_id.to_owned(),
            watch: Some(watch),
            due: Some(due),
        }
    }

    /// An expiry watch of `address_id`, falling due at `due`.
    pub fn expiry_watch(address_id: &str, due: Millis) -> Self {
        Self::watch(address_id, Watch::Expiry, due)
    }

    /// A timer watch of `address_id`, falling due at `due`.
    pub fn timer_watch(address_id: &str, due: Millis) -> Self {
        Self::watch(address_id, Watch::Timers, due)
    }

    /// The message's JSON body.
    pub fn to_body(&self) -> String {
        // Strings, a unit enum and integers always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A message body, if it is one with a valid address id (other members are ignored; an
    /// unknown `watch` is not a message of this version).
    pub fn parse(body: &str) -> Option<Self> {
        serde_json::from_str::<Self>(body)
            .ok()
            .filter(|m| ids::is_valid_id(&m.address_id))
    }
}

/// Handles one purge message ([`PurgeMessage`]): deletes up to `steps` batches of the
/// address's items and, when some remain, sends the message again so another invocation goes on.
/// A watch deletes nothing: an expiry watch tells the sockets of an expired address `gone`
/// ([`DynamoStore::check_expiry`]), a timer watch fires the due timers with `limits` and moves
/// on to the next ([`DynamoStore::check_timers`]).
pub async fn handle_purge_message(
    store: &DynamoStore, body: &str, steps: usize, limits: &Limits, now: Millis,
) -> StoreResult<PurgeProgress> {
    let message = PurgeMessage::parse(body)
        .ok_or_else(|| StoreError::Internal("not a purge message of this version".into()))?;
    let id = message.address_id;
    let watched = match message.watch {
        Some(Watch::Expiry) => store.check_expiry(&id, message.due, now).await,
        Some(Watch::Timers) => store.check_timers(&id, message.due, limits, now).await,
        None => return purge_steps(store, &id, steps, now).await,
    };
    watched.map(|()| PurgeProgress {
        deleted_items: 0,
        done: true,
    })
}

/// Up to `steps` purge steps of address `id`; the message again when items remain.
async fn purge_steps(
    store: &DynamoStore, id: &str, steps: usize, now: Millis,
) -> StoreResult<PurgeProgress> {
    // Its sockets are told `gone` before their subscriptions go with the rest (the deletion
    // told them already, unless that failed or raced this purge).
    store.tell_sockets(id, None, &[], now).await;
    let mut total = 0;
    for _ in 0..steps.max(1) {
        let step = store.purge_address(id, 500, now).await?;
        total += step.deleted_items;
        if step.done {
            tracing::info!(address_id = %id, deleted_items = total, "purged");
            return Ok(PurgeProgress {
                deleted_items: total,
                done: true,
            });
        }
    }
    store.enqueue_purge(id).await?;
    Ok(PurgeProgress {
        deleted_items: total,
        done: false,
    })
}

#[cfg(test)]
mod tests {
    use super::{PurgeMessage, Watch};

    #[test]
    fn a_purge_message_is_its_address_id() {
        let m = PurgeMessage::new("addr_x-1");
        assert_eq!(m.to_body(), r#"{"address_id":"addr_x-1"}"#);
        assert_eq!(PurgeMessage::parse(&m.to_body()), Some(m));
        let w = PurgeMessage::expiry_watch("addr_x-1", 1_800_000_000_000);
        assert_eq!(
            w.to_body(),
            r#"{"address_id":"addr_x-1","expiry_watch":true,"due":1800000000000}"#
        );
        assert_eq!(PurgeMessage::parse(&w.to_body()), Some(w));
        assert_eq!(
            PurgeMessage::parse(r#"{"address_id":"addr_x-1","watch":"expiry","due":5}"#),
            Some(PurgeMessage::expiry_watch("addr_x-1", 5)),
            "an expiry watch read either way"
        );
        assert_eq!(
            PurgeMessage::parse(r#"{"address_id":"addr_y","extra":1}"#),
            Some(PurgeMessage::new("addr_y"))
        );
        for bad in [
            "",
            "{}",
            "null",
            r#"{"address_id":7}"#,
            r#"{"address_id":"a/b"}"#,
            r#"{"address_id":""}"#,
            r#"{"address_id":"addr_y","watch":"someday","due":5}"#,
            r#"{"address_id":"addr_y","watch":7}"#,
        ] {
            assert_eq!(PurgeMessage::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_timer_watch_names_its_purpose_and_due_time() {
        let t = PurgeMessage::timer_watch("addr_x-1", 1_800_000_000_000);
        assert_eq!(
            t.to_body(),
            r#"{"address_id":"addr_x-1","watch":"timers","due":1800000000000}"#
        );
        assert_eq!(PurgeMessage::parse(&t.to_body()), Some(t.clone()));
        assert_eq!(t.watch, Some(Watch::Timers));
        assert_ne!(
            PurgeMessage::parse(&t.to_body()),
            Some(PurgeMessage::expiry_watch("addr_x-1", 1_800_000_000_000))
        );
        // A purge is neither.
        assert_eq!(PurgeMessage::new("addr_x-1").watch, None);
    }
}
