//! Outbound email's contacts on AWS (docs/API.md §16): the recipients an address may mail,
//! each confirmed by a code mailed to it. A send (`sends`) is recorded only to a confirmed
//! contact.
//!
//! The contact items are in the address's partition (the purge removes them with the rest):
//! - **contact** `C#{email}` (email lower-cased): status, created_at, confirmed_at, and the
//!   current code's hash, expiry and tries, with the UTC day its code mails are counted in
//!   (`code_day`, `code_mails`). META counts the contacts (`contacts`), for the cap.
//!
//! - **daily code mail counts** `R#code_to:{mailbox}#d{utc_day}` and
//!   `R#code_from:{client}#d{utc_day}` (outside the partition, beside the rate-limit counters,
//!   forgotten by TTL): the code mails of the day to one recipient mailbox and asked for by
//!   one client, whatever the address (docs/API.md §16).
//!
//! Each step is one write with conditions instead of locks:
//! - **issue a code**: a new contact is one `TransactWriteItems` (META live, `contacts` below
//!   the cap and counted up; the contact `attribute_not_exists`); a known one is one
//!   `TransactWriteItems` updating the contact conditioned on its day's count as read (a lost
//!   race re-reads). Both count the code mail against the recipient's and the client's daily
//!   counts in the same transaction, each conditioned below its cap: a refusal counts nothing.
//! - **check a code**: one conditional `UpdateItem` counts the try (pending, unexpired, fewer
//!   than [`CODE_TRIES`] tries), so concurrent tries are each counted and at most
//!   [`CODE_TRIES`] are compared; the hashes are compared in constant time; a right code then
//!   confirms with a second `UpdateItem` conditioned on the code being the one compared. A
//!   refused try is read from the item as the condition found it (`ALL_OLD`).
//!
//! Ambiguous outcomes (crate docs): the transactions carry an explicit token. A lost answer to
//! a code try re-sent by the SDK counts that try twice: like the rate-limit counters, it can
//! only make a limit bite early, never late.

use crate::store::Contacts;
use async_trait::async_trait;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use crate::cond_update::{failed, tx_err, CondUpdate, Updated};
use crate::domain::mail_out::{code_hashes_equal, utc_day, ContactStatus, CODE_TRIES};
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::with_append_retries;
use crate::store::rules::mail::{self, CodeTry};
use crate::store::{
    CodeCheck, CodeIssued, CodeMailCap, ContactRecord, NewCode, StoreError, StoreResult,
};
use crate::{DynamoStore, Item};

/// The prefix of contact items' sort keys.
const CONTACT_PREFIX: &str = "C#";

pub(crate) fn contact_sk(email: &str) -> String {
    format!("{CONTACT_PREFIX}{email}")
}

/// The attributes of a contact item (reserved words behind `#st`).
const CONTACT_PROJECTION: &str = "email, #st, created_at, confirmed_at, code_hash, \
     code_expires_at, code_tries, code_day, code_mails";

/// A contact item (`C#{email}`) as a record.
impl FromItem for ContactRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "contact");
        Ok(ContactRecord {
            email: f.s("email")?,
            status: f.parsed("status", ContactStatus::parse)?,
            created_at: f.i("created_at")?,
            confirmed_at: f.opt_i("confirmed_at")?,
            code_hash: f.opt_s("code_hash")?,
            code_expires_at: f.opt_i("code_expires_at")?,
            code_tries: f.count32("code_tries")?,
            code_day: f.i("code_day")?,
            code_mails: f.count32("code_mails")?,
        })
    }
}

/// The cap refusal of a cancelled code transaction whose daily counts (the recipient's, then
/// the client's) are its items `first` and `first + 1`; `Ok(())` when neither failed.
fn code_mail_capped(
    reasons: &[aws_sdk_dynamodb::types::CancellationReason], first: usize, now: Millis,
) -> StoreResult<()> {
    for (i, cap) in [
        (first, CodeMailCap::Recipient),
        (first + 1, CodeMailCap::Client),
    ] {
        if failed(reasons, i) {
            return Err(mail::code_mail_capped(cap, now));
        }
    }
    Ok(())
}

impl DynamoStore {
    /// The transaction items counting one code mail (to `code.email`'s mailbox, asked for by
    /// `code.client`) on UTC day `day`: the recipient's count, then the client's.
    fn code_mail_counts(
        &self, code: &NewCode, limits: &Limits, day: i64,
    ) -> StoreResult<[TransactWriteItem; 2]> {
        let [to, from] = mail::code_mail_counts(code, limits);
        Ok([
            TransactWriteItem::builder()
                .update(self.daily_count_up(&to.scope, day, to.max)?)
                .build(),
            TransactWriteItem::builder()
                .update(self.daily_count_up(&from.scope, day, from.max)?)
                .build(),
        ])
    }

    /// A new pending contact with its first code: META's `contacts` counted up (below the
    /// cap, the address live), the contact put and the code mail counted (below the daily
    /// caps), in one transaction.
    async fn new_contact(
        &self, id: &str, code: &NewCode, address_expires_at: Option<Millis>, limits: &Limits,
        now: Millis,
    ) -> StoreResult<Option<CodeIssued>> {
        let meta = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), "META".into())))
            .update_expression("ADD contacts :one")
            .condition_expression(format!(
                "{META_LIVE} AND (attribute_not_exists(contacts) OR contacts < :max)"
            ))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":max", n(limits.max_contacts))
            .expression_attribute_values(":now", n(now))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(tx_err)?;
        let contact = ContactRecord {
            email: code.email.clone(),
            status: ContactStatus::Pending,
            created_at: now,
            confirmed_at: None,
            code_hash: Some(code.code_hash.clone()),
            code_expires_at: Some(code.expires_at),
            code_tries: 0,
            code_day: utc_day(now),
            code_mails: 1,
        };
        let mut item = key(pk(id), contact_sk(&code.email));
        item.insert("email".into(), s(&contact.email));
        item.insert("status".into(), s(contact.status.as_str()));
        item.insert("created_at".into(), n(now));
        item.insert("code_hash".into(), s(&code.code_hash));
        item.insert("code_expires_at".into(), n(code.expires_at));
        item.insert("code_tries".into(), n(0));
        item.insert("code_day".into(), n(contact.code_day));
        item.insert("code_mails".into(), n(1));
        if let Some(e) = address_expires_at {
            item.insert("ttl".into(), n(ttl_secs(e)));
        }
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(tx_err)?;
        let mut items = vec![
            TransactWriteItem::builder().update(meta).build(),
            TransactWriteItem::builder().put(put).build(),
        ];
        items.extend(self.code_mail_counts(code, limits, contact.code_day)?);
        match self.transact(items, "TransactWriteItems contact").await? {
            Ok(()) => Ok(Some(CodeIssued::Issued(contact))),
            Err(reasons) => {
                let gone = reasons
                    .first()
                    .filter(|r| r.code() == Some("ConditionalCheckFailed"))
                    .and_then(|r| r.item())
                    .is_some_and(|meta| meta_gone(meta, now));
                if gone {
                    return Err(StoreError::AddressGone);
                }
                // Codes are random: the contact holding our code, created now, is this
                // transaction's own earlier attempt (a re-send the token did not settle).
                let ours = reasons
                    .get(1)
                    .filter(|r| r.code() == Some("ConditionalCheckFailed"))
                    .and_then(|r| r.item())
                    .map(ContactRecord::from_item)
                    .transpose()?
                    .filter(|c| c.code_hash == contact.code_hash && c.created_at == now);
                if let Some(c) = ours {
                    return Ok(Some(CodeIssued::Issued(c)));
                }
                if !failed(&reasons, 0) && !failed(&reasons, 1) {
                    code_mail_capped(&reasons, 2, now)?;
                }
                // The cap reached, or the contact created meanwhile (by another request, or
                // by an earlier attempt of this one): look again.
                Ok(None)
            }
        }
    }
}

#[async_trait]
impl Contacts for DynamoStore {
    async fn list_contacts(&self, id: &str, now: Millis) -> StoreResult<Vec<ContactRecord>> {
        self.live(id, now).await?;
        let mut contacts = self
            .items_with_prefix(
                id,
                CONTACT_PREFIX,
                CONTACT_PROJECTION,
                &[("#st", "status")],
                "Query contacts",
            )
            .await?
            .iter()
            .map(ContactRecord::from_item)
            .collect::<StoreResult<Vec<_>>>()?;
        contacts.sort_by(|a, b| a.email.cmp(&b.email));
        Ok(contacts)
    }

    async fn issue_contact_code(
        &self, id: &str, code: NewCode, limits: &Limits, now: Millis,
    ) -> StoreResult<CodeIssued> {
        let code = &code;
        let day = utc_day(now);
        with_append_retries(|| async move {
            let meta = self.meta(id).await?.ok_or(StoreError::AddressNotFound)?;
            let address = crate::store::AddressRecord::from_item(&meta)?;
            if address.is_gone(now) {
                return Err(StoreError::AddressGone);
            }
            let existing = self
                .get(id, contact_sk(&code.email))
                .await?
                .map(|item| ContactRecord::from_item(&item))
                .transpose()?;
            match existing {
                Some(c) if c.status == ContactStatus::Confirmed => {
                    Ok(Some(CodeIssued::AlreadyConfirmed(c)))
                }
                Some(c) => {
                    let mails = mail::contact_code_mails(&c, now)?;
                    let values = HashMap::from([
                        (":pending".into(), s(ContactStatus::Pending.as_str())),
                        (":hash".into(), s(&code.code_hash)),
                        (":exp".into(), n(code.expires_at)),
                        (":zero".into(), n(0)),
                        (":day".into(), n(day)),
                        (":mails".into(), n(mails + 1)),
                        (":read_day".into(), n(c.code_day)),
                        (":read_mails".into(), n(c.code_mails)),
                    ]);
                    let contact = Update::builder()
                        .table_name(&self.table)
                        .set_key(Some(key(pk(id), contact_sk(&code.email))))
                        .update_expression(
                            "SET code_hash = :hash, code_expires_at = :exp, \
                             code_tries = :zero, code_day = :day, code_mails = :mails",
                        )
                        .condition_expression(
                            "#st = :pending AND code_day = :read_day AND \
                             code_mails = :read_mails",
                        )
                        .expression_attribute_names("#st", "status")
                        .set_expression_attribute_values(Some(values))
                        .build()
                        .map_err(tx_err)?;
                    let mut items = vec![TransactWriteItem::builder().update(contact).build()];
                    items.extend(self.code_mail_counts(code, limits, day)?);
                    match self.transact(items, "TransactWriteItems contact").await? {
                        Ok(()) => Ok(Some(CodeIssued::Issued(ContactRecord {
                            code_hash: Some(code.code_hash.clone()),
                            code_expires_at: Some(code.expires_at),
                            code_tries: 0,
                            code_day: day,
                            code_mails: mails + 1,
                            ..c
                        }))),
                        Err(reasons) => {
                            if failed(&reasons, 0) {
                                // Confirmed, or another code issued meanwhile: look again.
                                return Ok(None);
                            }
                            code_mail_capped(&reasons, 1, now)?;
                            // A conflict with a concurrent write: look again.
                            Ok(None)
                        }
                    }
                }
                None => {
                    mail::contact_quota(Fields::of(&meta, "META").count("contacts")?, limits)?;
                    self.new_contact(id, code, address.expires_at, limits, now)
                        .await
                }
            }
        })
        .await
    }

    async fn check_contact_code(
        &self, id: &str, email: &str, code_hash: &str, now: Millis,
    ) -> StoreResult<CodeCheck> {
        self.live(id, now).await?;
        let names: &[(&str, &str)] = &[("#st", "status")];
        // The try counts before the hashes are compared: at most CODE_TRIES are.
        let values = HashMap::from([
            (":pending".into(), s(ContactStatus::Pending.as_str())),
            (":one".into(), n(1)),
            (":tries".into(), n(CODE_TRIES)),
            (":now".into(), n(now)),
        ]);
        let tried = self
            .cond_update(
                id,
                CondUpdate {
                    sk: contact_sk(email),
                    update: "SET code_tries = code_tries + :one",
                    condition: "#st = :pending AND attribute_exists(code_hash) AND \
                                code_expires_at > :now AND code_tries < :tries",
                    names,
                    values,
                    op: "UpdateItem contact try",
                },
            )
            .await?;
        let c = match tried {
            Updated::Applied(item) => ContactRecord::from_item(&item)?,
            Updated::Refused(None) => return Err(StoreError::NotFound),
            Updated::Refused(Some(item)) => {
                // The condition is mail::code_try's Compare: the item it refused is decided.
                return Ok(
                    match mail::code_try(&ContactRecord::from_item(&item)?, now) {
                        CodeTry::Decided(check) => check,
                        CodeTry::Compare => CodeCheck::Spent,
                    },
                );
            }
        };
        let stored = c.code_hash.as_deref().unwrap_or_default();
        if !code_hashes_equal(stored, code_hash) {
            return Ok(mail::wrong_code(c.code_tries));
        }
        let values = HashMap::from([
            (":pending".into(), s(ContactStatus::Pending.as_str())),
            (":confirmed".into(), s(ContactStatus::Confirmed.as_str())),
            (":hash".into(), s(stored)),
            (":now".into(), n(now)),
        ]);
        let confirmed = self
            .cond_update(
                id,
                CondUpdate {
                    sk: contact_sk(email),
                    update: "SET #st = :confirmed, confirmed_at = :now \
                             REMOVE code_hash, code_expires_at",
                    condition: "#st = :pending AND code_hash = :hash",
                    names,
                    values,
                    op: "UpdateItem contact confirm",
                },
            )
            .await?;
        match confirmed {
            Updated::Applied(item) => Ok(CodeCheck::Confirmed(ContactRecord::from_item(&item)?)),
            Updated::Refused(None) => Err(StoreError::NotFound),
            Updated::Refused(Some(item)) => {
                let current = ContactRecord::from_item(&item)?;
                Ok(match current.status {
                    // Confirmed at this very instant: by this try (an SDK re-send of an
                    // applied update) or by a concurrent right one; either way, confirmed now.
                    ContactStatus::Confirmed if current.confirmed_at == Some(now) => {
                        CodeCheck::Confirmed(current)
                    }
                    ContactStatus::Confirmed => CodeCheck::AlreadyConfirmed(current),
                    // A new code replaced the one compared: this one was no longer the
                    // question.
                    ContactStatus::Pending => mail::wrong_code(current.code_tries),
                })
            }
        }
    }
}
