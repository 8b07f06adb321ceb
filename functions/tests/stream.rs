//! The Lambda functions cannot stream (API Gateway buffers a function's whole answer): the
//! router the `events` function builds answers `GET {root}/events/stream` with 501
//! `not_supported` (docs/API.md §14), as JSON like every error, before authentication. The
//! store here is the embedded one, which has the wake-up signal a stream needs: what turns
//! streams off is the functions' state ([`agentaddress_functions::http_state`]), not the store.
//! The discovery document of the same state does not list `event_stream`.
//! The router is served on a real socket, in process (the full Lambda stack is not needed to
//! see what this router answers).

use std::sync::Arc;

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::routes::groups;
use agentaddress_sqlite::SqliteStore;
use serde_json::{json, Value};

#[tokio::test]
async fn the_events_function_answers_the_stream_501_not_supported() {
    let service = ServiceConfig::from_env().expect("configuration");
    let store = SqliteStore::open_in_memory().expect("store");
    let state = agentaddress_functions::http_state(Arc::new(store), &service);
    assert!(state.streams.is_none(), "the functions serve no streams");
    let router =
        agentaddress_api::router_of(&[&groups::EVENTS, &groups::SERVICE], state, None, &[]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("local address"));
    tokio::spawn(async move { axum::serve(listener, router).await });

    let http = reqwest::Client::new();
    let url = format!("{base}/api/v1/addresses/addr_x/events/stream?after=0");
    for token in [None, Some("aat_anything")] {
        let mut req = http.get(&url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.expect("GET stream");
        assert_eq!(r.status().as_u16(), 501, "token {token:?}");
        assert_eq!(
            r.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/json; charset=utf-8")
        );
        let body: Value = r.json().await.expect("JSON");
        assert_eq!(body["error"]["code"], json!("not_supported"), "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    // The feed itself is this function's too: the same router answers it (401 here, no token).
    let r = http
        .get(format!("{base}/api/v1/addresses/addr_x/events"))
        .send()
        .await
        .expect("GET events");
    assert_eq!(r.status().as_u16(), 401);
    // The discovery document (the `service` function's) does not list the stream.
    let w: Value = http
        .get(format!("{base}/.well-known/agentaddress.json"))
        .send()
        .await
        .expect("GET well-known")
        .json()
        .await
        .expect("JSON");
    let features = w["features"].as_array().cloned().unwrap_or_default();
    assert!(features.contains(&json!("long_polling")), "{w}");
    assert!(!features.contains(&json!("event_stream")), "{w}");
}
