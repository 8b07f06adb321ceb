//! Lambda function `outbound`: the Outbound routes of the API — an address's email contacts
//! (the code mail goes out through SES) and its sends, recorded and put on the send queue
//! (docs/API.md §16).
#![forbid(unsafe_code)]

use agentaddress_api::routes::groups;

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_http_sending(&[&groups::OUTBOUND]).await
}
