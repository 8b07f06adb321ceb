//! The deployment's configuration: which table, which purge queue, which email bucket, which
//! WebSocket API.

use aws_config::SdkConfig;

use std::sync::Arc;

use crate::{
    ApiGatewayPoster, ConnectionPoster, DynamoStore, EmailBucket, MessageBucket, PurgeQueue,
    SqsPurgeQueue, SqsWakeQueue, WakeQueue,
};

/// Where the DynamoDB deployment keeps its data.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsConfig {
    /// The DynamoDB table (single-table design).
    #[arg(long, env = "AGENTADDRESS_TABLE")]
    pub table: String,

    /// The SQS queue that purges deleted addresses (DELETE sends to it).
    #[arg(long, env = "AGENTADDRESS_PURGE_QUEUE_URL")]
    pub purge_queue_url: Option<String>,

    /// The S3 bucket of inbound email (SES writes `inbound/`, the store keeps `mail/`). Without
    /// it the email routes answer 501 `not_supported`.
    #[arg(long, env = "AGENTADDRESS_EMAIL_BUCKET")]
    pub email_bucket: Option<String>,

    /// The Management API of the WebSocket API's stage
    /// (`https://{api-id}.execute-api.{region}.amazonaws.com/{stage}`), through which the
    /// subscribed wake-up sockets are told of appends, deletions and expiries. Without it no
    /// socket is told.
    #[arg(long, env = "AGENTADDRESS_WS_MANAGEMENT_URL")]
    pub ws_management_url: Option<String>,

    /// The SQS queue the `wake` function consumes: after a commit that wakes an address's hooks
    /// the address is sent to it (docs/API.md §19). Without it no hook is woken on AWS.
    #[arg(long, env = "AGENTADDRESS_WAKE_QUEUE_URL")]
    pub wake_queue_url: Option<String>,
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

    /// The DynamoDB store this configuration names, with its email bucket, SDK clients
    /// configured from the environment (AWS endpoints only through the SDK's own
    /// `AWS_ENDPOINT_URL*` variables) and DynamoDB's retry policy
    /// ([`client_config`](crate::client_config)).
    pub async fn store(&self, tombstone_seconds: u64) -> DynamoStore {
        let sdk = sdk_config().await;
        let mut store = self.store_with(&sdk, tombstone_seconds);
        if let Some(queue) = self.purge_queue_with(&sdk) {
            store = store.with_purge_queue(queue);
        }
        if let Some(poster) = self.socket_poster_with(&sdk) {
            store = store.with_sockets(poster);
        }
        if let Some(queue) = self.wake_queue_with(&sdk) {
            store = store.with_wake_queue(queue);
        }
        match self.email_bucket_with(&sdk) {
            Some(bucket) => store.with_email_bucket(bucket),
            None => store,
        }
    }

    /// The poster to the wake-up sockets (`None` without `AGENTADDRESS_WS_MANAGEMENT_URL`), with
    /// a Management API client of `sdk`.
    pub fn socket_poster_with(&self, sdk: &SdkConfig) -> Option<Arc<dyn ConnectionPoster>> {
        self.ws_management_url
            .as_deref()
            .filter(|u| !u.is_empty())
            .map(|u| Arc::new(ApiGatewayPoster::new(sdk, u)) as Arc<dyn ConnectionPoster>)
    }

    /// The configured purge queue (`None` without `AGENTADDRESS_PURGE_QUEUE_URL`), with an SQS
    /// client of `sdk`. Only what calls it links the SQS client: a Lambda function that never
    /// deletes or purges an address never does.
    pub fn purge_queue_with(&self, sdk: &SdkConfig) -> Option<Arc<dyn PurgeQueue>> {
        self.purge_queue_url.as_ref().map(|url| {
            Arc::new(SqsPurgeQueue {
                client: aws_sdk_sqs::Client::new(sdk),
                queue_url: url.clone(),
            }) as Arc<dyn PurgeQueue>
        })
    }

    /// The configured wake queue (`None` without `AGENTADDRESS_WAKE_QUEUE_URL`), with an SQS
    /// client of `sdk`.
    pub fn wake_queue_with(&self, sdk: &SdkConfig) -> Option<Arc<dyn WakeQueue>> {
        self.wake_queue_url
            .as_deref()
            .filter(|u| !u.is_empty())
            .map(|url| {
                Arc::new(SqsWakeQueue {
                    client: aws_sdk_sqs::Client::new(sdk),
                    queue_url: url.to_owned(),
                }) as Arc<dyn WakeQueue>
            })
    }

    /// The configured email bucket (`None` without `AGENTADDRESS_EMAIL_BUCKET`), with an S3
    /// client of `sdk`. Only what calls it links the S3 client: a Lambda function that does not
    /// read mail never does.
    pub fn email_bucket_with(&self, sdk: &SdkConfig) -> Option<Arc<dyn MessageBucket>> {
        self.email_bucket
            .as_deref()
            .filter(|b| !b.is_empty())
            .map(|b| EmailBucket::shared(sdk, b))
    }

    /// The store without its email bucket (add it with
    /// [`DynamoStore::with_email_bucket`]), with SDK clients of `sdk` (a Lambda function passes
    /// [`lambda_sdk_config`]).
    pub fn store_with(&self, sdk: &SdkConfig, tombstone_seconds: u64) -> DynamoStore {
        DynamoStore::new(DynamoStore::client(sdk), &self.table, tombstone_seconds)
    }
}

/// The SDK's HTTPS client: HTTP/1.1 with rustls and *ring* (crate::http: the SDK's default
/// would link aws-lc, about 1 MB more in every Lambda function, and its own client HTTP/2).
fn https_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
    crate::http::sdk_http_client()
}

/// The AWS SDK configuration of `serve` and the tools: region, credentials and endpoints from
/// the SDK's default chains (environment, profile files, web identity, container and instance
/// metadata; `AWS_ENDPOINT_URL*` included), with [`https_client`].
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .load()
        .await
}

/// The AWS SDK configuration of a Lambda function, from the variables Lambda sets: the region
/// (`AWS_REGION`) and the execution role's credentials (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`); endpoints from the SDK's `AWS_ENDPOINT_URL`
/// and `AWS_ENDPOINT_URL_<SERVICE>` (the local stack points them at the emulators). Without the
/// default chains' other sources — profile files, SSO, web identity (an STS client), container
/// and instance metadata — which a function never uses: about 0.2 MB less in every function
/// (docs/PERFORMANCE.md, "Lambda mode").
pub async fn lambda_sdk_config() -> SdkConfig {
    use aws_config::environment::{
        EnvironmentVariableCredentialsProvider, EnvironmentVariableRegionProvider,
    };
    use aws_config::meta::region::ProvideRegion;
    use aws_sdk_dynamodb::config::SharedCredentialsProvider;
    let region = EnvironmentVariableRegionProvider::new().region().await;
    let mut sdk = SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .credentials_provider(SharedCredentialsProvider::new(
            EnvironmentVariableCredentialsProvider::new(),
        ))
        .service_config(EnvEndpoints);
    sdk.set_region(region);
    sdk.build()
}

/// `AWS_ENDPOINT_URL_<SERVICE>`, else `AWS_ENDPOINT_URL`, read as the SDK reads them (its
/// `EnvConfigValue`), without profile files.
#[derive(Debug)]
struct EnvEndpoints;

impl aws_types::service_config::LoadServiceConfig for EnvEndpoints {
    fn load_config(&self, key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        let env = aws_types::os_shim_internal::Env::real();
        aws_runtime::env_config::EnvConfigValue::new()
            .env(key.env())
            .service_id(key.service_id())
            .load(&env, None)
            .map(|(value, _)| value.into_owned())
    }
}
