//! Lambda function `requests`: the Requests routes of the API — creating and reading requests
//! for a person, and the person's page and its answers (docs/API.md §12); timers (§20), whose
//! watches wait on the purge queue.
#![forbid(unsafe_code)]

use agentaddress_api::routes::groups;

#[tokio::main]
async fn main() -> Result<(), agentaddress_functions::Error> {
    agentaddress_functions::run_http_timing(&[&groups::REQUESTS]).await
}
