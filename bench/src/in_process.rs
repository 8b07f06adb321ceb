//! One request to the service's router in-process (no socket): the benches that measure the
//! code of a Lambda function over a real store, without the gateway in front.

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// Sends `method uri` with `host`, a bearer `token` and a JSON `body` if given; answers the
/// status and the body as JSON (`Null` when it is not JSON).
pub async fn call(
    app: &Router, host: &str, method: &str, uri: &str, token: Option<&str>, body: Option<&Value>,
) -> (u16, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", host);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap_or_else(|e| panic!("{method} {uri}: the request cannot be built: {e}"));
    let Ok(resp) = app.clone().oneshot(req).await;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}
