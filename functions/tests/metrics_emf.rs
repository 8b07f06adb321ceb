//! The functions' metrics (README, "Metrics"): the figures `serve` exposes to Prometheus go out
//! of a Lambda function as CloudWatch Embedded Metric Format lines — the API router's own
//! request metric, recorded by a real request through the router the functions build.

use std::sync::Arc;

use agentaddress_api::config::ServiceConfig;
use agentaddress_functions::{http_state, init_metrics, METRICS_NAMESPACE};
use agentaddress_sqlite::SqliteStore;
use serde_json::Value;
use tower::ServiceExt;

#[tokio::test]
async fn a_request_through_a_function_router_is_an_emf_metric() {
    let collector = init_metrics().expect("init");
    let service = ServiceConfig::from_env().expect("config");
    let store = Arc::new(SqliteStore::open_in_memory().expect("store"));
    let router = agentaddress_api::router_of(
        &[&agentaddress_api::routes::groups::SERVICE],
        http_state(store, &service),
        None,
        &[],
    );
    for _ in 0..3 {
        let r = router
            .clone()
            .oneshot(
                http::Request::get("/healthz")
                    .body(axum::body::Body::empty())
                    .expect("request"),
            )
            .await
            .expect("router");
        assert_eq!(r.status(), 200);
    }
    let mut out = Vec::new();
    collector.flush(&mut out).expect("flush");
    let text = String::from_utf8_lossy(&out);
    let docs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let requests = docs
        .iter()
        .find(|d| d["route"] == "/healthz" && d["status"] == "200")
        .unwrap_or_else(|| panic!("no EMF document for the requests: {text}"));
    let aws = &requests["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(aws["Namespace"], METRICS_NAMESPACE, "{requests}");
    let names: Vec<&str> = aws["Metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["Name"].as_str())
        .collect();
    assert!(
        names.contains(&agentaddress_core::metrics::HTTP_REQUESTS),
        "{names:?}"
    );
    assert_eq!(
        requests[agentaddress_core::metrics::HTTP_REQUESTS],
        3,
        "{requests}"
    );
    assert_eq!(
        requests["function"], "local",
        "the function dimension: {requests}"
    );
    let dims = aws["Dimensions"][0].as_array().cloned().unwrap_or_default();
    assert!(dims.contains(&Value::from("function")), "{dims:?}");
}
