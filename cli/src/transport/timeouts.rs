//! Timeouts: the socket's read and write deadlines ([`Guarded`]: request head, idle, an answer
//! the client does not take) and a request body's pace ([`Tracked`]: stall and least rate, 408).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::{ConnLimits, ConnState, Slot};

/// A connection's socket with its read and write deadlines (see the module's docs).
#[derive(Debug)]
pub struct Guarded<I> {
    io: I,
    pub(super) state: Arc<ConnState>,
    _slot: Slot,
    seen_epoch: u64,
    idle_since: Instant,
    head_started: Option<Instant>,
    read_timer: Option<Pin<Box<Sleep>>>,
    write_since: Option<Instant>,
    write_timer: Option<Pin<Box<Sleep>>>,
    expired: bool,
    /// How many bytes of the HTTP/2 preface (`PRI * HTTP/2.0…`) the connection's first bytes
    /// matched so far; `None` once it is known either way.
    pub(super) preface: Option<usize>,
}

impl<I> Guarded<I> {
    pub(super) fn new(io: I, state: Arc<ConnState>, slot: Slot) -> Self {
        Self {
            io,
            state,
            _slot: slot,
            seen_epoch: 0,
            idle_since: Instant::now(),
            head_started: None,
            read_timer: None,
            write_since: None,
            write_timer: None,
            expired: false,
            preface: Some(0),
        }
    }

    /// Starts a new idle period if the last request in flight ended since the last look.
    fn refresh_epoch(&mut self) {
        let epoch = self.state.idle_epoch.load(Ordering::Acquire);
        if epoch != self.seen_epoch {
            self.seen_epoch = epoch;
            self.idle_since = Instant::now();
            self.head_started = None;
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

/// Polls a lazily made timer set to `deadline`.
fn poll_deadline(
    timer: &mut Option<Pin<Box<Sleep>>>, deadline: Instant, cx: &mut Context<'_>,
) -> Poll<()> {
    match timer {
        Some(t) => {
            if t.deadline() != deadline {
                t.as_mut().reset(deadline);
            }
            t.as_mut().poll(cx)
        }
        None => timer
            .insert(Box::pin(tokio::time::sleep_until(deadline)))
            .as_mut()
            .poll(cx),
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Guarded<I> {
    fn poll_read(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.expired {
            return Poll::Ready(Err(timed_out("the connection timed out")));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.preface.is_some() {
                    this.sniff(&buf.filled()[before..]);
                }
                if buf.filled().len() > before && this.state.in_flight.load(Ordering::Acquire) == 0
                {
                    this.refresh_epoch();
                    this.head_started.get_or_insert_with(Instant::now);
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        // Register first, then look: an idle period that begins after the look wakes us, and
        // so does an answer that starts waiting for the client.
        this.state.read_waker.register(cx.waker());
        if this.state.in_flight.load(Ordering::Acquire) > 0 {
            let Some(since) = this.state.stalls.oldest() else {
                return Poll::Pending;
            };
            let deadline = since + this.state.limits.write_timeout;
            if poll_deadline(&mut this.read_timer, deadline, cx).is_ready() {
                this.expired = true;
                tracing::debug!(
                    "closing a connection: a stream's client did not take its answer in time"
                );
                return Poll::Ready(Err(timed_out("an answer was not read in time")));
            }
            return Poll::Pending;
        }
        this.refresh_epoch();
        let limits = &this.state.limits;
        let deadline = match this.head_started {
            Some(started) if !this.state.http2.load(Ordering::Relaxed) => {
                started + limits.header_timeout
            }
            _ => this.idle_since + limits.idle_timeout,
        };
        if poll_deadline(&mut this.read_timer, deadline, cx).is_ready() {
            this.expired = true;
            let what = if this.head_started.is_some() {
                "the request head did not arrive in time"
            } else {
                "the connection was idle too long"
            };
            tracing::debug!("closing a connection: {what}");
            return Poll::Ready(Err(timed_out(what)));
        }
        Poll::Pending
    }
}

impl<I: AsyncWrite + Unpin> Guarded<I> {
    /// After a write that had to wait: the deadline of the answer being written.
    fn write_waited(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let since = *self.write_since.get_or_insert_with(Instant::now);
        let deadline = since + self.state.limits.write_timeout;
        if poll_deadline(&mut self.write_timer, deadline, cx).is_ready() {
            self.expired = true;
            tracing::debug!("closing a connection: the client did not read its answer in time");
            return Poll::Ready(Err(timed_out("the answer was not read in time")));
        }
        Poll::Pending
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Guarded<I> {
    fn poll_write(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.expired {
            return Poll::Ready(Err(timed_out("the connection timed out")));
        }
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Pending => this.write_waited(cx),
            done => done,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.expired {
            return Poll::Ready(Err(timed_out("the connection timed out")));
        }
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.write_waited(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        // hyper and h2 flush once their buffer is empty: everything is with the kernel.
        if let Poll::Ready(Ok(())) = flushed {
            this.write_since = None;
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// 408 `request_timeout` (docs/API.md "Connections"): the body stopped coming or came too
/// slowly. The handler saw its body fail; this answer replaces whatever it made of that.
pub(super) fn body_timeout_response() -> Response {
    let code = agentaddress_api::error::ErrorCode::RequestTimeout;
    let body = serde_json::json!({"error": {
        "code": code.as_str(),
        "message": code.default_message(),
    }});
    (
        code.status(),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        )],
        body.to_string(),
    )
        .into_response()
}

#[derive(Debug, Default)]
pub(super) struct BodyFlags {
    pub(super) read_to_end: AtomicBool,
    pub(super) timed_out: AtomicBool,
}

/// The pace of a request body on `serve`.
pub(super) struct BodyClock {
    started: Instant,
    last_byte: Instant,
    bytes: u64,
    stall: Duration,
    min_rate: u64,
    timer: Option<Pin<Box<Sleep>>>,
}

impl BodyClock {
    pub(super) fn new(limits: &ConnLimits) -> Self {
        let now = Instant::now();
        Self {
            started: now,
            last_byte: now,
            bytes: 0,
            stall: limits.body_timeout,
            min_rate: limits.body_min_rate,
            timer: None,
        }
    }

    /// No byte for `stall`; or, after `stall`, fewer than `min_rate` bytes a second on average.
    fn deadline(&self) -> Instant {
        let stalled = self.last_byte + self.stall;
        if self.min_rate == 0 {
            return stalled;
        }
        let earned = Duration::from_secs_f64(self.bytes as f64 / self.min_rate as f64);
        stalled.min(self.started + self.stall + earned)
    }
}

#[derive(Debug)]
struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that records whether it was read to its end, and fails when it stops coming.
pub(super) struct Tracked {
    pub(super) inner: Body,
    pub(super) flags: Arc<BodyFlags>,
    pub(super) clock: Option<BodyClock>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.flags.read_to_end.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(clock), Some(data)) = (this.clock.as_mut(), frame.data_ref()) {
                    clock.bytes += data.len() as u64;
                    clock.last_byte = Instant::now();
                }
                if this.inner.is_end_stream() {
                    this.flags.read_to_end.store(true, Ordering::Release);
                }
            }
            Poll::Ready(Some(Err(_))) => {}
            Poll::Pending => {
                if let Some(clock) = this.clock.as_mut() {
                    let deadline = clock.deadline();
                    if poll_deadline(&mut clock.timer, deadline, cx).is_ready() {
                        this.flags.timed_out.store(true, Ordering::Release);
                        this.clock = None;
                        return Poll::Ready(Some(Err(axum::Error::new(BodyTimeout))));
                    }
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
