//! §8 of docs/API.md, service routes (`/healthz`, `/openapi.json`, `/skill.md`), and unknown
//! routes and wrong methods answering 404 / 405 in JSON.

use http::{Method, StatusCode};
use serde_json::json;

use crate::common::{get, req, TestApp, CREATE};

#[tokio::test]
async fn healthz_reports_ok_and_the_store() {
    let t = TestApp::new();
    let r = t.send(get("/healthz")).await;
    let b = r.ok(StatusCode::OK);
    assert_eq!(b["status"], "ok");
    assert_eq!(b["store"], "sqlite");
    assert!(b["version"].as_str().is_some_and(|v| !v.is_empty()), "{b}");
}

#[tokio::test]
async fn openapi_describes_every_route() {
    let t = TestApp::new();
    let r = t.send(get("/openapi.json")).await;
    let doc = r.ok(StatusCode::OK);
    let version = doc["openapi"].as_str().expect("openapi version");
    assert!(version.starts_with("3.1"), "{version}");
    let paths = doc["paths"].as_object().expect("paths");
    let expected: &[(&str, &[&str])] = &[
        ("/api/v1/addresses", &["post"]),
        ("/api/v1/addresses/{address_id}", &["get", "delete"]),
        ("/api/v1/inbox/{address_id}/{inbox_secret}", &["post"]),
        (
            "/api/v1/addresses/{address_id}/verification",
            &["put", "delete"],
        ),
        (
            "/api/v1/addresses/{address_id}/email/policy",
            &["put", "delete"],
        ),
        ("/api/v1/addresses/{address_id}/events", &["get"]),
        ("/api/v1/addresses/{address_id}/events/stream", &["get"]),
        ("/api/v1/addresses/{address_id}/events/{event_id}", &["get"]),
        (
            "/api/v1/addresses/{address_id}/events/{event_id}/ack",
            &["post"],
        ),
        ("/api/v1/addresses/{address_id}/state", &["get"]),
        (
            "/api/v1/addresses/{address_id}/state/{key}",
            &["get", "put", "delete"],
        ),
        ("/api/v1/addresses/{address_id}/email/replay", &["post"]),
        (
            "/api/v1/addresses/{address_id}/events/{event_id}/attachments/{attachment_id}",
            &["get"],
        ),
        (
            "/api/v1/addresses/{address_id}/events/{event_id}/raw",
            &["get"],
        ),
        ("/api/v1/email/inbound", &["post"]),
        ("/api/v1/addresses/{address_id}/requests", &["post"]),
        (
            "/api/v1/addresses/{address_id}/requests/{request_id}",
            &["get"],
        ),
        ("/r/{request_id}/{secret}", &["get", "post"]),
        (
            "/api/v1/addresses/{address_id}/email/contacts",
            &["get", "post"],
        ),
        ("/api/v1/addresses/{address_id}/email/send", &["post"]),
        ("/api/v1/addresses/{address_id}/viewer-codes", &["post"]),
        ("/api/v1/viewer-codes/redeem", &["post"]),
        ("/api/v1/addresses/{address_id}/hooks", &["post", "get"]),
        (
            "/api/v1/addresses/{address_id}/hooks/{hook_id}",
            &["put", "delete"],
        ),
        (
            "/api/v1/addresses/{address_id}/hooks/{hook_id}/test",
            &["post"],
        ),
        ("/api/v1/addresses/{address_id}/timers", &["post", "get"]),
        (
            "/api/v1/addresses/{address_id}/timers/{timer_id}",
            &["delete"],
        ),
        ("/r/page.css", &["get"]),
        ("/r/page.js", &["get"]),
        ("/", &["get"]),
        ("/favicon.ico", &["get"]),
        ("/healthz", &["get"]),
        ("/openapi.json", &["get"]),
        ("/skill.md", &["get"]),
        ("/inbox", &["get"]),
        ("/assets/inbox.js", &["get"]),
        ("/assets/inbox.css", &["get"]),
        ("/llms-full.txt", &["get"]),
        ("/.well-known/agentaddress.json", &["get"]),
    ];
    for (path, methods) in expected {
        let item = paths
            .get(*path)
            .unwrap_or_else(|| panic!("{path} missing from /openapi.json"));
        for m in *methods {
            assert!(item.get(*m).is_some(), "{m} {path} missing");
        }
    }
    assert_eq!(paths.len(), expected.len(), "{:?}", paths.keys());
}

#[tokio::test]
async fn skill_md_names_the_essentials() {
    let t = TestApp::new();
    let r = t
        .send(get("/skill.md").header("host", "example.test"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let ct = r.header("content-type").unwrap_or("");
    assert!(ct.starts_with("text/markdown"), "{ct}");
    for needle in [
        "http://example.test/api/v1/addresses",
        "read_token",
        "next_cursor",
        "ack",
    ] {
        assert!(r.text.contains(needle), "skill.md lacks {needle}");
    }
    assert!(!r.text.contains("{base}"), "unreplaced placeholder");
}

#[tokio::test]
async fn unknown_routes_are_404_json() {
    let t = TestApp::new();
    let a = t.create().await;
    for (method, path) in [
        (Method::GET, "/nope".to_owned()),
        (Method::GET, "/inbox/x".to_owned()),
        (Method::GET, "/api/v1".to_owned()),
        (Method::GET, "/api/v2/addresses".to_owned()),
        (Method::POST, "/api/v1/inbox".to_owned()),
        (Method::GET, format!("{}/unknown", a.root)),
        (Method::GET, format!("{}/events/x/y/z", a.root)),
        (Method::POST, format!("{}/extra", a.inbox)),
    ] {
        let r = t.send(req(method.clone(), &path).bearer(&a.token)).await;
        assert_eq!(
            r.status,
            StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            r.text
        );
        r.err(StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn wrong_methods_are_405_json() {
    let t = TestApp::new();
    let a = t.create().await;
    let (event_id, _) = t.deliver_ok(&a, &json!({})).await;
    for (method, path) in [
        (Method::GET, CREATE.to_owned()),
        (Method::DELETE, CREATE.to_owned()),
        (Method::PUT, a.root.clone()),
        (Method::POST, a.root.clone()),
        (Method::PATCH, a.root.clone()),
        (Method::PUT, a.inbox.clone()),
        (Method::DELETE, a.inbox.clone()),
        (Method::POST, a.events()),
        (Method::DELETE, a.event(&event_id)),
        (Method::POST, a.event(&event_id)),
        (Method::GET, a.ack(&event_id)),
        (Method::POST, a.state()),
        (Method::DELETE, a.state()),
        (Method::POST, a.key("k")),
        (Method::PATCH, a.key("k")),
        (Method::POST, "/healthz".to_owned()),
        (Method::DELETE, "/openapi.json".to_owned()),
        (Method::PUT, "/skill.md".to_owned()),
        (Method::POST, "/inbox".to_owned()),
        (Method::DELETE, "/llms-full.txt".to_owned()),
    ] {
        let r = t.send(req(method.clone(), &path).bearer(&a.token)).await;
        assert_eq!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}: {}",
            r.text
        );
        r.err(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    }
    // Nothing was changed by the refused requests.
    let d = t.inspect(&a).await;
    assert_eq!(d["usage"]["last_sequence"], 1);
    assert_eq!(d["usage"]["state_keys"], 0);
}
