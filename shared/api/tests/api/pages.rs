//! The pages and discovery documents (docs/API.md §13): security headers on every page, asset
//! and document, revalidation, and discovery generated from the same sources as `/openapi.json`
//! and `/skill.md`.

use http::StatusCode;
use serde_json::Value;

use crate::common::{get, TestApp};

const PAGES: [(&str, &str); 5] = [
    ("/inbox", "text/html; charset=utf-8"),
    ("/assets/inbox.js", "text/javascript; charset=utf-8"),
    ("/assets/inbox.css", "text/css; charset=utf-8"),
    ("/llms-full.txt", "text/markdown; charset=utf-8"),
    (
        "/.well-known/agentaddress.json",
        "application/json; charset=utf-8",
    ),
];

#[tokio::test]
async fn every_page_asset_and_document_carries_the_security_headers() {
    let t = TestApp::new();
    for (path, content_type) in PAGES {
        let r = t.send(get(path)).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text);
        assert_eq!(r.header("content-type"), Some(content_type), "{path}");
        let csp = r.header("content-security-policy").unwrap_or("");
        assert!(
            csp.starts_with("default-src 'self'; frame-ancestors 'none'"),
            "{path}: {csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{path}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert!(r.header("cache-control").is_some(), "{path}");
        assert!(!r.text.is_empty(), "{path}");
    }
}

#[tokio::test]
async fn embedded_files_are_revalidated_with_their_etag() {
    let t = TestApp::new();
    for (path, _) in &PAGES[..3] {
        let r = t.send(get(*path)).await;
        assert_eq!(r.header("cache-control"), Some("no-cache"), "{path}");
        let etag = r
            .header("etag")
            .unwrap_or_else(|| panic!("{path}: ETag"))
            .to_owned();
        let again = t.send(get(*path).header("if-none-match", &etag)).await;
        assert_eq!(again.status, StatusCode::NOT_MODIFIED, "{path}");
        assert!(again.text.is_empty(), "{path}: a 304 has no body");
        assert_eq!(
            again.header("content-security-policy"),
            r.header("content-security-policy"),
            "{path}"
        );
        let other = t.send(get(*path).header("if-none-match", "\"0\"")).await;
        assert_eq!(other.status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn llms_full_is_skill_md_then_every_operation_of_openapi() {
    let t = TestApp::new();
    let skill = t
        .send(get("/skill.md").header("host", "example.test"))
        .await;
    let llms = t
        .send(get("/llms-full.txt").header("host", "example.test"))
        .await;
    assert!(llms.text.starts_with(&skill.text), "skill.md comes first");
    let doc = t.send(get("/openapi.json")).await;
    let mut operations = 0;
    for (path, item) in doc.json["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let heading = format!("\n## {} {path}\n", method.to_uppercase());
            let at = llms
                .text
                .find(&heading)
                .unwrap_or_else(|| panic!("llms-full.txt lacks {heading:?}"));
            let section = &llms.text[at + heading.len()..];
            let section = &section[..section.find("\n## ").unwrap_or(section.len())];
            let id = op["operationId"].as_str().expect("operationId");
            assert!(section.contains(&format!("Operation `{id}`")), "{heading}");
            for content in op["requestBody"]["content"]
                .as_object()
                .into_iter()
                .flatten()
            {
                let schema = &content.1["schema"];
                let named = schema["$ref"].as_str().and_then(|r| r.rsplit('/').next());
                let shown = named.map_or_else(|| schema.to_string(), |n| format!("`{n}`"));
                assert!(
                    named.is_none() || section.contains(&shown),
                    "{heading}: request body {shown}"
                );
            }
            for status in op["responses"].as_object().expect("responses").keys() {
                assert!(
                    section.contains(&format!("- `{status}`")),
                    "{heading}: {status}"
                );
            }
            for code in op["responses"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, r)| r["x-error-codes"].as_array())
                .flatten()
            {
                let code = code.as_str().expect("code");
                assert!(section.contains(&format!("`{code}`")), "{heading}: {code}");
            }
            operations += 1;
        }
    }
    assert_eq!(operations, 50);
    for schema in doc.json["components"]["schemas"]
        .as_object()
        .expect("schemas")
        .keys()
    {
        assert!(
            llms.text.contains(&format!("\n### {schema}\n")),
            "llms-full.txt lacks the schema {schema}"
        );
    }
    assert!(llms.text.contains("| `attachment_unavailable` | 410 |"));
    assert!(llms.text.contains("http://example.test/inbox"));
    assert!(!llms.text.contains("{base}"));
}

#[tokio::test]
async fn the_well_known_document_says_where_everything_is() {
    let t = TestApp::new();
    let a = t.create().await;
    let r = t
        .send(get("/.well-known/agentaddress.json").header("host", "example.test"))
        .await;
    let w = r.ok(StatusCode::OK);
    let at = |p: &str| format!("http://example.test{p}");
    assert_eq!(w["api_base"], at("/api/v1"));
    assert_eq!(w["openapi"], at("/openapi.json"));
    assert_eq!(w["skill"], at("/skill.md"));
    assert_eq!(w["mcp"], at("/api/mcp"));
    assert_eq!(w["llms_full"], at("/llms-full.txt"));
    assert_eq!(w["inbox"], at("/inbox"));
    assert_eq!(w["version"], env!("CARGO_PKG_VERSION"));
    let inspected = t.inspect(&a).await;
    assert_eq!(
        w["limits"], inspected["limits"],
        "the limits of GET {{root}}"
    );
    let email = inspected["address"]["email"].as_str().expect("email");
    assert_eq!(
        w["email_domain"].as_str().map(|d| format!("@{d}")),
        email.find('@').map(|i| email[i..].to_owned())
    );
    let features: Vec<&str> = w["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for f in [
        "event_stream",
        "webhooks",
        "verified_webhooks",
        "long_polling",
        "state",
        "email",
        "mcp",
        "inbox_viewer",
    ] {
        assert!(features.contains(&f), "{f} in {features:?}");
    }
}
