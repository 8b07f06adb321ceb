//! `agentaddress timer add|list|cancel` (docs/CLI.md, docs/API.md §20): a task's own alarms. A
//! timer appends one event (`timer.fired`, or the `--type` given) to the task's feed at its
//! time, which `wait --type 'timer.*'` (or `poll`) then sees like any other event.
//!
//! The command line is checked before any request: exactly one of `--in` and `--at`, a
//! duration that is a whole positive number of seconds within the API's year, `--data` that is
//! JSON, a timer id of the right shape.

use std::time::Duration;

use agentaddress_core::domain::timer::{is_timer_id, MAX_TIMER_SECONDS};
use reqwest::Method;
use serde_json::{Map, Value};

use super::error::{CliError, Result};
use super::{connect, creds, ServerArg};

#[derive(Debug, clap::Args)]
pub struct TimerArgs {
    #[command(subcommand)]
    command: TimerCommand,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Subcommand)]
pub enum TimerCommand {
    /// Set a timer: at its time one event of its type is appended to TASK's feed.
    Add {
        /// Task name (as given to `create`).
        task: String,
        /// Fire after this long: `90s`, `15m`, `2h`, `2d`, `1w`, or plain seconds (at most a
        /// year).
        #[arg(
            long = "in",
            value_name = "DURATION",
            required_unless_present = "at",
            conflicts_with = "at",
            allow_hyphen_values = true
        )]
        in_: Option<String>,
        /// Fire at this time: RFC 3339 with its offset (`2026-12-01T09:00:00Z`).
        #[arg(long, value_name = "RFC3339")]
        at: Option<String>,
        /// The type of the event it appends: `timer.` and a name (default `timer.fired`).
        #[arg(long = "type", value_name = "TYPE")]
        event_type: Option<String>,
        /// JSON the event carries as `data.data` (at most 16 KiB).
        #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
        data: Option<String>,
        /// Sent as the Idempotency-Key: setting again with the same key and arguments returns
        /// the same timer instead of a second one. Default: none (every run sets a new timer).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// List TASK's timers: the pending ones (earliest first), then the last fired or cancelled.
    List {
        /// Task name (as given to `create`).
        task: String,
    },
    /// Cancel a pending timer: it will not fire.
    Cancel {
        /// Task name (as given to `create`).
        task: String,
        /// The timer's id (`tmr_…`).
        timer_id: String,
    },
}

/// The seconds of a `--in` duration: a whole number followed by at most one unit (`s`, `m`,
/// `h`, `d`, `w`; none = seconds), 1 second to a year (docs/API.md §20, `in_seconds`). The
/// error says what was wrong and what is accepted.
pub fn parse_duration(text: &str) -> std::result::Result<u64, String> {
    const FORMS: &str = "a whole number with an optional unit s, m, h, d or w (`90s`, `15m`, \
                         `2h`, `2d`, `1w`, `3600`)";
    let t = text.trim();
    if t.is_empty() {
        return Err(format!("--in needs a duration: {FORMS}"));
    }
    if t.starts_with('-') {
        return Err(format!(
            "--in {t:?} is negative: a timer fires in the future, give {FORMS}"
        ));
    }
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits_end);
    let factor: u64 = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(format!("--in {t:?} is not a duration: {FORMS}")),
    };
    if number.is_empty() {
        return Err(format!("--in {t:?} is not a duration: {FORMS}"));
    }
    let too_far = || {
        format!(
            "--in {t:?} is too far ahead: a timer fires at most a year ({MAX_TIMER_SECONDS} s) \
             from now"
        )
    };
    // A number too long for u64 is too far ahead as surely as one that overflows below.
    let n: u64 = number.parse().map_err(|_| too_far())?;
    let seconds = n.checked_mul(factor).ok_or_else(too_far)?;
    if seconds == 0 {
        return Err(format!(
            "--in {t:?} is zero: a timer fires at least 1 second from now"
        ));
    }
    if seconds > MAX_TIMER_SECONDS {
        return Err(too_far());
    }
    Ok(seconds)
}

fn check_timer_id(id: &str) -> Result<()> {
    if is_timer_id(id) {
        Ok(())
    } else {
        Err(CliError::new(
            "invalid_request",
            "a timer id is `tmr_` and letters, digits, _ and - (as `timer add` and `timer list` \
             show it)",
        ))
    }
}

/// The body of `POST {root}/timers` (docs/API.md §20), from the command line alone.
fn add_body(
    in_: Option<&str>, at: Option<String>, event_type: Option<String>, data: Option<&str>,
) -> Result<Value> {
    let mut body = Map::new();
    match (in_, at) {
        (Some(d), None) => {
            let seconds = parse_duration(d).map_err(|m| CliError::new("usage", m))?;
            body.insert("in_seconds".into(), seconds.into());
        }
        (None, Some(at)) => {
            body.insert("fire_at".into(), Value::String(at.trim().to_owned()));
        }
        // The argument parser already refuses both and neither.
        _ => return Err(CliError::new("usage", "give exactly one of --in and --at")),
    }
    if let Some(t) = event_type {
        body.insert("type".into(), Value::String(t));
    }
    if let Some(text) = data {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            CliError::new(
                "invalid_json",
                format!(
                    "--data is not JSON: {} (quote a string: --data '\"text\"')",
                    creds::describe_json_error(&e)
                ),
            )
        })?;
        body.insert("data".into(), value);
    }
    Ok(Value::Object(body))
}

pub async fn timer(args: TimerArgs, secret: &mut Option<String>) -> Result<Value> {
    match args.command {
        TimerCommand::Add {
            task,
            in_,
            at,
            event_type,
            data,
            idempotency_key,
        } => {
            // Everything local is checked before the credentials are read or a request made.
            creds::validate_task(&task)?;
            let body = add_body(in_.as_deref(), at, event_type, data.as_deref())?;
            let (_, saved, api) = connect(&task, &args.server, secret)?;
            api.call_with_key(
                Method::POST,
                &format!("addresses/{}/timers", saved.address_id),
                Some(&saved.read_token),
                &body,
                idempotency_key.as_deref(),
            )
            .await
        }
        TimerCommand::List { task } => {
            let (_, saved, api) = connect(&task, &args.server, secret)?;
            api.call(
                Method::GET,
                &format!("addresses/{}/timers", saved.address_id),
                &[],
                Some(&saved.read_token),
                None,
                Duration::ZERO,
            )
            .await
        }
        TimerCommand::Cancel { task, timer_id } => {
            creds::validate_task(&task)?;
            check_timer_id(&timer_id)?;
            let (_, saved, api) = connect(&task, &args.server, secret)?;
            api.call(
                Method::DELETE,
                &format!("addresses/{}/timers/{timer_id}", saved.address_id),
                &[],
                Some(&saved.read_token),
                None,
                Duration::ZERO,
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_and_without_units() {
        for (text, seconds) in [
            ("90s", 90),
            ("15m", 900),
            ("2h", 7_200),
            ("2d", 172_800),
            ("1w", 604_800),
            ("3600", 3_600),
            ("1", 1),
            (" 5m ", 300),
            ("007s", 7),
            ("52w", 31_449_600),
            ("365d", 31_536_000),
            ("31536000", 31_536_000),
        ] {
            assert_eq!(parse_duration(text), Ok(seconds), "{text}");
        }
    }

    #[test]
    fn zero_negative_overflow_and_junk_are_refused_with_a_reason() {
        for (text, says) in [
            ("0", "zero"),
            ("0s", "zero"),
            ("0w", "zero"),
            ("-5", "negative"),
            ("-1h", "negative"),
            ("18446744073709551616", "too far"),
            ("99999999999999999999999w", "too far"),
            ("18446744073709551615w", "too far"),
            ("366d", "too far"),
            ("31536001", "too far"),
            ("", "needs a duration"),
            ("   ", "needs a duration"),
            ("s", "not a duration"),
            ("h2", "not a duration"),
            ("1.5h", "not a duration"),
            ("2 h", "not a duration"),
            ("2hours", "not a duration"),
            ("2H", "not a duration"),
            ("1h30m", "not a duration"),
            ("+5", "not a duration"),
            ("5ms", "not a duration"),
            ("١٢", "not a duration"),
            ("soon", "not a duration"),
        ] {
            let error = parse_duration(text).expect_err(text);
            assert!(error.contains(says), "{text:?}: {error}");
            assert!(error.starts_with("--in"), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_body_is_built_locally_or_refused() {
        let body = add_body(
            Some("2d"),
            None,
            Some("timer.follow_up".into()),
            Some("{\"n\":1}"),
        );
        assert_eq!(
            body.ok(),
            Some(
                serde_json::json!({"in_seconds": 172800, "type": "timer.follow_up",
                                    "data": {"n": 1}})
            )
        );
        let at = add_body(None, Some(" 2030-01-01T00:00:00Z ".into()), None, None);
        assert_eq!(
            at.ok(),
            Some(serde_json::json!({"fire_at": "2030-01-01T00:00:00Z"}))
        );
        let bad = add_body(Some("1h"), None, None, Some("{nope"));
        assert_eq!(
            bad.err().map(|e| e.code().to_owned()).as_deref(),
            Some("invalid_json")
        );
        let bad = add_body(Some("0"), None, None, None);
        assert_eq!(
            bad.err().map(|e| e.code().to_owned()).as_deref(),
            Some("usage")
        );
        assert!(add_body(None, None, None, None).is_err());
    }

    #[test]
    fn timer_ids() {
        assert!(check_timer_id("tmr_abc-_9").is_ok());
        for bad in ["", "tmr_", "hk_abc", "tmr_a/b", "tmr_../x", "tmr_ a"] {
            assert!(check_timer_id(bad).is_err(), "{bad:?}");
        }
    }
}
