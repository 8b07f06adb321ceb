//! Retries and re-sends (see the crate docs, "Ambiguous outcomes"): the SDK's retry policy for
//! every request, the one retry loop of the append paths, the re-send of conditional writes
//! rejected with `TransactionConflictException`, and the random tokens that let a re-sent write
//! recognise its own earlier attempt.

use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use rand::Rng;

use crate::store::{StoreError, StoreResult};

/// Attempts at an append that keeps losing the sequence race to other writers.
pub(crate) const MAX_APPEND_ATTEMPTS: u32 = 60;

/// Attempts at a conditional `UpdateItem` (delete, ack) that DynamoDB keeps rejecting with
/// `TransactionConflictException`.
pub(crate) const MAX_CONFLICT_ATTEMPTS: u32 = 8;

/// Attempts per DynamoDB request, retries included (the SDK's standard retry mode; its default
/// is 3). Like the AWS Java SDK's DynamoDB default (8 retries, 25 ms base delay), so that
/// throttling and transient 5xx or network faults rarely surface as 503.
pub const SDK_MAX_ATTEMPTS: u32 = 8;

/// First retry delay; each retry doubles it (full jitter), up to [`SDK_MAX_BACKOFF`].
pub const SDK_INITIAL_BACKOFF: Duration = Duration::from_millis(25);

/// Longest delay between two attempts. With [`SDK_MAX_ATTEMPTS`], one request sleeps at most
/// 25+50+…+800+1000 ms ≈ 2.6 s (1.3 s on average) before giving up: a handler of a few requests
/// still answers within the functions' 10 s timeout in all but pathological cases.
pub const SDK_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The DynamoDB client configuration every deployment uses: `sdk` (endpoint, region,
/// credentials from the environment) with the retry policy above.
pub fn client_config(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::from(sdk).retry_config(
        RetryConfig::standard()
            .with_max_attempts(SDK_MAX_ATTEMPTS)
            .with_initial_backoff(SDK_INITIAL_BACKOFF)
            .with_max_backoff(SDK_MAX_BACKOFF),
    )
}

/// A random idempotency token for one transaction (DynamoDB takes up to 36 characters).
pub(crate) fn uuid_like() -> String {
    let bytes: [u8; 16] = rand::thread_rng().gen();
    hex::encode(bytes)
}

/// The one retry loop of the append paths (delivery, state write, state delete): `attempt`
/// reads what it needs and tries its transaction once, answering `Ok(Some(_))` when settled,
/// `Ok(None)` when it lost a race (another writer took the sequence) and must re-read, or an
/// error. Retries back off with jitter; after [`MAX_APPEND_ATTEMPTS`] lost races the answer is
/// 503 `unavailable` (safe to retry: nothing was applied).
pub(crate) async fn with_append_retries<T, F, Fut>(mut attempt: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<Option<T>>>,
{
    for n in 0..MAX_APPEND_ATTEMPTS {
        if let Some(settled) = attempt().await? {
            return Ok(settled);
        }
        backoff(n).await;
    }
    Err(StoreError::Unavailable(
        "too much contention on this address".into(),
    ))
}

/// The append and conflict retries' delay: full jitter from 5 ms, at most 250 ms.
async fn backoff(attempt: u32) {
    jittered_backoff(
        attempt,
        Duration::from_millis(5),
        Duration::from_millis(250),
    )
    .await;
}

/// Full jitter: a random delay up to `initial` × 2^`attempt`, at most `max` (the SDK's
/// standard retry mode; the email bucket's retries and [`backoff`] use it).
pub(crate) async fn jittered_backoff(attempt: u32, initial: Duration, max: Duration) {
    let cap = initial.saturating_mul(1 << attempt.min(16)).min(max);
    let ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX).max(1);
    let ms = rand::thread_rng().gen_range(1..=ms);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Sends a non-transactional write again (with jitter) while DynamoDB rejects it with
/// `TransactionConflictException`: an append transaction held the item, and the write did not
/// apply. Only for writes that are safe to repeat (see the module docs).
pub(crate) async fn resend_on_conflict<T, E, R, F, Fut>(mut send: F) -> Result<T, SdkError<E, R>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, SdkError<E, R>>>,
    E: ProvideErrorMetadata,
{
    let mut attempt = 0;
    loop {
        let result = send().await;
        let conflict = matches!(
            &result,
            Err(SdkError::ServiceError(ctx))
                if ctx.err().code() == Some("TransactionConflictException")
        );
        if !conflict || attempt + 1 >= MAX_CONFLICT_ATTEMPTS {
            return result;
        }
        backoff(attempt).await;
        attempt += 1;
    }
}
