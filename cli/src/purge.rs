//! `agentaddress purge-worker`: the purge queue consumer, long-polling SQS.

use std::process::ExitCode;
use std::time::Duration;

use agentaddress_api::config::ServiceConfig;
use agentaddress_aws::handle_purge_message;
use agentaddress_aws::AwsConfig;
use agentaddress_core::domain::{Clock, SystemClock};

/// The deployment's table and purge queue (`--table`, `--purge-queue-url`, or their
/// environment variables: the same as the functions'), and the service settings.
#[derive(Debug, clap::Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    aws: AwsConfig,

    #[command(flatten)]
    service: ServiceConfig,
}

pub fn run(args: PurgeArgs) -> ExitCode {
    crate::serve::init_tracing_text();
    let Some(runtime) = crate::runtime() else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(work(args))
}

async fn work(args: PurgeArgs) -> ExitCode {
    let Some(queue_url) = args.aws.purge_queue_url.clone() else {
        eprintln!(
            "agentaddress purge-worker: the purge queue is required \
             (--purge-queue-url or AGENTADDRESS_PURGE_QUEUE_URL)"
        );
        return ExitCode::from(2);
    };
    let sdk = agentaddress_aws::sdk_config().await;
    let mut store = args.aws.store_with(&sdk, args.service.tombstone_seconds);
    // A purge that needs more steps sends its address to the queue again.
    if let Some(queue) = args.aws.purge_queue_with(&sdk) {
        store = store.with_purge_queue(queue);
    }
    if let Some(bucket) = args.aws.email_bucket_with(&sdk) {
        store = store.with_email_bucket(bucket);
    }
    // An expiry watch that falls due tells the address's sockets `gone`; a timer watch's
    // events tell them, and wake the address's hooks (docs/API.md §20).
    if let Some(poster) = args.aws.socket_poster_with(&sdk) {
        store = store.with_sockets(poster);
    }
    if let Some(queue) = args.aws.wake_queue_with(&sdk) {
        store = store.with_wake_queue(queue);
    }
    let limits = args.service.limits();
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    tracing::info!(queue = %queue_url, table = %args.aws.table, "purge worker started");
    loop {
        let received = tokio::select! {
            r = sqs
                .receive_message()
                .queue_url(&queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(20)
                .send() => r,
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("purge worker stopped");
                return ExitCode::SUCCESS;
            }
        };
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = ?e, "ReceiveMessage failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        for m in messages {
            let body = m.body().unwrap_or("");
            match handle_purge_message(
                &store,
                body,
                agentaddress_aws::PURGE_STEPS_PER_MESSAGE,
                &limits,
                SystemClock.now(),
            )
            .await
            {
                Ok(_) => {
                    if let Some(handle) = m.receipt_handle() {
                        if let Err(e) = sqs
                            .delete_message()
                            .queue_url(&queue_url)
                            .receipt_handle(handle)
                            .send()
                            .await
                        {
                            tracing::warn!(error = ?e, "DeleteMessage failed; the message will come back");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "purge failed; the message will be retried after its visibility timeout");
                }
            }
        }
    }
}
