//! The wake-up socket on AWS (docs/API.md §17): the `ws` function, which answers the frames
//! API Gateway's WebSocket API hands it. The appending functions tell the subscribed sockets
//! through agentaddress-aws's `ApiGatewayPoster`.

use agentaddress_core::store::prelude::*;
use std::sync::Arc;

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::socket::{self as protocol, ClientFrame};
use agentaddress_api::AppState;
use agentaddress_aws::{DynamoStore, Subscribed};
use agentaddress_core::domain::{Clock, Millis, SystemClock};
use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayWebsocketProxyRequest};
use aws_lambda_events::encodings::Body;
use lambda_runtime::LambdaEvent;

use crate::Error;

/// The `ws` function: `$connect` (always taken: a socket is authorised per subscription),
/// `$disconnect` (its subscriptions are removed) and `$default` (a client frame, answered
/// through the route response). A subscribe to an address that expires while subscribed starts
/// its expiry watch on the purge queue.
pub async fn run_ws() -> Result<(), Error> {
    crate::init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    // The purge queue carries the expiry watches (agentaddress-aws's sockets module).
    let (store, _) = crate::store_and_sdk(&service, None, Some(crate::PURGES)).await?;
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
    store: &DynamoStore, state: &AppState, event: ApiGatewayWebsocketProxyRequest, now: Millis,
) -> ApiGatewayProxyResponse {
    let ctx = &event.request_context;
    let connection_id = ctx.connection_id.as_deref().unwrap_or("");
    if connection_id.is_empty() {
        return answer(400, None);
    }
    match ctx.event_type.as_deref() {
        Some("CONNECT") => answer(200, None),
        Some("DISCONNECT") => {
            if let Err(e) = store.drop_connection(connection_id, now).await {
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
    store: &DynamoStore, state: &AppState, connection_id: &str, connected_at: Millis, text: &str,
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
            types,
        } => {
            let record = match protocol::authorize(state, &address_id, &read_token, now).await {
                Ok(record) => record,
                Err(refusal) => return refusal,
            };
            let lifetime = Millis::try_from(agentaddress_aws::SUBSCRIPTION_LIFETIME.as_millis())
                .unwrap_or(Millis::MAX);
            let until = connected_at.saturating_add(lifetime);
            match store
                .subscribe_socket(&address_id, connection_id, types.as_ref(), until, now)
                .await
            {
                Ok(Subscribed::Yes) => {
                    // Its expiry is told as `gone` while the socket is subscribed.
                    if let Err(e) = store
                        .watch_expiry(&address_id, record.expires_at, until, now)
                        .await
                    {
                        tracing::warn!(%address_id, error = %e, "cannot watch an address's expiry");
                    }
                }
                Ok(Subscribed::ConnectionFull) => return protocol::socket_full(),
                Ok(Subscribed::AddressFull) => return protocol::address_full(),
                // Its `$disconnect` ran meanwhile: nobody reads this answer.
                Ok(Subscribed::Closed) => return protocol::unavailable(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot subscribe a socket");
                    return protocol::unavailable();
                }
            }
            // Subscribed before the sequence is read: an append after it finds the
            // subscription (sockets module of agentaddress-aws).

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
