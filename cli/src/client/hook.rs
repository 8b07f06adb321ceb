//! `agentaddress hook add|list|remove|test` (docs/CLI.md, docs/API.md §19): the wake hooks of a
//! task's address. A new hook's signing secret is written to the task's credentials file
//! (0600) and printed only with `--show-secret`; header values are read from a file, never
//! from the command line (where `ps` and shell history would keep them).

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Map, Value};

use super::creds::{self, Mode};
use super::error::{CliError, Result};
use super::{api, connect, ServerArg};

#[derive(Debug, clap::Args)]
pub struct HookArgs {
    #[command(subcommand)]
    command: HookCommand,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Subcommand)]
pub enum HookCommand {
    /// Add a wake hook: URL is POSTed a signed wake when matching events arrive.
    Add {
        /// Task name (as given to `create`).
        task: String,
        /// https:// URL of the receiver (a GitHub `dispatches` URL, a function URL, a Slack
        /// incoming webhook).
        #[arg(value_name = "URL")]
        receiver: String,
        /// An event type or pattern that wakes (`email.*`, `request.answered`); repeat for
        /// more. Default: every type.
        #[arg(long = "type", value_name = "PATTERN")]
        types: Vec<String>,
        /// `standard` (default), `github-dispatch` or `slack`.
        #[arg(long, value_parser = ["standard", "github-dispatch", "slack"])]
        format: Option<String>,
        /// A file of headers to send with every wake, one `Name: value` per line (a token in
        /// `Authorization`); `-` is stdin. Never printed.
        #[arg(long, value_name = "FILE")]
        header_file: Option<PathBuf>,
        /// The least seconds between two wakes (0..3600).
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=3600))]
        debounce: Option<u64>,
        /// Print the signing secret too (it is always saved in the task's credentials file).
        #[arg(long)]
        show_secret: bool,
    },
    /// List the hooks of TASK's address (never a secret or a header's value).
    List {
        /// Task name (as given to `create`).
        task: String,
    },
    /// Delete a hook.
    Remove {
        /// Task name (as given to `create`).
        task: String,
        /// The hook's id (`hk_…`).
        hook_id: String,
    },
    /// Send a `hook.test` wake now and print the receiver's status.
    Test {
        /// Task name (as given to `create`).
        task: String,
        /// The hook's id (`hk_…`).
        hook_id: String,
    },
}

/// `Name: value` lines (blank lines and `#` comments skipped), as the headers object.
fn read_headers(file: &std::path::Path) -> Result<Map<String, Value>> {
    let text = super::read_secret_file(file)?;
    let mut headers = Map::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(CliError::new(
                "usage",
                format!("line {} of the header file is not `Name: value`", n + 1),
            ));
        };
        headers.insert(
            name.trim().to_owned(),
            Value::String(value.trim().to_owned()),
        );
    }
    Ok(headers)
}

fn check_hook_id(id: &str) -> Result<()> {
    if agentaddress_core::domain::hooks::is_hook_id(id) {
        Ok(())
    } else {
        Err(CliError::new(
            "invalid_request",
            "a hook id is `hk_` and letters, digits, _ and - (as `hook list` shows it)",
        ))
    }
}

pub async fn hook(args: HookArgs, secret: &mut Option<String>) -> Result<Value> {
    match args.command {
        HookCommand::Add {
            task,
            receiver,
            types,
            format,
            header_file,
            debounce,
            show_secret,
        } => {
            creds::validate_task(&task)?;
            let mut body = Map::new();
            body.insert("url".into(), Value::String(receiver));
            if !types.is_empty() {
                body.insert("types".into(), json!(types));
            }
            if let Some(f) = format {
                body.insert("format".into(), Value::String(f));
            }
            if let Some(file) = &header_file {
                body.insert("headers".into(), Value::Object(read_headers(file)?));
            }
            if let Some(d) = debounce {
                body.insert("debounce_seconds".into(), d.into());
            }
            let (dir, saved, api) = connect(&task, &args.server, secret)?;
            let answer = api
                .call(
                    Method::POST,
                    &format!("addresses/{}/hooks", saved.address_id),
                    &[],
                    Some(&saved.read_token),
                    Some(&Value::Object(body)),
                    Duration::ZERO,
                )
                .await?;
            let hook_id = api::string_field(&answer, &["hook", "id"])?;
            let signing_secret = api::string_field(&answer, &["signing_secret"])?;
            let mut current = creds::load(&dir, &saved.task)?;
            current
                .hook_secrets
                .insert(hook_id.clone(), signing_secret.clone());
            let path = creds::save(&dir, &current, Mode::Replace)?;
            let mut out = Map::new();
            out.insert("hook".into(), answer["hook"].clone());
            out.insert(
                "secret_saved_in".into(),
                Value::String(path.display().to_string()),
            );
            if show_secret {
                out.insert("signing_secret".into(), Value::String(signing_secret));
            }
            Ok(Value::Object(out))
        }
        HookCommand::List { task } => {
            let (_, saved, api) = connect(&task, &args.server, secret)?;
            api.call(
                Method::GET,
                &format!("addresses/{}/hooks", saved.address_id),
                &[],
                Some(&saved.read_token),
                None,
                Duration::ZERO,
            )
            .await
        }
        HookCommand::Remove { task, hook_id } => {
            check_hook_id(&hook_id)?;
            let (dir, saved, api) = connect(&task, &args.server, secret)?;
            api.call(
                Method::DELETE,
                &format!("addresses/{}/hooks/{hook_id}", saved.address_id),
                &[],
                Some(&saved.read_token),
                None,
                Duration::ZERO,
            )
            .await?;
            let mut current = creds::load(&dir, &saved.task)?;
            if current.hook_secrets.remove(&hook_id).is_some() {
                creds::save(&dir, &current, Mode::Replace)?;
            }
            Ok(json!({ "deleted": hook_id }))
        }
        HookCommand::Test { task, hook_id } => {
            check_hook_id(&hook_id)?;
            let (_, saved, api) = connect(&task, &args.server, secret)?;
            api.call(
                Method::POST,
                &format!("addresses/{}/hooks/{hook_id}/test", saved.address_id),
                &[],
                Some(&saved.read_token),
                None,
                Duration::from_secs(10),
            )
            .await
        }
    }
}
