//! The deployment's configuration: which table, which purge queue.

use crate::{DynamoStore, PurgeQueue};

/// Where the DynamoDB deployment keeps its data.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsConfig {
    /// The DynamoDB table (single-table design).
    #[arg(long, env = "AGENTADDRESS_TABLE")]
    pub table: String,

    /// The SQS queue that purges deleted addresses (DELETE sends to it).
    #[arg(long, env = "AGENTADDRESS_PURGE_QUEUE_URL")]
    pub purge_queue_url: Option<String>,
}

#[derive(clap::Parser)]
struct AwsEnvOnly {
    #[command(flatten)]
    aws: AwsConfig,
}

impl AwsConfig {
    /// Reads `AGENTADDRESS_TABLE` and `AGENTADDRESS_PURGE_QUEUE_URL` from the environment.
    pub fn from_env() -> Result<Self, String> {
        <AwsEnvOnly as clap::Parser>::try_parse_from(["agentaddress"])
            .map(|c| c.aws)
            .map_err(|e| e.to_string())
    }

    /// The DynamoDB store this configuration names, with SDK clients configured from the
    /// environment (AWS endpoints only through the SDK's own `AWS_ENDPOINT_URL*` variables) and
    /// DynamoDB's retry policy ([`client_config`](crate::client_config)).
    pub async fn store(&self, tombstone_seconds: u64) -> DynamoStore {
        let sdk = sdk_config().await;
        let store = DynamoStore::new(DynamoStore::client(&sdk), &self.table, tombstone_seconds);
        match &self.purge_queue_url {
            Some(url) => store.with_purge_queue(PurgeQueue {
                client: aws_sdk_sqs::Client::new(&sdk),
                queue_url: url.clone(),
            }),
            None => store,
        }
    }
}

/// The AWS SDK configuration of every deployment and tool: region, credentials and endpoints
/// from the environment (the SDK's standard variables, `AWS_ENDPOINT_URL*` included), with an
/// HTTPS client on rustls with *ring* (the SDK's default would link aws-lc, about 1 MB more in
/// every Lambda function).
pub async fn sdk_config() -> aws_config::SdkConfig {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https)
        .load()
        .await
}
