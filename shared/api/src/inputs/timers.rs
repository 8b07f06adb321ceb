//! The input of timers (docs/API.md §20): the body of `POST {root}/timers`, read by the one rule
//! in core ([`TimerSpec::from_json`]) once the handler knows the time and the address's expiry.

use super::fields::{integer, typed};
use super::*;
use crate::domain::timer::{
    TimerSpec, DEFAULT_TIMER_TYPE, MAX_TIMER_DATA_BYTES, MAX_TIMER_SECONDS, MAX_TIMER_TYPE_CHARS,
};
use crate::domain::Millis;

/// Body of `POST {root}/timers`: `{"fire_at" | "in_seconds", "type"?, "data"?}`, as a JSON
/// object; [`TimerRequest::spec`] applies the rules.
#[derive(Debug)]
pub struct TimerRequest(pub Value);

impl TimerRequest {
    /// Parses a `POST {root}/timers` body (a JSON object).
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        crate::extract::json_object(body).map(|o| Self(Value::Object(o)))
    }

    /// The timer asked for at `now`, for an address expiring at `expires_at` (if it does);
    /// every refusal is a 400 naming its rule.
    pub fn spec(&self, now: Millis, expires_at: Option<Millis>) -> Result<TimerSpec, ApiError> {
        TimerSpec::from_json(&self.0, now, expires_at).map_err(|e| ApiError::invalid(e.0))
    }
}

impl utoipa::PartialSchema for TimerRequest {
    fn schema() -> RefOr<Schema> {
        let string = |description: &str| {
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .description(Some(description))
        };
        RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::Object))
                .description(Some(
                    "Exactly one of `fire_at` and `in_seconds`; the time must be in the future, \
                     at most a year ahead, and before the address expires.",
                ))
                .property(
                    "fire_at",
                    string("When it fires: an RFC 3339 time with its offset.")
                        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
                )
                .property(
                    "in_seconds",
                    integer(
                        false,
                        1,
                        MAX_TIMER_SECONDS,
                        "When it fires: this many seconds from now.",
                    ),
                )
                .property(
                    "type",
                    ObjectBuilder::new()
                        .schema_type(typed(Type::String, true))
                        .max_length(Some(MAX_TIMER_TYPE_CHARS))
                        .pattern(Some("^timer\\..+"))
                        .description(Some(format!(
                            "The type of the event it appends (default `{DEFAULT_TIMER_TYPE}`); \
                             starts with `timer.`."
                        ))),
                )
                .property(
                    "data",
                    ObjectBuilder::new()
                        .schema_type(SchemaType::AnyValue)
                        .description(Some(format!(
                            "Any JSON, at most {MAX_TIMER_DATA_BYTES} bytes: the event's \
                         `data.data`."
                        ))),
                )
                .build(),
        ))
    }
}

impl ToSchema for TimerRequest {}
