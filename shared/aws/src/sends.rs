//! Outbound email's sends on AWS (docs/API.md §16): sends recorded with their `email.sent`
//! event before anything is mailed, then delivered, each to a confirmed contact (`contacts`).
//! On AWS a queue drives the deliveries, so [`Sends::due_sends`] keeps its default (none).
//!
//! The send items are in the address's partition (the purge removes them with the rest):
//! - **send** `O#{send_id}`: the message, its `email.sent` event (`seq`, `event_id`), status,
//!   attempts, next_attempt_at, lease_until, last_error.
//! - **send key** `OK#{sha256(key)}`: the send holding an Idempotency-Key (send_id, body_hash,
//!   the event).
//! - **day count** `OD#{utc_day}`: sends recorded on that UTC day (`count`), forgotten two
//!   days later.
//!
//! Each step is one write with conditions instead of locks:
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
//! by their fresh event id ([`crate::applied_by_us`]). A lost answer to a claim leaves the send
//! held until its lease ends: like the rate-limit counters, it can only make a limit bite
//! early, never late, and nothing is mailed twice.
//!
//! [`Sends::due_sends`]: crate::store::Sends::due_sends

use crate::store::Sends;
use crate::Tell;
use async_trait::async_trait;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem, Update};

use crate::append::Cancelled;
use crate::cond_update::{tx_err, CondUpdate, Updated};
use crate::contacts::contact_sk;
use crate::domain::mail_out::{utc_day, ContactStatus, SendStatus};
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::with_append_retries;
use crate::store::rules::mail;
use crate::store::{
    rules, AddressRecord, EventRef, NewSend, OutboundMessage, SendOutcome, SendRecord,
    SendRecorded, StoreError, StoreResult,
};
use crate::{DynamoStore, Item};

fn send_sk(send_id: &str) -> String {
    format!("O#{send_id}")
}

fn send_key_sk(key_hash: &str) -> String {
    format!("OK#{key_hash}")
}

fn day_sk(day: i64) -> String {
    format!("OD#{day}")
}

/// A send item (`O#{send_id}`) as a record.
impl FromItem for SendRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "send");
        Ok(SendRecord {
            id: f.s("send_id")?,
            address_id: f.s("address_id")?,
            event: EventRef {
                id: f.s("event_id")?,
                sequence: f.u("seq")?,
            },
            message: OutboundMessage {
                to: f.s("recipient")?,
                reply_to: f.s("reply_to")?,
                subject: f.s("subject")?,
                text: f.s("text")?,
                message_id: f.s("message_id")?,
                in_reply_to: f.opt_s("in_reply_to")?,
                references: f.strings("refs")?,
            },
            status: f.parsed("status", SendStatus::parse)?,
            attempts: f.count32("attempts")?,
            next_attempt_at: f.opt_i("next_attempt_at")?,
            last_error: f.opt_s("last_error")?,
            lease_until: f.opt_i("lease_until")?,
        })
    }
}

/// A send's Idempotency-Key record: the send it recorded and the hash of its body.
struct SendKey {
    send_id: String,
    body_hash: String,
}

impl FromItem for SendKey {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "send key");
        Ok(Self {
            send_id: f.s("send_id")?,
            body_hash: f.s("body_hash")?,
        })
    }
}

impl DynamoStore {
    /// The send holding Idempotency-Key `key_hash` at address `id`: its record's body hash and
    /// the send, unless there is none or it is forgotten at `now`.
    async fn send_by_key(
        &self, id: &str, key_hash: &str, now: Millis,
    ) -> StoreResult<Option<(String, SendRecord)>> {
        let Some(record) = self
            .get(id, send_key_sk(key_hash))
            .await?
            .filter(|item| !forgotten(item, now))
        else {
            return Ok(None);
        };
        let SendKey { send_id, body_hash } = SendKey::from_item(&record)?;
        let send = self
            .get(id, send_sk(&send_id))
            .await?
            .ok_or_else(|| StoreError::Internal(format!("send {send_id} vanished")))?;
        Ok(Some((body_hash, SendRecord::from_item(&send)?)))
    }

    /// The items a send adds to its event's append transaction: the send (new), its key record
    /// (new, or replacing a forgotten one), the day's count (below `sends_per_day`) and the
    /// check that the recipient is a confirmed contact.
    fn send_riders(
        &self, address: &AddressRecord, send: &NewSend, event: &EventRef, limits: &Limits,
        now: Millis,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        let id = &address.id;
        let day = utc_day(now);
        let expires_at = mail::send_expires_at(limits, now, address.expires_at);
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
            .expression_attribute_values(":ttl", n(ttl_secs(mail::day_counted_until(now))))
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
}

#[async_trait]
impl Sends for DynamoStore {
    async fn record_send(
        &self, id: &str, send: NewSend, limits: &Limits, now: Millis,
    ) -> StoreResult<SendRecorded> {
        let appended = vec![send.event.event_type.clone()];
        let commit = async {
            let send = &send;
            let day = utc_day(now);
            with_append_retries(|| async move {
                let address = self.live(id, now).await?;
                if let Some((body_hash, earlier)) =
                    self.send_by_key(id, &send.claim.key_hash, now).await?
                {
                    rules::repeated_claim(&body_hash, &send.claim.body_hash)?;
                    return Ok(Some(SendRecorded {
                        send_id: earlier.id,
                        event: earlier.event,
                        duplicate: true,
                        status: earlier.status,
                    }));
                }
                let contact = self.get(id, contact_sk(&send.message.to)).await?;
                mail::send_recipient(
                    contact
                        .map(|c| crate::store::ContactRecord::from_item(&c))
                        .transpose()?
                        .as_ref(),
                )?;
                let today = self
                    .get(id, day_sk(day))
                    .await?
                    .filter(|item| !forgotten(item, now))
                    .map_or(Ok(0), |item| {
                        Fields::of(&item, "daily send count").count("count")
                    })?;
                mail::daily_sends(today, limits, now)?;
                // Room for the send and its answer.
                if !self
                    .quota_allows(id, address.last_sequence + 2, limits, now)
                    .await?
                {
                    return Err(StoreError::QuotaExceeded);
                }
                let riders =
                    |event: &EventRef| self.send_riders(&address, send, event, limits, now);
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
        };
        self.telling(now, commit, |r| {
            Tell::Head(id.to_owned(), r.event.sequence, appended)
        })
        .await
    }

    async fn claim_send(
        &self, id: &str, send_id: &str, lease_until: Millis, now: Millis,
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
                    // mail::claimable as a condition (and the item not forgotten).
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
            Updated::Applied(item) => SendRecord::from_item(&item).map(Some),
            Updated::Refused(_) => Ok(None),
        }
    }

    async fn get_send(
        &self, id: &str, send_id: &str, now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        self.live(id, now).await?;
        match self.get(id, send_sk(send_id)).await? {
            Some(item) if !forgotten(&item, now) => SendRecord::from_item(&item).map(Some),
            _ => Ok(None),
        }
    }

    async fn finish_send(
        &self, id: &str, send_id: &str, outcome: SendOutcome, limits: &Limits, now: Millis,
    ) -> StoreResult<()> {
        let failed = matches!(outcome, SendOutcome::Failed { .. });
        let appended = match &outcome {
            SendOutcome::Failed { event, .. } => vec![event.event_type.clone()],
            _ => Vec::new(),
        };
        let commit = async {
            let outcome = &outcome;
            with_append_retries(|| async move {
                let address = self.live(id, now).await?;
                let pending = match self.get(id, send_sk(send_id)).await? {
                    Some(item) => SendRecord::from_item(&item)?.status == SendStatus::Pending,
                    None => false,
                };
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
                                .expression_attribute_values(
                                    ":failed",
                                    s(SendStatus::Failed.as_str()),
                                )
                                .expression_attribute_values(":error", s(error))
                                .build()
                                .map_err(tx_err)?;
                            Ok(vec![TransactWriteItem::builder().update(update).build()])
                        };
                        // No quota check: the send kept a slot free for its answer.
                        match self
                            .append_riding_tx(
                                &address, event, None, None, None, &failed, limits, now,
                            )
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
        };
        self.telling(now, commit, |_| {
            if failed {
                Tell::ReadHead(id.to_owned(), appended)
            } else {
                Tell::Nothing
            }
        })
        .await
    }
}
