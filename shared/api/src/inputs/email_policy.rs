//! Sender rules of inbound email (docs/API.md §10, "Sender rules"): the create body's
//! `email_policy` and the body of `PUT {root}/email/policy`, both parsed by
//! [`EmailPolicy::from_json`] (the one rule, in core), and their schema.

use super::fields::{invalid, typed};
use super::*;
use crate::domain::email_policy::{
    EmailPolicy, MAX_PATTERNS, PATTERN_MAX_CHARS, PATTERN_MIN_CHARS,
};
use utoipa::openapi::schema::ArrayBuilder;

/// The create body's `email_policy`: `null` is absent; a refusal names the rule broken.
pub(super) fn policy_field<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<EmailPolicy>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => EmailPolicy::from_json(&v)
            .map(Some)
            .map_err(|e| invalid(format!("`{FIELD}`: {e}"))),
    }
}

/// The policy object's schema; `nullable` for the create body's optional field.
pub(super) fn policy_object(nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Object, nullable))
        .property(
            "allow",
            ArrayBuilder::new()
                .schema_type(typed(Type::Array, true))
                .items(
                    ObjectBuilder::new()
                        .schema_type(SchemaType::Type(Type::String))
                        .min_length(Some(PATTERN_MIN_CHARS))
                        .max_length(Some(PATTERN_MAX_CHARS))
                        .description(Some(
                            "`local@domain`, matched case-insensitively; `*` as the whole local \
                             part matches any, `*.` before the domain matches its subdomains \
                             (not the domain itself): `ada@example.com`, `*@example.com`, \
                             `*@*.example.com`.",
                        )),
                )
                .min_items(Some(1))
                .max_items(Some(MAX_PATTERNS))
                .description(Some(
                    "The senders allowed: the envelope's sender and the message's author \
                     (`From`) must each match one; null: any sender.",
                )),
        )
        .property(
            "require_auth",
            ObjectBuilder::new()
                .schema_type(typed(Type::String, true))
                .enum_values(Some(["spf_or_dkim", "dmarc"]))
                .description(Some(
                    "`spf_or_dkim`: SPF or DKIM must pass; `dmarc`: DMARC of the author's \
                     domain must pass; null: no authentication required. Where the receiving \
                     side does not check authentication, nothing passes (fail closed).",
                )),
        )
        .description(Some(
            "Sender rules for the address's inbound email (docs/API.md §10, \"Sender rules\"): \
             at least one of `allow` and `require_auth`. Mail that breaks them is refused \
             (`550 5.7.1`) and counted, never appended.",
        ))
        .build()
}

pub(super) fn create_email_policy_schema() -> Object {
    policy_object(true)
}

/// Body of `PUT {root}/email/policy` (docs/API.md §10, "Sender rules"):
/// `{"allow"?: [patterns], "require_auth"?: "spf_or_dkim" | "dmarc"}`.
#[derive(Debug)]
pub struct EmailPolicyRequest(pub EmailPolicy);

impl EmailPolicyRequest {
    /// Parses a `PUT {root}/email/policy` body (a JSON object).
    pub fn parse(body: &[u8]) -> Result<EmailPolicy, ApiError> {
        let object = crate::extract::json_object(body)?;
        EmailPolicy::from_json(&Value::Object(object)).map_err(|e| ApiError::invalid(e.0))
    }
}

impl utoipa::PartialSchema for EmailPolicyRequest {
    fn schema() -> RefOr<Schema> {
        RefOr::T(Schema::Object(policy_object(false)))
    }
}

impl ToSchema for EmailPolicyRequest {}
