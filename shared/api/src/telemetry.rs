//! One logging setup for every deployment: `agentaddress serve` (text or JSON lines on
//! stderr) and the Lambda functions (JSON lines for CloudWatch, without a timestamp: Lambda
//! adds its own). `RUST_LOG` filters (default `info`); whatever it says, two sources that log
//! secrets are capped:
//! - rmcp logs whole JSON-RPC messages (tool arguments, read tokens included) at debug level,
//!   and a line per stateless request at info: nothing below WARN from its targets;
//! - the Lambda runtime logs each raw invocation event (headers with the bearer token, the
//!   inbox URL's secret, bodies) at trace: nothing at TRACE from it.

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

/// Installs the global subscriber (once; a second call changes nothing).
pub fn init(format: LogFormat) {
    use tracing_subscriber::prelude::*;
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if let Ok(cap) = LOG_DIRECTIVE.parse() {
        filter = filter.add_directive(cap);
    }
    let cap = tracing_subscriber::filter::filter_fn(log_allowed);
    let registry = tracing_subscriber::registry().with(filter);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => registry.with(fmt.with_filter(cap)).try_init(),
        LogFormat::Json => registry.with(fmt.json().with_filter(cap)).try_init(),
        LogFormat::Lambda => registry
            .with(
                tracing_subscriber::fmt::layer()
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
}
