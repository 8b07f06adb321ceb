//! The feed (docs/API.md §4–§5): a page of events with long polling, one event, an ack.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::IntoResponse;
use http::{header, StatusCode, Uri};
use tokio::time::Instant;

use crate::domain::time::format_rfc3339;
use crate::dto::*;
use crate::error::ApiResult;
use crate::extract::*;
use crate::inputs::*;
use crate::page_budget::{self, Charge, MEMORY_WAIT};
use crate::store::{MatchingPage, TypeFilter};
use crate::{json_response, ApiError, AppState, JSON_CONTENT_TYPE};

/// How soon a long poll checks a request's expiry again when the service's clock has not
/// reached it at the moment the monotonic clock said it would.
pub(crate) const EXPIRY_RECHECK: Duration = Duration::from_millis(100);

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/events", tag = "events",
    params(
        ("address_id" = String, Path),
        FeedParams,
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, body = EventPageView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 429, body = ErrorBody),
    )
)]
pub async fn list_events(
    State(state): State<AppState>, Arrived(arrived): Arrived,
    Current(Authenticated {
        address_id,
        address,
        now,
    }): Current,
    Client(client): Client, uri: Uri,
) -> ApiResult {
    let limits = &state.config.limits;
    charge_poll(&state, &address_id, now).await?;
    let q = parse_feed_query(uri.query(), limits.max_wait_seconds)?;
    // Requests for a person that expired and timers that are due got their events before the
    // feed is read (Current), and a wait looks again at the next due time (docs/API.md §12,
    // §20).
    let next_due = address.next_due().filter(|t| *t > now);
    // The request's URI and the address are not needed while waiting: a long poll holds only
    // what it needs for its whole wait.
    drop((uri, address));
    let deadline = arrived + q.wait;
    let (page, charge) = long_poll(&state, &client, &address_id, &q, deadline, next_due).await?;
    let MatchingPage {
        page,
        examined_through: next_cursor,
    } = page;
    let events = page
        .events
        .iter()
        .map(EventView::from_event)
        .collect::<Result<Vec<_>, _>>()?;
    let view = EventPageView {
        events,
        next_cursor,
        has_more: page.has_more,
    };
    let Some(charge) = charge else {
        return Ok(json_response(StatusCode::OK, &view));
    };
    let encoded = serde_json::to_vec(&view)
        .map_err(|e| ApiError::Internal(format!("cannot encode a page: {e}")))?;
    drop((view, page));
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static(JSON_CONTENT_TYPE),
        )],
        Body::from(charge.into_body(encoded)),
    )
        .into_response())
}

/// Counts one poll of address `id` against the poll rate limit (docs/API.md §6): a feed read
/// and an event stream (§14) each count once, however long they wait.
pub(crate) async fn charge_poll(
    state: &AppState, id: &str, now: crate::domain::Millis,
) -> Result<(), ApiError> {
    let per_minute = state.config.limits.polls_per_minute;
    match state
        .store
        .hit_rate_limit(&format!("poll:{id}"), per_minute, now)
        .await?
    {
        Some(retry_after) => Err(ApiError::RateLimited { retry_after }),
        None => Ok(()),
    }
}

/// Reads the feed; while it is empty, waits for the store's wake-up signal (or, without one,
/// re-checks the last sequence with backoff) until `deadline` or shutdown. A filtered read
/// (`q.types`, docs/API.md §21) waits past the events that do not match: its cursor moves over
/// them, and a page that examined its 1,000 without a match answers at once (`has_more`), so
/// that one request never examines more. With a page budget
/// (`serve`), each read is cut at what is free of the budget and of `client`'s share, which the
/// returned charge holds; a waiting poll holds none, and a poll that finds no memory for the
/// next event waits [`MEMORY_WAIT`] for it, then answers 503 `unavailable`
/// (`crate::page_budget`).
///
/// Where the deployment caps the waits (docs/API.md §6, "Waiting polls"), a poll takes a
/// waiting slot when it starts to wait — a poll answered at once takes none — and hands it back
/// when it answers; with none free it answers 503 `unavailable` at once.
async fn long_poll(
    state: &AppState, client: &str, address_id: &str, q: &FeedQuery, deadline: Instant,
    next_due: Option<crate::domain::Millis>,
) -> Result<(MatchingPage, Option<Charge>), ApiError> {
    let mut slot = WaitSlot::default();
    let answer =
        long_poll_holding(state, client, address_id, q, deadline, next_due, &mut slot).await;
    slot.release(state).await;
    answer
}

/// Extra time a waiting slot is held past its wait's deadline, before it frees itself
/// (a process that died mid-wait cannot hand it back).
const SLOT_MARGIN_MS: i64 = 5_000;

/// A waiting slot held for the rest of a wait (docs/API.md §6, "Waiting polls").
#[derive(Debug, Default)]
pub(crate) struct WaitSlot(Option<String>);

impl WaitSlot {
    /// Takes a slot for a wait ending at `deadline` when the deployment caps waits and none is
    /// held yet: 503 `unavailable` when every slot is held.
    pub(crate) async fn take(
        &mut self, state: &AppState, deadline: Instant,
    ) -> Result<(), ApiError> {
        let cap = state.config.max_waiting_polls;
        if cap == 0 || self.0.is_some() {
            return Ok(());
        }
        let now = state.clock.now();
        let left = deadline.saturating_duration_since(Instant::now());
        let until = now
            .saturating_add(i64::try_from(left.as_millis()).unwrap_or(i64::MAX / 4))
            .saturating_add(SLOT_MARGIN_MS);
        match state.store.acquire_wait_slot(cap, until, now).await? {
            Some(slot) => {
                self.0 = Some(slot);
                Ok(())
            }
            None => {
                crate::metrics::wait_refused();
                Err(ApiError::WaitingFull)
            }
        }
    }

    /// Hands the slot back, if one is held.
    pub(crate) async fn release(self, state: &AppState) {
        if let Some(slot) = self.0 {
            if let Err(e) = state.store.release_wait_slot(&slot).await {
                tracing::warn!(error = %e, "a waiting slot was not handed back; it frees itself when its wait would have ended");
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn long_poll_holding(
    state: &AppState, client: &str, address_id: &str, q: &FeedQuery, deadline: Instant,
    next_due: Option<crate::domain::Millis>, slot: &mut WaitSlot,
) -> Result<(MatchingPage, Option<Charge>), ApiError> {
    let store = &state.store;
    let filter = q.types.clone().map(TypeFilter::new);
    // Where the next read starts: past the events examined so far.
    let mut after = q.after;
    // When to check what falls due next (an instant of this process's monotonic clock).
    let until = |expiry: crate::domain::Millis| {
        Duration::from_millis(u64::try_from(expiry - state.clock.now()).unwrap_or(0))
    };
    let mut expiry_check = next_due.map(|e| Instant::now() + until(e));
    let mut wakeups = store.feed_signal().map(|s| s.subscribe(address_id));
    let mut shutdown = state.shutdown.clone();
    let checks = state.config.poll_checks;
    let mut backoff = checks.first;
    // Whether the last check of the sequence failed (see below).
    let mut hint_failed = false;
    // Counted in `agentaddress_long_polls_open` from its first wait to its answer.
    let mut waiting: Option<crate::metrics::Open> = None;
    loop {
        let memory_deadline = Instant::now() + MEMORY_WAIT;
        let read = page_budget::read_page(
            state,
            client,
            address_id,
            after,
            filter.as_ref(),
            q.limit,
            memory_deadline,
        );
        let Some((page, charge)) = read.await? else {
            return Err(ApiError::MemoryBusy);
        };
        if !page.page.events.is_empty() || page.page.has_more {
            return Ok((page, charge));
        }
        drop(charge);
        after = page.examined_through;
        if Instant::now() >= deadline || *shutdown.borrow() {
            return Ok((page, None));
        }
        // A request for a person expiring or a timer falling due during the wait: its event
        // ends the wait (a filtered wait's, if it matches). The service's clock decides;
        // checked again shortly if it is behind the monotonic one.
        if let (Some(expiry), Some(at)) = (next_due, expiry_check) {
            if at <= Instant::now() {
                let now = state.clock.now();
                if now >= expiry {
                    expiry_check = None;
                    if store
                        .append_due_of(address_id, &state.config.limits, now)
                        .await?
                        > 0
                    {
                        continue;
                    }
                } else {
                    expiry_check = Some(Instant::now() + until(expiry).min(EXPIRY_RECHECK));
                }
            }
        }
        let wake = expiry_check.map_or(deadline, |t| t.min(deadline));
        slot.take(state, deadline).await?;
        waiting.get_or_insert_with(|| crate::metrics::Open::new(crate::metrics::LONG_POLLS_OPEN));
        match &mut wakeups {
            Some(rx) => {
                tokio::select! {
                    _ = rx.changed() => {}
                    _ = tokio::time::sleep_until(wake) => {}
                    _ = shutdown.changed() => {}
                }
            }
            None => loop {
                if expiry_check.is_some_and(|t| t <= Instant::now()) {
                    break;
                }
                let nap = backoff.min(wake.saturating_duration_since(Instant::now()));
                tokio::select! {
                    _ = tokio::time::sleep(nap) => {}
                    _ = shutdown.changed() => break,
                }
                backoff = backoff.mul_f64(checks.growth).min(checks.max);
                if Instant::now() >= deadline || *shutdown.borrow() {
                    if hint_failed {
                        // The last check said nothing: read the feed once more (the loop
                        // above answers after it, errors included).
                        break;
                    }
                    // Nothing was there at the last check: answer the empty page without
                    // reading again (the client's next poll, from the same cursor, sees
                    // anything that arrived since). Liveness was checked by that check.
                    return Ok((page, None));
                }
                // A check is only a hint: a store that is briefly unavailable (throttled, a
                // dropped answer) delays the next look, it does not fail the whole wait.
                match store.feed_head_hint(address_id, state.clock.now()).await {
                    Ok(head) if head > after => break,
                    Ok(_) => hint_failed = false,
                    Err(crate::store::StoreError::Unavailable(why)) => {
                        tracing::debug!(%why, "long-poll check failed; checking again later");
                        hint_failed = true;
                    }
                    Err(e) => return Err(e.into()),
                }
            },
        }
    }
}

/// Waits until `address_id`'s feed is past `head` or `until` passes (or shutdown), and returns
/// the head last seen: woken by the store's signal where it has one (`serve`), else by checks
/// of the head hint on the long poll's schedule (AWS). For waits on something that an append
/// announces, like a person's answer (docs/API.md §21).
pub(crate) async fn wait_for_feed(
    state: &AppState, address_id: &str, head: u64, until: Instant,
) -> Result<u64, ApiError> {
    let mut slot = WaitSlot::default();
    let answer = wait_for_feed_holding(state, address_id, head, until, &mut slot).await;
    slot.release(state).await;
    answer
}

async fn wait_for_feed_holding(
    state: &AppState, address_id: &str, head: u64, until: Instant, slot: &mut WaitSlot,
) -> Result<u64, ApiError> {
    let store = &state.store;
    let mut shutdown = state.shutdown.clone();
    if let Some(signal) = store.feed_signal() {
        // Subscribed before the head is read: a commit after the read wakes the wait.
        let mut rx = signal.subscribe(address_id);
        let now_head = store.last_sequence(address_id, state.clock.now()).await?;
        if now_head > head {
            return Ok(now_head);
        }
        slot.take(state, until).await?;
        tokio::select! {
            _ = rx.changed() => {}
            _ = tokio::time::sleep_until(until) => {}
            _ = shutdown.changed() => {}
        }
        return Ok(store.last_sequence(address_id, state.clock.now()).await?);
    }
    let checks = state.config.poll_checks;
    let mut backoff = checks.first;
    loop {
        if Instant::now() >= until || *shutdown.borrow() {
            return Ok(head);
        }
        slot.take(state, until).await?;
        let nap = backoff.min(until.saturating_duration_since(Instant::now()));
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = shutdown.changed() => return Ok(head),
        }
        backoff = backoff.mul_f64(checks.growth).min(checks.max);
        match store.feed_head_hint(address_id, state.clock.now()).await {
            Ok(h) if h > head => return Ok(h),
            Ok(_) => {}
            Err(crate::store::StoreError::Unavailable(why)) => {
                tracing::debug!(%why, "a wait's check failed; checking again later");
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/events/{event_id}", tag = "events",
    params(("address_id" = String, Path), ("event_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, body = SingleEvent),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn get_event(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    EventId(event_id): EventId,
) -> ApiResult {
    let event = state.store.get_event(&address_id, &event_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &SingleEvent {
            event: EventView::from_event(&event)?,
        },
    ))
}

#[utoipa::path(
    post, path = "/api/v1/addresses/{address_id}/events/{event_id}/ack", tag = "events",
    params(("address_id" = String, Path), ("event_id" = String, Path)),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Acknowledged (again: the first time is kept)", body = AckResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 410, body = ErrorBody),
    )
)]
pub async fn ack_event(
    State(state): State<AppState>, Authenticated {
        address_id, now, ..
    }: Authenticated,
    EventId(event_id): EventId,
) -> ApiResult {
    let acked = state.store.ack_event(&address_id, &event_id, now).await?;
    Ok(json_response(
        StatusCode::OK,
        &AckResult {
            event: AckedEventView {
                id: acked.event.id,
                sequence: acked.event.sequence,
                acknowledged_at: format_rfc3339(acked.acknowledged_at),
            },
        },
    ))
}
