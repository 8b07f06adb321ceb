//! The SMTP door of `agentaddress serve` (docs/API.md §10): an ESMTP server that receives mail
//! for the addresses' `email` and hands each message to the delivery pipeline
//! (`agentaddress_email::deliver_email`), answering `250` only once the events are committed.
//!
//! "One client" is a [`ClientKey`]: an IPv4 address or an IPv6 /64 (docs/API.md §10).
//!
//! **Admission** ([`Caps`], counted as for HTTP by `transport`'s): a connection over the total
//! cap, or over the cap of its client, is answered `421 4.7.0` and closed.
//!
//! **Sessions** ([`session`]): a command must arrive within the command timeout (`421 4.4.2`
//! then close); a message must arrive whole within the DATA timeout, and meanwhile keep coming
//! (no stall, a least average rate: `421 4.4.2` then close); a session ends after too many
//! failed commands or too many commands (`421 4.7.0`). Command lines are at most 1,000 bytes
//! (`500 5.5.6`), messages at most the raw email limit (`552 5.3.4`), and only
//! `<CR><LF>.<CR><LF>` ends one (a bare CR or LF refuses it: `550 5.6.0`).
//!
//! **Memory** ([`DataMemory`]): messages being received and delivered share a budget, taken by
//! the bytes received in steps of [`STEP_KIB`] KiB, and one client may hold at most a share of
//! it. A `DATA` whose first step cannot be had within the command timeout gets `452 4.3.1`
//! (its transaction stands); a message that cannot grow within the command timeout is read to
//! its end, discarded, and answered `452 4.3.1`.
//!
//! **Shutdown**: on the shutdown signal the server stops accepting, answers idle sessions
//! `421 4.3.2` and closes them, and waits up to [`SHUTDOWN_GRACE`] for messages being received
//! or delivered to finish (each is answered, then closed with `421 4.3.2`).

mod auth;
mod command;
mod line;
mod session;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentaddress_core::domain::client::ClientKey;
use agentaddress_core::domain::{Clock, Limits};
use agentaddress_core::store::Store;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use crate::transport::{Caps, Refusal, MAX_REFUSING};

/// How long, after the shutdown signal, sessions receiving or delivering a message may take to
/// finish before they are cut (their client then sees the connection close without a `250`, and
/// sends again).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// The SMTP flags of `agentaddress serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct SmtpArgs {
    /// Receive email over SMTP on this address (e.g. 0.0.0.0:25 or 0.0.0.0:2525; port 0 picks a
    /// free port, printed as `agentaddress smtp listening on ADDR`). Off when not set.
    #[arg(long, env = "AGENTADDRESS_SMTP_LISTEN")]
    pub smtp_listen: Option<SocketAddr>,

    /// The server's name in its SMTP greeting and EHLO answer (default: the email domain).
    #[arg(long, env = "AGENTADDRESS_SMTP_HOSTNAME")]
    pub smtp_hostname: Option<String>,

    /// PEM certificate chain for STARTTLS (with --smtp-tls-key; STARTTLS is offered only then).
    #[arg(long, env = "AGENTADDRESS_SMTP_TLS_CERT", requires = "smtp_tls_key")]
    pub smtp_tls_cert: Option<PathBuf>,

    /// PEM private key for STARTTLS (with --smtp-tls-cert).
    #[arg(long, env = "AGENTADDRESS_SMTP_TLS_KEY", requires = "smtp_tls_cert")]
    pub smtp_tls_key: Option<PathBuf>,

    /// Evaluate SPF, DKIM and DMARC of each received message (DNS lookups, at most 20 s) into
    /// its `data.auth`; without it every verdict is `none`. Nothing is refused on them, but a
    /// message without a single author (see --smtp-allow-ambiguous-from) is.
    #[arg(long, env = "AGENTADDRESS_SMTP_CHECK_AUTH")]
    pub smtp_check_auth: bool,

    /// With --smtp-check-auth, accept messages whose author is ambiguous (no From field,
    /// several, several mailboxes or none parseable) instead of refusing them `550 5.7.1` (RFC
    /// 7489 §6.6.1); they arrive with `from` null and DMARC `permerror`. No effect without
    /// --smtp-check-auth, which never refuses them.
    #[arg(long, env = "AGENTADDRESS_SMTP_ALLOW_AMBIGUOUS_FROM")]
    pub smtp_allow_ambiguous_from: bool,

    /// DNS server (IP:PORT) for --smtp-check-auth (default: the system's, /etc/resolv.conf).
    #[arg(
        long,
        env = "AGENTADDRESS_SMTP_DNS_RESOLVER",
        requires = "smtp_check_auth"
    )]
    pub smtp_dns_resolver: Option<SocketAddr>,

    /// Seconds an SMTP client may take to send its next command (then `421 4.4.2`, closed).
    #[arg(long, env = "AGENTADDRESS_SMTP_COMMAND_TIMEOUT_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub smtp_command_timeout_seconds: u64,

    /// Seconds an SMTP client may take to send a whole message after `354` (then `421 4.4.2`,
    /// closed, nothing stored).
    #[arg(long, env = "AGENTADDRESS_SMTP_DATA_TIMEOUT_SECONDS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub smtp_data_timeout_seconds: u64,

    /// Seconds a message being sent after `354` may go without a byte; also the grace before
    /// --smtp-data-min-rate applies (then `421 4.4.2`, closed, nothing stored). Time the server
    /// spends waiting for memory does not count.
    #[arg(long, env = "AGENTADDRESS_SMTP_DATA_STALL_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub smtp_data_stall_seconds: u64,

    /// Least average rate of a message being sent, in bytes per second, once
    /// --smtp-data-stall-seconds have passed (slower: `421 4.4.2`, closed, nothing stored; 0:
    /// none).
    #[arg(long, env = "AGENTADDRESS_SMTP_DATA_MIN_RATE", default_value_t = 1024)]
    pub smtp_data_min_rate: u64,

    /// Open SMTP connections at most (more: `421 4.7.0`, closed).
    #[arg(long, env = "AGENTADDRESS_SMTP_MAX_CONNECTIONS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub smtp_max_connections: u64,

    /// Open SMTP connections per client (an IPv4 address or an IPv6 /64) at most (0: no per-IP
    /// cap).
    #[arg(
        long,
        env = "AGENTADDRESS_SMTP_MAX_CONNECTIONS_PER_IP",
        default_value_t = 20
    )]
    pub smtp_max_connections_per_ip: u64,

    /// Failed commands (5xx answers, refused recipients included) after which an SMTP session
    /// is closed with `421 4.7.0`.
    #[arg(long, env = "AGENTADDRESS_SMTP_MAX_ERRORS", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub smtp_max_errors: u64,

    /// MiB that messages being received and delivered may hold together (at least one message
    /// of --max-email-bytes), taken by the bytes received, 64 KiB at a time. A `DATA` that
    /// cannot have its first 64 KiB within the command timeout gets `452 4.3.1`; a message
    /// that cannot grow within the command timeout is read to its end, discarded, and answered
    /// `452 4.3.1`.
    #[arg(long, env = "AGENTADDRESS_SMTP_DATA_MEMORY_MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub smtp_data_memory_mib: u64,

    /// MiB of --smtp-data-memory-mib one client (an IPv4 address or an IPv6 /64) may hold at
    /// once; past it as past the whole budget (default: a quarter of it; at least one message
    /// of --max-email-bytes, at most the whole budget).
    #[arg(long, env = "AGENTADDRESS_SMTP_DATA_MEMORY_PER_IP_MIB",
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub smtp_data_memory_per_ip_mib: Option<u64>,

    /// Messages (`MAIL FROM` commands) one client (an IPv4 address or an IPv6 /64) may start
    /// per minute; past it `MAIL` is answered `450 4.7.1` until the minute ends (0: no limit).
    #[arg(
        long,
        env = "AGENTADDRESS_SMTP_MESSAGES_PER_MINUTE_PER_IP",
        default_value_t = 600
    )]
    pub smtp_messages_per_minute_per_ip: u64,

    /// Commands one SMTP session may send at most (then `421 4.7.0`, closed).
    #[arg(long, env = "AGENTADDRESS_SMTP_MAX_COMMANDS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub smtp_max_commands: u64,
}

/// What every session shares.
pub struct Shared {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub limits: Limits,
    /// The email domain: recipients must be in it.
    pub domain: String,
    /// The server's name in its greeting.
    pub hostname: String,
    pub tls: Option<TlsAcceptor>,
    /// SPF, DKIM and DMARC, when --smtp-check-auth is set.
    pub auth: Option<auth::Checker>,
    /// Refuse messages without a single author (--smtp-check-auth without
    /// --smtp-allow-ambiguous-from).
    pub refuse_ambiguous_from: bool,
    pub command_timeout: Duration,
    pub data_timeout: Duration,
    /// A message being sent may go this long without a byte, and is then held to `data_min_rate`.
    pub data_stall: Duration,
    /// Least average bytes a second of a message being sent, after `data_stall` (0: none).
    pub data_min_rate: u64,
    pub max_errors: u64,
    pub max_commands: u64,
    /// `MAIL FROM`s per client per minute (`None`: no limit).
    pub messages_per_minute_per_ip: Option<u64>,
    /// The memory of messages being received or delivered (see `--smtp-data-memory-mib`).
    pub data_memory: Arc<DataMemory>,
}

/// A bound SMTP listener, ready to [`serve`](SmtpServer::serve).
pub struct SmtpServer {
    listener: TcpListener,
    shared: Arc<Shared>,
    caps: Arc<Caps>,
}

impl SmtpServer {
    /// Binds `args.smtp_listen` (`None` when SMTP is off) and loads the TLS key pair.
    pub async fn bind(
        args: &SmtpArgs, store: Arc<dyn Store>, clock: Arc<dyn Clock>, limits: Limits,
        domain: String,
    ) -> Result<Option<Self>, String> {
        let Some(listen) = args.smtp_listen else {
            return Ok(None);
        };
        let tls = match (&args.smtp_tls_cert, &args.smtp_tls_key) {
            (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
            _ => None,
        };
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen for SMTP on {listen}: {e}"))?;
        let hostname = args.smtp_hostname.clone().unwrap_or_else(|| domain.clone());
        let limits_max_email_bytes = limits.max_email_bytes;
        let auth = if args.smtp_check_auth {
            Some(auth::Checker::new(
                args.smtp_dns_resolver,
                hostname.clone(),
            )?)
        } else {
            None
        };
        if hostname.is_empty() || hostname.len() > 255 || hostname.chars().any(char::is_control) {
            return Err("--smtp-hostname must be 1 to 255 characters".into());
        }
        Ok(Some(Self {
            listener,
            shared: Arc::new(Shared {
                store,
                clock,
                limits,
                domain,
                hostname,
                tls,
                refuse_ambiguous_from: auth.is_some() && !args.smtp_allow_ambiguous_from,
                auth,
                command_timeout: Duration::from_secs(args.smtp_command_timeout_seconds),
                data_timeout: Duration::from_secs(args.smtp_data_timeout_seconds),
                data_stall: Duration::from_secs(args.smtp_data_stall_seconds),
                data_min_rate: args.smtp_data_min_rate,
                max_errors: args.smtp_max_errors,
                max_commands: args.smtp_max_commands,
                messages_per_minute_per_ip: Some(args.smtp_messages_per_minute_per_ip)
                    .filter(|n| *n > 0),
                data_memory: Arc::new(DataMemory::new(
                    args.smtp_data_memory_mib,
                    args.smtp_data_memory_per_ip_mib,
                    limits_max_email_bytes,
                )),
            }),
            caps: Caps::new(
                usize::try_from(args.smtp_max_connections).unwrap_or(usize::MAX),
                usize::try_from(args.smtp_max_connections_per_ip).unwrap_or(usize::MAX),
            ),
        }))
    }

    /// Descriptors the SMTP door may hold at most: its connections and its refusals.
    pub fn descriptors(&self) -> usize {
        self.caps.max_total().saturating_add(MAX_REFUSING)
    }

    pub fn local_addr(&self) -> Result<SocketAddr, String> {
        self.listener
            .local_addr()
            .map_err(|e| format!("cannot read the SMTP listening address: {e}"))
    }

    /// Accepts connections until `shutdown` turns true, then lets sessions finish (see the
    /// module's documentation).
    pub async fn serve(self, mut shutdown: watch::Receiver<bool>) {
        let mut sessions = JoinSet::new();
        loop {
            while sessions.try_join_next().is_some() {}
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                _ = shutdown.wait_for(|stop| *stop) => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted.
                    tracing::warn!(error = %e, "accepting an SMTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match self.caps.admit(peer.ip()) {
                Ok(slot) => {
                    let shared = Arc::clone(&self.shared);
                    let shutdown = shutdown.clone();
                    sessions.spawn(async move {
                        session::run(stream, peer, shared, shutdown).await;
                        drop(slot);
                    });
                }
                Err(why) => {
                    let why = match why {
                        Refusal::ServerFull => "too many connections",
                        Refusal::ClientFull => "too many connections from this IP",
                    };
                    tracing::info!(%peer, why, "SMTP connection refused");
                    refuse(&self.caps, stream);
                }
            }
        }
        drop(self.listener);
        let open = sessions.len();
        if open > 0 {
            tracing::info!(open, "SMTP: waiting for sessions to finish");
        }
        let finished = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while sessions.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            tracing::warn!(
                cut = sessions.len(),
                "SMTP: sessions still open after the shutdown grace were cut"
            );
            sessions.shutdown().await;
        }
    }
}

/// KiB of one step of a message's memory: taken at `DATA`, then one more each time the message
/// outgrows what it holds.
pub const STEP_KIB: u64 = 64;

/// The memory budget of messages being received and delivered (`--smtp-data-memory-mib`), in
/// KiB, and each client's share of it (`--smtp-data-memory-per-ip-mib`).
///
/// A message holds memory by the bytes received, a [`STEP_KIB`] step at a time ([`Reservation`]),
/// until it is delivered or discarded: a client that opens `DATA` and stalls holds one step,
/// not a whole message's worth, and is cut by the data rate (docs/API.md §10). One client holds
/// at most its share, so clients from a few addresses cannot take the whole budget.
#[derive(Debug)]
pub struct DataMemory {
    /// The whole budget, one permit a KiB.
    total: Arc<Semaphore>,
    /// KiB one message may hold: the raw email limit, rounded up.
    message_kib: u64,
    /// KiB one client may hold.
    per_client_kib: u64,
    /// KiB each client holds now (no entry: none).
    held: Mutex<HashMap<ClientKey, u64>>,
    /// Woken when a client gives memory back.
    freed: Notify,
}

/// What one message holds of [`DataMemory`], given back when dropped (or [`release`]d).
///
/// [`release`]: Reservation::release
#[derive(Debug)]
pub struct Reservation {
    memory: Arc<DataMemory>,
    client: ClientKey,
    kib: u64,
    permits: Option<OwnedSemaphorePermit>,
}

impl DataMemory {
    /// The budget of `memory_mib` (at least one message of `max_email_bytes`), each client's share
    /// `per_client_mib` (default: a quarter of the budget), at least one message and at most the
    /// budget.
    pub fn new(memory_mib: u64, per_client_mib: Option<u64>, max_email_bytes: u64) -> Self {
        let message_kib = max_email_bytes.div_ceil(1024).max(1);
        let cap = u64::try_from(Semaphore::MAX_PERMITS).unwrap_or(u64::MAX);
        let total_kib = memory_mib.saturating_mul(1024).max(message_kib).min(cap);
        let per_client_kib = per_client_mib
            .map_or(total_kib / 4, |mib| mib.saturating_mul(1024))
            .max(message_kib)
            .min(total_kib);
        Self {
            total: Arc::new(Semaphore::new(
                usize::try_from(total_kib).unwrap_or(Semaphore::MAX_PERMITS),
            )),
            message_kib: message_kib.min(total_kib),
            per_client_kib,
            held: Mutex::new(HashMap::new()),
            freed: Notify::new(),
        }
    }

    /// The first step of a message from `client`, waiting up to `wait` for it.
    pub async fn reserve(
        self: &Arc<Self>, client: ClientKey, wait: Duration,
    ) -> Option<Reservation> {
        let mut reservation = Reservation {
            memory: Arc::clone(self),
            client,
            kib: 0,
            permits: None,
        };
        reservation.grow(wait).await.then_some(reservation)
    }

    /// Takes `kib` of `client`'s share if it has that much left.
    fn take_share(&self, client: ClientKey, kib: u64) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = held.get(&client).copied().unwrap_or(0);
        if mine.saturating_add(kib) > self.per_client_kib {
            return false;
        }
        held.insert(client, mine + kib);
        true
    }

    fn give_share(&self, client: ClientKey, kib: u64) {
        if kib == 0 {
            return;
        }
        {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(mine) = held.get_mut(&client) {
                *mine = mine.saturating_sub(kib);
                if *mine == 0 {
                    held.remove(&client);
                }
            }
        }
        self.freed.notify_waiters();
    }
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.kib.saturating_mul(1024)
    }

    /// One more step (less when it reaches a whole message), waiting up to `wait` for the
    /// client's share and then for the budget; false when it could not be had (nothing more is
    /// then held). True at once when the reservation already holds a whole message.
    pub async fn grow(&mut self, wait: Duration) -> bool {
        let memory = Arc::clone(&self.memory);
        let want = STEP_KIB.min(memory.message_kib.saturating_sub(self.kib));
        if want == 0 {
            return true;
        }
        let deadline = Instant::now() + wait;
        // The client's share: wait for its other messages to give some back.
        loop {
            let freed = memory.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if memory.take_share(self.client, want) {
                break;
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return false;
            }
        }
        // Then the budget (first come, first served).
        let permits = u32::try_from(want).unwrap_or(u32::MAX);
        let total = Arc::clone(&memory.total);
        match tokio::time::timeout_at(deadline, total.acquire_many_owned(permits)).await {
            Ok(Ok(permit)) => {
                match &mut self.permits {
                    Some(held) => held.merge(permit),
                    None => self.permits = Some(permit),
                }
                self.kib += want;
                true
            }
            _ => {
                memory.give_share(self.client, want);
                false
            }
        }
    }

    /// Gives everything back (the message is no longer kept).
    pub fn release(&mut self) {
        self.permits = None;
        self.memory.give_share(self.client, self.kib);
        self.kib = 0;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.release();
    }
}

fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read the certificates in {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the private key in {}: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS configuration: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("the SMTP TLS certificate and key don't fit: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Answers `421 4.7.0` and closes, in the background (a few at a time, [`MAX_REFUSING`]; past
/// that the connection is just closed).
fn refuse(caps: &Arc<Caps>, mut stream: TcpStream) {
    let Some(refusing) = caps.refusing() else {
        return;
    };
    agentaddress_core::metrics::smtp_refusal(421);
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            let _ = stream
                .write_all(b"421 4.7.0 Too many connections, try again later\r\n")
                .await;
            let _ = stream.shutdown().await;
        })
        .await;
        drop(refusing);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn client(last: u8) -> ClientKey {
        ClientKey::of(IpAddr::from([127, 0, 0, last]))
    }

    const SHORT: Duration = Duration::from_millis(50);

    #[test]
    fn the_budget_holds_a_message_and_a_client_a_quarter_of_it() {
        let m = DataMemory::new(1, None, 128 * 1024);
        assert_eq!((m.message_kib, m.per_client_kib), (128, 256));
        // A message larger than a quarter: one client may still send one.
        let m = DataMemory::new(1, None, 600 * 1024);
        assert_eq!((m.message_kib, m.per_client_kib), (600, 600));
        // A budget smaller than one message holds one.
        let m = DataMemory::new(1, None, 2 * 1024 * 1024);
        assert_eq!(m.total.available_permits(), 2048);
        assert_eq!(m.per_client_kib, 2048);
        // A share given is at least one message and at most the budget.
        let m = DataMemory::new(4, Some(1), 2 * 1024 * 1024);
        assert_eq!(m.per_client_kib, 2048);
        let m = DataMemory::new(4, Some(8), 1024);
        assert_eq!(m.per_client_kib, 4096);
    }

    #[tokio::test]
    async fn one_client_holds_at_most_its_share_and_waits_for_it() {
        let m = Arc::new(DataMemory::new(1, None, 128 * 1024));
        let mut held = Vec::new();
        for _ in 0..4 {
            let r = m.reserve(client(2), SHORT).await;
            held.push(r.unwrap_or_else(|| panic!("a step within the share")));
        }
        assert!(
            m.reserve(client(2), SHORT).await.is_none(),
            "past the share"
        );
        assert!(!held[0].grow(SHORT).await, "no growth past the share");
        assert_eq!(
            held[0].bytes(),
            64 * 1024,
            "a failed growth keeps what was held"
        );
        // Another client is not held back.
        let mut other = m
            .reserve(client(3), SHORT)
            .await
            .unwrap_or_else(|| panic!("another client's step"));
        assert!(other.grow(SHORT).await);
        assert_eq!(other.bytes(), 128 * 1024);
        // A whole message is the most one message holds.
        assert!(other.grow(SHORT).await);
        assert_eq!(other.bytes(), 128 * 1024);
        // A waiting client gets memory as soon as one of its messages gives it back.
        let waiter = {
            let m = Arc::clone(&m);
            tokio::spawn(async move { m.reserve(client(2), Duration::from_secs(10)).await })
        };
        tokio::time::sleep(SHORT).await;
        held.pop();
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap_or_else(|_| panic!("the waiter was not woken"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(got.is_some());
        drop(got);
        drop(held);
        drop(other);
        assert_eq!(m.total.available_permits(), 1024);
        assert!(m
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty());
    }

    #[tokio::test]
    async fn the_whole_budget_is_shared_by_all_clients() {
        let m = Arc::new(DataMemory::new(1, None, 128 * 1024));
        let mut held = Vec::new();
        for c in 2..6 {
            for _ in 0..4 {
                let r = m.reserve(client(c), SHORT).await;
                held.push(r.unwrap_or_else(|| panic!("client {c} within the budget")));
            }
        }
        assert_eq!(m.total.available_permits(), 0);
        assert!(
            m.reserve(client(6), SHORT).await.is_none(),
            "past the budget"
        );
        // A refused client keeps no share of what it did not get.
        assert!(m
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&client(6))
            .is_none());
        held[0].release();
        assert_eq!(held[0].bytes(), 0);
        assert!(m.reserve(client(6), SHORT).await.is_some());
    }
}
