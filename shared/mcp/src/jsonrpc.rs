//! The HTTP/JSON-RPC layer in front of rmcp: [`McpService`] reads the body, refuses what is not
//! one JSON-RPC 2.0 message rmcp can take, and turns rmcp's plain-text 4xx into JSON-RPC errors.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use futures::future::BoxFuture;
use http::{header, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, InitializeRequestParams, PaginatedRequestParams,
};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use serde_json::{json, Value};

use crate::server::McpServer;

/// rmcp's Streamable HTTP service for the tools.
pub(crate) type Transport = StreamableHttpService<McpServer, NeverSessionManager>;

/// The largest JSON-RPC message the endpoint reads (rmcp's own default, set on it explicitly
/// so that the check in front of it reads exactly as much).
pub(crate) const BODY_LIMIT: usize = 4 * 1024 * 1024;

/// `POST /api/mcp`: reads the body (at most [`BODY_LIMIT`] bytes), answers a message that is
/// not one valid JSON-RPC 2.0 request, notification or response with a JSON-RPC error object
/// and HTTP 400, and hands the same bytes on to rmcp otherwise. rmcp itself would answer such
/// a message with a plain-text 415; its other plain-text 4xx answers (406 without the right
/// `Accept`, 415 without a JSON `Content-Type`) become JSON-RPC errors with the same status.
#[derive(Clone)]
pub struct McpService {
    pub(crate) transport: Transport,
}

impl tower::Service<Request<Body>> for McpService {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let transport = self.transport.clone();
        Box::pin(async move { Ok(McpService::answer(transport, req).await) })
    }
}

impl McpService {
    async fn answer(transport: Transport, req: Request<Body>) -> Response {
        let (parts, body) = req.into_parts();
        let json_body = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| {
                let essence = ct.split(';').next().unwrap_or("").trim();
                essence.eq_ignore_ascii_case("application/json")
            });
        let body = if json_body {
            let declared = parts
                .headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
                return too_large();
            }
            let bytes = match Limited::new(body, BODY_LIMIT).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) if e.is::<LengthLimitError>() => return too_large(),
                Err(_) => {
                    return jsonrpc_error(
                        StatusCode::BAD_REQUEST,
                        Value::Null,
                        INVALID_REQUEST,
                        "Invalid Request: the request body could not be read.",
                    )
                }
            };
            if let Err(refusal) = check_message(&bytes) {
                return refusal.into_response();
            }
            Body::from(bytes)
        } else {
            // rmcp refuses it (415) without reading the body.
            body
        };
        let answer = transport.handle(Request::from_parts(parts, body)).await;
        as_jsonrpc_if_plain(answer.map(Body::new)).await
    }
}

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

fn too_large() -> Response {
    jsonrpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        Value::Null,
        INVALID_REQUEST,
        &format!("Invalid Request: the message is larger than the limit of {BODY_LIMIT} bytes."),
    )
}

/// A JSON-RPC 2.0 error object as the whole answer, `Content-Type: application/json`.
fn jsonrpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    let mut response = agentaddress_api::json_response(status, &body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Why a body is not a JSON-RPC message rmcp can take.
#[derive(Debug, Clone, PartialEq)]
struct Refusal {
    /// The message's id when it has a valid one, else `null`.
    id: Value,
    code: i64,
    message: String,
}

impl Refusal {
    fn new(id: &Value, code: i64, message: impl Into<String>) -> Self {
        Self {
            id: id.clone(),
            code,
            message: message.into(),
        }
    }

    fn into_response(self) -> Response {
        jsonrpc_error(StatusCode::BAD_REQUEST, self.id, self.code, &self.message)
    }
}

/// A JSON-RPC id as MCP takes them: a string, or an integer (rmcp also reads `1.0` as `1`).
fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => {
            n.as_i64().is_some()
                || n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
        }
        _ => false,
    }
}

/// Checks that `bytes` are one JSON-RPC 2.0 message rmcp reads (docs/API.md, "Request
/// hygiene"): -32700 when not JSON; -32600 for a batch, a non-object, a wrong `jsonrpc`, a bad
/// `id` or `method`; -32602 for `params` that are not an object, or that rmcp cannot read for
/// the method.
fn check_message(bytes: &[u8]) -> Result<(), Refusal> {
    let null = Value::Null;
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        Refusal::new(
            &null,
            PARSE_ERROR,
            format!("Parse error: the body is not JSON ({e})."),
        )
    })?;
    let obj = match &value {
        Value::Object(m) => m,
        Value::Array(_) => {
            return Err(Refusal::new(
                &null,
                INVALID_REQUEST,
                "Invalid Request: batches (JSON arrays) are not supported; send one JSON-RPC \
                 message per request.",
            ))
        }
        _ => {
            return Err(Refusal::new(
                &null,
                INVALID_REQUEST,
                "Invalid Request: a JSON-RPC message is a JSON object.",
            ))
        }
    };
    let id = match obj.get("id") {
        None => Value::Null,
        Some(v) if valid_id(v) => v.clone(),
        Some(_) => {
            return Err(Refusal::new(
                &null,
                INVALID_REQUEST,
                "Invalid Request: `id` must be a string or an integer.",
            ))
        }
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Refusal::new(
            &id,
            INVALID_REQUEST,
            "Invalid Request: `jsonrpc` must be \"2.0\".",
        ));
    }
    match obj.get("method") {
        Some(Value::String(_)) => match obj.get("params") {
            None | Some(Value::Object(_)) | Some(Value::Null) => {}
            Some(_) => {
                return Err(Refusal::new(
                    &id,
                    INVALID_PARAMS,
                    "Invalid params: `params` must be a JSON object.",
                ))
            }
        },
        Some(_) => {
            return Err(Refusal::new(
                &id,
                INVALID_REQUEST,
                "Invalid Request: `method` must be a string.",
            ))
        }
        None => {
            let answers = obj.contains_key("result") != obj.contains_key("error");
            if !obj.contains_key("id") || !answers {
                return Err(Refusal::new(
                    &id,
                    INVALID_REQUEST,
                    "Invalid Request: a message needs a `method` (or is a response, with an \
                     `id` and one of `result` or `error`).",
                ));
            }
        }
    }
    if let Some(method) = obj.get("method").and_then(Value::as_str) {
        // rmcp reads a known method with params it cannot parse as an unknown one (-32601).
        let params = obj.get("params").cloned().unwrap_or(Value::Null);
        let typed = match method {
            "initialize" => serde_json::from_value::<InitializeRequestParams>(params).err(),
            "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err(),
            "tools/list" if !params.is_null() => {
                serde_json::from_value::<PaginatedRequestParams>(params).err()
            }
            _ => None,
        };
        if let Some(e) = typed {
            return Err(Refusal::new(
                &id,
                INVALID_PARAMS,
                format!("Invalid params for {method}: {e}."),
            ));
        }
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(_) => Ok(()),
        Err(e) if obj.contains_key("method") => Err(Refusal::new(
            &id,
            INVALID_PARAMS,
            format!("Invalid params: {e}."),
        )),
        Err(e) => Err(Refusal::new(
            &id,
            INVALID_REQUEST,
            format!("Invalid Request: {e}."),
        )),
    }
}

/// rmcp's own 4xx answers are plain text; they become a JSON-RPC error (`id` null) with the
/// same status and headers.
async fn as_jsonrpc_if_plain(response: Response) -> Response {
    let status = response.status();
    let is_json_or_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.trim_start().to_ascii_lowercase();
            ct.starts_with("application/json") || ct.starts_with("text/event-stream")
        });
    if !status.is_client_error() || is_json_or_sse {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match Limited::new(body, 64 * 1024).collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    let message = if text.trim().is_empty() {
        status
            .canonical_reason()
            .unwrap_or("Invalid Request")
            .to_owned()
    } else {
        text.trim().to_owned()
    };
    let fresh = jsonrpc_error(status, Value::Null, INVALID_REQUEST, &message);
    parts.headers.remove(header::CONTENT_LENGTH);
    let (fresh_parts, fresh_body) = fresh.into_parts();
    parts.headers.extend(fresh_parts.headers);
    Response::from_parts(parts, fresh_body)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonrpc_messages_are_checked_before_rmcp() {
        let code = |body: &str| check_message(body.as_bytes()).err().map(|r| (r.code, r.id));
        let null = Value::Null;
        assert_eq!(code("not json"), Some((PARSE_ERROR, null.clone())));
        assert_eq!(code(""), Some((PARSE_ERROR, null.clone())));
        assert_eq!(code("[]"), Some((INVALID_REQUEST, null.clone())));
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#),
            Some((INVALID_REQUEST, null.clone()))
        );
        assert_eq!(code("5"), Some((INVALID_REQUEST, null.clone())));
        for id in [r#"{"a":1}"#, "true", "1.5", "[1]", "null"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
            assert_eq!(code(&body), Some((INVALID_REQUEST, null.clone())), "{id}");
        }
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":3,"method":"tools/list"}"#),
            Some((INVALID_REQUEST, json!(3)))
        );
        assert_eq!(
            code(r#"{"id":3,"method":"tools/list"}"#),
            Some((INVALID_REQUEST, json!(3)))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":"x","method":7}"#),
            Some((INVALID_REQUEST, json!("x")))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":5}"#),
            Some((INVALID_PARAMS, json!(4)))
        );
        for params in [
            r#"{"name":7}"#,
            r#"{"name":"get_state","arguments":5}"#,
            "{}",
        ] {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{params}}}"#);
            assert_eq!(code(&body), Some((INVALID_PARAMS, json!(4))), "{params}");
        }
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{}}"#),
            Some((INVALID_PARAMS, json!(4)))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":5}}"#),
            Some((INVALID_PARAMS, json!(4)))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":4}"#),
            Some((INVALID_REQUEST, json!(4)))
        );
        for ok in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_state","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        ] {
            assert_eq!(code(ok), None, "{ok}");
        }
    }
}
