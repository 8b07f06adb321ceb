//! The poster of the AWS deployment: `PostToConnection` of API Gateway's Management API, the
//! endpoint `https://{api-id}.execute-api.{region}.amazonaws.com/{stage}` that
//! `AGENTADDRESS_WS_MANAGEMENT_URL` names ([`crate::AwsConfig::socket_poster_with`]).

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_apigatewaymanagement::operation::post_to_connection::PostToConnectionError;
use aws_sdk_apigatewaymanagement::primitives::Blob;

use crate::{ConnectionPoster, PostError};

/// Posts through API Gateway's Management API. A 410 (`GoneException`) is [`PostError::Gone`];
/// a 403 or 413 (the connection is not this API's, the frame too big) fails at once; anything
/// else — a 429 (`LimitExceededException`), a 5xx, a failure to reach the endpoint — is tried
/// again after 50, 100 and 200 ms (a frame posted twice is harmless: a `notify` the client had
/// means nothing new).
#[derive(Debug)]
pub struct ApiGatewayPoster {
    client: aws_sdk_apigatewaymanagement::Client,
}

/// Back-off of a post that failed for a passing reason: these waits, then the post is given up (the client's next
/// `notify` or its reconnect covers what it missed: the feed holds everything).
const THROTTLED_WAITS: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
];

impl ApiGatewayPoster {
    pub fn new(sdk: &SdkConfig, endpoint: &str) -> Self {
        let config = aws_sdk_apigatewaymanagement::config::Builder::from(sdk)
            .endpoint_url(endpoint)
            // Its own back-off below; the SDK's would also retry what it cannot tell from a
            // lost answer (a post that arrived twice is harmless, but the wait is not).
            .retry_config(aws_sdk_apigatewaymanagement::config::retry::RetryConfig::disabled())
            .build();
        Self {
            client: aws_sdk_apigatewaymanagement::Client::from_conf(config),
        }
    }
}

#[async_trait::async_trait]
impl ConnectionPoster for ApiGatewayPoster {
    async fn post(&self, connection_id: &str, frame: &[u8]) -> Result<(), PostError> {
        let mut waits = THROTTLED_WAITS.iter();
        loop {
            let result = self
                .client
                .post_to_connection()
                .connection_id(connection_id)
                .data(Blob::new(frame))
                .send()
                .await;
            let e = match result {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            match e.as_service_error() {
                Some(PostToConnectionError::GoneException(_)) => return Err(PostError::Gone),
                Some(
                    PostToConnectionError::ForbiddenException(_)
                    | PostToConnectionError::PayloadTooLargeException(_),
                ) => return Err(PostError::Failed(format!("{e:?}"))),
                _ => match waits.next() {
                    Some(wait) => tokio::time::sleep(*wait).await,
                    None => return Err(PostError::Failed(format!("after 4 tries: {e:?}"))),
                },
            }
        }
    }
}
