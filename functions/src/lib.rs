//! AWS Lambda entry points for agentaddress. Each HTTP function serves its route groups of the
//! shared router over the DynamoDB store; `purge` consumes the purge queue. A binary's `main()`
//! only names what it serves: everything else is here, built once per cold start.
#![forbid(unsafe_code)]

use std::sync::Arc;

use agentaddress_shared::api::{self, ApiConfig, AppState, ClientIp, RouteGroup};
use agentaddress_shared::config::{AwsConfig, ServiceConfig};
use agentaddress_shared::domain::{Clock, SystemClock};
use agentaddress_shared::store::dynamodb::{handle_purge_message, DynamoStore};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_http::request::RequestContext;
use lambda_http::RequestExt;
use lambda_runtime::LambdaEvent;

pub type Error = lambda_http::Error;

/// What may reach the log whatever `RUST_LOG` says: nothing below WARN from rmcp (it logs
/// tool arguments, read tokens included, at debug), and nothing at TRACE from the Lambda
/// runtime (it logs each raw invocation event — headers with the bearer token, the inbox
/// URL's secret, bodies — at trace).
fn log_allowed(meta: &tracing::Metadata<'_>) -> bool {
    let target = meta.target();
    let from_runtime = target == "lambda_runtime" || target.starts_with("lambda_runtime::");
    api::mcp::log_allowed(meta) && !(from_runtime && *meta.level() == tracing::Level::TRACE)
}

/// Logs as JSON lines (CloudWatch), filtered by `RUST_LOG` (default `info`), secrets capped
/// by [`log_allowed`].
pub fn init_tracing() {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // rmcp logs MCP messages, read tokens included, at debug level: capped whatever RUST_LOG says.
    if let Ok(cap) = api::mcp::LOG_DIRECTIVE.parse() {
        filter = filter.add_directive(cap);
    }
    use tracing_subscriber::prelude::*;
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .without_time()
                .with_current_span(false)
                .with_filter(tracing_subscriber::filter::filter_fn(log_allowed)),
        )
        .try_init();
}

async fn store(service: &ServiceConfig) -> Result<DynamoStore, Error> {
    let aws = AwsConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    Ok(aws.store(service.tombstone_seconds).await)
}

/// Serves `groups` of the API as this Lambda function.
pub async fn run_http(groups: &[RouteGroup]) -> Result<(), Error> {
    init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let store = store(&service).await?;
    let state = AppState::new(Arc::new(store), ApiConfig::from(&service));
    let router = api::router_for(groups, state);
    let app = tower::ServiceBuilder::new()
        .map_request(|mut req: lambda_http::Request| {
            let ip = match req.request_context_ref() {
                Some(RequestContext::ApiGatewayV2(ctx)) => ctx.http.source_ip.clone(),
                Some(RequestContext::ApiGatewayV1(ctx)) => ctx.identity.source_ip.clone(),
                _ => None,
            };
            if let Some(ip) = ip {
                req.extensions_mut().insert(ClientIp(ip));
            }
            req
        })
        .service(router);
    lambda_http::run(app).await
}

/// How many purge steps (of up to 500 items) one message gets before it is sent again.
pub const PURGE_STEPS_PER_MESSAGE: usize = 8;

/// The purge queue consumer: each message names a deleted address; failures are reported per
/// message so only those are retried (and dead-lettered after five receives).
pub async fn run_purge() -> Result<(), Error> {
    init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let store = Arc::new(store(&service).await?);
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: LambdaEvent<SqsEvent>| {
            let store = Arc::clone(&store);
            async move { Ok::<_, Error>(purge_batch(&store, event.payload).await) }
        },
    ))
    .await
}

/// Handles one SQS batch.
pub async fn purge_batch(store: &DynamoStore, batch: SqsEvent) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for record in batch.records {
        let id = record.message_id.clone().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or("");
        if let Err(e) =
            handle_purge_message(store, body, PURGE_STEPS_PER_MESSAGE, SystemClock.now()).await
        {
            tracing::warn!(message_id = %id, error = %e, "purge failed; the message will be retried");
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}
