//! Lambda function `email`: the email queue consumer. SES writes each received message to the
//! email bucket under `inbound/`, S3 notifies the queue, and this function delivers it to the
//! feeds of its recipients (docs/API.md §10, "On AWS").
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_email().await
}
