//! The append transaction (crate docs): one `TransactWriteItems` per delivery, state write or
//! state delete, the feed quota checked before it, and how its cancellation reasons are read.
//!
//! An event that closes a record — a request answered or expired (docs/API.md §12), a timer
//! fired (§20) — is appended by the same transaction with the record's items riding in it
//! ([`Closing`]): the record conditioned on its still being open, and META's revision of that
//! kind of record ([`Revision`]) beside the sequence bump, so that either everything applies or
//! nothing does.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Delete, Put, ReturnConsumedCapacity,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use crate::capacity::Tally;
use crate::domain::{ids, Limits, Millis};
use crate::item::*;
use crate::retry::uuid_like;
use crate::store::rules::{self, Quota};
use crate::store::{
    AddressRecord, EventRef, IdempotencyClaim, NewEvent, RequestRecord, StoreError, StoreResult,
};
use crate::{DynamoStore, Item};

/// How a cancelled append transaction is to be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// Another writer moved the sequence (or a transient conflict): re-read and retry.
    Retry,
    /// The address was deleted or has expired meanwhile.
    Gone,
    /// The state item's condition failed; its current revision, `None` if it does not exist.
    StateConflict(Option<u64>),
    /// The idempotency item exists: its event and body hash (a delivery's key record has one;
    /// an email's record, keyed by its email id, has none).
    Idempotent {
        event: EventRef,
        body_hash: Option<String>,
    },
    /// The request the event was to close is closed already (answered, or expired): the
    /// request as the failed condition found it (docs/API.md §12).
    RequestClosed(RequestRecord),
}

/// Reads the cancellation reasons of an append transaction item by item. `meta`, `state` and
/// `idem` are the positions of those items in the transaction.
pub fn classify_cancellation(
    reasons: &[CancellationReason], meta: usize, state: Option<usize>, idem: Option<usize>,
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
            let f = Fields::of(item, "idempotency key");
            // An unreadable record decides nothing: the caller looks again.
            if let (Ok(id), Ok(sequence), Ok(body_hash)) =
                (f.s("event_id"), f.u("seq"), f.opt_s("body_hash"))
            {
                return Cancelled::Idempotent {
                    event: EventRef { id, sequence },
                    body_hash,
                };
            }
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
            .and_then(|item| Fields::of(item, "state").u("revision").ok());
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
    reasons: &[CancellationReason], event: usize, idem: Option<usize>, event_id: &str,
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

/// The record that makes an append idempotent, written in its transaction on the condition that
/// no live one exists: a delivery's Idempotency-Key (`I#{sha256(key)}`) or an email's `email_id`
/// (`M#{email_id}`, docs/API.md §10). When it exists, the transaction is cancelled and its event
/// is the answer ([`Cancelled::Idempotent`]).
pub(crate) struct Claim {
    /// Its sort key.
    sk: String,
    /// Its attributes besides keys, `seq`, `event_id`, `expires_at` and `ttl`.
    attrs: Vec<(&'static str, AttributeValue)>,
    /// Attributes the event item gets besides its own.
    event_attrs: Vec<(&'static str, AttributeValue)>,
}

impl Claim {
    /// A delivery's Idempotency-Key.
    pub(crate) fn delivery(claim: &IdempotencyClaim) -> Self {
        Self {
            sk: format!("I#{}", claim.key_hash),
            attrs: vec![("body_hash", s(&claim.body_hash))],
            event_attrs: Vec::new(),
        }
    }

    /// An email's `email_id`, with the object holding its raw message and that message's size;
    /// the event item records both too.
    pub(crate) fn email(email_id: &str, raw_key: &str, raw_size: u64) -> Self {
        Self {
            sk: email_sk(email_id),
            attrs: vec![
                ("email_id", s(email_id)),
                ("raw_key", s(raw_key)),
                ("raw_size", n(raw_size)),
            ],
            event_attrs: vec![("email_id", s(email_id)), ("raw_key", s(raw_key))],
        }
    }
}

/// A kind of record whose open ones META keeps a revision and an earliest due time of: each
/// step that opens or closes one is conditioned on the revision it read (so that a cap and the
/// earliest due time are judged on what the transaction replaces) and moves it on.
pub(crate) struct Revision {
    /// META's revision attribute (`qrev`, `trev`).
    pub(crate) rev: &'static str,
    /// META's earliest due time of the open records (`next_request_expiry`, `next_timer_at`).
    pub(crate) next: &'static str,
}

impl Revision {
    /// Adds to a META update (`update` is empty, or a `SET` clause; call it last, as it may
    /// end the expression with a `REMOVE` clause): the revision + 1, conditioned on `read` (the
    /// revision as read: 0 is absent), and the earliest due time set to `next` (removed when
    /// `None`).
    pub(crate) fn meta_update(
        &self, read: u64, next: Option<Millis>, update: &mut String, condition: &mut String,
        values: &mut Item,
    ) {
        let (rev, due) = (self.rev, self.next);
        update.push_str(if update.is_empty() { "SET " } else { ", " });
        update.push_str(&format!("{rev} = :{rev}_next"));
        values.insert(format!(":{rev}_next"), n(read + 1));
        if read == 0 {
            condition.push_str(&format!(" AND attribute_not_exists({rev})"));
        } else {
            condition.push_str(&format!(" AND {rev} = :{rev}_cur"));
            values.insert(format!(":{rev}_cur"), n(read));
        }
        match next {
            Some(t) => {
                update.push_str(&format!(", {due} = :{rev}_due"));
                values.insert(format!(":{rev}_due"), n(t));
            }
            None => update.push_str(&format!(" REMOVE {due}")),
        }
    }
}

/// A record an appended event closes in the same transaction (module docs): a request's
/// (`requests::RequestClose`), a timer's (`timers::TimerClose`).
pub(crate) trait Closing: Send + Sync {
    /// Its part of the META update (see [`Revision::meta_update`]).
    fn meta_update(&self, update: &mut String, condition: &mut String, values: &mut Item);

    /// Its items, the first conditioned on the record's still being open (its cancellation
    /// reason is the one [`Closing::closed`] reads), made knowing the event that closes it
    /// (`None`: a close without an event, a timer's cancel).
    fn items(
        &self, table: &str, address_id: &str, event: Option<&EventRef>, now: Millis,
    ) -> StoreResult<Vec<TransactWriteItem>>;

    /// What the first item's failed condition says, from the item as it stands: `None` when
    /// it decides nothing (the caller re-reads).
    fn closed(&self, current: &Item) -> Option<Cancelled> {
        let _ = current;
        None
    }
}

/// The state change that rides along with an appended event.
pub(crate) enum StateChange {
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
    /// `Ok(())` when appending `seq` keeps the feed within its quota: event `seq - max` is
    /// past retention or gone (events expire in sequence order).
    /// The feed quota of `rules::quota` for appending `seq`.
    pub(crate) async fn quota_allows(
        &self, id: &str, seq: u64, limits: &Limits, now: Millis,
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

    /// Builds and runs the append transaction for `event` at `address.last_sequence + 1`.
    /// Returns `Ok(Err(cancelled))` when DynamoDB cancelled it.
    pub(crate) async fn append_tx(
        &self, address: &AddressRecord, event: &NewEvent, claim: Option<&Claim>,
        state: Option<&StateChange>, limits: &Limits, now: Millis,
    ) -> StoreResult<Result<EventRef, Cancelled>> {
        self.append_closing_tx(address, event, claim, state, None, limits, now)
            .await
    }

    /// [`DynamoStore::append_tx`], closing a record in the same transaction when `close` is
    /// given ([`Closing`]: its items conditioned on the record being open).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn append_closing_tx(
        &self, address: &AddressRecord, event: &NewEvent, claim: Option<&Claim>,
        state: Option<&StateChange>, close: Option<&dyn Closing>, limits: &Limits, now: Millis,
    ) -> StoreResult<Result<EventRef, Cancelled>> {
        self.append_riding_tx(
            address,
            event,
            claim,
            state,
            close,
            &|_| Ok(Vec::new()),
            limits,
            now,
        )
        .await
    }

    /// [`DynamoStore::append_closing_tx`] with `riders`: items of other records written in the
    /// same transaction, after the append's own, made knowing the event they ride with
    /// (outbound sends, docs/API.md §16). A rider's
    /// failed condition is [`Cancelled::Retry`] (unless the address is gone): the caller
    /// re-reads, and its checks before the transaction give the answer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn append_riding_tx(
        &self, address: &AddressRecord, event: &NewEvent, claim: Option<&Claim>,
        state: Option<&StateChange>, close: Option<&dyn Closing>,
        riders: &(dyn Fn(&EventRef) -> StoreResult<Vec<TransactWriteItem>> + Send + Sync),
        limits: &Limits, now: Millis,
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
        let mut condition = String::from(
            "seq = :cur AND attribute_not_exists(deleted_at) AND \
             (attribute_not_exists(expires_at) OR expires_at > :now)",
        );
        if let Some(c) = close {
            c.meta_update(&mut update_expr, &mut condition, &mut values);
        }
        items.push(
            TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(&self.table)
                        .set_key(Some(key(pk(id), "META".into())))
                        .update_expression(update_expr)
                        .condition_expression(condition)
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

        items.extend(self.event_items(
            id,
            &EventRef {
                id: event_id.clone(),
                sequence: seq,
            },
            event,
            claim.map(|c| c.event_attrs.as_slice()).unwrap_or_default(),
            expires_at,
            now,
        )?);

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
            let mut item = key(pk(id), claim.sk.clone());
            item.insert("seq".into(), n(seq));
            item.insert("event_id".into(), s(&event_id));
            for (name, value) in &claim.attrs {
                item.insert((*name).into(), value.clone());
            }
            item.insert("expires_at".into(), n(expires_at));
            item.insert("ttl".into(), n(ttl_secs(expires_at)));
            items.push(put(
                &self.table,
                item,
                Some("attribute_not_exists(pk) OR expires_at <= :now"),
                Some(HashMap::from([(":now".to_owned(), n(now))])),
            )?);
        }

        let at = EventRef {
            id: event_id.clone(),
            sequence: seq,
        };
        let mut close_index = None;
        if let Some(c) = close {
            close_index = Some(items.len());
            items.extend(c.items(&self.table, id, Some(&at), now)?);
        }
        items.extend(riders(&at)?);

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
            Ok(_) => {
                self.queue_wake_for(id, &address.hook_types, &event.event_type)
                    .await;
                Ok(Ok(ours))
            }
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
                            self.queue_wake_for(id, &address.hook_types, &event.event_type)
                                .await;
                            return Ok(Ok(ours));
                        }
                        let cancelled = classify_cancellation(
                            reasons,
                            meta_index,
                            state_index,
                            idem_index,
                            now,
                        );
                        // A record closed meanwhile (its condition failed with the item as it
                        // is) is the answer unless the address is gone, when its kind says so
                        // (a request's); otherwise the retry re-reads.
                        let closed = close.zip(close_index).and_then(|(c, i)| {
                            reasons
                                .get(i)
                                .filter(|r| r.code() == Some("ConditionalCheckFailed"))
                                .and_then(|r| r.item())
                                .and_then(|item| c.closed(item))
                        });
                        Ok(Err(match (cancelled, closed) {
                            (Cancelled::Retry, Some(closed)) => closed,
                            (cancelled, _) => cancelled,
                        }))
                    }
                    _ => Err(sdk_err("TransactWriteItems", SdkError::ServiceError(ctx))),
                }
            }
            // Unanswered after every SDK attempt: it may have applied, so the caller answers
            // `unavailable` and never re-runs the read-modify-write.
            Err(e) => Err(sdk_err("TransactWriteItems", e)),
        }
    }
}

impl DynamoStore {
    /// The items of `event` appended as `at` (received `now`, kept until `expires_at`): the
    /// event item, conditioned on not existing (first: its cancellation reason is the one
    /// [`applied_by_us`] reads), then the chunk items of data beyond [`CHUNK_BYTES`]. `extra`:
    /// attributes the event item gets besides its own.
    pub(crate) fn event_items(
        &self, id: &str, at: &EventRef, event: &NewEvent, extra: &[(&'static str, AttributeValue)],
        expires_at: Millis, now: Millis,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        let seq = at.sequence;
        let parts = split_utf8(&event.data, CHUNK_BYTES);
        let mut ev: Item = key(pk(id), event_sk(seq));
        ev.insert("id".into(), s(&at.id));
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
        for (name, value) in extra {
            ev.insert((*name).into(), value.clone());
        }
        let mut items = Vec::with_capacity(parts.len());
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
        Ok(items)
    }
}

fn put(
    table: &str, item: Item, condition: Option<&str>, values: Option<Item>,
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
                body_hash: Some("h".into())
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
}
