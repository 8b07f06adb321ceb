//! The email bucket (docs/API.md §10–§11, "on AWS"): where the raw messages live. Nothing of a
//! message beyond its event's `data` goes into DynamoDB.
//!
//! | key | written by | read by | removed |
//! |---|---|---|---|
//! | `inbound/{ses-message-id}` | SES's receipt rule (S3 action) | the `email` function, replay | by the `email` function once delivered; else by the lifecycle rule |
//! | `mail/{address_id}/{email_id}/{nonce}` | the store, before the append that names it | attachment and raw downloads | with the address (purge), else by the lifecycle rule |
//! | `mail/{address_id}/{email_id}/download-{nonce}` | a download over [`crate::INLINE_DOWNLOAD_MAX`] bytes | the client, through a presigned URL | with the address (purge), else by the lifecycle rule |
//!
//! Each address has its own copy of a message, so purging one address never removes another's.
//! The nonce makes every write a new object: a message appended twice concurrently (the same
//! `email_id`) never overwrites the object the winning event names; the loser's copy is
//! deleted, or left to the lifecycle rule.

use std::sync::Arc;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

use crate::store::{StoreError, StoreResult};

/// Where the store keeps raw messages: the email bucket ([`EmailBucket`], S3). A trait object,
/// so that only the programs that hand one to the store ([`crate::DynamoStore::with_email_bucket`]:
/// the `email`, `email-api` and `purge` functions, `agentaddress purge-worker`, the tools) link
/// the S3 client; every other Lambda function stays without it (docs/PERFORMANCE.md, "Lambda
/// mode").
#[async_trait]
pub trait MessageBucket: std::fmt::Debug + Send + Sync {
    /// The bucket's name (S3 notifications name it).
    fn name(&self) -> &str;
    /// The object's bytes; `None` when there is no such object. An object over `max_bytes` is
    /// [`StoreError::Internal`].
    async fn get(&self, key: &str, max_bytes: u64) -> StoreResult<Option<Vec<u8>>>;
    /// Writes `body` at `key`.
    async fn put(&self, key: &str, body: Vec<u8>) -> StoreResult<()>;
    /// Removes `key` (no error when it does not exist).
    async fn delete(&self, key: &str) -> StoreResult<()>;
    /// Removes the objects under `prefix`, up to about `budget` of them; returns how many were
    /// removed and whether any remain.
    async fn delete_prefix(&self, prefix: &str, budget: usize) -> StoreResult<(u64, bool)>;
    /// A URL that reads `key` without credentials for `ttl`, answered with `content_type` and
    /// `disposition` (a presigned `GetObject`).
    async fn download_url(
        &self,
        key: &str,
        content_type: &str,
        disposition: &str,
        ttl: std::time::Duration,
    ) -> StoreResult<String>;
}

/// Where SES writes received messages.
pub const INBOUND_PREFIX: &str = "inbound/";
/// Where the store keeps each address's messages.
pub const MAIL_PREFIX: &str = "mail/";

/// The email bucket and its S3 client.
#[derive(Debug, Clone)]
pub struct EmailBucket {
    client: aws_sdk_s3::Client,
    name: String,
}

/// The prefix of one address's stored messages.
pub fn mail_prefix(address_id: &str) -> String {
    format!("{MAIL_PREFIX}{address_id}/")
}

/// A new object key for `email_id`'s copy at `address_id`.
pub fn mail_key(address_id: &str, email_id: &str) -> String {
    format!(
        "{}{email_id}/{}",
        mail_prefix(address_id),
        crate::retry::uuid_like()
    )
}

/// A new object key for a download of `email_id`'s copy at `address_id` too large to answer
/// from a function (docs/API.md §11): beside the copy, so that purging the address removes it.
pub fn download_key(address_id: &str, email_id: &str) -> String {
    format!(
        "{}{email_id}/download-{}",
        mail_prefix(address_id),
        crate::retry::uuid_like()
    )
}

/// The key SES wrote message `ses_id` at, when `ses_id` can be one (SES ids are lower-case
/// letters and digits; `.`, `_` and `-` are allowed for other providers' ids).
pub fn inbound_key(ses_id: &str) -> Option<String> {
    let ok = !ses_id.is_empty()
        && ses_id.len() <= 200
        && ses_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then(|| format!("{INBOUND_PREFIX}{ses_id}"))
}

impl EmailBucket {
    /// [`EmailBucket::new`] as the store takes it.
    pub fn shared(sdk: &SdkConfig, name: impl Into<String>) -> Arc<dyn MessageBucket> {
        Arc::new(Self::new(sdk, name))
    }

    /// The bucket `name`, with a client of `sdk`. With an endpoint from the environment
    /// (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`: an emulator), requests use path-style
    /// addressing (`http://host/bucket/key`), which emulators on `127.0.0.1` need.
    pub fn new(sdk: &SdkConfig, name: impl Into<String>) -> Self {
        let emulated = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|s| !s.is_empty()));
        // Checksums only where S3 requires them: a CRC on every upload would buy nothing over
        // TLS and the MD5 S3 checks itself, and emulators differ in how they take trailers.
        let config = aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(emulated)
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .response_checksum_validation(
                aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired,
            )
            .build();
        Self {
            client: aws_sdk_s3::Client::from_conf(config),
            name: name.into(),
        }
    }
}

#[async_trait]
impl MessageBucket for EmailBucket {
    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &str, max_bytes: u64) -> StoreResult<Option<Vec<u8>>> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.name)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_no_such_key() || s.code() == Some("NoSuchKey")) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(s3_err("GetObject", e)),
        };
        let declared = out.content_length().and_then(|n| u64::try_from(n).ok());
        if declared.is_some_and(|n| n > max_bytes) {
            return Err(StoreError::Internal(format!(
                "object {key} is {} bytes, over {max_bytes}",
                declared.unwrap_or(0)
            )));
        }
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::Unavailable(format!("GetObject {key}: reading: {e}")))?
            .into_bytes();
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max_bytes {
            return Err(StoreError::Internal(format!(
                "object {key} is over {max_bytes} bytes"
            )));
        }
        Ok(Some(bytes.to_vec()))
    }

    /// Server-side encrypted by the bucket's default.
    async fn put(&self, key: &str, body: Vec<u8>) -> StoreResult<()> {
        self.client
            .put_object()
            .bucket(&self.name)
            .key(key)
            .content_type("message/rfc822")
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| s3_err("PutObject", e))?;
        Ok(())
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.client
            .delete_object()
            .bucket(&self.name)
            .key(key)
            .send()
            .await
            .map_err(|e| s3_err("DeleteObject", e))?;
        Ok(())
    }

    async fn download_url(
        &self,
        key: &str,
        content_type: &str,
        disposition: &str,
        ttl: std::time::Duration,
    ) -> StoreResult<String> {
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(ttl)
            .map_err(|e| StoreError::Internal(format!("presigning config: {e}")))?;
        let request = self
            .client
            .get_object()
            .bucket(&self.name)
            .key(key)
            .response_content_type(content_type)
            .response_content_disposition(disposition)
            .response_cache_control("private, no-store")
            .presigned(config)
            .await
            .map_err(|e| s3_err("GetObject (presigning)", e))?;
        Ok(request.uri().to_owned())
    }

    /// At least one list page (1,000 keys) per call.
    async fn delete_prefix(&self, prefix: &str, budget: usize) -> StoreResult<(u64, bool)> {
        let mut removed = 0u64;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.name)
                .prefix(prefix)
                .max_keys(1000)
                .send()
                .await
                .map_err(|e| s3_err("ListObjectsV2", e))?;
            let keys: Vec<ObjectIdentifier> = out
                .contents()
                .iter()
                .filter_map(|o| o.key())
                .filter_map(|k| ObjectIdentifier::builder().key(k).build().ok())
                .collect();
            if keys.is_empty() {
                return Ok((removed, false));
            }
            let n = keys.len() as u64;
            let delete = Delete::builder()
                .set_objects(Some(keys))
                .quiet(true)
                .build()
                .map_err(|e| StoreError::Internal(e.to_string()))?;
            let result = self
                .client
                .delete_objects()
                .bucket(&self.name)
                .delete(delete)
                .send()
                .await
                .map_err(|e| s3_err("DeleteObjects", e))?;
            if let Some(e) = result.errors().first() {
                return Err(StoreError::Unavailable(format!(
                    "DeleteObjects: {}: {}",
                    e.code().unwrap_or(""),
                    e.message().unwrap_or("")
                )));
            }
            removed += n;
            if out.is_truncated() != Some(true) {
                return Ok((removed, false));
            }
            if removed >= budget as u64 {
                return Ok((removed, true));
            }
        }
    }
}

/// Maps an S3 failure: throttling, S3's 500s and transport trouble are `unavailable`.
fn s3_err<E, R>(op: &str, e: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
{
    crate::item::service_err(
        op,
        e,
        &[
            "SlowDown",
            "InternalError",
            "ServiceUnavailable",
            "RequestTimeout",
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(inbound_key("0abc9xyz").as_deref(), Some("inbound/0abc9xyz"));
        assert_eq!(inbound_key(""), None);
        assert_eq!(inbound_key("../x"), None);
        assert_eq!(inbound_key("a/b"), None);
        assert_eq!(inbound_key(&"a".repeat(201)), None);
        let k = mail_key("addr_1", "eml_2");
        assert!(k.starts_with("mail/addr_1/eml_2/"), "{k}");
        assert_ne!(
            k,
            mail_key("addr_1", "eml_2"),
            "every write is a new object"
        );
    }
}
