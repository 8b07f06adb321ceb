//! Wire shapes of docs/API.md: what handlers serialize, and what `/openapi.json` describes.

use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::error::ApiError;
use crate::domain::email_policy::{EmailPolicy, EmailPolicyView};
use crate::domain::envelope;
use crate::domain::time::format_rfc3339;
use crate::domain::verification::{VerificationConfig, VerificationView};
use crate::domain::Limits;
use crate::store::{AddressRecord, Event, EventRef, StateEntry, Usage};

fn raw(text: &str) -> Result<Box<RawValue>, ApiError> {
    RawValue::from_string(text.to_owned())
        .map_err(|e| ApiError::Internal(format!("stored JSON does not parse: {e}")))
}

/// An event's data as every consumer can read it. Data nesting deeper than the envelope rule
/// keeps as JSON (a `state.updated` event adds one level to its value) can only come from an
/// older version of the server; it is shown as text under the envelope rule, so that no stored
/// event can make a page unreadable (docs/API.md, "Inbox").
fn readable_data(text: &str) -> Result<Box<RawValue>, ApiError> {
    if envelope::nesting_exceeds(text.as_bytes(), envelope::MAX_JSON_DEPTH + 1) {
        let kept = serde_json::json!({"content_type": "application/json", "text": text});
        return raw(&kept.to_string());
    }
    raw(text)
}

/// An address as shown to its owner.
#[derive(Debug, Serialize, ToSchema)]
pub struct AddressView {
    #[schema(example = "addr_3mJr0VZk2Tq4bQw1xY7aLg")]
    pub id: String,
    pub name: Option<String>,
    pub task_id: Option<String>,
    pub email: String,
    /// RFC 3339 UTC with milliseconds.
    pub created_at: String,
    /// `null` when the address never expires.
    pub expires_at: Option<String>,
    /// Present when the address holds a signing secret (docs/API.md §15); never the secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationView>,
    /// Present when the address has sender rules for its inbound email (docs/API.md §10,
    /// "Sender rules").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_policy: Option<EmailPolicyView>,
}

impl From<&AddressRecord> for AddressView {
    fn from(a: &AddressRecord) -> Self {
        Self {
            id: a.id.clone(),
            name: a.name.clone(),
            task_id: a.task_id.clone(),
            email: a.email.clone(),
            created_at: format_rfc3339(a.created_at),
            expires_at: a.expires_at.map(format_rfc3339),
            verification: a.verification.as_ref().map(VerificationConfig::view),
            email_policy: a.email_policy.as_ref().map(EmailPolicy::view),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Credentials {
    /// Shown once, in the creation response only. Send as `Authorization: Bearer <read_token>`.
    pub read_token: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Endpoints {
    /// The write capability: anyone holding it can deliver events. Hand it to webhook senders.
    pub inbox_url: String,
    pub events_url: String,
    pub state_url: String,
    /// The wake-up socket (docs/API.md §17), where the deployment offers one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ws_url: Option<String>,
}

/// The endpoints of `GET {root}`: those of the creation response but the inbox URL (its secret
/// is only shown once).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadEndpoints {
    pub events_url: String,
    pub state_url: String,
    /// The wake-up socket (docs/API.md §17), where the deployment offers one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ws_url: Option<String>,
}

/// `201` of `POST /api/v1/addresses`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedAddress {
    pub address: AddressView,
    pub credentials: Credentials,
    pub endpoints: Endpoints,
    /// The wake hooks made with it (docs/API.md §19), each with its signing secret (shown
    /// only here); absent when the body named none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookCreated>,
}

/// A wake hook (docs/API.md §19), never with its secret or its headers' values.
#[derive(Debug, Serialize, ToSchema)]
pub struct HookView {
    /// `hk_…`.
    pub id: String,
    pub url: String,
    pub types: Vec<String>,
    /// `standard`, `github-dispatch` or `slack`.
    pub format: String,
    /// The names of the headers it sends (their values are never shown).
    pub header_names: Vec<String>,
    pub debounce_seconds: u64,
    /// `active`, `paused` or `disabled` (after three failed ranges in a row).
    pub status: String,
    /// Every matching event up to this sequence was covered by a wake the receiver took (or
    /// reported by `hook.failed`).
    pub delivered_through: u64,
    /// RFC 3339.
    pub created_at: String,
    /// When the last wake was sent (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_wake_at: Option<String>,
    /// The last failure, while the hook has one (a retry pending, or its last range failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl HookView {
    pub fn of(h: &crate::store::HookRecord) -> Self {
        Self {
            id: h.id.clone(),
            url: h.url.clone(),
            types: h.types.clone(),
            format: h.format.as_str().into(),
            header_names: h.headers.iter().map(|(n, _)| n.clone()).collect(),
            debounce_seconds: h.debounce_seconds,
            status: h.status.as_str().into(),
            delivered_through: h.delivery.delivered_through,
            created_at: crate::domain::time::format_rfc3339(h.created_at),
            last_wake_at: h
                .delivery
                .last_wake_at
                .map(crate::domain::time::format_rfc3339),
            last_error: h.delivery.last_error.clone(),
        }
    }
}

/// `201` of `POST {root}/hooks`, and an entry of the create answer's `hooks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HookCreated {
    pub hook: HookView,
    /// `whsec_…`: verifies the wakes' `webhook-signature` (Standard Webhooks). Shown only
    /// here.
    pub signing_secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageView {
    pub last_sequence: u64,
    pub retained_events: u64,
    pub state_keys: u64,
    pub state_bytes: u64,
}

impl From<Usage> for UsageView {
    fn from(u: Usage) -> Self {
        Self {
            last_sequence: u.last_sequence,
            retained_events: u.retained_events,
            state_keys: u.state_keys,
            state_bytes: u.state_bytes,
        }
    }
}

/// The address's inbound email figures in `GET {root}` (docs/API.md §10, "Sender rules").
#[derive(Debug, Serialize, ToSchema)]
pub struct EmailStatsView {
    /// How many messages its sender rules (`address.email_policy`) refused: never appended.
    pub refused_count: u64,
}

/// `200` of `GET {root}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AddressDetails {
    pub address: AddressView,
    pub usage: UsageView,
    pub limits: Limits,
    pub endpoints: ReadEndpoints,
    pub email: EmailStatsView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventRefView {
    pub id: String,
    pub sequence: u64,
}

impl From<EventRef> for EventRefView {
    fn from(e: EventRef) -> Self {
        Self {
            id: e.id,
            sequence: e.sequence,
        }
    }
}

/// `200` of `PUT {root}/email/policy` (docs/API.md §10, "Sender rules").
#[derive(Debug, Serialize, ToSchema)]
pub struct EmailPolicyResult {
    pub email_policy: EmailPolicyView,
}

/// `200` of `PUT {root}/verification` (docs/API.md §15): never the secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerificationResult {
    pub verification: VerificationView,
}

/// `202` (first delivery) or `200` (duplicate) of an inbox delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryResult {
    pub duplicate: bool,
    pub event: EventRefView,
}

/// An event of the feed. Its contents come from whoever holds the inbox URL: untrusted data.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    pub id: String,
    pub sequence: u64,
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub event_type: String,
    pub source: Option<String>,
    /// `http`, `state`, `email`, `request`, `outbound` or `timer`.
    pub ingress_surface: String,
    pub received_at: String,
    pub acknowledged_at: Option<String>,
    /// Any JSON value (see the envelope rule).
    #[schema(value_type = serde_json::Value)]
    pub data: Box<RawValue>,
    /// Present for `http` ingress only: `{"content_type", "headers"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub http: Option<Box<RawValue>>,
    /// Present on `http` events of an address holding a signing secret (docs/API.md §15):
    /// `{"scheme", "verified", "reason"?}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub verification: Option<Box<RawValue>>,
}

// The member of the stored `http` record (the store's `http` text) that holds the delivery's
// verification (written by `domain::delivery`): stored with the event in the record it belongs
// to, so both stores keep it without a column of their own, and shown beside `http` by
// `EventView`.
use envelope::VERIFICATION_MEMBER;

/// A stored `http` record split into what the event shows as `http` and as `verification`.
fn split_http(text: &str) -> Result<(Box<RawValue>, Option<Box<RawValue>>), ApiError> {
    // Only a verified address's events carry the member: the others are shown as stored.
    if !text.contains("\"verification\"") {
        return Ok((raw(text)?, None));
    }
    let mut record: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text)
        .map_err(|e| ApiError::Internal(format!("http record does not parse: {e}")))?;
    let verification = match record.remove(VERIFICATION_MEMBER) {
        Some(v) => Some(raw(&v.to_string())?),
        None => None,
    };
    Ok((
        raw(&serde_json::Value::Object(record).to_string())?,
        verification,
    ))
}

impl EventView {
    pub fn from_event(e: &Event) -> Result<Self, ApiError> {
        let (http, verification) = match &e.http {
            Some(h) => {
                let (http, verification) = split_http(h)?;
                (Some(http), verification)
            }
            None => (None, None),
        };
        Ok(Self {
            id: e.id.clone(),
            sequence: e.sequence,
            event_type: e.event_type.clone(),
            source: e.source.clone(),
            ingress_surface: e.ingress.as_str().into(),
            received_at: format_rfc3339(e.received_at),
            acknowledged_at: e.acknowledged_at.map(format_rfc3339),
            data: readable_data(&e.data)?,
            http,
            verification,
        })
    }
}

/// `200` of `GET {root}/events`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventPageView {
    pub events: Vec<EventView>,
    /// Pass as `after` to read on: the last sequence returned, or `after` when none was.
    pub next_cursor: u64,
    pub has_more: bool,
}

/// `200` of `GET {root}/events/{event_id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SingleEvent {
    pub event: EventView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AckedEventView {
    pub id: String,
    pub sequence: u64,
    pub acknowledged_at: String,
}

/// `200` of an ack.
#[derive(Debug, Serialize, ToSchema)]
pub struct AckResult {
    pub event: AckedEventView,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StateKeyView {
    pub key: String,
    pub revision: u64,
    pub size: u64,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StateLimitsView {
    pub max_keys: u64,
    pub max_bytes: u64,
}

/// `200` of `GET {state_url}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateList {
    pub keys: Vec<StateKeyView>,
    pub state_bytes: u64,
    pub state_keys: u64,
    pub limits: StateLimitsView,
}

/// `200` of `GET {state_url}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateValue {
    pub key: String,
    /// Any JSON value.
    #[schema(value_type = serde_json::Value)]
    pub value: Box<RawValue>,
    pub revision: u64,
    pub updated_at: String,
}

impl StateValue {
    pub fn from_entry(e: &StateEntry) -> Result<Self, ApiError> {
        Ok(Self {
            key: e.key.clone(),
            value: raw(&e.value)?,
            revision: e.revision,
            updated_at: format_rfc3339(e.updated_at),
        })
    }
}

/// `200` of `PUT {state_url}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateWriteResult {
    pub key: String,
    /// Any JSON value.
    #[schema(value_type = serde_json::Value)]
    pub value: Box<RawValue>,
    pub revision: u64,
    pub updated_at: String,
    pub event: EventRefView,
}

/// `200` of `DELETE {state_url}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateDeleteResult {
    pub key: String,
    pub deleted: bool,
    /// The sequence of the `state.deleted` event.
    pub revision: u64,
    pub event: EventRefView,
}

/// `200` of `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    /// `sqlite` or `dynamodb`.
    pub store: String,
    pub version: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// One of the codes of the catalogue (docs/API.md §9).
    #[schema(schema_with = super::error::code_schema)]
    pub code: String,
    pub message: String,
    /// With `revision_conflict`: the key's current revision, `null` when it does not exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<u64>,
    /// With `rate_limited`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
}

/// Every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

pub(crate) fn limits_view(l: &Limits) -> StateLimitsView {
    StateLimitsView {
        max_keys: l.max_state_keys,
        max_bytes: l.max_state_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_data_too_deep_for_readers_is_shown_as_text() {
        let deep = format!("{}{}", "[".repeat(125), "]".repeat(125));
        let shown: serde_json::Value =
            serde_json::from_str(readable_data(&deep).expect("readable").get()).expect("json");
        assert_eq!(shown["text"], deep.as_str());
        assert_eq!(shown["content_type"], "application/json");
        let limit = envelope::MAX_JSON_DEPTH + 1;
        let at_limit = format!("{}{}", "[".repeat(limit), "]".repeat(limit));
        assert_eq!(readable_data(&at_limit).expect("readable").get(), at_limit);
    }
}
