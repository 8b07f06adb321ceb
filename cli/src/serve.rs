//! `agentaddress serve`: config, telemetry, store, sweeper, server, graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agentaddress_shared::api::{self, ApiConfig, AppState};
use agentaddress_shared::config::ServiceConfig;
use agentaddress_shared::domain::{Clock, SystemClock};
use agentaddress_shared::store::sqlite::{SqliteOptions, SqliteStore, Synchronous, MAX_GROUP};
use agentaddress_shared::store::Store;
use axum::serve::ListenerExt;
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

    #[command(flatten)]
    service: ServiceConfig,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Text logs on stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing_text() {
    init_tracing(LogFormat::Text);
}

fn init_tracing(format: LogFormat) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // rmcp logs MCP messages, read tokens included, at debug level: capped whatever RUST_LOG says.
    if let Ok(cap) = agentaddress_shared::api::mcp::LOG_DIRECTIVE.parse() {
        filter = filter.add_directive(cap);
    }
    use tracing_subscriber::prelude::*;
    let cap = tracing_subscriber::filter::filter_fn(agentaddress_shared::api::mcp::log_allowed);
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_filter(cap),
            )
            .init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr)
                    .with_filter(cap),
            )
            .init(),
    }
}

pub fn run(args: ServeArgs) -> ExitCode {
    init_tracing(args.log_format);
    let Some(runtime) = crate::runtime() else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let store = if args.db.as_os_str() == ":memory:" {
        SqliteStore::open_in_memory()
    } else {
        SqliteStore::open_with(
            &args.db,
            SqliteOptions {
                synchronous: args.sqlite_synchronous,
                max_group: usize::try_from(args.sqlite_group_max).unwrap_or(MAX_GROUP),
                wakeups: args.sqlite_wakeups,
            },
        )
    }
    .map_err(|e| format!("cannot open the database {}: {e}", args.db.display()))?;
    let store: Arc<dyn Store> = Arc::new(store);
    let config = ApiConfig::from(&args.service);
    let limits = config.limits.clone();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let state = AppState::new(Arc::clone(&store), config)
        .with_clock(Arc::clone(&clock))
        .with_shutdown(shutdown_rx.clone());
    // HTTP/1.1 and, on the same port, HTTP/2 with prior knowledge (h2c): axum's server tells
    // them apart by the connection preface.
    let app = api::router(state).layer(crate::transport::PerVersionLayer);

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    println!("agentaddress listening on http://{local}");
    tracing::info!(
        %local,
        db = %args.db.display(),
        synchronous = ?args.sqlite_synchronous,
        "serving the agentaddress API on the embedded store"
    );

    let sweeper = {
        let store = Arc::clone(&store);
        let clock = Arc::clone(&clock);
        let mut stop = shutdown_rx.clone();
        let every = Duration::from_secs(args.sweep_interval_seconds);
        tokio::spawn(async move {
            loop {
                match store.sweep(&limits, clock.now()).await {
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
    // Connections close with a lingering close (see `transport`); `tap_io` turns Nagle's
    // algorithm off (hyper writes each answer whole) and lets `ConnectInfo<SocketAddr>` work
    // with a listener of our own.
    let listener = crate::transport::LingerListener::new(listener).tap_io(|io| {
        if let Err(e) = io.get_ref().set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .map_err(|e| format!("server error: {e}"))?;
    let _ = sweeper.await;
    tracing::info!("stopped");
    Ok(())
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
