//! Outbound email on AWS (docs/API.md §16): contacts confirmed by a code, and sends recorded
//! with their `email.sent` event before anything is mailed, then delivered. On AWS a queue
//! drives the deliveries, so [`Store::due_sends`] keeps its default (none).
//!
//! Every item is in the address's partition (the purge removes it with the rest):
//! - **contact** `C#{email}` (email lower-cased): status, created_at, confirmed_at, and the
//!   current code's hash, expiry and tries, with the UTC day its code mails are counted in
//!   (`code_day`, `code_mails`). META counts the contacts (`contacts`), for the cap.
//! - **send** `O#{send_id}`: the message, its `email.sent` event (`seq`, `event_id`), status,
//!   attempts, next_attempt_at, lease_until, last_error.
//! - **send key** `OK#{sha256(key)}`: the send holding an Idempotency-Key (send_id, body_hash,
//!   the event).
//! - **day count** `OD#{utc_day}`: sends recorded on that UTC day (`count`), forgotten two
//!   days later.
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
//! - **record a send**: the append transaction of its `email.sent` event (the same sequence
//!   and liveness conditions as every append), with the send item and its key record (each
//!   new), the day count (below `sends_per_day`) and a check that the contact is confirmed. The
//!   answers are decided before it, in the contract's order, from what was read; a transaction
//!   cancelled on any of them re-reads and decides again.
//! - **claim** and **finish**: conditional `UpdateItem`s on the send being pending (and, for a
//!   claim, due and not held); a failure is the append transaction of its `email.send_failed`
//!   event with the send's update, without the feed quota (the send kept a slot for it).
//!
//! Ambiguous outcomes (crate docs): the transactions carry an explicit token and are recognised
//! by their fresh event id ([`crate::applied_by_us`]). A lost answer to a code try re-sent by
//! the SDK counts that try twice, and a lost answer to a claim leaves the send held until its
//! lease ends: like the rate-limit counters, each can only make a limit bite early, never
//! late, and nothing is mailed twice.
//!
//! [`Store::due_sends`]: crate::store::Store::due_sends

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnConsumedCapacity, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use crate::append::Cancelled;
use crate::capacity::Tally;
use crate::domain::outbound::{
    code_hashes_equal, code_mails_from_scope, code_mails_to_scope, seconds_to_next_day, utc_day,
    ContactStatus, SendStatus, CODE_MAILS_PER_DAY, CODE_TRIES,
};
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::{resend_on_conflict, uuid_like, with_append_retries};
use crate::store::{
    rules, AddressRecord, CodeCheck, CodeIssued, CodeMailCap, ContactRecord, EventRef, NewCode,
    NewSend, OutboundMessage, SendOutcome, SendRecord, SendRecorded, StoreError, StoreResult,
};
use crate::{DynamoStore, Item};

const DAY_MS: Millis = 86_400_000;

/// The prefix of contact items' sort keys.
const CONTACT_PREFIX: &str = "C#";

fn contact_sk(email: &str) -> String {
    format!("{CONTACT_PREFIX}{email}")
}

fn send_sk(send_id: &str) -> String {
    format!("O#{send_id}")
}

fn send_key_sk(key_hash: &str) -> String {
    format!("OK#{key_hash}")
}

fn day_sk(day: i64) -> String {
    format!("OD#{day}")
}

/// The attributes of a contact item (reserved words behind `#st`).
const CONTACT_PROJECTION: &str = "email, #st, created_at, confirmed_at, code_hash, \
     code_expires_at, code_tries, code_day, code_mails";

fn u32_of(item: &Item, k: &str) -> u32 {
    u32::try_from(get_u(item, k)).unwrap_or(u32::MAX)
}

fn contact_from(item: &Item) -> StoreResult<ContactRecord> {
    let status = get_s(item, "status")
        .ok_or_else(|| StoreError::Internal("contact without status".into()))?;
    Ok(ContactRecord {
        email: get_s(item, "email")
            .ok_or_else(|| StoreError::Internal("contact without email".into()))?,
        status: ContactStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("contact with status {status}")))?,
        created_at: get_i(item, "created_at").unwrap_or(0),
        confirmed_at: get_i(item, "confirmed_at"),
        code_hash: get_s(item, "code_hash"),
        code_expires_at: get_i(item, "code_expires_at"),
        code_tries: u32_of(item, "code_tries"),
        code_day: get_i(item, "code_day").unwrap_or(0),
        code_mails: u32_of(item, "code_mails"),
    })
}

fn send_from(item: &Item) -> StoreResult<SendRecord> {
    let field = |name: &str| {
        get_s(item, name).ok_or_else(|| StoreError::Internal(format!("send without {name}")))
    };
    let references = match item.get("refs") {
        Some(AttributeValue::L(list)) => {
            list.iter().filter_map(|v| v.as_s().ok().cloned()).collect()
        }
        _ => Vec::new(),
    };
    let status = field("status")?;
    Ok(SendRecord {
        id: field("send_id")?,
        address_id: field("address_id")?,
        event: EventRef {
            id: field("event_id")?,
            sequence: get_u(item, "seq"),
        },
        message: OutboundMessage {
            to: field("recipient")?,
            reply_to: field("reply_to")?,
            subject: field("subject")?,
            text: field("text")?,
            message_id: field("message_id")?,
            in_reply_to: get_s(item, "in_reply_to"),
            references,
        },
        status: SendStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("send with status {status}")))?,
        attempts: u32_of(item, "attempts"),
        next_attempt_at: get_i(item, "next_attempt_at"),
        last_error: get_s(item, "last_error"),
        lease_until: get_i(item, "lease_until"),
    })
}

/// Whether an item is past its TTL at `now`: forgotten, though DynamoDB may not have removed
/// it yet (reads filter expiry themselves; crate docs).
fn forgotten(item: &Item, now: Millis) -> bool {
    get_i(item, "ttl").is_some_and(|t| t.saturating_mul(1000) <= now)
}

/// Whether a META item (as a failed condition returned it) is deleted or expired at `now`.
fn meta_gone(meta: &Item, now: Millis) -> bool {
    meta.contains_key("deleted_at") || get_i(meta, "expires_at").is_some_and(|e| e <= now)
}

/// The condition that a META item is of a live address (`:now` bound).
const META_LIVE: &str = "attribute_not_exists(deleted_at) AND \
     (attribute_not_exists(expires_at) OR expires_at > :now)";

/// How a conditional `UpdateItem` ended.
enum Updated {
    /// Applied: the item as it is now (`ALL_NEW`).
    Applied(Item),
    /// Its condition failed: the item as the condition found it (`ALL_OLD`), `None` if absent.
    Refused(Option<Item>),
}

/// One conditional `UpdateItem`, answering [`Updated`].
struct CondUpdate<'a> {
    sk: String,
    update: &'a str,
    condition: &'a str,
    names: &'a [(&'a str, &'a str)],
    values: Item,
    op: &'a str,
}

fn tx_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(e.to_string())
}

/// Whether item `i` of a cancelled transaction failed its condition.
fn failed(reasons: &[aws_sdk_dynamodb::types::CancellationReason], i: usize) -> bool {
    reasons
        .get(i)
        .is_some_and(|r| r.code() == Some("ConditionalCheckFailed"))
}

/// The cap refusal of a cancelled code transaction whose daily counts (the recipient's, then
/// the client's) are its items `first` and `first + 1`; `Ok(())` when neither failed.
fn code_mail_capped(
    reasons: &[aws_sdk_dynamodb::types::CancellationReason],
    first: usize,
    now: Millis,
) -> StoreResult<()> {
    for (i, cap) in [
        (first, CodeMailCap::Recipient),
        (first + 1, CodeMailCap::Client),
    ] {
        if failed(reasons, i) {
            return Err(StoreError::CodeMailCap {
                cap,
                retry_after_seconds: seconds_to_next_day(now),
            });
        }
    }
    Ok(())
}

impl DynamoStore {
    /// Runs `u` on address `id`'s item, re-sending it while an append transaction holds the
    /// item (`TransactionConflictException`: nothing applied).
    async fn cond_update(&self, id: &str, u: CondUpdate<'_>) -> StoreResult<Updated> {
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

    /// Runs one `TransactWriteItems` of `items` with an explicit token. `Ok(Err(reasons))`:
    /// DynamoDB cancelled it.
    async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
    ) -> StoreResult<Result<(), Vec<aws_sdk_dynamodb::types::CancellationReason>>> {
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
                    _ => Err(sdk_err("TransactWriteItems", SdkError::ServiceError(ctx))),
                }
            }
            // Unanswered after every SDK attempt: it may have applied; never re-run.
            Err(e) => Err(sdk_err("TransactWriteItems", e)),
        }
    }

    /// `Store::list_contacts` (the trait impl in lib.rs delegates here).
    pub(crate) async fn list_contacts_impl(
        &self,
        id: &str,
        now: Millis,
    ) -> StoreResult<Vec<ContactRecord>> {
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
            .map(contact_from)
            .collect::<StoreResult<Vec<_>>>()?;
        contacts.sort_by(|a, b| a.email.cmp(&b.email));
        Ok(contacts)
    }

    /// `Store::issue_contact_code` (the trait impl in lib.rs delegates here).
    pub(crate) async fn issue_contact_code_impl(
        &self,
        id: &str,
        code: NewCode,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<CodeIssued> {
        let code = &code;
        let day = utc_day(now);
        with_append_retries(|| async move {
            let meta = self.meta(id).await?.ok_or(StoreError::AddressNotFound)?;
            let address = record_from(&meta)?;
            if address.is_gone(now) {
                return Err(StoreError::AddressGone);
            }
            let existing = self
                .get(id, contact_sk(&code.email))
                .await?
                .map(|item| contact_from(&item))
                .transpose()?;
            match existing {
                Some(c) if c.status == ContactStatus::Confirmed => {
                    Ok(Some(CodeIssued::AlreadyConfirmed(c)))
                }
                Some(c) => {
                    let mails = if c.code_day == day { c.code_mails } else { 0 };
                    if mails >= CODE_MAILS_PER_DAY {
                        return Err(StoreError::DailyLimit {
                            retry_after_seconds: seconds_to_next_day(now),
                        });
                    }
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
                    match self.transact(items).await? {
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
                    if get_u(&meta, "contacts") >= limits.max_contacts {
                        return Err(StoreError::QuotaExceeded);
                    }
                    self.new_contact(id, code, address.expires_at, limits, now)
                        .await
                }
            }
        })
        .await
    }

    /// The transaction items counting one code mail (to `code.email`'s mailbox, asked for by
    /// `code.client`) on UTC day `day`: the recipient's count, then the client's.
    fn code_mail_counts(
        &self,
        code: &NewCode,
        limits: &Limits,
        day: i64,
    ) -> StoreResult<[TransactWriteItem; 2]> {
        let to = self.daily_count_up(
            &code_mails_to_scope(&code.email),
            day,
            limits.code_mails_per_recipient_per_day,
        )?;
        let from = self.daily_count_up(
            &code_mails_from_scope(&code.client),
            day,
            limits.code_mails_per_client_per_day,
        )?;
        Ok([
            TransactWriteItem::builder().update(to).build(),
            TransactWriteItem::builder().update(from).build(),
        ])
    }

    /// A new pending contact with its first code: META's `contacts` counted up (below the
    /// cap, the address live), the contact put and the code mail counted (below the daily
    /// caps), in one transaction.
    async fn new_contact(
        &self,
        id: &str,
        code: &NewCode,
        address_expires_at: Option<Millis>,
        limits: &Limits,
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
        match self.transact(items).await? {
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
                    .map(contact_from)
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

    /// `Store::check_contact_code` (the trait impl in lib.rs delegates here).
    pub(crate) async fn check_contact_code_impl(
        &self,
        id: &str,
        email: &str,
        code_hash: &str,
        now: Millis,
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
            Updated::Applied(item) => contact_from(&item)?,
            Updated::Refused(None) => return Err(StoreError::NotFound),
            Updated::Refused(Some(item)) => {
                let c = contact_from(&item)?;
                return Ok(if c.status == ContactStatus::Confirmed {
                    CodeCheck::AlreadyConfirmed(c)
                } else if c.code_hash.is_none() || c.code_expires_at.is_none_or(|e| e <= now) {
                    CodeCheck::Expired
                } else {
                    CodeCheck::Spent
                });
            }
        };
        let stored = c.code_hash.as_deref().unwrap_or_default();
        if !code_hashes_equal(stored, code_hash) {
            return Ok(CodeCheck::Wrong {
                tries_left: CODE_TRIES.saturating_sub(c.code_tries),
            });
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
            Updated::Applied(item) => Ok(CodeCheck::Confirmed(contact_from(&item)?)),
            Updated::Refused(None) => Err(StoreError::NotFound),
            Updated::Refused(Some(item)) => {
                let current = contact_from(&item)?;
                Ok(match current.status {
                    // Confirmed at this very instant: by this try (an SDK re-send of an
                    // applied update) or by a concurrent right one; either way, confirmed now.
                    ContactStatus::Confirmed if current.confirmed_at == Some(now) => {
                        CodeCheck::Confirmed(current)
                    }
                    ContactStatus::Confirmed => CodeCheck::AlreadyConfirmed(current),
                    // A new code replaced the one compared: this one was no longer the
                    // question.
                    ContactStatus::Pending => CodeCheck::Wrong {
                        tries_left: CODE_TRIES.saturating_sub(current.code_tries),
                    },
                })
            }
        }
    }

    /// The send holding Idempotency-Key `key_hash` at address `id`: its record's body hash and
    /// the send, unless there is none or it is forgotten at `now`.
    async fn send_by_key(
        &self,
        id: &str,
        key_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(String, SendRecord)>> {
        let Some(record) = self
            .get(id, send_key_sk(key_hash))
            .await?
            .filter(|item| !forgotten(item, now))
        else {
            return Ok(None);
        };
        let send_id = get_s(&record, "send_id").unwrap_or_default();
        let send = self
            .get(id, send_sk(&send_id))
            .await?
            .ok_or_else(|| StoreError::Internal(format!("send {send_id} vanished")))?;
        Ok(Some((
            get_s(&record, "body_hash").unwrap_or_default(),
            send_from(&send)?,
        )))
    }

    /// `Store::record_send` (the trait impl in lib.rs delegates here).
    pub(crate) async fn record_send_impl(
        &self,
        id: &str,
        send: NewSend,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<SendRecorded> {
        let send = &send;
        let day = utc_day(now);
        with_append_retries(|| async move {
            let address = self.live(id, now).await?;
            if let Some((body_hash, earlier)) =
                self.send_by_key(id, &send.claim.key_hash, now).await?
            {
                rules::repeated_request_claim(&body_hash, &send.claim.body_hash)?;
                return Ok(Some(SendRecorded {
                    send_id: earlier.id,
                    event: earlier.event,
                    duplicate: true,
                    status: earlier.status,
                }));
            }
            let confirmed = self
                .get(id, contact_sk(&send.message.to))
                .await?
                .is_some_and(|c| {
                    get_s(&c, "status").as_deref() == Some(ContactStatus::Confirmed.as_str())
                });
            if !confirmed {
                return Err(StoreError::ContactNotConfirmed);
            }
            let today = self
                .get(id, day_sk(day))
                .await?
                .filter(|item| !forgotten(item, now))
                .map_or(0, |item| get_u(&item, "count"));
            if today >= limits.sends_per_day {
                return Err(StoreError::DailyLimit {
                    retry_after_seconds: seconds_to_next_day(now),
                });
            }
            // Room for the send and its answer.
            if !self
                .quota_allows(id, address.last_sequence + 2, limits, now)
                .await?
            {
                return Err(StoreError::QuotaExceeded);
            }
            let riders = |event: &EventRef| self.send_riders(&address, send, event, limits, now);
            match self
                .append_riding_tx(
                    &address,
                    &send.event,
                    None,
                    None,
                    None,
                    &riders,
                    limits,
                    now,
                )
                .await?
            {
                Ok(event) => Ok(Some(SendRecorded {
                    send_id: send.id.clone(),
                    event,
                    duplicate: false,
                    status: SendStatus::Pending,
                })),
                Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                // A lost sequence race, or a rider's condition (the key taken, the contact no
                // longer confirmed, the day's count reached): decide again on a fresh read.
                Err(_) => Ok(None),
            }
        })
        .await
    }

    /// The items a send adds to its event's append transaction: the send (new), its key record
    /// (new, or replacing a forgotten one), the day's count (below `sends_per_day`) and the
    /// check that the recipient is a confirmed contact.
    fn send_riders(
        &self,
        address: &AddressRecord,
        send: &NewSend,
        event: &EventRef,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        let id = &address.id;
        let day = utc_day(now);
        // Kept as long as the event, and at least as long as the day it is counted in.
        let expires_at = limits
            .event_expiry(now, address.expires_at)
            .max((day + 2) * DAY_MS);
        let ttl = n(ttl_secs(expires_at));
        let m = &send.message;

        let mut item = key(pk(id), send_sk(&send.id));
        item.insert("send_id".into(), s(&send.id));
        item.insert("address_id".into(), s(id));
        item.insert("seq".into(), n(event.sequence));
        item.insert("event_id".into(), s(&event.id));
        item.insert("key_hash".into(), s(&send.claim.key_hash));
        item.insert("body_hash".into(), s(&send.claim.body_hash));
        item.insert("day".into(), n(day));
        item.insert("recipient".into(), s(&m.to));
        item.insert("reply_to".into(), s(&m.reply_to));
        item.insert("subject".into(), s(&m.subject));
        item.insert("text".into(), s(&m.text));
        item.insert("message_id".into(), s(&m.message_id));
        if let Some(r) = &m.in_reply_to {
            item.insert("in_reply_to".into(), s(r));
        }
        item.insert(
            "refs".into(),
            AttributeValue::L(m.references.iter().map(s).collect()),
        );
        item.insert("status".into(), s(SendStatus::Pending.as_str()));
        item.insert("attempts".into(), n(0));
        item.insert("next_attempt_at".into(), n(now));
        item.insert("created_at".into(), n(now));
        item.insert("expires_at".into(), n(expires_at));
        item.insert("ttl".into(), ttl.clone());
        let send_item = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(tx_err)?;

        let mut record = key(pk(id), send_key_sk(&send.claim.key_hash));
        record.insert("send_id".into(), s(&send.id));
        record.insert("body_hash".into(), s(&send.claim.body_hash));
        record.insert("seq".into(), n(event.sequence));
        record.insert("event_id".into(), s(&event.id));
        record.insert("ttl".into(), ttl);
        let key_record = Put::builder()
            .table_name(&self.table)
            .set_item(Some(record))
            .condition_expression("attribute_not_exists(pk) OR #ttl <= :now_secs")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":now_secs", n(now.div_euclid(1000)))
            .build()
            .map_err(tx_err)?;

        let count = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), day_sk(day))))
            .update_expression("ADD #count :one SET #ttl = :ttl")
            .condition_expression("attribute_not_exists(#count) OR #count < :max")
            .expression_attribute_names("#count", "count")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":max", n(limits.sends_per_day))
            .expression_attribute_values(":ttl", n(ttl_secs((day + 2) * DAY_MS)))
            .build()
            .map_err(tx_err)?;

        let contact = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), contact_sk(&m.to))))
            .condition_expression("#st = :confirmed")
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":confirmed", s(ContactStatus::Confirmed.as_str()))
            .build()
            .map_err(tx_err)?;

        Ok(vec![
            TransactWriteItem::builder().put(send_item).build(),
            TransactWriteItem::builder().put(key_record).build(),
            TransactWriteItem::builder().update(count).build(),
            TransactWriteItem::builder()
                .condition_check(contact)
                .build(),
        ])
    }

    /// `Store::claim_send` (the trait impl in lib.rs delegates here).
    pub(crate) async fn claim_send_impl(
        &self,
        id: &str,
        send_id: &str,
        lease_until: Millis,
        now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        self.live(id, now).await?;
        let values = HashMap::from([
            (":pending".into(), s(SendStatus::Pending.as_str())),
            (":one".into(), n(1)),
            (":lease".into(), n(lease_until)),
            (":now".into(), n(now)),
            (":now_secs".into(), n(now.div_euclid(1000))),
        ]);
        let claimed = self
            .cond_update(
                id,
                CondUpdate {
                    sk: send_sk(send_id),
                    update: "SET attempts = attempts + :one, lease_until = :lease",
                    condition: "#st = :pending AND #ttl > :now_secs AND \
                                (attribute_not_exists(next_attempt_at) OR next_attempt_at <= :now) \
                                AND (attribute_not_exists(lease_until) OR lease_until <= :now)",
                    names: &[("#st", "status"), ("#ttl", "ttl")],
                    values,
                    op: "UpdateItem claim send",
                },
            )
            .await?;
        match claimed {
            Updated::Applied(item) => send_from(&item).map(Some),
            Updated::Refused(_) => Ok(None),
        }
    }

    /// `Store::get_send` (the trait impl in lib.rs delegates here): one consistent `GetItem`.
    pub(crate) async fn get_send_impl(
        &self,
        id: &str,
        send_id: &str,
        now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        self.live(id, now).await?;
        match self.get(id, send_sk(send_id)).await? {
            Some(item) if !forgotten(&item, now) => send_from(&item).map(Some),
            _ => Ok(None),
        }
    }

    /// `Store::finish_send` (the trait impl in lib.rs delegates here).
    pub(crate) async fn finish_send_impl(
        &self,
        id: &str,
        send_id: &str,
        outcome: SendOutcome,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<()> {
        let outcome = &outcome;
        with_append_retries(|| async move {
            let address = self.live(id, now).await?;
            let pending = self.get(id, send_sk(send_id)).await?.is_some_and(|item| {
                get_s(&item, "status").as_deref() == Some(SendStatus::Pending.as_str())
            });
            if !pending {
                return Ok(Some(()));
            }
            let names: &[(&str, &str)] = &[("#st", "status")];
            let pending_value = (":pending".to_owned(), s(SendStatus::Pending.as_str()));
            match outcome {
                SendOutcome::Sent => {
                    let values = HashMap::from([
                        pending_value,
                        (":sent".into(), s(SendStatus::Sent.as_str())),
                    ]);
                    self.cond_update(
                        id,
                        CondUpdate {
                            sk: send_sk(send_id),
                            update: "SET #st = :sent REMOVE next_attempt_at, lease_until",
                            condition: "#st = :pending",
                            names,
                            values,
                            op: "UpdateItem send sent",
                        },
                    )
                    .await?;
                    // Refused: no longer pending, and only a pending send changes.
                    Ok(Some(()))
                }
                SendOutcome::Retry {
                    next_attempt_at,
                    error,
                } => {
                    let values = HashMap::from([
                        pending_value,
                        (":next".into(), n(next_attempt_at)),
                        (":error".into(), s(error)),
                    ]);
                    self.cond_update(
                        id,
                        CondUpdate {
                            sk: send_sk(send_id),
                            update: "SET next_attempt_at = :next, last_error = :error \
                                     REMOVE lease_until",
                            condition: "#st = :pending",
                            names,
                            values,
                            op: "UpdateItem send retry",
                        },
                    )
                    .await?;
                    Ok(Some(()))
                }
                SendOutcome::Failed { error, event } => {
                    let table = &self.table;
                    let failed = |_: &EventRef| {
                        let update = Update::builder()
                            .table_name(table)
                            .set_key(Some(key(pk(id), send_sk(send_id))))
                            .update_expression(
                                "SET #st = :failed, last_error = :error \
                                 REMOVE next_attempt_at, lease_until",
                            )
                            .condition_expression("#st = :pending")
                            .expression_attribute_names("#st", "status")
                            .expression_attribute_values(
                                ":pending",
                                s(SendStatus::Pending.as_str()),
                            )
                            .expression_attribute_values(":failed", s(SendStatus::Failed.as_str()))
                            .expression_attribute_values(":error", s(error))
                            .build()
                            .map_err(tx_err)?;
                        Ok(vec![TransactWriteItem::builder().update(update).build()])
                    };
                    // No quota check: the send kept a slot free for its answer.
                    match self
                        .append_riding_tx(&address, event, None, None, None, &failed, limits, now)
                        .await?
                    {
                        Ok(_) => Ok(Some(())),
                        Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                        // A lost sequence race, or the send finished meanwhile: look again.
                        Err(_) => Ok(None),
                    }
                }
            }
        })
        .await
    }
}
