//! `/llms-full.txt`: `/skill.md`, then every operation of `/openapi.json` rendered as Markdown
//! (method, path, summary, parameters, request body, responses with their error codes), the
//! error catalogue and the schemas. Rendered from the OpenAPI document itself, so the two
//! cannot disagree.

use std::fmt::Write;

use serde_json::Value;

use crate::error::ErrorCode;
use crate::openapi::{ERROR_CODES_EXTENSION, SKILL_MD};
use crate::openapi_document as document;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The whole API of the server at `base`, in Markdown.
pub fn llms_full(base: &str) -> String {
    let doc = serde_json::to_value(document(base)).unwrap_or(Value::Null);
    let mut out = SKILL_MD.replace("{base}", base);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    let version = doc["info"]["version"].as_str().unwrap_or("");
    let _ = write!(
        out,
        "\n---\n\n# API reference\n\nEvery operation of `{base}/openapi.json` (OpenAPI {}, \
         agentaddress {version}). Paths are under `{base}`. `bearer` means \
         `Authorization: Bearer {{read_token}}`. Every error answer is \
         `{{\"error\": {{\"code\", \"message\"}}}}`; the codes are listed after the operations. \
         A person can read an address's feed at `{base}/inbox`.\n",
        doc["openapi"].as_str().unwrap_or("3.1")
    );
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                operation(&mut out, method, path, op);
            }
        }
    }
    out.push_str("\n## Error codes\n\n| code | HTTP | meaning |\n|---|---|---|\n");
    for code in ErrorCode::ALL {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            code.as_str(),
            code.status().as_u16(),
            code.default_message()
        );
    }
    out.push_str("\n## Schemas\n\nThe `$ref`s above name these (JSON Schema).\n");
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let _ = write!(out, "\n### {name}\n\n{}", json_block(schema));
    }
    out
}

fn operation(out: &mut String, method: &str, path: &str, op: &Value) {
    let _ = write!(out, "\n## {} {path}\n\n", method.to_uppercase());
    for field in ["summary", "description"] {
        if let Some(text) = op[field].as_str().filter(|t| !t.is_empty()) {
            let _ = write!(out, "{text}\n\n");
        }
    }
    let auth = match op["security"][0].as_object().and_then(|s| s.keys().next()) {
        Some(scheme) if scheme == "ingest" => "the operator's ingest secret (bearer)",
        Some(_) => "bearer (the address's read token)",
        None => "none",
    };
    let _ = writeln!(
        out,
        "Operation `{}`; authentication: {auth}.",
        op["operationId"].as_str().unwrap_or("")
    );
    let params: Vec<&Value> = op["parameters"].as_array().into_iter().flatten().collect();
    if !params.is_empty() {
        out.push_str("\nParameters:\n");
        for p in params {
            let schema = &p["schema"];
            let mut line = format!(
                "- `{}` ({}, {}, {})",
                p["name"].as_str().unwrap_or(""),
                p["in"].as_str().unwrap_or(""),
                if p["required"] == Value::Bool(true) {
                    "required"
                } else {
                    "optional"
                },
                schema["type"].as_str().unwrap_or("any"),
            );
            if let Some(pattern) = schema["pattern"].as_str() {
                let _ = write!(line, ", pattern `{pattern}`");
            }
            if let Some(d) = p["description"].as_str() {
                let _ = write!(line, ": {d}");
            }
            let _ = writeln!(out, "{line}");
        }
    }
    if let Some(body) = op["requestBody"].as_object() {
        let required = body.get("required") == Some(&Value::Bool(true));
        let _ = write!(
            out,
            "\nRequest body ({}){}\n",
            if required { "required" } else { "optional" },
            body.get("description")
                .and_then(Value::as_str)
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        );
        for (ct, content) in body
            .get("content")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            match schema_name(&content["schema"]) {
                Some(name) => {
                    let _ = writeln!(out, "\n`{ct}`: the schema `{name}` (under Schemas).");
                }
                None => {
                    let _ = write!(out, "\n`{ct}`:\n\n{}", json_block(&content["schema"]));
                }
            }
        }
    }
    out.push_str("\nResponses:\n");
    for (status, r) in op["responses"].as_object().into_iter().flatten() {
        let mut line = format!("- `{status}`");
        if let Some(d) = r["description"].as_str().filter(|d| !d.is_empty()) {
            let _ = write!(line, " {d}");
        }
        for (ct, content) in r["content"].as_object().into_iter().flatten() {
            let schema = schema_name(&content["schema"])
                .map(|s| format!(" → `{s}`"))
                .unwrap_or_default();
            let _ = write!(line, " (`{ct}`{schema})");
        }
        if let Some(codes) = r[ERROR_CODES_EXTENSION].as_array() {
            let codes: Vec<String> = codes
                .iter()
                .filter_map(Value::as_str)
                .map(|c| format!("`{c}`"))
                .collect();
            let codes = codes.join(", ");
            // A response the annotations left undescribed is described by its codes already.
            if r["description"].as_str() != Some(codes.as_str()) {
                let _ = write!(line, "; codes: {codes}");
            }
        }
        if r["headers"].get("Retry-After").is_some() {
            line.push_str("; with `Retry-After`");
        }
        let _ = writeln!(out, "{line}");
    }
}

/// The component a schema refers to, when it is only a reference.
fn schema_name(schema: &Value) -> Option<&str> {
    schema["$ref"].as_str().and_then(|s| s.rsplit('/').next())
}

fn json_block(v: &Value) -> String {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    format!("```json\n{text}\n```\n")
}
