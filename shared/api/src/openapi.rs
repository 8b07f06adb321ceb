//! `/openapi.json` (OpenAPI 3.1, generated from the handlers' annotations with `utoipa`) and
//! `/skill.md`.

use utoipa::openapi::content::Content;
use utoipa::openapi::header::Header;
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::Response;
use utoipa::openapi::schema::{Object, Schema, SchemaType, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::openapi::{Ref, RefOr, Required};
use utoipa::{Modify, OpenApi};

use super::dto::*;
use super::error::ErrorCode;
use super::inputs::{CreateAddressRequest, PutStateRequest};
use crate::domain::Limits;

/// Instructions for an agent; `{base}` is replaced by the public base URL.
pub const SKILL_MD: &str = include_str!("skill.md");

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The address's read token (`credentials.read_token`)."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "ingest",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The operator's email ingest secret (`--email-ingest-secret`).",
                    ))
                    .build(),
            ),
        );
    }
}

/// What the handlers' annotations cannot say, applied to every operation:
/// - every store-backed operation may answer 503 `unavailable` (store throttled, outcome
///   unknown; docs/API.md §9), with `Retry-After`;
/// - 429 and 503 answers carry `Retry-After` (seconds);
/// - the parameters' descriptions and patterns ([`PARAMETERS`]); they are never `null` (an
///   optional one is absent);
/// - the bodies of `POST /api/v1/addresses` and of an inbox delivery are optional (a body that
///   is there must be a JSON object, not `null`, for the first; anything for the second).
struct Contract;

const RETRY_AFTER: &str = "Retry-After";

fn retry_after_header() -> Header {
    let mut header = Header::new(Object::with_type(SchemaType::Type(Type::Integer)));
    header.description = Some("Seconds to wait before retrying.".into());
    header
}

/// An error answer: an [`ErrorBody`].
fn error_body_response(description: &str) -> Response {
    let mut response = Response::new(description);
    response.content.insert(
        "application/json".into(),
        Content::new(Some(Ref::from_schema_name("ErrorBody"))),
    );
    response
}

/// An error answer with `Retry-After`.
fn error_response(description: &str) -> Response {
    let mut response = error_body_response(description);
    response
        .headers
        .insert(RETRY_AFTER.into(), retry_after_header());
    response
}

/// The extension of an error response that lists the codes it can carry (docs/API.md §9).
pub const ERROR_CODES_EXTENSION: &str = "x-error-codes";

/// What any operation can answer, whatever it does (docs/API.md §9 and §T, "Request hygiene"):
/// a refused `Host` or repeated header (400), a transfer coding other than `chunked` (501), a
/// bug (500).
const EVERY_OPERATION: &[ErrorCode] = &[
    ErrorCode::InvalidRequest,
    ErrorCode::Internal,
    ErrorCode::NotSupported,
];

/// The codes each operation can answer besides [`EVERY_OPERATION`]'s; every store-backed
/// operation can also answer `unavailable`, and one with a request body `request_timeout`
/// (`agentaddress serve`, docs/API.md §T, "Connections").
const OPERATION_ERRORS: &[(&str, &[ErrorCode])] = {
    use ErrorCode::*;
    &[
        (
            "create_address",
            &[
                PayloadTooLarge,
                UnsupportedMediaType,
                RateLimited,
                InvalidHookUrl,
            ],
        ),
        ("inspect_address", &[Unauthorized, AddressGone]),
        ("delete_address", &[Unauthorized, AddressGone]),
        (
            "set_verification",
            &[
                Unauthorized,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
            ],
        ),
        ("delete_verification", &[Unauthorized, AddressGone]),
        (
            "set_email_policy",
            &[
                Unauthorized,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
            ],
        ),
        ("delete_email_policy", &[Unauthorized, AddressGone]),
        (
            "deliver",
            &[
                NotFound,
                QuotaExceeded,
                AddressGone,
                PayloadTooLarge,
                IdempotencyKeyReused,
                SignatureInvalid,
                RateLimited,
            ],
        ),
        (
            "subscribe_inbox",
            &[NotFound, AddressGone, Forbidden, RateLimited],
        ),
        ("list_events", &[Unauthorized, AddressGone, RateLimited]),
        ("stream_events", &[Unauthorized, AddressGone, RateLimited]),
        ("get_event", &[Unauthorized, NotFound, AddressGone]),
        ("ack_event", &[Unauthorized, NotFound, AddressGone]),
        ("list_state", &[Unauthorized, AddressGone]),
        ("get_state", &[Unauthorized, NotFound, AddressGone]),
        (
            "put_state",
            &[
                Unauthorized,
                RevisionConflict,
                QuotaExceeded,
                StateLimitExceeded,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
            ],
        ),
        (
            "delete_state",
            &[
                Unauthorized,
                NotFound,
                RevisionConflict,
                QuotaExceeded,
                AddressGone,
            ],
        ),
        ("inbound_email", &[Unauthorized, NotFound, PayloadTooLarge]),
        (
            "get_attachment",
            &[Unauthorized, NotFound, AddressGone, AttachmentUnavailable],
        ),
        (
            "get_raw_email",
            &[Unauthorized, NotFound, AddressGone, AttachmentUnavailable],
        ),
        (
            "replay_email",
            &[
                Unauthorized,
                NotFound,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
            ],
        ),
        (
            "create_request",
            &[
                Unauthorized,
                QuotaExceeded,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
                IdempotencyKeyReused,
            ],
        ),
        (
            "get_request",
            &[Unauthorized, NotFound, AddressGone, RateLimited],
        ),
        (
            "create_timer",
            &[
                Unauthorized,
                QuotaExceeded,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
                IdempotencyKeyReused,
            ],
        ),
        ("list_timers", &[Unauthorized, AddressGone]),
        (
            "cancel_timer",
            &[Unauthorized, NotFound, AddressGone, TimerFired],
        ),
        ("request_page", &[NotFound]),
        (
            "answer_request",
            &[NotFound, QuotaExceeded, RequestClosed, PayloadTooLarge],
        ),
        (
            "create_viewer_code",
            &[Unauthorized, AddressGone, RateLimited],
        ),
        (
            "redeem_viewer_code",
            &[
                PayloadTooLarge,
                UnsupportedMediaType,
                RateLimited,
                CodeExpired,
            ],
        ),
        ("list_contacts", &[Unauthorized, AddressGone]),
        (
            "add_contact",
            &[
                Unauthorized,
                NotFound,
                QuotaExceeded,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
                RateLimited,
                InvalidCode,
                CodeExpired,
                OutboundNotConfigured,
            ],
        ),
        (
            "send_email",
            &[
                Unauthorized,
                NotFound,
                QuotaExceeded,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
                IdempotencyKeyReused,
                RateLimited,
                ContactNotConfirmed,
                OutboundNotConfigured,
            ],
        ),
        (
            "add_hook",
            &[
                Unauthorized,
                QuotaExceeded,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
                InvalidHookUrl,
            ],
        ),
        ("list_hooks", &[Unauthorized, AddressGone]),
        (
            "set_hook_status",
            &[
                Unauthorized,
                NotFound,
                AddressGone,
                PayloadTooLarge,
                UnsupportedMediaType,
            ],
        ),
        ("delete_hook", &[Unauthorized, NotFound, AddressGone]),
        (
            "test_hook",
            &[
                Unauthorized,
                NotFound,
                AddressGone,
                InvalidHookUrl,
                HookUnreachable,
            ],
        ),
    ]
};

/// The codes `operation_id` can answer, in the catalogue's order.
pub fn operation_error_codes(
    operation_id: &str, store_backed: bool, has_body: bool,
) -> Vec<ErrorCode> {
    let own = OPERATION_ERRORS
        .iter()
        .find(|(id, _)| *id == operation_id)
        .map_or(&[][..], |(_, codes)| codes);
    ErrorCode::ALL
        .into_iter()
        .filter(|c| {
            EVERY_OPERATION.contains(c)
                || own.contains(c)
                || (store_backed && *c == ErrorCode::Unavailable)
                || (has_body && *c == ErrorCode::RequestTimeout)
        })
        .collect()
}

/// Lists on each error response of `op` the codes it can carry ([`ERROR_CODES_EXTENSION`]),
/// adding the responses the annotations leave out; a response without a description gets the
/// codes as one.
fn list_error_codes(op: &mut Operation, store_backed: bool) {
    let id = op.operation_id.clone().unwrap_or_default();
    let codes = operation_error_codes(&id, store_backed, op.request_body.is_some());
    let mut statuses: Vec<u16> = codes.iter().map(|c| c.status().as_u16()).collect();
    statuses.sort_unstable();
    statuses.dedup();
    for status in statuses {
        let here: Vec<&str> = codes
            .iter()
            .filter(|c| c.status().as_u16() == status)
            .map(|c| c.as_str())
            .collect();
        let listed = here
            .iter()
            .map(|c| format!("`{c}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let response = op
            .responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| RefOr::T(error_body_response(&listed)));
        if let RefOr::T(r) = response {
            if r.description.is_empty() {
                r.description = listed;
            }
            r.extensions
                .get_or_insert_with(Default::default)
                .insert(ERROR_CODES_EXTENSION.into(), serde_json::json!(here));
        }
    }
}

fn operations(openapi: &mut utoipa::openapi::OpenApi) -> impl Iterator<Item = &mut Operation> {
    openapi.paths.paths.values_mut().flat_map(|item| {
        [
            item.get.as_mut(),
            item.put.as_mut(),
            item.post.as_mut(),
            item.delete.as_mut(),
            item.patch.as_mut(),
        ]
        .into_iter()
        .flatten()
    })
}

/// Descriptions and syntax of the parameters, by name: the handlers' annotations only name them.
/// Ids and secrets are `^[A-Za-z0-9_-]{1,64}$` (docs/API.md §0), keys
/// `[A-Za-z0-9._:-]{1,128}` (§7).
const PARAMETERS: &[(&str, &str, &str)] = &[
    (
        "address_id",
        "The address id (`address.id`, `addr_…`).",
        "^[A-Za-z0-9_-]{1,64}$",
    ),
    (
        "inbox_secret",
        "The inbox secret: the last segment of `endpoints.inbox_url`.",
        "^[A-Za-z0-9_-]{1,64}$",
    ),
    (
        "event_id",
        "An event id (`evt_…`).",
        "^[A-Za-z0-9_-]{1,64}$",
    ),
    (
        "attachment_id",
        "An attachment id (`data.attachments[].id` of an `email.received` event, `att_…`).",
        "^[A-Za-z0-9_-]{1,64}$",
    ),
    (
        "request_id",
        "A request id (`request.id`, `req_…`).",
        "^[A-Za-z0-9_-]{1,64}$",
    ),
    (
        "hook_id",
        "A wake hook's id (`hook.id`, `hk_…`).",
        "^hk_[A-Za-z0-9_-]{1,61}$",
    ),
    (
        "timer_id",
        "A timer's id (`timer.id`, `tmr_…`).",
        "^tmr_[A-Za-z0-9_-]{1,60}$",
    ),
    (
        "secret",
        "The request's secret: the last segment of its `url` (the person's capability).",
        "^[A-Za-z0-9_-]{1,64}$",
    ),
    (
        "key",
        "A state key: 1 to 128 letters, digits and `. _ : -`, not only dots.",
        "^[A-Za-z0-9._:-]{1,128}$",
    ),
    (
        "If-Match",
        "Same as `if_revision`: a revision number, bare or quoted (`7` or `\"7\"`).",
        "^(?:[0-9]{1,18}|\"[0-9]{1,18}\")$",
    ),
    (
        "Last-Event-ID",
        "The sequence of the last event received (as `after`, which it overrides): what an \
         EventSource sends when it reconnects.",
        "^[0-9]{1,19}$",
    ),
    (
        "Idempotency-Key",
        "1 to 255 printable ASCII characters. The same key again, while the event it produced is \
         retained, answers that event (200) instead of appending another.",
        "^[!-~](?:[ -~]{0,253}[!-~])?$",
    ),
];

/// A parameter is text on the wire and cannot be `null`: an optional one is simply absent.
fn not_null(schema: &mut Object) {
    if let SchemaType::Array(types) = &schema.schema_type {
        let rest: Vec<Type> = types
            .iter()
            .filter(|t| **t != Type::Null)
            .cloned()
            .collect();
        if let [only] = rest.as_slice() {
            schema.schema_type = SchemaType::Type(only.clone());
        }
    }
}

impl Modify for Contract {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for op in operations(openapi) {
            let is_service = op
                .tags
                .as_ref()
                .is_some_and(|t| t.iter().any(|t| t == "service"));
            if !is_service {
                op.responses.responses.insert(
                    "503".into(),
                    RefOr::T(error_response(
                        "`unavailable`: the store is throttled or the outcome is unknown; safe to retry",
                    )),
                );
            }
            for param in op.parameters.iter_mut().flatten() {
                let described = PARAMETERS.iter().find(|(name, ..)| *name == param.name);
                if let Some((_, description, _)) = described {
                    param.description = Some((*description).into());
                }
                if let Some(RefOr::T(Schema::Object(schema))) = param.schema.as_mut() {
                    not_null(schema);
                    if let Some((.., pattern)) = described {
                        schema.pattern = Some((*pattern).into());
                    }
                }
            }
            list_error_codes(op, !is_service);
            if let Some(RefOr::T(r)) = op.responses.responses.get_mut("429") {
                r.headers.insert(RETRY_AFTER.into(), retry_after_header());
            }
            let optional_body = matches!(
                op.operation_id.as_deref(),
                Some("create_address" | "deliver")
            );
            if let Some(body) = op.request_body.as_mut().filter(|_| optional_body) {
                body.required = Some(Required::False);
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agentaddress",
        description = "Durable return addresses for AI agents: an inbox URL for webhooks, an ordered event feed with long polling, and small JSON state with compare-and-set.",
    ),
    components(schemas(
        AddressView, Credentials, Endpoints, ReadEndpoints, CreatedAddress, CreateAddressRequest, UsageView,
        AddressDetails, Limits, EventRefView, DeliveryResult, EventView, EventPageView,
        SingleEvent, AckedEventView, AckResult, StateKeyView, StateLimitsView, StateList,
        StateValue, PutStateRequest, StateWriteResult, StateDeleteResult, Health, ErrorDetail,
        ErrorBody
    )),
    tags(
        (name = "addresses"), (name = "inbox"), (name = "events"), (name = "state"), (name = "service")
    )
)]
struct ApiDoc;

/// The OpenAPI document of `paths` (every REST route's, from the route table: the crate root's
/// [`crate::openapi_document`] hands them in, so that this module needs no handler), with
/// `base` as its server.
pub fn document_of(paths: utoipa::openapi::OpenApi, base: &str) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    // Every REST route; then what the annotations cannot say, applied to them all.
    doc.merge(paths);
    for modifier in [&BearerAuth as &dyn Modify, &Contract] {
        modifier.modify(&mut doc);
    }
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc.servers = Some(vec![Server::new(base)]);
    doc
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn the_document_states_what_the_annotations_cannot() {
        let doc = serde_json::to_value(crate::openapi_document("http://agentaddress.test"))
            .expect("JSON");
        let paths = doc["paths"].as_object().expect("paths");
        let mut operations = 0;
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("path item") {
                operations += 1;
                let what = format!("{method} {path}");
                for p in op["parameters"].as_array().into_iter().flatten() {
                    assert!(
                        p["schema"]["type"].is_string(),
                        "{what}: {p} is not nullable"
                    );
                    if p["in"] == "path" {
                        assert!(
                            p["schema"]["pattern"].is_string(),
                            "{what}: {p} has a pattern"
                        );
                        assert!(p["description"].is_string(), "{what}: {p} is described");
                    }
                }
                let service = op["tags"][0] == "service";
                let responses = &op["responses"];
                assert_eq!(
                    responses["503"]["headers"]["Retry-After"].is_object(),
                    !service,
                    "{what}: 503 with Retry-After on store-backed operations"
                );
                if responses.get("429").is_some() {
                    assert!(
                        responses["429"]["headers"]["Retry-After"].is_object(),
                        "{what}: 429 with Retry-After"
                    );
                }
            }
        }
        assert_eq!(operations, 50);
        // Every error response lists the codes it can carry: catalogue codes of its status.
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("path item") {
                let responses = op["responses"].as_object().expect("responses");
                let mut listed = 0;
                for (status, response) in responses {
                    let status: u16 = status.parse().expect("numeric status");
                    let codes = response.get(ERROR_CODES_EXTENSION);
                    if status < 400 {
                        assert!(codes.is_none(), "{method} {path} {status}");
                        continue;
                    }
                    let codes = codes.and_then(Value::as_array).expect("x-error-codes");
                    assert!(!codes.is_empty(), "{method} {path} {status}");
                    for code in codes {
                        let c = code.as_str().and_then(ErrorCode::parse);
                        let c = c.unwrap_or_else(|| panic!("{method} {path}: {code} is no code"));
                        assert_eq!(c.status().as_u16(), status, "{method} {path}: {code}");
                        listed += 1;
                    }
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{method} {path} {status}"
                    );
                }
                assert!(listed >= 3, "{method} {path}");
            }
        }
        let put = &doc["paths"]["/api/v1/addresses/{address_id}/state/{key}"]["put"]["responses"];
        assert_eq!(
            put["409"][ERROR_CODES_EXTENSION],
            serde_json::json!([
                "revision_conflict",
                "quota_exceeded",
                "state_limit_exceeded"
            ])
        );
        let codes = &doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["enum"];
        let all: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes, &serde_json::json!(all));
        let create = &doc["paths"]["/api/v1/addresses"]["post"]["requestBody"];
        assert_eq!(create["required"], Value::Bool(false));
        assert_eq!(
            create["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/CreateAddressRequest"
        );
        let deliver = &doc["paths"]["/api/v1/inbox/{address_id}/{inbox_secret}"]["post"];
        assert_eq!(deliver["requestBody"]["required"], Value::Bool(false));
        // Event data and state values are any JSON, not only objects.
        let event = &doc["components"]["schemas"]["EventView"]["properties"]["data"];
        assert!(event.get("type").is_none(), "data is any JSON: {event}");
    }
}
