//! Timers on AWS (docs/API.md §20). Every item of a timer is in its address's partition:
//!
//! | item | sk | attributes |
//! |---|---|---|
//! | pending timer | `T#{timer_id}` | timer_id, fire_at, type, data, created_at, status (`pending`), ttl |
//! | closed timer | `TX#{closed_at:020}#{timer_id}` | the same, status `fired` or `cancelled`, closed_at, and once fired event_id, event_seq |
//! | closed pointer | `TC#{timer_id}` | closed_sk (the closed timer's sort key), ttl |
//! | key record | `TK#{sha256(key)}` | timer_id, body_hash, ttl (a creation's Idempotency-Key) |
//!
//! META keeps the pending timers' revision `trev` and their earliest `fire_at`, `next_timer_at`
//! ([`TIMERS`]). Every timer step reads META and then every pending item (a `Query` of `T#`: at
//! most [`MAX_PENDING_TIMERS`](crate::domain::timer::MAX_PENDING_TIMERS)), never a closed one: closing moves a timer out of `T#`. The
//! closed timers' sort keys order them by closing time, so the listing's last
//! [`KEPT_CLOSED_TIMERS`] are one `Query` (newest first, `Limit` 100); the pointer finds a closed
//! timer by id (a cancel of a fired timer, an Idempotency-Key naming a closed one) in two reads.
//!
//! Every step is ONE `TransactWriteItems`, conditioned on the `trev` it read, so that the
//! pending cap and `next_timer_at` are judged on what the transaction replaces (a lost race
//! re-reads and retries, [`with_append_retries`]):
//! - **create**: META (live; `trev` + 1, `next_timer_at`), the pending item and the key record,
//!   each `attribute_not_exists` (an expired key record is replaced). An existing key record is
//!   the earlier creation; a pending item or key record of our own timer id is this
//!   transaction's own earlier attempt (a re-send the token did not settle).
//! - **fire**: the append transaction of the timer's event ([`DynamoStore::append_closing_tx`])
//!   with the timer's close riding in it ([`TimerClose`], the one mechanism requests close by):
//!   the pending item deleted on the condition `status = pending`, the closed item and the
//!   pointer put, META's `trev` and `next_timer_at` beside the sequence bump. So the event is
//!   appended exactly once, atomically with the timer becoming `fired`.
//! - **cancel**: the same close without an event: META (live, `trev`) and the timer's items.
//!   Cancel and fire race on `trev` and on the pending item: one commits, the other re-reads
//!   and finds the timer closed (the pointer says how).
//!
//! Items are forgotten (TTL) a retention period after the timer's `fire_at` (a fired timer's
//! closed items a retention period after its firing, if later); the address's purge removes
//! them with the rest of its partition. A cancelled timer is thus listed until a retention
//! period after the `fire_at` it had, which may be longer than one after its cancel: its key
//! record, kept as long, must find it, and a cancel is given no limits to count from.
//!
//! Firing in the background: a new timer arms the address's timer watch (`watch`,
//! [`Watch::Timers`]) when it fires before the pending watch (or none is pending); the purge
//! function's handler of the watch message fires what is due ([`DynamoStore::check_timers`]) and
//! arms the watch for the next `next_timer_at`. Feed reads fire due timers first anyway
//! ([`Timers::append_due`]).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    Delete, Put, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};

use crate::append::{Cancelled, Closing, Revision};
use crate::capacity::Tally;
use crate::cond_update::{failed, new_item, tx_err};
use crate::domain::timer::KEPT_CLOSED_TIMERS;
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::with_append_retries;
use crate::store::rules;
use crate::store::{
    AddressRecord, CancelOutcome, CreatedTimer, EventRef, NewTimer, StoreError, StoreResult,
    TimerRecord, TimerStatus, Timers,
};
use crate::watch::{Claim, Watch};
use crate::{DynamoStore, Item, Tell};

/// META's revision of the pending timers and their earliest `fire_at`.
pub(crate) const TIMERS: Revision = Revision {
    rev: "trev",
    next: "next_timer_at",
};

/// The prefix of the pending timers' items: what every timer step reads.
const PENDING_PREFIX: &str = "T#";

// Every timer step reads every pending timer: there are few (docs/API.md §20).
const _: () = assert!(crate::domain::timer::MAX_PENDING_TIMERS <= 100);
/// The prefix of the closed timers' items, ordered by closing time.
const CLOSED_PREFIX: &str = "TX#";

fn pending_sk(timer_id: &str) -> String {
    format!("{PENDING_PREFIX}{timer_id}")
}

fn closed_sk(closed_at: Millis, timer_id: &str) -> String {
    format!("{CLOSED_PREFIX}{:020}#{timer_id}", closed_at.max(0))
}

fn pointer_sk(timer_id: &str) -> String {
    format!("TC#{timer_id}")
}

fn key_record_sk(key_hash: &str) -> String {
    format!("TK#{key_hash}")
}

/// When a timer's items are forgotten: a retention period after `at` (docs/API.md §6).
fn timer_ttl(at: Millis, limits: &Limits) -> i64 {
    ttl_secs(at.saturating_add(limits.retention_ms()))
}

/// How long a watch waits before looking again at a due timer a full feed left pending
/// (docs/API.md §6: room comes as old events pass their retention; a feed read fires it too).
const FULL_FEED_RETRY_MS: Millis = 60_000;

/// The attributes every timer item reads with (`type`, `data`, `status` and `ttl` are reserved
/// words).
const TIMER_PROJECTION: &str =
    "timer_id, fire_at, #type, #data, created_at, #st, closed_at, event_id, event_seq, #ttl";
const TIMER_NAMES: &[(&str, &str)] = &[
    ("#type", "type"),
    ("#data", "data"),
    ("#st", "status"),
    ("#ttl", "ttl"),
];

impl FromItem for TimerRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "timer");
        let event = match (f.opt_s("event_id")?, f.opt_u("event_seq")?) {
            (Some(id), Some(sequence)) => Some(EventRef { id, sequence }),
            _ => None,
        };
        Ok(TimerRecord {
            id: f.s("timer_id")?,
            fire_at: f.i("fire_at")?,
            event_type: f.s("type")?,
            data: f.opt_s("data")?,
            created_at: f.i("created_at")?,
            status: f.parsed("status", TimerStatus::parse)?,
            closed_at: f.opt_i("closed_at")?,
            event,
        })
    }
}

/// The item of `timer` at `sk`, forgotten at `ttl` (seconds).
fn timer_item(address_id: &str, sk: String, timer: &TimerRecord, ttl: i64) -> Item {
    let mut item = key(pk(address_id), sk);
    item.insert("timer_id".into(), s(&timer.id));
    item.insert("fire_at".into(), n(timer.fire_at));
    item.insert("type".into(), s(&timer.event_type));
    if let Some(data) = &timer.data {
        item.insert("data".into(), s(data));
    }
    item.insert("created_at".into(), n(timer.created_at));
    item.insert("status".into(), s(timer.status.as_str()));
    if let Some(at) = timer.closed_at {
        item.insert("closed_at".into(), n(at));
    }
    if let Some(e) = &timer.event {
        item.insert("event_id".into(), s(&e.id));
        item.insert("event_seq".into(), n(e.sequence));
    }
    item.insert("ttl".into(), n(ttl));
    item
}

/// A pending timer as read, with its TTL (seconds), which its closed items keep.
#[derive(Debug, Clone)]
struct Pending {
    timer: TimerRecord,
    ttl: i64,
}

/// The address as read before a timer step: its record, its timers' revision (which the step's
/// transaction requires unchanged) and its pending timers, earliest first.
struct Read {
    address: AddressRecord,
    trev: u64,
    pending: Vec<Pending>,
}

impl Read {
    /// The earliest `fire_at` of the pending timers other than `except`.
    fn next_after(&self, except: Option<&str>) -> Option<Millis> {
        self.pending
            .iter()
            .filter(|p| Some(p.timer.id.as_str()) != except)
            .map(|p| p.timer.fire_at)
            .min()
    }
}

/// How a timer closes (fired by its event's append, or cancelled) — the [`Closing`] of a
/// timer: its pending item deleted on the condition that it is pending, its closed item and
/// pointer put, META's `trev` and `next_timer_at` moved on.
pub(crate) struct TimerClose {
    /// The timer as pending.
    timer: TimerRecord,
    status: TimerStatus,
    read_trev: u64,
    /// The earliest `fire_at` of the other pending timers.
    next: Option<Millis>,
    /// The closed items' TTL (seconds).
    ttl: i64,
}

impl TimerClose {
    /// The timer as closed at `now`, by `event` if it fired.
    fn closed(&self, event: Option<&EventRef>, now: Millis) -> TimerRecord {
        TimerRecord {
            status: self.status,
            closed_at: Some(now),
            event: event.cloned(),
            ..self.timer.clone()
        }
    }
}

impl Closing for TimerClose {
    fn meta_update(&self, update: &mut String, condition: &mut String, values: &mut Item) {
        TIMERS.meta_update(self.read_trev, self.next, update, condition, values);
    }

    fn items(
        &self, table: &str, address_id: &str, event: Option<&EventRef>, now: Millis,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        let pending = Delete::builder()
            .table_name(table)
            .set_key(Some(key(pk(address_id), pending_sk(&self.timer.id))))
            .condition_expression("#st = :pending")
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":pending", s(TimerStatus::Pending.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(tx_err)?;
        let closed = self.closed(event, now);
        let sk = closed_sk(now, &self.timer.id);
        let mut pointer = key(pk(address_id), pointer_sk(&self.timer.id));
        pointer.insert("closed_sk".into(), s(&sk));
        pointer.insert("ttl".into(), n(self.ttl));
        let closed = Put::builder()
            .table_name(table)
            .set_item(Some(timer_item(address_id, sk, &closed, self.ttl)))
            .build()
            .map_err(tx_err)?;
        let pointer = Put::builder()
            .table_name(table)
            .set_item(Some(pointer))
            .build()
            .map_err(tx_err)?;
        Ok(vec![
            TransactWriteItem::builder().delete(pending).build(),
            TransactWriteItem::builder().put(closed).build(),
            TransactWriteItem::builder().put(pointer).build(),
        ])
    }
}

/// How a creation's transaction ended.
enum Created {
    Ours(TimerRecord),
    Gone,
    /// The key record exists: the earlier creation's timer id and body hash.
    Earlier {
        timer_id: String,
        body_hash: String,
    },
    Retry,
}

/// What one firing attempt did.
enum Firing {
    Fired(EventRef, String),
    /// Nothing due, or the feed is full.
    Done,
}

impl DynamoStore {
    /// The live address `id` with its timers' revision, then its pending timers (earliest
    /// first).
    async fn read_for_timers(&self, id: &str, now: Millis) -> StoreResult<Read> {
        let meta = self.meta(id).await?.ok_or(StoreError::AddressNotFound)?;
        let address = AddressRecord::from_item(&meta)?;
        if address.is_gone(now) {
            return Err(StoreError::AddressGone);
        }
        let mut pending = self
            .items_with_prefix(
                id,
                PENDING_PREFIX,
                TIMER_PROJECTION,
                TIMER_NAMES,
                "Query timers",
            )
            .await?
            .iter()
            .filter(|item| !forgotten(item, now))
            .map(|item| {
                Ok(Pending {
                    timer: TimerRecord::from_item(item)?,
                    ttl: Fields::of(item, "timer").i("ttl")?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        pending.sort_by(|a, b| (a.timer.fire_at, &a.timer.id).cmp(&(b.timer.fire_at, &b.timer.id)));
        Ok(Read {
            trev: Fields::of(&meta, "META").count("trev")?,
            address,
            pending,
        })
    }

    /// The closed timer `timer_id` of address `id`, through its pointer.
    async fn closed_timer(
        &self, id: &str, timer_id: &str, now: Millis,
    ) -> StoreResult<Option<TimerRecord>> {
        let Some(pointer) = self
            .get(id, pointer_sk(timer_id))
            .await?
            .filter(|i| !forgotten(i, now))
        else {
            return Ok(None);
        };
        let sk = Fields::of(&pointer, "timer pointer").s("closed_sk")?;
        self.get(id, sk)
            .await?
            .filter(|i| !forgotten(i, now))
            .map(|item| TimerRecord::from_item(&item))
            .transpose()
    }

    /// Timer `timer_id` of address `id`, pending or closed.
    async fn timer_by_id(
        &self, id: &str, timer_id: &str, now: Millis,
    ) -> StoreResult<Option<TimerRecord>> {
        match self
            .get(id, pending_sk(timer_id))
            .await?
            .filter(|i| !forgotten(i, now))
        {
            Some(item) => TimerRecord::from_item(&item).map(Some),
            None => self.closed_timer(id, timer_id, now).await,
        }
    }

    /// The earlier creation holding `key_hash` at this address: its timer id and body hash.
    async fn timer_key(
        &self, id: &str, key_hash: &str, now: Millis,
    ) -> StoreResult<Option<(String, String)>> {
        self.get(id, key_record_sk(key_hash))
            .await?
            .filter(|i| !forgotten(i, now))
            .map(|item| {
                let f = Fields::of(&item, "timer key");
                Ok((f.s("timer_id")?, f.s("body_hash")?))
            })
            .transpose()
    }

    /// The answer to a creation whose Idempotency-Key an earlier timer holds: that timer as
    /// it is now.
    async fn earlier_timer(
        &self, id: &str, timer_id: &str, body_hash: &str, claimed: &str, now: Millis,
    ) -> StoreResult<CreatedTimer> {
        rules::repeated_claim(body_hash, claimed)?;
        let timer = self
            .timer_by_id(id, timer_id, now)
            .await?
            .ok_or_else(|| StoreError::Internal(format!("timer {timer_id} vanished")))?;
        Ok(CreatedTimer {
            timer,
            duplicate: true,
        })
    }

    /// The creation's transaction (module docs).
    async fn create_timer_tx(
        &self, read: &Read, t: &NewTimer, next: Millis, limits: &Limits, now: Millis,
    ) -> StoreResult<Created> {
        let id = &read.address.id;
        let ttl = timer_ttl(t.fire_at, limits);
        let mut update = String::new();
        let mut condition = String::from(META_LIVE);
        let mut values: Item = HashMap::from([(":now".into(), n(now))]);
        TIMERS.meta_update(
            read.trev,
            Some(next),
            &mut update,
            &mut condition,
            &mut values,
        );
        let meta = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), "META".into())))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(tx_err)?;
        let timer = TimerRecord::new(t);
        let mut items = vec![
            TransactWriteItem::builder().update(meta).build(),
            new_item(&self.table, timer_item(id, pending_sk(&t.id), &timer, ttl))?,
        ];
        let (meta_index, timer_index) = (0, 1);
        let mut key_index = None;
        if let Some(claim) = &t.claim {
            key_index = Some(items.len());
            let mut record = key(pk(id), key_record_sk(&claim.key_hash));
            record.insert("timer_id".into(), s(&t.id));
            record.insert("body_hash".into(), s(&claim.body_hash));
            record.insert("ttl".into(), n(ttl));
            // A forgotten record (past its TTL, not removed yet) is replaced.
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(record))
                .condition_expression("attribute_not_exists(pk) OR #ttl <= :now_secs")
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":now_secs", n(now.div_euclid(1000)))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(tx_err)?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        let reasons = match self.transact(items, "TransactWriteItems timer").await? {
            Ok(()) => return Ok(Created::Ours(timer)),
            Err(reasons) => reasons,
        };
        let current = |i: usize| {
            reasons
                .get(i)
                .filter(|_| failed(&reasons, i))
                .and_then(|r| r.item())
        };
        // Timer ids are random: a pending item of ours is this transaction's own earlier
        // attempt (a re-send the token did not settle), so the whole of it applied.
        if let Some(existing) = current(timer_index) {
            tracing::warn!(address_id = %id, timer_id = %t.id,
                "a re-sent timer creation was cancelled by its own earlier attempt; answering its success");
            return TimerRecord::from_item(existing).map(Created::Ours);
        }
        if current(meta_index).is_some_and(|meta| meta_gone(meta, now)) {
            return Ok(Created::Gone);
        }
        if let Some(record) = key_index.and_then(current) {
            let f = Fields::of(record, "timer key");
            let (timer_id, body_hash) = (f.s("timer_id")?, f.s("body_hash")?);
            if timer_id == t.id {
                tracing::warn!(address_id = %id, timer_id = %t.id,
                    "a re-sent timer creation was cancelled by its own earlier attempt; answering its success");
                return self
                    .timer_by_id(id, &t.id, now)
                    .await?
                    .map(Created::Ours)
                    .ok_or_else(|| StoreError::Internal(format!("timer {} vanished", t.id)));
            }
            return Ok(Created::Earlier {
                timer_id,
                body_hash,
            });
        }
        Ok(Created::Retry)
    }

    /// Arms the address's timer watch for a timer firing at `at`, unless a watch falls due
    /// sooner (module docs). A failure is logged, never the creation's: the timer stands, and
    /// fires at the latest when the feed is next read.
    async fn arm_timer_watch(&self, id: &str, at: Millis, now: Millis) {
        if let Err(e) = self
            .watch_from(id, Watch::Timers, at, now, Claim::NoneSooner)
            .await
        {
            tracing::warn!(address_id = %id, error = %e, "cannot arm the timer watch");
        }
    }

    /// Handles a timer watch of `address_id` that fell due (at `due`): fires what is due
    /// (requests' expiries first: [`Timers::append_due`]), then arms the watch for the next
    /// pending timer — only while the pending watch is still the one that fell due, so a
    /// duplicate or superseded message ends there. A gone address ends the watch.
    pub async fn check_timers(
        &self, address_id: &str, due: Option<Millis>, limits: &Limits, now: Millis,
    ) -> StoreResult<()> {
        let read = |meta: Option<Item>| -> StoreResult<Option<AddressRecord>> {
            match meta {
                Some(meta) => AddressRecord::from_item(&meta)
                    .map(|r| Some(r).filter(|r: &AddressRecord| !r.is_gone(now))),
                None => Ok(None),
            }
        };
        let Some(mut record) = read(self.meta(address_id).await?)? else {
            return Ok(());
        };
        if record.next_due().is_some_and(|t| t <= now) {
            match self.append_due(&record, limits, now).await {
                Ok(()) => {}
                Err(StoreError::AddressGone | StoreError::AddressNotFound) => return Ok(()),
                Err(e) => return Err(e),
            }
            record = match read(self.meta(address_id).await?)? {
                Some(r) => r,
                None => return Ok(()),
            };
        }
        let Some(at) = record.next_timer_at else {
            return Ok(());
        };
        // Still due: the feed is full. Looked at again a little later, not at once.
        let at = if at <= now {
            now.saturating_add(FULL_FEED_RETRY_MS)
        } else {
            at
        };
        let claim = due.map_or(Claim::NoneSooner, Claim::Continues);
        if !self
            .watch_from(address_id, Watch::Timers, at, now, claim)
            .await?
            && due.is_some()
        {
            // Superseded, a duplicate, or a new timer's watch written while this one was at
            // work: that watch goes on, unless it falls due after this one would (a new
            // timer firing after the one due here) — then this one takes its place.
            self.watch_from(address_id, Watch::Timers, at, now, Claim::NoneSooner)
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Timers for DynamoStore {
    async fn create_timer(
        &self, id: &str, t: NewTimer, limits: &Limits, now: Millis,
    ) -> StoreResult<CreatedTimer> {
        if let Some(claim) = &t.claim {
            self.live(id, now).await?;
            if let Some((timer_id, body_hash)) = self.timer_key(id, &claim.key_hash, now).await? {
                return self
                    .earlier_timer(id, &timer_id, &body_hash, &claim.body_hash, now)
                    .await;
            }
        }
        let t = &t;
        let created = with_append_retries(|| async move {
            let read = self.read_for_timers(id, now).await?;
            rules::pending_timer_quota(read.pending.len() as u64)?;
            let next = read
                .next_after(None)
                .map_or(t.fire_at, |at| at.min(t.fire_at));
            match self.create_timer_tx(&read, t, next, limits, now).await? {
                Created::Ours(timer) => Ok(Some(CreatedTimer {
                    timer,
                    duplicate: false,
                })),
                Created::Gone => Err(StoreError::AddressGone),
                Created::Earlier {
                    timer_id,
                    body_hash,
                } => {
                    let claimed = t.claim.as_ref().map_or("", |c| c.body_hash.as_str());
                    self.earlier_timer(id, &timer_id, &body_hash, claimed, now)
                        .await
                        .map(Some)
                }
                Created::Retry => Ok(None),
            }
        })
        .await?;
        if !created.duplicate {
            self.arm_timer_watch(id, t.fire_at, now).await;
        }
        Ok(created)
    }

    async fn list_timers(&self, id: &str, now: Millis) -> StoreResult<Vec<TimerRecord>> {
        let read = self.read_for_timers(id, now).await?;
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(pk(id)))
            .expression_attribute_values(":prefix", s(CLOSED_PREFIX))
            .projection_expression(TIMER_PROJECTION)
            .set_expression_attribute_names(Some(
                TIMER_NAMES
                    .iter()
                    .map(|(p, name)| ((*p).to_owned(), (*name).to_owned()))
                    .collect(),
            ))
            .scan_index_forward(false)
            .limit(i32::try_from(KEPT_CLOSED_TIMERS).unwrap_or(100))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("Query closed timers", e))?;
        let mut timers: Vec<TimerRecord> = read.pending.into_iter().map(|p| p.timer).collect();
        for item in out.items().iter().filter(|i| !forgotten(i, now)) {
            timers.push(TimerRecord::from_item(item)?);
        }
        Ok(timers)
    }

    async fn cancel_timer(
        &self, id: &str, timer_id: &str, now: Millis,
    ) -> StoreResult<CancelOutcome> {
        with_append_retries(|| async move {
            let read = self.read_for_timers(id, now).await?;
            let Some(pending) = read.pending.iter().find(|p| p.timer.id == timer_id) else {
                // Closed (by a cancel, or its firing), or none.
                return match self.closed_timer(id, timer_id, now).await? {
                    Some(t) if t.status == TimerStatus::Fired => Ok(Some(CancelOutcome::Fired(t))),
                    Some(t) if t.status == TimerStatus::Cancelled => {
                        Ok(Some(CancelOutcome::Cancelled(t)))
                    }
                    _ => Err(StoreError::NotFound),
                };
            };
            let close = TimerClose {
                timer: pending.timer.clone(),
                status: TimerStatus::Cancelled,
                read_trev: read.trev,
                next: read.next_after(Some(timer_id)),
                ttl: pending.ttl,
            };
            let mut update = String::new();
            let mut condition = String::from(META_LIVE);
            let mut values: Item = HashMap::from([(":now".into(), n(now))]);
            close.meta_update(&mut update, &mut condition, &mut values);
            let meta = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), "META".into())))
                .update_expression(update)
                .condition_expression(condition)
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(tx_err)?;
            let mut items = vec![TransactWriteItem::builder().update(meta).build()];
            items.extend(close.items(&self.table, id, None, now)?);
            match self
                .transact(items, "TransactWriteItems cancel timer")
                .await?
            {
                Ok(()) => Ok(Some(CancelOutcome::Cancelled(close.closed(None, now)))),
                Err(reasons) => {
                    let gone = failed(&reasons, 0)
                        && reasons[0].item().is_some_and(|meta| meta_gone(meta, now));
                    if gone {
                        return Err(StoreError::AddressGone);
                    }
                    // Another step moved `trev` (its firing, a cancel, a creation), or a
                    // re-send of ours applied: look again.
                    Ok(None)
                }
            }
        })
        .await
    }

    /// Fires the due timers one transaction each, earliest first, each re-reading the address.
    async fn fire_timers(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64> {
        let commit = async {
            let mut fired: Vec<(EventRef, String)> = Vec::new();
            loop {
                let step = with_append_retries(|| async move {
                    let read = self.read_for_timers(id, now).await?;
                    let Some(due) = read.pending.iter().find(|p| p.timer.fire_at <= now) else {
                        return Ok(Some(Firing::Done));
                    };
                    if !self
                        .quota_allows(id, read.address.last_sequence + 1, limits, now)
                        .await?
                    {
                        return Ok(Some(Firing::Done));
                    }
                    let close = TimerClose {
                        timer: due.timer.clone(),
                        status: TimerStatus::Fired,
                        read_trev: read.trev,
                        next: read.next_after(Some(&due.timer.id)),
                        ttl: due.ttl.max(timer_ttl(now, limits)),
                    };
                    let event = due.timer.fired_event();
                    match self
                        .append_closing_tx(
                            &read.address,
                            &event,
                            None,
                            None,
                            Some(&close),
                            limits,
                            now,
                        )
                        .await?
                    {
                        Ok(at) => Ok(Some(Firing::Fired(at, event.event_type))),
                        Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                        // A lost race (the sequence, or `trev`: another firing or a cancel).
                        Err(_) => Ok(None),
                    }
                })
                .await?;
                match step {
                    Firing::Fired(at, event_type) => fired.push((at, event_type)),
                    Firing::Done => return Ok(fired),
                }
            }
        };
        let fired = self
            .telling(now, commit, |fired| match fired.last() {
                Some((last, _)) => Tell::Head(
                    id.to_owned(),
                    last.sequence,
                    fired.iter().map(|(_, t)| t.clone()).collect(),
                ),
                None => Tell::Nothing,
            })
            .await?;
        Ok(fired.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_timers_sort_by_closing_time_and_apart_from_pending_ones() {
        assert!(closed_sk(9_999, "tmr_b") < closed_sk(10_000, "tmr_a"));
        assert!(closed_sk(10_000, "tmr_a") < closed_sk(10_000, "tmr_b"));
        for sk in [
            closed_sk(1, "tmr_a"),
            pointer_sk("tmr_a"),
            key_record_sk("ab"),
        ] {
            assert!(!sk.starts_with(PENDING_PREFIX), "{sk}");
        }
        assert!(pending_sk("tmr_a").starts_with(PENDING_PREFIX));
        assert!(!pending_sk("tmr_a").starts_with(CLOSED_PREFIX));
        // No other record of the partition starts like a pending timer.
        for other in ["META", "S#k", "E#1", "I#h", "Q#r", "QX#r", "W#c", "WN"] {
            assert!(!other.starts_with(PENDING_PREFIX));
            assert!(!other.starts_with(CLOSED_PREFIX));
        }
    }

    #[test]
    fn a_timer_item_round_trips() {
        let timer = TimerRecord {
            id: "tmr_x".into(),
            fire_at: 5_000,
            event_type: "timer.fired".into(),
            data: Some(r#"{"n":1}"#.into()),
            created_at: 1_000,
            status: TimerStatus::Fired,
            closed_at: Some(6_000),
            event: Some(EventRef {
                id: "evt_1".into(),
                sequence: 3,
            }),
        };
        let item = timer_item("addr_a", closed_sk(6_000, "tmr_x"), &timer, 99);
        assert_eq!(TimerRecord::from_item(&item), Ok(timer.clone()));
        let pending = TimerRecord {
            data: None,
            status: TimerStatus::Pending,
            closed_at: None,
            event: None,
            ..timer
        };
        let item = timer_item("addr_a", pending_sk("tmr_x"), &pending, 99);
        assert_eq!(TimerRecord::from_item(&item), Ok(pending));
    }
}
