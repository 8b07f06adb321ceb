//! The inputs of docs/API.md — request bodies and query strings — one struct each. A struct is the single
//! description of what its request accepts:
//! - the handler parses into it ([`parse_fields`]: each field's deserializer is the rule, and
//!   its error is the 400 `invalid_request` message of docs/API.md);
//! - the OpenAPI document shows it (a body as a component schema, a query string as the
//!   operation's query parameters, [`query_parameters`]);
//! - the MCP tools' input schemas are generated from the same schema (`agentaddress-mcp`).
//!
//! Every limit is one named constant, read by the deserializer and the schema alike. Fields are
//! checked in the order they are declared, whatever their order in the request; unknown fields
//! are ignored, and `null` counts as absent for an optional body field (docs/API.md §1, §7).

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type};
use utoipa::openapi::{KnownFormat, RefOr, Required};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::ApiError;
use crate::domain::label::validate_label;
use crate::domain::mail_out::{check_subject, check_text, is_code_shaped, parse_contact_email};
use crate::domain::patterns::{TypePatterns, MAX_PATTERNS, MAX_PATTERN_CHARS};
use crate::domain::request::{
    CommentMode, BODY_MAX_CHARS, COMMENT_MAX_CHARS, OPTIONS_MAX, OPTION_MAX_CHARS,
    REQUEST_EXPIRES_MAX_SECONDS, REQUEST_EXPIRES_MIN_SECONDS, TITLE_MAX_CHARS,
};
use crate::domain::state::validate_value;
use crate::domain::verification::{
    Scheme, VerificationConfig, TOLERANCE_DEFAULT_SECONDS, TOLERANCE_MAX_SECONDS,
    TOLERANCE_MIN_SECONDS, VERIFY_TOKEN_MAX_BYTES,
};

mod email_policy;
pub use email_policy::EmailPolicyRequest;
use email_policy::{create_email_policy_schema, policy_field};
mod fields;
use fields::*;
mod hooks;
use hooks::{hook_list, hook_list_schema};
pub use hooks::{HookRequest, HookStatusBody};
mod timers;
pub use timers::TimerRequest;

/// `name` and `task_id`: 1 to 200 characters (docs/API.md §1).
pub const LABEL_MAX_CHARS: usize = 200;
/// `expires_in_seconds`: at least a minute (docs/API.md §1).
pub const EXPIRES_IN_MIN_SECONDS: u64 = 60;
/// `expires_in_seconds`: at most 365 days (docs/API.md §1).
pub const EXPIRES_IN_MAX_SECONDS: u64 = 31_536_000;
/// The feed's page size `limit`: at most, and by default, 100 events (docs/API.md §4).
pub const FEED_LIMIT_MAX: u64 = 100;
/// The largest cursor (`after`) and revision (`if_revision`, `If-Match`): 2^63−1
/// (docs/API.md §4, §7).
pub const COUNT_MAX: u64 = i64::MAX as u64;

/// Stands for the field's name in a field deserializer's message; [`parse_fields`] puts the
/// name in.
const FIELD: &str = "{field}";

/// A struct of request fields: its schema lists them (in the order they are checked) and says
/// which are required.
pub trait Fields: DeserializeOwned + PartialSchema {
    /// The message of a required field that is absent.
    fn missing(field: &str) -> String {
        format!("The request must have a `{field}` field.")
    }
}

/// Parses `fields` (a JSON object's members, or a query string's parameters as strings) into
/// `T`: the fields of `T` in their declared order, a required one missing first; unknown ones
/// are ignored. Every refusal is a 400 `invalid_request` whose message names the field.
pub fn parse_fields<T: Fields>(mut fields: Map<String, Value>) -> Result<T, ApiError> {
    // One schema per parse: the declared order of the fields, and which are required.
    let (names, required): (Vec<String>, Vec<String>) = match T::schema() {
        RefOr::T(Schema::Object(o)) => (o.properties.into_keys().collect(), o.required),
        _ => (Vec::new(), Vec::new()),
    };
    let mut ordered = Map::new();
    for name in names {
        match fields.remove(&name) {
            Some(v) => {
                ordered.insert(name, v);
            }
            None if required.contains(&name) => return Err(ApiError::invalid(T::missing(&name))),
            None => {}
        }
    }
    serde_path_to_error::deserialize(Value::Object(ordered)).map_err(|e| {
        let field = e.path().to_string();
        let message = e.into_inner().to_string();
        if message.contains(FIELD) {
            ApiError::invalid(message.replace(FIELD, &field))
        } else {
            ApiError::invalid(format!("`{field}`: {message}."))
        }
    })
}

/// The query parameters of a query-string struct, for `#[utoipa::path(params(...))]`: one per
/// property of its schema, in order, the property's description on the parameter.
pub fn query_parameters<T: PartialSchema>() -> Vec<Parameter> {
    let RefOr::T(Schema::Object(object)) = T::schema() else {
        return Vec::new();
    };
    object
        .properties
        .into_iter()
        .map(|(name, schema)| {
            let required = object.required.contains(&name);
            let (description, schema) = match schema {
                RefOr::T(Schema::Object(mut o)) => {
                    (o.description.take(), RefOr::T(Schema::Object(o)))
                }
                other => (None, other),
            };
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Query)
                .required(if required {
                    Required::True
                } else {
                    Required::False
                })
                .description(description)
                .schema(Some(schema))
                .build()
        })
        .collect()
}

/// The JSON Schema of a request struct, as `/openapi.json` shows it: what the MCP tool standing
/// for the request takes (with the MCP-only fields it adds).
pub fn json_schema<T: PartialSchema>() -> Value {
    serde_json::to_value(T::schema()).unwrap_or(Value::Null)
}

/// The names of a request struct's fields, in order.
pub fn field_names<T: PartialSchema>() -> Vec<String> {
    match T::schema() {
        RefOr::T(Schema::Object(o)) => o.properties.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------------

/// Body of `POST /api/v1/addresses` (optional; unknown fields are ignored).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CreateAddressRequest {
    #[serde(default, deserialize_with = "label")]
    #[schema(schema_with = name_schema)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "label")]
    #[schema(schema_with = task_id_schema)]
    pub task_id: Option<String>,
    #[serde(default, deserialize_with = "expires_in")]
    #[schema(schema_with = expires_in_schema)]
    pub expires_in_seconds: Option<u64>,
    /// A signing secret for verified webhooks (docs/API.md §15).
    #[serde(default, deserialize_with = "verification")]
    #[schema(schema_with = create_verification_schema)]
    pub verification: Option<VerificationConfig>,
    /// Sender rules for its inbound email (docs/API.md §10, "Sender rules").
    #[serde(default, deserialize_with = "policy_field")]
    #[schema(schema_with = create_email_policy_schema)]
    pub email_policy: Option<crate::domain::email_policy::EmailPolicy>,
    /// Wake hooks made with the address (docs/API.md §19).
    #[serde(default, deserialize_with = "hook_list")]
    #[schema(schema_with = hook_list_schema)]
    pub hooks: Option<Vec<crate::domain::hooks::HookSpec>>,
}

impl Fields for CreateAddressRequest {}

/// Body of `PUT {root}/verification` (docs/API.md §15), and the create body's `verification`:
/// `{"scheme", "secret", "reject_unverified"?, "tolerance_seconds"?}`. Parsed by
/// [`VerificationConfig::from_json`] (the one rule, in core); its `Debug` never shows the
/// secret.
#[derive(Debug)]
pub struct VerificationRequest(pub VerificationConfig);

impl VerificationRequest {
    /// Parses a `PUT {root}/verification` body (a JSON object).
    pub fn parse(body: &[u8]) -> Result<VerificationConfig, ApiError> {
        let object = super::extract::json_object(body)?;
        VerificationConfig::from_json(&Value::Object(object)).map_err(|e| ApiError::invalid(e.0))
    }
}

impl utoipa::PartialSchema for VerificationRequest {
    fn schema() -> RefOr<Schema> {
        RefOr::T(Schema::Object(verification_object(false)))
    }
}

impl ToSchema for VerificationRequest {}

/// Body of `PUT {state_url}/{key}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct PutStateRequest {
    #[serde(deserialize_with = "state_value")]
    #[schema(schema_with = state_value_schema)]
    pub value: Value,
    #[serde(default, deserialize_with = "revision")]
    #[schema(schema_with = put_if_revision_schema)]
    pub if_revision: Option<u64>,
}

impl Fields for PutStateRequest {
    fn missing(field: &str) -> String {
        format!("The body must have a `{field}` field (any JSON).")
    }
}

/// Body of `POST {root}/email/replay` (docs/API.md §11).
#[derive(Debug, Deserialize, ToSchema)]
pub struct ReplayEmailRequest {
    #[serde(deserialize_with = "email_id")]
    #[schema(schema_with = email_id_schema)]
    pub email_id: String,
}

impl Fields for ReplayEmailRequest {}

/// Body of `POST {root}/requests` (docs/API.md §12).
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateRequestBody {
    #[serde(deserialize_with = "request_title")]
    #[schema(schema_with = request_title_schema)]
    pub title: String,
    #[serde(default, deserialize_with = "request_body")]
    #[schema(schema_with = request_body_schema)]
    pub body: Option<String>,
    #[serde(default, deserialize_with = "request_options")]
    #[schema(schema_with = request_options_schema)]
    pub options: Option<Vec<String>>,
    #[serde(default, deserialize_with = "comment_mode")]
    #[schema(schema_with = comment_mode_schema)]
    pub comment: Option<CommentMode>,
    #[serde(default, deserialize_with = "request_expires_in")]
    #[schema(schema_with = request_expires_in_schema)]
    pub expires_in_seconds: Option<u64>,
}

impl Fields for CreateRequestBody {}

/// Body of `POST /r/{request_id}/{secret}` sent as JSON (docs/API.md §12); the page's form
/// sends the same two fields form-encoded.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AnswerRequestBody {
    #[serde(deserialize_with = "choice")]
    #[schema(schema_with = choice_schema)]
    pub choice: String,
    #[serde(default, deserialize_with = "answer_comment")]
    #[schema(schema_with = answer_comment_schema)]
    pub comment: Option<String>,
}

impl Fields for AnswerRequestBody {}

// ---------------------------------------------------------------------------------------------
// Query strings
// ---------------------------------------------------------------------------------------------

/// The query of `GET {root}/events` (docs/API.md §4), as sent; `extract::parse_feed_query`
/// applies the defaults and the server's longest wait.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct FeedParams {
    #[serde(default, deserialize_with = "after")]
    #[schema(schema_with = after_schema)]
    pub after: Option<u64>,
    #[serde(default, deserialize_with = "limit")]
    #[schema(schema_with = limit_schema)]
    pub limit: Option<u64>,
    #[serde(default, deserialize_with = "wait")]
    #[schema(schema_with = wait_schema)]
    pub wait: Option<f64>,
    #[serde(default, deserialize_with = "type_patterns")]
    #[schema(schema_with = type_patterns_schema)]
    pub types: Option<TypePatterns>,
}

impl Fields for FeedParams {}

impl IntoParams for FeedParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        query_parameters::<Self>()
    }
}

/// The query of `GET {root}/requests/{request_id}` (docs/API.md §21): how long to wait for
/// the person's answer (or the request's expiry).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct RequestWaitParams {
    #[serde(default, deserialize_with = "wait")]
    #[schema(schema_with = request_wait_schema)]
    pub wait: Option<f64>,
}

impl Fields for RequestWaitParams {}

impl IntoParams for RequestWaitParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        query_parameters::<Self>()
    }
}

/// The query of `GET {root}/events/stream` (docs/API.md §14): where the stream starts, as
/// the feed's `after`; a `Last-Event-ID` header overrides it.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct StreamParams {
    #[serde(default, deserialize_with = "after")]
    #[schema(schema_with = stream_after_schema)]
    pub after: Option<u64>,
    #[serde(default, deserialize_with = "type_patterns")]
    #[schema(schema_with = type_patterns_schema)]
    pub types: Option<TypePatterns>,
}

impl Fields for StreamParams {}

impl IntoParams for StreamParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        query_parameters::<Self>()
    }
}

/// The query of `DELETE {state_url}/{key}` (docs/API.md §7).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct DeleteStateParams {
    #[serde(default, deserialize_with = "query_revision")]
    #[schema(schema_with = delete_if_revision_schema)]
    pub if_revision: Option<u64>,
}

impl Fields for DeleteStateParams {}

impl IntoParams for DeleteStateParams {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        query_parameters::<Self>()
    }
}

/// Body of `POST {root}/email/contacts`: the email alone mails a code to it; with the code it
/// confirms the contact.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ContactBody {
    /// A plain email address (`ada@example.com`); contacts are lower-cased.
    #[serde(deserialize_with = "contact_email")]
    pub email: String,
    /// The six digits mailed to the contact.
    #[serde(default, deserialize_with = "code")]
    pub code: Option<String>,
}

impl Fields for ContactBody {}

/// Body of `POST {root}/email/send`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SendBody {
    /// A confirmed contact.
    #[serde(deserialize_with = "contact_email")]
    pub to: String,
    /// 1 to 200 characters, one line, no `=?`.
    #[serde(deserialize_with = "subject")]
    pub subject: String,
    /// Plain text, at most 10,000 bytes.
    #[serde(deserialize_with = "text")]
    pub text: String,
    /// An `email.received` event of this address: the mail is a reply to it (`In-Reply-To`,
    /// `References`, `Re: `).
    #[serde(default)]
    pub reply_to_event_id: Option<String>,
}

impl Fields for SendBody {}

#[cfg(test)]
mod tests;
