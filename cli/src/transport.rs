//! How `serve` keeps its connections in check, and what it adds to the API for the two HTTP
//! versions it speaks on one port. The limits and their defaults are in the README ("Limits on
//! connections"); what a client sees is in docs/API.md ("Connections").
//!
//! **Admission** ([`GuardListener`]): a connection over the global cap, or over the cap of its
//! client IP, is answered at once with a 503 `unavailable` (`Retry-After: 1`) and closed. The
//! global cap never exceeds what the process's descriptor limit leaves after the store's
//! connections (all opened at start), so running out of descriptors can't turn into a failed
//! request. If `accept` still fails for want of descriptors, a spare descriptor kept for the
//! purpose is given up to take the waiting connection and refuse it the same way.
//!
//! **Timeouts** ([`Guarded`], with the request layer): a connection with no request in flight
//! is closed when a request head has started and is not complete within `header_timeout`
//! (HTTP/1), or when nothing has started within `idle_timeout`. A request body must keep coming:
//! no byte for `body_timeout`, or slower on average than `body_min_rate` once `body_timeout`
//! has passed, ends it with a 408 `request_timeout`. Once writing an answer has had to wait for
//! the client, the answer must be handed to the kernel within `write_timeout` or the connection
//! is dropped. A request in flight (a long poll) is never timed out here: the handler bounds
//! it. Page memory is bounded separately (`agentaddress_api::page_budget`).
//!
//! **HTTP/2** carries the host in the `:authority` pseudo-header, which hyper puts in the
//! request's URI, not in a `Host` header. The API builds its absolute URLs (`inbox_url`,
//! `events_url`…) from `Host`, so an HTTP/2 request without one gets it from the authority,
//! as RFC 9113 §8.3.1 says a server should treat them alike.
//!
//! **HTTP/1**: `Connection: close` on an answer given before the request's body was read to
//! its end.
//!
//! Some answers are given without reading the body: a 413 refuses a declared `Content-Length`
//! over the limit before reading a byte, and a 401 or 404 on an inbox URL is decided from the
//! path alone. hyper then cannot find where the next request starts, so it closes the
//! connection after the answer — but silently: the answer still looks keep-alive. A client
//! with a connection pool (reqwest, curl's multi, most SDKs) puts the connection back and sends
//! its next request on a socket that is closing, and that request fails with "connection
//! closed before message completed" although the server was fine. Saying `Connection: close`
//! makes the client open a fresh connection instead. HTTP/2 streams don't have this problem
//! (an unread body ends its stream only), so they pass through untouched.
//!
//! **Closing** ([`Lingering`]): when the server closes a connection it shuts its sending
//! side, then reads and discards what the client still sends, until the client closes too or
//! [`LINGER`] has passed. A client that sends a whole over-limit body (without `Expect:
//! 100-continue`) is still writing when the 413 is sent; closing the socket with those bytes
//! unread makes the kernel answer them with a reset, and then the client's write fails and
//! most clients (reqwest and hyper among them) report "error sending request" instead of the
//! 413. This is the "lingering close" of nginx and Go's net/http.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use agentaddress_api::hygiene::SocketRequest;
use agentaddress_core::domain::client::ClientKey;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use futures::task::AtomicWaker;
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// The limits `serve` puts on connections (flags of `agentaddress serve`).
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// A started request head must be complete within this (HTTP/1).
    pub header_timeout: Duration,
    /// A connection with no request in flight and none started is closed after this.
    pub idle_timeout: Duration,
    /// The longest a request body may go without a byte; also the grace before the rate.
    pub body_timeout: Duration,
    /// The least average rate of a request body, bytes per second (0: no rate rule).
    pub body_min_rate: u64,
    /// Once a write has had to wait, the answer must be written within this.
    pub write_timeout: Duration,
    /// Open connections at most (also bounded by the descriptor limit).
    pub max_connections: usize,
    /// Open connections per client IP at most (0: no per-IP cap).
    pub max_connections_per_ip: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(10),
            body_min_rate: 4096,
            write_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
        }
    }
}

/// Refusals being written at once; past this a refused connection is just closed.
pub const MAX_REFUSING: usize = 16;

/// The open connections: counts for the caps.
#[derive(Debug)]
pub struct Registry {
    limits: Arc<ConnLimits>,
    active: AtomicUsize,
    /// Open connections per client: an IPv4 address or an IPv6 /64.
    per_ip: Mutex<HashMap<ClientKey, usize>>,
    refusing: AtomicUsize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    ServerFull,
    ClientFull,
}

impl Registry {
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        Arc::new(Self {
            limits: Arc::new(limits),
            active: AtomicUsize::new(0),
            per_ip: Mutex::new(HashMap::new()),
            refusing: AtomicUsize::new(0),
        })
    }

    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let ip = ClientKey::of(ip);
        if self.active.fetch_add(1, Ordering::AcqRel) >= self.limits.max_connections {
            self.active.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::ServerFull);
        }
        if self.limits.max_connections_per_ip > 0 {
            let mut per_ip = self
                .per_ip
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= self.limits.max_connections_per_ip {
                drop(per_ip);
                self.active.fetch_sub(1, Ordering::AcqRel);
                return Err(Refusal::ClientFull);
            }
            *n += 1;
        }
        Ok(Slot {
            registry: Arc::clone(self),
            ip,
        })
    }

    /// Answers a refused connection with a 503 and closes it, in the background; when many
    /// refusals are already being written, only tries one write and closes.
    fn refuse(self: &Arc<Self>, stream: TcpStream, why: Refusal) {
        tracing::debug!(?why, "connection refused");
        let answer = match why {
            Refusal::ServerFull => &SERVER_FULL,
            Refusal::ClientFull => &CLIENT_FULL,
        };
        if self.refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::AcqRel);
            let _ = stream.try_write(answer);
            return;
        }
        let registry = Arc::clone(self);
        tokio::spawn(async move {
            let mut stream = Lingering::new(stream);
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                stream.write_all(answer).await?;
                stream.shutdown().await
            })
            .await;
            drop(stream);
            registry.refusing.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

fn refusal(message: &str) -> Vec<u8> {
    let code = agentaddress_api::error::ErrorCode::Unavailable.as_str();
    let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json; charset=utf-8\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

static SERVER_FULL: LazyLock<Vec<u8>> =
    LazyLock::new(|| refusal("The server is at its limit of open connections; retry in a moment."));
static CLIENT_FULL: LazyLock<Vec<u8>> = LazyLock::new(|| {
    refusal("This client has too many connections open; close some, or retry in a moment.")
});

/// A connection's place in the counts, given back when the connection closes.
#[derive(Debug)]
struct Slot {
    registry: Arc<Registry>,
    ip: ClientKey,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.registry.limits.max_connections_per_ip > 0 {
            let mut per_ip = self
                .registry
                .per_ip
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(n) = per_ip.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    per_ip.remove(&self.ip);
                }
            }
        }
        self.registry.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a connection's socket and its requests share.
#[derive(Debug)]
struct ConnState {
    limits: Arc<ConnLimits>,
    /// Set when the connection is upgraded (the wake-up socket): it then lingers when its
    /// handler drops it ([`Lingering`]).
    upgraded: Arc<AtomicBool>,
    in_flight: AtomicUsize,
    /// Bumped each time the last request in flight ends: a new idle period.
    idle_epoch: AtomicU64,
    /// Set once the connection is known to speak HTTP/2 (its preface, or a request).
    http2: AtomicBool,
    /// The socket's reader, woken when an idle period begins, or an answer starts waiting
    /// for the client, so that it arms its deadline.
    read_waker: AtomicWaker,
    /// Answers that handed a chunk to the HTTP library and wait for it to ask for the next,
    /// with since when (see [`Stalls`]).
    stalls: Stalls,
}

impl ConnState {
    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(self))
    }
}

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
struct Stalls {
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
    fn oldest(&self) -> Option<Instant> {
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

/// A request in flight on its connection, until its answer's body is done.
#[derive(Debug)]
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle_epoch.fetch_add(1, Ordering::AcqRel);
            self.0.read_waker.wake();
        }
    }
}

/// The connect info of a `serve` connection: the peer and the connection's shared state. The
/// request layer turns it into `ConnectInfo<SocketAddr>` for the handlers.
#[derive(Debug, Clone)]
pub struct Conn {
    addr: SocketAddr,
    state: Arc<ConnState>,
}

impl Connected<IncomingStream<'_, GuardListener>> for Conn {
    fn connect_info(stream: IncomingStream<'_, GuardListener>) -> Self {
        Conn {
            addr: *stream.remote_addr(),
            state: Arc::clone(&stream.io().state),
        }
    }
}

/// A TCP listener that admits connections under the caps, refuses the others cleanly, and
/// gives each a [`Guarded`] socket that closes with a lingering close.
#[derive(Debug)]
pub struct GuardListener {
    inner: TcpListener,
    registry: Arc<Registry>,
    /// Given up when `accept` runs out of descriptors, to refuse the waiting connection.
    spare: Option<std::fs::File>,
}

impl GuardListener {
    pub fn new(inner: TcpListener, registry: Arc<Registry>) -> Self {
        Self {
            inner,
            registry,
            spare: open_spare(),
        }
    }

    async fn accept_failed(&mut self, e: io::Error) {
        if is_connection_error(&e) {
            return;
        }
        if matches!(e.raw_os_error(), Some(EMFILE) | Some(ENFILE)) {
            tracing::warn!("out of file descriptors: refusing a connection");
            if self.spare.take().is_some() {
                if let Ok(Ok((stream, _))) =
                    tokio::time::timeout(Duration::from_millis(10), self.inner.accept()).await
                {
                    let _ = stream.try_write(&SERVER_FULL);
                }
                self.spare = open_spare();
            }
        } else {
            tracing::warn!(error = %e, "accept failed");
        }
        // Don't spin while the condition lasts; waiting clients stay in the backlog.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const ENFILE: i32 = 23;
const EMFILE: i32 = 24;

fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

impl axum::serve::Listener for GuardListener {
    type Io = Guarded<Lingering<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    self.accept_failed(e).await;
                    continue;
                }
            };
            match self.registry.admit(addr.ip()) {
                Ok(slot) => {
                    // hyper writes each answer whole: Nagle's algorithm could only delay it.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                    }
                    let upgraded = Arc::new(AtomicBool::new(false));
                    let io = Lingering::new(stream).on_drop(Arc::clone(&upgraded));
                    let state = Arc::new(ConnState {
                        upgraded,
                        limits: Arc::clone(&self.registry.limits),
                        in_flight: AtomicUsize::new(0),
                        idle_epoch: AtomicU64::new(0),
                        http2: AtomicBool::new(false),
                        read_waker: AtomicWaker::new(),
                        stalls: Stalls::default(),
                    });
                    return (Guarded::new(io, state, slot), addr);
                }
                Err(why) => self.registry.refuse(stream, why),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection's socket with its read and write deadlines (see the module's docs).
#[derive(Debug)]
pub struct Guarded<I> {
    io: I,
    state: Arc<ConnState>,
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
    preface: Option<usize>,
}

/// The start of the HTTP/2 connection preface: no HTTP/1 request starts so.
const PREFACE: &[u8] = b"PRI ";

impl<I> Guarded<I> {
    fn new(io: I, state: Arc<ConnState>, slot: Slot) -> Self {
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

    /// Looks for the HTTP/2 preface in the connection's first bytes: an HTTP/2 connection's
    /// idle time is counted from its start, not as an HTTP/1 request head.
    fn sniff(&mut self, read: &[u8]) {
        let Some(seen) = self.preface else {
            return;
        };
        let take = read.len().min(PREFACE.len() - seen);
        if read[..take] != PREFACE[seen..seen + take] {
            self.preface = None;
        } else if seen + take == PREFACE.len() {
            self.preface = None;
            self.state.http2.store(true, Ordering::Relaxed);
        } else {
            self.preface = Some(seen + take);
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
    timer: &mut Option<Pin<Box<Sleep>>>,
    deadline: Instant,
    cx: &mut Context<'_>,
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
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

/// `.layer(PerVersionLayer)` on the router. A tower layer, not `axum::middleware::from_fn`,
/// which boxes a service clone and a future per request: memory a long poll would keep for
/// its whole wait.
#[derive(Debug, Clone, Copy, Default)]
pub struct PerVersionLayer;

impl<S> Layer<S> for PerVersionLayer {
    type Service = PerVersion<S>;

    fn layer(&self, inner: S) -> PerVersion<S> {
        PerVersion { inner }
    }
}

#[derive(Debug, Clone)]
pub struct PerVersion<S> {
    inner: S,
}

impl<S> Service<Request> for PerVersion<S>
where
    S: Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = PerVersionFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let http1 = matches!(
            req.version(),
            Version::HTTP_09 | Version::HTTP_10 | Version::HTTP_11
        );
        let conn = req
            .extensions()
            .get::<ConnectInfo<Conn>>()
            .map(|c| c.0.clone());
        let in_flight = conn.as_ref().map(|conn| {
            req.extensions_mut().insert(ConnectInfo(conn.addr));
            if http1 {
                // Read off a socket by hyper: HTTP/1.1 without `Host` is refused.
                req.extensions_mut().insert(SocketRequest);
            } else {
                conn.state.http2.store(true, Ordering::Relaxed);
            }
            conn.state.begin()
        });
        if !http1 && !req.headers().contains_key(header::HOST) {
            let authority = req
                .uri()
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
            if let Some(host) = authority {
                req.headers_mut().insert(header::HOST, host);
            }
        }
        let mut body_flags = None;
        if !req.body().is_end_stream() {
            // A body to read (no body at all — a GET, `Content-Length: 0` — leaves nothing
            // unread): watch whether the handler reads it to its end, and in time.
            let flags = Arc::new(BodyFlags::default());
            let (parts, body) = req.into_parts();
            let body = Body::new(Tracked {
                inner: body,
                flags: Arc::clone(&flags),
                clock: conn.map(|c| BodyClock::new(&c.state.limits)),
            });
            req = Request::from_parts(parts, body);
            body_flags = Some(flags);
        }
        PerVersionFuture {
            inner: self.inner.call(req),
            http1,
            body_flags,
            in_flight,
        }
    }
}

pin_project_lite::pin_project! {
    pub struct PerVersionFuture<F> {
        #[pin]
        inner: F,
        http1: bool,
        // Set for a request with a body.
        body_flags: Option<Arc<BodyFlags>>,
        // Set on `serve`'s connections; moves into the answer's body.
        in_flight: Option<InFlight>,
    }
}

impl<F, E> Future for PerVersionFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        let Ok(mut response) = result else {
            return Poll::Ready(result);
        };
        if let Some(flags) = this.body_flags.as_ref() {
            if flags.timed_out.load(Ordering::Acquire) {
                response = body_timeout_response();
            }
            if *this.http1 && !flags.read_to_end.load(Ordering::Acquire) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
        }
        if response.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
            // An upgraded connection (the wake-up socket) is never idle in the HTTP sense:
            // it stays busy for as long as it lives, so the idle and header timeouts leave it
            // alone. The count is raised for good instead of holding the token, which would
            // keep the connection's state alive after the connection is gone.
            if let Some(in_flight) = this.in_flight.take() {
                in_flight.0.in_flight.fetch_add(1, Ordering::AcqRel);
                in_flight.0.upgraded.store(true, Ordering::Release);
            }
        }
        if let Some(in_flight) = this.in_flight.take() {
            response = response.map(|body| Body::new(InFlightBody::new(body, in_flight)));
        }
        Poll::Ready(Ok(response))
    }
}

/// 408 `request_timeout` (docs/API.md "Connections"): the body stopped coming or came too
/// slowly. The handler saw its body fail; this answer replaces whatever it made of that.
fn body_timeout_response() -> Response {
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
struct BodyFlags {
    read_to_end: AtomicBool,
    timed_out: AtomicBool,
}

/// The pace of a request body on `serve`.
struct BodyClock {
    started: Instant,
    last_byte: Instant,
    bytes: u64,
    stall: Duration,
    min_rate: u64,
    timer: Option<Pin<Box<Sleep>>>,
}

impl BodyClock {
    fn new(limits: &ConnLimits) -> Self {
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
struct Tracked {
    inner: Body,
    flags: Arc<BodyFlags>,
    clock: Option<BodyClock>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
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

/// An answer's body that keeps its request in flight until the server is done with it, hands
/// its data out in chunks of at most [`CHUNK`] bytes, and tells its connection's [`Stalls`]
/// while it waits for the HTTP library to ask for the next one.
struct InFlightBody {
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
    fn new(inner: Body, in_flight: InFlight) -> Self {
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
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

/// How long a closing connection keeps reading what its client still sends.
pub const LINGER: Duration = Duration::from_secs(2);

/// A connection whose shutdown lingers: it shuts its sending side, then reads and discards
/// until the peer's end of stream, an error, or [`LINGER`].
///
/// hyper shuts an HTTP connection down itself; an upgraded one (the wake-up socket) is only
/// dropped when its handler ends. Such a connection, marked by [`Lingering::on_drop`], lingers
/// all the same, in a task of its own: otherwise what its client was still sending (the rest
/// of a frame over the limit) would make the kernel reset the connection, and the client would
/// lose the close frame that says why.
#[derive(Debug)]
pub struct Lingering<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> {
    /// Taken only by `drop`.
    io: Option<I>,
    /// Set once the sending side is shut: the deadline of the discarding.
    closing: Option<Pin<Box<Sleep>>>,
    /// When set, a connection dropped without a shutdown lingers in the background.
    on_drop: Option<Arc<AtomicBool>>,
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> Lingering<I> {
    pub fn new(io: I) -> Self {
        Self {
            io: Some(io),
            closing: None,
            on_drop: None,
        }
    }

    /// Lingers when dropped without a shutdown if `flag` is set by then.
    fn on_drop(mut self, flag: Arc<AtomicBool>) -> Self {
        self.on_drop = Some(flag);
        self
    }

    fn io(&mut self) -> io::Result<Pin<&mut I>> {
        self.io
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the connection is gone"))
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> Drop for Lingering<I> {
    fn drop(&mut self) {
        let wanted = self
            .on_drop
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Acquire));
        if !wanted || self.closing.is_some() {
            return;
        }
        let (Some(io), Ok(runtime)) = (self.io.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        runtime.spawn(async move {
            let mut closing = Lingering::new(io);
            let _ = tokio::time::timeout(LINGER + Duration::from_secs(1), closing.shutdown()).await;
        });
    }
}

/// Reads one poll may discard before it yields to other tasks.
const DISCARD_READS_PER_POLL: usize = 64;

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for Lingering<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.io()?.poll_read(cx, buf)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for Lingering<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.closing.is_none() {
            std::task::ready!(this.io()?.poll_shutdown(cx))?;
            this.closing = Some(Box::pin(tokio::time::sleep(LINGER)));
        }
        let mut scratch = [0u8; 4096];
        let mut waiting_for_data = false;
        for _ in 0..DISCARD_READS_PER_POLL {
            let mut buf = ReadBuf::new(&mut scratch);
            match this.io()?.poll_read(cx, &mut buf) {
                // The peer's end of stream, or a broken connection: nothing left to protect.
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {}
                Poll::Pending => {
                    waiting_for_data = true;
                    break;
                }
            }
        }
        match this
            .closing
            .as_mut()
            .map(|deadline| deadline.as_mut().poll(cx))
        {
            Some(Poll::Ready(())) | None => Poll::Ready(Ok(())),
            Some(Poll::Pending) => {
                if !waiting_for_data {
                    // The read budget ran out with data still coming: yield, then go on.
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    #[tokio::test]
    async fn shutdown_reads_what_the_peer_still_sends_until_it_closes() {
        // A 64-byte pipe: the peer's 100 KB only get through if the closing side reads them.
        let (ours, mut peer) = duplex(64);
        let peer_task = tokio::spawn(async move {
            peer.write_all(&[7u8; 100_000]).await?;
            peer.shutdown().await?;
            let mut rest = Vec::new();
            peer.read_to_end(&mut rest).await?;
            Ok::<_, io::Error>(rest)
        });
        let mut ours = Lingering::new(ours);
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(1), ours.shutdown())
            .await
            .unwrap_or_else(|_| panic!("shutdown waited for more than the peer's end"))
            .unwrap_or_else(|e| panic!("shutdown: {e}"));
        assert!(started.elapsed() < LINGER);
        let rest = peer_task
            .await
            .unwrap_or_else(|e| panic!("peer task: {e}"))
            .unwrap_or_else(|e| panic!("the peer's writes failed: {e}"));
        assert!(rest.is_empty(), "the peer sees our end of stream");
    }

    #[tokio::test]
    async fn an_upgraded_connection_dropped_without_a_shutdown_lingers_in_the_background() {
        for upgraded in [true, false] {
            let (ours, mut peer) = duplex(64);
            let flag = Arc::new(AtomicBool::new(upgraded));
            drop(Lingering::new(ours).on_drop(flag));
            // The peer's 100 KB only get through a 64-byte pipe if someone reads them.
            let wrote =
                tokio::time::timeout(Duration::from_secs(1), peer.write_all(&[7u8; 100_000])).await;
            if upgraded {
                assert!(
                    matches!(wrote, Ok(Ok(()))),
                    "the dropped connection is drained: {wrote:?}"
                );
                let mut rest = Vec::new();
                let read =
                    tokio::time::timeout(Duration::from_secs(1), peer.read_to_end(&mut rest)).await;
                assert!(
                    matches!(read, Ok(Ok(0))),
                    "then sees our end of stream: {read:?}"
                );
            } else {
                assert!(
                    !matches!(wrote, Ok(Ok(()))),
                    "a plain drop closes at once: {wrote:?}"
                );
            }
        }
    }

    #[test]
    fn ipv6_clients_share_the_connection_cap_of_their_64() {
        let registry = Registry::new(ConnLimits {
            max_connections_per_ip: 2,
            ..ConnLimits::default()
        });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or_else(|e| panic!("{s}: {e}"));
        let a = registry.admit(ip("2001:db8:7:7::1"));
        let b = registry.admit(ip("2001:db8:7:7:ffff::2"));
        assert!(a.is_ok() && b.is_ok());
        assert_eq!(
            registry.admit(ip("2001:db8:7:7:abcd::3")).err(),
            Some(Refusal::ClientFull),
            "a third address of the same /64 is the same client"
        );
        assert!(
            registry.admit(ip("2001:db8:7:8::1")).is_ok(),
            "another /64 is another client"
        );
        assert!(registry.admit(ip("192.0.2.1")).is_ok());
        drop(a);
        assert!(
            registry.admit(ip("2001:db8:7:7::9")).is_ok(),
            "a place given back"
        );
    }

    #[tokio::test]
    async fn shutdown_gives_up_after_the_linger_time() {
        let (ours, _peer) = duplex(64); // the peer keeps its side open and sends nothing
        let mut ours = Lingering::new(ours);
        let started = Instant::now();
        tokio::time::timeout(LINGER + Duration::from_secs(2), ours.shutdown())
            .await
            .unwrap_or_else(|_| panic!("shutdown outlived the linger time"))
            .unwrap_or_else(|e| panic!("shutdown: {e}"));
        assert!(started.elapsed() >= LINGER, "{:?}", started.elapsed());
    }
}
