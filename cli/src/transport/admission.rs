//! Admission: the caps on open connections (in all, and per client: an IPv4 address or an
//! IPv6 /64), the refusals past them, and the listener that applies them to `serve`'s port.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use agentaddress_core::domain::client::ClientKey;
use futures::task::AtomicWaker;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::{ConnLimits, ConnState, Guarded, Lingering, Stalls};

/// Refusals being written at once; past this a refused connection is just closed.
pub const MAX_REFUSING: usize = 16;

/// The open connections of one door, counted for its caps: in all, and per client (an IPv4
/// address or an IPv6 /64); and its refusals being written. `serve`'s HTTP port has one (in
/// its [`Registry`]), the SMTP door another.
#[derive(Debug)]
pub struct Caps {
    /// Open connections at most.
    max_total: usize,
    /// Open connections per client at most (0: no per-client cap).
    max_per_ip: usize,
    active: AtomicUsize,
    /// Open connections per client: an IPv4 address or an IPv6 /64.
    per_ip: Mutex<HashMap<ClientKey, usize>>,
    refusing: AtomicUsize,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The cap on all open connections.
    ServerFull,
    /// The cap on one client's open connections.
    ClientFull,
}

impl Caps {
    /// `max_total` open connections at most, `max_per_ip` per client (0: no per-client cap).
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_ip,
            active: AtomicUsize::new(0),
            per_ip: Mutex::new(HashMap::new()),
            refusing: AtomicUsize::new(0),
        })
    }

    /// Open connections at most.
    pub fn max_total(&self) -> usize {
        self.max_total
    }

    /// A place for a connection from `ip`, or why there is none.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let ip = ClientKey::of(ip);
        if self.active.fetch_add(1, Ordering::AcqRel) >= self.max_total {
            self.active.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::ServerFull);
        }
        if self.max_per_ip > 0 {
            let mut per_ip = self
                .per_ip
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= self.max_per_ip {
                drop(per_ip);
                self.active.fetch_sub(1, Ordering::AcqRel);
                return Err(Refusal::ClientFull);
            }
            *n += 1;
        }
        Ok(Slot {
            caps: Arc::clone(self),
            ip,
        })
    }

    /// A place among the refusals being written, held until dropped; `None` when
    /// [`MAX_REFUSING`] are being written already.
    pub fn refusing(self: &Arc<Self>) -> Option<Refusing> {
        if self.refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Refusing(Arc::clone(self)))
    }
}

/// A connection's place in the counts, given back when the connection closes.
#[derive(Debug)]
pub struct Slot {
    caps: Arc<Caps>,
    ip: ClientKey,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.caps.max_per_ip > 0 {
            let mut per_ip = self
                .caps
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
        self.caps.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A refusal being written, counted until dropped ([`Caps::refusing`]).
#[derive(Debug)]
pub struct Refusing(Arc<Caps>);

impl Drop for Refusing {
    fn drop(&mut self) {
        self.0.refusing.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections of `serve`'s HTTP port: counts for the caps.
#[derive(Debug)]
pub struct Registry {
    limits: Arc<ConnLimits>,
    caps: Arc<Caps>,
}

impl Registry {
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        Arc::new(Self {
            caps: Caps::new(limits.max_connections, limits.max_connections_per_ip),
            limits: Arc::new(limits),
        })
    }

    fn admit(&self, ip: IpAddr) -> Result<Slot, Refusal> {
        self.caps.admit(ip)
    }

    /// Answers a refused connection with a 503 and closes it, in the background; when many
    /// refusals are already being written, only tries one write and closes.
    fn refuse(&self, stream: TcpStream, why: Refusal) {
        tracing::debug!(?why, "connection refused");
        let answer = match why {
            Refusal::ServerFull => &SERVER_FULL,
            Refusal::ClientFull => &CLIENT_FULL,
        };
        let Some(refusing) = self.caps.refusing() else {
            let _ = stream.try_write(answer);
            return;
        };
        tokio::spawn(async move {
            let mut stream = Lingering::new(stream);
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                stream.write_all(answer).await?;
                stream.shutdown().await
            })
            .await;
            drop(stream);
            drop(refusing);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
