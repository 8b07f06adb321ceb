//! `agentaddress inbox TASK`: opens the inbox viewer signed in for TASK with a one-time link
//! (docs/API.md §13, "Sign-in links"), so the read token never appears in a URL; and
//! `agentaddress import TASK`: saves the credentials of an address made elsewhere (curl, MCP,
//! another machine) exactly as `create` does. docs/CLI.md documents both.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agentaddress_core::domain::ids::is_valid_id;
use reqwest::Method;
use serde_json::{json, Value};

use super::api::{self, Api};
use super::creds::{self, Credentials, Mode};
use super::error::{CliError, Result};
use super::{connect, handoff_json, redact, ServerArg, DEFAULT_URL};

/// How long a browser launcher may take to say it failed; one still running then is taken to
/// be the browser itself, opened.
const LAUNCH_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, clap::Args)]
pub struct InboxArgs {
    /// Task name (as given to `create` or `import`).
    task: String,
    /// Print the one-time link (JSON `viewer_url`) instead of opening a browser.
    #[arg(long)]
    print: bool,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Task name for the imported address: names the credentials file
    /// (1..128 of A-Z a-z 0-9 . _ -, not starting with '.').
    task: String,
    /// The address id (`addr_…`).
    #[arg(long = "id", value_name = "ADDRESS_ID")]
    id: String,
    /// The file holding the read token (surrounding whitespace is ignored; `-` is stdin). The
    /// token is checked with the server, saved in the task's file and never printed.
    #[arg(long, value_name = "FILE")]
    token_file: PathBuf,
    /// The address's inbox URL, if you have it, to be shown again by `handoff` (the server
    /// cannot give it back: it keeps only the secret's hash).
    #[arg(long, value_name = "URL")]
    inbox_url: Option<String>,
    /// Replace the saved credentials of TASK if it has some.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    server: ServerArg,
}

/// `agentaddress inbox TASK [--print]`.
pub async fn inbox(args: InboxArgs, secret: &mut Option<String>) -> Result<Value> {
    let (_, saved, api) = connect(&args.task, &args.server, secret)?;
    let answer = api
        .call(
            Method::POST,
            &format!("addresses/{}/viewer-codes", saved.address_id),
            &[],
            Some(&saved.read_token),
            None,
            Duration::ZERO,
        )
        .await?;
    let viewer_url = api::string_field(&answer, &["viewer_url"])?;
    let expires_at = api::optional_string(&answer, &["expires_at"]);
    // Only a web page of the server, with the code in its fragment, is opened or printed.
    let parsed = reqwest::Url::parse(&viewer_url).ok().filter(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.fragment().is_some_and(|f| f.starts_with("code="))
    });
    if parsed.is_none() {
        return Err(CliError::new(
            "bad_response",
            "the server's `viewer_url` is not an http(s) link with a code in its fragment",
        ));
    }
    let mut out = json!({
        "task": saved.task,
        "address_id": saved.address_id,
        "expires_at": expires_at,
    });
    if args.print {
        out["viewer_url"] = Value::String(viewer_url);
        return Ok(out);
    }
    match open_in_browser(&viewer_url).await {
        Ok(how) => {
            out["opened"] = Value::Bool(true);
            out["browser"] = Value::String(how);
        }
        Err(why) => {
            // The link is the fallback: open it by hand (once, within its 5 minutes).
            out["opened"] = Value::Bool(false);
            out["reason"] = Value::String(why);
            out["viewer_url"] = Value::String(viewer_url);
        }
    }
    Ok(out)
}

/// The commands that may open a link, first to last: each entry of `$BROWSER` (the convention
/// of xdg-utils and Python's `webbrowser`: commands separated by `:`, `%s` standing for the
/// link, else the link is the last argument), then the platform's opener.
///
/// We start the opener ourselves rather than through a crate (`webbrowser`, `open`): it is
/// three well-known programs, the link goes as one argument (no shell ever parses it), and its
/// output goes nowhere, so our stdout stays the one JSON answer.
fn launchers(url: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    if let Some(browsers) = std::env::var_os("BROWSER") {
        for entry in browsers.to_string_lossy().split(':') {
            let mut words: Vec<String> = entry.split_whitespace().map(str::to_owned).collect();
            if words.is_empty() {
                continue;
            }
            if words.iter().any(|w| w.contains("%s")) {
                for w in &mut words {
                    *w = w.replace("%s", url);
                }
            } else {
                words.push(url.to_owned());
            }
            out.push(words);
        }
    }
    let platform: &[&str] = if cfg!(target_os = "macos") {
        &["open"]
    } else if cfg!(windows) {
        &["rundll32", "url.dll,FileProtocolHandler"]
    } else {
        &["xdg-open"]
    };
    let mut words: Vec<String> = platform.iter().map(|w| (*w).to_owned()).collect();
    words.push(url.to_owned());
    out.push(words);
    out
}

/// Opens `url` with the first launcher that works; `Ok` names it, `Err` says why none did
/// (without the link).
async fn open_in_browser(url: &str) -> std::result::Result<String, String> {
    let mut why = Vec::new();
    for words in launchers(url) {
        let Some((program, rest)) = words.split_first() else {
            continue;
        };
        let spawned = tokio::process::Command::new(program)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                why.push(format!("{program}: {e}"));
                continue;
            }
        };
        match tokio::time::timeout(LAUNCH_WAIT, child.wait()).await {
            Ok(Ok(status)) if status.success() => return Ok(program.clone()),
            Ok(Ok(status)) => why.push(format!("{program}: {status}")),
            Ok(Err(e)) => why.push(format!("{program}: {e}")),
            // Still running: the browser itself, which has the link. It is left running.
            Err(_) => return Ok(program.clone()),
        }
    }
    Err(format!("no browser could be opened ({})", why.join("; ")))
}

/// The read token in `file` (`-`: stdin), without surrounding whitespace. Never echoed.
fn read_token_file(file: &Path) -> Result<String> {
    let token = super::read_secret_file(file)?.trim().to_owned();
    let plain =
        !token.is_empty() && token.len() <= 512 && token.bytes().all(|b| b.is_ascii_graphic());
    if !plain {
        return Err(CliError::new(
            "usage",
            "the token file must hold one read token (aat_…) and nothing else",
        ));
    }
    Ok(token)
}

/// Says on stderr (beside the errors' format) that the token file is open to others.
fn warn_if_shared(file: &Path, secret: &str) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if file.as_os_str() == "-" {
            return;
        }
        let Ok(meta) = std::fs::metadata(file) else {
            return;
        };
        if meta.permissions().mode() & 0o077 != 0 {
            let message = format!(
                "{} can be read by other users: delete it (the token is saved in the task's \
                 file), or make it 0600",
                file.display()
            );
            let line = json!({"notice": {"token_file": message}}).to_string();
            let _ = writeln!(std::io::stderr(), "{}", redact(&line, Some(secret)));
        }
    }
    #[cfg(not(unix))]
    let _ = (file, secret);
}

/// `agentaddress import TASK --id ADDR --token-file FILE [--inbox-url URL] [--force]`.
pub async fn import(args: ImportArgs, secret: &mut Option<String>) -> Result<Value> {
    creds::validate_task(&args.task)?;
    let dir = creds::directory()?;
    let api = Api::new(args.server.get().unwrap_or(DEFAULT_URL))?;
    if !is_valid_id(&args.id) {
        return Err(CliError::new(
            "usage",
            "--id must be an address id: 1 to 64 of the characters A-Z a-z 0-9 _ - (addr_…)",
        ));
    }
    if let Some(url) = &args.inbox_url {
        let ok = reqwest::Url::parse(url).ok().is_some_and(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.path().contains(&format!("/api/v1/inbox/{}/", args.id))
        });
        if !ok {
            return Err(CliError::new(
                "usage",
                format!(
                    "--inbox-url must be the address's inbox URL (…/api/v1/inbox/{}/…)",
                    args.id
                ),
            ));
        }
    }
    if !args.force && creds::exists(&dir, &args.task) {
        return Err(creds::task_exists(&args.task, &dir));
    }
    let token = read_token_file(&args.token_file)?;
    *secret = Some(token.clone());
    // The token is checked where the address lives: 401 / 410 end here (exit 5).
    let answer = api
        .call(
            Method::GET,
            &format!("addresses/{}", args.id),
            &[],
            Some(&token),
            None,
            Duration::ZERO,
        )
        .await?;
    let address_id = api::string_field(&answer, &["address", "id"])?;
    if address_id != args.id {
        return Err(CliError::new(
            "bad_response",
            "the server answered for another address",
        ));
    }
    let mut saved = Credentials::new(
        &args.task,
        api.base(),
        address_id,
        token,
        args.inbox_url.unwrap_or_default(),
        api::string_field(&answer, &["address", "email"])?,
    );
    saved.name = api::optional_string(&answer, &["address", "name"]);
    saved.created_at = api::optional_string(&answer, &["address", "created_at"]);
    saved.expires_at = api::optional_string(&answer, &["address", "expires_at"]);
    let mode = if args.force {
        Mode::Replace
    } else {
        Mode::CreateNew
    };
    let path = creds::save(&dir, &saved, mode)?;
    warn_if_shared(&args.token_file, &saved.read_token);
    Ok(handoff_json(&saved, &path))
}
