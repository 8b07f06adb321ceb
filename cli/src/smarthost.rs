//! `agentaddress serve`'s outbound email (docs/API.md §16): the sender, the SMTP smarthost it
//! relays through, and the delivery loop. Without both a sender and a relay the routes answer
//! 503 `outbound_not_configured`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentaddress_api::send_delivery::{DeliveryLoop, Outbound, RetryPolicy};
use agentaddress_outbound::{check_relay_url, check_sender, SmtpRelay};

#[derive(Debug, clap::Args)]
pub struct OutboundArgs {
    /// The sender of outbound email (`From`), on a domain you control: `mail@agents.example` or
    /// `Agents <mail@agents.example>`. With --smtp-relay, agents can email their confirmed
    /// contacts (docs/API.md §16).
    #[arg(long, env = "AGENTADDRESS_EMAIL_FROM")]
    pub email_from: Option<String>,

    /// The SMTP smarthost outbound email goes through: `smtp://host:25` (plain),
    /// `smtp://user@host:587?tls=required` (STARTTLS) or `smtps://user@host:465` (implicit
    /// TLS). No password in the URL: see --smtp-relay-password-file.
    #[arg(long, env = "AGENTADDRESS_SMTP_RELAY", value_parser = RelayUrlParser)]
    pub smtp_relay: Option<String>,

    /// A file holding the relay user's password (one line). Or set
    /// AGENTADDRESS_SMTP_RELAY_PASSWORD. Never logged.
    #[arg(long, env = "AGENTADDRESS_SMTP_RELAY_PASSWORD_FILE")]
    pub smtp_relay_password_file: Option<PathBuf>,

    /// PEM certificates the relay's TLS certificate may chain to, besides the public roots (a
    /// private CA, or the relay's own self-signed certificate). Needs a TLS relay URL.
    #[arg(long, env = "AGENTADDRESS_SMTP_RELAY_CA_FILE")]
    pub smtp_relay_ca_file: Option<PathBuf>,

    /// Milliseconds before the first retry of a send the relay refused for now (then 4× longer
    /// each time). A testing knob: leave it alone.
    #[arg(long, env = "AGENTADDRESS_OUTBOUND_RETRY_FIRST_MS", hide = true, default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub outbound_retry_first_ms: u64,

    /// Delivery attempts of a send before it is reported failed. A testing knob.
    #[arg(long, env = "AGENTADDRESS_OUTBOUND_ATTEMPTS", hide = true,
          default_value_t = agentaddress_core::domain::mail_out::SEND_ATTEMPTS,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub outbound_attempts: u32,

    /// Milliseconds between the delivery loop's looks for due sends. A testing knob.
    #[arg(long, env = "AGENTADDRESS_OUTBOUND_TICK_MS", hide = true, default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    pub outbound_tick_ms: u64,
}

/// `--smtp-relay`, checked as clap reads it ([`check_relay_url`]: no password in it). A refusal
/// names the flag and the rule, never the URL — which may hold a password, where clap's own
/// "invalid value '…'" would print it (a usage error, exit 2).
#[derive(Clone, Copy)]
struct RelayUrlParser;

impl clap::builder::TypedValueParser for RelayUrlParser {
    type Value = String;

    fn parse_ref(
        &self, cmd: &clap::Command, _arg: Option<&clap::Arg>, value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let broken = match value.to_str() {
            Some(url) => match check_relay_url(url) {
                Ok(()) => return Ok(url.to_owned()),
                Err(rule) => rule,
            },
            None => "the SMTP relay URL must be text (UTF-8)".to_owned(),
        };
        Err(clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!("--smtp-relay (AGENTADDRESS_SMTP_RELAY): {broken} (the value is not shown)\n"),
        )
        .with_cmd(cmd))
    }
}

/// The relay password: the file's first line, else `AGENTADDRESS_SMTP_RELAY_PASSWORD`.
fn password(args: &OutboundArgs) -> Result<Option<String>, String> {
    // The path is not repeated: someone may have given the password itself.
    if let Some(path) = &args.smtp_relay_password_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "--smtp-relay-password-file (AGENTADDRESS_SMTP_RELAY_PASSWORD_FILE) must name \
                 a readable file holding the relay password: {e} (the path is not shown)"
            )
        })?;
        let line = text.lines().next().unwrap_or("").to_owned();
        if line.is_empty() {
            return Err(
                "--smtp-relay-password-file (AGENTADDRESS_SMTP_RELAY_PASSWORD_FILE) must name a \
                 file whose first line is the relay password; that line is empty"
                    .into(),
            );
        }
        return Ok(Some(line));
    }
    Ok(std::env::var("AGENTADDRESS_SMTP_RELAY_PASSWORD")
        .ok()
        .filter(|p| !p.is_empty()))
}

/// The outbound configuration and its delivery loop, or none when neither a sender nor a
/// relay is set; one without the other is a start-up error.
pub fn configure(args: &OutboundArgs) -> Result<Option<(Arc<Outbound>, DeliveryLoop)>, String> {
    let (from, url) = match (&args.email_from, &args.smtp_relay) {
        (None, None) => return Ok(None),
        (Some(from), Some(url)) => (from, url),
        (Some(_), None) => {
            return Err(
                "--email-from needs --smtp-relay (AGENTADDRESS_SMTP_RELAY): the \
                        smarthost outbound email goes through"
                    .into(),
            )
        }
        (None, Some(_)) => {
            return Err(
                "--smtp-relay needs --email-from (AGENTADDRESS_EMAIL_FROM): the \
                        sender outbound email goes from"
                    .into(),
            )
        }
    };
    check_sender(from)?;
    let ca =
        match &args.smtp_relay_ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                format!("cannot read the SMTP relay CA file {}: {e}", path.display())
            })?),
            None => None,
        };
    // The relay's errors name the rule broken, never the password (nor the URL).
    let relay = SmtpRelay::new(url, password(args)?.as_deref(), ca.as_deref())
        .map_err(|e| format!("--smtp-relay (AGENTADDRESS_SMTP_RELAY): {e}"))?;
    let delivery = DeliveryLoop::new();
    let outbound = Outbound {
        from: from.clone(),
        relay: Arc::new(relay),
        dispatch: delivery.dispatch(),
        retry: RetryPolicy {
            first: Duration::from_millis(args.outbound_retry_first_ms),
            attempts: args.outbound_attempts,
        },
    };
    Ok(Some((Arc::new(outbound), delivery)))
}
