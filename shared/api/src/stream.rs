//! `GET {root}/events/stream`: the feed as Server-Sent Events (docs/API.md §14).
//!
//! A stream is the long poll of `GET {root}/events` that never answers: it reads pages of the
//! feed from its cursor as the feed does (`Feed::read_events`), sends each event once, in
//! order, and between pages waits on the same per-address wake-up signal
//! (`Backend::feed_signal`) — no polling loop. Requests for a person that expire during the wait
//! get their `request.expired` event on time, as they end a long poll.
//!
//! A stream ends on its own: at the server's graceful shutdown (after the event being written),
//! when the address is deleted or expires, on a store error, and after [`MAX_DURATION`]. The
//! client then resumes with `Last-Event-ID`. While nothing is sent, a comment line goes out
//! every [`HEARTBEAT`], so that proxies and clients can tell a quiet stream from a dead one.
//!
//! **Where streams are served.** Only where [`AppState::streams`] is set (it is by default;
//! the Lambda functions clear it: API Gateway buffers a function's whole answer and cannot
//! stream) and the store has a wake-up signal (the embedded store does, unless `serve`'s
//! benchmarking knob turns it off; a stream without one would have to poll). Elsewhere the
//! route answers 501 `not_supported`, before authentication: it says something about the
//! deployment, nothing about an address.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use tokio::sync::watch;
use tokio::time::Instant;

use super::dto::{ErrorBody, EventView};
use super::extract::append_due;
use super::extract::{parse_count, query_fields, Authenticated, Client, PathParams};
use super::handlers::events::{charge_poll, EXPIRY_RECHECK};
use super::inputs::{parse_fields, StreamParams};
use super::page_budget;
use super::{ApiError, AppState};
use crate::domain::Millis;
use crate::store::{Event, MatchingPage, StoreError, TypeFilter};

/// A comment line goes out when nothing was sent for this long (docs/API.md §14).
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// The server closes a stream after this long; the client resumes with `Last-Event-ID`.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// The heartbeat: the comment line `: keep-alive` and the blank line that ends it.
const HEARTBEAT_TEXT: &[u8] = b": keep-alive\n\n";
/// Events read at once: the feed's largest page.
const PAGE_EVENTS: usize = 100;

/// How streams behave where they are served ([`AppState::streams`]). The defaults are the
/// contract's; `serve` lowers them only through hidden flags, for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// [`HEARTBEAT`] by default.
    pub heartbeat: Duration,
    /// [`MAX_DURATION`] by default.
    pub max_duration: Duration,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            heartbeat: HEARTBEAT,
            max_duration: MAX_DURATION,
        }
    }
}

#[utoipa::path(
    get, path = "/api/v1/addresses/{address_id}/events/stream", tag = "events",
    params(
        ("address_id" = String, Path),
        StreamParams,
        ("Last-Event-ID" = Option<String>, Header,
         description = "The sequence of the last event received: overrides `after`"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Server-Sent Events: each event as `id: {sequence}`, `event: {type}`, `data: {event JSON}`; a `: keep-alive` comment after 15 s without one; closed by the server after at most an hour", content_type = "text/event-stream"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 410, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 501, description = "This deployment cannot stream (the Lambda deployment): read `GET {root}/events` with `wait`", body = ErrorBody),
    )
)]
pub async fn stream_events(
    State(state): State<AppState>, PathParams(address_id): PathParams<String>,
    Client(client): Client, headers: HeaderMap, uri: Uri,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let (Some(settings), Some(signal)) = (state.streams, state.store.feed_signal()) else {
        return Err(ApiError::NotSupported(
            "This deployment cannot stream events; read `GET {root}/events` with `wait` instead."
                .into(),
        ));
    };
    // Authenticated after the check above, not as an extractor (module docs).
    let Authenticated {
        address_id,
        address: record,
        now,
    } = Authenticated::check(&state, &headers, address_id).await?;
    // One stream is one poll (docs/API.md §14), charged as `GET events` charges.
    charge_poll(&state, &address_id, now).await?;
    let params: StreamParams = parse_fields(query_fields(uri.query())?)?;
    let after = match last_event_id(&headers)? {
        Some(id) => id,
        None => params.after.unwrap_or(0),
    };
    // Subscribed before anything is read: every commit after this wakes the stream (the
    // expiry just below included, so that the stream then learns the next request's expiry).
    let wakeups = signal.subscribe(&address_id);
    append_due(&state, &record, now).await?;
    let until = |t: Millis| Duration::from_millis(u64::try_from(t - now).unwrap_or(0));
    let mut end = arrived + settings.max_duration;
    if let Some(expires) = record.expires_at {
        end = end.min(Instant::now() + until(expires));
    }
    let next_due = record.next_due().filter(|t| *t > now);
    let mut feed = Feed {
        expiry_check: next_due.map(|t| Instant::now() + until(t)),
        next_due,
        shutdown: state.shutdown.clone(),
        state,
        address_id,
        client,
        cursor: after,
        filter: params.types.map(TypeFilter::new),
        wakeups,
        end,
        heartbeat: settings.heartbeat,
        last_sent: Instant::now(),
        pending: VecDeque::new(),
        _open: crate::metrics::Open::new(crate::metrics::STREAMS_OPEN),
    };
    // Neither the request's headers nor its URI are held while the stream waits.
    drop((headers, uri, record));
    // The first page is read before answering, so that a store failure is a JSON error; under
    // memory pressure the stream answers at once and waits for memory as it streams.
    feed.read_page(Instant::now()).await?;
    let stream = futures::stream::unfold(feed, |mut feed| async move {
        feed.next()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), feed))
    });
    // As axum's `Sse` answers, but each event's bytes carry their share of the page memory
    // until the server has written them (`Charge::into_body`).
    Ok((
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// The `Last-Event-ID` header, when present: a sequence, as `after` is (400 otherwise).
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let mut values = headers.get_all("last-event-id").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid("Send the Last-Event-ID header once."));
    }
    value
        .to_str()
        .ok()
        .and_then(parse_count)
        .map(Some)
        .ok_or_else(|| ApiError::invalid("`Last-Event-ID` must be a non-negative integer."))
}

/// One open stream: what it holds while it waits.
struct Feed {
    state: AppState,
    address_id: String,
    /// The client, for its share of the page memory.
    client: String,
    /// The sequence of the last event queued: the next read is after it.
    cursor: u64,
    wakeups: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
    /// The stream's end: its longest duration, or the address's expiry if that comes first.
    end: Instant,
    /// When something next falls due — a request's expiry, a timer (the service's clock) — and
    /// when to check it next (the monotonic clock).
    next_due: Option<Millis>,
    expiry_check: Option<Instant>,
    /// How long the stream may send nothing before a heartbeat, and when it last sent.
    heartbeat: Duration,
    last_sent: Instant,
    /// The events of the last page, encoded, not yet sent; each holds its own share of the
    /// page memory (`serve`'s page budget) until the server has written it. The stream reads
    /// no further page while one is pending.
    pending: VecDeque<Bytes>,
    /// Only events of these types (docs/API.md §21).
    filter: Option<TypeFilter>,
    /// Counts the stream in `agentaddress_streams_open` while it lives.
    _open: crate::metrics::Open,
}

/// Why a stream stops.
enum Stop {
    Done,
}

/// What reading after the cursor gave.
enum Read {
    /// Events are pending.
    Events,
    /// The feed has nothing after the cursor.
    Empty,
    /// A filtered read examined its most events without a match, and more follow: read on.
    Passed,
    /// Not even the next event fits in the page memory free for this client: nothing was
    /// read (the feed keeps it), try again.
    NoMemory,
}

/// What ended a wait.
enum Woke {
    /// The feed may have grown, a request expired, or the stream reached its end.
    Feed,
    /// Nothing was sent for the heartbeat interval.
    Heartbeat,
}

impl Feed {
    fn stopping(&self) -> bool {
        *self.shutdown.borrow() || Instant::now() >= self.end
    }

    /// The next bytes to send (an event or a heartbeat), or `None` when the stream is over.
    async fn next(&mut self) -> Option<Bytes> {
        let mut shutdown = self.shutdown.clone();
        loop {
            // At shutdown the event being written is finished, and no other is started.
            if self.stopping() {
                return None;
            }
            if let Some(event) = self.pending.pop_front() {
                self.last_sent = Instant::now();
                return Some(event);
            }
            let heartbeat_at = self.last_sent + self.heartbeat;
            let read = tokio::select! {
                read = self.read_page(heartbeat_at.min(self.end)) => read,
                _ = shutdown.changed() => return None,
            };
            match read {
                Ok(Read::Events | Read::Passed) => continue,
                Ok(Read::Empty) => {}
                Ok(Read::NoMemory) => {
                    // Waited for memory until the heartbeat was due: say the stream lives.
                    if Instant::now() >= heartbeat_at {
                        return Some(self.heartbeat_now());
                    }
                    continue;
                }
                Err(e) => {
                    match e {
                        ApiError::AddressGone | ApiError::Unauthorized => {
                            tracing::debug!(address_id = %self.address_id, "stream ends: the address is gone");
                        }
                        other => {
                            tracing::warn!(address_id = %self.address_id, error = %other, "stream ends: the feed could not be read");
                        }
                    }
                    return None;
                }
            }
            match self.wait(heartbeat_at).await {
                Err(Stop::Done) => return None,
                Ok(Woke::Heartbeat) => return Some(self.heartbeat_now()),
                Ok(Woke::Feed) => {}
            }
        }
    }

    fn heartbeat_now(&mut self) -> Bytes {
        self.last_sent = Instant::now();
        Bytes::from_static(HEARTBEAT_TEXT)
    }

    /// Reads the page after the cursor into `pending`, within the page memory (waiting for it
    /// until `memory_deadline` when not even the next event fits).
    async fn read_page(&mut self, memory_deadline: Instant) -> Result<Read, ApiError> {
        let read = page_budget::read_page(
            &self.state,
            &self.client,
            &self.address_id,
            self.cursor,
            self.filter.as_ref(),
            PAGE_EVENTS,
            memory_deadline,
        )
        .await
        .map_err(|e| match e {
            StoreError::AddressNotFound => ApiError::AddressGone,
            other => other.into(),
        })?;
        let Some((
            MatchingPage {
                page,
                examined_through,
            },
            mut charge,
        )) = read
        else {
            return Ok(Read::NoMemory);
        };
        if page.events.is_empty() {
            // A filtered stream passes over what it examined (docs/API.md §21).
            self.cursor = examined_through;
            return Ok(if page.has_more {
                Read::Passed
            } else {
                Read::Empty
            });
        }
        let encoded = page
            .events
            .iter()
            .map(encode)
            .collect::<Result<Vec<_>, _>>()?;
        let last = page.events.last().map_or(self.cursor, |e| e.sequence);
        drop(page);
        if let Some(charge) = charge.as_mut() {
            let total: usize = encoded.iter().map(Vec::len).sum();
            let _ = charge.try_resize(total as u64);
        }
        let count = encoded.len();
        for (i, bytes) in encoded.into_iter().enumerate() {
            let share = if i + 1 == count {
                // The last event takes what is left of the page's share.
                charge.take()
            } else {
                charge.as_mut().map(|c| c.split(bytes.len() as u64))
            };
            self.pending.push_back(match share {
                Some(share) => share.into_body(bytes),
                None => Bytes::from(bytes),
            });
        }
        self.cursor = last;
        Ok(Read::Events)
    }

    /// Waits for a commit to the feed, a request's expiry, the heartbeat, the stream's end or
    /// shutdown.
    async fn wait(&mut self, heartbeat_at: Instant) -> Result<Woke, Stop> {
        // A request for a person expiring or a timer falling due: its event is appended (and
        // wakes this stream). The service's clock decides; checked again shortly if it is
        // behind the monotonic one.
        if let (Some(expiry), Some(at)) = (self.next_due, self.expiry_check) {
            if at <= Instant::now() {
                let now = self.state.clock.now();
                if now >= expiry {
                    self.expiry_check = None;
                    self.state
                        .store
                        .append_due_of(&self.address_id, &self.state.config.limits, now)
                        .await
                        .map_err(|_| Stop::Done)?;
                    return self.refresh().await.map(|()| Woke::Feed);
                }
                let left = Duration::from_millis(u64::try_from(expiry - now).unwrap_or(0));
                self.expiry_check = Some(Instant::now() + left.min(EXPIRY_RECHECK));
            }
        }
        let wake = self.expiry_check.map_or(self.end, |t| t.min(self.end));
        tokio::select! {
            changed = self.wakeups.changed() => {
                changed.map_err(|_| Stop::Done)?;
                self.refresh().await.map(|()| Woke::Feed)
            }
            _ = tokio::time::sleep_until(wake) => Ok(Woke::Feed),
            _ = tokio::time::sleep_until(heartbeat_at), if heartbeat_at < wake => Ok(Woke::Heartbeat),
            changed = self.shutdown.changed() => changed.map(|()| Woke::Feed).map_err(|_| Stop::Done),
        }
    }

    /// After a wake-up: the address again. A deleted or expired one ends the stream; a request
    /// for a person created since (its creation wakes the stream too) sets the next expiry.
    async fn refresh(&mut self) -> Result<(), Stop> {
        let now = self.state.clock.now();
        let record = self
            .state
            .store
            .get_address(&self.address_id, now)
            .await
            .map_err(|_| Stop::Done)?;
        let Some(record) = record.filter(|r| !r.is_gone(now)) else {
            tracing::debug!(address_id = %self.address_id, "stream ends: the address is gone");
            return Err(Stop::Done);
        };
        self.next_due = record.next_due();
        self.expiry_check = self
            .next_due
            .map(|t| Instant::now() + Duration::from_millis(u64::try_from(t - now).unwrap_or(0)));
        Ok(())
    }
}

/// One event as SSE: `id: {sequence}`, `event: {type}`, `data: {event JSON}` and a blank line
/// (compact JSON has no line break). A line break in the type (an inbox delivery's `type` may
/// hold one) cannot be sent in the `event:` line: each CR or LF is sent there as U+FFFD; `data`
/// keeps the exact type.
fn encode(event: &Event) -> Result<Vec<u8>, ApiError> {
    let view = EventView::from_event(event)?;
    let name: String = event
        .event_type
        .chars()
        .map(|c| {
            if matches!(c, '\r' | '\n') {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect();
    let mut out = Vec::with_capacity(event.page_bytes() as usize + name.len() + 32);
    out.extend_from_slice(format!("id: {}\nevent: {name}\ndata: ", event.sequence).as_bytes());
    serde_json::to_writer(&mut out, &view)
        .map_err(|e| ApiError::Internal(format!("cannot encode an event: {e}")))?;
    out.extend_from_slice(b"\n\n");
    Ok(out)
}
