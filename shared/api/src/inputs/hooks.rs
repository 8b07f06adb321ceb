//! The inputs of wake hooks (docs/API.md §19): a hook (the body of `POST {root}/hooks`, and
//! each entry of the create body's `hooks`), read by the one rule in core
//! ([`HookSpec::from_json`]), and the body of `PUT {root}/hooks/{id}`.

use super::fields::{integer, invalid, typed};
use super::*;
use crate::domain::hooks::{
    HookSpec, MAX_DEBOUNCE_SECONDS, MAX_HEADERS, MAX_HEADER_VALUE_BYTES, MAX_HOOKS_PER_ADDRESS,
    MAX_URL_BYTES,
};

/// Body of `POST {root}/hooks`: `{"url", "types"?, "format"?, "headers"?, "debounce_seconds"?}`.
#[derive(Debug)]
pub struct HookRequest(pub HookSpec);

impl HookRequest {
    /// Parses a `POST {root}/hooks` body (a JSON object).
    pub fn parse(body: &[u8]) -> Result<HookSpec, ApiError> {
        let object = crate::extract::json_object(body)?;
        HookSpec::from_json(&Value::Object(object)).map_err(|e| ApiError::invalid(e.0))
    }
}

impl utoipa::PartialSchema for HookRequest {
    fn schema() -> RefOr<Schema> {
        RefOr::T(Schema::Object(hook_object()))
    }
}

impl ToSchema for HookRequest {}

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .description(Some(description))
}

/// A hook object's schema.
pub(super) fn hook_object() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Object))
        .property(
            "url",
            string(
                "Where wakes are POSTed: https:// only, no user info; every address its host \
                 resolves to must be public (checked at creation and at every send).",
            )
            .max_length(Some(MAX_URL_BYTES)),
        )
        .required("url")
        .property(
            "types",
            utoipa::openapi::schema::ArrayBuilder::new()
                .schema_type(typed(Type::Array, true))
                .items(
                    string(
                        "An event type, or a pattern where `*` stands for whole dot-separated \
                     segments (`email.*`, `request.answered`, `*`).",
                    )
                    .max_length(Some(MAX_PATTERN_CHARS)),
                )
                .min_items(Some(1))
                .max_items(Some(MAX_PATTERNS))
                .description(Some(
                    "The event types that wake (default `[\"*\"]`); `hook.*` never wakes.",
                )),
        )
        .property(
            "format",
            ObjectBuilder::new()
                .schema_type(typed(Type::String, true))
                .enum_values(Some(["standard", "github-dispatch", "slack"]))
                .description(Some(
                    "`standard` (the wake object, Standard Webhooks), `github-dispatch` (a \
                     `repository_dispatch` body), `slack` (an incoming webhook's `{\"text\"}`).",
                )),
        )
        .property(
            "headers",
            ObjectBuilder::new()
                .schema_type(typed(Type::Object, true))
                .additional_properties(Some(string("").max_length(Some(MAX_HEADER_VALUE_BYTES))))
                .max_properties(Some(MAX_HEADERS))
                .description(Some(
                    "Headers sent with every wake (a token in `Authorization`): HTTP token names, \
                     none of host, content-length, content-type, transfer-encoding, connection, \
                     webhook-*; values without CR/LF. Stored, never shown again.",
                )),
        )
        .property(
            "debounce_seconds",
            integer(
                true,
                0,
                MAX_DEBOUNCE_SECONDS,
                "The least time between two wakes (default 0).",
            ),
        )
        .build()
}

/// The create body's `hooks`: up to [`MAX_HOOKS_PER_ADDRESS`] hook objects.
pub(super) fn hook_list<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<HookSpec>>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Array(items) => {
            if items.len() > MAX_HOOKS_PER_ADDRESS {
                return Err(invalid(format!(
                    "`{FIELD}` has {} hooks; an address may have at most {MAX_HOOKS_PER_ADDRESS}.",
                    items.len()
                )));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    HookSpec::from_json(v).map_err(|e| invalid(format!("`{FIELD}[{i}]`: {}", e.0)))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        }
        _ => Err(invalid(format!(
            "`{FIELD}` must be an array of hook objects."
        ))),
    }
}

pub(super) fn hook_list_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Array, true))
        .description(Some(
            "Wake hooks made with the address (docs/API.md §19); the answer lists them with \
             their signing secrets.",
        ))
        .build()
}

/// Body of `PUT {root}/hooks/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct HookStatusBody {
    /// `active` (also to re-enable a disabled hook) or `paused`.
    #[serde(deserialize_with = "hook_status")]
    #[schema(schema_with = hook_status_schema)]
    pub status: String,
}

impl Fields for HookStatusBody {}

fn hook_status<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) if s == "active" || s == "paused" => Ok(s),
        _ => Err(invalid(format!(
            "`{FIELD}` must be \"active\" or \"paused\"."
        ))),
    }
}

fn hook_status_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .enum_values(Some(["active", "paused"]))
        .description(Some(
            "`active` (also to re-enable a disabled hook) or `paused`.",
        ))
        .build()
}
