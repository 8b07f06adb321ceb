//! Requests for a person on AWS (docs/API.md §12). A request is its own item, `Q#{request_id}` /
//! `Q`, so that its page finds it by id alone ([`Requests::find_request`]); the address partition
//! holds an entry per open request (`Q#{request_id}`: status and expiry, for the open-request
//! count, the due expiries and the purge), one per closed request (`QX#{request_id}`, for the
//! purge only, so that a step reads at most the open requests' entries, never the closed ones
//! a busy address keeps for a retention period) and, for a creation with an Idempotency-Key, a
//! key record (`QK#{sha256(key)}`: the request id and the body hash).
//!
//! Every step is ONE `TransactWriteItems`, with conditions instead of locks:
//! - **create**: META (live, and its open-request revision `qrev` as read; `qrev` + 1 and
//!   `next_request_expiry`), the request item, its entry and the key record, each
//!   `attribute_not_exists`. A lost race on `qrev` re-reads and retries, so the open-request
//!   cap and the earliest expiry are judged on what the transaction replaces; an existing key
//!   record is the earlier creation.
//! - **answer** and **expiry**: the append transaction of the closing event
//!   (`request.answered`, `request.expired`), with the request item conditioned on
//!   `status = open` (and, for an answer, `expires_at > now`), its open entry deleted and its
//!   closed entry put, and META's `qrev` and
//!   `next_request_expiry` beside the sequence bump. The request condition failing is
//!   [`Cancelled::RequestClosed`] with the request as it stands: another answer (or expiry)
//!   won, and nothing changed.
//!
//! Ambiguous outcomes are the append's (crate docs): an explicit token per transaction, and a
//! re-sent creation cancelled on a request item of our own id is our own write.
//!
//! [`Requests::find_request`]: crate::store::Requests::find_request

use crate::store::Requests;
use crate::Tell;
use async_trait::async_trait;
use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnConsumedCapacity, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

use crate::append::{Cancelled, Closing, Revision};
use crate::capacity::Tally;
use crate::cond_update::new_item;
use crate::domain::request::{CommentMode, RequestStatus};
use crate::domain::{Limits, Millis};
use crate::item::*;
use crate::retry::with_append_retries;
use crate::store::rules;
use crate::store::{
    AddressRecord, Answer, AnswerOutcome, CreatedRequest, EventRef, NewRequest, RequestRecord,
    StoreError, StoreResult,
};
use crate::{DynamoStore, Item};

/// The sort key of a request item.
const REQUEST_SK: &str = "Q";

/// The partition of request `request_id`'s item; never `A#…`.
fn request_pk(request_id: &str) -> String {
    format!("Q#{request_id}")
}

/// The key of request `request_id`'s item.
pub(crate) fn request_key(request_id: &str) -> Item {
    key(request_pk(request_id), REQUEST_SK.into())
}

/// The sort key of request `request_id`'s entry in its address's partition.
pub(crate) fn entry_sk(request_id: &str) -> String {
    format!("Q#{request_id}")
}

/// The prefix of the address partition's entries of open requests: what the request steps read.
pub(crate) const ENTRY_PREFIX: &str = "Q#";

/// The prefix of the entries of closed (answered or expired) requests: kept for the purge
/// only, under another prefix so that the request steps, which read every open entry, never
/// read the closed ones an address gathers over a retention period.
pub(crate) const CLOSED_ENTRY_PREFIX: &str = "QX#";

/// The sort key of closed request `request_id`'s entry.
fn closed_entry_sk(request_id: &str) -> String {
    format!("{CLOSED_ENTRY_PREFIX}{request_id}")
}

/// The request id an entry's sort key names, open or closed.
pub(crate) fn entry_request_id(sk: &str) -> Option<&str> {
    sk.strip_prefix(ENTRY_PREFIX)
        .or_else(|| sk.strip_prefix(CLOSED_ENTRY_PREFIX))
}

/// The sort key of a creation's Idempotency-Key record.
fn key_record_sk(key_hash: &str) -> String {
    format!("QK#{key_hash}")
}

/// The TTL of a request's items: a retention period past its expiry (docs/API.md §12).
fn request_ttl(expires_at: Millis, limits: &Limits) -> AttributeValue {
    n(ttl_secs(expires_at.saturating_add(limits.retention_ms())))
}

/// A request item as a record.
impl FromItem for RequestRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "request");
        let answer = match (f.opt_s("choice")?, f.opt_i("answered_at")?) {
            (Some(choice), Some(answered_at)) => Some(Answer {
                choice,
                comment: f.opt_s("answer_comment")?,
                answered_at,
            }),
            _ => None,
        };
        Ok(RequestRecord {
            id: f.s("request_id")?,
            address_id: f.s("address_id")?,
            title: f.s("title")?,
            body: f.opt_s("body")?,
            options: f.strings("options")?,
            comment: f.parsed("comment_mode", CommentMode::parse)?,
            created_at: f.i("created_at")?,
            expires_at: f.i("expires_at")?,
            secret_hash: f.s("secret_hash")?,
            status: f.parsed("status", RequestStatus::parse)?,
            answer,
        })
    }
}

/// A creation's Idempotency-Key record (`K#{key_hash}`): the request it created and the hash of
/// its body.
struct CreationKey {
    request_id: String,
    body_hash: String,
}

impl FromItem for CreationKey {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "request key");
        Ok(Self {
            request_id: f.s("request_id")?,
            body_hash: f.s("body_hash")?,
        })
    }
}

/// A request's entry in its address's partition.
#[derive(Debug, Clone)]
struct Entry {
    request_id: String,
    open: bool,
    expires_at: Millis,
}

/// The address as read before a request step: its record and its open-request revision, which
/// the step's transaction requires unchanged.
struct Read {
    address: AddressRecord,
    qrev: u64,
    /// Its request entries, read after META.
    entries: Vec<Entry>,
}

impl Read {
    /// The earliest expiry of the open requests other than `except`.
    fn next_expiry(&self, except: Option<&str>) -> Option<Millis> {
        self.entries
            .iter()
            .filter(|e| e.open && Some(e.request_id.as_str()) != except)
            .map(|e| e.expires_at)
            .min()
    }
}

/// META's revision of the open requests and their earliest expiry.
pub(crate) const REQUESTS: Revision = Revision {
    rev: "qrev",
    next: "next_request_expiry",
};

/// How a closing event closes its request: the request item takes `status` (and the answer),
/// on the condition that the request is open (and, for an answer, unexpired); its open entry
/// becomes a closed one; META's `next_request_expiry` becomes the earliest of the other open
/// requests.
pub(crate) struct RequestClose {
    request_id: String,
    answer: Option<Answer>,
    read_qrev: u64,
    next_expiry: Option<Millis>,
    /// The request's TTL ([`request_ttl`]), which its closed entry keeps.
    ttl: AttributeValue,
}

impl Closing for RequestClose {
    fn meta_update(&self, update: &mut String, condition: &mut String, values: &mut Item) {
        REQUESTS.meta_update(self.read_qrev, self.next_expiry, update, condition, values);
    }

    /// The request item's conditional update (first: its cancellation reason is the one read)
    /// and its entry's.
    fn items(
        &self, table: &str, address_id: &str, _event: Option<&EventRef>, now: Millis,
    ) -> StoreResult<Vec<TransactWriteItem>> {
        let status = match self.answer {
            Some(_) => RequestStatus::Answered,
            None => RequestStatus::Expired,
        };
        let mut values: Item = HashMap::from([
            (":open".into(), s(RequestStatus::Open.as_str())),
            (":closed".into(), s(status.as_str())),
        ]);
        let mut update = String::from("SET #st = :closed");
        let mut condition = String::from("#st = :open");
        if let Some(a) = &self.answer {
            update.push_str(", choice = :choice, answered_at = :at");
            values.insert(":choice".into(), s(&a.choice));
            values.insert(":at".into(), n(a.answered_at));
            if let Some(c) = &a.comment {
                update.push_str(", answer_comment = :comment");
                values.insert(":comment".into(), s(c));
            }
            condition.push_str(" AND expires_at > :now");
            values.insert(":now".into(), n(now));
        }
        let request = Update::builder()
            .table_name(table)
            .set_key(Some(request_key(&self.request_id)))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#st", "status")
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let open_entry = Delete::builder()
            .table_name(table)
            .set_key(Some(key(pk(address_id), entry_sk(&self.request_id))))
            .build()
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let mut closed = key(pk(address_id), closed_entry_sk(&self.request_id));
        closed.insert("request_id".into(), s(&self.request_id));
        closed.insert("status".into(), s(status.as_str()));
        closed.insert("ttl".into(), self.ttl.clone());
        let closed_entry = Put::builder()
            .table_name(table)
            .set_item(Some(closed))
            .build()
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        Ok(vec![
            TransactWriteItem::builder().update(request).build(),
            TransactWriteItem::builder().delete(open_entry).build(),
            TransactWriteItem::builder().put(closed_entry).build(),
        ])
    }

    /// Another answer (or the expiry) won: the request as it stands (an unreadable one is
    /// re-read).
    fn closed(&self, current: &Item) -> Option<Cancelled> {
        RequestRecord::from_item(current)
            .ok()
            .map(Cancelled::RequestClosed)
    }
}

/// What one expiry attempt did.
enum Expiry {
    /// Appended one `request.expired`.
    Expired,
    /// Another caller closed the request first: look again.
    Raced,
    /// Nothing due, or the feed is full.
    Done,
}

impl DynamoStore {
    /// The request item of `request_id`, unless there is none or it is forgotten at `now`.
    async fn request_item(
        &self, request_id: &str, now: Millis,
    ) -> StoreResult<Option<RequestRecord>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(request_key(request_id)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem request", e))?;
        out.item
            .as_ref()
            .filter(|item| !forgotten(item, now))
            .map(RequestRecord::from_item)
            .transpose()
    }

    /// The live address `id` with its open-request revision, then its request entries.
    async fn read_for_requests(&self, id: &str, now: Millis) -> StoreResult<Read> {
        let meta = self.meta(id).await?.ok_or(StoreError::AddressNotFound)?;
        let address = AddressRecord::from_item(&meta)?;
        if address.is_gone(now) {
            return Err(StoreError::AddressGone);
        }
        let entries = self
            .items_with_prefix(
                id,
                ENTRY_PREFIX,
                "request_id, #st, expires_at, #ttl",
                &[("#st", "status"), ("#ttl", "ttl")],
                "Query requests",
            )
            .await?
            .iter()
            .filter(|item| !forgotten(item, now))
            .map(|item| {
                let f = Fields::of(item, "request entry");
                Ok(Entry {
                    request_id: f.s("request_id")?,
                    open: f.parsed("status", RequestStatus::parse)? == RequestStatus::Open,
                    expires_at: f.i("expires_at")?,
                })
            })
            .collect::<StoreResult<_>>()?;
        Ok(Read {
            qrev: Fields::of(&meta, "META").count("qrev")?,
            address,
            entries,
        })
    }

    /// The earlier creation holding `key_hash` at this address: its request id and body hash.
    async fn key_record(
        &self, id: &str, key_hash: &str, now: Millis,
    ) -> StoreResult<Option<(String, String)>> {
        let item = self.get(id, key_record_sk(key_hash)).await?;
        item.filter(|i| !forgotten(i, now))
            .map(|item| CreationKey::from_item(&item).map(|k| (k.request_id, k.body_hash)))
            .transpose()
    }

    /// The answer to a creation whose Idempotency-Key an earlier request holds.
    async fn earlier_creation(
        &self, request_id: &str, body_hash: &str, claimed: &str, now: Millis,
    ) -> StoreResult<CreatedRequest> {
        rules::repeated_claim(body_hash, claimed)?;
        let request = self
            .request_item(request_id, now)
            .await?
            .ok_or_else(|| StoreError::Internal(format!("request {request_id} vanished")))?;
        Ok(CreatedRequest {
            request,
            duplicate: true,
        })
    }

    /// The creation's transaction (see the module docs).
    async fn create_tx(
        &self, read: &Read, r: &NewRequest, next: Millis, limits: &Limits, now: Millis,
    ) -> StoreResult<Created> {
        let id = &read.address.id;
        let ttl = request_ttl(r.expires_at, limits);
        let mut update = String::new();
        let mut condition = String::from(
            "attribute_not_exists(deleted_at) AND \
             (attribute_not_exists(expires_at) OR expires_at > :now)",
        );
        let mut values: Item = HashMap::from([(":now".into(), n(now))]);
        REQUESTS.meta_update(
            read.qrev,
            Some(next),
            &mut update,
            &mut condition,
            &mut values,
        );
        let meta = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), "META".into())))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Internal(e.to_string()))?;

        let mut item = key(request_pk(&r.id), REQUEST_SK.into());
        item.insert("request_id".into(), s(&r.id));
        item.insert("address_id".into(), s(id));
        item.insert("title".into(), s(&r.title));
        if let Some(body) = &r.body {
            item.insert("body".into(), s(body));
        }
        item.insert(
            "options".into(),
            AttributeValue::L(r.options.iter().map(s).collect()),
        );
        item.insert("comment_mode".into(), s(r.comment.as_str()));
        item.insert("created_at".into(), n(r.created_at));
        item.insert("expires_at".into(), n(r.expires_at));
        item.insert("secret_hash".into(), s(&r.secret_hash));
        item.insert("status".into(), s(RequestStatus::Open.as_str()));
        item.insert("ttl".into(), ttl.clone());

        let mut entry = key(pk(id), entry_sk(&r.id));
        entry.insert("request_id".into(), s(&r.id));
        entry.insert("status".into(), s(RequestStatus::Open.as_str()));
        entry.insert("expires_at".into(), n(r.expires_at));
        entry.insert("ttl".into(), ttl.clone());

        let mut items = vec![
            TransactWriteItem::builder().update(meta).build(),
            new_item(&self.table, item)?,
            new_item(&self.table, entry)?,
        ];
        let (meta_index, request_index) = (0, 1);
        let mut key_index = None;
        if let Some(claim) = &r.claim {
            key_index = Some(items.len());
            let mut record = key(pk(id), key_record_sk(&claim.key_hash));
            record.insert("request_id".into(), s(&r.id));
            record.insert("body_hash".into(), s(&claim.body_hash));
            record.insert("ttl".into(), ttl);
            // A forgotten record (past its TTL, not removed yet) is replaced.
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(record))
                .condition_expression("attribute_not_exists(pk) OR #ttl <= :now_secs")
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":now_secs", n(now.div_euclid(1000)))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .build()
                .map_err(|e| StoreError::Internal(e.to_string()))?;
            items.push(TransactWriteItem::builder().put(put).build());
        }

        let reasons = match self.transact(items, "TransactWriteItems request").await? {
            Ok(()) => {
                return Ok(Created::Ours(RequestRecord {
                    id: r.id.clone(),
                    address_id: id.clone(),
                    title: r.title.clone(),
                    body: r.body.clone(),
                    options: r.options.clone(),
                    comment: r.comment,
                    created_at: r.created_at,
                    expires_at: r.expires_at,
                    secret_hash: r.secret_hash.clone(),
                    status: RequestStatus::Open,
                    answer: None,
                }))
            }
            Err(reasons) => reasons,
        };
        let failed = |i: usize| {
            reasons
                .get(i)
                .filter(|r| r.code() == Some("ConditionalCheckFailed"))
                .map(|r| r.item())
        };
        // Request ids are random: an existing item of ours is this transaction's own earlier
        // attempt (a re-send the token did not settle), so the whole of it applied.
        if let Some(Some(existing)) = failed(request_index) {
            if get_s(existing, "address_id").as_deref() == Some(id.as_str())
                && get_s(existing, "secret_hash").as_deref() == Some(r.secret_hash.as_str())
            {
                tracing::warn!(address_id = %id, request_id = %r.id,
                    "a re-sent creation was cancelled by its own earlier attempt; answering its success");
                return RequestRecord::from_item(existing).map(Created::Ours);
            }
        }
        if let Some(Some(meta)) = failed(meta_index) {
            if meta_gone(meta, now) {
                return Ok(Created::Gone);
            }
        }
        if let Some(Some(record)) = key_index.and_then(failed) {
            let CreationKey {
                request_id,
                body_hash,
            } = CreationKey::from_item(record)?;
            if request_id == r.id {
                tracing::warn!(address_id = %id, request_id = %r.id,
                    "a re-sent creation was cancelled by its own earlier attempt; answering its success");
                return self
                    .request_item(&r.id, now)
                    .await?
                    .map(Created::Ours)
                    .ok_or_else(|| StoreError::Internal(format!("request {} vanished", r.id)));
            }
            return Ok(Created::Earlier {
                request_id,
                body_hash,
            });
        }
        Ok(Created::Retry)
    }
}

/// How a creation's transaction ended.
enum Created {
    Ours(RequestRecord),
    Gone,
    /// The key record exists: the earlier creation's request id and body hash.
    Earlier {
        request_id: String,
        body_hash: String,
    },
    Retry,
}

#[async_trait]
impl Requests for DynamoStore {
    async fn create_request(
        &self, id: &str, r: NewRequest, limits: &Limits, now: Millis,
    ) -> StoreResult<CreatedRequest> {
        if let Some(claim) = &r.claim {
            self.live(id, now).await?;
            if let Some((request_id, body_hash)) = self.key_record(id, &claim.key_hash, now).await?
            {
                return self
                    .earlier_creation(&request_id, &body_hash, &claim.body_hash, now)
                    .await;
            }
        }
        let r = &r;
        with_append_retries(|| async move {
            let read = self.read_for_requests(id, now).await?;
            let open = read
                .entries
                .iter()
                .filter(|e| e.open && e.expires_at > now)
                .count() as u64;
            rules::open_request_quota(open, limits)?;
            let next = read
                .next_expiry(None)
                .map_or(r.expires_at, |t| t.min(r.expires_at));
            match self.create_tx(&read, r, next, limits, now).await? {
                Created::Ours(request) => Ok(Some(CreatedRequest {
                    request,
                    duplicate: false,
                })),
                Created::Gone => Err(StoreError::AddressGone),
                Created::Earlier {
                    request_id,
                    body_hash,
                } => {
                    let claimed = r.claim.as_ref().map_or("", |c| c.body_hash.as_str());
                    self.earlier_creation(&request_id, &body_hash, claimed, now)
                        .await
                        .map(Some)
                }
                Created::Retry => Ok(None),
            }
        })
        .await
    }

    async fn get_request(
        &self, id: &str, request_id: &str, now: Millis,
    ) -> StoreResult<RequestRecord> {
        self.live(id, now).await?;
        match self.request_item(request_id, now).await? {
            Some(r) if r.address_id == id => Ok(r),
            _ => Err(StoreError::NotFound),
        }
    }

    async fn find_request(
        &self, request_id: &str, now: Millis,
    ) -> StoreResult<Option<RequestRecord>> {
        let Some(r) = self.request_item(request_id, now).await? else {
            return Ok(None);
        };
        match self.live(&r.address_id, now).await {
            Ok(_) => Ok(Some(r)),
            Err(StoreError::AddressNotFound | StoreError::AddressGone) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn answer_request(
        &self, request_id: &str, answer: Answer, limits: &Limits, now: Millis,
    ) -> StoreResult<AnswerOutcome> {
        let commit = async {
            let answer = &answer;
            with_append_retries(|| async move {
                let r = self
                    .request_item(request_id, now)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                let read = match self.read_for_requests(&r.address_id, now).await {
                    Ok(read) => read,
                    Err(StoreError::AddressGone | StoreError::AddressNotFound) => {
                        return Err(StoreError::NotFound)
                    }
                    Err(e) => return Err(e),
                };
                if r.status_at(now) != RequestStatus::Open {
                    return Ok(Some(AnswerOutcome::Closed(r)));
                }
                if !self
                    .quota_allows(&r.address_id, read.address.last_sequence + 1, limits, now)
                    .await?
                {
                    return Err(StoreError::QuotaExceeded);
                }
                let event = rules::request_answered_event(&r.id, answer);
                let close = RequestClose {
                    request_id: r.id.clone(),
                    answer: Some(answer.clone()),
                    read_qrev: read.qrev,
                    next_expiry: read.next_expiry(Some(&r.id)),
                    ttl: request_ttl(r.expires_at, limits),
                };
                match self
                    .append_closing_tx(&read.address, &event, None, None, Some(&close), limits, now)
                    .await?
                {
                    Ok(event) => Ok(Some(AnswerOutcome::Answered {
                        request: RequestRecord {
                            status: RequestStatus::Answered,
                            answer: Some(answer.clone()),
                            ..r
                        },
                        event,
                    })),
                    Err(Cancelled::RequestClosed(current)) => {
                        Ok(Some(AnswerOutcome::Closed(current)))
                    }
                    Err(Cancelled::Gone) => Err(StoreError::NotFound),
                    Err(_) => Ok(None),
                }
            })
            .await
        };
        self.telling(now, commit, |o| match o {
            AnswerOutcome::Answered { request, event } => Tell::Head(
                request.address_id.clone(),
                event.sequence,
                vec![rules::ANSWERED_TYPE.to_owned()],
            ),
            _ => Tell::Nothing,
        })
        .await
    }

    /// due request, earliest first, each re-reading the address.
    async fn expire_requests(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64> {
        let commit = async {
            let mut expired = 0;
            loop {
                let step = with_append_retries(|| async move {
                    let read = self.read_for_requests(id, now).await?;
                    let Some(due) = read
                        .entries
                        .iter()
                        .filter(|e| e.open && e.expires_at <= now)
                        .min_by(|a, b| {
                            (a.expires_at, &a.request_id).cmp(&(b.expires_at, &b.request_id))
                        })
                    else {
                        return Ok(Some(Expiry::Done));
                    };
                    if !self
                        .quota_allows(id, read.address.last_sequence + 1, limits, now)
                        .await?
                    {
                        return Ok(Some(Expiry::Done));
                    }
                    let event = rules::request_expired_event(&due.request_id);
                    let close = RequestClose {
                        request_id: due.request_id.clone(),
                        answer: None,
                        read_qrev: read.qrev,
                        next_expiry: read.next_expiry(Some(&due.request_id)),
                        ttl: request_ttl(due.expires_at, limits),
                    };
                    match self
                        .append_closing_tx(
                            &read.address,
                            &event,
                            None,
                            None,
                            Some(&close),
                            limits,
                            now,
                        )
                        .await?
                    {
                        Ok(_) => Ok(Some(Expiry::Expired)),
                        Err(Cancelled::RequestClosed(_)) => Ok(Some(Expiry::Raced)),
                        Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                        Err(_) => Ok(None),
                    }
                })
                .await?;
                match step {
                    Expiry::Expired => expired += 1,
                    Expiry::Raced => {}
                    Expiry::Done => return Ok(expired),
                }
            }
        };
        self.telling(now, commit, |n| {
            if *n > 0 {
                Tell::ReadHead(id.to_owned(), vec![rules::EXPIRED_TYPE.to_owned()])
            } else {
                Tell::Nothing
            }
        })
        .await
    }
}
