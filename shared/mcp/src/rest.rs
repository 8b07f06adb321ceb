//! The REST translation: a tool call as the REST request it stands for (path segments, query,
//! body, headers), and the pieces of a REST answer that a tool result says differently.

use axum::body::Body;
use http::request::Parts;
use http::{header, HeaderValue, Method, Request};
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{json, Map, Value};

use agentaddress_api::error::ErrorCode;
use agentaddress_api::extract::{client_ip, ClientIp};
use agentaddress_api::inputs::{
    field_names, CreateRequestBody, DeleteStateParams, FeedParams, Fields, PutStateRequest,
};
use agentaddress_api::inputs::{ContactBody, HookRequest, SendBody, TimerRequest};

use crate::catalogue::ToolKind;

/// The message of `unauthorized` for a tool's caller, who sends no header: the arguments.
const UNAUTHORIZED_MESSAGE: &str = "A valid read_token argument for this address_id is \
    required: the credentials.read_token that create_return_address returned with the address.";

/// An API error body as a tool error: the same code and fields, with a message that speaks of
/// the tool's arguments where the API's speaks of HTTP (`unauthorized`'s `Authorization`
/// header, docs/MCP.md "Errors").
pub(crate) fn for_tool_callers(mut value: Value) -> Value {
    if let Some(error) = value.get_mut("error").and_then(Value::as_object_mut) {
        if error.get("code").and_then(Value::as_str) == Some(ErrorCode::Unauthorized.as_str()) {
            error.insert("message".into(), Value::from(UNAUTHORIZED_MESSAGE));
        }
    }
    value
}

/// `%XX`-decoded UTF-8 (lossy): the `filename*` our own REST answer wrote.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The API's `internal` error, as a tool error; the detail goes to the log only.
pub(crate) fn internal_error(detail: &str) -> CallToolResult {
    tracing::error!(%detail, "MCP tool call failed");
    let code = ErrorCode::Internal;
    CallToolResult::structured_error(json!({
        "error": {"code": code.as_str(), "message": code.default_message()}
    }))
}

/// A path segment, percent-encoded (so `/`, `?`, `..` and the like stay inside it). A missing,
/// non-string or empty argument becomes a single space, which no id or key may contain: the
/// REST handler then refuses it in its own order (authentication first) with its own error.
fn segment(arg: Option<&Value>) -> String {
    let text = match arg {
        Some(Value::String(s)) if !s.is_empty() => s.as_str(),
        _ => " ",
    };
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text of an optional query parameter: absent or `null` = not sent; a string as is; any
/// other JSON as its JSON text (`25`, `2.5e1`, `-1`), for the REST parser to accept or refuse.
fn query_text(arg: Option<&Value>) -> Option<String> {
    match arg {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    }
}

/// The query parameters of a query struct (`agentaddress_api::inputs`), from the arguments of
/// the same names.
fn query<T: Fields>(args: &JsonObject) -> Vec<(String, Option<String>)> {
    field_names::<T>()
        .into_iter()
        .map(|name| {
            let value = query_text(args.get(&name));
            (name, value)
        })
        .collect()
}

fn with_query(path: String, params: &[(String, Option<String>)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    let mut any = false;
    for (name, value) in params {
        if let Some(v) = value {
            query.append_pair(name, v);
            any = true;
        }
    }
    if any {
        format!("{path}?{}", query.finish())
    } else {
        path
    }
}

/// The REST request a tool call stands for, carrying what the REST handlers read from the
/// MCP request: the Host and X-Forwarded-Proto headers (the public base URL of the links) and
/// the client's IP (the creation rate limit).
pub(crate) fn rest_request(
    kind: ToolKind, args: &JsonObject, parts: Option<&Parts>,
) -> Result<Request<Body>, String> {
    let root = || format!("/api/v1/addresses/{}", segment(args.get("address_id")));
    let body_of = |fields: Vec<String>| {
        let mut body = Map::new();
        for field in fields {
            if let Some(v) = args.get(&field) {
                body.insert(field, v.clone());
            }
        }
        Some(Value::Object(body))
    };
    let (method, uri, body): (Method, String, Option<Value>) = match kind {
        ToolKind::CreateReturnAddress => (
            Method::POST,
            "/api/v1/addresses".into(),
            Some(Value::Object(args.clone())),
        ),
        ToolKind::PollEvents => (
            Method::GET,
            with_query(format!("{}/events", root()), &query::<FeedParams>(args)),
            None,
        ),
        ToolKind::AcknowledgeEvent => (
            Method::POST,
            format!("{}/events/{}/ack", root(), segment(args.get("event_id"))),
            None,
        ),
        ToolKind::GetState => match args.get("key") {
            None | Some(Value::Null) => (Method::GET, format!("{}/state", root()), None),
            Some(Value::String(s)) if s.is_empty() => {
                (Method::GET, format!("{}/state", root()), None)
            }
            key => (
                Method::GET,
                format!("{}/state/{}", root(), segment(key)),
                None,
            ),
        },
        ToolKind::SetState => {
            let mut body = Map::new();
            for field in field_names::<PutStateRequest>() {
                if let Some(v) = args.get(&field) {
                    body.insert(field, v.clone());
                }
            }
            (
                Method::PUT,
                format!("{}/state/{}", root(), segment(args.get("key"))),
                Some(Value::Object(body)),
            )
        }
        ToolKind::DeleteState => (
            Method::DELETE,
            with_query(
                format!("{}/state/{}", root(), segment(args.get("key"))),
                &query::<DeleteStateParams>(args),
            ),
            None,
        ),
        ToolKind::GetAttachment => (
            Method::GET,
            format!(
                "{}/events/{}/attachments/{}",
                root(),
                segment(args.get("event_id")),
                segment(args.get("attachment_id"))
            ),
            None,
        ),
        ToolKind::AskPerson => {
            let mut body = Map::new();
            for field in field_names::<CreateRequestBody>() {
                if let Some(v) = args.get(&field) {
                    body.insert(field, v.clone());
                }
            }
            (
                Method::POST,
                format!("{}/requests", root()),
                Some(Value::Object(body)),
            )
        }
        ToolKind::ListContacts => (Method::GET, format!("{}/email/contacts", root()), None),
        ToolKind::AddContact => (
            Method::POST,
            format!("{}/email/contacts", root()),
            body_of(field_names::<ContactBody>()),
        ),
        ToolKind::SendEmail => (
            Method::POST,
            format!("{}/email/send", root()),
            body_of(field_names::<SendBody>()),
        ),
        ToolKind::AddWakeHook => (
            Method::POST,
            format!("{}/hooks", root()),
            body_of(field_names::<HookRequest>()),
        ),
        // Timers (docs/API.md §20).
        ToolKind::SetTimer => (
            Method::POST,
            format!("{}/timers", root()),
            body_of(field_names::<TimerRequest>()),
        ),
        ToolKind::ListTimers => (Method::GET, format!("{}/timers", root()), None),
        ToolKind::CancelTimer => (
            Method::DELETE,
            format!("{}/timers/{}", root(), segment(args.get("timer_id"))),
            None,
        ),
    };
    let keyed = matches!(kind, ToolKind::SendEmail | ToolKind::SetTimer);
    finish(method, uri, body, keyed, args, parts)
}

/// `ask_person`'s wait (`wait_seconds`): `GET {root}/requests/{request_id}?wait=S` with the
/// call's credentials (docs/API.md §21).
pub(crate) fn request_wait(
    args: &JsonObject, request_id: &str, wait: f64, parts: Option<&Parts>,
) -> Result<Request<Body>, String> {
    let uri = format!(
        "/api/v1/addresses/{}/requests/{}?wait={wait}",
        segment(args.get("address_id")),
        segment(Some(&Value::from(request_id)))
    );
    finish(Method::GET, uri, None, false, args, parts)
}

/// The request with the headers the REST handlers read: Host and X-Forwarded-Proto, the
/// client's IP, the read token as a bearer, the idempotency key where the tool has one.
fn finish(
    method: Method, uri: String, body: Option<Value>, idempotent: bool, args: &JsonObject,
    parts: Option<&Parts>,
) -> Result<Request<Body>, String> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(parts) = parts {
        for name in [header::HOST.as_str(), "x-forwarded-proto"] {
            if let Some(v) = parts.headers.get(name) {
                builder = builder.header(name, v.clone());
            }
        }
        builder = builder.extension(ClientIp(client_ip(parts)));
    }
    if idempotent {
        let key = args.get("idempotency_key").and_then(Value::as_str);
        if let Some(v) = key.and_then(|k| HeaderValue::from_str(k).ok()) {
            builder = builder.header("idempotency-key", v);
        }
    }
    let token = args.get("read_token").and_then(Value::as_str);
    if let Some(v) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
        builder = builder.header(header::AUTHORIZATION, v);
    }
    let body = match body {
        Some(json) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(&json).map_err(|e| e.to_string())?)
        }
        None => Body::empty(),
    };
    builder.body(body).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_stay_segments() {
        assert_eq!(segment(Some(&json!("addr_x-1"))), "addr_x-1");
        assert_eq!(segment(Some(&json!("a/b?c"))), "a%2Fb%3Fc");
        assert_eq!(segment(Some(&json!(".."))), "%2E%2E");
        assert_eq!(segment(Some(&json!(""))), "%20");
        assert_eq!(segment(Some(&json!(7))), "%20");
        assert_eq!(segment(None), "%20");
    }

    #[test]
    fn unauthorized_speaks_of_the_read_token_argument() {
        let api = json!({"error": {"code": "unauthorized",
            "message": ErrorCode::Unauthorized.default_message()}});
        assert!(api["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Authorization")));
        let tool = for_tool_callers(api);
        let message = tool["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("read_token") && message.contains("address_id"),
            "{message}"
        );
        assert!(!message.contains("Authorization"), "{message}");
        assert_eq!(tool["error"]["code"], "unauthorized");
        // Other errors keep the API's message and fields.
        let conflict = json!({"error": {"code": "revision_conflict", "message": "m",
            "current_revision": 4}});
        assert_eq!(for_tool_callers(conflict.clone()), conflict);
        assert_eq!(for_tool_callers(json!({})), json!({}));
    }
}
