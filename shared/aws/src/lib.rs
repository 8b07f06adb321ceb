//! The AWS store: one DynamoDB table (on-demand, TTL on `ttl`), items keyed by address.
//!
//! | item | pk | sk |
//! |---|---|---|
//! | address | `A#{id}` | `META` (seq, state_keys, state_bytes, hashes, deleted_at, next_request_expiry, verification, email_policy, email_refused, qrev, trev, next_timer_at, ttl) |
//! | state key | `A#{id}` | `S#{key}` |
//! | event | `A#{id}` | `E#{seq:020}` (data beyond ~300 KB in chunk items `E#{seq:020}#{n:03}`) |
//! | idempotency | `A#{id}` | `I#{sha256(key)}` |
//! | rate window | `R#{scope}#{minute}` | `R` |
//! | daily count | `R#{scope}#d{utc_day}` | `R` (count, ttl: code mails per recipient mailbox and per client, docs/API.md §16) |
//! | email key | `E#{lower-cased email}` | `E` (address_id, ttl) |
//! | email record | `A#{id}` | `M#{email_id}` (seq, event_id, raw_key, raw_size, expires_at, ttl) |
//! | request | `Q#{request_id}` | `Q` (address_id, title, body, options, status, answer, ttl) |
//! | request entry | `A#{id}` | `Q#{request_id}` (status, expires_at, ttl) |
//! | request key | `A#{id}` | `QK#{sha256(key)}` (request_id, body_hash, ttl) |
//! | contact | `A#{id}` | `C#{email}` (status, created_at, confirmed_at, code_hash, code_expires_at, code_tries, code_day, code_mails, ttl) |
//! | send | `A#{id}` | `O#{send_id}` (message, seq, event_id, status, attempts, next_attempt_at, lease_until, last_error, expires_at, ttl) |
//! | send key | `A#{id}` | `OK#{sha256(key)}` (send_id, body_hash, seq, event_id, ttl) |
//! | sends of a day | `A#{id}` | `OD#{utc_day}` (count, ttl) |
//! | hook | `A#{id}` | `H#{hook_id}` (url, types, format, headers, secret, debounce_seconds, status, created_at, delivery state, revision, order, write_id, ttl: docs/API.md §19) |
//! | pending timer | `A#{id}` | `T#{timer_id}` (fire_at, type, data, created_at, status, ttl: docs/API.md §20) |
//! | closed timer | `A#{id}` | `TX#{closed_at:020}#{timer_id}` (the timer fired or cancelled, closed_at, event_id, event_seq, ttl: newest first in one `Query`) |
//! | closed timer's pointer | `A#{id}` | `TC#{timer_id}` (closed_sk, ttl: a closed timer by id) |
//! | timer key | `A#{id}` | `TK#{sha256(key)}` (timer_id, body_hash, ttl) |
//! | watches | `A#{id}` | `WN` (the socket counter's epoch; watch_until, timer_watch_until: when each pending watch message falls due) |
//! | viewer sign-in code | `V#{sha256(code)}` | `V` (address_id, sealed, created_at, expires_at, used_at, used_by, ttl: docs/API.md §13) |
//!
//! META also counts the address's contacts (`contacts`) for their cap (docs/API.md §16), and its
//! hooks (`hooks`, `hooks_made`), with the patterns of its active hooks (`hook_types`, a map by
//! hook id) read with the address (docs/API.md §19).
//!
//! Raw email messages are objects of the email bucket (`bucket`), never items: the email
//! record and the event item name the object (`raw_key`).
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
//! - **create** (`TransactWriteItems`: META and email-key item, each `attribute_not_exists`,
//!   with an explicit token): a re-send cancelled on a META with our token hash, inbox hash and
//!   creation time is our own write: success.
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
//!
//! ## Where things are
//! - `item`: key layout, attribute encoding, the item codec (every record is decoded by one
//!   `FromItem` through `Fields`: a missing or mistyped attribute is an `Internal` error naming
//!   it, never a silent `""` or `0`), chunking of large event data;
//! - `addresses`: the META item (create, read, usage, delete);
//! - `events`: deliveries, feed pages, one event, acks, the feed head;
//! - `state`: state keys (list, get, put, delete);
//! - `append`: the append transaction every delivery and state write goes through, and how
//!   its cancellation reasons are read;
//! - `retry`: the SDK retry policy, the append retry loop, conflict re-sends;
//! - `purge`: purging deleted addresses (queue, step, message handler);
//! - `rate_limit`: rate-limit counters; `wait_slots`: the cap on long polls waiting at once
//!   (docs/API.md §6, "Waiting polls");
//! - `requests`: requests for a person (docs/API.md §12): creation, reads, answers, expiry;
//! - `timers`: timers (docs/API.md §20): creation, listing, cancel, firing by the append
//!   transaction (the same close requests use, `append::Closing`), and their watch;
//! - `watch`: "wake address A at T" for a purpose (the sockets' expiry, timers): delayed
//!   messages on the purge queue, one pending per address and purpose;
//! - `contacts`: outbound email's contacts and their codes (docs/API.md §16); `sends`: its
//!   sends, recorded with their `email.sent` event, claimed and finished (the send queue
//!   drives deliveries); `cond_update`: the conditional `UpdateItem` both use;
//! - `email`: inbound email (append with its object, reads by event and by `email_id`);
//!   `bucket`: the email bucket's objects (S3);
//! - `hooks`: wake hooks (docs/API.md §19): added within their cap, their delivery state
//!   written by compare-and-set with their reports appended, their types kept on META;
//! - `viewer`: the inbox viewer's one-time sign-in codes (docs/API.md §13);
//! - `capacity`: consumed-capacity metrics; `config`: [`AwsConfig`].
//!
//! This file holds [`DynamoStore`], its constructors, the reads every path shares, and the
//! `Store` impl, each of whose methods is implemented in the module of its job.
#![forbid(unsafe_code)]

use agentaddress_core::{domain, store};

mod addresses;
mod append;
pub mod bucket;
mod capacity;
mod cond_update;
mod config;
mod contacts;
mod email;
mod events;
mod hooks;
mod http;
mod item;
mod poster;
mod purge;
mod rate_limit;
mod requests;
mod retry;
mod sends;
mod sockets;
mod state;
mod timers;
mod viewer;
mod wait_slots;
mod wake_queue;
mod watch;

pub use append::{applied_by_us, classify_cancellation, Cancelled};
pub use aws_config::SdkConfig;
pub use bucket::{EmailBucket, MessageBucket};
use capacity::Tally;
pub use capacity::{CapacityUsage, Metrics};
pub use config::{lambda_sdk_config, sdk_config, AwsConfig};
pub use email::{DOWNLOAD_LINK_TTL, INLINE_DOWNLOAD_MAX, MAX_OBJECT_BYTES};
pub use http::sdk_http_client;
use item::*;
pub use item::{split_utf8, CHUNK_BYTES};
pub use poster::ApiGatewayPoster;
pub use purge::{
    handle_purge_message, PurgeMessage, PurgeProgress, PurgeQueue, SqsPurgeQueue,
    PURGE_STEPS_PER_MESSAGE,
};
pub use retry::{client_config, SDK_INITIAL_BACKOFF, SDK_MAX_ATTEMPTS, SDK_MAX_BACKOFF};
pub use sockets::{ConnectionPoster, PostError, Subscribed, SUBSCRIPTION_LIFETIME};
pub use wake_queue::{SqsWakeQueue, WakeMessage, WakeQueue};

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use aws_sdk_dynamodb::Client;

use crate::domain::{Limits, Millis};
use crate::store::{AddressRecord, Backend, StoreError, StoreResult, SweepReport};

type Item = HashMap<String, AttributeValue>;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    tombstone_ms: i64,
    purge: Option<Arc<dyn PurgeQueue>>,
    bucket: Option<Arc<dyn MessageBucket>>,
    /// The wake-up sockets' poster (`sockets`), in the functions of a deployment with a
    /// WebSocket API.
    sockets: Option<Arc<dyn ConnectionPoster>>,
    /// The wake queue (`wake_queue`), in the functions of a deployment that wakes hooks.
    wakes: Option<Arc<dyn WakeQueue>>,
    metrics: Arc<Metrics>,
}

impl DynamoStore {
    /// A store over `table`. Tombstones of deleted or expired addresses are forgotten
    /// `tombstone_seconds` after deletion or expiry.
    pub fn new(client: Client, table: impl Into<String>, tombstone_seconds: u64) -> Self {
        Self {
            client,
            table: table.into(),
            tombstone_ms: i64::try_from(tombstone_seconds.saturating_mul(1000)).unwrap_or(i64::MAX),
            purge: None,
            bucket: None,
            sockets: None,
            wakes: None,
            metrics: Arc::default(),
        }
    }

    /// Requests and capacity units consumed so far by this store (and its clones).
    pub fn metrics(&self) -> CapacityUsage {
        self.metrics.snapshot()
    }

    /// The store, sending the addresses whose hooks an append wakes (or a hook made active
    /// again) to `queue` after the commit (docs/API.md §19).
    pub fn with_wake_queue(mut self, queue: Arc<dyn WakeQueue>) -> Self {
        self.wakes = Some(queue);
        self
    }

    /// Sends deleted addresses to `queue` for purging.
    pub fn with_purge_queue(mut self, queue: Arc<dyn PurgeQueue>) -> Self {
        self.purge = Some(queue);
        self
    }

    /// Keeps raw email messages in `bucket` (without one, the email operations answer
    /// [`StoreError::NotSupported`]).
    pub fn with_email_bucket(mut self, bucket: Arc<dyn MessageBucket>) -> Self {
        self.bucket = Some(bucket);
        self
    }

    /// The email bucket, when configured (the `email` function reads and removes what SES
    /// wrote there).
    pub fn email_bucket(&self) -> Option<&dyn MessageBucket> {
        self.bucket.as_deref()
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
        let record = AddressRecord::from_item(&item)?;
        if record.is_gone(now) {
            return Err(StoreError::AddressGone);
        }
        Ok(record)
    }

    /// Every item of the address whose sort key begins with `prefix`, with the attributes of
    /// `projection` (whose `#` placeholders `names` resolves), strongly consistent, across
    /// pages.
    async fn items_with_prefix(
        &self, id: &str, prefix: &str, projection: &str, names: &[(&str, &str)], op: &str,
    ) -> StoreResult<Vec<Item>> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                .expression_attribute_values(":pk", s(pk(id)))
                .expression_attribute_values(":prefix", s(prefix))
                .projection_expression(projection)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            for (placeholder, name) in names {
                query = query.expression_attribute_names(*placeholder, *name);
            }
            let out = query
                .send()
                .await
                .tally(&self.metrics)
                .map_err(|e| sdk_err(op, e))?;
            items.extend_from_slice(out.items());
            match out.last_evaluated_key {
                Some(k) => start = Some(k),
                None => return Ok(items),
            }
        }
    }

    /// Wakes the waiters after a commit, the one place it is done on DynamoDB: runs `commit` and,
    /// when it succeeded, tells the sockets of the address `tell` names from its result, at `now`
    /// (docs/API.md §17). A duplicate is told too: the first attempt may have committed without
    /// telling (its function timed out), and a `notify` the client already had is harmless.
    /// (The embedded store's writer wakes its long polls itself, at each commit.)
    pub(crate) async fn telling<T>(
        &self, now: Millis, commit: impl std::future::Future<Output = StoreResult<T>>,
        tell: impl FnOnce(&T) -> Tell,
    ) -> StoreResult<T> {
        let done = commit.await?;
        match tell(&done) {
            Tell::Head(id, sequence, types) => {
                self.tell_sockets(&id, Some(sequence), &types, now).await
            }
            Tell::ReadHead(id, types) => self.tell_head(&id, &types, now).await,
            Tell::Gone(id) => self.tell_sockets(&id, None, &[], now).await,
            Tell::Nothing => {}
        }
        Ok(done)
    }

    /// Tells the address's sockets its feed's head, read now (after appends whose sequence the
    /// caller does not hold).
    async fn tell_head(&self, id: &str, types: &[String], now: Millis) {
        if self.sockets.is_none() {
            return;
        }
        match self.feed_head(id, now, true).await {
            Ok(head) => self.tell_sockets(id, Some(head), types, now).await,
            Err(e) => {
                tracing::warn!(address_id = %id, error = %e, "cannot read the feed's head for its sockets")
            }
        }
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
}

/// Whom [`DynamoStore::telling`] tells after a commit, and what.
pub(crate) enum Tell {
    /// The address's feed head is this sequence, after appends of these types (docs/API.md
    /// §21: a socket subscribed to types is told only of a matching one).
    Head(String, u64, Vec<String>),
    /// The address's feed grew by appends of these types whose sequence the commit does not
    /// hold: read it.
    ReadHead(String, Vec<String>),
    /// The address is gone.
    Gone(String),
    Nothing,
}

#[async_trait]
impl Backend for DynamoStore {
    fn kind(&self) -> &'static str {
        "dynamodb"
    }

    async fn sweep(&self, _limits: &Limits, _now: Millis) -> StoreResult<SweepReport> {
        Ok(SweepReport::default())
    }
}
