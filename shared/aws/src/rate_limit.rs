//! Rate-limit counters: one item per scope and minute, counted with `ADD`; and daily counts
//! (docs/API.md §16's server-wide caps on code mails): one item per scope and UTC day, counted
//! with a conditional `ADD` inside the transaction that issues the code
//! ([`DynamoStore::daily_count_up`]). Both live outside any address's partition and are
//! removed by the table's TTL.

use crate::store::RateLimits;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure, Update,
};

use crate::capacity::Tally;
use crate::domain::Millis;
use crate::item::*;
use crate::store::rules::rate_window;
use crate::store::StoreResult;
use crate::DynamoStore;

impl DynamoStore {
    /// The transaction item that counts one more for `scope` on UTC day `day`, conditioned
    /// below `max` (a cancellation with `ConditionalCheckFailed` on it: the cap is reached).
    /// The item is `R#{scope}#d{day}`, forgotten by TTL two days after the day began.
    pub(crate) fn daily_count_up(&self, scope: &str, day: i64, max: u64) -> StoreResult<Update> {
        Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(format!("R#{scope}#d{day}"), "R".into())))
            .update_expression("ADD #c :one SET #ttl = :ttl")
            .condition_expression("attribute_not_exists(#c) OR #c < :max")
            .expression_attribute_names("#c", "count")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":max", n(max))
            .expression_attribute_values(":ttl", n((day + 2) * 86_400))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::None)
            .build()
            .map_err(|e| crate::store::StoreError::Internal(e.to_string()))
    }
}

#[async_trait]
impl RateLimits for DynamoStore {
    async fn hit_rate_limit(
        &self, scope: &str, limit: u64, now: Millis,
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
        let count = out
            .attributes()
            .map_or(Ok(0), |a| Fields::of(a, "rate window").count("count"))?;
        Ok((count > limit).then_some(retry_after))
    }

    async fn acquire_wait_slot(
        &self, cap: u64, until: Millis, now: Millis,
    ) -> StoreResult<Option<String>> {
        self.take_wait_slot(cap, until, now).await
    }

    async fn release_wait_slot(&self, slot: &str) -> StoreResult<()> {
        self.give_back_wait_slot(slot).await
    }
}
