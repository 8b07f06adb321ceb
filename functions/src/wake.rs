//! Lambda function `wake`: the wake queue's consumer (docs/API.md §19, "Deployments"). Each
//! message names an address whose hooks may have something to send; every hook of it is tried
//! with the delivery machine of every deployment ([`consume_address`]: each hook's lease, its
//! cursor, the retry schedule), the hooks of one address side by side so that a slow receiver
//! delays no other. The message is removed when no hook has anything left to send, or hidden
//! until the earliest time one has (a retry, a debounce, another try's lease) and reported
//! failed so that it comes back then; a message whose handling keeps failing goes to the
//! dead-letter queue.

use std::collections::HashMap;
use std::sync::Arc;

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::wake_delivery::{consume_address, Waking};
use agentaddress_aws::WakeMessage;
use agentaddress_core::domain::{Clock, Limits, Millis, SystemClock};
use agentaddress_core::store::{Store, StoreError};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;

use crate::{env_value, init_metrics, init_tracing, store_and_sdk, Error};

/// The SQS visibility a message can be given at most (12 hours).
const MAX_VISIBILITY_SECONDS: i64 = 43_200;

/// The wake queue, for hiding a message until its address is due again.
pub struct WakeQueueClient {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
}

/// The `wake` function's main: the store, the wake sender (private receivers refused unless
/// `AGENTADDRESS_ALLOW_PRIVATE_HOOKS`), and the API's public URL (`AGENTADDRESS_PUBLIC_URL`:
/// a wake's `events_url` points there).
pub async fn run_wake() -> Result<(), Error> {
    init_tracing();
    let service = ServiceConfig::from_env().map_err(|e| format!("configuration: {e}"))?;
    let (store, sdk) = store_and_sdk(&service, None, None).await?;
    let base_url = service
        .public_url
        .clone()
        .ok_or("configuration: AGENTADDRESS_PUBLIC_URL is not set (a wake's events_url)")?;
    let sender = agentaddress_outbound::wake::WakeSender::new(service.allow_private_hooks)
        .map_err(|e| format!("configuration: no wake sender: {e}"))?;
    let waking = Waking {
        caller: Arc::new(sender),
        base_url,
    };
    let queue = WakeQueueClient {
        client: aws_sdk_sqs::Client::new(&sdk),
        queue_url: env_value("AGENTADDRESS_WAKE_QUEUE_URL")
            .ok_or("configuration: AGENTADDRESS_WAKE_QUEUE_URL is not set")?,
    };
    let worker = Arc::new((
        Arc::new(store) as Arc<dyn Store>,
        waking,
        queue,
        service.limits(),
    ));
    metrics_cloudwatch_embedded::lambda::service::run(
        init_metrics()?,
        lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| {
            let worker = Arc::clone(&worker);
            async move {
                let (store, waking, queue, limits) = worker.as_ref();
                Ok::<_, Error>(
                    wake_batch(
                        store.as_ref(),
                        waking,
                        queue,
                        limits,
                        &SystemClock,
                        event.payload,
                    )
                    .await,
                )
            }
        }),
    )
    .await
}

/// Handles one SQS batch of the wake queue: each address named once (messages for the same
/// address share its outcome), the addresses side by side.
pub async fn wake_batch(
    store: &dyn Store, waking: &Waking, queue: &WakeQueueClient, limits: &Limits,
    clock: &dyn Clock, batch: SqsEvent,
) -> SqsBatchResponse {
    let mut addresses: Vec<String> = Vec::new();
    let records: Vec<_> = batch
        .records
        .into_iter()
        .map(|record| {
            let message = record.body.as_deref().and_then(WakeMessage::from_body);
            if let Some(m) = &message {
                if !addresses.contains(&m.address_id) {
                    addresses.push(m.address_id.clone());
                }
            }
            (record, message)
        })
        .collect();
    let outcomes: HashMap<String, Result<Option<Millis>, StoreError>> =
        futures::future::join_all(addresses.into_iter().map(|address_id| async move {
            let outcome = consume_address(store, waking, limits, clock, &address_id).await;
            (address_id, outcome)
        }))
        .await
        .into_iter()
        .collect();

    let mut response = SqsBatchResponse::default();
    for (record, message) in records {
        let message_id = record.message_id.clone().unwrap_or_default();
        let Some(message) = message else {
            tracing::warn!(message_id = %message_id, "not a wake message: dropped");
            continue;
        };
        let later = match outcomes.get(&message.address_id) {
            Some(Ok(None)) | None => continue,
            Some(Ok(Some(at))) => Some(*at),
            Some(Err(e)) => {
                tracing::warn!(
                    message_id = %message_id, address_id = %message.address_id, error = %e,
                    "the address's hooks were not tried; the message will be retried"
                );
                None
            }
        };
        if let (Some(at), Some(receipt)) = (later, record.receipt_handle.as_deref()) {
            let seconds = ((at - clock.now() + 999) / 1000).clamp(1, MAX_VISIBILITY_SECONDS);
            if let Err(e) = queue
                .client
                .change_message_visibility()
                .queue_url(&queue.queue_url)
                .receipt_handle(receipt)
                .visibility_timeout(i32::try_from(seconds).unwrap_or(i32::MAX))
                .send()
                .await
            {
                tracing::warn!(message_id = %message_id, error = ?e, "cannot hide the message until its address is due");
            }
        }
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = message_id;
        response.batch_item_failures.push(failure);
    }
    response
}
