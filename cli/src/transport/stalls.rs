//! Answers that wait for their client: each connection's [`Stalls`], which the socket's reader
//! holds to the write timeout, and the answer body that reports to them, in chunks of [`CHUNK`].

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use http_body::{Frame, SizeHint};
use tokio::time::Instant;

use super::InFlight;

/// The answers of a connection that wait for their client to take more.
///
/// Over HTTP/1.1 a client that stops reading makes the socket block, and the write timeout
/// drops the connection. Over HTTP/2 the socket never blocks: a client that keeps a stream's
/// flow-control window closed leaves that stream's data with the HTTP library, which then
/// stops asking the answer for more. So each answer's body says when it handed out a chunk
/// and is neither asked for the next nor dropped (hyper drops a body once it has passed its
/// last chunk on); when one has waited for the write timeout, the connection's
/// reader ends the connection — which resets its streams and gives back every byte they held
/// (hyper offers no way to reset one stream from outside). Bodies are handed out in chunks of
/// at most [`CHUNK`] bytes, so that a stalled stream shows while the library holds one chunk.
#[derive(Debug, Default)]
pub(super) struct Stalls {
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, Instant>>,
}

impl Stalls {
    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn waiting_since(&self, id: u64, since: Instant) {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, since);
    }

    fn resumed(&self, id: u64) {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
    }

    /// Since when the answer that has waited longest has waited.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .min()
            .copied()
    }
}

/// The largest piece of an answer's body handed to the HTTP library at once.
pub const CHUNK: usize = 16 * 1024;

/// An answer's body that keeps its request in flight until the server is done with it, hands
/// its data out in chunks of at most [`CHUNK`] bytes, and tells its connection's [`Stalls`]
/// while it waits for the HTTP library to ask for the next one.
pub(super) struct InFlightBody {
    inner: Body,
    /// What is left of a data frame larger than a chunk (sharing its memory: a page's share of
    /// the page budget is given back with its last piece).
    rest: Bytes,
    id: u64,
    /// A chunk was handed out and the next one not asked for yet.
    waiting: bool,
    in_flight: InFlight,
}

impl InFlightBody {
    pub(super) fn new(inner: Body, in_flight: InFlight) -> Self {
        Self {
            inner,
            rest: Bytes::new(),
            id: in_flight.0.stalls.id(),
            waiting: false,
            in_flight,
        }
    }

    /// A chunk was handed out: until the library asks for the next one, or drops the body
    /// (which it does once it has passed the last chunk on), the answer waits for its client.
    fn handed_out(&mut self) {
        self.waiting = true;
        let state = &self.in_flight.0;
        state.stalls.waiting_since(self.id, Instant::now());
        state.read_waker.wake();
    }

    fn next_chunk(&mut self) -> Bytes {
        let take = self.rest.len().min(CHUNK);
        self.rest.split_to(take)
    }
}

impl Drop for InFlightBody {
    fn drop(&mut self) {
        if self.waiting {
            self.in_flight.0.stalls.resumed(self.id);
        }
    }
}

impl HttpBody for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if this.waiting {
            this.waiting = false;
            this.in_flight.0.stalls.resumed(this.id);
        }
        if !this.rest.is_empty() {
            let chunk = this.next_chunk();
            this.handed_out();
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                let frame = match frame.into_data() {
                    Ok(data) if data.len() > CHUNK => {
                        this.rest = data;
                        Frame::data(this.next_chunk())
                    }
                    Ok(data) => Frame::data(data),
                    Err(other) => other,
                };
                this.handed_out();
                Poll::Ready(Some(Ok(frame)))
            }
            other => Poll::Ready(other),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}
