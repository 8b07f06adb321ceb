//! One logging setup for every deployment: `agentaddress serve` (text or JSON lines on
//! stderr) and the Lambda functions (JSON lines for CloudWatch, without a timestamp: Lambda
//! adds its own). `RUST_LOG` filters (default `info`); whatever it says, two sources that log
//! secrets are capped:
//! - rmcp logs whole JSON-RPC messages (tool arguments, read tokens included) at debug level,
//!   and a line per stateless request at info: nothing below WARN from its targets;
//! - the Lambda runtime logs each raw invocation event (headers with the bearer token, the
//!   inbox URL's secret, bodies) at trace: nothing at TRACE from it.
//!
//! Text logs are coloured only on a terminal, and never when `NO_COLOR` is set to anything
//! non-empty (<https://no-color.org>): a log file or a pipe gets no escape codes.

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines on stderr.
    Text,
    /// JSON lines on stderr.
    Json,
    /// JSON lines without a timestamp or span context (CloudWatch; not a flag value).
    #[value(skip)]
    Lambda,
}

/// A directive added to every log filter (see the module's docs).
pub const LOG_DIRECTIVE: &str = "rmcp=warn";

/// The per-layer filter on every log output, after `RUST_LOG`, so that a more specific
/// directive such as `rmcp::service=debug` cannot bring secrets into the logs.
pub fn log_allowed(meta: &tracing::Metadata<'_>) -> bool {
    let target = meta.target();
    let from = |crate_name: &str| {
        target == crate_name
            || target
                .strip_prefix(crate_name)
                .is_some_and(|rest| rest.starts_with("::"))
    };
    if from("rmcp") && *meta.level() > tracing::Level::WARN {
        return false;
    }
    !(from("lambda_runtime") && *meta.level() == tracing::Level::TRACE)
}

/// The filter `RUST_LOG` sets: comma-separated `target=level` directives and at most one bare
/// level for every other target (`info,agentaddress_api=debug`); `info` when it is unset or
/// sets nothing readable. (A `Targets` filter, not `EnvFilter`: span and field directives are not needed,
/// and `EnvFilter` would link the regex engine into every Lambda function.)
pub fn rust_log_filter(rust_log: Option<&str>) -> tracing_subscriber::filter::Targets {
    use tracing_subscriber::filter::Targets;
    // A value that sets nothing (unset, empty, or no directive readable) means `info`.
    let filter = rust_log
        .and_then(|v| v.parse::<Targets>().ok())
        .filter(|t| t.default_level().is_some() || t.iter().next().is_some())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO));
    match LOG_DIRECTIVE.split_once('=') {
        Some((target, level)) => match level.parse::<tracing::Level>() {
            Ok(level) => filter.with_target(target, level),
            Err(_) => filter,
        },
        None => filter,
    }
}

/// Whether text logs may use ANSI colours: only on a terminal, and not when `NO_COLOR` holds
/// anything (an empty `NO_COLOR` counts as unset, as no-color.org says).
pub fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// Installs the global subscriber (once; a second call changes nothing).
pub fn init(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    let filter = rust_log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let cap = tracing_subscriber::filter::filter_fn(log_allowed);
    let registry = tracing_subscriber::registry().with(filter);
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => registry.with(fmt.with_filter(cap)).try_init(),
        LogFormat::Json => registry
            .with(fmt.with_ansi(false).json().with_filter(cap))
            .try_init(),
        LogFormat::Lambda => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .json()
                    .without_time()
                    .with_current_span(false)
                    .with_filter(cap),
            )
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_sources_are_capped() {
        use tracing::{Level, Metadata};
        fn allowed(target: &'static str, level: Level) -> bool {
            struct Cs;
            impl tracing::callsite::Callsite for Cs {
                fn set_interest(&self, _: tracing::subscriber::Interest) {}
                fn metadata(&self) -> &Metadata<'_> {
                    unreachable!()
                }
            }
            static CS: Cs = Cs;
            let meta = Metadata::new(
                "event",
                target,
                level,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&CS)),
                tracing::metadata::Kind::EVENT,
            );
            log_allowed(&meta)
        }
        assert!(!allowed("rmcp", Level::DEBUG));
        assert!(!allowed("rmcp::service", Level::INFO));
        assert!(allowed("rmcp::service", Level::WARN));
        assert!(allowed("rmcpx", Level::DEBUG), "another crate");
        assert!(!allowed("lambda_runtime::layers", Level::TRACE));
        assert!(allowed("lambda_runtime", Level::DEBUG));
        assert!(allowed("agentaddress_api", Level::TRACE));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour(true, None));
        assert!(
            colour(true, Some(OsStr::new(""))),
            "empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(true, Some(OsStr::new("false"))), "any value");
        assert!(!colour(false, None), "not a terminal");
    }

    #[test]
    fn rust_log_sets_levels_by_target() {
        use tracing::Level;
        use tracing_subscriber::filter::LevelFilter;
        let f = rust_log_filter(None);
        assert!(f.would_enable("agentaddress_api", &Level::INFO));
        assert!(!f.would_enable("agentaddress_api", &Level::DEBUG));
        let f = rust_log_filter(Some("warn,agentaddress_api=debug"));
        assert!(f.would_enable("agentaddress_api::handlers", &Level::DEBUG));
        assert!(!f.would_enable("hyper", &Level::INFO));
        assert!(f.would_enable("hyper", &Level::WARN));
        let f = rust_log_filter(Some("trace"));
        assert!(f.would_enable("anything", &Level::TRACE));
        assert!(
            !f.would_enable("rmcp::service", &Level::INFO),
            "rmcp capped at warn"
        );
        let f = rust_log_filter(Some("agentaddress_api=loud"));
        assert_eq!(f.default_level(), Some(LevelFilter::INFO));
    }
}
