//! Wake hooks on AWS (docs/API.md §19): an address's hooks, their delivery state written by
//! compare-and-set on their `revision`, and the hooks' own reports appended with it. On AWS a
//! queue drives the wakes, so [`Hooks::due_hooks`] keeps its default (none).
//!
//! The hook items are in the address's partition (the purge removes them with the rest):
//! - **hook** `H#{hook_id}`: every field of its record (`hook_id`, `address_id`, `url`,
//!   `types` and `headers` as lists, in their order, `format`, `secret` as given: its wakes are
//!   signed with it, `debounce_seconds`, `status`, `created_at`, the delivery state, `revision`),
//!   its `order` among the address's hooks (listing is oldest first), the `write_id` of its last
//!   write (random: a re-sent write recognises its own earlier attempt) and the address's expiry
//!   as its `ttl`.
//!
//! META keeps, beside the address: `hooks` (how many it has: the cap), `hooks_made` (how many it
//! ever had: the next hook's `order`), `hook_deleted_by` (the last deletion's random mark) and
//! `hook_types`, a map of each ACTIVE hook's id to its patterns, so that an address is read with
//! its hook types (their union, [`AddressRecord::hook_types`]) and an append decides whether
//! anything needs waking without another read. New addresses get the map at creation; older
//! ones with their first hook (an address without the map has no hooks).
//!
//! Each step is one write with conditions instead of locks:
//! - **add** (and hooks made with their address, in its create transaction): one
//!   `TransactWriteItems` of META (live, its sequence and `hooks_made` as read: each hook's
//!   cursor is the feed's head, each `order` its own; `hooks` within the cap; counts up and
//!   sets the hooks' types) and each hook's `Put` (new). A lost race re-reads.
//! - **save**: when the status stays and nothing is appended (a claim, a delivered wake), one
//!   `UpdateItem` of the hook conditioned on its revision (and status) as read; otherwise one
//!   `TransactWriteItems` of META (live; the hook's types set when it is active and removed when
//!   not; with reports, its sequence as read, moved on past them), the hook's update (its
//!   revision as read) and the reports' event items, beyond the feed quota. A lost sequence race
//!   re-reads; a moved revision is the answer `None`.
//! - **delete**: one `TransactWriteItems` of the hook's `Delete` (it exists) and META (live;
//!   counts down, removes its types).
//!
//! Reads are of META (live) and then of the hook items, strongly consistent.
//!
//! Ambiguous outcomes (crate docs): the transactions carry an explicit token; a re-send that is
//! cancelled (or a re-sent `UpdateItem` refused) by its own earlier attempt is recognised by the
//! random `write_id` it left on the hook (`hook_deleted_by` on META for a deletion) and
//! answered as the write it repeats.
//!
//! [`Hooks::due_hooks`]: crate::store::Hooks::due_hooks
//! [`AddressRecord::hook_types`]: crate::store::AddressRecord::hook_types

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Delete, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

use crate::cond_update::{failed, new_item, tx_err, CondUpdate, Updated};
use crate::domain::hooks::HookFormat;
use crate::domain::{ids, Limits, Millis};
use crate::item::*;
use crate::retry::{uuid_like, with_append_retries};
use crate::store::{
    AddressRecord, EventRef, HookDelivery, HookRecord, HookStatus, Hooks, NewEvent, NewHook,
    StoreError, StoreResult,
};
use crate::{DynamoStore, Item, Tell};

/// The prefix of hook items' sort keys.
const HOOK_PREFIX: &str = "H#";

/// META's map of each active hook's id to its patterns.
const HOOK_TYPES: &str = "hook_types";

fn hook_sk(hook_id: &str) -> String {
    format!("{HOOK_PREFIX}{hook_id}")
}

/// Every attribute of a hook item that its record and its place are read from.
const HOOK_ATTRIBUTES: [&str; 20] = [
    "hook_id",
    "address_id",
    "url",
    "types",
    "format",
    "headers",
    "secret",
    "debounce_seconds",
    "status",
    "created_at",
    "delivered_through",
    "pending_to",
    "attempts",
    "not_before",
    "lease_until",
    "last_wake_at",
    "failed_ranges",
    "last_error",
    "revision",
    "order",
];

/// A hook item (`H#{hook_id}`) as a record.
impl FromItem for HookRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "hook");
        Ok(HookRecord {
            id: f.s("hook_id")?,
            address_id: f.s("address_id")?,
            url: f.s("url")?,
            types: f.list("types")?,
            format: f.parsed("format", HookFormat::parse)?,
            headers: f.pairs("headers")?,
            secret: f.s("secret")?,
            debounce_seconds: f.u("debounce_seconds")?,
            status: f.parsed("status", HookStatus::parse)?,
            created_at: f.i("created_at")?,
            delivery: HookDelivery {
                delivered_through: f.u("delivered_through")?,
                pending_to: f.opt_u("pending_to")?,
                attempts: f.u32("attempts")?,
                not_before: f.opt_i("not_before")?,
                lease_until: f.opt_i("lease_until")?,
                last_wake_at: f.opt_i("last_wake_at")?,
                failed_ranges: f.u32("failed_ranges")?,
                last_error: f.opt_s("last_error")?,
            },
            revision: f.u("revision")?,
        })
    }
}

/// The union of the patterns of META's `hook_types` (deduplicated, in their first place, the
/// hooks taken in the order of their ids): [`AddressRecord::hook_types`].
pub(crate) fn meta_hook_types(meta: &Fields<'_>) -> StoreResult<Vec<String>> {
    let mut types: Vec<String> = Vec::new();
    for (_, patterns) in meta.lists_by_key(HOOK_TYPES)? {
        for p in patterns {
            if !types.contains(&p) {
                types.push(p);
            }
        }
    }
    Ok(types)
}

fn string_list(values: &[String]) -> AttributeValue {
    AttributeValue::L(values.iter().map(s).collect())
}

/// The item of `hook`, the address's `order`-th, last written by `write_id`, forgotten with
/// its address (`expires_at`).
fn hook_item(hook: &HookRecord, order: u64, expires_at: Option<Millis>, write_id: &str) -> Item {
    let mut item = key(pk(&hook.address_id), hook_sk(&hook.id));
    item.insert("hook_id".into(), s(&hook.id));
    item.insert("address_id".into(), s(&hook.address_id));
    item.insert("url".into(), s(&hook.url));
    item.insert("types".into(), string_list(&hook.types));
    item.insert("format".into(), s(hook.format.as_str()));
    item.insert(
        "headers".into(),
        AttributeValue::L(
            hook.headers
                .iter()
                .map(|(name, value)| AttributeValue::L(vec![s(name), s(value)]))
                .collect(),
        ),
    );
    item.insert("secret".into(), s(&hook.secret));
    item.insert("debounce_seconds".into(), n(hook.debounce_seconds));
    item.insert("status".into(), s(hook.status.as_str()));
    item.insert("created_at".into(), n(hook.created_at));
    let d = &hook.delivery;
    item.insert("delivered_through".into(), n(d.delivered_through));
    if let Some(v) = d.pending_to {
        item.insert("pending_to".into(), n(v));
    }
    item.insert("attempts".into(), n(d.attempts));
    for (name, v) in [
        ("not_before", d.not_before),
        ("lease_until", d.lease_until),
        ("last_wake_at", d.last_wake_at),
    ] {
        if let Some(v) = v {
            item.insert(name.into(), n(v));
        }
    }
    item.insert("failed_ranges".into(), n(d.failed_ranges));
    if let Some(e) = &d.last_error {
        item.insert("last_error".into(), s(e));
    }
    item.insert("revision".into(), n(hook.revision));
    item.insert("order".into(), n(order));
    item.insert("write_id".into(), s(write_id));
    if let Some(e) = expires_at {
        item.insert("ttl".into(), n(ttl_secs(e)));
    }
    item
}

/// The items of the hooks made with a new address (docs/API.md §19): the hooks' `Put`s (each
/// new), written in its create transaction; META gets `hooks`, `hooks_made` and `hook_types`
/// from [`new_meta_hooks`]. Each is active, its cursor at 0, created with the address.
pub(crate) fn new_address_hooks(
    table: &str, id: &str, hooks: &[NewHook], created_at: Millis, expires_at: Option<Millis>,
) -> StoreResult<Vec<TransactWriteItem>> {
    let write_id = uuid_like();
    hooks
        .iter()
        .zip(1..)
        .map(|(hook, order)| {
            let record = HookRecord::new(id, hook.clone(), 0, created_at);
            new_item(table, hook_item(&record, order, expires_at, &write_id))
        })
        .collect()
}

/// META's hook attributes at creation, with `hooks` its first hooks.
pub(crate) fn new_meta_hooks(meta: &mut Item, hooks: &[NewHook]) {
    meta.insert("hooks".into(), n(hooks.len()));
    meta.insert("hooks_made".into(), n(hooks.len()));
    meta.insert(
        HOOK_TYPES.into(),
        AttributeValue::M(
            hooks
                .iter()
                .map(|h| (h.id.clone(), string_list(&h.types)))
                .collect(),
        ),
    );
}

/// The update of a hook item to `hook`'s status and delivery state, by `write_id`, its
/// revision one more: the update expression (`#st` for `status`) and its values.
fn delivery_update(hook: &HookRecord, write_id: &str) -> (String, Item) {
    let d = &hook.delivery;
    let mut set: Vec<String> = [
        "#st = :st",
        "delivered_through = :dt",
        "attempts = :att",
        "failed_ranges = :fr",
        "revision = :next_rev",
        "write_id = :w",
    ]
    .map(String::from)
    .to_vec();
    let mut values: Item = HashMap::from([
        (":st".into(), s(hook.status.as_str())),
        (":dt".into(), n(d.delivered_through)),
        (":att".into(), n(d.attempts)),
        (":fr".into(), n(d.failed_ranges)),
        (":next_rev".into(), n(hook.revision + 1)),
        (":w".into(), s(write_id)),
    ]);
    let mut remove = Vec::new();
    let optional = [
        ("pending_to", ":pt", d.pending_to.map(n)),
        ("not_before", ":nb", d.not_before.map(n)),
        ("lease_until", ":lu", d.lease_until.map(n)),
        ("last_wake_at", ":lw", d.last_wake_at.map(n)),
        ("last_error", ":le", d.last_error.as_deref().map(s)),
    ];
    for (name, placeholder, value) in optional {
        match value {
            Some(v) => {
                set.push(format!("{name} = {placeholder}"));
                values.insert(placeholder.into(), v);
            }
            None => remove.push(name),
        }
    }
    let mut update = format!("SET {}", set.join(", "));
    if !remove.is_empty() {
        update.push_str(" REMOVE ");
        update.push_str(&remove.join(", "));
    }
    (update, values)
}

/// The live address `id`'s META item and record.
async fn live_meta(
    store: &DynamoStore, id: &str, now: Millis,
) -> StoreResult<(Item, AddressRecord)> {
    let item = store.meta(id).await?.ok_or(StoreError::AddressNotFound)?;
    let record = AddressRecord::from_item(&item)?;
    if record.is_gone(now) {
        return Err(StoreError::AddressGone);
    }
    Ok((item, record))
}

/// The answer a cancelled transaction's META reason gives, if it is one: the address is gone
/// (or was forgotten).
fn meta_refused(reasons: &[CancellationReason], now: Millis) -> Option<StoreError> {
    if !failed(reasons, 0) {
        return None;
    }
    match reasons.first().and_then(|r| r.item()) {
        None => Some(StoreError::AddressNotFound),
        Some(meta) if meta_gone(meta, now) => Some(StoreError::AddressGone),
        Some(_) => None,
    }
}

/// Whether a hook item (as a failed condition found it) was last written by `write_id`.
fn written_by(item: &Item, write_id: &str) -> bool {
    get_s(item, "write_id").as_deref() == Some(write_id)
}

/// How a save ended: the hook as written (`Some`) or another write first (`None`), and the
/// feed's head when reports were appended.
type Saved = (Option<HookRecord>, Option<u64>);

impl DynamoStore {
    /// A save that changes no status and appends nothing: one `UpdateItem` of the hook,
    /// conditioned on its revision and status as read. `Ok(None)`: its status changes (the
    /// transaction, [`DynamoStore::save_hook_tx`], writes it).
    async fn save_hook_alone(
        &self, id: &str, hook: &HookRecord, write_id: &str,
    ) -> StoreResult<Option<Option<HookRecord>>> {
        let (update, mut values) = delivery_update(hook, write_id);
        values.insert(":rev".into(), n(hook.revision));
        let updated = self
            .cond_update(
                id,
                CondUpdate {
                    sk: hook_sk(&hook.id),
                    update: &update,
                    condition: "revision = :rev AND #st = :st",
                    names: &[("#st", "status")],
                    values,
                    op: "UpdateItem hook",
                },
            )
            .await?;
        match updated {
            Updated::Applied(item) => HookRecord::from_item(&item).map(|h| Some(Some(h))),
            Updated::Refused(None) => Err(StoreError::NotFound),
            // An SDK re-send after our first attempt applied: our own write.
            Updated::Refused(Some(old)) if written_by(&old, write_id) => {
                HookRecord::from_item(&old).map(|h| Some(Some(h)))
            }
            Updated::Refused(Some(old)) => {
                if Fields::of(&old, "hook").u("revision")? != hook.revision {
                    Ok(Some(None))
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// A save in one transaction with META (see the module docs), by `write_id`. `Ok(None)`: a
    /// lost sequence race (or a conflict): read again.
    #[allow(clippy::too_many_arguments)]
    async fn save_hook_tx(
        &self, id: &str, hook: &HookRecord, events: &[NewEvent], write_id: &str, limits: &Limits,
        now: Millis,
    ) -> StoreResult<Option<Saved>> {
        let (meta, address) = live_meta(self, id, now).await?;
        if !meta.contains_key(HOOK_TYPES) {
            // An address from before hooks that never had one.
            return Err(StoreError::NotFound);
        }
        let cur = address.last_sequence;
        let count = events.len() as u64;
        let mut values: Item = HashMap::from([(":now".into(), n(now))]);
        let mut set = Vec::new();
        let mut condition = format!("attribute_exists(pk) AND {META_LIVE}");
        if count > 0 {
            set.push("seq = :next");
            values.insert(":next".into(), n(cur + count));
            values.insert(":cur".into(), n(cur));
            condition.push_str(" AND seq = :cur");
        }
        let mut update = String::new();
        if hook.status == HookStatus::Active {
            set.push("hook_types.#h = :types");
            values.insert(":types".into(), string_list(&hook.types));
            update.push_str(&format!("SET {}", set.join(", ")));
        } else {
            if !set.is_empty() {
                update.push_str(&format!("SET {} ", set.join(", ")));
            }
            update.push_str("REMOVE hook_types.#h");
        }
        let meta_update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), "META".into())))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#h", &hook.id)
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(tx_err)?;

        let (update, mut values) = delivery_update(hook, write_id);
        values.insert(":rev".into(), n(hook.revision));
        let hook_update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), hook_sk(&hook.id))))
            .update_expression(update)
            .condition_expression("revision = :rev")
            .expression_attribute_names("#st", "status")
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(tx_err)?;

        let mut items = vec![
            TransactWriteItem::builder().update(meta_update).build(),
            TransactWriteItem::builder().update(hook_update).build(),
        ];
        const HOOK: usize = 1;
        // The reports, beyond the feed quota (one per range the feed accepted).
        let expires_at = limits.event_expiry(now, address.expires_at);
        for (seq, event) in (cur + 1..).zip(events) {
            let at = EventRef {
                id: ids::new_event_id(seq),
                sequence: seq,
            };
            items.extend(self.event_items(id, &at, event, &[], expires_at, now)?);
        }
        let head = (count > 0).then_some(cur + count);
        let written = HookRecord {
            address_id: id.to_owned(),
            revision: hook.revision + 1,
            ..hook.clone()
        };
        let Err(reasons) = self.transact(items, "TransactWriteItems hook").await? else {
            return Ok(Some((Some(written), head)));
        };
        let found = reasons
            .get(HOOK)
            .filter(|r| r.code() == Some("ConditionalCheckFailed"))
            .map(|r| r.item());
        if let Some(Some(old)) = found {
            // A re-send the token did not settle, after our first attempt applied: our write.
            if written_by(old, write_id) {
                return Ok(Some((Some(HookRecord::from_item(old)?), head)));
            }
        }
        if let Some(e) = meta_refused(&reasons, now) {
            return Err(e);
        }
        match found {
            Some(None) => Err(StoreError::NotFound),
            Some(Some(old)) if Fields::of(old, "hook").u("revision")? != hook.revision => {
                Ok(Some((None, None)))
            }
            // The sequence moved (or a transaction held an item): read again.
            _ => Ok(None),
        }
    }
}

#[async_trait]
impl Hooks for DynamoStore {
    async fn add_hooks(
        &self, id: &str, hooks: Vec<NewHook>, max: usize, now: Millis,
    ) -> StoreResult<Vec<HookRecord>> {
        if hooks.is_empty() {
            self.live(id, now).await?;
            return Ok(Vec::new());
        }
        let hooks = &hooks;
        let new = hooks.len() as u64;
        // One for every attempt of this call: a later attempt recognises an earlier one's hooks.
        let write_id = &uuid_like();
        with_append_retries(|| async move {
            let (meta, address) = live_meta(self, id, now).await?;
            let f = Fields::of(&meta, "META");
            let held = f.count("hooks")?;
            let made = f.count("hooks_made")?;
            let max = max as u64;
            if held + new > max {
                return Err(StoreError::QuotaExceeded);
            }
            let head = address.last_sequence;
            let records: Vec<HookRecord> = hooks
                .iter()
                .map(|h| HookRecord::new(id, h.clone(), head, now))
                .collect();

            let mut values: Item = HashMap::from([
                (":now".into(), n(now)),
                (":seq".into(), n(head)),
                (":made".into(), n(made)),
                (":room".into(), n(max - new)),
                (":new".into(), n(new)),
            ]);
            let mut names: HashMap<String, String> =
                HashMap::from([("#hooks".into(), "hooks".into())]);
            let mut condition = format!(
                "attribute_exists(pk) AND {META_LIVE} AND seq = :seq AND \
                 (attribute_not_exists(hooks_made) OR hooks_made = :made) AND \
                 (attribute_not_exists(#hooks) OR #hooks <= :room)"
            );
            let set = if meta.contains_key(HOOK_TYPES) {
                let mut set = Vec::new();
                for (i, r) in records.iter().enumerate() {
                    set.push(format!("{HOOK_TYPES}.#h{i} = :t{i}"));
                    names.insert(format!("#h{i}"), r.id.clone());
                    values.insert(format!(":t{i}"), string_list(&r.types));
                }
                set.join(", ")
            } else {
                // An address from before hooks: its first hooks make the map.
                condition.push_str(&format!(" AND attribute_not_exists({HOOK_TYPES})"));
                values.insert(
                    ":types".into(),
                    AttributeValue::M(
                        records
                            .iter()
                            .map(|r| (r.id.clone(), string_list(&r.types)))
                            .collect(),
                    ),
                );
                format!("{HOOK_TYPES} = :types")
            };
            let meta_update = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), "META".into())))
                .update_expression(format!("SET {set} ADD #hooks :new, hooks_made :new"))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(tx_err)?;
            let mut items = vec![TransactWriteItem::builder().update(meta_update).build()];
            for (record, order) in records.iter().zip(made + 1..) {
                items.push(new_item(
                    &self.table,
                    hook_item(record, order, address.expires_at, write_id),
                )?);
            }
            let Err(reasons) = self.transact(items, "TransactWriteItems add hooks").await? else {
                return Ok(Some(records));
            };
            // A re-send the token did not settle, after an earlier attempt applied: its hooks.
            let ours: Vec<Option<&Item>> = reasons
                .iter()
                .skip(1)
                .take(records.len())
                .map(|r| {
                    r.item()
                        .filter(|_| r.code() == Some("ConditionalCheckFailed"))
                        .filter(|old| written_by(old, write_id))
                })
                .collect();
            if ours.len() == records.len() && ours.iter().all(Option::is_some) {
                return ours
                    .into_iter()
                    .flatten()
                    .map(HookRecord::from_item)
                    .collect::<StoreResult<Vec<_>>>()
                    .map(Some);
            }
            if ours.iter().any(Option::is_some) {
                return Ok(Some(records));
            }
            if let Some(e) = meta_refused(&reasons, now) {
                return Err(e);
            }
            // The sequence moved, or hooks were added meanwhile: decide again on a fresh read.
            Ok(None)
        })
        .await
    }

    async fn list_hooks(&self, id: &str, now: Millis) -> StoreResult<Vec<HookRecord>> {
        self.live(id, now).await?;
        let names: Vec<(String, &str)> = HOOK_ATTRIBUTES
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("#a{i}"), *a))
            .collect();
        let projection = names
            .iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let names: Vec<(&str, &str)> = names.iter().map(|(p, a)| (p.as_str(), *a)).collect();
        let items = self
            .items_with_prefix(id, HOOK_PREFIX, &projection, &names, "Query hooks")
            .await?;
        let mut hooks = items
            .iter()
            .map(|item| {
                let order = Fields::of(item, "hook").u("order")?;
                Ok((order, HookRecord::from_item(item)?))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        hooks.sort_by(|(a, x), (b, y)| a.cmp(b).then_with(|| x.id.cmp(&y.id)));
        Ok(hooks.into_iter().map(|(_, h)| h).collect())
    }

    async fn get_hook(&self, id: &str, hook_id: &str, now: Millis) -> StoreResult<HookRecord> {
        self.live(id, now).await?;
        let item = self
            .get(id, hook_sk(hook_id))
            .await?
            .ok_or(StoreError::NotFound)?;
        HookRecord::from_item(&item)
    }

    async fn save_hook(
        &self, id: &str, hook: HookRecord, events: Vec<NewEvent>, limits: &Limits, now: Millis,
    ) -> StoreResult<Option<HookRecord>> {
        let appended: Vec<String> = events.iter().map(|e| e.event_type.clone()).collect();
        let commit = async {
            let (hook, events) = (&hook, &events);
            // One for every attempt of this save: a later attempt recognises an earlier one.
            let write_id = &uuid_like();
            if events.is_empty() {
                self.live(id, now).await?;
                if let Some(saved) = self.save_hook_alone(id, hook, write_id).await? {
                    return Ok((saved, None));
                }
            }
            let saved =
                with_append_retries(|| self.save_hook_tx(id, hook, events, write_id, limits, now))
                    .await?;
            // A status change without reports that leaves the hook active is its reactivation:
            // events that came while it was paused or disabled are its to wake for.
            if events.is_empty()
                && saved
                    .0
                    .as_ref()
                    .is_some_and(|h| h.status == HookStatus::Active)
            {
                self.queue_wake(id).await;
            }
            Ok(saved)
        };
        let (saved, _) = self
            .telling(now, commit, |(_, head)| match head {
                Some(head) => Tell::Head(id.to_owned(), *head, appended),
                None => Tell::Nothing,
            })
            .await?;
        Ok(saved)
    }

    async fn delete_hook(&self, id: &str, hook_id: &str, now: Millis) -> StoreResult<()> {
        // Marks this deletion as ours on META, so that a re-send finding the hook gone knows
        // whether it is ours (as `delete_address` marks its tombstone).
        let write_id = &uuid_like();
        with_append_retries(|| async move {
            let (meta, _) = live_meta(self, id, now).await?;
            if !meta.contains_key(HOOK_TYPES) {
                // An address from before hooks that never had one.
                return Err(StoreError::NotFound);
            }
            let delete = Delete::builder()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), hook_sk(hook_id))))
                .condition_expression("attribute_exists(pk)")
                .build()
                .map_err(tx_err)?;
            let meta_update = Update::builder()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), "META".into())))
                .update_expression(format!(
                    "SET hook_deleted_by = :w ADD #hooks :minus_one REMOVE {HOOK_TYPES}.#h"
                ))
                .condition_expression(format!(
                    "attribute_exists(pk) AND {META_LIVE} AND \
                     (attribute_not_exists(hook_deleted_by) OR hook_deleted_by <> :w)"
                ))
                .expression_attribute_names("#hooks", "hooks")
                .expression_attribute_names("#h", hook_id)
                .expression_attribute_values(":minus_one", n(-1))
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":w", s(write_id))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(tx_err)?;
            let items = vec![
                TransactWriteItem::builder().update(meta_update).build(),
                TransactWriteItem::builder().delete(delete).build(),
            ];
            let Err(reasons) = self
                .transact(items, "TransactWriteItems delete hook")
                .await?
            else {
                return Ok(Some(()));
            };
            // A re-send the token did not settle, after an earlier attempt applied.
            let ours = reasons.first().is_some_and(|r| {
                r.code() == Some("ConditionalCheckFailed")
                    && r.item().is_some_and(|meta| {
                        get_s(meta, "hook_deleted_by").as_deref() == Some(write_id)
                    })
            });
            if ours {
                return Ok(Some(()));
            }
            if let Some(e) = meta_refused(&reasons, now) {
                return Err(e);
            }
            if failed(&reasons, 1) {
                return Err(StoreError::NotFound);
            }
            // A transaction held an item: nothing applied, try again.
            Ok(None)
        })
        .await
    }
}

#[cfg(test)]
mod tests;
