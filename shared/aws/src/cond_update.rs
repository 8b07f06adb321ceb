//! Conditional writes as the stores use them: one conditional `UpdateItem` that answers the item
//! either way ([`CondUpdate`], [`Updated`]); one `TransactWriteItems` with an explicit token that
//! answers its cancellation reasons ([`DynamoStore::transact`], [`failed`]); the `Put` of a new
//! item ([`new_item`]); and the error of a request builder ([`tx_err`]).

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    CancellationReason, Put, ReturnConsumedCapacity, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use crate::capacity::Tally;
use crate::item::*;
use crate::retry::{resend_on_conflict, uuid_like};
use crate::store::{StoreError, StoreResult};
use crate::{DynamoStore, Item};

/// How a conditional `UpdateItem` ended.
pub(crate) enum Updated {
    /// Applied: the item as it is now (`ALL_NEW`).
    Applied(Item),
    /// Its condition failed: the item as the condition found it (`ALL_OLD`), `None` if absent.
    Refused(Option<Item>),
}

/// One conditional `UpdateItem`, answering [`Updated`].
pub(crate) struct CondUpdate<'a> {
    pub(crate) sk: String,
    pub(crate) update: &'a str,
    pub(crate) condition: &'a str,
    pub(crate) names: &'a [(&'a str, &'a str)],
    pub(crate) values: Item,
    pub(crate) op: &'a str,
}

/// A request builder's error, as the store's.
pub(crate) fn tx_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(e.to_string())
}

impl DynamoStore {
    /// Runs `u` on address `id`'s item, re-sending it while an append transaction holds the
    /// item (`TransactionConflictException`: nothing applied).
    pub(crate) async fn cond_update(&self, id: &str, u: CondUpdate<'_>) -> StoreResult<Updated> {
        let result = resend_on_conflict(|| {
            let mut req = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), u.sk.clone())))
                .update_expression(u.update)
                .condition_expression(u.condition)
                .set_expression_attribute_values(Some(u.values.clone()))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            for (placeholder, name) in u.names {
                req = req.expression_attribute_names(*placeholder, *name);
            }
            req.send()
        })
        .await
        .tally(&self.metrics);
        match result {
            Ok(out) => Ok(Updated::Applied(out.attributes.unwrap_or_default())),
            Err(SdkError::ServiceError(ctx))
                if ctx.err().is_conditional_check_failed_exception() =>
            {
                use aws_sdk_dynamodb::operation::update_item::UpdateItemError as E;
                match ctx.err() {
                    E::ConditionalCheckFailedException(c) => {
                        Ok(Updated::Refused(c.item().cloned()))
                    }
                    _ => Ok(Updated::Refused(None)),
                }
            }
            Err(e) => Err(sdk_err(u.op, e)),
        }
    }
}

impl DynamoStore {
    /// Runs one `TransactWriteItems` of `items` with an explicit token. `Ok(Err(reasons))`:
    /// DynamoDB cancelled it.
    pub(crate) async fn transact(
        &self, items: Vec<TransactWriteItem>, op: &str,
    ) -> StoreResult<Result<(), Vec<CancellationReason>>> {
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(uuid_like())
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics);
        match result {
            Ok(_) => Ok(Ok(())),
            Err(SdkError::ServiceError(ctx)) => {
                use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError as E;
                match ctx.err() {
                    E::TransactionCanceledException(c) => {
                        Ok(Err(c.cancellation_reasons().to_vec()))
                    }
                    _ => Err(sdk_err(op, SdkError::ServiceError(ctx))),
                }
            }
            // Unanswered after every SDK attempt: it may have applied; never re-run.
            Err(e) => Err(sdk_err(op, e)),
        }
    }
}

/// A `Put` of a new item, cancelled (with the item as it is) when one exists.
pub(crate) fn new_item(table: &str, item: Item) -> StoreResult<TransactWriteItem> {
    Ok(TransactWriteItem::builder()
        .put(
            Put::builder()
                .table_name(table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(pk)")
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(|e| StoreError::Internal(e.to_string()))?,
        )
        .build())
}

/// Whether item `i` of a cancelled transaction failed its condition.
pub(crate) fn failed(reasons: &[CancellationReason], i: usize) -> bool {
    reasons
        .get(i)
        .is_some_and(|r| r.code() == Some("ConditionalCheckFailed"))
}
