//! Configuration, read once at start-up from flags or their `AGENTADDRESS_*` environment
//! variables. Lambda functions read the same variables with [`ServiceConfig::from_env`].
//! Bad values fail start-up with a clear message; nothing panics.

use clap::Parser;

use crate::domain::Limits;

/// The settings of the HTTP service that every deployment shares.
#[derive(Debug, Clone, clap::Args)]
pub struct ServiceConfig {
    /// Public base URL used in the links we hand out (e.g. https://agents.example.com).
    /// Default: derived from each request's Host header and X-Forwarded-Proto.
    #[arg(long, env = "AGENTADDRESS_PUBLIC_URL", value_parser = parse_public_url)]
    pub public_url: Option<String>,

    /// Domain of the addresses' email addresses ({address_id}@DOMAIN).
    #[arg(long, env = "AGENTADDRESS_EMAIL_DOMAIN", default_value = "inbox.localhost", value_parser = parse_domain)]
    pub email_domain: String,

    /// Largest inbox body accepted, in bytes.
    #[arg(long, env = "AGENTADDRESS_MAX_INBOX_BYTES", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=64 * 1024 * 1024))]
    pub max_inbox_bytes: u64,

    /// Events an address retains before writes answer 409 quota_exceeded.
    #[arg(long, env = "AGENTADDRESS_MAX_RETAINED_EVENTS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_retained_events: u64,

    /// Seconds an event is retained after it was received.
    #[arg(long, env = "AGENTADDRESS_EVENT_RETENTION_SECONDS", default_value_t = 30 * 24 * 3600,
          value_parser = clap::value_parser!(u64).range(1..=10 * 365 * 24 * 3600))]
    pub event_retention_seconds: u64,

    /// State keys per address.
    #[arg(long, env = "AGENTADDRESS_MAX_STATE_KEYS", default_value_t = 32,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_state_keys: u64,

    /// State bytes per address, 64 bytes of metadata per key included.
    #[arg(long, env = "AGENTADDRESS_MAX_STATE_BYTES", default_value_t = 65_536,
          value_parser = clap::value_parser!(u64).range(1..=16 * 1024 * 1024))]
    pub max_state_bytes: u64,

    /// `GET events` requests per address per minute.
    #[arg(long, env = "AGENTADDRESS_POLLS_PER_MINUTE", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub polls_per_minute: u64,

    /// Address creations per client IP per minute.
    #[arg(long, env = "AGENTADDRESS_CREATIONS_PER_MINUTE", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub creations_per_minute: u64,

    /// Longest long-poll wait in seconds (at most 25, so answers leave before 29 s).
    #[arg(long, env = "AGENTADDRESS_MAX_WAIT_SECONDS", default_value_t = 25,
          value_parser = clap::value_parser!(u64).range(0..=25))]
    pub max_wait_seconds: u64,

    /// The most long polls waiting at once on the whole deployment (docs/API.md §6, "Waiting
    /// polls"); over it a wait is answered at once with 503 `unavailable` and `Retry-After`.
    /// 0 (the default on `serve`, whose connection caps bound it): no cap. On AWS every
    /// waiting poll holds a Lambda execution environment: template.yaml's `WaitingPollCap`.
    #[arg(long, env = "AGENTADDRESS_MAX_WAITING_POLLS", default_value_t = 0)]
    pub max_waiting_polls: u64,

    /// Seconds a deleted or expired address answers 410 before it is forgotten.
    #[arg(long, env = "AGENTADDRESS_TOMBSTONE_SECONDS", default_value_t = 30 * 24 * 3600,
          value_parser = clap::value_parser!(u64).range(0..))]
    pub tombstone_seconds: u64,

    /// Largest raw email message accepted, in bytes (larger: 552 5.3.4 / 413).
    #[arg(long, env = "AGENTADDRESS_MAX_EMAIL_BYTES", default_value_t = 10_000_000,
          value_parser = clap::value_parser!(u64).range(1024..=100 * 1024 * 1024))]
    pub max_email_bytes: u64,

    /// Raw bytes of retained email an address may keep before more mail is refused for now.
    #[arg(long, env = "AGENTADDRESS_MAX_STORED_EMAIL_BYTES", default_value_t = 100_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_stored_email_bytes: u64,

    /// Recipients one message may name.
    #[arg(long, env = "AGENTADDRESS_MAX_EMAIL_RECIPIENTS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_email_recipients: u64,

    /// Open requests for a person an address may have (more: 409 quota_exceeded).
    #[arg(long, env = "AGENTADDRESS_MAX_OPEN_REQUESTS", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_open_requests: u64,

    /// Contacts an address may have for outbound email (more: 409 quota_exceeded).
    #[arg(long, env = "AGENTADDRESS_MAX_CONTACTS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub max_contacts: u64,

    /// Emails an address may send per UTC day (more: 429 rate_limited).
    #[arg(long, env = "AGENTADDRESS_SENDS_PER_DAY", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub sends_per_day: u64,

    /// Contact code mails one recipient mailbox may be sent per UTC day, by all addresses
    /// together (case-insensitive, `+tag` ignored; more: 429 rate_limited, nothing mailed).
    #[arg(long, env = "AGENTADDRESS_CODE_MAILS_PER_RECIPIENT_PER_DAY", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub code_mails_per_recipient_per_day: u64,

    /// Contact code mails one client (an IPv4 address or an IPv6 /64) may ask for per UTC day,
    /// for all addresses together (more: 429 rate_limited, nothing mailed).
    #[arg(long, env = "AGENTADDRESS_CODE_MAILS_PER_CLIENT_PER_DAY", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub code_mails_per_client_per_day: u64,

    /// Turns on the raw-MIME webhook door (`POST /api/v1/email/inbound`): relays present this
    /// secret as `Authorization: Bearer …`. 16 to 512 printable ASCII characters. Never logged,
    /// never repeated in an error.
    #[arg(long, env = "AGENTADDRESS_EMAIL_INGEST_SECRET",
          value_parser = SecretParser(ingest_secret_rule), hide_env_values = true)]
    pub email_ingest_secret: Option<Secret>,

    /// The wake-up socket's URL handed out as `endpoints.ws_url` (docs/API.md §17): the AWS
    /// deployment's WebSocket API (wss://…/stage). `serve` offers its own socket at
    /// {base}/api/v1/ws when this is not set.
    #[arg(long, env = "AGENTADDRESS_WS_URL", value_parser = parse_ws_url)]
    pub ws_url: Option<String>,

    /// Let wake hooks call `http://` URLs and private addresses (loopback, private networks,
    /// link-local): for a receiver on the operator's own machine or network, and tests. Off,
    /// a hook can never be a way into the operator's network (docs/API.md §19).
    #[arg(long, env = "AGENTADDRESS_ALLOW_PRIVATE_HOOKS", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_private_hooks: bool,
}

/// A secret from the configuration: its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, to hash it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// The ingest secret's rule (docs/API.md §10): 16 to 512 printable ASCII characters. The
/// error says which part of the rule is broken, nothing of the value (static text: nothing of
/// it can get in).
fn ingest_secret_rule(s: &str) -> Result<(), &'static str> {
    if s.len() < 16 {
        return Err("must be 16 to 512 printable ASCII characters; this one is shorter");
    }
    if s.len() > 512 {
        return Err("must be 16 to 512 printable ASCII characters; this one is longer");
    }
    match s.chars().find(|c| !c.is_ascii_graphic()) {
        None => Ok(()),
        Some(' ') => Err("must be 16 to 512 printable ASCII characters; this one holds a space"),
        Some('\t') => Err("must be 16 to 512 printable ASCII characters; this one holds a tab"),
        Some(c) if c.is_control() => {
            Err("must be 16 to 512 printable ASCII characters; this one holds a control character")
        }
        Some(_) => Err(
            "must be 16 to 512 printable ASCII characters; this one holds a non-ASCII character",
        ),
    }
}

/// A clap value parser for a secret: checked by its rule, and refused with a message that
/// names the flag (and its environment variable) and the rule broken, never the value — where
/// clap's own "invalid value '…' for …" would print it. A refusal is a usage error (exit 2).
#[derive(Clone, Copy)]
pub struct SecretParser(pub fn(&str) -> Result<(), &'static str>);

impl clap::builder::TypedValueParser for SecretParser {
    type Value = Secret;

    fn parse_ref(
        &self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr,
    ) -> Result<Secret, clap::Error> {
        let broken = match value.to_str() {
            Some(s) => match (self.0)(s) {
                Ok(()) => return Ok(Secret(s.to_owned())),
                Err(rule) => rule,
            },
            None => "must be text (UTF-8); this one is not",
        };
        let flag = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "the secret".to_owned(), |l| format!("--{l}"));
        let env = arg
            .and_then(clap::Arg::get_env)
            .map(|e| format!(" ({})", e.to_string_lossy()))
            .unwrap_or_default();
        Err(clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!("{flag}{env} {broken} (the value is not shown)\n"),
        )
        .with_cmd(cmd))
    }
}

#[derive(Parser)]
struct EnvOnly {
    #[command(flatten)]
    service: ServiceConfig,
}

impl ServiceConfig {
    /// Reads the configuration from the environment alone (for Lambda functions).
    pub fn from_env() -> Result<Self, String> {
        EnvOnly::try_parse_from(["agentaddress"])
            .map(|c| c.service)
            .map_err(|e| e.to_string())
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_inbox_bytes: self.max_inbox_bytes,
            max_retained_events: self.max_retained_events,
            event_retention_seconds: self.event_retention_seconds,
            max_state_keys: self.max_state_keys,
            max_state_bytes: self.max_state_bytes,
            polls_per_minute: self.polls_per_minute,
            creations_per_minute: self.creations_per_minute,
            max_wait_seconds: self.max_wait_seconds,
            tombstone_seconds: self.tombstone_seconds,
            max_email_bytes: self.max_email_bytes,
            max_stored_email_bytes: self.max_stored_email_bytes,
            max_email_recipients: self.max_email_recipients,
            max_open_requests: self.max_open_requests,
            max_contacts: self.max_contacts,
            sends_per_day: self.sends_per_day,
            code_mails_per_recipient_per_day: self.code_mails_per_recipient_per_day,
            code_mails_per_client_per_day: self.code_mails_per_client_per_day,
        }
    }
}

fn parse_public_url(s: &str) -> Result<String, String> {
    let trimmed = s.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"))
        .ok_or("the public URL must start with http:// or https://")?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || trimmed.contains(['?', '#', ' ']) {
        return Err(
            "the public URL must be like https://host[:port][/prefix], without query".into(),
        );
    }
    Ok(trimmed.to_owned())
}

fn parse_ws_url(s: &str) -> Result<String, String> {
    let trimmed = s.trim().trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("wss://")
        .or_else(|| trimmed.strip_prefix("ws://"))
        .ok_or("the socket URL must start with ws:// or wss://")?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || trimmed.contains(['?', '#', ' ']) {
        return Err("the socket URL must be like wss://host[:port][/stage], without query".into());
    }
    Ok(trimmed.to_owned())
}

fn parse_domain(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if ok {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!("{s:?} is not a valid email domain"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_url_is_normalised_or_refused() {
        assert_eq!(
            parse_public_url("https://a.example/").as_deref(),
            Ok("https://a.example")
        );
        assert_eq!(
            parse_public_url("http://127.0.0.1:8080/base").as_deref(),
            Ok("http://127.0.0.1:8080/base")
        );
        assert!(parse_public_url("ftp://x").is_err());
        assert!(parse_public_url("https://").is_err());
        assert!(parse_public_url("https://a?b=1").is_err());
        assert_eq!(
            parse_ws_url("wss://x.execute-api.eu-west-1.amazonaws.com/prod/").as_deref(),
            Ok("wss://x.execute-api.eu-west-1.amazonaws.com/prod")
        );
        assert!(parse_ws_url("https://a").is_err());
        assert!(parse_ws_url("ws://").is_err());
    }

    #[test]
    fn domains() {
        assert_eq!(
            parse_domain("Inbox.Example").as_deref(),
            Ok("inbox.example")
        );
        assert!(parse_domain("bad domain").is_err());
        assert!(parse_domain("a..b").is_err());
        assert!(parse_domain("").is_err());
    }

    #[test]
    fn defaults_are_the_contracts() {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            s: ServiceConfig,
        }
        let t = T::try_parse_from(["x"]).expect("defaults parse");
        assert_eq!(t.s.limits(), Limits::default());
        assert!(T::try_parse_from(["x", "--max-wait-seconds", "26"]).is_err());
        assert!(T::try_parse_from(["x", "--max-state-keys", "0"]).is_err());
        assert!(T::try_parse_from(["x", "--email-ingest-secret", "short"]).is_err());
        let t = T::try_parse_from(["x", "--email-ingest-secret", "0123456789abcdef-secret"])
            .expect("a good secret");
        let shown = format!("{:?}", t.s);
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        for bad in [
            "SECRETMARK-sh",
            &format!("SECRETMARK-{}", "x".repeat(600)),
            "SECRETMARK with a space",
            "SECRETMARK\twith-a-tab",
            "SECRETMARK-ünïcödé-0123",
        ] {
            let e = T::try_parse_from(["x", "--email-ingest-secret", bad])
                .err()
                .unwrap_or_else(|| panic!("{bad:?} was taken"));
            let message = e.to_string();
            assert_eq!(e.exit_code(), 2, "{message}");
            assert!(
                message.contains("--email-ingest-secret (AGENTADDRESS_EMAIL_INGEST_SECRET) must be 16 to 512 printable ASCII characters"),
                "{message}"
            );
            assert!(!message.contains("SECRETMARK"), "{message}");
        }
    }
}
