//! The MCP server rmcp calls: `initialize`'s answer, the tool list, and each tool call run as
//! its REST request through the REST router in process, the answer made a tool result.

use axum::body::Body;
use axum::response::Response;
use axum::Router;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use http::request::Parts;
use http::{header, Request};
use http_body_util::BodyExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ResourceContents, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tower::ServiceExt;

use agentaddress_api::error::ErrorCode;

use crate::catalogue::{ToolKind, INLINE_MAX_BYTES, INSTRUCTIONS, TOOLS};
use crate::rest::{for_tool_callers, internal_error, percent_decode, request_wait, rest_request};

/// The MCP server: one per request (stateless), dispatching into the REST router.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) rest: Router,
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("agentaddress", env!("CARGO_PKG_VERSION"))
                    .with_title("agentaddress: durable return addresses for AI agents"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(TOOLS.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        TOOLS.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self, request: CallToolRequestParams, context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is a protocol error (the MCP specification's -32602).
        let Some(kind) = ToolKind::parse(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("Unknown tool: {}", request.name),
                None,
            ));
        };
        let args = request.arguments.unwrap_or_default();
        let parts = context.extensions.get::<Parts>();
        let rest_request = match rest_request(kind, &args, parts) {
            Ok(r) => r,
            Err(message) => return Ok(internal_error(&message).into()),
        };
        if kind == ToolKind::GetAttachment {
            return Ok(self.attachment(rest_request).await.into());
        }
        if kind == ToolKind::AskPerson {
            match args.get("wait_seconds") {
                None | Some(Value::Null) => {}
                Some(wait) => {
                    let Some(wait) = wait.as_f64().filter(|w| w.is_finite() && *w >= 0.0) else {
                        return Ok(CallToolResult::structured_error(json!({"error": {
                            "code": ErrorCode::InvalidRequest.as_str(),
                            "message": "`wait_seconds` must be a non-negative number of seconds \
                                        (at most 25 are used)."
                        }}))
                        .into());
                    };
                    let asked = self.dispatch(rest_request).await;
                    return Ok(self.wait_for_answer(asked, &args, wait, parts).await.into());
                }
            }
        }
        Ok(self.dispatch(rest_request).await.into())
    }
}

impl McpServer {
    /// `get_attachment`: the REST download, in process; its bytes inline (an embedded resource)
    /// up to [`INLINE_MAX_BYTES`], else refused with the size and the REST URL.
    async fn attachment(&self, request: Request<Body>) -> CallToolResult {
        let path = request.uri().path().to_owned();
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let proto = request
            .headers()
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .filter(|p| *p == "https")
            .unwrap_or("http")
            .to_owned();
        let response = match self.rest.clone().oneshot(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        if !response.status().is_success() {
            return self.as_tool_result(response).await;
        }
        let (content_type, disposition) = {
            let headers = response.headers();
            let text = |name: header::HeaderName| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            (
                text(header::CONTENT_TYPE),
                text(header::CONTENT_DISPOSITION),
            )
        };
        let bytes = match response.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return internal_error(&format!("reading the attachment failed: {e}")),
        };
        let url = match host {
            Some(host) => format!("{proto}://{host}{path}"),
            None => path.clone(),
        };
        if bytes.len() > INLINE_MAX_BYTES {
            let code = ErrorCode::PayloadTooLarge;
            return CallToolResult::structured_error(json!({"error": {
                "code": code.as_str(),
                "message": format!(
                    "The attachment is {} bytes, more than the {INLINE_MAX_BYTES} an MCP result \
                     carries inline: download it with GET {url} and the header \
                     `Authorization: Bearer <read_token>`.",
                    bytes.len()
                ),
                "size": bytes.len(),
                "url": url,
            }}));
        }
        let filename = disposition
            .split_once("filename*=UTF-8''")
            .map(|(_, name)| percent_decode(name))
            .unwrap_or_else(|| "attachment".to_owned());
        let uri = format!("agentaddress:{path}");
        let mut result = CallToolResult::structured(json!({
            "filename": filename,
            "content_type": content_type,
            "size": bytes.len(),
            "sha256": hex::encode(Sha256::digest(&bytes)),
            "uri": uri,
        }));
        result.content.push(ContentBlock::resource(
            ResourceContents::blob(BASE64.encode(&bytes), uri).with_mime_type(content_type),
        ));
        result
    }

    /// `ask_person` with `wait_seconds`: the created request (`asked`), then its long poll; the
    /// result is the creation's answer (with the page's URL, shown only there) updated with the
    /// request as last read. A wait that fails leaves the creation's answer as it was.
    async fn wait_for_answer(
        &self, asked: CallToolResult, args: &rmcp::model::JsonObject, wait: f64,
        parts: Option<&Parts>,
    ) -> CallToolResult {
        if asked.is_error == Some(true) {
            return asked;
        }
        let Some(mut created) = asked.structured_content.clone() else {
            return asked;
        };
        let Some(id) = created["request"]["id"].as_str().map(str::to_owned) else {
            return asked;
        };
        let request = match request_wait(args, &id, wait.min(25.0), parts) {
            Ok(r) => r,
            Err(_) => return asked,
        };
        let waited = self.dispatch(request).await;
        if waited.is_error == Some(true) {
            return asked;
        }
        let fields = waited
            .structured_content
            .as_ref()
            .and_then(|v| v["request"].as_object().cloned());
        if let (Some(into), Some(from)) = (created["request"].as_object_mut(), fields) {
            into.extend(from);
        }
        CallToolResult::structured(created)
    }

    /// Runs the REST request in process and turns its answer into a tool result.
    async fn dispatch(&self, request: Request<Body>) -> CallToolResult {
        let response = match self.rest.clone().oneshot(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        self.as_tool_result(response).await
    }

    /// A REST answer (JSON) as a tool result: structured content, an error for a non-2xx.
    async fn as_tool_result(&self, response: Response) -> CallToolResult {
        let status = response.status();
        let bytes = match response.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return internal_error(&format!("reading the API's answer failed: {e}")),
        };
        let value = if bytes.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => v,
                Err(e) => return internal_error(&format!("the API's answer is not JSON: {e}")),
            }
        };
        if status.is_success() {
            CallToolResult::structured(value)
        } else {
            CallToolResult::structured_error(for_tool_callers(value))
        }
    }
}
