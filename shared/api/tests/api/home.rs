//! The front door (docs/API.md §13): `GET /` as a page for a browser and a JSON index for a
//! program, `GET /favicon.ico`, and `/inbox/` sent on to `/inbox`.

use http::{Method, StatusCode};

use crate::common::{get, req, TestApp};

/// What Chromium sends when it opens a page.
const BROWSER: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,\
    image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7";

#[tokio::test]
async fn a_browser_gets_a_page_naming_everything() {
    let t = TestApp::new();
    let r = t
        .send(
            get("/")
                .header("accept", BROWSER)
                .header("host", "example.test:8080"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("vary"), Some("Accept"));
    assert_eq!(
        r.header("content-security-policy"),
        Some(agentaddress_api::pages::CONTENT_SECURITY_POLICY)
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
    assert!(r.text.starts_with("<!DOCTYPE html>"), "{}", r.text);
    for href in [
        "/inbox",
        "/skill.md",
        "/openapi.json",
        "/llms-full.txt",
        "/assets/inbox.css",
    ] {
        assert!(r.text.contains(&format!("href=\"{href}\"")), "{href}");
    }
    assert!(
        r.text.contains(
            "claude mcp add --transport http agentaddress http://example.test:8080/api/mcp"
        ),
        "{}",
        r.text
    );
    assert!(r.text.contains(env!("CARGO_PKG_VERSION")));
    let html = r.text.to_ascii_lowercase();
    assert!(!html.contains("<script") && !html.contains("<style") && !html.contains(" style="));
}

#[tokio::test]
async fn a_program_gets_a_json_index_of_absolute_urls() {
    let t = TestApp::new();
    for accept in [
        None,
        Some("*/*"),
        Some("application/json"),
        Some("text/plain"),
    ] {
        let mut request = get("/").header("host", "example.test");
        if let Some(a) = accept {
            request = request.header("accept", a);
        }
        let r = t.send(request).await;
        let index = r.ok(StatusCode::OK);
        assert_eq!(r.header("vary"), Some("Accept"), "{accept:?}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        let at = |p: &str| format!("http://example.test{p}");
        assert_eq!(index["name"], "agentaddress");
        assert_eq!(index["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(index["api_root"], at("/api/v1"));
        let links = index["links"].as_object().expect("links");
        let expected = [
            ("inbox_viewer", "/inbox"),
            ("skill", "/skill.md"),
            ("openapi", "/openapi.json"),
            ("llms_full", "/llms-full.txt"),
            ("mcp", "/api/mcp"),
            ("well_known", "/.well-known/agentaddress.json"),
            ("health", "/healthz"),
        ];
        assert_eq!(links.len(), expected.len(), "{index}");
        for (name, path) in expected {
            assert_eq!(links[name], at(path), "{name}");
        }
    }
}

/// Every link of the index but MCP's (a POST endpoint) answers 200 here.
#[tokio::test]
async fn the_index_links_answer() {
    let t = TestApp::new();
    let r = t.send(get("/").header("host", "example.test")).await;
    let links = r.ok(StatusCode::OK)["links"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (name, url) in links {
        let path = url
            .as_str()
            .and_then(|u| u.strip_prefix("http://example.test"))
            .unwrap_or_else(|| panic!("{name}: {url}"))
            .to_owned();
        if name == "mcp" {
            continue;
        }
        let r = t.send(get(path.as_str())).await;
        assert_eq!(r.status, StatusCode::OK, "{name} {path}");
    }
}

#[tokio::test]
async fn head_and_other_methods_of_the_front_door() {
    let t = TestApp::new();
    let r = t.send(req(Method::HEAD, "/")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.is_empty());
    for method in [Method::POST, Method::PUT, Method::DELETE] {
        for path in ["/", "/favicon.ico"] {
            let r = t.send(req(method.clone(), path)).await;
            r.err(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
            assert_eq!(r.header("allow"), Some("GET,HEAD"), "{method} {path}");
        }
    }
}

#[tokio::test]
async fn the_favicon_is_a_cacheable_icon() {
    let t = TestApp::new();
    let r = t.send(get("/favicon.ico")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), Some("image/x-icon"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=86400"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    // An ICO header (reserved 0, type 1) and at least one image, not JSON.
    assert!(
        r.text.starts_with("\0\0\u{1}\0"),
        "{:?}",
        r.text.chars().take(4).collect::<String>()
    );
    assert!(r.json.is_null());
}

#[tokio::test]
async fn inbox_with_a_slash_is_sent_to_the_inbox() {
    let t = TestApp::new();
    for method in [Method::GET, Method::HEAD] {
        let r = t.send(req(method.clone(), "/inbox/")).await;
        assert_eq!(r.status, StatusCode::PERMANENT_REDIRECT, "{method}");
        assert_eq!(r.header("location"), Some("/inbox"), "{method}");
    }
    let r = t.send(req(Method::POST, "/inbox/")).await;
    r.err(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    // Only that one: other paths with a slash are unknown, as before.
    t.send(get("/skill.md/"))
        .await
        .err(StatusCode::NOT_FOUND, "not_found");
}
