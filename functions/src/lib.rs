//! AWS Lambda entry points for agentaddress. Each HTTP function serves its route groups of the
//! shared router over the DynamoDB store; `purge` consumes the purge queue. A binary's `main()`
//! only names what it serves: everything else is here, built once per cold start.
#![forbid(unsafe_code)]

use std::sync::Arc;

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::routes::Shape;
use agentaddress_api::send_delivery::{consume_send, Dispatch, Outbound, RetryPolicy};
use agentaddress_api::{self as api, ApiConfig, AppState, ClientIp, Routes};
use agentaddress_aws::AwsConfig;
use agentaddress_aws::{handle_purge_message, DynamoStore, MessageBucket, PurgeQueue};
use agentaddress_core::domain::{Clock, SystemClock};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_http::request::RequestContext;
use lambda_http::RequestExt;
use lambda_runtime::LambdaEvent;

pub mod sockets;
pub mod wake;
pub use sockets::run_ws;
pub use wake::run_wake;

pub type Error = lambda_http::Error;

/// The CloudWatch namespace of the functions' metrics.
pub const METRICS_NAMESPACE: &str = "agentaddress";

/// Installs the functions' metrics recorder (README, "Metrics"): the figures of
/// `agentaddress_core::metrics` as CloudWatch Embedded Metric Format lines on stdout, in the
/// namespace [`METRICS_NAMESPACE`] with the function's name as a dimension, flushed after each
/// invocation (with its request id) by the runtime's layer.
pub fn init_metrics() -> Result<&'static metrics_cloudwatch_embedded::Collector, Error> {
    let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "local".into());
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(METRICS_NAMESPACE)
        .with_dimension("function", function)
        .with_lambda_request_id("request_id")
        .init()
        .map_err(|e| format!("metrics: {e}"))?;
    agentaddress_core::metrics::describe();
    Ok(collector)
}

/// Logs as JSON lines (CloudWatch), filtered by `RUST_LOG` (default `info`), with the secrets
/// caps of `agentaddress_api::telemetry`.
pub fn init_tracing() {
    api::telemetry::init(api::telemetry::LogFormat::Lambda);
}

/// What gives the store its email bucket: [`MAIL`] in the functions that read mail, `None` in
/// the others, so that only those link the S3 client.
type Bucket = fn(&AwsConfig, &agentaddress_aws::SdkConfig) -> Option<Arc<dyn MessageBucket>>;

/// The email bucket of the configuration (`AGENTADDRESS_EMAIL_BUCKET`).
const MAIL: Bucket = AwsConfig::email_bucket_with;

/// What gives the store its purge queue: [`PURGES`] in the functions that delete or purge
/// addresses, `None` in the others, so that only those link the SQS client.
type Queue = fn(&AwsConfig, &agentaddress_aws::SdkConfig) -> Option<Arc<dyn PurgeQueue>>;

/// The purge queue of the configuration (`AGENTADDRESS_PURGE_QUEUE_URL`).
const PURGES: Queue = AwsConfig::purge_queue_with;

/// What gives a function outbound email (docs/API.md §16): [`SENDING`] in the functions that
/// send, `None` in the others, so that only those link SES and the mail builder.
type Sending = fn(&agentaddress_aws::SdkConfig) -> Result<Option<Arc<Outbound>>, String>;

/// Outbound email from the environment: `AGENTADDRESS_EMAIL_FROM` (the sender, a verified SES
/// identity) and `AGENTADDRESS_SEND_QUEUE_URL` (the send queue), with
/// `AGENTADDRESS_SES_CONFIGURATION_SET` if set. Neither: not configured; one alone: an error.
const SENDING: Sending = outbound_from_env;

fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn outbound_from_env(sdk: &agentaddress_aws::SdkConfig) -> Result<Option<Arc<Outbound>>, String> {
    let (from, queue_url) = match (
        env_value("AGENTADDRESS_EMAIL_FROM"),
        env_value("AGENTADDRESS_SEND_QUEUE_URL"),
    ) {
        (None, None) => return Ok(None),
        (Some(from), Some(queue)) => (from, queue),
        _ => {
            return Err(
                "AGENTADDRESS_EMAIL_FROM and AGENTADDRESS_SEND_QUEUE_URL go together".into(),
            )
        }
    };
    agentaddress_outbound::check_sender(&from)?;
    Ok(Some(Arc::new(Outbound {
        from,
        relay: Arc::new(agentaddress_outbound::ses::SesRelay::new(
            sdk,
            env_value("AGENTADDRESS_SES_CONFIGURATION_SET"),
        )),
        dispatch: Arc::new(SendQueue {
            client: aws_sdk_sqs::Client::new(sdk),
            queue_url,
        }),
        retry: RetryPolicy::default(),
    })))
}

/// A message of the send queue: a recorded send to attempt (docs/API.md §16).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendMessage {
    pub address_id: String,
    pub send_id: String,
}

/// The send queue: a recorded send is handed on as a [`SendMessage`].
pub struct SendQueue {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
}

#[async_trait::async_trait]
impl Dispatch for SendQueue {
    async fn dispatch(&self, address_id: &str, send_id: &str) -> Result<(), String> {
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(
                serde_json::to_string(&SendMessage {
                    address_id: address_id.to_owned(),
                    send_id: send_id.to_owned(),
                })
                .map_err(|e| format!("cannot encode a send message: {e}"))?,
            )
            .send()
            .await
            .map(|_| ())
            .map_err(|e| format!("SendMessage: {e:?}"))
    }
}

async fn store(
    service: &ServiceConfig, bucket: Option<Bucket>, purges: Option<Queue>,
) -> Result<DynamoStore, Error> {
    Ok(store_and_sdk(service, bucket, purges).await?.0)
}

async fn store_and_sdk(
    service: &ServiceConfig, bucket: Option<Bucket>, purges: Option<Queue>,
) -> Result<(DynamoStore, agentaddress_aws::SdkConfig), Error> {
    let aws = AwsConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let sdk = agentaddress_aws::lambda_sdk_config().await;
    let mut store = aws.store_with(&sdk, service.tombstone_seconds);
    if let Some(queue) = purges.and_then(|q| q(&aws, &sdk)) {
        store = store.with_purge_queue(queue);
    }
    let mut store = match bucket.and_then(|b| b(&aws, &sdk)) {
        Some(bucket) => store.with_email_bucket(bucket),
        None => store,
    };
    // After each append, the subscribed wake-up sockets are told (docs/API.md §17).
    if let Some(poster) = aws.socket_poster_with(&sdk) {
        store = store.with_sockets(poster);
    }
    // After an append that wakes the address's hooks, the address goes to the wake queue
    // (docs/API.md §19; the `wake` function consumes it).
    if let Some(queue) = aws.wake_queue_with(&sdk) {
        store = store.with_wake_queue(queue);
    }
    Ok((store, sdk))
}

/// Serves `groups` of the API as this Lambda function. A binary names the `static` of its own
/// groups (`agentaddress_api::routes::groups`), so it links no other group's handlers.
pub async fn run_http(groups: &[&'static Routes]) -> Result<(), Error> {
    serve_http(groups, None, &[], None, None, None).await
}

/// [`run_http`] for the routes that send email (the `outbound` function): outbound email from
/// the environment ([`SENDING`]).
pub async fn run_http_sending(groups: &[&'static Routes]) -> Result<(), Error> {
    serve_http(groups, None, &[], None, None, Some(SENDING)).await
}

/// [`run_http`] for routes that delete addresses (the `address` function): the store gets the
/// purge queue, and a deleted address's items are purged.
pub async fn run_http_deleting(groups: &[&'static Routes]) -> Result<(), Error> {
    serve_http(groups, None, &[], None, Some(PURGES), None).await
}

/// [`run_http`] for routes that set timers (the `requests` function, docs/API.md §20): the
/// store gets the purge queue, on which each address's timer watch waits for its next timer.
pub async fn run_http_timing(groups: &[&'static Routes]) -> Result<(), Error> {
    serve_http(groups, None, &[], None, Some(PURGES), None).await
}

/// The `mcp` function: the MCP group, with what serves it; its tools set timers too, so the
/// store gets the purge queue (as [`run_http_timing`]).
pub async fn run_mcp(groups: &[&'static Routes], mcp: api::McpRoute) -> Result<(), Error> {
    serve_http(groups, Some(mcp), &[], None, Some(PURGES), None).await
}

/// [`run_http`] for routes that read stored mail (the `email-api` function): the store gets the
/// email bucket.
pub async fn run_http_reading_mail(groups: &[&'static Routes]) -> Result<(), Error> {
    serve_http(groups, None, &[], Some(MAIL), None, None).await
}

/// [`run_http`], with what serves the MCP group (only the `mcp` function passes it, so only
/// that binary links the MCP SDK), and the routes of `others` answered as served by another
/// function (the `service` function, API Gateway's catch-all, passes every route's shape: see
/// [`api::router_of`]).
pub async fn run_http_with(
    groups: &[&'static Routes], mcp: Option<api::McpRoute>, others: &[Shape],
) -> Result<(), Error> {
    serve_http(groups, mcp, others, None, None, None).await
}

async fn serve_http(
    groups: &[&'static Routes], mcp: Option<api::McpRoute>, others: &[Shape],
    bucket: Option<Bucket>, purges: Option<Queue>, sending: Option<Sending>,
) -> Result<(), Error> {
    init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let (store, sdk) = store_and_sdk(&service, bucket, purges).await?;
    let outbound = match sending {
        Some(sending) => sending(&sdk).map_err(|e| format!("configuration: {e}"))?,
        None => None,
    };
    let state = http_state(Arc::new(store), &service).with_outbound(outbound);
    let router = api::router_of(groups, state, mcp, others);
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
    metrics_cloudwatch_embedded::lambda::service::run_http(init_metrics()?, app).await
}

/// The state of every HTTP function: no event streams (API Gateway buffers a function's whole
/// answer, so `GET {root}/events/stream` answers 501 `not_supported`, docs/API.md §14), and the
/// wake-up socket at `AGENTADDRESS_WS_URL` (the WebSocket API, docs/API.md §17) when it is set.
pub fn http_state(
    store: Arc<dyn agentaddress_core::store::Store>, service: &ServiceConfig,
) -> AppState {
    // Wake hooks' URLs checked at creation and called by `POST {root}/hooks/{id}/test`
    // (docs/API.md §19); a client that cannot be built leaves the hook routes 501.
    let caller = match agentaddress_outbound::wake::WakeSender::new(service.allow_private_hooks) {
        Ok(sender) => Some(Arc::new(sender) as Arc<dyn agentaddress_core::relay::HookCaller>),
        Err(e) => {
            tracing::error!(error = %e, "no wake sender");
            None
        }
    };
    AppState::new(store, ApiConfig::from(service))
        .with_hook_caller(caller)
        .with_streams(None)
        .with_ws(service.ws_url.clone().map(api::WsEndpoint::At))
}

/// The send queue consumer (docs/API.md §16): each message names a recorded send; one delivery
/// attempt through SES, then the message is removed when the send is done, or hidden until it
/// is due again (a retry after a temporary failure, or the end of another attempt's lease) and
/// reported failed so it comes back then. A message that keeps failing to be handled goes to the
/// dead-letter queue.
pub async fn run_send() -> Result<(), Error> {
    init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let (store, sdk) = store_and_sdk(&service, None, None).await?;
    let outbound = outbound_from_env(&sdk)
        .map_err(|e| format!("configuration: {e}"))?
        .ok_or(
            "configuration: AGENTADDRESS_EMAIL_FROM and AGENTADDRESS_SEND_QUEUE_URL are not set",
        )?;
    let queue = SendQueue {
        client: aws_sdk_sqs::Client::new(&sdk),
        queue_url: env_value("AGENTADDRESS_SEND_QUEUE_URL").unwrap_or_default(),
    };
    let worker = Arc::new((store, outbound, queue, service.limits()));
    metrics_cloudwatch_embedded::lambda::service::run(
        init_metrics()?,
        lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| {
            let worker = Arc::clone(&worker);
            async move {
                let (store, outbound, queue, limits) = worker.as_ref();
                Ok::<_, Error>(send_batch(store, outbound, queue, limits, event.payload).await)
            }
        }),
    )
    .await
}

/// A message to hand back to its queue: reported failed (`ReportBatchItemFailures`), so it
/// comes back when it is visible again, and goes to the dead-letter queue after the queue's
/// most receives. Whoever returns it has logged why.
#[derive(Debug)]
pub struct Again;

/// Handles each message of `batch` in turn with `handle`, and reports those it hands back
/// ([`Again`]) as the batch's item failures, so that only they are received again. Every queue
/// consumer (send, purge, email) is this loop around its own handler.
pub async fn consume_batch<F, Fut>(batch: SqsEvent, mut handle: F) -> SqsBatchResponse
where
    F: FnMut(SqsMessage) -> Fut,
    Fut: std::future::Future<Output = Result<(), Again>>,
{
    let mut response = SqsBatchResponse::default();
    for record in batch.records {
        let id = record.message_id.clone().unwrap_or_default();
        // Boxed: each consumer's handler is a deep future of its own, and this keeps the
        // batch's future small (and the compiler's layout queries shallow).
        if Box::pin(handle(record)).await.is_err() {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
    }
    response
}

/// Handles one SQS batch of the send queue.
pub async fn send_batch(
    store: &DynamoStore, outbound: &Outbound, queue: &SendQueue,
    limits: &agentaddress_core::domain::Limits, batch: SqsEvent,
) -> SqsBatchResponse {
    consume_batch(batch, |record| async move {
        let id = record.message_id.as_deref().unwrap_or_default();
        let body = record.body.as_deref().unwrap_or("");
        let Ok(SendMessage {
            address_id,
            send_id,
        }) = serde_json::from_str(body)
        else {
            tracing::warn!(message_id = %id, "not a send message: dropped");
            return Ok(());
        };
        let later = match consume_send(store, outbound, limits, &SystemClock, &address_id, &send_id)
            .await
        {
            Ok(None) => return Ok(()),
            Ok(Some(at)) => Some(at),
            Err(e) => {
                tracing::warn!(message_id = %id, %send_id, error = %e, "send not handled; the message will be retried");
                None
            }
        };
        if let (Some(at), Some(receipt)) = (later, record.receipt_handle.as_deref()) {
            // Hidden until it is due (SQS allows up to 12 hours).
            let seconds = ((at - SystemClock.now() + 999) / 1000).clamp(1, 43_200);
            if let Err(e) = queue
                .client
                .change_message_visibility()
                .queue_url(&queue.queue_url)
                .receipt_handle(receipt)
                .visibility_timeout(i32::try_from(seconds).unwrap_or(43_200))
                .send()
                .await
            {
                tracing::warn!(message_id = %id, error = ?e, "cannot hide the message until its send is due");
            }
        }
        Err(Again)
    })
    .await
}

pub use agentaddress_aws::PURGE_STEPS_PER_MESSAGE;

/// The purge queue consumer: each message names a deleted address; failures are reported per
/// message so only those are retried (and dead-lettered after five receives).
pub async fn run_purge() -> Result<(), Error> {
    init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    // Purging an address removes its stored messages too; a purge that needs more steps sends
    // its address to the queue again.
    let store = Arc::new(store(&service, Some(MAIL), Some(PURGES)).await?);
    // A timer watch fires due timers (docs/API.md §20) with the service's limits.
    let limits = Arc::new(service.limits());
    metrics_cloudwatch_embedded::lambda::service::run(
        init_metrics()?,
        lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| {
            let (store, limits) = (Arc::clone(&store), Arc::clone(&limits));
            async move { Ok::<_, Error>(purge_batch(&store, &limits, event.payload).await) }
        }),
    )
    .await
}

/// Handles one SQS batch (purges, and watches: sockets' expiry, timers).
pub async fn purge_batch(
    store: &DynamoStore, limits: &agentaddress_core::domain::Limits, batch: SqsEvent,
) -> SqsBatchResponse {
    consume_batch(batch, |record| async move {
        let body = record.body.as_deref().unwrap_or("");
        handle_purge_message(store, body, PURGE_STEPS_PER_MESSAGE, limits, SystemClock.now())
            .await
            .map(|_| ())
            .map_err(|e| {
                let id = record.message_id.as_deref().unwrap_or_default();
                tracing::warn!(message_id = %id, error = %e, "purge failed; the message will be retried");
                Again
            })
    })
    .await
}

/// The email queue consumer (docs/API.md §10, "On AWS"): each message is S3's notification of
/// an object SES wrote under `inbound/`; S3's test event is ignored. Failures are reported per
/// message, so only those come back (and are dead-lettered after five receives).
pub async fn run_email() -> Result<(), Error> {
    init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let store = Arc::new(store(&service, Some(MAIL), None).await?);
    if store.email_bucket().is_none() {
        return Err("configuration: AGENTADDRESS_EMAIL_BUCKET is not set".into());
    }
    let config = Arc::new(ApiConfig::from(&service));
    metrics_cloudwatch_embedded::lambda::service::run(
        init_metrics()?,
        lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| {
            let (store, config) = (Arc::clone(&store), Arc::clone(&config));
            async move { Ok::<_, Error>(email_batch(&store, &config, event.payload).await) }
        }),
    )
    .await
}

/// Handles one SQS batch of the email queue.
pub async fn email_batch(
    store: &DynamoStore, config: &ApiConfig, batch: SqsEvent,
) -> SqsBatchResponse {
    consume_batch(batch, |record| async move {
        let body = record.body.as_deref().unwrap_or("");
        email_message(store, config, body, SystemClock.now())
            .await
            .map_err(|e| {
                let id = record.message_id.as_deref().unwrap_or_default();
                tracing::warn!(message_id = %id, error = %e, "email not delivered; the message will be retried");
                Again
            })
    })
    .await
}

/// One notification: every object it names is delivered (or refused for good) before it is
/// done. Delivering is idempotent on SES's message id, so a notification seen again (a
/// redelivery, the function dying before the queue heard of its success) appends nothing new.
pub async fn email_message(
    store: &DynamoStore, config: &ApiConfig, body: &str, now: agentaddress_core::domain::Millis,
) -> Result<(), String> {
    use agentaddress_aws::bucket::INBOUND_PREFIX;
    use agentaddress_email::{ProviderOutcome, S3Notification};
    let bucket = store.email_bucket().ok_or("no email bucket configured")?;
    let objects = match agentaddress_email::s3_notification(body).map_err(|e| e.to_string())? {
        S3Notification::Test => {
            tracing::info!("S3's test event: nothing to do");
            return Ok(());
        }
        S3Notification::Objects(objects) => objects,
    };
    for object in objects {
        if object.bucket != bucket.name() {
            tracing::warn!(bucket = %object.bucket, key = %object.key, "an object of another bucket: ignored");
            continue;
        }
        let Some(email_id) = agentaddress_email::ses_message_id(&object.key, INBOUND_PREFIX) else {
            // SES's setup notification too (written when the receipt rule is created).
            tracing::info!(key = %object.key, "not a message SES received (inbound/{{id}}): ignored");
            continue;
        };
        let raw = match bucket
            .get(&object.key, agentaddress_aws::MAX_OBJECT_BYTES)
            .await
            .map_err(|e| e.to_string())?
        {
            Some(raw) => raw,
            None => {
                // Delivered and removed by an earlier receipt of this notification.
                tracing::info!(key = %object.key, "object already delivered");
                continue;
            }
        };
        let outcome = agentaddress_email::deliver_ses(
            store,
            &raw,
            email_id,
            &config.email_domain,
            &config.limits,
            now,
            None,
        )
        .await;
        match outcome {
            ProviderOutcome::Settled(delivery) => {
                for a in &delivery.accepted {
                    tracing::info!(email_id, address_id = %a.address_id, event_id = %a.event.id, duplicate = a.duplicate, "email delivered");
                }
                for r in &delivery.rejected {
                    tracing::info!(email_id, rcpt = %r.rcpt, rejection = %r.rejection, "recipient refused for good");
                }
                if let Err(e) = bucket.delete(&object.key).await {
                    tracing::warn!(key = %object.key, error = %e, "could not remove a delivered message; the lifecycle rule will");
                }
            }
            failed => {
                let why = failed.failure(&config.email_domain).unwrap_or_default();
                return Err(format!("{email_id}: {why}"));
            }
        }
    }
    Ok(())
}
