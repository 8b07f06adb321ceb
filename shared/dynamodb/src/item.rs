//! How the store's records are laid out as DynamoDB items: keys, attribute encoding and
//! decoding, and the splitting of large event data into chunks.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;

use crate::domain::verification::VerificationConfig;
use crate::domain::{Ingress, Millis};
use crate::store::{AddressRecord, Event, StoreError, StoreResult};
use crate::Item;

pub(crate) fn pk(id: &str) -> String {
    format!("A#{id}")
}

/// The partition of an email-key item: `E#{email_key}` (docs/API.md §1). Never `A#…`, so it
/// shares no partition with an address.
pub(crate) fn email_pk(email_key: &str) -> String {
    format!("E#{email_key}")
}

/// The sort key of an email-key item.
pub(crate) const EMAIL_SK: &str = "E";

/// The sort key of an email's record (docs/API.md §10: idempotent on `email_id`).
pub(crate) fn email_sk(email_id: &str) -> String {
    format!("M#{email_id}")
}

pub(crate) fn event_sk(seq: u64) -> String {
    format!("E#{seq:020}")
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn get_s(item: &Item, k: &str) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}

pub(crate) fn get_i(item: &Item, k: &str) -> Option<i64> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

pub(crate) fn get_u(item: &Item, k: &str) -> u64 {
    get_i(item, k)
        .and_then(|v| u64::try_from(v).ok())
        .unwrap_or(0)
}

pub(crate) fn ttl_secs(ms: Millis) -> i64 {
    (ms + 999).div_euclid(1000)
}

pub(crate) fn key(pk_value: String, sk_value: String) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(pk_value)),
        ("sk".to_owned(), s(sk_value)),
    ])
}

/// DynamoDB's error codes that mean "try again": throttling, its 500s, transaction conflicts.
const DYNAMODB_TRANSIENT: &[&str] = &[
    "Throttl",
    "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionInProgress",
    "TransactionConflict",
    "ReplicatedWriteConflict",
];

/// Maps a non-transactional DynamoDB failure: throttling and transport trouble are
/// `unavailable`.
pub(crate) fn sdk_err<E, R>(op: &str, e: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
{
    service_err(op, e, DYNAMODB_TRANSIENT)
}

/// Maps an AWS SDK failure of any service: an error code containing one of `transient`, a
/// timeout or a transport failure is `unavailable` (safe to retry); anything else `internal`.
pub(crate) fn service_err<E, R>(op: &str, e: SdkError<E, R>, transient: &[&str]) -> StoreError
where
    E: ProvideErrorMetadata + std::fmt::Debug,
    R: std::fmt::Debug,
{
    match &e {
        SdkError::ServiceError(ctx) => {
            let code = ctx.err().code().unwrap_or("");
            let message = format!("{op}: {code}: {}", ctx.err().message().unwrap_or(""));
            if transient.iter().any(|t| code.contains(t)) {
                StoreError::Unavailable(message)
            } else {
                StoreError::Internal(message)
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Unavailable(format!("{op}: {e:?}"))
        }
        _ => StoreError::Internal(format!("{op}: {e:?}")),
    }
}

pub(crate) fn record_from(item: &Item) -> StoreResult<AddressRecord> {
    let id = get_s(item, "id").ok_or_else(|| StoreError::Internal("META without id".into()))?;
    Ok(AddressRecord {
        id,
        name: get_s(item, "name"),
        task_id: get_s(item, "task_id"),
        email: get_s(item, "email").unwrap_or_default(),
        created_at: get_i(item, "created_at").unwrap_or(0),
        expires_at: get_i(item, "expires_at"),
        deleted_at: get_i(item, "deleted_at"),
        token_hash: get_s(item, "token_hash").unwrap_or_default(),
        inbox_hash: get_s(item, "inbox_hash").unwrap_or_default(),
        last_sequence: get_u(item, "seq"),
        state_keys: get_u(item, "state_keys"),
        state_bytes: get_u(item, "state_bytes"),
        next_request_expiry: get_i(item, "next_request_expiry"),
        verification: match get_s(item, "verification") {
            None => None,
            Some(stored) => Some(VerificationConfig::from_stored(&stored).ok_or_else(|| {
                StoreError::Internal("META with an unreadable verification".into())
            })?),
        },
    })
}

pub(crate) fn event_from(item: &Item, data: String) -> Event {
    Event {
        id: get_s(item, "id").unwrap_or_default(),
        sequence: get_u(item, "seq"),
        event_type: get_s(item, "type").unwrap_or_default(),
        source: get_s(item, "source"),
        ingress: get_s(item, "ingress")
            .as_deref()
            .and_then(Ingress::parse)
            .unwrap_or(Ingress::Http),
        received_at: get_i(item, "received_at").unwrap_or(0),
        acknowledged_at: get_i(item, "acked_at"),
        data,
        http: get_s(item, "http"),
    }
}

/// Bytes of event data kept in the event item itself; the rest goes to chunk items.
pub const CHUNK_BYTES: usize = 300_000;

/// Splits `text` into pieces of at most `max` bytes, on character boundaries.
pub fn split_utf8(text: &str, max: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while rest.len() > max {
        let mut cut = max;
        while cut > 0 && !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (head, tail) = rest.split_at(cut.max(1));
        parts.push(head);
        rest = tail;
    }
    parts.push(rest);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_split_on_character_boundaries() {
        let text = "aé€😀".repeat(100_000);
        let parts = split_utf8(&text, CHUNK_BYTES);
        assert!(parts.len() > 1);
        assert!(parts
            .iter()
            .all(|p| p.len() <= CHUNK_BYTES && !p.is_empty()));
        assert_eq!(parts.concat(), text);
        assert_eq!(split_utf8("", 10), vec![""]);
        assert_eq!(split_utf8("abc", 3), vec!["abc"]);
        assert_eq!(split_utf8("abcd", 3), vec!["abc", "d"]);
    }

    #[test]
    fn sort_keys_order_events_and_chunks() {
        assert!(event_sk(9) < event_sk(10));
        assert!(event_sk(9) < format!("{}#001", event_sk(9)));
        assert!(format!("{}#001", event_sk(9)) < event_sk(10));
        assert!(event_sk(u64::MAX).as_str() < "E#~");
        assert!("E#~" < "I#" && "E#~" < "META" && "E#~" < "S#");
    }
}
