//! Lambda function `service`: `/` (a page or a JSON index), `/favicon.ico`, `/healthz`,
//! `/openapi.json`, `/skill.md`, the pages and discovery documents (`/inbox` and its assets, the
//! `/inbox/` redirect, `/llms-full.txt`, `/.well-known/agentaddress.json`), and every request no
//! other function is routed (API Gateway's catch-all), which gets the contract's JSON 404, or
//! 405 with `Allow` for another method of a known path — `GET /api/mcp` included (`Allow:
//! POST`): it knows every route's method and path, the MCP endpoint's too (`routes::SHAPES`),
//! but links no other function's handlers. It holds no data permissions, and routed requests
//! never reach it.
#![forbid(unsafe_code)]

use agentaddress_api::routes::{groups, SHAPES};

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_http_with(&[&groups::SERVICE], None, SHAPES).await
}
