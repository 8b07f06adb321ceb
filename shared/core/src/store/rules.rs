//! The rules every store obeys, each written once: both backends call these inside their own
//! atomic step (one SQLite transaction; one DynamoDB transaction with its conditions), so the
//! two deployments cannot disagree. A store only persists what these decide.

pub mod mail;

use super::{
    AddressRecord, Appended, EventRef, IdempotencyClaim, NewEvent, StoreError, StoreResult,
};
use crate::domain::{Ingress, Limits, Millis};

/// The compare-and-set rule of state writes and deletes: `None` always holds, `Some(0)` holds
/// when the key is absent, `Some(n)` when its current revision is `n`.
pub fn check_expected(expected: Option<u64>, current: Option<u64>) -> StoreResult<()> {
    match expected {
        None => Ok(()),
        Some(0) if current.is_none() => Ok(()),
        Some(n) if n > 0 && current == Some(n) => Ok(()),
        Some(_) => Err(StoreError::RevisionConflict { current }),
    }
}

/// The fixed one-minute window containing `now`, and the whole seconds left in it (≥ 1).
pub fn rate_window(now: Millis) -> (i64, u64) {
    let window = now.div_euclid(60_000);
    let left_ms = (window + 1) * 60_000 - now;
    (window, ((left_ms + 999) / 1000).max(1) as u64)
}

/// The type of a person's answer's event (docs/API.md §12).
pub const ANSWERED_TYPE: &str = "request.answered";
/// The type of an unanswered request's expiry event (docs/API.md §12).
pub const EXPIRED_TYPE: &str = "request.expired";
/// The type of a state write's event (docs/API.md §7).
pub const UPDATED_TYPE: &str = "state.updated";
/// The type of a state delete's event (docs/API.md §7).
pub const DELETED_TYPE: &str = "state.deleted";

/// The `request.answered` event of request `request_id` answered with `answer` (docs/API.md
/// §12).
pub fn request_answered_event(request_id: &str, answer: &super::Answer) -> NewEvent {
    NewEvent {
        event_type: ANSWERED_TYPE.into(),
        source: Some(request_id.to_owned()),
        ingress: Ingress::Request,
        data: crate::domain::request::answered_data(
            request_id,
            &answer.choice,
            answer.comment.as_deref(),
            answer.answered_at,
        ),
        http: None,
    }
}

/// The `request.expired` event of request `request_id` (docs/API.md §12).
pub fn request_expired_event(request_id: &str) -> NewEvent {
    NewEvent {
        event_type: EXPIRED_TYPE.into(),
        source: Some(request_id.to_owned()),
        ingress: Ingress::Request,
        data: crate::domain::request::expired_data(request_id),
        http: None,
    }
}

/// The `data` of a `state.updated` event.
pub fn state_updated_data(key: &str, revision: u64, compact_value: &str) -> String {
    format!(
        "{{\"key\":{},\"revision\":{revision},\"value\":{compact_value}}}",
        serde_json::Value::String(key.to_owned())
    )
}

/// The `data` of a `state.deleted` event.
pub fn state_deleted_data(key: &str, revision: u64) -> String {
    format!(
        "{{\"key\":{},\"revision\":{revision}}}",
        serde_json::Value::String(key.to_owned())
    )
}

/// The state totals of an address: keys, and bytes by `domain::state::entry_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTotals {
    pub keys: u64,
    pub bytes: u64,
}

impl StateTotals {
    /// The totals an address record carries.
    pub fn of(address: &AddressRecord) -> Self {
        Self {
            keys: address.state_keys,
            bytes: address.state_bytes,
        }
    }
}

/// The totals after writing an entry of `size` bytes at a key that held an entry of `old_size`
/// bytes (`None`: a new key), or [`StoreError::StateLimitExceeded`] when the write would break
/// either limit (docs/API.md §7). Saturating on inconsistent totals: a corrupted counter never
/// underflows into a huge one.
pub fn state_after_put(
    current: StateTotals, old_size: Option<u64>, size: u64, limits: &Limits,
) -> StoreResult<StateTotals> {
    let after = match old_size {
        Some(old) => StateTotals {
            keys: current.keys,
            bytes: current.bytes.saturating_sub(old) + size,
        },
        None => StateTotals {
            keys: current.keys + 1,
            bytes: current.bytes + size,
        },
    };
    if after.keys > limits.max_state_keys || after.bytes > limits.max_state_bytes {
        return Err(StoreError::StateLimitExceeded);
    }
    Ok(after)
}

/// The totals after deleting an entry of `old_size` bytes.
pub fn state_after_delete(current: StateTotals, old_size: u64) -> StateTotals {
    StateTotals {
        keys: current.keys.saturating_sub(1),
        bytes: current.bytes.saturating_sub(old_size),
    }
}

/// The event a state write appends, at sequence `revision` (docs/API.md §7).
pub fn state_updated_event(key: &str, revision: u64, compact_value: &str) -> NewEvent {
    NewEvent {
        event_type: UPDATED_TYPE.into(),
        source: Some("state".into()),
        ingress: Ingress::State,
        data: state_updated_data(key, revision, compact_value),
        http: None,
    }
}

/// The event a state delete appends, at sequence `revision` (docs/API.md §7).
pub fn state_deleted_event(key: &str, revision: u64) -> NewEvent {
    NewEvent {
        event_type: DELETED_TYPE.into(),
        source: Some("state".into()),
        ingress: Ingress::State,
        data: state_deleted_data(key, revision),
        http: None,
    }
}

/// The answer to a delivery whose Idempotency-Key is already remembered: the original event
/// when the body is the same, [`StoreError::IdempotencyKeyReused`] when it is not
/// (docs/API.md §3). Answered even when the feed is full.
pub fn repeated_delivery(
    original: EventRef, original_body_hash: &str, claim: &IdempotencyClaim,
) -> StoreResult<Appended> {
    if original_body_hash == claim.body_hash {
        Ok(Appended {
            event: original,
            duplicate: true,
        })
    } else {
        Err(StoreError::IdempotencyKeyReused)
    }
}

/// A creation retried with the Idempotency-Key of an earlier one (a request for a person,
/// docs/API.md §12; a send, §16): the same body is that creation again, another body
/// [`StoreError::IdempotencyKeyReused`].
pub fn repeated_claim(original_body_hash: &str, claim_body_hash: &str) -> StoreResult<()> {
    if original_body_hash == claim_body_hash {
        Ok(())
    } else {
        Err(StoreError::IdempotencyKeyReused)
    }
}

/// The open-request limit (docs/API.md §12): a new request when `open` requests are open (and
/// unexpired) is [`StoreError::QuotaExceeded`] at `limits.max_open_requests`.
pub fn open_request_quota(open: u64, limits: &Limits) -> StoreResult<()> {
    if open >= limits.max_open_requests {
        Err(StoreError::QuotaExceeded)
    } else {
        Ok(())
    }
}

/// The pending-timer limit (docs/API.md §20): a new timer when `pending` timers are pending.
pub fn pending_timer_quota(pending: u64) -> StoreResult<()> {
    if pending >= crate::domain::timer::MAX_PENDING_TIMERS as u64 {
        Err(StoreError::QuotaExceeded)
    } else {
        Ok(())
    }
}

/// What the feed quota says of appending sequence `next` (docs/API.md §6). Events expire in
/// sequence order, so the feed keeps at most `max_retained_events` exactly when event
/// `next - max` is past retention (or gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    Allows,
    Full,
    /// Allowed when the event with this sequence has expired or is gone: see [`quota_allows`].
    DecidedBy(u64),
}

pub fn quota(next: u64, limits: &Limits) -> Quota {
    let max = limits.max_retained_events;
    if max == 0 {
        Quota::Full
    } else if next <= max {
        Quota::Allows
    } else {
        Quota::DecidedBy(next - max)
    }
}

/// [`Quota::DecidedBy`]: the deciding event's expiry (`None`: it is gone).
pub fn quota_allows(deciding_expires_at: Option<Millis>, now: Millis) -> bool {
    deciding_expires_at.is_none_or(|expires_at| expires_at <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(keys: u64, bytes: u64) -> StateTotals {
        StateTotals { keys, bytes }
    }

    #[test]
    fn state_accounting_and_limits() {
        let limits = Limits {
            max_state_keys: 2,
            max_state_bytes: 100,
            ..Limits::default()
        };
        assert_eq!(
            state_after_put(totals(0, 0), None, 60, &limits),
            Ok(totals(1, 60))
        );
        assert_eq!(
            state_after_put(totals(1, 60), Some(60), 100, &limits),
            Ok(totals(1, 100)),
            "replacing a key counts its new size only"
        );
        assert_eq!(
            state_after_put(totals(1, 60), None, 41, &limits),
            Err(StoreError::StateLimitExceeded)
        );
        assert_eq!(
            state_after_put(totals(2, 10), None, 1, &limits),
            Err(StoreError::StateLimitExceeded)
        );
        assert_eq!(
            state_after_put(totals(0, 5), Some(9), 3, &limits),
            Ok(totals(0, 3))
        );
        assert_eq!(state_after_delete(totals(2, 70), 60), totals(1, 10));
        assert_eq!(state_after_delete(totals(0, 5), 60), totals(0, 0));
    }

    #[test]
    fn state_events() {
        let e = state_updated_event("k\"", 7, "{\"a\":1}");
        assert_eq!(e.event_type, "state.updated");
        assert_eq!(e.source.as_deref(), Some("state"));
        assert_eq!(e.ingress, Ingress::State);
        assert_eq!(e.data, r#"{"key":"k\"","revision":7,"value":{"a":1}}"#);
        let e = state_deleted_event("k", 8);
        assert_eq!(e.event_type, "state.deleted");
        assert_eq!(e.data, r#"{"key":"k","revision":8}"#);
    }

    #[test]
    fn repeated_deliveries() {
        let original = EventRef {
            id: "evt_1".into(),
            sequence: 1,
        };
        let claim = IdempotencyClaim {
            key_hash: "k".into(),
            body_hash: "b".into(),
        };
        assert_eq!(
            repeated_delivery(original.clone(), "b", &claim),
            Ok(Appended {
                event: original.clone(),
                duplicate: true
            })
        );
        assert_eq!(
            repeated_delivery(original, "other", &claim),
            Err(StoreError::IdempotencyKeyReused)
        );
    }

    #[test]
    fn quota_rule() {
        let limits = Limits {
            max_retained_events: 3,
            ..Limits::default()
        };
        assert_eq!(quota(3, &limits), Quota::Allows);
        assert_eq!(quota(4, &limits), Quota::DecidedBy(1));
        let none = Limits {
            max_retained_events: 0,
            ..Limits::default()
        };
        assert_eq!(quota(1, &none), Quota::Full);
        assert!(quota_allows(None, 10));
        assert!(quota_allows(Some(10), 10));
        assert!(!quota_allows(Some(11), 10));
    }
}
