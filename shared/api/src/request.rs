//! The request bodies and query strings of docs/API.md, one struct each. A struct is the single
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
use crate::domain::request::{
    CommentMode, BODY_MAX_CHARS, COMMENT_MAX_CHARS, OPTIONS_MAX, OPTION_MAX_CHARS,
    REQUEST_EXPIRES_MAX_SECONDS, REQUEST_EXPIRES_MIN_SECONDS, TITLE_MAX_CHARS,
};
use crate::domain::state::validate_value;
use crate::domain::verification::{
    VerificationConfig, TOLERANCE_DEFAULT_SECONDS, TOLERANCE_MAX_SECONDS, TOLERANCE_MIN_SECONDS,
};

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
}

impl Fields for FeedParams {}

impl IntoParams for FeedParams {
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

// ---------------------------------------------------------------------------------------------
// Field rules: a deserializer (the rule) and a schema (what the document says of it) each,
// both from the constants above.
// ---------------------------------------------------------------------------------------------

fn invalid<E: serde::de::Error>(message: impl std::fmt::Display) -> E {
    E::custom(message)
}

/// A label: a string of 1..=[`LABEL_MAX_CHARS`] characters without control or bidirectional
/// formatting characters (docs/API.md, "Create.").
fn label<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => {
            let n = s.chars().count();
            if n == 0 || n > LABEL_MAX_CHARS {
                return Err(invalid(format!(
                    "`{FIELD}` must be 1 to {LABEL_MAX_CHARS} characters long."
                )));
            }
            validate_label(FIELD, &s).map_err(|e| invalid(format!("{e}.")))?;
            Ok(Some(s))
        }
        _ => Err(invalid(format!("`{FIELD}` must be a string."))),
    }
}

/// An optional integer field of a JSON body within `min..=max` (docs/API.md, "Create.": any
/// JSON number with an integral value).
fn body_integer<'de, D: Deserializer<'de>>(
    d: D,
    min: u64,
    max: u64,
) -> Result<Option<u64>, D::Error> {
    // The rule is `extract::optional_integer`'s, applied to this one field.
    let mut one = Map::new();
    one.insert(FIELD.into(), Value::deserialize(d)?);
    super::extract::optional_integer(&one, FIELD, min..=max).map_err(invalid)
}

fn expires_in<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    body_integer(d, EXPIRES_IN_MIN_SECONDS, EXPIRES_IN_MAX_SECONDS)
}

/// The create body's `verification` (docs/API.md §15): `null` is absent; any refusal names
/// the rule, never the secret.
fn verification<'de, D: Deserializer<'de>>(d: D) -> Result<Option<VerificationConfig>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => VerificationConfig::from_json(&v)
            .map(Some)
            .map_err(|e| invalid(format!("`{FIELD}`: {e}"))),
    }
}

fn revision<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    body_integer(d, 0, COUNT_MAX)
}

/// A state value: any JSON, `null` included, nesting at most `MAX_JSON_DEPTH` levels so that
/// its `state.updated` event reads back everywhere (docs/API.md, "State.").
fn state_value<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    let value = Value::deserialize(d)?;
    validate_value(&value).map_err(|e| invalid(format!("{e}.")))?;
    Ok(value)
}

/// A query parameter's text (a query string has nothing else).
fn query_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

fn count_or<'de, D: Deserializer<'de>>(d: D, message: &str) -> Result<Option<u64>, D::Error> {
    let text = query_text(d)?;
    super::extract::parse_count(&text)
        .map(Some)
        .ok_or_else(|| invalid(message))
}

fn after<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    count_or(d, "`{field}` must be a non-negative integer.")
}

fn query_revision<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    count_or(d, "`{field}` must be a non-negative integer.")
}

fn limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = query_text(d)?;
    match super::extract::parse_count(&text) {
        Some(n) if (1..=FEED_LIMIT_MAX).contains(&n) => Ok(Some(n)),
        _ => Err(invalid(format!(
            "`{FIELD}` must be an integer from 1 to {FEED_LIMIT_MAX}."
        ))),
    }
}

fn wait<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let text = query_text(d)?;
    super::extract::parse_seconds(&text)
        .map(Some)
        .ok_or_else(|| {
            invalid("`{field}` must be a non-negative number of seconds (at most 25 are used).")
        })
}

/// An `email_id`: an id (`^[A-Za-z0-9_-]{1,64}$`, docs/API.md §10).
fn email_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) if crate::domain::ids::is_valid_id(&s) => Ok(s),
        _ => Err(invalid(
            "`{field}` must be an email id: 1 to 64 letters, digits, _ and -.",
        )),
    }
}

fn email_id_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .pattern(Some("^[A-Za-z0-9_-]{1,64}$"))
        .description(Some(
            "The `email_id` of a stored message (`data.email_id` of its `email.received` event).",
        ))
        .build()
}

/// A string of 1..=`max` characters without control or bidirectional formatting characters.
fn bounded_text<'de, D: Deserializer<'de>>(d: D, max: usize) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => {
            let n = s.chars().count();
            if n == 0 || n > max {
                return Err(invalid(format!(
                    "`{FIELD}` must be 1 to {max} characters long."
                )));
            }
            validate_label(FIELD, &s).map_err(|e| invalid(format!("{e}.")))?;
            Ok(s)
        }
        _ => Err(invalid(format!("`{FIELD}` must be a string."))),
    }
}

fn request_title<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    bounded_text(d, TITLE_MAX_CHARS)
}

/// Free text of up to `max` characters (a request's Markdown body, a person's comment): line
/// breaks and tabs are allowed, other control characters are not; `null` is absent.
fn multiline_text<'de, D: Deserializer<'de>>(d: D, max: usize) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => {
            if s.chars().count() > max {
                return Err(invalid(format!(
                    "`{FIELD}` must be at most {max} characters long."
                )));
            }
            if s.chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
            {
                return Err(invalid(
                    "`{field}` must not contain control characters other than line breaks and tabs.",
                ));
            }
            Ok(Some(s))
        }
        _ => Err(invalid(format!("`{FIELD}` must be a string."))),
    }
}

/// Markdown of up to [`BODY_MAX_CHARS`] characters.
fn request_body<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    multiline_text(d, BODY_MAX_CHARS)
}

fn request_options<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let message = || {
        invalid(format!(
            "`{FIELD}` must be an array of 1 to {OPTIONS_MAX} distinct labels of 1 to \
             {OPTION_MAX_CHARS} characters."
        ))
    };
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Array(items) => {
            if items.is_empty() || items.len() > OPTIONS_MAX {
                return Err(message());
            }
            let mut options: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let Value::String(s) = item else {
                    return Err(message());
                };
                let n = s.chars().count();
                if n == 0
                    || n > OPTION_MAX_CHARS
                    || s.trim().is_empty()
                    || validate_label(FIELD, &s).is_err()
                    || options.contains(&s)
                {
                    return Err(message());
                }
                options.push(s);
            }
            Ok(Some(options))
        }
        _ => Err(message()),
    }
}

fn comment_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CommentMode>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) => CommentMode::parse(&s)
            .map(Some)
            .ok_or_else(|| invalid("`{field}` must be \"none\", \"optional\" or \"required\".")),
        _ => Err(invalid(
            "`{field}` must be \"none\", \"optional\" or \"required\".",
        )),
    }
}

fn request_expires_in<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    body_integer(d, REQUEST_EXPIRES_MIN_SECONDS, REQUEST_EXPIRES_MAX_SECONDS)
}

fn choice<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    bounded_text(d, OPTION_MAX_CHARS)
}

/// A comment of up to [`COMMENT_MAX_CHARS`] characters; only blanks is none.
fn answer_comment<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(multiline_text(d, COMMENT_MAX_CHARS)?.filter(|s| !s.trim().is_empty()))
}

fn text_schema(nullable: bool, min: usize, max: usize, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, nullable))
        .min_length(Some(min))
        .max_length(Some(max))
        .description(Some(description))
        .build()
}

fn request_title_schema() -> Object {
    text_schema(
        false,
        1,
        TITLE_MAX_CHARS,
        "The question, as the person sees it.",
    )
}

fn request_body_schema() -> Object {
    text_schema(
        true,
        0,
        BODY_MAX_CHARS,
        "Details in Markdown (rendered sanitised: no raw HTML, no scripts, no images).",
    )
}

fn request_options_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Array, true))
        .description(Some(
            "The buttons the person chooses from, 1 to 5 distinct labels of 1 to 40 characters \
             (default [\"Approve\", \"Reject\"]).",
        ))
        .build()
}

fn comment_mode_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .enum_values(Some(["none", "optional", "required"]))
        .description(Some(
            "Whether the person may add a comment (default \"optional\").",
        ))
        .build()
}

fn request_expires_in_schema() -> Object {
    integer(
        true,
        REQUEST_EXPIRES_MIN_SECONDS,
        REQUEST_EXPIRES_MAX_SECONDS,
        "Seconds until the request expires unanswered (default 604800, 7 days).",
    )
}

fn choice_schema() -> Object {
    text_schema(false, 1, OPTION_MAX_CHARS, "One of the request's options.")
}

fn answer_comment_schema() -> Object {
    text_schema(true, 0, COMMENT_MAX_CHARS, "The person's comment.")
}

fn typed(t: Type, nullable: bool) -> SchemaType {
    if nullable {
        SchemaType::Array(vec![t, Type::Null])
    } else {
        SchemaType::Type(t)
    }
}

fn integer(nullable: bool, min: u64, max: u64, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Integer, nullable))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(min))
        .maximum(Some(max))
        .description(Some(description))
        .build()
}

fn label_schema(description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .min_length(Some(1))
        .max_length(Some(LABEL_MAX_CHARS))
        .description(Some(description))
        .build()
}

/// The verification object's schema; `nullable` for the create body's optional field.
fn verification_object(nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Object, nullable))
        .property(
            "scheme",
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .enum_values(Some(["standard-webhooks", "stripe", "github"]))
                .description(Some("The provider's signing convention.")),
        )
        .required("scheme")
        .property(
            "secret",
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .min_length(Some(1))
                .max_length(Some(1024))
                .description(Some(
                    "The signing secret: standard-webhooks `whsec_` + base64 of 24-64 bytes; \
                     stripe `whsec_` + 8-250 letters, digits or `_`; github any 1-1024 bytes \
                     without control characters. Never returned.",
                )),
        )
        .required("secret")
        .property(
            "reject_unverified",
            ObjectBuilder::new()
                .schema_type(typed(Type::Boolean, true))
                .description(Some(
                    "Refuse an unverified delivery with 401 `signature_invalid` (default false: \
                     record it, marked unverified).",
                )),
        )
        .property(
            "tolerance_seconds",
            integer(
                true,
                TOLERANCE_MIN_SECONDS,
                TOLERANCE_MAX_SECONDS,
                &format!(
                    "How far a signed timestamp may be from the server's clock; default \
                     {TOLERANCE_DEFAULT_SECONDS} (github signs no timestamp)."
                ),
            ),
        )
        .description(Some(
            "A signing secret to verify the inbox's webhook deliveries with (docs/API.md §15).",
        ))
        .build()
}

fn create_verification_schema() -> Object {
    verification_object(true)
}

fn name_schema() -> Object {
    label_schema("A label for people reading the address.")
}

fn task_id_schema() -> Object {
    label_schema("Your own id for the task this address serves.")
}

fn expires_in_schema() -> Object {
    integer(
        true,
        EXPIRES_IN_MIN_SECONDS,
        EXPIRES_IN_MAX_SECONDS,
        "Lifetime in seconds. Omit for an address that never expires.",
    )
}

fn state_value_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some(
            "Any JSON value (object, array, string, number, boolean or `null`).",
        ))
        .build()
}

fn put_if_revision_schema() -> Object {
    integer(
        true,
        0,
        COUNT_MAX,
        "Compare-and-set: 0 = create only (the key must not exist); N > 0 = only if the key's \
         current revision is N; absent = unconditional. A mismatch is `revision_conflict`, with \
         `current_revision` (`null` when the key does not exist).",
    )
}

fn after_schema() -> Object {
    integer(
        false,
        0,
        COUNT_MAX,
        "Return events with sequence > after (default 0): the previous page's `next_cursor`.",
    )
}

fn stream_after_schema() -> Object {
    integer(
        false,
        0,
        COUNT_MAX,
        "Stream the events with sequence > after (default 0); a `Last-Event-ID` header overrides it.",
    )
}

fn limit_schema() -> Object {
    integer(
        false,
        1,
        FEED_LIMIT_MAX,
        "Most events to return, 1 to 100 (default 100).",
    )
}

fn wait_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Number, false))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
        .minimum(Some(0))
        .description(Some(
            "Seconds to hold the request while no event is there yet (default 0); at most 25 \
             are used, larger values are clamped.",
        ))
        .build()
}

fn delete_if_revision_schema() -> Object {
    integer(
        false,
        0,
        COUNT_MAX,
        "Delete only if the key's current revision is this one (same as If-Match); absent = \
         unconditional.",
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn create(body: Value) -> Result<CreateAddressRequest, String> {
        match body {
            Value::Object(m) => parse_fields(m).map_err(|e| e.to_string()),
            _ => Err("not an object".into()),
        }
    }

    #[test]
    fn bodies_keep_the_contract_messages() {
        let ok = create(json!({"name": "n", "task_id": null, "expires_in_seconds": 6e1, "x": 1}))
            .expect("valid");
        assert_eq!(ok.name.as_deref(), Some("n"));
        assert_eq!((ok.task_id, ok.expires_in_seconds), (None, Some(60)));
        let long = "x".repeat(LABEL_MAX_CHARS + 1);
        for (body, message) in [
            (
                json!({"name": ""}),
                "`name` must be 1 to 200 characters long.",
            ),
            (
                json!({"task_id": long}),
                "`task_id` must be 1 to 200 characters long.",
            ),
            (json!({"task_id": 7}), "`task_id` must be a string."),
            (
                json!({"expires_in_seconds": 59}),
                "`expires_in_seconds` must be an integer from 60 to 31536000.",
            ),
            (
                json!({"expires_in_seconds": "60"}),
                "`expires_in_seconds` must be an integer from 60 to 31536000.",
            ),
            // Checked in declared order, whatever the body's order.
            (
                json!({"expires_in_seconds": 1, "name": true}),
                "`name` must be a string.",
            ),
        ] {
            assert_eq!(
                create(body.clone()).err().as_deref(),
                Some(message),
                "{body}"
            );
        }
        let bidi = create(json!({"name": "a\u{202E}b"}))
            .err()
            .unwrap_or_default();
        assert!(bidi.starts_with("`name` may not contain"), "{bidi}");
        assert!(bidi.ends_with("(found U+202E)."), "{bidi}");
    }

    #[test]
    fn a_missing_required_field_is_named_first() {
        let put = |v: Value| match v {
            Value::Object(m) => parse_fields::<PutStateRequest>(m).map_err(|e| e.to_string()),
            _ => Err("not an object".into()),
        };
        assert_eq!(
            put(json!({"if_revision": -1})).err().as_deref(),
            Some("The body must have a `value` field (any JSON).")
        );
        assert_eq!(
            put(json!({"value": 1, "if_revision": -1})).err().as_deref(),
            Some("`if_revision` must be an integer from 0 to 9223372036854775807.")
        );
        let ok = put(json!({"value": null})).expect("null is a value");
        assert_eq!((ok.value, ok.if_revision), (Value::Null, None));
    }

    #[test]
    fn schemas_state_the_constants() {
        let doc = |s: RefOr<Schema>| serde_json::to_value(s).expect("schema");
        let create = doc(CreateAddressRequest::schema());
        assert_eq!(create["properties"]["name"]["maxLength"], LABEL_MAX_CHARS);
        assert_eq!(
            create["properties"]["expires_in_seconds"]["minimum"],
            EXPIRES_IN_MIN_SECONDS
        );
        assert_eq!(
            create["properties"]["expires_in_seconds"]["maximum"],
            EXPIRES_IN_MAX_SECONDS
        );
        assert!(create.get("required").is_none(), "{create}");
        let put = doc(PutStateRequest::schema());
        assert_eq!(put["required"], json!(["value"]));
        assert_eq!(put["properties"]["if_revision"]["maximum"], COUNT_MAX);
        assert!(
            put["properties"]["value"].get("type").is_none(),
            "any JSON: {put}"
        );
        let params = FeedParams::into_params(|| None);
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["after", "limit", "wait"]);
        let limit = serde_json::to_value(&params[1]).expect("param");
        assert_eq!(limit["in"], "query");
        assert_eq!(limit["required"], false);
        assert_eq!(limit["schema"]["maximum"], FEED_LIMIT_MAX);
        assert!(limit["description"].is_string() && limit["schema"]["description"].is_null());
    }
}
