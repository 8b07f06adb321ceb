//! Lambda function `address`: the Address routes of the API.
#![forbid(unsafe_code)]

use agentaddress_api::routes::groups;

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_http_deleting(&[&groups::ADDRESS]).await
}
