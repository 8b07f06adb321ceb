//! What outbound email's contacts (`contacts`) and sends (`sends`) share: one conditional
//! `UpdateItem` that answers the item either way ([`CondUpdate`], [`Updated`]), the error of a
//! request builder ([`tx_err`]) and a count attribute read as a `u32` ([`u32_of`]).

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};

use crate::capacity::Tally;
use crate::item::*;
use crate::retry::resend_on_conflict;
use crate::store::{StoreError, StoreResult};
use crate::{DynamoStore, Item};

/// Number attribute `k` as a `u32`: 0 when absent, `u32::MAX` when larger.
pub(crate) fn u32_of(item: &Item, k: &str) -> u32 {
    u32::try_from(get_u(item, k)).unwrap_or(u32::MAX)
}

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
