//! `agentaddress serve --metrics-listen ADDR`: the Prometheus exposition of the operational
//! metrics (`agentaddress_core::metrics`, README "Metrics") on a listener of its own, off by
//! default — metrics are for the operator, not for the public port.

use std::net::SocketAddr;
use std::time::Duration;

use agentaddress_core::metrics::{describe, BATCH_BUCKETS, COMMIT_BATCH, SECONDS_BUCKETS};
use axum::http::{header, HeaderValue};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often histograms and idle series are tidied (the exporter's upkeep).
const UPKEEP: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder and serves `GET /metrics` on `addr` until `shutdown`;
/// returns the address bound and the server's task.
pub async fn serve(
    addr: SocketAddr, mut shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(COMMIT_BATCH.into()), BATCH_BUCKETS))
        .map_err(|e| format!("metrics buckets: {e}"))?
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    describe();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the metrics address: {e}"))?;
    let upkeep = handle.clone();
    let mut stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(UPKEEP) => upkeep.run_upkeep(),
                _ = stop.changed() => break,
            }
        }
    });
    let app = Router::new().route("/metrics", get(move || render(handle.clone())));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.changed().await;
            })
            .await;
    });
    Ok((local, task))
}

async fn render(handle: PrometheusHandle) -> ([(header::HeaderName, HeaderValue); 1], String) {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        handle.render(),
    )
}
