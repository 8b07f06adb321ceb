//! Lambda function `mcp`: `POST /api/mcp`, the API as MCP tools (Streamable HTTP, stateless).
//! Each tool call is answered by the REST routes in process, so this function needs the data
//! permissions of create-address, events and state together.
#![forbid(unsafe_code)]

use agentaddress_api::routes::groups;

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_mcp(&[&groups::MCP], agentaddress_mcp::route).await
}
