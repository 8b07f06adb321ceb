//! What `serve` adds to the API for the two HTTP versions it speaks on one port.
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
//! **Closing** ([`LingerListener`]): when the server closes a connection it shuts its sending
//! side, then reads and discards what the client still sends, until the client closes too or
//! [`LINGER`] has passed. A client that sends a whole over-limit body (without `Expect:
//! 100-continue`) is still writing when the 413 is sent; closing the socket with those bytes
//! unread makes the kernel answer them with a reset, and then the client's write fails and
//! most clients (reqwest and hyper among them) report "error sending request" instead of the
//! 413. This is the "lingering close" of nginx and Go's net/http.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tower::{Layer, Service};

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
        let mut read_to_end = None;
        if !http1 {
            if !req.headers().contains_key(header::HOST) {
                let authority = req
                    .uri()
                    .authority()
                    .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
                if let Some(host) = authority {
                    req.headers_mut().insert(header::HOST, host);
                }
            }
        } else if !req.body().is_end_stream() {
            // A body to read (no body at all — a GET, `Content-Length: 0` — leaves nothing
            // unread): watch whether the handler reads it to its end.
            let flag = Arc::new(AtomicBool::new(false));
            let (parts, body) = req.into_parts();
            let body = Body::new(Tracked {
                inner: body,
                read_to_end: Arc::clone(&flag),
            });
            req = Request::from_parts(parts, body);
            read_to_end = Some(flag);
        }
        PerVersionFuture {
            inner: self.inner.call(req),
            read_to_end,
        }
    }
}

pin_project_lite::pin_project! {
    pub struct PerVersionFuture<F> {
        #[pin]
        inner: F,
        // Set for an HTTP/1 request with a body.
        read_to_end: Option<Arc<AtomicBool>>,
    }
}

impl<F, E> Future for PerVersionFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut result = std::task::ready!(this.inner.poll(cx));
        if let (Ok(response), Some(flag)) = (&mut result, this.read_to_end.as_ref()) {
            if !flag.load(Ordering::Acquire) {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
        }
        Poll::Ready(result)
    }
}

/// A request body that records whether it was read to its end.
struct Tracked {
    inner: Body,
    read_to_end: Arc<AtomicBool>,
}

impl Tracked {
    fn mark_if_ended(&self) {
        if self.inner.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
        }
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.read_to_end.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(_))) => self.mark_if_ended(),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
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

/// How long a closing connection keeps reading what its client still sends.
pub const LINGER: Duration = Duration::from_secs(2);

/// A TCP listener whose connections close with a lingering close (see the module's docs).
/// `axum::serve(LingerListener::new(l).tap_io(…), …)` (`tap_io` also lets
/// `ConnectInfo<SocketAddr>` work with it).
#[derive(Debug)]
pub struct LingerListener {
    inner: TcpListener,
}

impl LingerListener {
    pub fn new(inner: TcpListener) -> Self {
        Self { inner }
    }
}

impl axum::serve::Listener for LingerListener {
    type Io = Lingering<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        // axum's own accept loop for TCP (it waits out errors such as EMFILE).
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        (Lingering::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection whose shutdown lingers: it shuts its sending side, then reads and discards
/// until the peer's end of stream, an error, or [`LINGER`].
#[derive(Debug)]
pub struct Lingering<I> {
    io: I,
    /// Set once the sending side is shut: the deadline of the discarding.
    closing: Option<Pin<Box<Sleep>>>,
}

impl<I> Lingering<I> {
    pub fn new(io: I) -> Self {
        Self { io, closing: None }
    }

    pub fn get_ref(&self) -> &I {
        &self.io
    }
}

/// Reads one poll may discard before it yields to other tasks.
const DISCARD_READS_PER_POLL: usize = 64;

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncRead for Lingering<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.closing.is_none() {
            std::task::ready!(Pin::new(&mut this.io).poll_shutdown(cx))?;
            this.closing = Some(Box::pin(tokio::time::sleep(LINGER)));
        }
        let mut scratch = [0u8; 4096];
        let mut waiting_for_data = false;
        for _ in 0..DISCARD_READS_PER_POLL {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.io).poll_read(cx, &mut buf) {
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
