//! Lambda function `wake`: the wake queue's consumer. Each message names an address; each of
//! its hooks is tried, and the message is hidden until the earliest retry, debounce or lease of
//! its hooks ends, or removed when none has anything left to send (docs/API.md §19).
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_wake().await
}
