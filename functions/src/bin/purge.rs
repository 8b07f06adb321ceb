//! Lambda function `purge`: the SQS consumer that deletes a deleted address's items.
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_purge().await
}
