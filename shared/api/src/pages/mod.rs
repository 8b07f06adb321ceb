//! Pages for people and discovery documents for machines (docs/API.md §13): `/` (a page or a
//! JSON index, [`home`]) and `/favicon.ico`, the inbox viewer (`/inbox`, one static HTML file,
//! one script, one style sheet, all embedded in the binary), `/llms-full.txt` and
//! `/.well-known/agentaddress.json`. The discovery documents are generated
//! from the same sources as `/skill.md` and `/openapi.json`, so they cannot drift from them.
//!
//! Every answer here carries the pages' security headers ([`SECURITY_HEADERS`]): the viewer
//! handles a read token, and everything it shows (events, state, mail) is untrusted.

mod home;
mod llms;
pub(crate) mod person_request;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Serialize;

use crate::domain::Limits;
use crate::extract::base_url;
use crate::{ApiError, AppState, MCP_PATH};

pub use home::{
    __path_favicon, __path_home, favicon, home, inbox_slash, index, prefers_html, ServiceIndex,
    ServiceLinks,
};
pub use llms::llms_full;

/// No inline script or style, nothing from another origin, never framed; no `<base>`, forms
/// post only here.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The headers of every page, asset and discovery document. `no-referrer`: a page's URL may one
/// day carry a secret, and the viewer's links must never tell another site where they came from.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
];

/// The headers of a person's page and its assets (docs/API.md §12): the pages' security
/// headers, and never stored (the page's URL carries the request's secret).
pub fn page_headers() -> impl Iterator<Item = (HeaderName, HeaderValue)> {
    SECURITY_HEADERS
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            )
        })
        .chain([(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))])
}

const INBOX_HTML: &str = include_str!("assets/inbox.html");
const INBOX_JS: &str = include_str!("assets/inbox.js");
const INBOX_CSS: &str = include_str!("assets/inbox.css");

/// The features this build serves, as `/.well-known/agentaddress.json` lists them.
pub const FEATURES: &[&str] = &[
    "webhooks",
    "verified_webhooks",
    "long_polling",
    "acks",
    "state",
    "email",
    "attachments",
    "mcp",
    "inbox_viewer",
    "llms_full",
];

/// A strong validator of embedded bytes (FNV-1a), computed at compile time.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// One embedded file: revalidated on every use (`no-cache`) and answered 304 when unchanged,
/// so a new deployment is picked up at once and an unchanged one costs no bytes.
fn embedded(headers: &HeaderMap, content_type: &'static str, body: &'static str) -> Response {
    let etag = format!("\"{:016x}\"", fnv1a(body.as_bytes()));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            body,
        )
            .into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_security_headers(response)
}

/// `response` with [`SECURITY_HEADERS`].
pub fn with_security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        h.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

/// Generated text: kept for five minutes by caches (it changes only with a deployment).
fn generated(content_type: &'static str, body: Vec<u8>) -> Response {
    with_security_headers(
        (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=300"),
                ),
            ],
            body,
        )
            .into_response(),
    )
}

#[utoipa::path(
    get, path = "/inbox", tag = "service",
    responses((status = 200, description = "The inbox viewer: a page where a person reads an address's feed, state and mail with its id and read token (kept in the page's session storage only)", content_type = "text/html"))
)]
pub async fn inbox_page(headers: HeaderMap) -> Result<Response, ApiError> {
    Ok(embedded(&headers, "text/html; charset=utf-8", INBOX_HTML))
}

#[utoipa::path(
    get, path = "/assets/inbox.js", tag = "service",
    responses((status = 200, description = "The inbox viewer's script", content_type = "text/javascript"))
)]
pub async fn inbox_js(headers: HeaderMap) -> Result<Response, ApiError> {
    Ok(embedded(
        &headers,
        "text/javascript; charset=utf-8",
        INBOX_JS,
    ))
}

#[utoipa::path(
    get, path = "/assets/inbox.css", tag = "service",
    responses((status = 200, description = "The inbox viewer's style sheet", content_type = "text/css"))
)]
pub async fn inbox_css(headers: HeaderMap) -> Result<Response, ApiError> {
    Ok(embedded(&headers, "text/css; charset=utf-8", INBOX_CSS))
}

/// `/.well-known/agentaddress.json`: where a client finds everything else.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Discovery {
    /// The REST API's root: the base URL and `/api/v1`.
    pub api_base: String,
    /// The server's version.
    pub version: String,
    /// The domain of the addresses' `email`.
    pub email_domain: String,
    pub limits: Limits,
    /// What this build serves.
    pub features: Vec<String>,
    /// The OpenAPI document (`/openapi.json`).
    pub openapi: String,
    /// Instructions for an agent (`/skill.md`).
    pub skill: String,
    /// The MCP endpoint (`/api/mcp`).
    pub mcp: String,
    /// The whole API in Markdown (`/llms-full.txt`).
    pub llms_full: String,
    /// The inbox viewer, for a person (`/inbox`).
    pub inbox: String,
}

/// The discovery document of the server at `base`.
pub fn discovery(state: &AppState, base: &str) -> Discovery {
    Discovery {
        api_base: format!("{base}/api/v1"),
        version: env!("CARGO_PKG_VERSION").into(),
        email_domain: state.config.email_domain.clone(),
        limits: state.config.limits.clone(),
        features: FEATURES
            .iter()
            .copied()
            // Where streams are served (not on Lambda, docs/API.md §14).
            .chain(state.streams.map(|_| "event_stream"))
            .map(str::to_owned)
            .collect(),
        openapi: format!("{base}/openapi.json"),
        skill: format!("{base}/skill.md"),
        mcp: format!("{base}{MCP_PATH}"),
        llms_full: format!("{base}/llms-full.txt"),
        inbox: format!("{base}/inbox"),
    }
}

#[utoipa::path(
    get, path = "/.well-known/agentaddress.json", tag = "service",
    responses((status = 200, description = "Where everything is: the API's root, the documents, the limits and the features of this server", body = Discovery))
)]
pub async fn well_known(
    State(state): State<AppState>, headers: HeaderMap,
) -> Result<Response, ApiError> {
    let base = base_url(&state, &headers);
    let body = serde_json::to_vec_pretty(&discovery(&state, &base))
        .map_err(|e| ApiError::Internal(format!("cannot serialize the discovery document: {e}")))?;
    Ok(generated(crate::JSON_CONTENT_TYPE, body))
}

#[utoipa::path(
    get, path = "/llms-full.txt", tag = "service",
    responses((status = 200, description = "The whole API for a language model, in Markdown: /skill.md followed by every operation of /openapi.json", content_type = "text/markdown"))
)]
pub async fn llms_full_txt(
    State(state): State<AppState>, headers: HeaderMap,
) -> Result<Response, ApiError> {
    let base = base_url(&state, &headers);
    Ok(generated(
        "text/markdown; charset=utf-8",
        llms_full(&base).into_bytes(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Untrusted bytes reach the DOM only as text: no API that parses a string as markup or
    /// code appears in the script.
    #[test]
    fn the_script_never_parses_strings_as_markup_or_code() {
        for forbidden in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "Function(",
            "DOMParser",
            "createContextualFragment",
            "srcdoc",
            "setTimeout(\"",
            "localStorage",
            "document.cookie",
        ] {
            assert!(!INBOX_JS.contains(forbidden), "inbox.js uses {forbidden}");
        }
        assert!(
            INBOX_JS.contains("sessionStorage"),
            "the token is kept per tab"
        );
    }

    #[test]
    fn the_page_has_no_inline_script_or_style_and_weighs_under_50_kb() {
        let html = INBOX_HTML.to_ascii_lowercase();
        assert_eq!(html.matches("<script").count(), 1, "one script");
        assert!(html.contains("<script src=\"/assets/inbox.js\" defer></script>"));
        assert!(!html.contains("<style") && !html.contains(" style="));
        for input in html.split("<input").skip(1) {
            let tag = &input[..input.find('>').unwrap_or(input.len())];
            assert!(
                !tag.contains(" name="),
                "no named field: without the script a submit sends nothing: {tag}"
            );
        }
        let weight = INBOX_HTML.len() + INBOX_JS.len() + INBOX_CSS.len();
        assert!(weight <= 50 * 1024, "HTML + JS + CSS = {weight} bytes");
    }

    #[test]
    fn etags_differ_with_the_bytes() {
        assert_ne!(fnv1a(INBOX_JS.as_bytes()), fnv1a(INBOX_CSS.as_bytes()));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
