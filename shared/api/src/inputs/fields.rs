//! Field rules: a deserializer (the rule) and a schema (what the document says of it) each,
//! both from the constants of [`super`].

use super::*;

pub(super) fn invalid<E: serde::de::Error>(message: impl std::fmt::Display) -> E {
    E::custom(message)
}

/// A label: a string of 1..=[`LABEL_MAX_CHARS`] characters without control or bidirectional
/// formatting characters (docs/API.md, "Create.").
pub(super) fn label<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
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
pub(super) fn body_integer<'de, D: Deserializer<'de>>(
    d: D, min: u64, max: u64,
) -> Result<Option<u64>, D::Error> {
    // The rule is `crate::numbers::optional_integer`'s, applied to this one field.
    let mut one = Map::new();
    one.insert(FIELD.into(), Value::deserialize(d)?);
    crate::numbers::optional_integer(&one, FIELD, min..=max).map_err(invalid)
}

pub(super) fn expires_in<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    body_integer(d, EXPIRES_IN_MIN_SECONDS, EXPIRES_IN_MAX_SECONDS)
}

/// The create body's `verification` (docs/API.md §15): `null` is absent; any refusal names
/// the rule, never the secret.
pub(super) fn verification<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<VerificationConfig>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => VerificationConfig::from_json(&v)
            .map(Some)
            .map_err(|e| invalid(format!("`{FIELD}`: {e}"))),
    }
}

pub(super) fn revision<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    body_integer(d, 0, COUNT_MAX)
}

/// A state value: any JSON, `null` included, nesting at most `MAX_JSON_DEPTH` levels so that
/// its `state.updated` event reads back everywhere (docs/API.md, "State.").
pub(super) fn state_value<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    let value = Value::deserialize(d)?;
    validate_value(&value).map_err(|e| invalid(format!("{e}.")))?;
    Ok(value)
}

/// A query parameter's text (a query string has nothing else).
pub(super) fn query_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

pub(super) fn count_or<'de, D: Deserializer<'de>>(
    d: D, message: &str,
) -> Result<Option<u64>, D::Error> {
    let text = query_text(d)?;
    crate::numbers::parse_count(&text)
        .map(Some)
        .ok_or_else(|| invalid(message))
}

pub(super) fn after<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    count_or(d, "`{field}` must be a non-negative integer.")
}

pub(super) fn query_revision<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    count_or(d, "`{field}` must be a non-negative integer.")
}

pub(super) fn limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let text = query_text(d)?;
    match crate::numbers::parse_count(&text) {
        Some(n) if (1..=FEED_LIMIT_MAX).contains(&n) => Ok(Some(n)),
        _ => Err(invalid(format!(
            "`{FIELD}` must be an integer from 1 to {FEED_LIMIT_MAX}."
        ))),
    }
}

pub(super) fn wait<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let text = query_text(d)?;
    crate::numbers::parse_seconds(&text)
        .map(Some)
        .ok_or_else(|| {
            invalid("`{field}` must be a non-negative number of seconds (at most 25 are used).")
        })
}

/// `types`: comma-separated event type patterns (docs/API.md §21), each checked by the rule of
/// hooks' patterns.
pub(super) fn type_patterns<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<TypePatterns>, D::Error> {
    let text = query_text(d)?;
    let patterns: Vec<&str> = text.split(',').collect();
    TypePatterns::parse(&patterns)
        .map(Some)
        .map_err(|e| invalid(format!("`{FIELD}`: {e}")))
}

pub(super) fn type_patterns_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, false))
        .max_length(Some(MAX_PATTERNS * (MAX_PATTERN_CHARS + 1)))
        .description(Some(
            "Only events whose type matches one of these comma-separated patterns (at most 20; \
             `*` stands for whole dot-separated segments: `email.*`, `request.answered`). A page \
             examines at most 1,000 events; `next_cursor` is the last one examined, so the \
             next poll passes over the others.",
        ))
        .build()
}

/// An `email_id`: an id (`^[A-Za-z0-9_-]{1,64}$`, docs/API.md §10).
pub(super) fn email_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) if crate::domain::ids::is_valid_id(&s) => Ok(s),
        _ => Err(invalid(
            "`{field}` must be an email id: 1 to 64 letters, digits, _ and -.",
        )),
    }
}

pub(super) fn email_id_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .pattern(Some("^[A-Za-z0-9_-]{1,64}$"))
        .description(Some(
            "The `email_id` of a stored message (`data.email_id` of its `email.received` event).",
        ))
        .build()
}

/// A string of 1..=`max` characters without control or bidirectional formatting characters.
pub(super) fn bounded_text<'de, D: Deserializer<'de>>(
    d: D, max: usize,
) -> Result<String, D::Error> {
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

pub(super) fn request_title<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    bounded_text(d, TITLE_MAX_CHARS)
}

/// Free text of up to `max` characters (a request's Markdown body, a person's comment): line
/// breaks and tabs are allowed, other control characters are not; `null` is absent.
pub(super) fn multiline_text<'de, D: Deserializer<'de>>(
    d: D, max: usize,
) -> Result<Option<String>, D::Error> {
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
pub(super) fn request_body<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    multiline_text(d, BODY_MAX_CHARS)
}

pub(super) fn request_options<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
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

pub(super) fn comment_mode<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<CommentMode>, D::Error> {
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

pub(super) fn request_expires_in<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    body_integer(d, REQUEST_EXPIRES_MIN_SECONDS, REQUEST_EXPIRES_MAX_SECONDS)
}

pub(super) fn choice<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    bounded_text(d, OPTION_MAX_CHARS)
}

/// A comment of up to [`COMMENT_MAX_CHARS`] characters; only blanks is none.
pub(super) fn answer_comment<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(multiline_text(d, COMMENT_MAX_CHARS)?.filter(|s| !s.trim().is_empty()))
}

pub(super) fn text_schema(nullable: bool, min: usize, max: usize, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, nullable))
        .min_length(Some(min))
        .max_length(Some(max))
        .description(Some(description))
        .build()
}

pub(super) fn request_title_schema() -> Object {
    text_schema(
        false,
        1,
        TITLE_MAX_CHARS,
        "The question, as the person sees it.",
    )
}

pub(super) fn request_body_schema() -> Object {
    text_schema(
        true,
        0,
        BODY_MAX_CHARS,
        "Details in Markdown (rendered sanitised: no raw HTML, no scripts, no images).",
    )
}

pub(super) fn request_options_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Array, true))
        .description(Some(
            "The buttons the person chooses from, 1 to 5 distinct labels of 1 to 40 characters \
             (default [\"Approve\", \"Reject\"]).",
        ))
        .build()
}

pub(super) fn comment_mode_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .enum_values(Some(["none", "optional", "required"]))
        .description(Some(
            "Whether the person may add a comment (default \"optional\").",
        ))
        .build()
}

pub(super) fn request_expires_in_schema() -> Object {
    integer(
        true,
        REQUEST_EXPIRES_MIN_SECONDS,
        REQUEST_EXPIRES_MAX_SECONDS,
        "Seconds until the request expires unanswered (default 604800, 7 days).",
    )
}

pub(super) fn choice_schema() -> Object {
    text_schema(false, 1, OPTION_MAX_CHARS, "One of the request's options.")
}

pub(super) fn answer_comment_schema() -> Object {
    text_schema(true, 0, COMMENT_MAX_CHARS, "The person's comment.")
}

pub(super) fn typed(t: Type, nullable: bool) -> SchemaType {
    if nullable {
        SchemaType::Array(vec![t, Type::Null])
    } else {
        SchemaType::Type(t)
    }
}

pub(super) fn integer(nullable: bool, min: u64, max: u64, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Integer, nullable))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(min))
        .maximum(Some(max))
        .description(Some(description))
        .build()
}

pub(super) fn label_schema(description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::String, true))
        .min_length(Some(1))
        .max_length(Some(LABEL_MAX_CHARS))
        .description(Some(description))
        .build()
}

/// The verification object's schema; `nullable` for the create body's optional field.
pub(super) fn verification_object(nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Object, nullable))
        .property(
            "scheme",
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .enum_values(Some(Scheme::ALL.map(Scheme::as_str)))
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
                     stripe `whsec_` + 8-250 letters, digits or `_`; github, slack, zoom, \
                     shopify, meta (the app secret), twilio (the auth token) and linear any \
                     1-1024 bytes without control characters. Never returned.",
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
            "verify_token",
            ObjectBuilder::new()
                .schema_type(typed(Type::String, true))
                .min_length(Some(1))
                .max_length(Some(VERIFY_TOKEN_MAX_BYTES))
                .description(Some(
                    "Scheme meta only, and required for it: the token Meta's subscription \
                     handshake (GET on the inbox URL) must present (docs/API.md §22). Never \
                     returned.",
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
                     {TOLERANCE_DEFAULT_SECONDS} (github, shopify, meta and twilio sign no \
                     timestamp)."
                ),
            ),
        )
        .description(Some(
            "A signing secret to verify the inbox's webhook deliveries with (docs/API.md §15).",
        ))
        .build()
}

pub(super) fn create_verification_schema() -> Object {
    verification_object(true)
}

pub(super) fn name_schema() -> Object {
    label_schema("A label for people reading the address.")
}

pub(super) fn task_id_schema() -> Object {
    label_schema("Your own id for the task this address serves.")
}

pub(super) fn expires_in_schema() -> Object {
    integer(
        true,
        EXPIRES_IN_MIN_SECONDS,
        EXPIRES_IN_MAX_SECONDS,
        "Lifetime in seconds. Omit for an address that never expires.",
    )
}

pub(super) fn state_value_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some(
            "Any JSON value (object, array, string, number, boolean or `null`).",
        ))
        .build()
}

pub(super) fn put_if_revision_schema() -> Object {
    integer(
        true,
        0,
        COUNT_MAX,
        "Compare-and-set: 0 = create only (the key must not exist); N > 0 = only if the key's \
         current revision is N; absent = unconditional. A mismatch is `revision_conflict`, with \
         `current_revision` (`null` when the key does not exist).",
    )
}

pub(super) fn after_schema() -> Object {
    integer(
        false,
        0,
        COUNT_MAX,
        "Return events with sequence > after (default 0): the previous page's `next_cursor`.",
    )
}

pub(super) fn stream_after_schema() -> Object {
    integer(
        false,
        0,
        COUNT_MAX,
        "Stream the events with sequence > after (default 0); a `Last-Event-ID` header overrides it.",
    )
}

pub(super) fn limit_schema() -> Object {
    integer(
        false,
        1,
        FEED_LIMIT_MAX,
        "Most events to return, 1 to 100 (default 100).",
    )
}

pub(super) fn wait_schema() -> Object {
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

pub(super) fn request_wait_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(typed(Type::Number, false))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
        .minimum(Some(0))
        .description(Some(
            "Seconds to hold the request while it is open (default 0): it answers as soon as \
             the person answers or the request expires; at most 25 are used, larger values \
             are clamped. A wait counts as a poll against the poll rate limit.",
        ))
        .build()
}

pub(super) fn delete_if_revision_schema() -> Object {
    integer(
        false,
        0,
        COUNT_MAX,
        "Delete only if the key's current revision is this one (same as If-Match); absent = \
         unconditional.",
    )
}

pub(super) fn contact_email<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    parse_contact_email(&s).map_err(|e| serde::de::Error::custom(e.0))
}

pub(super) fn code<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::String(s) if is_code_shaped(&s) => Ok(Some(s)),
        _ => Err(serde::de::Error::custom(
            "`code` must be the six digits mailed to the contact, as a string (\"012345\")",
        )),
    }
}

pub(super) fn subject<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    check_subject(&s).map_err(|e| serde::de::Error::custom(e.0))?;
    Ok(s)
}

pub(super) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    check_text(&s).map_err(|e| serde::de::Error::custom(e.0))?;
    Ok(s)
}
