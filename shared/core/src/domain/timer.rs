//! Timers (docs/API.md §20): a timer as the API accepts it (when it fires, the type and data of
//! its event), its id, and the event it appends when it fires. Pure code: the stores keep the
//! timers and fire them atomically with their event.

use serde_json::{json, Value};

use super::envelope::MAX_JSON_DEPTH;
use super::ids::random_b64;
use super::state::json_depth;
use super::{Invalid, Millis};

/// The prefix of timer ids.
pub const TIMER_ID_PREFIX: &str = "tmr_";
/// Most pending timers an address may have.
pub const MAX_PENDING_TIMERS: usize = 100;
/// Furthest a timer may be set ahead, in seconds (a year).
pub const MAX_TIMER_SECONDS: u64 = 31_536_000;
/// Largest `data` of a timer, in bytes of its compact JSON.
pub const MAX_TIMER_DATA_BYTES: usize = 16 * 1024;
/// The event type of a timer that names none.
pub const DEFAULT_TIMER_TYPE: &str = "timer.fired";
/// Every timer's event type starts with this.
pub const TIMER_TYPE_PREFIX: &str = "timer.";
/// Longest event type, in characters (as a delivery's, docs/API.md §3).
pub const MAX_TIMER_TYPE_CHARS: usize = 128;
/// Fired or cancelled timers listed besides the pending ones.
pub const KEPT_CLOSED_TIMERS: usize = 100;
/// The `source` of a timer's event.
pub const TIMER_SOURCE: &str = "timer";

/// A new timer id: `tmr_` and 96 random bits.
pub fn new_timer_id() -> String {
    format!("{TIMER_ID_PREFIX}{}", random_b64(12))
}

/// Whether `id` has the shape of a timer id.
pub fn is_timer_id(id: &str) -> bool {
    id.strip_prefix(TIMER_ID_PREFIX)
        .is_some_and(|rest| !rest.is_empty() && super::ids::is_valid_id(id))
}

/// A timer as asked for: when it fires, and its event's type and data.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerSpec {
    pub fire_at: Millis,
    pub event_type: String,
    /// The compact JSON of `data`, when given.
    pub data: Option<String>,
}

impl TimerSpec {
    /// Reads the body of `POST {root}/timers` at `now` for an address that expires at
    /// `expires_at` (if it does): exactly one of `fire_at` (RFC 3339, after `now`, at most a
    /// year ahead, before the address expires) and `in_seconds` (an integer 1..=31536000, with
    /// the same bounds); `type` starting with `timer.`; `data` any JSON of at most 16 KiB and
    /// [`MAX_JSON_DEPTH`] levels. Every refusal names its rule.
    pub fn from_json(
        body: &Value, now: Millis, expires_at: Option<Millis>,
    ) -> Result<Self, Invalid> {
        let Some(fields) = body.as_object() else {
            return Err(Invalid::new("The body must be a JSON object."));
        };
        let fire_at = match (fields.get("fire_at"), fields.get("in_seconds")) {
            (Some(_), Some(_)) => {
                return Err(Invalid::new("Give `fire_at` or `in_seconds`, not both."))
            }
            (None, None) => {
                return Err(Invalid::new(
                    "Give `fire_at` (an RFC 3339 time) or `in_seconds` (1 to 31536000).",
                ))
            }
            (Some(at), None) => parse_fire_at(at)?,
            (None, Some(secs)) => {
                let secs = in_seconds(secs)?;
                now.saturating_add(i64::try_from(secs * 1000).unwrap_or(i64::MAX))
            }
        };
        if fire_at <= now {
            return Err(Invalid::new("`fire_at` is not in the future."));
        }
        let latest = now.saturating_add(i64::try_from(MAX_TIMER_SECONDS * 1000).unwrap_or(0));
        if fire_at > latest {
            return Err(Invalid::new("`fire_at` is more than a year ahead."));
        }
        if expires_at.is_some_and(|e| fire_at >= e) {
            return Err(Invalid::new(
                "`fire_at` is not before the address expires: the timer could never fire.",
            ));
        }
        let event_type = match fields.get("type") {
            None | Some(Value::Null) => DEFAULT_TIMER_TYPE.to_owned(),
            Some(Value::String(t)) => {
                type_rule(t)?;
                t.clone()
            }
            Some(_) => {
                return Err(Invalid::new(
                    "`type` must be a string starting with `timer.`.",
                ))
            }
        };
        let data = match fields.get("data") {
            None => None,
            Some(v) => {
                if json_depth(v) > MAX_JSON_DEPTH {
                    return Err(Invalid::new(format!(
                        "`data` nests deeper than {MAX_JSON_DEPTH} levels."
                    )));
                }
                let text = v.to_string();
                if text.len() > MAX_TIMER_DATA_BYTES {
                    return Err(Invalid::new(format!(
                        "`data` is {} bytes of JSON; at most {MAX_TIMER_DATA_BYTES} are allowed.",
                        text.len()
                    )));
                }
                Some(text)
            }
        };
        Ok(Self {
            fire_at,
            event_type,
            data,
        })
    }
}

/// `fire_at`: an RFC 3339 time with its offset.
fn parse_fire_at(v: &Value) -> Result<Millis, Invalid> {
    let refused = || Invalid::new("`fire_at` must be an RFC 3339 time, like 2027-01-15T08:00:00Z.");
    let text = v.as_str().ok_or_else(refused)?;
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|_| refused())
}

/// `in_seconds`: an integer 1..=[`MAX_TIMER_SECONDS`] (a JSON number with an integral value).
fn in_seconds(v: &Value) -> Result<u64, Invalid> {
    let refused = || {
        Invalid::new(format!(
            "`in_seconds` must be an integer from 1 to {MAX_TIMER_SECONDS}."
        ))
    };
    let n = match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= MAX_TIMER_SECONDS as f64)
                .map(|f| f as u64)
        }),
        _ => None,
    }
    .ok_or_else(refused)?;
    if (1..=MAX_TIMER_SECONDS).contains(&n) {
        Ok(n)
    } else {
        Err(refused())
    }
}

/// A timer's event type: `timer.` and more, at most [`MAX_TIMER_TYPE_CHARS`] characters, no
/// control characters.
pub fn type_rule(t: &str) -> Result<(), Invalid> {
    if !t.starts_with(TIMER_TYPE_PREFIX) || t.len() == TIMER_TYPE_PREFIX.len() {
        return Err(Invalid::new(format!(
            "`type` must start with `{TIMER_TYPE_PREFIX}` and name something after it."
        )));
    }
    if t.chars().count() > MAX_TIMER_TYPE_CHARS || t.chars().any(char::is_control) {
        return Err(Invalid::new(format!(
            "`type` is at most {MAX_TIMER_TYPE_CHARS} characters, none of them control characters."
        )));
    }
    Ok(())
}

/// The `data` of a fired timer's event: `{"timer_id", "data"}` (`null` without data).
pub fn fired_data(timer_id: &str, data: Option<&str>) -> String {
    let data = data
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .unwrap_or(Value::Null);
    json!({"timer_id": timer_id, "data": data}).to_string()
}

#[cfg(test)]
mod tests;
