//! `agentaddress serve`: config, telemetry, the database's lock, store, sweeper, server,
//! graceful shutdown, and the start-up banner.

mod banner;
mod dbfile;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agentaddress_api::config::ServiceConfig;
use agentaddress_api::page_budget::PageBudget;
use agentaddress_api::stream::{self, StreamSettings};
use agentaddress_api::telemetry::{self, LogFormat};
use agentaddress_api::wake_delivery::{WakeLoop, Waking};
use agentaddress_api::{ApiConfig, AppState, WsEndpoint};
use agentaddress_core::domain::{Clock, SystemClock};
use agentaddress_core::relay::HookCaller;
use agentaddress_core::store::Store;
use agentaddress_sqlite::{SqliteOptions, SqliteStore, Synchronous, MAX_GROUP};

use crate::transport;
use tokio::sync::watch;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the chosen one is printed).
    #[arg(long, env = "AGENTADDRESS_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// SQLite database file (created if missing), or `:memory:` for a throwaway store.
    #[arg(long, env = "AGENTADDRESS_DB", default_value = "./agentaddress.db")]
    db: PathBuf,

    /// `full`: every 2xx survives power loss. `normal`: survives process crashes only.
    #[arg(long, env = "AGENTADDRESS_SQLITE_SYNCHRONOUS", value_enum, default_value_t = Synchronous::Full)]
    sqlite_synchronous: Synchronous,

    /// Most write requests SQLite commits in one transaction (group commit; 1 = off).
    /// A benchmarking knob: leave it alone.
    #[arg(long, env = "AGENTADDRESS_SQLITE_GROUP_MAX", default_value_t = MAX_GROUP as u64, hide = true,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    sqlite_group_max: u64,

    /// Whether a commit wakes waiting long polls (false: they re-read with backoff).
    /// A benchmarking knob: leave it alone.
    #[arg(long, env = "AGENTADDRESS_SQLITE_WAKEUPS", default_value_t = true, hide = true,
          action = clap::ArgAction::Set)]
    sqlite_wakeups: bool,

    /// Seconds between sweeps that remove expired events and addresses.
    #[arg(long, env = "AGENTADDRESS_SWEEP_INTERVAL_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    sweep_interval_seconds: u64,

    /// Log format.
    #[arg(long, env = "AGENTADDRESS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Seconds a started request head may take to arrive whole (HTTP/1).
    #[arg(long, env = "AGENTADDRESS_HEADER_TIMEOUT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_timeout_seconds: u64,

    /// Seconds a connection may stay open with no request in flight.
    #[arg(long, env = "AGENTADDRESS_IDLE_TIMEOUT_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_timeout_seconds: u64,

    /// Seconds a request body may go without a byte (then 408).
    #[arg(long, env = "AGENTADDRESS_BODY_TIMEOUT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    body_timeout_seconds: u64,

    /// Least average rate of a request body once the body timeout has passed, in bytes per
    /// second (0: none).
    #[arg(long, env = "AGENTADDRESS_BODY_MIN_RATE", default_value_t = 4096)]
    body_min_rate: u64,

    /// Seconds an answer may take to be written once the client stops reading it (then the
    /// connection is dropped).
    #[arg(long, env = "AGENTADDRESS_WRITE_TIMEOUT_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    write_timeout_seconds: u64,

    /// Open connections at most; lowered to what the descriptor limit allows.
    #[arg(long, env = "AGENTADDRESS_MAX_CONNECTIONS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,

    /// Open connections per client IP at most (0: no per-IP cap). Behind a reverse proxy
    /// every client has the proxy's IP: raise it or set 0.
    #[arg(
        long,
        env = "AGENTADDRESS_MAX_CONNECTIONS_PER_IP",
        default_value_t = 1_000
    )]
    max_connections_per_ip: u64,

    /// MiB that pages of events being written to clients (feed pages and event streams, over
    /// HTTP/1.1 and HTTP/2) may hold together; past it pages are cut shorter, and a read that
    /// finds no room for its next event waits for some (a long poll 10 s, then 503).
    #[arg(long, env = "AGENTADDRESS_PAGE_MEMORY_MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(4..=65_536))]
    page_memory_mib: u64,

    /// MiB of that memory one client (an IPv4 address or an IPv6 /64) may hold at most; its
    /// further pages wait for its own to be written. Behind a reverse proxy every client has
    /// the proxy's IP: raise it to --page-memory-mib.
    #[arg(long, env = "AGENTADDRESS_PAGE_MEMORY_PER_CLIENT_MIB", default_value_t = 16,
          value_parser = clap::value_parser!(u64).range(4..=65_536))]
    page_memory_per_client_mib: u64,

    /// Serve Prometheus metrics (`GET /metrics`) on this address (port 0: a free one, printed).
    /// Off by default: metrics are for the operator, so keep it on a private interface.
    #[arg(long, env = "AGENTADDRESS_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,

    /// Milliseconds without a sent event before an event stream sends a heartbeat comment
    /// (docs/API.md §14: 15 s). A testing knob: leave it alone.
    #[arg(long, env = "AGENTADDRESS_STREAM_HEARTBEAT_MS", hide = true,
          default_value_t = stream::HEARTBEAT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    stream_heartbeat_ms: u64,

    /// Milliseconds after which the server closes an event stream (docs/API.md §14: one hour).
    /// A testing knob: leave it alone.
    #[arg(long, env = "AGENTADDRESS_STREAM_MAX_MS", hide = true,
          default_value_t = stream::MAX_DURATION.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    stream_max_ms: u64,

    /// Milliseconds between the server's pings of a wake-up socket (docs/API.md §17: 30 s); a
    /// socket that answers nothing until the next ping is closed. A testing knob: leave it alone.
    #[arg(long, env = "AGENTADDRESS_WS_PING_MS", hide = true,
          default_value_t = crate::socket::PING_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(10..=86_400_000))]
    ws_ping_ms: u64,

    #[command(flatten)]
    smtp: crate::smtp::SmtpArgs,

    #[command(flatten)]
    outbound: crate::smarthost::OutboundArgs,

    #[command(flatten)]
    service: ServiceConfig,
}

/// Text logs on stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing_text() {
    telemetry::init(LogFormat::Text);
}

pub fn run(args: ServeArgs) -> ExitCode {
    let format = args.log_format;
    telemetry::init(format);
    let Some(runtime) = crate::runtime() else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // Said once: one JSON log line for a log pipeline (unless RUST_LOG silences
            // errors), else a plain line for a person.
            match format {
                LogFormat::Json | LogFormat::Lambda if tracing::enabled!(tracing::Level::ERROR) => {
                    tracing::error!("{message}")
                }
                _ => eprintln!("error: {message}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// The value of a clap enum as it is spelled on the command line (`full`, not `Full`).
fn flag_value<T: clap::ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

/// A store's refusal to open, in words, without repeating the path the message already names.
fn open_cause(e: &agentaddress_core::store::StoreError, path: &std::path::Path) -> String {
    use agentaddress_core::store::StoreError;
    let text = match e {
        StoreError::Internal(m) | StoreError::Unavailable(m) => m.clone(),
        other => other.to_string(),
    };
    let shown = path.display().to_string();
    let text = text
        .strip_prefix(&format!("cannot open {shown}: "))
        .unwrap_or(&text);
    text.replace(&shown, "the file")
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    // One server per database file (README): the lock comes before the store is opened, and
    // is held (`_lock`, dropped last) until the server has stopped.
    let place = dbfile::DbPlace::resolve(&args.db)?;
    let _lock = match &place {
        dbfile::DbPlace::File(path) => dbfile::lock(path)?,
        dbfile::DbPlace::Memory => None,
    };
    // The port before the store: a taken port makes no database file.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {}", args.listen, dbfile::io_cause(&e)))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let store = match &place {
        dbfile::DbPlace::Memory => SqliteStore::open_in_memory()
            .map_err(|e| format!("cannot open an in-memory database: {e}"))?,
        dbfile::DbPlace::File(path) => SqliteStore::open_with(
            path,
            SqliteOptions {
                synchronous: args.sqlite_synchronous,
                max_group: usize::try_from(args.sqlite_group_max).unwrap_or(MAX_GROUP),
                wakeups: args.sqlite_wakeups,
            },
        )
        .map_err(|e| {
            format!(
                "cannot open the database {}: {}",
                path.display(),
                open_cause(&e, path)
            )
        })?,
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let config = ApiConfig::from(&args.service);
    let retention = config.limits.clone();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let smtp = crate::smtp::SmtpServer::bind(
        &args.smtp,
        Arc::clone(&store),
        Arc::clone(&clock),
        config.limits.clone(),
        config.email_domain.clone(),
    )
    .await?;
    let outbound = crate::smarthost::configure(&args.outbound)?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let delivery = outbound.map(|(outbound, delivery)| {
        tracing::info!(from = %outbound.from, relay = outbound.relay.kind(), "sending email");
        let task = tokio::spawn(delivery.run(
            Arc::clone(&store),
            Arc::clone(&outbound),
            config.limits.clone(),
            Arc::clone(&clock),
            Duration::from_millis(args.outbound.outbound_tick_ms),
            shutdown_rx.clone(),
        ));
        (outbound, task)
    });
    let hook_caller: Arc<dyn HookCaller> = Arc::new(agentaddress_outbound::wake::WakeSender::new(
        args.service.allow_private_hooks,
    )?);
    let state = AppState::new(Arc::clone(&store), config)
        .with_hook_caller(Some(Arc::clone(&hook_caller)))
        .with_outbound(delivery.as_ref().map(|(o, _)| Arc::clone(o)))
        .with_clock(Arc::clone(&clock))
        .with_shutdown(shutdown_rx.clone())
        .with_page_budget(PageBudget::new(
            args.page_memory_mib * 1024 * 1024,
            args.page_memory_per_client_mib.min(args.page_memory_mib) * 1024 * 1024,
        ))
        .with_streams(Some(StreamSettings {
            heartbeat: Duration::from_millis(args.stream_heartbeat_ms),
            max_duration: Duration::from_millis(args.stream_max_ms),
        }))
        .with_ws(Some(match &args.service.ws_url {
            Some(url) => WsEndpoint::At(url.clone()),
            None => WsEndpoint::ThisServer,
        }));
    // HTTP/1.1 and, on the same port, HTTP/2 with prior knowledge (h2c): axum's server tells
    // them apart by the connection preface.
    // The wake-up socket (docs/API.md §17), beside the API's routes.
    let sockets = axum::Router::new()
        .route("/api/v1/ws", axum::routing::get(crate::socket::upgrade))
        .with_state(crate::socket::Sockets {
            state: state.clone(),
            counts: Default::default(),
            ping_every: Duration::from_millis(args.ws_ping_ms),
        });
    let app = sockets
        .merge(agentaddress_mcp::router(state))
        .layer(crate::transport::PerVersionLayer);

    let limits = transport::ConnLimits {
        header_timeout: Duration::from_secs(args.header_timeout_seconds),
        idle_timeout: Duration::from_secs(args.idle_timeout_seconds),
        body_timeout: Duration::from_secs(args.body_timeout_seconds),
        body_min_rate: args.body_min_rate,
        write_timeout: Duration::from_secs(args.write_timeout_seconds),
        max_connections: connection_cap(
            usize::try_from(args.max_connections).unwrap_or(usize::MAX),
            smtp.as_ref()
                .map_or(0, crate::smtp::SmtpServer::descriptors),
        ),
        max_connections_per_ip: usize::try_from(args.max_connections_per_ip).unwrap_or(usize::MAX),
    };
    announce(&format!("agentaddress listening on http://{local}"));
    // The SMTP door, when configured; its line comes second (tests read the first).
    let mut smtp_local = None;
    let smtp = match smtp {
        Some(server) => {
            let local = server.local_addr()?;
            smtp_local = Some(local);
            announce(&format!("agentaddress smtp listening on {local}"));
            tracing::info!(smtp_local = %local, "receiving email over SMTP");
            Some(tokio::spawn(server.serve(shutdown_rx.clone())))
        }
        None => None,
    };
    let mut metrics_local = None;
    // The metrics listener, when configured; its line comes after the SMTP one.
    let metrics = match args.metrics_listen {
        Some(addr) => {
            let (local, task) = crate::metrics::serve(addr, shutdown_rx.clone()).await?;
            metrics_local = Some(local);
            announce(&format!("agentaddress metrics on http://{local}/metrics"));
            tracing::info!(metrics_local = %local, "serving Prometheus metrics");
            Some(task)
        }
        None => None,
    };
    let banner = banner::Banner {
        local,
        public_url: args.service.public_url.as_deref(),
        smtp: smtp_local,
        email_domain: &args.service.email_domain,
        metrics: metrics_local,
        db: &place,
    };
    // The banner is for a person: plain lines on stderr with text logs (after the machine-read
    // lines on stdout, which stay as they are); with JSON logs, stderr stays JSON lines and the
    // same facts are the fields of the log line below.
    if args.log_format == LogFormat::Text {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}", banner.lines().join("\n")).and_then(|()| err.flush());
    }
    let base = banner.base();
    // The wake loop (docs/API.md §19): woken by the commits that give a hook something to do.
    let waking = tokio::spawn(WakeLoop::default().run(
        Arc::clone(&store),
        Arc::new(Waking {
            caller: hook_caller,
            base_url: base.to_string(),
        }),
        retention.clone(),
        Arc::clone(&clock),
        shutdown_rx.clone(),
    ));
    tracing::info!(
        %local,
        api = %format_args!("{base}/api/v1"),
        inbox = %format_args!("{base}/inbox"),
        mcp = %format_args!("{base}/api/mcp"),
        db = %place.describe(),
        synchronous = %flag_value(&args.sqlite_synchronous),
        max_connections = limits.max_connections,
        max_connections_per_ip = limits.max_connections_per_ip,
        "serving the agentaddress API on the embedded store"
    );
    if args.service.public_url.is_none() && !local.ip().is_loopback() {
        tracing::warn!(
            "listening on {local} without --public-url: the URLs handed out (inbox_url, \
             events_url, state_url) are built from each request's Host header; set \
             --public-url (AGENTADDRESS_PUBLIC_URL) to the address clients reach"
        );
    }

    // The timer scheduler (docs/API.md §20): sleeps until the earliest pending timer.
    let timers = tokio::spawn(agentaddress_api::timer_loop::run(
        Arc::clone(&store),
        retention.clone(),
        Arc::clone(&clock),
        shutdown_rx.clone(),
    ));
    let sweeper = {
        let store = Arc::clone(&store);
        let clock = Arc::clone(&clock);
        let mut stop = shutdown_rx.clone();
        let every = Duration::from_secs(args.sweep_interval_seconds);
        tokio::spawn(async move {
            loop {
                match store.sweep(&retention, clock.now()).await {
                    Ok(r) if r != Default::default() => tracing::info!(?r, "sweep"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "sweep failed"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = stop.changed() => break,
                }
            }
        })
    };

    let shutdown = async move {
        wait_for_signal().await;
        tracing::info!("shutting down: finishing in-flight requests");
        let _ = shutdown_tx.send(true);
    };
    // Caps, timeouts and the lingering close: see `transport`.
    let registry = transport::Registry::new(limits);
    let listener = transport::GuardListener::new(listener, registry);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<transport::Conn>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .map_err(|e| format!("server error: {e}"))?;
    if let Some(smtp) = smtp {
        let _ = smtp.await;
    }
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    let _ = sweeper.await;
    let _ = waking.await;
    let _ = timers.await;
    if let Some((_, task)) = delivery {
        let _ = task.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Prints one line on stdout for whoever started the server (the chosen ports). A closed or
/// full stdout is no reason to stop serving: the line is then only logged.
fn announce(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        tracing::info!("{line} (stdout is closed)");
    }
}

/// Descriptors kept free besides connections: refusals being written, the spare of the accept
/// loop, and what the runtime and the log may open.
const SPARE_DESCRIPTORS: usize = transport::MAX_REFUSING + 32;

/// `configured`, lowered so that open connections can never exhaust the descriptor limit
/// (whose soft value is first raised to the hard one), with `reserved` descriptors left for
/// the SMTP door. Call it once the store and the listeners are open: what they hold is counted.
fn connection_cap(configured: usize, reserved: usize) -> usize {
    let soft = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the descriptor limit");
            return configured;
        }
    };
    let open = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count());
    let room = usize::try_from(soft)
        .unwrap_or(usize::MAX)
        .saturating_sub(open + SPARE_DESCRIPTORS + reserved);
    if room < configured {
        tracing::warn!(
            descriptor_limit = soft,
            open,
            "the descriptor limit allows {room} connections, not {configured}: raise `ulimit -n`"
        );
    }
    configured.min(room).max(1)
}

async fn wait_for_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
