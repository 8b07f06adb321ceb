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
//!
//! The pieces, one file each: `admission` (the caps, the refusals, the listener; the SMTP door
//! counts its connections with the same [`Caps`]), `timeouts` (the socket's deadlines and the
//! request body's pace), `stalls` (answers waiting for their client, handed out in chunks),
//! `version` (the HTTP/2 preface sniff and the per-version layer) and `linger` (the lingering
//! close, which the SMTP door uses too). This file holds the limits and what a connection's
//! socket and its requests share.

mod admission;
mod linger;
mod stalls;
mod timeouts;
mod version;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use futures::task::AtomicWaker;

pub use admission::{Caps, GuardListener, Refusal, Registry, Slot, MAX_REFUSING};
pub use linger::{Lingering, LINGER};
use stalls::Stalls;
pub use timeouts::Guarded;
pub use version::PerVersionLayer;

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
