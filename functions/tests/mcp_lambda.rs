//! `POST /api/mcp` as its own Lambda function (`mcp`), through the local Lambda stack
//! (`scripts/lambda-local`: `cargo lambda watch`, DynamoDB Local), driven by a real MCP client —
//! the same scenarios as against `agentaddress serve` (cli/tests/mcp.rs).
//!
//! `scripts/test` starts the stack and passes `AGENTADDRESS_LAMBDA_URL`; without it these tests
//! fail loudly, never skip.

use agentaddress_blackbox::{mcp, Client};

fn base() -> String {
    agentaddress_blackbox::stack_env("AGENTADDRESS_LAMBDA_URL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_handshake_and_tool_list() {
    mcp::handshake_and_tool_list(&base()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_tools_end_to_end() {
    let base = base();
    mcp::tools_end_to_end(&base, &Client::behind_gateway(&base)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_wait_is_clamped_to_25_seconds() {
    mcp::wait_is_clamped(&base()).await;
}
