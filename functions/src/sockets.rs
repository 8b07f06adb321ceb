//! The wake-up socket on AWS (docs/API.md §17): the `ws` function, which answers the frames
//! API Gateway's WebSocket API hands it, and the poster every appending function tells the
//! subscribed sockets through (`PostToConnection` of API Gateway's Management API).

use std::sync::Arc;
use std::time::Duration;

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::socket::{self as protocol, ClientFrame};
use agentaddress_api::AppState;
use agentaddress_core::domain::{Clock, Millis, SystemClock};
use agentaddress_dynamodb::{ConnectionPoster, DynamoStore, PostError, Subscribed};
use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use aws_lambda_events::encodings::Body;
use aws_sdk_apigatewaymanagement::operation::post_to_connection::PostToConnectionError;
use aws_sdk_apigatewaymanagement::primitives::Blob;
use lambda_runtime::LambdaEvent;

use crate::Error;

/// The Management API's endpoint: `https://{api-id}.execute-api.{region}.amazonaws.com/{stage}`
/// (the template sets it). Unset: the functions tell no sockets.
pub const MANAGEMENT_URL_VAR: &str = "AGENTADDRESS_WS_MANAGEMENT_URL";

/// Posts through API Gateway's Management API. A 429 (`LimitExceededException`) is retried
/// after 50, 100 and 200 ms; a 410 (`GoneException`) is [`PostError::Gone`].
#[derive(Debug)]
pub struct ApiGatewayPoster {
    client: aws_sdk_apigatewaymanagement::Client,
}

/// Back-off of a throttled post: these waits, then the post is given up (the client's next
/// `notify` or its reconnect covers what it missed: the feed holds everything).
const THROTTLED_WAITS: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
];

impl ApiGatewayPoster {
    pub fn new(sdk: &agentaddress_dynamodb::SdkConfig, endpoint: &str) -> Self {
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

    /// The poster of the environment ([`MANAGEMENT_URL_VAR`]), if it names one.
    pub fn from_env(sdk: &agentaddress_dynamodb::SdkConfig) -> Option<Arc<dyn ConnectionPoster>> {
        let url = std::env::var(MANAGEMENT_URL_VAR)
            .ok()
            .filter(|v| !v.is_empty())?;
        Some(Arc::new(Self::new(sdk, &url)))
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
                Some(PostToConnectionError::LimitExceededException(_)) => match waits.next() {
                    Some(wait) => tokio::time::sleep(*wait).await,
                    None => return Err(PostError::Failed("throttled (429)".into())),
                },
                _ => return Err(PostError::Failed(format!("{e:?}"))),
            }
        }
    }
}

/// The `ws` function: `$connect` (always taken: a socket is authorised per subscription),
/// `$disconnect` (its subscriptions are removed) and `$default` (a client frame, answered
/// through the route response).
pub async fn run_ws() -> Result<(), Error> {
    crate::init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let (store, _) = crate::store_and_sdk(&service, None, None).await?;
    let state = crate::http_state(Arc::new(store.clone()), &service);
    let handler = Arc::new((store, state));
    metrics_cloudwatch_embedded::lambda::service::run(
        crate::init_metrics()?,
        lambda_runtime::service_fn(move |event: LambdaEvent<ApiGatewayWebsocketProxyRequest>| {
            let handler = Arc::clone(&handler);
            async move {
                let (store, state) = handler.as_ref();
                Ok::<_, Error>(ws_event(store, state, event.payload, SystemClock.now()).await)
            }
        }),
    )
    .await
}

/// Answers one event of the WebSocket API.
pub async fn ws_event(
    store: &DynamoStore,
    state: &AppState,
    event: ApiGatewayWebsocketProxyRequest,
    now: Millis,
) -> ApiGatewayProxyResponse {
    let ctx = &event.request_context;
    let connection_id = ctx.connection_id.as_deref().unwrap_or("");
    if connection_id.is_empty() {
        return answer(400, None);
    }
    match ctx.event_type.as_deref() {
        Some("CONNECT") => answer(200, None),
        Some("DISCONNECT") => {
            if let Err(e) = store.drop_connection(connection_id).await {
                // Its subscriptions expire with their TTL.
                tracing::warn!(%connection_id, error = %e, "cannot remove a closed socket's subscriptions");
            }
            answer(200, None)
        }
        _ => {
            let reply = if event.is_base64_encoded {
                protocol::binary_refused()
            } else {
                let connected_at = if ctx.connected_at > 0 {
                    ctx.connected_at
                } else {
                    now
                };
                frame(
                    store,
                    state,
                    connection_id,
                    connected_at,
                    event.body.as_deref().unwrap_or(""),
                    now,
                )
                .await
            };
            answer(200, Some(reply.to_string()))
        }
    }
}

/// Answers one client frame of `connection_id`.
async fn frame(
    store: &DynamoStore,
    state: &AppState,
    connection_id: &str,
    connected_at: Millis,
    text: &str,
    now: Millis,
) -> serde_json::Value {
    let frame = match protocol::parse(text) {
        Ok(frame) => frame,
        Err(refusal) => return refusal,
    };
    match frame {
        ClientFrame::Ping => protocol::pong(),
        ClientFrame::Unsubscribe { address_id } => {
            if agentaddress_core::domain::ids::is_valid_id(&address_id) {
                if let Err(e) = store.unsubscribe_socket(&address_id, connection_id).await {
                    tracing::warn!(error = %e, "cannot unsubscribe a socket");
                    return protocol::unavailable();
                }
            }
            protocol::unsubscribed(&address_id)
        }
        ClientFrame::Subscribe {
            address_id,
            read_token,
        } => {
            if let Err(refusal) = protocol::authorize(state, &address_id, &read_token, now).await {
                return refusal;
            }
            let lifetime =
                Millis::try_from(agentaddress_dynamodb::SUBSCRIPTION_LIFETIME.as_millis())
                    .unwrap_or(Millis::MAX);
            let until = connected_at.saturating_add(lifetime);
            match store
                .subscribe_socket(&address_id, connection_id, until, now)
                .await
            {
                Ok(Subscribed::Yes) => {}
                Ok(Subscribed::ConnectionFull) => return protocol::socket_full(),
                Ok(Subscribed::AddressFull) => return protocol::address_full(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot subscribe a socket");
                    return protocol::unavailable();
                }
            }
            // Subscribed before the sequence is read: an append after it finds the
            // subscription (sockets module of agentaddress-dynamodb).
            use agentaddress_core::store::Store;
            match store.last_sequence(&address_id, now).await {
                Ok(last) => protocol::subscribed(&address_id, last),
                Err(agentaddress_core::store::StoreError::AddressGone) => {
                    protocol::gone(&address_id)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read a feed's head");
                    protocol::unavailable()
                }
            }
        }
    }
}

fn answer(status: i64, body: Option<String>) -> ApiGatewayProxyResponse {
    let mut response = ApiGatewayProxyResponse::default();
    response.status_code = status;
    response.body = body.map(Body::Text);
    response
}
