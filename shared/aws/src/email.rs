//! Inbound email on AWS (docs/API.md §10–§11): the raw message is an object of the email bucket
//! ([`crate::bucket`]); DynamoDB holds its `email.received` event and an email record
//! (`M#{email_id}`: the event, the object's key and size, the event's expiry), both written by
//! the one append transaction, whose condition on the record makes it idempotent on `email_id`.
//!
//! Order of writes: the object first (a new key every time), then the transaction that names it.
//! A transaction that does not apply leaves an object no record names: it is deleted at once
//! when the outcome is known, and by the bucket's lifecycle rule otherwise. So a record always
//! names a whole object, and no stored message is ever overwritten.
//!
//! Reads check the event's (or the record's) expiry first: an expired event's message is
//! unreachable through the API before the lifecycle rule removes its object.

use crate::store::Emails;
use crate::Tell;
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;

use crate::append::{Cancelled, Claim};
use crate::bucket::{download_key, inbound_key, mail_key, MessageBucket};
use crate::capacity::Tally;
use crate::domain::{ids, Limits, Millis};
use crate::item::*;
use crate::retry::with_append_retries;
use crate::store::{
    Appended, Download, DownloadLink, EventRef, NewEmail, StoreError, StoreResult, StoredEmail,
};
use crate::{DynamoStore, Item};

/// The largest object the store reads back: above any `max_email_bytes` it accepts.
pub const MAX_OBJECT_BYTES: u64 = 64 * 1024 * 1024;

/// The largest download a function answers itself (docs/API.md §11): Lambda answers at most
/// 6 MB, and a binary body goes base64-encoded (4 MiB becomes 5.6 MB). A larger one is written
/// to the bucket beside the message and answered with a link to it.
pub const INLINE_DOWNLOAD_MAX: usize = 4 * 1024 * 1024;

/// How long a download link works: long enough to follow the redirect, short enough that a
/// leaked link soon reads nothing.
pub const DOWNLOAD_LINK_TTL: std::time::Duration = std::time::Duration::from_secs(300);

/// An email record: the event a message produced and where its raw bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EmailRecord {
    pub event: EventRef,
    pub raw_key: String,
}

impl DynamoStore {
    fn bucket(&self) -> StoreResult<&dyn MessageBucket> {
        self.bucket.as_deref().ok_or(StoreError::NotSupported(
            "stored email (no email bucket configured)",
        ))
    }

    /// The retained record of `email_id` at this address, if any.
    async fn email_record(
        &self, id: &str, email_id: &str, now: Millis,
    ) -> StoreResult<Option<EmailRecord>> {
        let item = self.get(id, email_sk(email_id)).await?;
        item.filter(|i| get_i(i, "expires_at").is_some_and(|e| e > now))
            .map(|i| EmailRecord::from_item(&i))
            .transpose()
    }

    /// The bytes of the address's retained messages (the records' sizes).
    async fn stored_email_bytes(&self, id: &str, now: Millis) -> StoreResult<u64> {
        let records = self
            .items_with_prefix(id, "M#", "raw_size, expires_at", &[], "Query emails")
            .await?;
        records
            .iter()
            .filter(|i| get_i(i, "expires_at").is_some_and(|e| e > now))
            .try_fold(0u64, |t, i| {
                Ok(t.saturating_add(Fields::of(i, "email record").u("raw_size")?))
            })
    }
}

#[async_trait]
impl Emails for DynamoStore {
    async fn append_email(
        &self, id: &str, email: NewEmail, limits: &Limits, now: Millis,
    ) -> StoreResult<Appended> {
        let appended = vec![email.event.event_type.clone()];
        let commit = async {
            let bucket = self.bucket()?;
            self.live(id, now).await?;
            if let Some(record) = self.email_record(id, &email.email_id, now).await? {
                return Ok(Appended {
                    event: record.event,
                    duplicate: true,
                });
            }
            let size = email.raw.len() as u64;
            let stored = self.stored_email_bytes(id, now).await?;
            if stored.saturating_add(size) > limits.max_stored_email_bytes {
                return Err(StoreError::EmailStorageFull);
            }
            let raw_key = mail_key(id, &email.email_id);
            let record = Claim::email(&email.email_id, &raw_key, size);
            // The object is written once, after the first quota check (a full feed costs none).
            let written = AtomicBool::new(false);
            let (event, record, raw, raw_key_ref, written_ref) =
                (&email.event, &record, &email.raw, &raw_key, &written);
            let result = with_append_retries(|| async move {
                let address = self.live(id, now).await?;
                if !self
                    .quota_allows(id, address.last_sequence + 1, limits, now)
                    .await?
                {
                    return Err(StoreError::QuotaExceeded);
                }
                if !written_ref.load(Ordering::Relaxed) {
                    bucket.put(raw_key_ref, raw.clone()).await?;
                    written_ref.store(true, Ordering::Relaxed);
                }
                match self
                    .append_tx(&address, event, Some(record), None, limits, now)
                    .await?
                {
                    Ok(event) => Ok(Some(Appended {
                        event,
                        duplicate: false,
                    })),
                    Err(Cancelled::Idempotent { event, .. }) => Ok(Some(Appended {
                        event,
                        duplicate: true,
                    })),
                    Err(Cancelled::Gone) => Err(StoreError::AddressGone),
                    Err(Cancelled::StateConflict(_))
                    | Err(Cancelled::RequestClosed(_))
                    | Err(Cancelled::Retry) => Ok(None),
                }
            })
            .await;
            // Our object is unused when another event holds the message, or when the transaction
            // surely did not apply. After `unavailable` it may have applied: keep it.
            let unused = written.load(Ordering::Relaxed)
                && match &result {
                    Ok(appended) => appended.duplicate,
                    Err(StoreError::Unavailable(_)) => false,
                    Err(_) => true,
                };
            if unused {
                if let Err(e) = bucket.delete(&raw_key).await {
                    tracing::warn!(key = %raw_key, error = %e, "could not delete an unused object; the lifecycle rule will");
                }
            }
            result
        };
        self.telling(now, commit, |a| {
            Tell::Head(id.to_owned(), a.event.sequence, appended)
        })
        .await
    }

    async fn email_of_event(
        &self, id: &str, event_id: &str, now: Millis,
    ) -> StoreResult<StoredEmail> {
        let bucket = self.bucket()?;
        self.live(id, now).await?;
        let seq = ids::event_sequence(event_id).ok_or(StoreError::NotFound)?;
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk(id), event_sk(seq))))
            .projection_expression("#id, #exp, #email, #raw")
            .expression_attribute_names("#id", "id")
            .expression_attribute_names("#exp", "expires_at")
            .expression_attribute_names("#email", "email_id")
            .expression_attribute_names("#raw", "raw_key")
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .tally(&self.metrics)
            .map_err(|e| sdk_err("GetItem event", e))?;
        let item = out
            .item
            .filter(|i| get_s(i, "id").as_deref() == Some(event_id))
            .filter(|i| get_i(i, "expires_at").is_some_and(|e| e > now))
            .ok_or(StoreError::NotFound)?;
        let (Some(email_id), Some(raw_key)) = (get_s(&item, "email_id"), get_s(&item, "raw_key"))
        else {
            return Err(StoreError::EmailUnavailable);
        };
        let raw = bucket
            .get(&raw_key, MAX_OBJECT_BYTES)
            .await?
            .ok_or(StoreError::EmailUnavailable)?;
        Ok(StoredEmail {
            email_id,
            event: EventRef {
                id: event_id.to_owned(),
                sequence: seq,
            },
            raw,
        })
    }

    async fn email_by_id(&self, id: &str, email_id: &str, now: Millis) -> StoreResult<StoredEmail> {
        let bucket = self.bucket()?;
        self.live(id, now).await?;
        let record = self
            .email_record(id, email_id, now)
            .await?
            .ok_or(StoreError::NotFound)?;
        let raw = bucket
            .get(&record.raw_key, MAX_OBJECT_BYTES)
            .await?
            .ok_or(StoreError::EmailUnavailable)?;
        Ok(StoredEmail {
            email_id: email_id.to_owned(),
            event: record.event,
            raw,
        })
    }

    /// for `email_id` and no delivery has removed yet.
    async fn download_link(
        &self, id: &str, email_id: &str, download: &Download<'_>,
    ) -> StoreResult<Option<DownloadLink>> {
        if download.bytes.len() <= INLINE_DOWNLOAD_MAX {
            return Ok(None);
        }
        let bucket = self.bucket()?;
        let key = download_key(id, email_id);
        bucket.put(&key, download.bytes.to_vec()).await?;
        bucket
            .download_url(
                &key,
                download.content_type,
                download.disposition,
                DOWNLOAD_LINK_TTL,
            )
            .await
            .map(|url| {
                Some(DownloadLink {
                    url,
                    valid_for: DOWNLOAD_LINK_TTL,
                })
            })
    }

    async fn pending_email(&self, email_id: &str) -> StoreResult<Option<Vec<u8>>> {
        let bucket = self.bucket()?;
        match inbound_key(email_id) {
            Some(key) => bucket.get(&key, MAX_OBJECT_BYTES).await,
            None => Ok(None),
        }
    }
}

/// An email's record (`M#{email_id}`): the event it was appended as and its raw message's key.
impl FromItem for EmailRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "email record");
        Ok(EmailRecord {
            event: EventRef {
                id: f.s("event_id")?,
                sequence: f.u("seq")?,
            },
            raw_key: f.s("raw_key")?,
        })
    }
}
