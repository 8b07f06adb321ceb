//! Lambda function `send`: the send queue consumer. Each message names a recorded send; one
//! delivery attempt through SES, then the message is hidden until a retry is due or removed
//! when the send is done (docs/API.md §16).
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_send().await
}
