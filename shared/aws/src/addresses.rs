//! The address item (META) and its email-key item: creating them, reading the address (by id
//! or by email), its usage, and deleting it (a tombstone,
//! then a purge message).

use crate::store::Addresses;
use crate::Tell;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    CancellationReason, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
};

use crate::capacity::Tally;
use crate::cond_update::new_item;
use crate::domain::email_policy::EmailPolicy;
use crate::domain::verification::VerificationConfig;
use crate::domain::{ids, Limits, Millis};
use crate::item::*;
use crate::retry::{resend_on_conflict, uuid_like};
use crate::store::{AddressRecord, NewAddress, StoreError, StoreResult, Usage};
use crate::{DynamoStore, Item};

#[async_trait]
impl Addresses for DynamoStore {
    /// `TransactWriteItems` of the META `Put` and the email-key item `Put`, each conditioned on
    /// not existing, so the address and its unique email key (docs/API.md §1) exist together or
    /// not at all; with them, the hooks made with the address (docs/API.md §19, `hooks`).
    async fn create_address(&self, a: NewAddress) -> StoreResult<()> {
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
        let ttl = a
            .expires_at
            .map(|e| ttl_secs(e.saturating_add(self.tombstone_ms)));
        if let (Some(e), Some(t)) = (a.expires_at, ttl) {
            item.insert("expires_at".into(), n(e));
            item.insert("ttl".into(), n(t));
        }
        item.insert("token_hash".into(), s(&a.token_hash));
        item.insert("inbox_hash".into(), s(&a.inbox_hash));
        item.insert("seq".into(), n(0));
        item.insert("state_keys".into(), n(0));
        item.insert("state_bytes".into(), n(0));
        if let Some(v) = &a.verification {
            item.insert("verification".into(), s(v.to_stored()));
        }
        if let Some(p) = &a.email_policy {
            item.insert("email_policy".into(), s(p.to_stored()));
        }
        crate::hooks::new_meta_hooks(&mut item, &a.hooks);
        let email_key = ids::email_key(&a.email);
        let mut key_item = key(email_pk(&email_key), EMAIL_SK.into());
        key_item.insert("address_id".into(), s(&a.id));
        if let Some(t) = ttl {
            // Expires with the META (the tombstone period included).
            key_item.insert("ttl".into(), n(t));
        }
        const META: usize = 0;
        let mut items = vec![
            new_item(&self.table, item)?,
            new_item(&self.table, key_item)?,
        ];
        items.extend(crate::hooks::new_address_hooks(
            &self.table,
            &a.id,
            &a.hooks,
            a.created_at,
            a.expires_at,
        )?);
        // One token for every SDK attempt of this call (crate docs, "Ambiguous outcomes").
        let Err(reasons) = self.transact(items, "TransactWriteItems create").await? else {
            return Ok(());
        };
        let failed = |r: &CancellationReason| r.code() == Some("ConditionalCheckFailed");
        // An SDK re-send after our first attempt applied finds our own META (and our own key
        // item): the transaction applied, whole.
        let ours = reasons.get(META).is_some_and(|r| {
            failed(r)
                && r.item().is_some_and(|old| {
                    get_s(old, "token_hash").as_deref() == Some(a.token_hash.as_str())
                        && get_s(old, "inbox_hash").as_deref() == Some(a.inbox_hash.as_str())
                        && get_i(old, "created_at") == Some(a.created_at)
                })
        });
        if ours {
            tracing::info!(address_id = %a.id, "create applied by an earlier attempt");
            Ok(())
        } else if reasons.iter().any(failed) {
            // The id, or the email key (an id differing only by case), is taken.
            Err(StoreError::AddressExists)
        } else {
            Err(StoreError::Unavailable(format!(
                "TransactWriteItems create cancelled: {:?}",
                reasons.iter().map(|r| r.code()).collect::<Vec<_>>()
            )))
        }
    }

    /// `E#{key}` names the address, whose META is then read as `get_address` reads it (both
    /// strongly consistent).
    ///
    /// Addresses created before email keys have no key item. For them (and whenever the key
    /// item names no address any more), the local part of `email` is read as the id, in the
    /// exact case received, and that META counts only if its own email has the same key. So a
    /// legacy address is found when the sender kept the case of its id, not otherwise.
    async fn address_by_email(
        &self, email: &str, now: Millis,
    ) -> StoreResult<Option<AddressRecord>> {
        let email_key = ids::email_key(email);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(email_pk(&email_key), EMAIL_SK.into())))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem email key", e))?;
        let named = out.item.as_ref().and_then(|i| get_s(i, "address_id"));
        let mut candidates = Vec::with_capacity(2);
        candidates.extend(named);
        if let Some((local, _)) = email.rsplit_once('@') {
            if ids::is_valid_id(local) && !candidates.iter().any(|c| c == local) {
                candidates.push(local.to_owned());
            }
        }
        for id in candidates {
            if let Some(record) = self.get_address(&id, now).await? {
                if ids::email_key(&record.email) == email_key {
                    return Ok(Some(record));
                }
            }
        }
        Ok(None)
    }

    async fn get_address(&self, id: &str, now: Millis) -> StoreResult<Option<AddressRecord>> {
        let Some(item) = self.meta(id).await? else {
            return Ok(None);
        };
        if get_i(&item, "ttl").is_some_and(|t| t.saturating_mul(1000) <= now) {
            return Ok(None);
        }
        AddressRecord::from_item(&item).map(Some)
    }

    /// META's `verification` attribute, conditioned on the address being live (safe to repeat:
    /// it sets the same value).
    async fn set_verification(
        &self, id: &str, verification: Option<VerificationConfig>, now: Millis,
    ) -> StoreResult<()> {
        let stored = verification.as_ref().map(VerificationConfig::to_stored);
        self.update_live_meta(id, now, "UpdateItem verification", |update| match &stored {
            Some(v) => update
                .update_expression("SET verification = :v")
                .expression_attribute_values(":v", s(v)),
            None => update.update_expression("REMOVE verification"),
        })
        .await
    }

    /// META's `email_policy` attribute, conditioned on the address being live (safe to repeat:
    /// it sets the same value); `email_refused` is left as it is.
    async fn set_email_policy(
        &self, id: &str, policy: Option<EmailPolicy>, now: Millis,
    ) -> StoreResult<()> {
        let stored = policy.as_ref().map(EmailPolicy::to_stored);
        self.update_live_meta(id, now, "UpdateItem email policy", |update| match &stored {
            Some(v) => update
                .update_expression("SET email_policy = :v")
                .expression_attribute_values(":v", s(v)),
            None => update.update_expression("REMOVE email_policy"),
        })
        .await
    }

    /// `ADD email_refused :one` on META, conditioned on the address being live: atomic, so
    /// concurrent refusals each count. (An SDK re-send of a write whose answer was lost may
    /// count one refusal twice: a count, not a ledger.)
    async fn count_email_refusal(&self, id: &str, now: Millis) -> StoreResult<()> {
        self.update_live_meta(id, now, "UpdateItem email_refused", |update| {
            update
                .update_expression("ADD email_refused :one")
                .expression_attribute_values(":one", n(1))
        })
        .await
    }

    async fn usage(&self, id: &str, _limits: &Limits, now: Millis) -> StoreResult<Usage> {
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
                        first_unexpired = Some(Fields::of(item, "event").u("seq")?);
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

    async fn delete_address(&self, id: &str, now: Millis) -> StoreResult<()> {
        let commit = async {
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
                        Some(UpdateItemError::ConditionalCheckFailedException(c)) => match c.item()
                        {
                            // An SDK re-send after our first attempt applied: our own tombstone.
                            Some(old)
                                if get_s(old, "deleted_by").as_deref()
                                    == Some(deleted_by.as_str()) =>
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
        };
        self.telling(now, commit, |_| Tell::Gone(id.to_owned()))
            .await
    }
}

impl DynamoStore {
    /// One `UpdateItem` of a live address's META (`with` adds its expression and values),
    /// re-sent while an append transaction holds the item: [`StoreError::AddressNotFound`] for
    /// no META, [`StoreError::AddressGone`] for a deleted or expired one (nothing changes).
    async fn update_live_meta(
        &self, id: &str, now: Millis, op: &str,
        with: impl Fn(
            aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
        )
            -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder,
    ) -> StoreResult<()> {
        let result = resend_on_conflict(|| {
            let update = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key(pk(id), "META".into())))
                .condition_expression(
                    "attribute_exists(pk) AND attribute_not_exists(deleted_at) AND \
                     (attribute_not_exists(expires_at) OR expires_at > :now)",
                )
                .expression_attribute_values(":now", n(now))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            with(update).send()
        })
        .await
        .tally(&self.metrics);
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
                match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(c)) => match c.item() {
                        Some(_) => Err(StoreError::AddressGone),
                        None => Err(StoreError::AddressNotFound),
                    },
                    _ => Err(sdk_err(op, e)),
                }
            }
        }
    }
}
