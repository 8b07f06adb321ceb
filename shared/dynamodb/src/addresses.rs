//! The address item (META): creating it, reading it, its usage, and deleting it (a tombstone,
//! then a purge message).

use aws_sdk_dynamodb::types::{ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure};

use crate::capacity::Tally;
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::{resend_on_conflict, uuid_like};
use crate::store::{AddressRecord, NewAddress, StoreError, StoreResult, Usage};
use crate::{DynamoStore, Item};

impl DynamoStore {
    /// `Store::create_address` (the trait impl in lib.rs delegates here).
    pub(crate) async fn create_address_impl(&self, a: NewAddress) -> StoreResult<()> {
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

    /// `Store::get_address` (the trait impl in lib.rs delegates here).
    pub(crate) async fn get_address_impl(
        &self,
        id: &str,
        now: Millis,
    ) -> StoreResult<Option<AddressRecord>> {
        let Some(item) = self.meta(id).await? else {
            return Ok(None);
        };
        if get_i(&item, "ttl").is_some_and(|t| t.saturating_mul(1000) <= now) {
            return Ok(None);
        }
        record_from(&item).map(Some)
    }

    /// `Store::usage` (the trait impl in lib.rs delegates here).
    pub(crate) async fn usage_impl(
        &self,
        id: &str,
        _limits: &Limits,
        now: Millis,
    ) -> StoreResult<Usage> {
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

    /// `Store::delete_address` (the trait impl in lib.rs delegates here).
    pub(crate) async fn delete_address_impl(&self, id: &str, now: Millis) -> StoreResult<()> {
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
}
