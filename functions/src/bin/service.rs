//! Lambda function `service`: `/healthz`, `/openapi.json`, `/skill.md`, and every request no
//! other function is routed (API Gateway's catch-all): it runs the whole router so that those
//! get the contract's JSON 404 or 405. It holds no data permissions, and routed requests never
//! reach it.
#![forbid(unsafe_code)]

use agentaddress_api::RouteGroup;

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_http(&RouteGroup::ALL).await
}
