//! The lingering close ([`Lingering`]): after deciding to close, shut the sending side and read
//! and discard what the client still sends, for at most [`LINGER`], so it sees the last answer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Sleep;

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
    pub(super) fn on_drop(mut self, flag: Arc<AtomicBool>) -> Self {
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
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.io()?.poll_read(cx, buf)
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for Lingering<I> {
    fn poll_write(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>],
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
