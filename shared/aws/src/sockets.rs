//! The AWS deployment's wake-up sockets (docs/API.md §17): which API Gateway WebSocket
//! connections are subscribed to which address, and the notifier that tells them when a feed
//! grew or an address was deleted.
//!
//! Items (single table):
//! - a subscription, `pk = A#{address}`, `sk = W#{connection}`: `conn`, `ttl`. In the address's
//!   partition, so the address's purge removes it with everything else;
//! - the address's subscription counter, `pk = A#{address}`, `sk = WN`: `epoch`, moved by every
//!   subscribe, so that two subscribes racing past the cap of 20 sockets cannot both commit
//!   (optimistic concurrency: each transaction is conditioned on the epoch it read);
//! - a connection, `pk = W#{connection}`, `sk = W`: `addrs` (its addresses, a string set of at
//!   most 20, the condition of each subscribe), `ttl`; `$disconnect` takes its `addrs` and marks
//!   it `closed` in one write, then removes the subscriptions it held. A subscribe is
//!   conditioned on the mark's absence, so one racing the `$disconnect` either commits first
//!   (and is among the `addrs` taken) or is refused: it cannot leave a subscription behind.
//!
//! The subscriptions and connections carry a TTL a little past the longest connection API
//! Gateway keeps (2 hours): `$disconnect` is best-effort, and a subscription whose `$disconnect`
//! never came is forgotten by then (and skipped as soon as its TTL passes, before DynamoDB
//! deletes it). The counter carries none (connections of different ages share it); the
//! address's purge removes it.
//!
//! The notifier runs in the appending function, after the commit ([`DynamoStore::with_sockets`]):
//! one strongly consistent Query of the address's subscriptions (one read unit when there are
//! none: docs/COSTS.md, "Wake-up sockets"), then one `PostToConnection` per subscriber, concurrently. A subscription is written
//! before its `subscribed` answer reads the feed's head, and the notifier's Query runs after
//! the append's commit, so every append after that head finds the subscription: none is missed.
//!
//! An address that expires says nothing when it does (its items simply stop being read), so a
//! subscribe to an address that expires within its subscription's lifetime starts an expiry
//! watch ([`DynamoStore::watch_expiry`], a [`Watch::Expiry`] of `watch`): a message on the purge
//! queue, delayed until the expiry (by hops of at most 15 minutes, SQS's longest delay), whose
//! handler tells the subscribed sockets `gone`. The counter item's `watch_until` (when the
//! pending message falls due) keeps it to one watch per address however many subscribes there
//! are: a subscribe starts one only when none is pending, and a message goes on only while
//! `watch_until` is still its own due time (a duplicate delivery of it ends there).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

use crate::capacity::Tally;
use crate::domain::patterns::{matches_any, TypePatterns};
use crate::domain::{socket, Millis};
use crate::item::*;
use crate::store::{StoreError, StoreResult};
use crate::watch::{Claim, Watch};
use crate::DynamoStore;

use crate::domain::socket::{MAX_SOCKETS_PER_ADDRESS, MAX_SUBSCRIPTIONS};
/// Tries of one subscribe that loses races with others (each round one of them commits).
const SUBSCRIBE_ROUNDS: u32 = MAX_SOCKETS_PER_ADDRESS as u32 + 8;
/// How long past its connection's start a subscription is kept at most: API Gateway closes every
/// connection after 2 hours, plus a margin.
pub const SUBSCRIPTION_LIFETIME: Duration = Duration::from_secs(2 * 3600 + 10 * 60);

fn sub_sk(connection_id: &str) -> String {
    format!("W#{connection_id}")
}

fn conn_pk(connection_id: &str) -> String {
    format!("W#{connection_id}")
}

const CONN_SK: &str = "W";
pub(crate) const COUNTER_SK: &str = "WN";

/// What a subscribe did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscribed {
    /// The connection is subscribed (again, if it was).
    Yes,
    /// The connection holds [`MAX_SUBSCRIPTIONS`] other addresses.
    ConnectionFull,
    /// [`MAX_SOCKETS_PER_ADDRESS`] other connections are subscribed to the address.
    AddressFull,
    /// The connection's `$disconnect` has run: nothing was written.
    Closed,
}

/// Why a post to a connection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostError {
    /// API Gateway answered 410: the connection is gone.
    Gone,
    /// Anything else (throttling that outlasted the back-off included).
    Failed(String),
}

/// Sends frames to connections: API Gateway's Management API in the functions
/// (`agentaddress-functions`), anything that records them in tests.
#[async_trait::async_trait]
pub trait ConnectionPoster: std::fmt::Debug + Send + Sync {
    async fn post(&self, connection_id: &str, frame: &[u8]) -> Result<(), PostError>;
}

impl DynamoStore {
    /// Tells the address's subscribed sockets, after every commit that appends to a feed or
    /// deletes an address, through `poster` (module docs).
    pub fn with_sockets(mut self, poster: Arc<dyn ConnectionPoster>) -> Self {
        self.sockets = Some(poster);
        self
    }

    /// Subscribes `connection_id` to `address_id` until `until` (the connection's start plus
    /// [`SUBSCRIPTION_LIFETIME`]). The caller has checked the read token.
    /// With `types`, only appends of those types notify it (docs/API.md §21); a subscription's
    /// types are those of its first subscribe.
    pub async fn subscribe_socket(
        &self, address_id: &str, connection_id: &str, types: Option<&TypePatterns>, until: Millis,
        now: Millis,
    ) -> StoreResult<Subscribed> {
        let ttl = n(ttl_secs(until));
        // Each round commits at least one of the racing subscribes, and a subscribe that finds
        // the cap reached stops: rounds for every place, with jittered waits between them.
        for attempt in 0..SUBSCRIBE_ROUNDS {
            if attempt > 0 {
                crate::retry::jittered_backoff(
                    attempt.min(4),
                    Duration::from_millis(5),
                    Duration::from_millis(100),
                )
                .await;
            }
            let counter = self
                .get(address_id, COUNTER_SK.into())
                .await?
                .map(|item| Fields::of(&item, "socket counter").count("epoch"))
                .transpose()?;
            let subscribers = self.live_subscribers(address_id, now).await?;
            // Subscribed already (until the same end: a connection's subscriptions all end
            // with it): nothing to write.
            if subscribers.iter().any(|c| c == connection_id) {
                return Ok(Subscribed::Yes);
            }
            if subscribers.len() >= MAX_SOCKETS_PER_ADDRESS {
                return Ok(Subscribed::AddressFull);
            }
            let epoch = counter.unwrap_or(0);
            let counter_update = {
                let mut u = Update::builder()
                    .table_name(&self.table)
                    .set_key(Some(key(pk(address_id), COUNTER_SK.into())))
                    .update_expression("SET epoch = :next")
                    .expression_attribute_values(":next", n(epoch + 1));
                u = match counter {
                    Some(_) => u
                        .condition_expression("epoch = :seen")
                        .expression_attribute_values(":seen", n(epoch)),
                    None => u.condition_expression("attribute_not_exists(epoch)"),
                };
                u.build().map_err(build_err)?
            };
            let mut sub = Put::builder()
                .table_name(&self.table)
                .item("pk", s(pk(address_id)))
                .item("sk", s(sub_sk(connection_id)))
                .item("conn", s(connection_id))
                .item("ttl", ttl.clone());
            if let Some(types) = types {
                let list = types.as_slice().iter().map(s).collect();
                sub = sub.item("types", AttributeValue::L(list));
            }
            let sub = sub.build().map_err(build_err)?;
            let conn = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key(conn_pk(connection_id), CONN_SK.into())))
                .update_expression("ADD addrs :a SET #ttl = :ttl")
                .condition_expression(
                    "attribute_not_exists(closed) AND (attribute_not_exists(addrs) \
                     OR size(addrs) < :max OR contains(addrs, :id))",
                )
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":a", AttributeValue::Ss(vec![address_id.into()]))
                .expression_attribute_values(":id", s(address_id))
                .expression_attribute_values(":max", n(MAX_SUBSCRIPTIONS))
                .expression_attribute_values(":ttl", ttl.clone())
                .build()
                .map_err(build_err)?;
            let result = self
                .client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().update(counter_update).build())
                .transact_items(TransactWriteItem::builder().put(sub).build())
                .transact_items(TransactWriteItem::builder().update(conn).build())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .tally(&self.metrics);
            match result {
                Ok(_) => return Ok(Subscribed::Yes),
                Err(e) => {
                    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
                    let reasons = match e.as_service_error() {
                        Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                            c.cancellation_reasons().to_vec()
                        }
                        _ => return Err(sdk_err("TransactWriteItems subscribe", e)),
                    };
                    let failed = |i: usize| {
                        reasons
                            .get(i)
                            .and_then(|r| r.code())
                            .is_some_and(|c| c == "ConditionalCheckFailed")
                    };
                    if failed(2) {
                        let closed = reasons
                            .get(2)
                            .and_then(|r| r.item())
                            .is_some_and(|item| item.contains_key("closed"));
                        return Ok(if closed {
                            Subscribed::Closed
                        } else {
                            Subscribed::ConnectionFull
                        });
                    }
                    // The counter moved (another subscribe) or a transaction conflict: again.
                }
            }
        }
        Err(StoreError::Unavailable(
            "subscribe: too many concurrent subscribes".into(),
        ))
    }

    /// Ends `connection_id`'s subscription to `address_id` (nothing if there is none).
    pub async fn unsubscribe_socket(
        &self, address_id: &str, connection_id: &str,
    ) -> StoreResult<()> {
        self.forget_subscription(address_id, connection_id).await?;
        self.release_slot(address_id, connection_id).await
    }

    /// Takes `address_id` out of `connection_id`'s addresses (its place under the cap).
    async fn release_slot(&self, address_id: &str, connection_id: &str) -> StoreResult<()> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(conn_pk(connection_id), CONN_SK.into())))
            .update_expression("DELETE addrs :a")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":a", AttributeValue::Ss(vec![address_id.into()]))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map(|_| ())
            .or_else(|e| {
                use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
                match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(()),
                    _ => Err(sdk_err("UpdateItem connection", e)),
                }
            })
    }

    /// Removes everything of `connection_id` (its `$disconnect`, at `now`); the addresses it was
    /// subscribed to. The connection item stays, marked `closed` (module docs), until its TTL:
    /// the connection's end at the latest, or [`SUBSCRIPTION_LIFETIME`] from `now` for a
    /// connection that never subscribed.
    pub async fn drop_connection(
        &self, connection_id: &str, now: Millis,
    ) -> StoreResult<Vec<String>> {
        let lifetime = Millis::try_from(SUBSCRIPTION_LIFETIME.as_millis()).unwrap_or(Millis::MAX);
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(conn_pk(connection_id), CONN_SK.into())))
            .update_expression("SET closed = :yes, #ttl = if_not_exists(#ttl, :ttl) REMOVE addrs")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .expression_attribute_values(":ttl", n(ttl_secs(now.saturating_add(lifetime))))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("UpdateItem connection", e))?;
        let addresses: Vec<String> = out
            .attributes
            .as_ref()
            .and_then(|a| a.get("addrs"))
            .and_then(|v| v.as_ss().ok())
            .cloned()
            .unwrap_or_default();
        for address_id in &addresses {
            self.forget_subscription(address_id, connection_id).await?;
        }
        Ok(addresses)
    }

    async fn forget_subscription(&self, address_id: &str, connection_id: &str) -> StoreResult<()> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(address_id), sub_sk(connection_id))))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map(|_| ())
            .map_err(|e| sdk_err("DeleteItem subscription", e))
    }

    /// The connections subscribed to `address_id` whose subscription has not expired at `now`
    /// (strongly consistent: a subscription committed before this call is among them).
    pub async fn live_subscribers(
        &self, address_id: &str, now: Millis,
    ) -> StoreResult<Vec<String>> {
        Ok(self
            .live_subscriptions(address_id, now)
            .await?
            .into_iter()
            .map(|(conn, _)| conn)
            .collect())
    }

    /// [`DynamoStore::live_subscribers`] with each subscription's types (`None`: every
    /// append notifies it).
    async fn live_subscriptions(
        &self, address_id: &str, now: Millis,
    ) -> StoreResult<Vec<(String, Option<Vec<String>>)>> {
        let now_secs = now.div_euclid(1000);
        Ok(self
            .items_with_prefix(
                address_id,
                "W#",
                "conn, #ttl, #types",
                &[("#ttl", "ttl"), ("#types", "types")],
                "Query subscriptions",
            )
            .await?
            .iter()
            .filter(|item| get_i(item, "ttl").is_none_or(|t| t > now_secs))
            .filter_map(|item| {
                let types = match item.get("types") {
                    Some(AttributeValue::L(list)) => Some(
                        list.iter()
                            .filter_map(|v| v.as_s().ok().cloned())
                            .collect::<Vec<_>>(),
                    ),
                    _ => None,
                };
                get_s(item, "conn").map(|conn| (conn, types))
            })
            .collect())
    }

    /// Tells the sockets subscribed to `address_id` (if this store has a poster): `notify`
    /// with `last_sequence`, or `gone` when `last_sequence` is `None` (the address was
    /// deleted). `appended`: the types of the events the commit appended, so that a
    /// subscription with types is told only of a matching one (empty: not known, every
    /// subscription is told). Never fails: the commit it follows stands; a failure is logged, a
    /// connection API Gateway calls gone is unsubscribed.
    pub(crate) async fn tell_sockets(
        &self, address_id: &str, last_sequence: Option<u64>, appended: &[String], now: Millis,
    ) {
        let Some(poster) = self.sockets.as_deref() else {
            return;
        };
        let subscribers: Vec<String> = match self.live_subscriptions(address_id, now).await {
            Ok(s) => s
                .into_iter()
                .filter(|(_, types)| match (last_sequence, types) {
                    (Some(_), Some(types)) if !appended.is_empty() => {
                        appended.iter().any(|t| matches_any(types, t))
                    }
                    _ => true,
                })
                .map(|(conn, _)| conn)
                .collect(),
            Err(e) => {
                tracing::warn!(%address_id, error = %e, "cannot read the address's sockets");
                return;
            }
        };
        if subscribers.is_empty() {
            return;
        }
        let frame = match last_sequence {
            Some(seq) => socket::notify(address_id, seq),
            None => socket::gone(address_id),
        }
        .to_string();
        let posts = subscribers.iter().map(|conn| {
            let frame = frame.as_bytes();
            async move { (conn, poster.post(conn, frame).await) }
        });
        for (conn, outcome) in futures::future::join_all(posts).await {
            match outcome {
                Ok(()) => {
                    // Told `gone`: the subscription ends, and its place on the socket frees.
                    if last_sequence.is_none() {
                        if let Err(e) = self.unsubscribe_socket(address_id, conn).await {
                            tracing::warn!(%address_id, error = %e, "cannot end a gone address's subscription");
                        }
                    }
                }
                Err(PostError::Gone) => {
                    tracing::info!(%address_id, connection_id = %conn, "socket gone: unsubscribed");
                    if let Err(e) = self.forget_subscription(address_id, conn).await {
                        tracing::warn!(%address_id, error = %e, "cannot unsubscribe a gone socket");
                    }
                }
                Err(PostError::Failed(why)) => {
                    tracing::warn!(%address_id, connection_id = %conn, error = %why, "cannot tell a socket");
                }
            }
        }
    }
}

impl DynamoStore {
    /// Starts an expiry watch of `address_id` (module docs) if it expires (`expires_at`) before
    /// `until`, the end of the subscription just made, and no watch is pending. Without a purge
    /// queue, nothing.
    pub async fn watch_expiry(
        &self, address_id: &str, expires_at: Option<Millis>, until: Millis, now: Millis,
    ) -> StoreResult<()> {
        let Some(at) = expires_at.filter(|at| *at < until) else {
            return Ok(());
        };
        // `false`: a watch is pending, and it goes on while sockets are subscribed.
        self.watch_from(address_id, Watch::Expiry, at, now, Claim::NonePending)
            .await
            .map(|_| ())
    }

    /// Handles an expiry watch of `address_id` that fell due (at `due`): tells its subscribed
    /// sockets `gone` if it is gone; else, while sockets are subscribed, watches on until it
    /// expires.
    pub async fn check_expiry(
        &self, address_id: &str, due: Option<Millis>, now: Millis,
    ) -> StoreResult<()> {
        let record = match self.meta(address_id).await? {
            Some(meta) => crate::store::AddressRecord::from_item(&meta)?,
            // Its tombstone is gone too (purged, or forgotten by its TTL): whatever socket is
            // still subscribed is told.
            None => {
                self.tell_sockets(address_id, None, &[], now).await;
                return Ok(());
            }
        };
        if record.is_gone(now) {
            tracing::info!(%address_id, "expiry watch: the address is gone; telling its sockets");
            self.tell_sockets(address_id, None, &[], now).await;
            return Ok(());
        }
        // No longer expires, or nobody listens: the watch ends (a later subscribe starts one).
        let Some(at) = record.expires_at else {
            return Ok(());
        };
        if self.live_subscribers(address_id, now).await?.is_empty() {
            return Ok(());
        }
        let claim = match due {
            Some(due) => Claim::Continues(due),
            None => Claim::NonePending,
        };
        self.watch_from(address_id, Watch::Expiry, at, now, claim)
            .await
            .map(|_| ())
    }
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Internal(format!("request: {e}"))
}
