//! `RouteGroup::endpoints` (the route table that deployment files are checked against) is
//! exactly what the router serves: each endpoint reaches a handler of its own group, and every
//! other method of its path is 405. Here, beside the MCP crate, because the whole router —
//! MCP's group included — is assembled by `agentaddress_mcp::router_for`.

use std::sync::Arc;

use agentaddress_api::{ApiConfig, AppState, RouteGroup};
use agentaddress_core::domain::Limits;
use agentaddress_sqlite::SqliteStore;
use axum::body::Body;
use http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;

fn concrete(path: &str) -> String {
    path.replace("{address_id}", "addr_x")
        .replace("{inbox_secret}", "ais_x")
        .replace("{event_id}", "evt_x")
        .replace("{key}", "k")
}

async fn error_code(app: &axum::Router, method: &str, path: &str) -> (u16, String) {
    let req = Request::builder()
        .method(method)
        .uri(concrete(path))
        .body(Body::empty())
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("answer");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let message = json["error"]["message"].as_str().unwrap_or("").to_owned();
    (status, message)
}

#[tokio::test]
async fn endpoints_are_exactly_what_each_group_routes() {
    let store = Arc::new(SqliteStore::open_in_memory().expect("store"));
    let config = ApiConfig {
        public_url: None,
        email_domain: "x.test".into(),
        limits: Limits::default(),
        email_ingest_secret_hash: None,
        poll_checks: Default::default(),
        max_waiting_polls: 0,
    };
    let state = AppState::new(store, config);
    let mut seen = std::collections::BTreeSet::new();
    for group in RouteGroup::ALL {
        let app = agentaddress_mcp::router_for(&[group], state.clone());
        for (method, path) in group.endpoints() {
            assert!(
                seen.insert((method, path.clone())),
                "{method} {path} is listed twice"
            );
            let (status, message) = error_code(&app, method, &path).await;
            assert_ne!(
                message, "No such route.",
                "{method} {path} is not routed in {group:?}"
            );
            assert_ne!(status, 405, "{method} {path} is not routed in {group:?}");
            for other in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
                if group
                    .endpoints()
                    .iter()
                    .any(|(m, p)| *m == other && *p == path)
                {
                    continue;
                }
                let (status, _) = error_code(&app, other, &path).await;
                assert_eq!(status, 405, "{other} {path} should be 405 in {group:?}");
            }
        }
        let others: Vec<_> = RouteGroup::ALL.iter().filter(|g| **g != group).collect();
        for g in others {
            for (method, path) in g.endpoints() {
                if group.endpoints().iter().any(|(_, p)| *p == path) {
                    continue;
                }
                let (status, _) = error_code(&app, method, &path).await;
                assert_eq!(status, 404, "{method} {path} leaks into {group:?}");
            }
        }
    }
    let names: std::collections::BTreeSet<_> =
        RouteGroup::ALL.iter().map(|g| g.function_name()).collect();
    assert_eq!(names.len(), RouteGroup::ALL.len());
}

/// The `service` function's router (API Gateway's catch-all): its own routes, every other
/// route's method and path without its handler — the MCP endpoint's too —, and so the same 404
/// and 405 (with the same `Allow`) as the whole router of `serve`, MCP included — while a
/// request routed to another function is not answered by a handler here.
#[tokio::test]
async fn the_catch_all_answers_404_and_405_like_the_whole_router() {
    use agentaddress_api::routes::{groups, SHAPES};
    let store = Arc::new(SqliteStore::open_in_memory().expect("store"));
    let config = ApiConfig {
        public_url: None,
        email_domain: "x.test".into(),
        limits: Limits::default(),
        email_ingest_secret_hash: None,
        poll_checks: Default::default(),
        max_waiting_polls: 0,
    };
    let state = AppState::new(store, config);
    let whole = agentaddress_mcp::router(state.clone());
    let service = agentaddress_api::router_of(&[&groups::SERVICE], state, None, SHAPES);
    let mut paths: Vec<String> = RouteGroup::ALL
        .iter()
        .flat_map(|g| g.endpoints())
        .map(|(_, p)| p)
        .collect();
    assert!(paths.iter().any(|p| p == "/api/mcp"), "{paths:?}");
    paths.push("/api/v1/nothing/here".into());
    paths.push("/inbox/".into());
    paths.push("/api/mcp/".into());
    for path in &paths {
        for method in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
            let routed = RouteGroup::ALL.iter().find(|g| {
                g.endpoints()
                    .iter()
                    .any(|(m, p)| p == path && (*m == method || (*m == "GET" && method == "HEAD")))
            });
            let (status, _) = error_code(&service, method, path).await;
            match routed {
                Some(RouteGroup::Service) | None => {
                    let (expected, _) = error_code(&whole, method, path).await;
                    assert_eq!(status, expected, "{method} {path}");
                    if expected == 405 {
                        assert_eq!(
                            allow(&service, method, path).await,
                            allow(&whole, method, path).await,
                            "{method} {path}: the same Allow"
                        );
                    }
                }
                Some(g) => assert_eq!(
                    status, 500,
                    "{method} {path} belongs to {g:?}, not answered by the catch-all"
                ),
            }
        }
    }
}

async fn allow(app: &axum::Router, method: &str, path: &str) -> Option<String> {
    let req = Request::builder()
        .method(method)
        .uri(concrete(path))
        .body(Body::empty())
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("answer");
    resp.headers()
        .get(http::header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}
