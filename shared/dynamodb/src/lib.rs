//! The AWS store: one DynamoDB table (on-demand, TTL on `ttl`), items keyed by address.
//!
//! | item | pk | sk |
//! |---|---|---|
//! | address | `A#{id}` | `META` (seq, state_keys, state_bytes, hashes, deleted_at, ttl) |
//! | state key | `A#{id}` | `S#{key}` |
//! | event | `A#{id}` | `E#{seq:020}` (data beyond ~300 KB in chunk items `E#{seq:020}#{n:03}`) |
//! | idempotency | `A#{id}` | `I#{sha256(key)}` |
//! | rate window | `R#{scope}#{minute}` | `R` |
//!
//! Every append (delivery, state write, state delete) is ONE `TransactWriteItems`: the META
//! sequence bump conditioned on the sequence read, the event conditioned on not existing, the
//! state item conditioned on its revision, the idempotency item conditioned on not existing (or
//! being expired). Cancellation reasons are read item by item: a lost sequence race re-reads and
//! retries (bounded, with jitter); a failed state condition is `revision_conflict` with the
//! revision from `ALL_OLD`; an existing idempotency item returns the original event.
//! Ambiguous failures (timeouts, resets, 5xx) are retried only by the SDK, which re-sends the
//! same request with the same `ClientRequestToken` (DynamoDB applies it at most once); when
//! those retries are exhausted we answer `unavailable` and never re-run the read-modify-write.
//! Reads are strongly consistent and filter expiry themselves; TTL only cleans up.
//!
//! ## Ambiguous outcomes: applied once, answered right
//! The SDK re-sends a request whose answer was lost (connection reset, timeout, 5xx,
//! throttling) up to [`SDK_MAX_ATTEMPTS`] times ([`client_config`]). Each write path is safe
//! when an earlier attempt applied and a later one sees the result:
//! - **appends** (`TransactWriteItems`): the token is set explicitly, once per transaction, so
//!   every SDK attempt carries it and DynamoDB returns success without applying again. Should a
//!   re-sent transaction ever be cancelled instead (a token not honoured), the cancellation
//!   reasons show the event item (or idempotency item) holding *our* fresh random event id:
//!   [`applied_by_us`] recognises that and answers success; it is never read as a lost race,
//!   a revision conflict, a missing key or a duplicate delivery.
//! - **create** (`PutItem attribute_not_exists`): a re-send that fails its condition on a META
//!   with our token hash, inbox hash and creation time is our own write: success.
//! - **delete** (conditional `UpdateItem`): every deletion writes a random `deleted_by`; a
//!   re-send that fails its condition on a tombstone with our `deleted_by` is our own deletion:
//!   204, and the purge message is sent.
//! - **ack** (`SET acked_at = if_not_exists(acked_at, :now)`): idempotent by construction.
//! - **rate-limit counters** (`ADD count 1`): a re-send after an applied attempt counts twice.
//!   Accepted: it can only make a limit bite one request early, never late.
//! - **purge** (`BatchWriteItem` deletes, SQS messages): deleting twice is harmless; a purge
//!   message sent twice purges an already empty partition.
//!
//! `delete` and `ack` re-send themselves when DynamoDB rejects them with
//! `TransactionConflictException` (an append transaction held the item; nothing applied).
//! When every SDK attempt fails, the answer is `unavailable` (503 with `Retry-After`), never a
//! definite answer the store cannot vouch for.
#![forbid(unsafe_code)]

use agentaddress_core::{domain, store};

mod capacity;
mod config;
mod item;

use capacity::Tally;
pub use capacity::{CapacityUsage, Metrics};
pub use config::{sdk_config, AwsConfig};
pub use item::split_utf8;
use item::*;

use std::collections::HashMap;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Delete, Put, ReturnConsumedCapacity, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use rand::Rng;

use crate::domain::state::entry_size;
use crate::domain::{ids, Limits, Millis};
use crate::store::rules::{self, check_expected, rate_window, Quota, StateTotals};
use crate::store::{
    Acked, AddressRecord, Appended, Event, EventPage, EventRef, IdempotencyClaim, NewAddress,
    NewEvent, StateDeleted, StateEntry, StateListing, StateMeta, StateWritten, Store, StoreError,
    StoreResult, SweepReport, Usage,
};

type Item = HashMap<String, AttributeValue>;

/// Bytes of event data kept in the event item itself; the rest goes to chunk items.
pub const CHUNK_BYTES: usize = 300_000;
/// Attempts at an append that keeps losing the sequence race to other writers.
const MAX_APPEND_ATTEMPTS: u32 = 60;
/// Attempts at a conditional `UpdateItem` (delete, ack) that DynamoDB keeps rejecting with
/// `TransactionConflictException`.
const MAX_CONFLICT_ATTEMPTS: u32 = 8;

/// Attempts per DynamoDB request, retries included (the SDK's standard retry mode; its default
/// is 3). Like the AWS Java SDK's DynamoDB default (8 retries, 25 ms base delay), so that
/// throttling and transient 5xx or network faults rarely surface as 503.
pub const SDK_MAX_ATTEMPTS: u32 = 8;
/// First retry delay; each retry doubles it (full jitter), up to [`SDK_MAX_BACKOFF`].
pub const SDK_INITIAL_BACKOFF: Duration = Duration::from_millis(25);
/// Longest delay between two attempts. With [`SDK_MAX_ATTEMPTS`], one request sleeps at most
/// 25+50+…+800+1000 ms ≈ 2.6 s (1.3 s on average) before giving up: a handler of a few requests
/// still answers within the functions' 10 s timeout in all but pathological cases.
pub const SDK_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The DynamoDB client configuration every deployment uses: `sdk` (endpoint, region,
/// credentials from the environment) with the retry policy above.
pub fn client_config(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::from(sdk).retry_config(
        RetryConfig::standard()
            .with_max_attempts(SDK_MAX_ATTEMPTS)
            .with_initial_backoff(SDK_INITIAL_BACKOFF)
            .with_max_backoff(SDK_MAX_BACKOFF),
    )
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    tombstone_ms: i64,
    purge: Option<PurgeQueue>,
    metrics: Arc<Metrics>,
}

/// Where DELETE sends the address to purge.
#[derive(Debug, Clone)]
pub struct PurgeQueue {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
}

/// What one purge step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeProgress {
    pub deleted_items: u64,
    /// `false` when items remain: send the message again.
    pub done: bool,
}

/// How a cancelled append transaction is to be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// Another writer moved the sequence (or a transient conflict): re-read and retry.
    Retry,
    /// The address was deleted or has expired meanwhile.
    Gone,
    /// The state item's condition failed; its current revision, `None` if it does not exist.
    StateConflict(Option<u64>),
    /// The idempotency item exists: its event and body hash.
    Idempotent { event: EventRef, body_hash: String },
}

/// Reads the cancellation reasons of an append transaction item by item. `meta`, `state` and
/// `idem` are the positions of those items in the transaction.
pub fn classify_cancellation(
    reasons: &[CancellationReason],
    meta: usize,
    state: Option<usize>,
    idem: Option<usize>,
    now: Millis,
) -> Cancelled {
    let failed = |i: usize| {
        reasons
            .get(i)
            .and_then(|r| r.code())
            .is_some_and(|c| c == "ConditionalCheckFailed")
    };
    if let Some(i) = idem.filter(|i| failed(*i)) {
        if let Some(item) = reasons.get(i).and_then(|r| r.item()) {
            return Cancelled::Idempotent {
                event: EventRef {
                    id: get_s(item, "event_id").unwrap_or_default(),
                    sequence: get_u(item, "seq"),
                },
                body_hash: get_s(item, "body_hash").unwrap_or_default(),
            };
        }
    }
    let meta_gone = reasons
        .get(meta)
        .and_then(|r| r.item())
        .is_some_and(|item| {
            item.contains_key("deleted_at") || get_i(item, "expires_at").is_some_and(|e| e <= now)
        });
    if failed(meta) && meta_gone {
        return Cancelled::Gone;
    }
    if let Some(i) = state.filter(|i| failed(*i)) {
        let current = reasons
            .get(i)
            .and_then(|r| r.item())
            .map(|item| get_u(item, "revision"));
        return Cancelled::StateConflict(current);
    }
    Cancelled::Retry
}

/// Whether a cancelled append transaction was in fact applied by an earlier attempt of the same
/// transaction: the event item at `event` (or the idempotency item at `idem`) failed its
/// `attribute_not_exists` condition holding `event_id`, which was minted at random for this
/// transaction only. Then the whole transaction applied (it is atomic) and its answer is
/// success, not a lost race, a conflict or a duplicate.
pub fn applied_by_us(
    reasons: &[CancellationReason],
    event: usize,
    idem: Option<usize>,
    event_id: &str,
) -> bool {
    let holds_ours = |i: usize, field: &str| {
        reasons.get(i).is_some_and(|r| {
            r.code() == Some("ConditionalCheckFailed")
                && r.item()
                    .and_then(|item| get_s(item, field))
                    .is_some_and(|id| id == event_id)
        })
    };
    holds_ours(event, "id") || idem.is_some_and(|i| holds_ours(i, "event_id"))
}

/// The state change that rides along with an appended event.
enum StateChange {
    Put {
        key: String,
        value: String,
        size: u64,
        /// The revision read before the transaction (`None`: absent).
        read_revision: Option<u64>,
        keys: u64,
        bytes: u64,
    },
    Delete {
        key: String,
        read_revision: u64,
        keys: u64,
        bytes: u64,
    },
}

impl DynamoStore {
    /// The address's last sequence from its META item; `consistent: false` is half the read
    /// units and may lag a write by a moment.
    async fn feed_head(&self, id: &str, now: Millis, consistent: bool) -> StoreResult<u64> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), "META".into())))
            .projection_expression("id, seq, deleted_at, expires_at")
            .consistent_read(consistent)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem seq", e))?;
        let item = out.item.ok_or(StoreError::AddressNotFound)?;
        if item.contains_key("deleted_at") || get_i(&item, "expires_at").is_some_and(|e| e <= now) {
            return Err(StoreError::AddressGone);
        }
        Ok(get_u(&item, "seq"))
    }

    /// A store over `table`. Tombstones of deleted or expired addresses are forgotten
    /// `tombstone_seconds` after deletion or expiry.
    pub fn new(client: Client, table: impl Into<String>, tombstone_seconds: u64) -> Self {
        Self {
            client,
            table: table.into(),
            tombstone_ms: i64::try_from(tombstone_seconds.saturating_mul(1000)).unwrap_or(i64::MAX),
            purge: None,
            metrics: Arc::default(),
        }
    }

    /// Requests and capacity units consumed so far by this store (and its clones).
    pub fn metrics(&self) -> CapacityUsage {
        self.metrics.snapshot()
    }

    /// Sends deleted addresses to `queue` for purging.
    pub fn with_purge_queue(mut self, queue: PurgeQueue) -> Self {
        self.purge = Some(queue);
        self
    }

    /// A client configured from the environment (`AWS_ENDPOINT_URL_DYNAMODB` and the rest of
    /// the SDK's standard variables), with [`client_config`]'s retry policy.
    pub async fn client_from_env() -> Client {
        Self::client(&config::sdk_config().await)
    }

    /// A client of `sdk` with [`client_config`]'s retry policy.
    pub fn client(sdk: &aws_config::SdkConfig) -> Client {
        Client::from_conf(client_config(sdk).build())
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    async fn meta(&self, id: &str) -> StoreResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), "META".into())))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem META", e))?;
        Ok(out.item)
    }

    async fn live(&self, id: &str, now: Millis) -> StoreResult<AddressRecord> {
        let item = self.meta(id).await?.ok_or(StoreError::AddressNotFound)?;
        let record = record_from(&item)?;
        if record.is_gone(now) {
            return Err(StoreError::AddressGone);
        }
        Ok(record)
    }

    async fn get(&self, id: &str, sk: String) -> StoreResult<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), sk)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem", e))?;
        Ok(out.item)
    }

    /// `Ok(())` when appending `seq` keeps the feed within its quota: event `seq - max` is
    /// past retention or gone (events expire in sequence order).
    /// The feed quota of `rules::quota` for appending `seq`.
    async fn quota_allows(
        &self,
        id: &str,
        seq: u64,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<bool> {
        let deciding = match rules::quota(seq, limits) {
            Quota::Allows => return Ok(true),
            Quota::Full => return Ok(false),
            Quota::DecidedBy(deciding) => deciding,
        };
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), event_sk(deciding))))
            .projection_expression("expires_at")
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem quota", e))?;
        let expires_at = out
            .item
            .map(|item| get_i(&item, "expires_at").unwrap_or(i64::MIN));
        Ok(rules::quota_allows(expires_at, now))
    }

    /// The live idempotency record of `claim`, if any.
    async fn idempotency(
        &self,
        id: &str,
        claim: &IdempotencyClaim,
        now: Millis,
    ) -> StoreResult<Option<(EventRef, String)>> {
        let item = self.get(id, format!("I#{}", claim.key_hash)).await?;
        Ok(item
            .filter(|i| get_i(i, "expires_at").is_some_and(|e| e > now))
            .map(|i| {
                (
                    EventRef {
                        id: get_s(&i, "event_id").unwrap_or_default(),
                        sequence: get_u(&i, "seq"),
                    },
                    get_s(&i, "body_hash").unwrap_or_default(),
                )
            }))
    }

    /// Builds and runs the append transaction for `event` at `address.last_sequence + 1`.
    /// Returns `Ok(Err(cancelled))` when DynamoDB cancelled it.
    #[allow(clippy::too_many_arguments)]
    async fn append_tx(
        &self,
        address: &AddressRecord,
        event: &NewEvent,
        claim: Option<&IdempotencyClaim>,
        state: Option<&StateChange>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<Result<EventRef, Cancelled>> {
        let id = &address.id;
        let cur = address.last_sequence;
        let seq = cur + 1;
        let event_id = ids::new_event_id(seq);
        let expires_at = limits.event_expiry(now, address.expires_at);
        let mut items = Vec::new();

        let mut update_expr = String::from("SET seq = :next");
        let mut values: Item = HashMap::from([
            (":next".into(), n(seq)),
            (":cur".into(), n(cur)),
            (":now".into(), n(now)),
        ]);
        match state {
            Some(StateChange::Put { keys, bytes, .. })
            | Some(StateChange::Delete { keys, bytes, .. }) => {
                update_expr.push_str(", state_keys = :keys, state_bytes = :bytes");
                values.insert(":keys".into(), n(keys));
                values.insert(":bytes".into(), n(bytes));
            }
            None => {}
        }
        items.push(
            TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(&self.table)
                        .set_key(Some(key(pk(id), "META".into())))
                        .update_expression(update_expr)
                        .condition_expression(
                            "seq = :cur AND attribute_not_exists(deleted_at) AND \
                             (attribute_not_exists(expires_at) OR expires_at > :now)",
                        )
                        .set_expression_attribute_values(Some(values))
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .build()
                        .map_err(|e| StoreError::Internal(e.to_string()))?,
                )
                .build(),
        );
        let meta_index = 0;
        let event_index = 1;

        let parts = split_utf8(&event.data, CHUNK_BYTES);
        let mut ev: Item = key(pk(id), event_sk(seq));
        ev.insert("id".into(), s(&event_id));
        ev.insert("seq".into(), n(seq));
        ev.insert("type".into(), s(&event.event_type));
        if let Some(src) = &event.source {
            ev.insert("source".into(), s(src));
        }
        ev.insert("ingress".into(), s(event.ingress.as_str()));
        ev.insert("received_at".into(), n(now));
        ev.insert("expires_at".into(), n(expires_at));
        ev.insert("ttl".into(), n(ttl_secs(expires_at)));
        ev.insert("data".into(), s(parts[0]));
        ev.insert("chunks".into(), n(parts.len() - 1));
        if let Some(h) = &event.http {
            ev.insert("http".into(), s(h));
        }
        items.push(put(
            &self.table,
            ev,
            Some("attribute_not_exists(pk)"),
            None,
        )?);
        for (i, part) in parts.iter().enumerate().skip(1) {
            let mut chunk = key(pk(id), format!("{}#{i:03}", event_sk(seq)));
            chunk.insert("part".into(), s(*part));
            chunk.insert("ttl".into(), n(ttl_secs(expires_at)));
            items.push(put(&self.table, chunk, None, None)?);
        }

        let mut state_index = None;
        if let Some(change) = state {
            state_index = Some(items.len());
            let state_ttl = address.expires_at.map(ttl_secs);
            match change {
                StateChange::Put {
                    key: k,
                    value,
                    size,
                    read_revision,
                    ..
                } => {
                    let mut item = key(pk(id), format!("S#{k}"));
                    item.insert("key".into(), s(k));
                    item.insert("value".into(), s(value));
                    item.insert("revision".into(), n(seq));
                    item.insert("size".into(), n(size));
                    item.insert("updated_at".into(), n(now));
                    if let Some(t) = state_ttl {
                        item.insert("ttl".into(), n(t));
                    }
                    let (cond, vals) = match read_revision {
                        None => ("attribute_not_exists(pk)", None),
                        Some(r) => (
                            "revision = :rev",
                            Some(HashMap::from([(":rev".to_owned(), n(r))])),
                        ),
                    };
                    items.push(put(&self.table, item, Some(cond), vals)?);
                }
                StateChange::Delete {
                    key: k,
                    read_revision,
                    ..
                } => {
                    items.push(
                        TransactWriteItem::builder()
                            .delete(
                                Delete::builder()
                                    .table_name(&self.table)
                                    .set_key(Some(key(pk(id), format!("S#{k}"))))
                                    .condition_expression("revision = :rev")
                                    .expression_attribute_values(":rev", n(read_revision))
                                    .return_values_on_condition_check_failure(
                                        ReturnValuesOnConditionCheckFailure::AllOld,
                                    )
                                    .build()
                                    .map_err(|e| StoreError::Internal(e.to_string()))?,
                            )
                            .build(),
                    );
                }
            }
        }

        let mut idem_index = None;
        if let Some(claim) = claim {
            idem_index = Some(items.len());
            let mut item = key(pk(id), format!("I#{}", claim.key_hash));
            item.insert("seq".into(), n(seq));
            item.insert("event_id".into(), s(&event_id));
            item.insert("body_hash".into(), s(&claim.body_hash));
            item.insert("expires_at".into(), n(expires_at));
            item.insert("ttl".into(), n(ttl_secs(expires_at)));
            items.push(put(
                &self.table,
                item,
                Some("attribute_not_exists(pk) OR expires_at <= :now"),
                Some(HashMap::from([(":now".to_owned(), n(now))])),
            )?);
        }

        // One token per transaction, set here and not by the SDK: every SDK attempt of this
        // call re-sends it unchanged, and a new read-modify-write gets a new one.
        let token = uuid_like();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        let ours = EventRef {
            id: event_id,
            sequence: seq,
        };
        match result {
            Ok(_) => Ok(Ok(ours)),
            Err(SdkError::ServiceError(ctx)) => {
                use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError as E;
                match ctx.err() {
                    E::TransactionCanceledException(c) => {
                        let reasons = c.cancellation_reasons();
                        if applied_by_us(reasons, event_index, idem_index, &ours.id) {
                            tracing::warn!(
                                address_id = %id, sequence = seq,
                                "a re-sent transaction was cancelled by its own earlier attempt; \
                                 answering its success"
                            );
                            return Ok(Ok(ours));
                        }
                        Ok(Err(classify_cancellation(
                            reasons,
                            meta_index,
                            state_index,
                            idem_index,
                            now,
                        )))
                    }
                    _ => Err(sdk_err("TransactWriteItems", SdkError::ServiceError(ctx))),
                }
            }
            // Unanswered after every SDK attempt: it may have applied, so the caller answers
            // `unavailable` and never re-runs the read-modify-write.
            Err(e) => Err(sdk_err("TransactWriteItems", e)),
        }
    }

    /// One step of purging a deleted (or expired) address: deletes up to `budget` of its
    /// items other than the META tombstone. Refuses a live address.
    pub async fn purge_address(
        &self,
        id: &str,
        budget: usize,
        now: Millis,
    ) -> StoreResult<PurgeProgress> {
        let Some(meta) = self.meta(id).await? else {
            return Ok(PurgeProgress {
                deleted_items: 0,
                done: true,
            });
        };
        if !record_from(&meta)?.is_gone(now) {
            return Err(StoreError::Internal(format!(
                "refusing to purge live address {id}"
            )));
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
                key(
                    get_s(i, "pk").unwrap_or_default(),
                    get_s(i, "sk").unwrap_or_default(),
                )
            })
            .collect();
        let more = out.last_evaluated_key().is_some() || others.len() > budget;
        let keys = &others[..others.len().min(budget)];
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
        Ok(PurgeProgress {
            deleted_items: found as u64,
            done,
        })
    }

    /// Sends `id` to the purge queue (if one is configured).
    pub async fn enqueue_purge(&self, id: &str) -> StoreResult<()> {
        let Some(q) = &self.purge else {
            return Ok(());
        };
        q.client
            .send_message()
            .queue_url(&q.queue_url)
            .message_body(serde_json::json!({ "address_id": id }).to_string())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| StoreError::Unavailable(format!("SendMessage: {e:?}")))
    }
}

/// Handles one purge message (`{"address_id": …}`): deletes up to `steps` batches of the
/// address's items and, when some remain, sends the message again so another invocation goes on.
pub async fn handle_purge_message(
    store: &DynamoStore,
    body: &str,
    steps: usize,
    now: Millis,
) -> StoreResult<PurgeProgress> {
    let id = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["address_id"].as_str().map(str::to_owned))
        .filter(|id| ids::is_valid_id(id))
        .ok_or_else(|| StoreError::Internal("purge message without a valid address_id".into()))?;
    let mut total = 0;
    for _ in 0..steps.max(1) {
        let step = store.purge_address(&id, 500, now).await?;
        total += step.deleted_items;
        if step.done {
            tracing::info!(address_id = %id, deleted_items = total, "purged");
            return Ok(PurgeProgress {
                deleted_items: total,
                done: true,
            });
        }
    }
    store.enqueue_purge(&id).await?;
    Ok(PurgeProgress {
        deleted_items: total,
        done: false,
    })
}

fn put(
    table: &str,
    item: Item,
    condition: Option<&str>,
    values: Option<Item>,
) -> StoreResult<TransactWriteItem> {
    let mut p = Put::builder().table_name(table).set_item(Some(item));
    if let Some(c) = condition {
        p = p
            .condition_expression(c)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
    }
    if let Some(v) = values {
        p = p.set_expression_attribute_values(Some(v));
    }
    Ok(TransactWriteItem::builder()
        .put(p.build().map_err(|e| StoreError::Internal(e.to_string()))?)
        .build())
}

/// A random idempotency token for one transaction (DynamoDB takes up to 36 characters).
fn uuid_like() -> String {
    let bytes: [u8; 16] = rand::thread_rng().gen();
    hex::encode(bytes)
}

/// The one retry loop of the append paths (delivery, state write, state delete): `attempt`
/// reads what it needs and tries its transaction once, answering `Ok(Some(_))` when settled,
/// `Ok(None)` when it lost a race (another writer took the sequence) and must re-read, or an
/// error. Retries back off with jitter; after [`MAX_APPEND_ATTEMPTS`] lost races the answer is
/// 503 `unavailable` (safe to retry: nothing was applied).
async fn with_append_retries<T, F, Fut>(mut attempt: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<Option<T>>>,
{
    for n in 0..MAX_APPEND_ATTEMPTS {
        if let Some(settled) = attempt().await? {
            return Ok(settled);
        }
        backoff(n).await;
    }
    Err(StoreError::Unavailable(
        "too much contention on this address".into(),
    ))
}

fn totals_of(address: &AddressRecord) -> StateTotals {
    StateTotals {
        keys: address.state_keys,
        bytes: address.state_bytes,
    }
}

async fn backoff(attempt: u32) {
    let cap = 5u64.saturating_mul(1 << attempt.min(6)).min(250);
    let ms = rand::thread_rng().gen_range(1..=cap);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Sends a non-transactional write again (with jitter) while DynamoDB rejects it with
/// `TransactionConflictException`: an append transaction held the item, and the write did not
/// apply. Only for writes that are safe to repeat (see the module docs).
async fn resend_on_conflict<T, E, R, F, Fut>(mut send: F) -> Result<T, SdkError<E, R>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata,
{
    let mut attempt = 0;
    loop {
        let result = send().await;
        let conflict = matches!(
            &result,
            Err(SdkError::ServiceError(ctx))
                if ctx.err().code() == Some("TransactionConflictException")
        );
        if !conflict || attempt + 1 >= MAX_CONFLICT_ATTEMPTS {
            return result;
        }
        backoff(attempt).await;
        attempt += 1;
    }
}

#[async_trait]
impl Store for DynamoStore {
    fn kind(&self) -> &'static str {
        "dynamodb"
    }

    async fn create_address(&self, a: NewAddress) -> StoreResult<()> {
        let mut item = key(pk(&a.id), "META".into());
        item.insert("id".into(), s(&a.id));
        if let Some(v) = &a.name {
            item.insert("name".into(), s(v));
        }
        if let Some(v) = &a.task_id {
            item.insert("task_id".into(), s(v));
        }
        item.insert("email".into(), s(&a.email));
        item.insert("created_at".into(), n(a.created_at));
        if let Some(e) = a.expires_at {
            item.insert("expires_at".into(), n(e));
            item.insert(
                "ttl".into(),
                n(ttl_secs(e.saturating_add(self.tombstone_ms))),
            );
        }
        item.insert("token_hash".into(), s(&a.token_hash));
        item.insert("inbox_hash".into(), s(&a.inbox_hash));
        item.insert("seq".into(), n(0));
        item.insert("state_keys".into(), n(0));
        item.insert("state_bytes".into(), n(0));
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                use aws_sdk_dynamodb::operation::put_item::PutItemError;
                match e.as_service_error() {
                    Some(PutItemError::ConditionalCheckFailedException(c)) => {
                        // An SDK re-send after our first attempt applied finds our own META.
                        let ours = c.item().is_some_and(|old| {
                            get_s(old, "token_hash").as_deref() == Some(a.token_hash.as_str())
                                && get_s(old, "inbox_hash").as_deref()
                                    == Some(a.inbox_hash.as_str())
                                && get_i(old, "created_at") == Some(a.created_at)
                        });
                        if ours {
                            tracing::info!(address_id = %a.id, "create applied by an earlier attempt");
                            Ok(())
                        } else {
                            Err(StoreError::AddressExists)
                        }
                    }
                    _ => Err(sdk_err("PutItem META", e)),
                }
            }
        }
    }

    async fn get_address(&self, id: &str, now: Millis) -> StoreResult<Option<AddressRecord>> {
        let Some(item) = self.meta(id).await? else {
            return Ok(None);
        };
        if get_i(&item, "ttl").is_some_and(|t| t.saturating_mul(1000) <= now) {
            return Ok(None);
        }
        record_from(&item).map(Some)
    }

    async fn usage(&self, id: &str, _limits: &Limits, now: Millis) -> StoreResult<Usage> {
        let a = self.live(id, now).await?;
        let mut first_unexpired = None;
        let mut start: Option<Item> = None;
        'pages: loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
                .expression_attribute_values(":pk", s(pk(id)))
                .expression_attribute_values(":lo", s(event_sk(1)))
                .expression_attribute_values(":hi", s("E#~"))
                .projection_expression("seq, expires_at")
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .tally(&self.metrics)
                .map_err(|e| sdk_err("Query usage", e))?;
            for item in out.items() {
                if let Some(exp) = get_i(item, "expires_at") {
                    if exp > now {
                        first_unexpired = Some(get_u(item, "seq"));
                        break 'pages;
                    }
                }
            }
            match out.last_evaluated_key {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        let retained = first_unexpired.map_or(0, |f| (a.last_sequence + 1).saturating_sub(f));
        Ok(Usage {
            last_sequence: a.last_sequence,
            retained_events: retained,
            state_keys: a.state_keys,
            state_bytes: a.state_bytes,
        })
    }

    async fn delete_address(&self, id: &str, now: Millis) -> StoreResult<()> {
        // Marks this deletion as ours, so that a re-send finding the tombstone knows it is ours.
        let deleted_by = uuid_like();
        let result = resend_on_conflict(|| {
            self.client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), "META".into())))
                .update_expression("SET deleted_at = :now, deleted_by = :by, #ttl = :ttl")
                .condition_expression(
                    "attribute_exists(pk) AND attribute_not_exists(deleted_at) AND \
                     (attribute_not_exists(expires_at) OR expires_at > :now)",
                )
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":by", s(&deleted_by))
                .expression_attribute_values(
                    ":ttl",
                    n(ttl_secs(now.saturating_add(self.tombstone_ms))),
                )
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
        })
        .await
        .tally(&self.metrics);
        match result {
            Ok(_) => {}
            Err(e) => {
                use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
                match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(c)) => match c.item() {
                        // An SDK re-send after our first attempt applied: our own tombstone.
                        Some(old)
                            if get_s(old, "deleted_by").as_deref() == Some(deleted_by.as_str()) =>
                        {
                            tracing::info!(address_id = %id, "delete applied by an earlier attempt");
                        }
                        Some(_) => return Err(StoreError::AddressGone),
                        None => return Err(StoreError::AddressNotFound),
                    },
                    _ => return Err(sdk_err("UpdateItem delete", e)),
                }
            }
        }
        if let Err(e) = self.enqueue_purge(id).await {
            tracing::error!(address_id = %id, error = %e, "deleted, but the purge message was not sent; its items stay until re-queued or expired");
        }
        Ok(())
    }

    async fn append_event(
        &self,
        id: &str,
        event: NewEvent,
        claim: Option<IdempotencyClaim>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<Appended> {
        let (event, claim) = (&event, claim.as_ref());
        with_append_retries(|| async move {
            let address = self.live(id, now).await?;
            if !self
                .quota_allows(id, address.last_sequence + 1, limits, now)
                .await?
            {
                if let Some(claim) = claim {
                    if let Some((event, hash)) = self.idempotency(id, claim, now).await? {
                        return rules::repeated_delivery(event, &hash, claim).map(Some);
                    }
                }
                return Err(StoreError::QuotaExceeded);
            }
            match self
                .append_tx(&address, event, claim, None, limits, now)
                .await?
            {
                Ok(event) => Ok(Some(Appended {
                    event,
                    duplicate: false,
                })),
                Err(Cancelled::Idempotent { event, body_hash }) => match claim {
                    Some(claim) => rules::repeated_delivery(event, &body_hash, claim).map(Some),
                    None => Ok(None),
                },
                Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                Err(Cancelled::StateConflict(_)) | Err(Cancelled::Retry) => Ok(None),
            }
        })
        .await
    }

    async fn read_events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
        max_bytes: u64,
        now: Millis,
    ) -> StoreResult<EventPage> {
        self.live(id, now).await?;
        let mut events: Vec<Event> = Vec::new();
        let mut bytes = 0u64;
        let mut start: Option<Item> = None;
        let mut pending: Option<(Item, String, u64)> = None;
        let lo = event_sk(after.saturating_add(1));
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND sk BETWEEN :lo AND :hi")
                .expression_attribute_values(":pk", s(pk(id)))
                .expression_attribute_values(":lo", s(&lo))
                .expression_attribute_values(":hi", s("E#~"))
                .consistent_read(true)
                .limit(i32::try_from(limit + 2).unwrap_or(102))
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .tally(&self.metrics)
                .map_err(|e| sdk_err("Query events", e))?;
            for item in out.items() {
                if let Some(part) = get_s(item, "part") {
                    if let Some((_, data, _)) = pending.as_mut() {
                        data.push_str(&part);
                    }
                    continue;
                }
                if let Some((head, data, _)) = pending.take() {
                    let e = event_from(&head, data);
                    if !events.is_empty() && bytes + e.page_bytes() > max_bytes {
                        return Ok(EventPage {
                            events,
                            has_more: true,
                        });
                    }
                    bytes += e.page_bytes();
                    events.push(e);
                }
                if get_i(item, "expires_at").is_none_or(|e| e <= now) {
                    continue;
                }
                if events.len() == limit {
                    return Ok(EventPage {
                        events,
                        has_more: true,
                    });
                }
                pending = Some((
                    item.clone(),
                    get_s(item, "data").unwrap_or_default(),
                    get_u(item, "chunks"),
                ));
            }
            match out.last_evaluated_key {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        if let Some((head, data, _)) = pending.take() {
            let e = event_from(&head, data);
            if !events.is_empty() && bytes + e.page_bytes() > max_bytes {
                return Ok(EventPage {
                    events,
                    has_more: true,
                });
            }
            events.push(e);
        }
        Ok(EventPage {
            events,
            has_more: false,
        })
    }

    async fn get_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Event> {
        self.live(id, now).await?;
        let seq = ids::event_sequence(event_id).ok_or(StoreError::NotFound)?;
        let page = self.read_events(id, seq - 1, 1, u64::MAX, now).await?;
        match page.events.into_iter().next() {
            Some(e) if e.sequence == seq && e.id == event_id => Ok(e),
            _ => Err(StoreError::NotFound),
        }
    }

    async fn ack_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Acked> {
        self.live(id, now).await?;
        let seq = ids::event_sequence(event_id).ok_or(StoreError::NotFound)?;
        // Idempotent: a re-send after an applied attempt keeps the first `acked_at`.
        let result = resend_on_conflict(|| {
            self.client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), event_sk(seq))))
                .update_expression("SET acked_at = if_not_exists(acked_at, :now)")
                .condition_expression("attribute_exists(pk) AND id = :id AND expires_at > :now")
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":id", s(event_id))
                .return_values(ReturnValue::AllNew)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
        })
        .await
        .tally(&self.metrics);
        match result {
            Ok(out) => {
                let at = out
                    .attributes()
                    .and_then(|a| get_i(a, "acked_at"))
                    .unwrap_or(now);
                Ok(Acked {
                    event: EventRef {
                        id: event_id.to_owned(),
                        sequence: seq,
                    },
                    acknowledged_at: at,
                })
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::NotFound)
            }
            Err(e) => Err(sdk_err("UpdateItem ack", e)),
        }
    }

    async fn last_sequence(&self, id: &str, now: Millis) -> StoreResult<u64> {
        self.feed_head(id, now, true).await
    }

    async fn feed_head_hint(&self, id: &str, now: Millis) -> StoreResult<u64> {
        self.feed_head(id, now, false).await
    }

    async fn list_state(&self, id: &str, now: Millis) -> StoreResult<StateListing> {
        self.live(id, now).await?;
        let mut keys = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :s)")
                .expression_attribute_values(":pk", s(pk(id)))
                .expression_attribute_values(":s", s("S#"))
                .projection_expression("#k, revision, #sz, updated_at")
                .expression_attribute_names("#k", "key")
                .expression_attribute_names("#sz", "size")
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await
                .tally(&self.metrics)
                .map_err(|e| sdk_err("Query state", e))?;
            for item in out.items() {
                keys.push(StateMeta {
                    key: get_s(item, "key").unwrap_or_default(),
                    revision: get_u(item, "revision"),
                    size: get_u(item, "size"),
                    updated_at: get_i(item, "updated_at").unwrap_or(0),
                });
            }
            match out.last_evaluated_key {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        // The totals come from the items listed, not from META (read before the query): a
        // write between the two reads would otherwise show totals of another moment than the
        // keys (one state write changes one item, so the items themselves are always a
        // consistent set). META's counters, kept in the same transactions, agree at rest.
        Ok(StateListing {
            state_keys: keys.len() as u64,
            state_bytes: keys.iter().map(|k| k.size).sum(),
            keys,
        })
    }

    async fn get_state(&self, id: &str, k: &str, now: Millis) -> StoreResult<StateEntry> {
        self.live(id, now).await?;
        let item = self
            .get(id, format!("S#{k}"))
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(StateEntry {
            key: get_s(&item, "key").unwrap_or_default(),
            value: get_s(&item, "value").unwrap_or_default(),
            revision: get_u(&item, "revision"),
            updated_at: get_i(&item, "updated_at").unwrap_or(0),
        })
    }

    async fn put_state(
        &self,
        id: &str,
        k: &str,
        value: String,
        expected: Option<u64>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateWritten> {
        let value = &value;
        with_append_retries(|| async move {
            let address = self.live(id, now).await?;
            let current = self.get(id, format!("S#{k}")).await?;
            let read_revision = current.as_ref().map(|i| get_u(i, "revision"));
            check_expected(expected, read_revision)?;
            let size = entry_size(k, value);
            let totals = rules::state_after_put(
                totals_of(&address),
                current.as_ref().map(|item| get_u(item, "size")),
                size,
                limits,
            )?;
            let seq = address.last_sequence + 1;
            if !self.quota_allows(id, seq, limits, now).await? {
                return Err(StoreError::QuotaExceeded);
            }
            let event = rules::state_updated_event(k, seq, value);
            let change = StateChange::Put {
                key: k.to_owned(),
                value: value.clone(),
                size,
                read_revision,
                keys: totals.keys,
                bytes: totals.bytes,
            };
            match self
                .append_tx(&address, &event, None, Some(&change), limits, now)
                .await?
            {
                Ok(event_ref) => Ok(Some(StateWritten {
                    entry: StateEntry {
                        key: k.to_owned(),
                        value: value.clone(),
                        revision: event_ref.sequence,
                        updated_at: now,
                    },
                    event: event_ref,
                })),
                Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                Err(Cancelled::StateConflict(current)) if expected.is_some() => {
                    check_expected(expected, current).map(|()| None)
                }
                Err(_) => Ok(None),
            }
        })
        .await
    }

    async fn delete_state(
        &self,
        id: &str,
        k: &str,
        expected: Option<u64>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateDeleted> {
        with_append_retries(|| async move {
            let address = self.live(id, now).await?;
            let current = self
                .get(id, format!("S#{k}"))
                .await?
                .ok_or(StoreError::NotFound)?;
            let read_revision = get_u(&current, "revision");
            check_expected(expected, Some(read_revision))?;
            let seq = address.last_sequence + 1;
            if !self.quota_allows(id, seq, limits, now).await? {
                return Err(StoreError::QuotaExceeded);
            }
            let event = rules::state_deleted_event(k, seq);
            let totals = rules::state_after_delete(totals_of(&address), get_u(&current, "size"));
            let change = StateChange::Delete {
                key: k.to_owned(),
                read_revision,
                keys: totals.keys,
                bytes: totals.bytes,
            };
            match self
                .append_tx(&address, &event, None, Some(&change), limits, now)
                .await?
            {
                Ok(event_ref) => Ok(Some(StateDeleted {
                    key: k.to_owned(),
                    revision: event_ref.sequence,
                    event: event_ref,
                })),
                Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                Err(Cancelled::StateConflict(None)) => Err(StoreError::NotFound),
                Err(Cancelled::StateConflict(current)) if expected.is_some() => {
                    check_expected(expected, current).map(|()| None)
                }
                Err(_) => Ok(None),
            }
        })
        .await
    }

    async fn hit_rate_limit(
        &self,
        scope: &str,
        limit: u64,
        now: Millis,
    ) -> StoreResult<Option<u64>> {
        let (window, retry_after) = rate_window(now);
        // Not idempotent: an SDK re-send after an applied attempt counts this request twice
        // (see the module docs).
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(format!("R#{scope}#{window}"), "R".into())))
            .update_expression("ADD #c :one SET #ttl = :ttl")
            .expression_attribute_names("#c", "count")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":ttl", n((window + 2) * 60))
            .return_values(ReturnValue::UpdatedNew)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("UpdateItem rate", e))?;
        let count = out.attributes().map_or(0, |a| get_u(a, "count"));
        Ok((count > limit).then_some(retry_after))
    }

    async fn sweep(&self, _limits: &Limits, _now: Millis) -> StoreResult<SweepReport> {
        Ok(SweepReport::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str, item: Option<Item>) -> CancellationReason {
        CancellationReason::builder()
            .code(code)
            .set_item(item)
            .build()
    }

    #[test]
    fn lost_sequence_race_retries() {
        let r = [
            reason(
                "ConditionalCheckFailed",
                Some(HashMap::from([("seq".into(), n(5))])),
            ),
            reason("None", None),
        ];
        assert_eq!(
            classify_cancellation(&r, 0, None, None, 0),
            Cancelled::Retry
        );
        let r = [reason("TransactionConflict", None), reason("None", None)];
        assert_eq!(
            classify_cancellation(&r, 0, None, None, 0),
            Cancelled::Retry
        );
    }

    #[test]
    fn deleted_or_expired_meta_is_gone() {
        let r = [reason(
            "ConditionalCheckFailed",
            Some(HashMap::from([("deleted_at".into(), n(1))])),
        )];
        assert_eq!(
            classify_cancellation(&r, 0, None, None, 10),
            Cancelled::Gone
        );
        let r = [reason(
            "ConditionalCheckFailed",
            Some(HashMap::from([("expires_at".into(), n(10))])),
        )];
        assert_eq!(
            classify_cancellation(&r, 0, None, None, 10),
            Cancelled::Gone
        );
        assert_eq!(
            classify_cancellation(&r, 0, None, None, 9),
            Cancelled::Retry
        );
    }

    #[test]
    fn state_condition_gives_the_current_revision() {
        let r = [
            reason("None", None),
            reason("None", None),
            reason(
                "ConditionalCheckFailed",
                Some(HashMap::from([("revision".into(), n(42))])),
            ),
        ];
        assert_eq!(
            classify_cancellation(&r, 0, Some(2), None, 0),
            Cancelled::StateConflict(Some(42))
        );
        let r = [
            reason("None", None),
            reason("None", None),
            reason("ConditionalCheckFailed", None),
        ];
        assert_eq!(
            classify_cancellation(&r, 0, Some(2), None, 0),
            Cancelled::StateConflict(None)
        );
    }

    #[test]
    fn existing_idempotency_item_returns_the_original_event() {
        let item = HashMap::from([
            ("seq".into(), n(3)),
            ("event_id".into(), s("evt_x")),
            ("body_hash".into(), s("h")),
        ]);
        let r = [
            reason(
                "ConditionalCheckFailed",
                Some(HashMap::from([("seq".into(), n(9))])),
            ),
            reason("None", None),
            reason("ConditionalCheckFailed", Some(item)),
        ];
        assert_eq!(
            classify_cancellation(&r, 0, None, Some(2), 0),
            Cancelled::Idempotent {
                event: EventRef {
                    id: "evt_x".into(),
                    sequence: 3
                },
                body_hash: "h".into()
            }
        );
    }

    #[test]
    fn our_own_event_or_idempotency_item_means_applied() {
        let event = |id: &str| {
            reason(
                "ConditionalCheckFailed",
                Some(HashMap::from([("id".into(), s(id)), ("seq".into(), n(4))])),
            )
        };
        let meta_moved = reason(
            "ConditionalCheckFailed",
            Some(HashMap::from([("seq".into(), n(4))])),
        );
        let r = [meta_moved.clone(), event("evt_ours")];
        assert!(applied_by_us(&r, 1, None, "evt_ours"));
        assert!(
            !applied_by_us(&r, 1, None, "evt_theirs"),
            "another writer's event at our sequence is a lost race"
        );
        assert_eq!(
            classify_cancellation(&r, 0, None, None, 0),
            Cancelled::Retry
        );
        let idem = reason(
            "ConditionalCheckFailed",
            Some(HashMap::from([
                ("event_id".into(), s("evt_ours")),
                ("seq".into(), n(4)),
                ("body_hash".into(), s("h")),
            ])),
        );
        let r = [meta_moved.clone(), reason("None", None), idem];
        assert!(
            applied_by_us(&r, 1, Some(2), "evt_ours"),
            "our own idempotency record is not a duplicate delivery"
        );
        assert!(!applied_by_us(&r, 1, Some(2), "evt_other"));
        let r = [meta_moved, reason("None", None)];
        assert!(!applied_by_us(&r, 1, None, "evt_ours"));
        let r = [reason("None", None), event("evt_ours")];
        assert!(applied_by_us(&r, 1, None, "evt_ours"));
        assert!(!applied_by_us(&[], 1, Some(2), "evt_ours"));
    }

    #[test]
    fn chunks_split_on_character_boundaries() {
        let text = "aé€😀".repeat(100_000);
        let parts = split_utf8(&text, CHUNK_BYTES);
        assert!(parts.len() > 1);
        assert!(parts
            .iter()
            .all(|p| p.len() <= CHUNK_BYTES && !p.is_empty()));
        assert_eq!(parts.concat(), text);
        assert_eq!(split_utf8("", 10), vec![""]);
        assert_eq!(split_utf8("abc", 3), vec!["abc"]);
        assert_eq!(split_utf8("abcd", 3), vec!["abc", "d"]);
    }

    #[test]
    fn sort_keys_order_events_and_chunks() {
        assert!(event_sk(9) < event_sk(10));
        assert!(event_sk(9) < format!("{}#001", event_sk(9)));
        assert!(format!("{}#001", event_sk(9)) < event_sk(10));
        assert!(event_sk(u64::MAX).as_str() < "E#~");
        assert!("E#~" < "I#" && "E#~" < "META" && "E#~" < "S#");
    }
}
