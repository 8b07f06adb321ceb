//! The SMTP door of `agentaddress serve` (docs/API.md §10): an ESMTP server that receives mail
//! for the addresses' `email` and hands each message to the delivery pipeline
//! (`agentaddress_email::deliver`), answering `250` only once the events are committed.
//!
//! **Admission** ([`Caps`]): a connection over the total cap, or over the cap of its client IP,
//! is answered `421 4.7.0` and closed.
//!
//! **Sessions** ([`session`]): a command must arrive within the command timeout (`421 4.4.2`
//! then close); a message must arrive whole within the DATA timeout; a session ends after too
//! many failed commands or too many commands (`421 4.7.0`). Command lines are at most 1,000
//! bytes (`500 5.5.6`), messages at most the raw email limit (`552 5.3.4`). Messages being
//! received share a memory budget: past it a `DATA` waits its turn, then gets `452 4.3.1`.
//!
//! **Shutdown**: on the shutdown signal the server stops accepting, answers idle sessions
//! `421 4.3.2` and closes them, and waits up to [`SHUTDOWN_GRACE`] for messages being received
//! or delivered to finish (each is answered, then closed with `421 4.3.2`).

mod auth;
mod command;
mod line;
mod session;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentaddress_core::domain::{Clock, Limits};
use agentaddress_core::store::Store;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

/// How long, after the shutdown signal, sessions receiving or delivering a message may take to
/// finish before they are cut (their client then sees the connection close without a `250`, and
/// sends again).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Refusals (`421 4.7.0`) being written at once; past this a refused connection is just closed.
const MAX_REFUSING: usize = 16;

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
    /// its `data.auth`; without it every verdict is `none`. Nothing is refused on them.
    #[arg(long, env = "AGENTADDRESS_SMTP_CHECK_AUTH")]
    pub smtp_check_auth: bool,

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

    /// Open SMTP connections at most (more: `421 4.7.0`, closed).
    #[arg(long, env = "AGENTADDRESS_SMTP_MAX_CONNECTIONS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub smtp_max_connections: u64,

    /// Open SMTP connections per client IP at most (0: no per-IP cap).
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

    /// MiB that messages being received and delivered may hold together: as many messages of
    /// the largest size (--max-email-bytes) as fit, at least one, are received at once; a
    /// further `DATA` waits for its turn up to the command timeout, then gets `452 4.3.1`.
    #[arg(long, env = "AGENTADDRESS_SMTP_DATA_MEMORY_MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub smtp_data_memory_mib: u64,

    /// Messages (`MAIL FROM` commands) one client IP may start per minute; past it `MAIL` is
    /// answered `450 4.7.1` until the minute ends (0: no limit).
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
    pub command_timeout: Duration,
    pub data_timeout: Duration,
    pub max_errors: u64,
    pub max_commands: u64,
    /// `MAIL FROM`s per client IP per minute (`None`: no limit).
    pub messages_per_minute_per_ip: Option<u64>,
    /// Messages being received or delivered at once (see `--smtp-data-memory-mib`).
    pub data_slots: Arc<Semaphore>,
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
        args: &SmtpArgs,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limits: Limits,
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
                auth,
                command_timeout: Duration::from_secs(args.smtp_command_timeout_seconds),
                data_timeout: Duration::from_secs(args.smtp_data_timeout_seconds),
                max_errors: args.smtp_max_errors,
                max_commands: args.smtp_max_commands,
                messages_per_minute_per_ip: Some(args.smtp_messages_per_minute_per_ip)
                    .filter(|n| *n > 0),
                data_slots: Arc::new(Semaphore::new(data_slots(
                    args.smtp_data_memory_mib,
                    limits_max_email_bytes,
                ))),
            }),
            caps: Arc::new(Caps {
                max_total: usize::try_from(args.smtp_max_connections).unwrap_or(usize::MAX),
                max_per_ip: usize::try_from(args.smtp_max_connections_per_ip).unwrap_or(usize::MAX),
                open: Mutex::new(Open::default()),
                refusing: AtomicUsize::new(0),
            }),
        }))
    }

    /// Descriptors the SMTP door may hold at most: its connections and its refusals.
    pub fn descriptors(&self) -> usize {
        self.caps.max_total.saturating_add(MAX_REFUSING)
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
                    tracing::info!(%peer, why, "SMTP connection refused");
                    self.caps.refuse(stream);
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

/// How many messages of the largest size fit in `memory_mib` (at least one).
fn data_slots(memory_mib: u64, max_email_bytes: u64) -> usize {
    let slots = memory_mib.saturating_mul(1024 * 1024) / max_email_bytes.max(1);
    usize::try_from(slots)
        .unwrap_or(usize::MAX)
        .clamp(1, Semaphore::MAX_PERMITS)
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

/// Open connections, for the caps.
#[derive(Debug)]
struct Caps {
    max_total: usize,
    /// 0: no per-IP cap.
    max_per_ip: usize,
    open: Mutex<Open>,
    refusing: AtomicUsize,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// A connection's place under the caps, given back when dropped.
struct Slot {
    caps: Arc<Caps>,
    ip: IpAddr,
}

impl Caps {
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, &'static str> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.max_total {
            return Err("too many connections");
        }
        let mine = open.per_ip.get(&ip).copied().unwrap_or(0);
        if self.max_per_ip > 0 && mine >= self.max_per_ip {
            return Err("too many connections from this IP");
        }
        open.total += 1;
        open.per_ip.insert(ip, mine + 1);
        Ok(Slot {
            caps: Arc::clone(self),
            ip,
        })
    }

    /// Answers `421 4.7.0` and closes, in the background (a few at a time; past that the
    /// connection is just closed).
    fn refuse(self: &Arc<Self>, mut stream: TcpStream) {
        if self.refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        agentaddress_core::metrics::smtp_refusal(421);
        let caps = Arc::clone(self);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                let _ = stream
                    .write_all(b"421 4.7.0 Too many connections, try again later\r\n")
                    .await;
                let _ = stream.shutdown().await;
            })
            .await;
            caps.refusing.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .caps
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}
