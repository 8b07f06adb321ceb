//! The inbox viewer's sign-in codes on AWS (docs/API.md §13, "Sign-in links"): one item per
//! code, `V#{sha256(code)}` / `V`, outside any address's partition (a redeem has only the code),
//! holding the address id, the read token sealed under a key only the code gives, `expires_at`
//! and `ttl` (the table's TTL removes it; reads judge expiry themselves).
//!
//! - **create**: the address must be live (a read of META), then one conditional `PutItem`
//!   (`attribute_not_exists`). A re-sent put that finds its own item (the same sealed token,
//!   whose nonce is fresh) was applied: success.
//! - **redeem**: one conditional `UpdateItem` that marks the code used (`used_at`, and a random
//!   `used_by`) when it exists, is unused and is unexpired, answering the item as it was
//!   (`ALL_OLD`): of concurrent redeems exactly one passes the condition. A re-send of our own
//!   applied redeem is refused by the condition with `used_by` ours: answered as redeemed.

use crate::store::ViewerCodes;
use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};

use crate::capacity::Tally;
use crate::domain::Millis;
use crate::item::*;
use crate::retry::{resend_on_conflict, uuid_like};
use crate::store::{NewViewerCode, RedeemedViewerCode, StoreError, StoreResult};
use crate::{DynamoStore, Item};

fn viewer_key(code_hash: &str) -> Item {
    key(format!("V#{code_hash}"), "V".into())
}

/// A viewer code's item (`V#{code_hash}`) as the code it redeems.
impl FromItem for RedeemedViewerCode {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "viewer code");
        Ok(RedeemedViewerCode {
            address_id: f.s("address_id")?,
            sealed_token: f.s("sealed")?,
            expires_at: f.i("expires_at")?,
        })
    }
}

#[async_trait]
impl ViewerCodes for DynamoStore {
    async fn create_viewer_code(
        &self, id: &str, code: NewViewerCode, now: Millis,
    ) -> StoreResult<()> {
        self.live(id, now).await?;
        let mut item = viewer_key(&code.code_hash);
        item.insert("address_id".into(), s(id));
        item.insert("sealed".into(), s(code.sealed_token.clone()));
        item.insert("created_at".into(), n(code.created_at));
        item.insert("expires_at".into(), n(code.expires_at));
        item.insert("ttl".into(), n(ttl_secs(code.expires_at)));
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
            Err(SdkError::ServiceError(ctx))
                if ctx.err().is_conditional_check_failed_exception() =>
            {
                use aws_sdk_dynamodb::operation::put_item::PutItemError as E;
                let ours = match ctx.err() {
                    E::ConditionalCheckFailedException(c) => c
                        .item()
                        .and_then(|i| get_s(i, "sealed"))
                        .is_some_and(|sealed| sealed == code.sealed_token),
                    _ => false,
                };
                if ours {
                    Ok(())
                } else {
                    Err(StoreError::Internal(
                        "a viewer code was stored twice".into(),
                    ))
                }
            }
            Err(e) => Err(sdk_err("PutItem viewer code", e)),
        }
    }

    async fn redeem_viewer_code(
        &self, code_hash: &str, now: Millis,
    ) -> StoreResult<Option<RedeemedViewerCode>> {
        let marker = uuid_like();
        let result = resend_on_conflict(|| {
            self.client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(viewer_key(code_hash)))
                .update_expression("SET used_at = :now, used_by = :by")
                .condition_expression(
                    "attribute_exists(pk) AND attribute_not_exists(used_at) AND expires_at > :now",
                )
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":by", s(marker.clone()))
                .return_values(ReturnValue::AllOld)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
        })
        .await
        .tally(&self.metrics);
        match result {
            Ok(out) => match out.attributes {
                Some(item) => RedeemedViewerCode::from_item(&item).map(Some),
                None => Err(StoreError::Internal(
                    "a redeemed viewer code answered no attributes".into(),
                )),
            },
            Err(SdkError::ServiceError(ctx))
                if ctx.err().is_conditional_check_failed_exception() =>
            {
                use aws_sdk_dynamodb::operation::update_item::UpdateItemError as E;
                match ctx.err() {
                    // Our own redeem, applied by an attempt whose answer was lost.
                    E::ConditionalCheckFailedException(c) => match c.item() {
                        Some(item)
                            if get_s(item, "used_by").as_deref() == Some(marker.as_str()) =>
                        {
                            RedeemedViewerCode::from_item(item).map(Some)
                        }
                        _ => Ok(None),
                    },
                    _ => Ok(None),
                }
            }
            Err(e) => Err(sdk_err("UpdateItem viewer code", e)),
        }
    }
}
