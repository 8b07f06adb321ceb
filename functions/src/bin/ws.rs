//! Lambda function `ws`: the `$connect`, `$disconnect` and `$default` routes of the WebSocket
//! API, the wake-up socket on AWS (docs/API.md §17). API Gateway holds the sockets; this answers
//! their frames and keeps their subscriptions in DynamoDB.
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_ws().await
}
