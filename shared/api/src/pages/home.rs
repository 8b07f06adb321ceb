//! The server's front door (docs/API.md §13): `GET /` — a small page for a person (a browser,
//! whose `Accept` prefers `text/html`) or a JSON index for a program (anything else) —,
//! `GET /favicon.ico`, and `/inbox/`, which sends a browser on to `/inbox`.
//!
//! The page is rendered with `maud` (every interpolated value is escaped), uses the inbox
//! viewer's style sheet and has no script, so it works under [`super::CONTENT_SECURITY_POLICY`].

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode};
use maud::{html, Markup, DOCTYPE};
use serde::Serialize;

use super::with_security_headers;
use crate::extract::base_url;
use crate::{ApiError, AppState, MCP_PATH};

/// A white envelope on a blue rounded square, 16×16 and 32×32 PNGs in one ICO
/// (`scripts/make-favicon.py` writes it).
const FAVICON: &[u8] = include_bytes!("assets/favicon.ico");

/// `GET /` for a program: what this server is and where everything is.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServiceIndex {
    /// Always `agentaddress`.
    pub name: String,
    /// The server's version.
    pub version: String,
    /// The REST API's root: the base URL and `/api/v1`.
    pub api_root: String,
    pub links: ServiceLinks,
}

/// Absolute URLs of this server's documents and endpoints.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ServiceLinks {
    /// The inbox viewer, for a person (`/inbox`).
    pub inbox_viewer: String,
    /// Instructions for an agent (`/skill.md`).
    pub skill: String,
    /// The OpenAPI document (`/openapi.json`).
    pub openapi: String,
    /// The whole API in Markdown (`/llms-full.txt`).
    pub llms_full: String,
    /// The MCP endpoint (`POST /api/mcp`).
    pub mcp: String,
    /// The discovery document (`/.well-known/agentaddress.json`).
    pub well_known: String,
    /// The health check (`/healthz`).
    pub health: String,
}

/// The index of the server at `base`.
pub fn index(base: &str) -> ServiceIndex {
    ServiceIndex {
        name: "agentaddress".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        api_root: format!("{base}/api/v1"),
        links: ServiceLinks {
            inbox_viewer: format!("{base}/inbox"),
            skill: format!("{base}/skill.md"),
            openapi: format!("{base}/openapi.json"),
            llms_full: format!("{base}/llms-full.txt"),
            mcp: format!("{base}{MCP_PATH}"),
            well_known: format!("{base}/.well-known/agentaddress.json"),
            health: format!("{base}/healthz"),
        },
    }
}

/// The weight (`q`) `accept` gives the media type `kind/sub`: that of its most specific range
/// that matches (`kind/sub`, then `kind/*`, then `*/*`), 0 when none does. A `q` that does not
/// parse counts as 1; parameters other than `q` are ignored.
fn weight(accept: &str, kind: &str, sub: &str) -> f32 {
    let mut best: Option<(u8, f32)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let (t, s) = media.split_once('/').unwrap_or((media, ""));
        let specificity = if t.eq_ignore_ascii_case(kind) && s.eq_ignore_ascii_case(sub) {
            2
        } else if t.eq_ignore_ascii_case(kind) && s == "*" {
            1
        } else if t == "*" && s == "*" {
            0
        } else {
            continue;
        };
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, v)| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if best.is_none_or(|(known, _)| specificity > known) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

/// Whether the request's `Accept` prefers HTML to JSON (as a browser's does:
/// `text/html,…,*/*;q=0.8`). No `Accept`, `*/*`, or both alike: JSON.
pub fn prefers_html(headers: &HeaderMap) -> bool {
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let html = weight(&accept, "text", "html");
    html > 0.0 && html > weight(&accept, "application", "json")
}

/// The page of the server at `base`.
pub fn page(base: &str) -> Markup {
    let s = index(base);
    let mcp_command = format!(
        "claude mcp add --transport http agentaddress {}",
        s.links.mcp
    );
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { "agentaddress" }
                link rel="icon" href="/favicon.ico";
                link rel="stylesheet" href="/assets/inbox.css";
            }
            body {
                header { h1 { "agentaddress" } }
                main {
                    p {
                        "This server gives AI agents durable return addresses. An agent creates \
                         an address and hands its inbox URL to a webhook sender, or its email \
                         address to a person; a later run reads everything that arrived from one \
                         ordered feed, acknowledges what it handled, and keeps a little JSON state."
                    }
                    p {
                        "Creating an address needs no account: its read token, shown once, is the \
                         key to its feed and state. The REST API's root is "
                        code { (s.api_root) } "."
                    }
                    h2 { "For people" }
                    ul {
                        li {
                            a href="/inbox" { "Inbox viewer" }
                            " — read an address's feed, mail and state live, with its id and read token."
                        }
                    }
                    h2 { "For agents" }
                    ul {
                        li { a href="/skill.md" { "skill.md" } " — instructions for an agent." }
                        li {
                            a href="/llms-full.txt" { "llms-full.txt" }
                            " — the whole API in one Markdown file, for a language model."
                        }
                        li { a href="/openapi.json" { "openapi.json" } " — the OpenAPI 3.1 description." }
                        li {
                            a href="/.well-known/agentaddress.json" { "agentaddress.json" }
                            " — where everything is: the API's root, version, limits and features."
                        }
                    }
                    h2 { "MCP" }
                    p {
                        "The API as MCP tools (Streamable HTTP) at " code { (s.links.mcp) }
                        ". To add it to Claude Code:"
                    }
                    pre { code { (mcp_command) } }
                }
                footer {
                    p { "agentaddress " (s.version) " · " a href="/healthz" { "health" } }
                }
            }
        }
    }
}

/// Both variants of `/` vary with `Accept`; like the discovery documents they are kept for
/// five minutes.
fn negotiated(content_type: &'static str, body: Vec<u8>) -> Response {
    with_security_headers(
        (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (header::VARY, HeaderValue::from_static("Accept")),
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
    get, path = "/", tag = "service",
    responses((status = 200, description = "What this server is: a page for a person when `Accept` prefers `text/html` (a browser), else this index with absolute URLs. `Vary: Accept`.",
        content((ServiceIndex = "application/json"), (String = "text/html"))))
)]
pub async fn home(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let base = base_url(&state, &headers);
    if prefers_html(&headers) {
        return Ok(negotiated(
            "text/html; charset=utf-8",
            page(&base).into_string().into_bytes(),
        ));
    }
    let body = serde_json::to_vec_pretty(&index(&base))
        .map_err(|e| ApiError::Internal(format!("cannot serialize the index: {e}")))?;
    Ok(negotiated(crate::JSON_CONTENT_TYPE, body))
}

#[utoipa::path(
    get, path = "/favicon.ico", tag = "service",
    responses((status = 200, description = "The server's icon", content_type = "image/x-icon"))
)]
pub async fn favicon() -> Result<Response, ApiError> {
    Ok(with_security_headers(
        (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("image/x-icon"),
                ),
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=86400"),
                ),
            ],
            FAVICON,
        )
            .into_response(),
    ))
}

/// `/inbox/` (a typed or pasted URL with a slash at the end): 308 to `/inbox`. Not in
/// `/openapi.json`: it is no operation of the API.
pub async fn inbox_slash() -> Response {
    with_security_headers(
        (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, HeaderValue::from_static("/inbox"))],
        )
            .into_response(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(header::ACCEPT, v);
        }
        h
    }

    #[test]
    fn browsers_get_the_page_and_programs_the_index() {
        for browser in [
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,\
             image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7",
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
            "text/html",
            "TEXT/HTML; charset=utf-8",
            "text/*",
            "application/json;q=0.5, text/html",
        ] {
            assert!(prefers_html(&accept(browser)), "{browser}");
        }
        for program in [
            "",
            "*/*",
            "application/json",
            "text/html, application/json",
            "text/html;q=0.5, application/json",
            "text/html;q=0, */*",
            "text/plain",
            "text/html;q=nonsense, application/json;q=nonsense",
        ] {
            assert!(!prefers_html(&accept(program)), "{program:?}");
        }
        assert!(!prefers_html(&HeaderMap::new()), "no Accept");
    }

    #[test]
    fn the_page_escapes_the_base_and_names_every_link() {
        let html = page("https://a.test/<script>&\"").into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("https://a.test/&lt;script&gt;&amp;&quot;/api/mcp"));
        assert!(html.contains(
            "claude mcp add --transport http agentaddress https://a.test/&lt;script&gt;&amp;&quot;/api/mcp"
        ));
        for href in [
            "/inbox",
            "/skill.md",
            "/openapi.json",
            "/llms-full.txt",
            "/.well-known/agentaddress.json",
            "/healthz",
            "/assets/inbox.css",
            "/favicon.ico",
        ] {
            assert!(html.contains(&format!("href=\"{href}\"")), "{href}");
        }
        assert!(html.contains(env!("CARGO_PKG_VERSION")));
        let lower = html.to_ascii_lowercase();
        assert!(
            !lower.contains("<script") && !lower.contains("<style") && !lower.contains(" style=")
        );
    }

    /// The icon is an ICO whose every image is a PNG of the size its entry says, inside the file.
    #[test]
    fn the_favicon_is_an_ico_of_pngs() {
        let u16_at = |i: usize| u16::from_le_bytes([FAVICON[i], FAVICON[i + 1]]);
        let u32_at = |i: usize| {
            u32::from_le_bytes([FAVICON[i], FAVICON[i + 1], FAVICON[i + 2], FAVICON[i + 3]])
        };
        assert_eq!((u16_at(0), u16_at(2)), (0, 1), "an icon resource");
        let count = usize::from(u16_at(4));
        assert!(count >= 1);
        let mut sizes = Vec::new();
        for n in 0..count {
            let entry = 6 + 16 * n;
            let side = u32::from(FAVICON[entry]);
            let (len, offset) = (u32_at(entry + 8) as usize, u32_at(entry + 12) as usize);
            assert!(
                offset + len <= FAVICON.len(),
                "image {n} is inside the file"
            );
            let png = &FAVICON[offset..offset + len];
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "image {n} is a PNG");
            let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
            assert_eq!(width, side, "image {n}");
            sizes.push(side);
        }
        assert!(sizes.contains(&16) && sizes.contains(&32), "{sizes:?}");
        assert!(FAVICON.len() < 4096);
    }
}
