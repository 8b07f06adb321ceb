//! How the store's records are laid out as DynamoDB items: keys, attribute encoding and
//! decoding, and the splitting of large event data into chunks.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;

use crate::domain::email_policy::EmailPolicy;
use crate::domain::verification::VerificationConfig;
use crate::domain::{Ingress, Millis};
use crate::store::{AddressRecord, Event, EventRef, StoreError, StoreResult};
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

/// Whether a META item (as read, or as a failed condition returned it) is of an address deleted
/// or expired at `now`.
pub(crate) fn meta_gone(meta: &Item, now: Millis) -> bool {
    meta.contains_key("deleted_at") || get_i(meta, "expires_at").is_some_and(|e| e <= now)
}

/// The condition that a META item is of a live address (`:now` bound).
pub(crate) const META_LIVE: &str = "attribute_not_exists(deleted_at) AND \
     (attribute_not_exists(expires_at) OR expires_at > :now)";

/// Whether an item with a TTL is past it at `now`: forgotten, though DynamoDB may not have
/// removed it yet (reads filter expiry themselves; crate docs).
pub(crate) fn forgotten(item: &Item, now: Millis) -> bool {
    get_i(item, "ttl").is_some_and(|t| t.saturating_mul(1000) <= now)
}

/// A record decoded from one item (its type's layout is documented where it is written).
pub(crate) trait FromItem: Sized {
    fn from_item(item: &Item) -> StoreResult<Self>;
}

/// The attributes of one item read as a record of `kind`: a required attribute that is
/// missing, or any attribute of another type than its record says, is
/// [`StoreError::Internal`] naming the record and the attribute — never a silent `""` or `0`.
/// Only counters kept with `ADD` (absent until first counted) read as 0 when absent.
pub(crate) struct Fields<'a> {
    item: &'a Item,
    kind: &'static str,
}

impl<'a> Fields<'a> {
    pub(crate) fn of(item: &'a Item, kind: &'static str) -> Self {
        Self { item, kind }
    }

    fn bad(&self, name: &str, what: &str) -> StoreError {
        StoreError::Internal(format!("a {} item's attribute {name} {what}", self.kind))
    }

    /// A string attribute that may be absent.
    pub(crate) fn opt_s(&self, name: &str) -> StoreResult<Option<String>> {
        match self.item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v.clone())),
            Some(_) => Err(self.bad(name, "is not a string")),
        }
    }

    /// A string attribute the record always has.
    pub(crate) fn s(&self, name: &str) -> StoreResult<String> {
        self.opt_s(name)?
            .ok_or_else(|| self.bad(name, "is missing"))
    }

    /// An integer attribute that may be absent.
    pub(crate) fn opt_i(&self, name: &str) -> StoreResult<Option<i64>> {
        match self.item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse()
                .map(Some)
                .map_err(|_| self.bad(name, "is not an integer")),
            Some(_) => Err(self.bad(name, "is not a number")),
        }
    }

    /// An integer attribute the record always has.
    pub(crate) fn i(&self, name: &str) -> StoreResult<i64> {
        self.opt_i(name)?
            .ok_or_else(|| self.bad(name, "is missing"))
    }

    /// A non-negative integer attribute the record always has.
    pub(crate) fn u(&self, name: &str) -> StoreResult<u64> {
        u64::try_from(self.i(name)?).map_err(|_| self.bad(name, "is negative"))
    }

    /// A counter kept with `ADD`: absent until first counted, so absent is 0.
    pub(crate) fn count(&self, name: &str) -> StoreResult<u64> {
        match self.opt_i(name)? {
            None => Ok(0),
            Some(v) => u64::try_from(v).map_err(|_| self.bad(name, "is negative")),
        }
    }

    /// A counter (as [`Fields::count`]) that fits 32 bits.
    pub(crate) fn count32(&self, name: &str) -> StoreResult<u32> {
        u32::try_from(self.count(name)?).map_err(|_| self.bad(name, "passes 32 bits"))
    }

    /// A list of strings; absent is empty.
    pub(crate) fn strings(&self, name: &str) -> StoreResult<Vec<String>> {
        match self.item.get(name) {
            None => Ok(Vec::new()),
            Some(AttributeValue::L(list)) => list
                .iter()
                .map(|v| {
                    v.as_s()
                        .cloned()
                        .map_err(|_| self.bad(name, "holds a non-string"))
                })
                .collect(),
            Some(_) => Err(self.bad(name, "is not a list")),
        }
    }

    /// A list of strings the record always has (possibly empty).
    pub(crate) fn list(&self, name: &str) -> StoreResult<Vec<String>> {
        match self.item.get(name) {
            None => Err(self.bad(name, "is missing")),
            Some(_) => self.strings(name),
        }
    }

    /// A list of name/value pairs the record always has, in their order: each a list of two
    /// strings.
    pub(crate) fn pairs(&self, name: &str) -> StoreResult<Vec<(String, String)>> {
        let Some(value) = self.item.get(name) else {
            return Err(self.bad(name, "is missing"));
        };
        let AttributeValue::L(list) = value else {
            return Err(self.bad(name, "is not a list"));
        };
        list.iter()
            .map(|pair| match pair.as_l().map(Vec::as_slice) {
                Ok([AttributeValue::S(a), AttributeValue::S(b)]) => Ok((a.clone(), b.clone())),
                _ => Err(self.bad(name, "holds something other than a pair of strings")),
            })
            .collect()
    }

    /// A non-negative integer attribute that may be absent.
    pub(crate) fn opt_u(&self, name: &str) -> StoreResult<Option<u64>> {
        self.opt_i(name)?
            .map(|v| u64::try_from(v).map_err(|_| self.bad(name, "is negative")))
            .transpose()
    }

    /// A non-negative integer attribute the record always has, that fits 32 bits.
    pub(crate) fn u32(&self, name: &str) -> StoreResult<u32> {
        u32::try_from(self.u(name)?).map_err(|_| self.bad(name, "passes 32 bits"))
    }

    /// A map of lists of strings (absent is empty), as `(key, list)` in the order of the keys.
    pub(crate) fn lists_by_key(&self, name: &str) -> StoreResult<Vec<(String, Vec<String>)>> {
        let map = match self.item.get(name) {
            None => return Ok(Vec::new()),
            Some(AttributeValue::M(map)) => map,
            Some(_) => return Err(self.bad(name, "is not a map")),
        };
        let mut lists = map
            .iter()
            .map(|(k, v)| match v {
                AttributeValue::L(list) => list
                    .iter()
                    .map(|v| v.as_s().cloned())
                    .collect::<Result<Vec<_>, _>>()
                    .map(|list| (k.clone(), list))
                    .map_err(|_| self.bad(name, "holds a non-string")),
                _ => Err(self.bad(name, "holds a non-list")),
            })
            .collect::<StoreResult<Vec<_>>>()?;
        lists.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(lists)
    }

    /// A string attribute the record always has, read by `parse` (an enum's stored name).
    pub(crate) fn parsed<T>(
        &self, name: &str, parse: impl Fn(&str) -> Option<T>,
    ) -> StoreResult<T> {
        let v = self.s(name)?;
        parse(&v).ok_or_else(|| self.bad(name, &format!("holds an unknown value {v:?}")))
    }
}

/// A delivery's Idempotency-Key record (`I#{key_hash}`): the event its first use appended, and
/// the hash of that use's body.
pub(crate) struct KeyRecord {
    pub(crate) event: EventRef,
    pub(crate) body_hash: String,
}

impl FromItem for KeyRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "idempotency key");
        Ok(Self {
            event: EventRef {
                id: f.s("event_id")?,
                sequence: f.u("seq")?,
            },
            body_hash: f.s("body_hash")?,
        })
    }
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

impl FromItem for AddressRecord {
    fn from_item(item: &Item) -> StoreResult<Self> {
        let f = Fields::of(item, "META");
        Ok(AddressRecord {
            id: f.s("id")?,
            name: f.opt_s("name")?,
            task_id: f.opt_s("task_id")?,
            email: f.s("email")?,
            created_at: f.i("created_at")?,
            expires_at: f.opt_i("expires_at")?,
            deleted_at: f.opt_i("deleted_at")?,
            token_hash: f.s("token_hash")?,
            inbox_hash: f.s("inbox_hash")?,
            last_sequence: f.count("seq")?,
            state_keys: f.count("state_keys")?,
            state_bytes: f.count("state_bytes")?,
            next_request_expiry: f.opt_i("next_request_expiry")?,
            next_timer_at: f.opt_i("next_timer_at")?,
            hook_types: crate::hooks::meta_hook_types(&f)?,
            email_policy: match f.opt_s("email_policy")? {
                None => None,
                Some(stored) => Some(EmailPolicy::from_stored(&stored).ok_or_else(|| {
                    StoreError::Internal("META with an unreadable email_policy".into())
                })?),
            },
            email_refused: f.count("email_refused")?,
            verification: match f.opt_s("verification")? {
                None => None,
                Some(stored) => {
                    Some(VerificationConfig::from_stored(&stored).ok_or_else(|| {
                        StoreError::Internal("META with an unreadable verification".into())
                    })?)
                }
            },
        })
    }
}

/// An event from its item, with its `data` (read from the item and its chunks).
pub(crate) fn event_from(item: &Item, data: String) -> StoreResult<Event> {
    let f = Fields::of(item, "event");
    Ok(Event {
        id: f.s("id")?,
        sequence: f.u("seq")?,
        event_type: f.s("type")?,
        source: f.opt_s("source")?,
        ingress: f.parsed("ingress", Ingress::parse)?,
        received_at: f.i("received_at")?,
        acknowledged_at: f.opt_i("acked_at")?,
        data,
        http: f.opt_s("http")?,
    })
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
    fn a_missing_or_mistyped_attribute_is_an_internal_error_naming_it() {
        let item: Item = HashMap::from([
            ("email".to_owned(), s("a@example.com")),
            ("status".to_owned(), s("pending")),
            ("code_tries".to_owned(), s("2")),
            ("created_at".to_owned(), n(5)),
        ]);
        let f = Fields::of(&item, "contact");
        assert_eq!(f.s("email"), Ok("a@example.com".to_owned()));
        assert_eq!(f.i("created_at"), Ok(5));
        assert_eq!(f.opt_s("code_hash"), Ok(None));
        assert_eq!(f.count("code_mails"), Ok(0));
        assert_eq!(
            f.i("code_day"),
            Err(StoreError::Internal(
                "a contact item's attribute code_day is missing".into()
            ))
        );
        assert_eq!(
            f.count32("code_tries"),
            Err(StoreError::Internal(
                "a contact item's attribute code_tries is not a number".into()
            ))
        );
        assert_eq!(
            f.s("created_at"),
            Err(StoreError::Internal(
                "a contact item's attribute created_at is not a string".into()
            ))
        );
        assert!(matches!(
            f.parsed("status", |v| (v == "confirmed").then_some(())),
            Err(StoreError::Internal(m)) if m.contains("status") && m.contains("pending")
        ));
        let negative: Item = HashMap::from([("seq".to_owned(), n(-1))]);
        assert!(Fields::of(&negative, "event").u("seq").is_err());
    }

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
        assert!("E#~" < "H#" && "E#~" < "I#" && "E#~" < "META" && "E#~" < "S#");
    }
}
