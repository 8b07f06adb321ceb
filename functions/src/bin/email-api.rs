//! Lambda function `email-api`: the Email routes of the API — the raw-MIME webhook door,
//! attachment and raw downloads, and replay (docs/API.md §10–§11).
#![forbid(unsafe_code)]

use agentaddress_api::routes::groups;

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_http_reading_mail(&[&groups::EMAIL]).await
}
