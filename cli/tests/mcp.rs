//! `POST /api/mcp` of `agentaddress serve`, driven by a real MCP client (rmcp over Streamable
//! HTTP): the handshake and tool list, every tool with its errors, and the long-poll clamp.
//! The same scenarios run against the Lambda stack (functions/tests/mcp_lambda.rs).

mod common;

use std::process::Stdio;

use agentaddress_blackbox::{mcp, Client};
use serde_json::json;

async fn serve() -> (tempfile::TempDir, tokio::process::Child, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let (child, base) = common::spawn_serve(&dir.path().join("mcp.db"), "127.0.0.1:0", &[]).await;
    (dir, child, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_handshake_and_tool_list() {
    let (_dir, _server, base) = serve().await;
    mcp::handshake_and_tool_list(&base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_tools_end_to_end() {
    let (_dir, _server, base) = serve().await;
    mcp::tools_end_to_end(&base, &Client::new(&base)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_wait_is_clamped_to_25_seconds() {
    let (_dir, _server, base) = serve().await;
    mcp::wait_is_clamped(&base).await;
}

/// Only POST is MCP here (stateless: no SSE stream to GET, no session to DELETE); the other
/// methods get the API's JSON 405, and a POST that is not MCP is refused by the transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_other_methods_are_405() {
    let (_dir, _server, base) = serve().await;
    let c = Client::new(&base);
    for method in ["GET", "PUT", "DELETE"] {
        c.send(method, "/api/mcp", None, &[], None)
            .await
            .expect_error(405, "method_not_allowed", method);
    }
    let r = c
        .send(
            "POST",
            "/api/mcp",
            None,
            &[("content-type", "application/json")],
            Some(b"{}".to_vec()),
        )
        .await;
    assert!(
        (400..500).contains(&r.status),
        "a POST that is no JSON-RPC message: {} {}",
        r.status,
        r.text
    );
}

/// The read token never reaches the log, even with `RUST_LOG=trace` (the MCP library logs whole
/// JSON-RPC messages, arguments included, at debug level: the server caps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_read_token_is_never_logged() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("log file: {e}"));
    let (mut child, base, _stdout) = common::spawn_serve_with(
        &dir.path().join("mcp.db"),
        "127.0.0.1:0",
        &[],
        "trace,rmcp=trace,rmcp::service=trace,rmcp::transport=trace",
        Stdio::from(log),
    )
    .await;

    let m = mcp::Mcp::connect(&base).await;
    let (a, _) = m.create(json!({"name": "secret test"})).await;
    let args = json!({"address_id": a.id, "read_token": a.token});
    m.call("poll_events", args.clone()).await.ok("poll");
    let mut put = args.clone();
    put["key"] = json!("k");
    put["value"] = json!({"x": 1});
    m.call("set_state", put).await.ok("set_state");
    let mut wrong = args.clone();
    wrong["read_token"] = json!(format!("{}x", a.token));
    m.call("get_state", wrong)
        .await
        .expect_error("unauthorized", "a near-miss token");
    m.close().await;
    let _ = child.kill().await;
    let _ = child.wait().await;

    let text = std::fs::read_to_string(&log_path).unwrap_or_else(|e| panic!("read log: {e}"));
    assert!(
        text.contains("/api/mcp"),
        "the log records the MCP requests (so this test sees the log)"
    );
    let secret = a.token.trim_start_matches("aat_");
    assert!(
        !text.contains(secret),
        "the read token appears in the server log"
    );
}
