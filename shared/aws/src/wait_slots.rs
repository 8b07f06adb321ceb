//! Waiting slots (docs/API.md §6, "Waiting polls"): the cap on long polls waiting at once
//! across every Lambda environment, so that waiting agents can never take the concurrency the
//! receiving functions need (docs/SCALE.md, "Waiting never starves writing").
//!
//! The slots live in shard items `W#{cap}#{shard}` / `W` outside any address's partition (the
//! cap in the key: a deployment whose cap changes starts on new shards, and the old ones'
//! leases simply expire), each a map
//! `leases` of slot id → the time it frees itself (Unix ms). A cap of N has ⌈N / 25⌉ shards
//! of ⌈N / shards⌉ slots, so that each item stays near 1 KB (one write unit per take or
//! release). A poll takes a slot with one conditional `UpdateItem` (`size(leases) < :per`) on a
//! random shard, trying at most three shards; a full shard whose answer shows leases past their
//! time has them removed (each conditioned on its value, so a lease renewed meanwhile stays)
//! and is tried again once. A slot is handed back with `REMOVE`; one never handed back (an
//! environment that died mid-wait) frees itself when its time passes. Because each shard holds
//! its share, polls can be refused a little before N are waiting (never after): the cap is an
//! upper bound, as the operator needs it to be.

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};
use rand::Rng;

use crate::capacity::Tally;
use crate::domain::ids::new_wait_slot_id;
use crate::domain::Millis;
use crate::item::*;
use crate::store::StoreResult;
use crate::{DynamoStore, Item};

/// Slots per shard item, at most.
pub(crate) const SHARD_SLOTS: u64 = 25;
/// Shards tried by one poll before it is refused.
const SHARDS_TRIED: u64 = 3;

fn shard_key(cap: u64, shard: u64) -> Item {
    key(format!("W#{cap}#{shard}"), "W".into())
}

/// The outcome of one try on one shard.
enum Take {
    Taken,
    /// Full: the leases past their time, as the failed condition showed them.
    Full(Vec<(String, AttributeValue)>),
    /// The shard item does not exist yet.
    Missing,
}

impl DynamoStore {
    pub(crate) async fn take_wait_slot(
        &self, cap: u64, until: Millis, now: Millis,
    ) -> StoreResult<Option<String>> {
        if cap == 0 {
            return Ok(None);
        }
        let shards = cap.div_ceil(SHARD_SLOTS).max(1);
        let per_shard = cap.div_ceil(shards);
        let start = rand::thread_rng().gen_range(0..shards);
        for i in 0..SHARDS_TRIED.min(shards) {
            let shard = (start + i) % shards;
            // The slot names its shard, for its release: `{cap}.{shard}.ws_…`.
            let slot = format!("{cap}.{shard}.{}", new_wait_slot_id());
            for _round in 0..2 {
                match self
                    .try_take(cap, shard, &slot, per_shard, until, now)
                    .await?
                {
                    Take::Taken => return Ok(Some(slot)),
                    Take::Missing => {
                        if self.create_shard(cap, shard, &slot, until).await? {
                            return Ok(Some(slot));
                        }
                        // Another poll created it meanwhile: take a slot in it.
                    }
                    Take::Full(expired) if expired.is_empty() => break,
                    Take::Full(expired) => self.reclaim(cap, shard, expired).await?,
                }
            }
        }
        Ok(None)
    }

    async fn try_take(
        &self, cap: u64, shard: u64, slot: &str, per_shard: u64, until: Millis, now: Millis,
    ) -> StoreResult<Take> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(shard_key(cap, shard)))
            .update_expression("SET #l.#s = :until")
            .condition_expression("attribute_exists(#l) AND size(#l) < :per")
            .expression_attribute_names("#l", "leases")
            .expression_attribute_names("#s", slot)
            .expression_attribute_values(":until", n(until))
            .expression_attribute_values(":per", n(per_shard))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        match result {
            Ok(_) => Ok(Take::Taken),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(c)) => {
                    let leases = c
                        .item()
                        .and_then(|item| item.get("leases"))
                        .and_then(|l| l.as_m().ok());
                    let Some(leases) = leases else {
                        return Ok(Take::Missing);
                    };
                    let expired = leases
                        .iter()
                        .filter(|(_, v)| {
                            v.as_n()
                                .ok()
                                .and_then(|t| t.parse::<i64>().ok())
                                .is_none_or(|t| t <= now)
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    Ok(Take::Full(expired))
                }
                _ => Err(sdk_err("UpdateItem wait slot", e)),
            },
        }
    }

    /// Creates shard `shard` holding `slot` alone; `false` when it exists already.
    async fn create_shard(
        &self, cap: u64, shard: u64, slot: &str, until: Millis,
    ) -> StoreResult<bool> {
        let mut item = shard_key(cap, shard);
        item.insert(
            "leases".into(),
            AttributeValue::M([(slot.to_owned(), n(until))].into_iter().collect()),
        );
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        match result {
            Ok(_) => Ok(true),
            Err(e) => match e.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(_)) => Ok(false),
                _ => Err(sdk_err("PutItem wait slot shard", e)),
            },
        }
    }

    /// Removes `expired` leases of `shard`, each only if it still has the value seen.
    async fn reclaim(
        &self, cap: u64, shard: u64, expired: Vec<(String, AttributeValue)>,
    ) -> StoreResult<()> {
        // At most the shard's size; one request.
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(shard_key(cap, shard)))
            .expression_attribute_names("#l", "leases");
        let mut removes = Vec::new();
        let mut conditions = Vec::new();
        for (i, (slot, value)) in expired.into_iter().enumerate() {
            req = req
                .expression_attribute_names(format!("#e{i}"), slot)
                .expression_attribute_values(format!(":e{i}"), value);
            removes.push(format!("#l.#e{i}"));
            conditions.push(format!("#l.#e{i} = :e{i}"));
        }
        let result = req
            .update_expression(format!("REMOVE {}", removes.join(", ")))
            .condition_expression(conditions.join(" AND "))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                // Renewed or removed meanwhile: the next try sees the shard as it is.
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(sdk_err("UpdateItem wait slot reclaim", e)),
            },
        }
    }

    pub(crate) async fn give_back_wait_slot(&self, slot: &str) -> StoreResult<()> {
        let mut parts = slot.splitn(3, '.');
        let (Some(Ok(cap)), Some(Ok(shard))) = (
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<u64>),
        ) else {
            return Ok(());
        };
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(shard_key(cap, shard)))
            .update_expression("REMOVE #l.#s")
            .condition_expression("attribute_exists(#l)")
            .expression_attribute_names("#l", "leases")
            .expression_attribute_names("#s", slot)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(sdk_err("UpdateItem wait slot release", e)),
            },
        }
    }
}
