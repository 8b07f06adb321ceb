//! The command-line client, for agents that run shell commands: `create`, `import`, `handoff`,
//! `poll`, `wait`, `ack`, `state …`, `attachment`, `inbox`, `hook …` and `timer …`. Credentials are saved per task in the credentials directory
//! (`creds`), every answer is JSON on stdout, every error `{"error": {"code", "message"}}` on
//! stderr with an exit code per kind of error (`error::exit`). docs/CLI.md is the manual.
//!
//! The read token is never printed: it is only ever written to the task's file (0600), and
//! everything printed on stdout or stderr passes through `redact` as a last guard.

mod api;
mod attachment;
mod creds;
mod error;
mod hook;
mod timer;
mod viewer;
mod wait;

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agentaddress_core::domain::ids::is_valid_id;
use agentaddress_core::domain::state::validate_key;
use reqwest::Method;
use serde_json::{json, Map, Value};

use api::Api;
use creds::{Credentials, Mode};
use error::{CliError, Result};

/// The server URL when neither `--url` nor `AGENTADDRESS_URL` is given (for `create`; the
/// later commands use the URL saved by `create`).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Where the client talks to.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArg {
    /// Server URL. Default for `create`: http://127.0.0.1:8080; the other commands use the URL
    /// the task's address was created on (saved by `create`) unless this is given.
    #[arg(long, env = "AGENTADDRESS_URL", global = true, value_name = "URL")]
    url: Option<String>,
}

impl ServerArg {
    fn get(&self) -> Option<&str> {
        self.url.as_deref().map(str::trim).filter(|u| !u.is_empty())
    }
}

/// The client's subcommands (flattened into the binary's own).
#[derive(Debug, clap::Subcommand)]
pub enum ClientCommand {
    /// Client: create an address for TASK and save its credentials (prints the inbox URL and
    /// email to hand off, never the read token).
    Create(CreateArgs),
    /// Client: print the inbox URL and email of TASK's address again.
    Handoff(HandoffArgs),
    /// Client: read TASK's events after the saved cursor (long poll with --wait).
    Poll(PollArgs),
    /// Client: print TASK's events as they arrive, one JSON line each, from the saved cursor
    /// on (woken by the server's socket, else by long polls); the cursor is not moved.
    Wait(wait::WaitArgs),
    /// Client: acknowledge an event of TASK and advance the saved cursor to it.
    Ack(AckArgs),
    /// Client: the durable JSON state of TASK's address.
    State(StateArgs),
    /// Client: save one attachment of an email event of TASK into a new file (0600; never
    /// overwrites).
    Attachment(attachment::AttachmentArgs),
    /// Client: ask a person a question for TASK; prints the request and its page URL to give
    /// them. Their answer arrives in TASK's feed as a `request.answered` event.
    Ask(AskArgs),
    /// Client: the email contacts of TASK's address, and whether the server sends email.
    Contacts(ContactsArgs),
    /// Client: add a contact (a 6-digit code is mailed to it), or confirm it with `--code`.
    Contact(ContactArgs),
    /// Client: email a confirmed contact of TASK; the text is read from stdin. Replies arrive in
    /// TASK's feed as `email.received` events.
    Send(SendArgs),
    /// Client: open the inbox viewer signed in for TASK, with a one-time link (the read token
    /// never appears in a URL); `--print` prints the link instead.
    Inbox(viewer::InboxArgs),
    /// Client: save the credentials of an address made elsewhere (curl, MCP, another machine)
    /// as TASK, after checking its read token with the server.
    Import(viewer::ImportArgs),
    /// Client: the wake hooks of TASK's address (`add`, `list`, `remove`, `test`): a signed
    /// POST to a URL of yours when matching events arrive, to start the agent's next run.
    Hook(hook::HookArgs),
    /// Client: the timers of TASK's address (`add`, `list`, `cancel`): at its time a timer
    /// appends one `timer.…` event to TASK's feed, which `wait --type 'timer.*'` waits for.
    Timer(timer::TimerArgs),
}

#[derive(Debug, clap::Args)]
pub struct ContactsArgs {
    /// Task name (as given to `create`).
    task: String,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Args)]
pub struct ContactArgs {
    /// Task name (as given to `create`).
    task: String,
    /// The contact's email address (plain: ada@example.com).
    email: String,
    /// The six digits mailed to the contact: confirms it. Without it, a code is mailed.
    #[arg(long, value_name = "DIGITS")]
    code: Option<String>,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// Task name (as given to `create`).
    task: String,
    /// A confirmed contact.
    #[arg(long, value_name = "EMAIL")]
    to: String,
    /// The subject (1..200 characters, one line).
    #[arg(long)]
    subject: String,
    /// Reply to this `email.received` event of TASK (threads the mail, `Re: ` subject).
    #[arg(long, value_name = "EVENT_ID")]
    reply_to: Option<String>,
    /// The Idempotency-Key. Default: a hash of the message and its recipient, so running the
    /// same command again never sends it twice; give a key to send the same text again.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Args)]
pub struct AskArgs {
    /// Task name (as given to `create`).
    task: String,
    /// The question (1..200 characters).
    title: String,
    /// An answer the person can choose (1..40 characters; repeat for up to 5). Default:
    /// Approve and Reject.
    #[arg(long = "option", value_name = "LABEL")]
    options: Vec<String>,
    /// Details in Markdown: the text of FILE, or of stdin when FILE is `-`.
    #[arg(long, value_name = "FILE")]
    body: Option<PathBuf>,
    /// Whether the person may add a comment.
    #[arg(long, value_parser = ["none", "optional", "required"])]
    comment: Option<String>,
    /// Seconds until the request expires unanswered (60..2592000; default 7 days).
    #[arg(long, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(60..=2_592_000))]
    expires_in: Option<u64>,
    /// Sent as the Idempotency-Key: asking again with the same key and question returns the
    /// same request and URL.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// Wait up to this many seconds for the answer (long polls of 25 s): the page's URL is
    /// said on stderr at once, and the request is printed the moment it is answered or
    /// expires (still open when the time is up).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    wait: Option<u64>,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Task name: names the credentials file and is sent as `task_id`
    /// (1..128 of A-Z a-z 0-9 . _ -, not starting with '.').
    task: String,
    /// Seconds until the address expires (60..31536000); default: never.
    #[arg(long, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(60..=31_536_000))]
    expires_in: Option<u64>,
    /// A name for the address (1..200 characters).
    #[arg(long)]
    name: Option<String>,
    /// Replace the saved credentials of TASK if it has some (its old address is not deleted).
    #[arg(long)]
    force: bool,
    /// Verify webhook signatures with this scheme (docs/API.md §15); needs --secret-file.
    #[arg(long, value_name = "SCHEME", requires = "secret_file",
          value_parser = ["standard-webhooks", "stripe", "github", "slack", "zoom", "shopify",
                          "meta", "twilio", "linear"])]
    verify: Option<String>,
    /// The file holding the provider's signing secret (one trailing newline is ignored; `-` is
    /// stdin). The secret is sent once and never printed.
    #[arg(long, value_name = "FILE", requires = "verify")]
    secret_file: Option<PathBuf>,
    /// `--verify meta` only: the file holding the verify token Meta's subscription handshake
    /// presents (docs/API.md §22; one trailing newline is ignored, `-` is stdin).
    #[arg(long, value_name = "FILE", requires = "verify")]
    verify_token_file: Option<PathBuf>,
    /// Refuse deliveries that do not verify (401 signature_invalid) instead of recording them.
    #[arg(long, requires = "verify")]
    reject_unverified: bool,
    /// How far a signed timestamp may be from the server's clock (1..3600; default 300).
    #[arg(long, value_name = "SECONDS", requires = "verify",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    tolerance_seconds: Option<u64>,
    /// Accept email only from senders matching PATTERN (`ada@example.com`, `*@example.com`,
    /// `*@*.example.com`); repeat for more (docs/API.md §10, "Sender rules").
    #[arg(long = "allow-sender", value_name = "PATTERN")]
    allow_sender: Vec<String>,
    /// Accept email only when this authentication passes (docs/API.md §10, "Sender rules").
    #[arg(long, value_name = "CHECK", value_parser = ["spf_or_dkim", "dmarc"])]
    require_auth: Option<String>,
    #[command(flatten)]
    server: ServerArg,
}

/// The signing secret in `file` (`-`: stdin), without one trailing newline.
fn read_secret_file(file: &Path) -> Result<String> {
    let bytes = if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| CliError::new("usage", format!("cannot read stdin: {e}")))?;
        buf
    } else {
        std::fs::read(file)
            .map_err(|e| CliError::new("usage", format!("cannot read {}: {e}", file.display())))?
    };
    let mut text = String::from_utf8(bytes)
        .map_err(|_| CliError::new("usage", "the secret file must be UTF-8 text"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

#[derive(Debug, clap::Args)]
pub struct HandoffArgs {
    /// Task name (as given to `create`).
    task: String,
}

#[derive(Debug, clap::Args)]
pub struct PollArgs {
    /// Task name (as given to `create`).
    task: String,
    /// Wait up to this many seconds (0..25) for an event when none is there yet.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(0..=25))]
    wait: Option<u64>,
    /// At most this many events (1..100; the server's default is 100).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    limit: Option<u64>,
    /// Read after this sequence instead of the saved cursor (the saved cursor is unchanged).
    #[arg(long, value_name = "SEQUENCE")]
    after: Option<u64>,
    /// Only events of this type or pattern (`email.*`, `request.answered`; repeatable). The
    /// answer's `next_cursor` passes over the others.
    #[arg(long = "type", value_name = "PATTERN")]
    types: Vec<String>,
    #[command(flatten)]
    server: ServerArg,
}

/// The `types` query parameter of `--type` patterns (docs/API.md §21), if any.
pub(crate) fn types_param(types: &[String]) -> Option<(&'static str, String)> {
    (!types.is_empty()).then(|| ("types", types.join(",")))
}

#[derive(Debug, clap::Args)]
pub struct AckArgs {
    /// Task name (as given to `create`).
    task: String,
    /// The event's id (`evt_…`).
    event_id: String,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Args)]
pub struct StateArgs {
    #[command(subcommand)]
    command: StateCommand,
    #[command(flatten)]
    server: ServerArg,
}

#[derive(Debug, clap::Subcommand)]
pub enum StateCommand {
    /// List the keys (with revision, size, updated_at) and the usage.
    Keys {
        /// Task name (as given to `create`).
        task: String,
    },
    /// Print a key's value and revision.
    Get {
        /// Task name (as given to `create`).
        task: String,
        /// State key: 1..128 of A-Z a-z 0-9 . _ : -
        key: String,
    },
    /// Write a key: the value is the JSON in FILE, or on stdin when FILE is `-` or absent.
    Set {
        /// Task name (as given to `create`).
        task: String,
        /// State key: 1..128 of A-Z a-z 0-9 . _ : -
        key: String,
        /// A file holding the JSON value; `-` or absent: stdin.
        file: Option<PathBuf>,
        /// Write only if the key's revision is N (0: only if the key does not exist).
        #[arg(long, value_name = "N")]
        if_revision: Option<u64>,
    },
    /// Delete a key.
    Delete {
        /// Task name (as given to `create`).
        task: String,
        /// State key: 1..128 of A-Z a-z 0-9 . _ : -
        key: String,
        /// Delete only if the key's revision is N.
        #[arg(long, value_name = "N")]
        if_revision: Option<u64>,
    },
}

/// Runs one client command: its JSON on stdout and exit 0, or its error on stderr.
pub fn run(command: ClientCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return CliError::new("internal", format!("cannot start the async runtime: {e}"))
                .report(None)
        }
    };
    let mut secret = None;
    // `wait` prints each event as it arrives, not one answer at the end.
    let command = match command {
        ClientCommand::Wait(args) => {
            return match runtime.block_on(wait::wait(args, &mut secret)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => e.report(secret.as_deref()),
            };
        }
        other => other,
    };
    let outcome = runtime.block_on(execute(command, &mut secret));
    match outcome {
        Ok(value) => {
            let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
            let mut stdout = std::io::stdout().lock();
            // A closed stdout (`| head`) is an error of its own, not a panic.
            match writeln!(stdout, "{}", redact(&text, secret.as_deref()))
                .and_then(|()| stdout.flush())
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => CliError::new("output_error", format!("cannot write stdout: {e}"))
                    .report(secret.as_deref()),
            }
        }
        Err(e) => e.report(secret.as_deref()),
    }
}

/// `text` with every occurrence of `secret` replaced.
fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() && text.contains(s) => text.replace(s, "[redacted]"),
        _ => text.to_owned(),
    }
}

async fn execute(command: ClientCommand, secret: &mut Option<String>) -> Result<Value> {
    match command {
        ClientCommand::Create(args) => create(args, secret).await,
        ClientCommand::Handoff(args) => {
            let dir = creds::directory()?;
            let saved = load(&dir, &args.task, secret)?;
            Ok(handoff_json(&saved, &creds::path_of(&dir, &saved.task)))
        }
        ClientCommand::Poll(args) => poll(args, secret).await,
        ClientCommand::Wait(_) => Err(CliError::new("internal", "wait runs on its own")),
        ClientCommand::Ack(args) => ack(args, secret).await,
        ClientCommand::State(args) => state(args, secret).await,
        ClientCommand::Attachment(args) => attachment::attachment(args, secret).await,
        ClientCommand::Ask(args) => ask(args, secret).await,
        ClientCommand::Contacts(args) => {
            let (_, saved, api) = connect(&args.task, &args.server, secret)?;
            api.call(
                Method::GET,
                &format!("addresses/{}/email/contacts", saved.address_id),
                &[],
                Some(&saved.read_token),
                None,
                Duration::ZERO,
            )
            .await
        }
        ClientCommand::Contact(args) => contact(args, secret).await,
        ClientCommand::Send(args) => send(args, secret).await,
        ClientCommand::Inbox(args) => viewer::inbox(args, secret).await,
        ClientCommand::Import(args) => viewer::import(args, secret).await,
        ClientCommand::Hook(args) => hook::hook(args, secret).await,
        ClientCommand::Timer(args) => timer::timer(args, secret).await,
    }
}

async fn contact(args: ContactArgs, secret: &mut Option<String>) -> Result<Value> {
    let (_, saved, api) = connect(&args.task, &args.server, secret)?;
    let mut body = Map::new();
    body.insert("email".into(), Value::String(args.email));
    if let Some(code) = args.code {
        body.insert("code".into(), Value::String(code));
    }
    api.call_with_key(
        Method::POST,
        &format!("addresses/{}/email/contacts", saved.address_id),
        Some(&saved.read_token),
        &Value::Object(body),
        None,
    )
    .await
}

async fn send(args: SendArgs, secret: &mut Option<String>) -> Result<Value> {
    let (_, saved, api) = connect(&args.task, &args.server, secret)?;
    if std::io::stdin().is_terminal() {
        return Err(CliError::new(
            "usage",
            "send reads the text from stdin: pipe it in (echo 'Hello' | agentaddress send …)",
        ));
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::new("usage", format!("cannot read stdin: {e}")))?;
    let text =
        String::from_utf8(bytes).map_err(|_| CliError::new("usage", "the text must be UTF-8"))?;
    let mut body = Map::new();
    body.insert("to".into(), Value::String(args.to));
    body.insert("subject".into(), Value::String(args.subject));
    body.insert("text".into(), Value::String(text));
    if let Some(event_id) = args.reply_to {
        body.insert("reply_to_event_id".into(), Value::String(event_id));
    }
    let body = Value::Object(body);
    let key = args.idempotency_key.unwrap_or_else(|| {
        use sha2::{Digest, Sha256};
        format!(
            "cli-{}",
            hex::encode(Sha256::digest(body.to_string().as_bytes()))
        )
    });
    api.call_with_key(
        Method::POST,
        &format!("addresses/{}/email/send", saved.address_id),
        Some(&saved.read_token),
        &body,
        Some(&key),
    )
    .await
}

async fn ask(args: AskArgs, secret: &mut Option<String>) -> Result<Value> {
    let (_, saved, api) = connect(&args.task, &args.server, secret)?;
    let mut body = Map::new();
    body.insert("title".into(), Value::String(args.title));
    if !args.options.is_empty() {
        body.insert("options".into(), json!(args.options));
    }
    if let Some(file) = &args.body {
        let bytes = if file.as_os_str() == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| CliError::new("usage", format!("cannot read stdin: {e}")))?;
            buf
        } else {
            std::fs::read(file).map_err(|e| {
                CliError::new("usage", format!("cannot read {}: {e}", file.display()))
            })?
        };
        let text = String::from_utf8(bytes)
            .map_err(|_| CliError::new("usage", "the body must be UTF-8 text"))?;
        body.insert("body".into(), Value::String(text));
    }
    if let Some(comment) = args.comment {
        body.insert("comment".into(), Value::String(comment));
    }
    if let Some(s) = args.expires_in {
        body.insert("expires_in_seconds".into(), s.into());
    }
    let created = api
        .call_with_key(
            Method::POST,
            &format!("addresses/{}/requests", saved.address_id),
            Some(&saved.read_token),
            &Value::Object(body),
            args.idempotency_key.as_deref(),
        )
        .await?;
    match args.wait {
        Some(seconds) => wait_for_answer(&api, &saved, created, seconds).await,
        None => Ok(created),
    }
}

/// `ask --wait`: says the page's URL on stderr, then long-polls the request (docs/API.md §21)
/// until it is answered or expired or `seconds` have passed; the answer printed is the
/// request as last read, with the URL of the creation's answer (shown only there).
async fn wait_for_answer(
    api: &Api, saved: &Credentials, mut created: Value, seconds: u64,
) -> Result<Value> {
    let id = api::field(&created, &["request", "id"])?
        .as_str()
        .ok_or_else(|| CliError::new("bad_response", "the request's id is not a string"))?
        .to_owned();
    let url = created["request"]["url"].as_str().unwrap_or_default();
    let line = json!({"notice": {"mode": "waiting", "message": format!(
        "give the person this page: {url} (waiting up to {seconds} s for the answer)"
    )}});
    let _ = writeln!(
        std::io::stderr(),
        "{}",
        redact(&line.to_string(), Some(&saved.read_token))
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let wait = left.as_secs().min(25);
        let answer = api
            .call(
                Method::GET,
                &format!("addresses/{}/requests/{id}", saved.address_id),
                &[("wait", wait.to_string())],
                Some(&saved.read_token),
                None,
                Duration::from_secs(wait),
            )
            .await;
        let request = match answer {
            Ok(v) => v["request"].clone(),
            Err(e) if e.code() == "rate_limited" => {
                let secs = e
                    .get("retry_after_seconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(secs.clamp(1, 60))).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let open = request["status"].as_str() == Some("open");
        if let (Some(into), Some(from)) = (created["request"].as_object_mut(), request.as_object())
        {
            for (k, v) in from {
                into.insert(k.clone(), v.clone());
            }
        }
        if !open || tokio::time::Instant::now() >= deadline {
            return Ok(created);
        }
    }
}

/// The task's saved credentials (the read token is remembered for redaction at once).
fn load(dir: &Path, task: &str, secret: &mut Option<String>) -> Result<Credentials> {
    creds::validate_task(task)?;
    let saved = creds::load(dir, task)?;
    *secret = Some(saved.read_token.clone());
    if !is_valid_id(&saved.address_id) {
        return Err(CliError::new(
            "credentials_error",
            format!(
                "the credentials file of task '{task}' holds an invalid address id: recreate it with `agentaddress create {task} --force`"
            ),
        ));
    }
    Ok(saved)
}

/// The saved credentials and a client for the server (`--url` / `AGENTADDRESS_URL`, else the
/// URL saved by `create`).
fn connect(
    task: &str, server: &ServerArg, secret: &mut Option<String>,
) -> Result<(PathBuf, Credentials, Api)> {
    let dir = creds::directory()?;
    let saved = load(&dir, task, secret)?;
    let api = Api::new(server.get().unwrap_or(&saved.base_url))?;
    Ok((dir, saved, api))
}

/// What is handed to a webhook sender or a person: never the read token.
fn handoff_json(c: &Credentials, file: &Path) -> Value {
    json!({
        "task": c.task,
        "address_id": c.address_id,
        "name": c.name,
        // `import` without --inbox-url: the server keeps only the inbox secret's hash.
        "inbox_url": (!c.inbox_url.is_empty()).then_some(&c.inbox_url),
        "email": c.email,
        "created_at": c.created_at,
        "expires_at": c.expires_at,
        "url": c.base_url,
        "credentials_file": file.display().to_string(),
    })
}

async fn create(args: CreateArgs, secret: &mut Option<String>) -> Result<Value> {
    creds::validate_task(&args.task)?;
    let dir = creds::directory()?;
    let api = Api::new(args.server.get().unwrap_or(DEFAULT_URL))?;
    if !args.force && creds::exists(&dir, &args.task) {
        return Err(creds::task_exists(&args.task, &dir));
    }
    let mut body = Map::new();
    body.insert("task_id".into(), Value::String(args.task.clone()));
    if let Some(name) = &args.name {
        body.insert("name".into(), Value::String(name.clone()));
    }
    if let Some(s) = args.expires_in {
        body.insert("expires_in_seconds".into(), s.into());
    }
    if let (Some(scheme), Some(file)) = (&args.verify, &args.secret_file) {
        let mut verification = Map::new();
        verification.insert("scheme".into(), Value::String(scheme.clone()));
        verification.insert("secret".into(), Value::String(read_secret_file(file)?));
        verification.insert("reject_unverified".into(), args.reject_unverified.into());
        if let Some(file) = &args.verify_token_file {
            verification.insert(
                "verify_token".into(),
                Value::String(read_secret_file(file)?),
            );
        }
        if let Some(t) = args.tolerance_seconds {
            verification.insert("tolerance_seconds".into(), t.into());
        }
        body.insert("verification".into(), Value::Object(verification));
    }
    if !args.allow_sender.is_empty() || args.require_auth.is_some() {
        let allow = (!args.allow_sender.is_empty()).then(|| args.allow_sender.clone());
        body.insert(
            "email_policy".into(),
            serde_json::json!({"allow": allow, "require_auth": args.require_auth}),
        );
    }
    let answer = api
        .call(
            Method::POST,
            "addresses",
            &[],
            None,
            Some(&Value::Object(body)),
            Duration::ZERO,
        )
        .await?;
    let token = api::string_field(&answer, &["credentials", "read_token"])?;
    *secret = Some(token.clone());
    let mut saved = Credentials::new(
        &args.task,
        api.base(),
        api::string_field(&answer, &["address", "id"])?,
        token,
        api::string_field(&answer, &["endpoints", "inbox_url"])?,
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
    let path = creds::save(&dir, &saved, mode)
        .map_err(|e| e.with("address_id", Value::String(saved.address_id.clone())))?;
    let mut out = handoff_json(&saved, &path);
    // The public view of the signing secret (docs/API.md §15), when one was set.
    if let (Some(v), Some(o)) = (answer["address"].get("verification"), out.as_object_mut()) {
        o.insert("verification".into(), v.clone());
    }
    // The sender rules of its email (docs/API.md §10), when some were set.
    if let (Some(v), Some(o)) = (answer["address"].get("email_policy"), out.as_object_mut()) {
        o.insert("email_policy".into(), v.clone());
    }
    Ok(out)
}

async fn poll(args: PollArgs, secret: &mut Option<String>) -> Result<Value> {
    let (_, saved, api) = connect(&args.task, &args.server, secret)?;
    let after = args.after.unwrap_or(saved.cursor);
    let mut query = vec![("after", after.to_string())];
    if let Some(wait) = args.wait {
        query.push(("wait", wait.to_string()));
    }
    if let Some(limit) = args.limit {
        query.push(("limit", limit.to_string()));
    }
    query.extend(types_param(&args.types));
    let wait = Duration::from_secs(args.wait.unwrap_or(0));
    api.call(
        Method::GET,
        &format!("addresses/{}/events", saved.address_id),
        &query,
        Some(&saved.read_token),
        None,
        wait,
    )
    .await
}

async fn ack(args: AckArgs, secret: &mut Option<String>) -> Result<Value> {
    let (dir, saved, api) = connect(&args.task, &args.server, secret)?;
    if !is_valid_id(&args.event_id) {
        return Err(CliError::new(
            "invalid_request",
            "an event id is 1 to 64 of the characters A-Z a-z 0-9 _ -",
        ));
    }
    let answer = api
        .call(
            Method::POST,
            &format!(
                "addresses/{}/events/{}/ack",
                saved.address_id, args.event_id
            ),
            &[],
            Some(&saved.read_token),
            None,
            Duration::ZERO,
        )
        .await?;
    let sequence = api::field(&answer, &["event", "sequence"])?
        .as_u64()
        .ok_or_else(|| {
            CliError::new(
                "bad_response",
                "'event.sequence' in the server's answer is not a sequence number",
            )
        })?;
    // Re-read the file just before writing it: the smallest window for another process's
    // update to be overwritten (which can only lower the cursor, never skip an event).
    let mut current = creds::load(&dir, &saved.task)?;
    if sequence > current.cursor && current.address_id == saved.address_id {
        current.cursor = sequence;
        creds::save(&dir, &current, Mode::Replace)?;
    }
    let mut out = api::object(answer);
    out.insert("cursor".into(), current.cursor.into());
    Ok(Value::Object(out))
}

/// A state key as the contract defines it (docs/API.md, "State."): the shared rule, which also
/// refuses keys of dots only (`.`, `..`, `...`: not addressable in a URL path).
fn check_key(key: &str) -> Result<()> {
    validate_key(key).map_err(|e| CliError::new("invalid_request", e.0))
}

/// The JSON value of `state set`: FILE, or stdin for `-` / no FILE.
fn read_value(file: Option<&Path>) -> Result<Value> {
    let (bytes, source) = match file.filter(|f| f.as_os_str() != "-") {
        Some(path) => (
            std::fs::read(path).map_err(|e| {
                CliError::new("usage", format!("cannot read {}: {e}", path.display()))
            })?,
            path.display().to_string(),
        ),
        None => {
            let mut stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(CliError::new(
                    "usage",
                    "give the value as a FILE of JSON, or pipe it on stdin",
                ));
            }
            let mut buf = Vec::new();
            stdin
                .read_to_end(&mut buf)
                .map_err(|e| CliError::new("usage", format!("cannot read stdin: {e}")))?;
            (buf, "stdin".to_owned())
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        CliError::new(
            "invalid_json",
            format!(
                "the value in {source} is not JSON: {}",
                creds::describe_json_error(&e)
            ),
        )
    })
}

async fn state(args: StateArgs, secret: &mut Option<String>) -> Result<Value> {
    let task = match &args.command {
        StateCommand::Keys { task }
        | StateCommand::Get { task, .. }
        | StateCommand::Set { task, .. }
        | StateCommand::Delete { task, .. } => task.clone(),
    };
    // Local input is checked before any request.
    let (key, value) = match &args.command {
        StateCommand::Keys { .. } => (None, None),
        StateCommand::Get { key, .. } | StateCommand::Delete { key, .. } => {
            creds::validate_task(&task)?;
            check_key(key)?;
            (Some(key.clone()), None)
        }
        StateCommand::Set { key, file, .. } => {
            creds::validate_task(&task)?;
            check_key(key)?;
            (Some(key.clone()), Some(read_value(file.as_deref())?))
        }
    };
    let (_, saved, api) = connect(&task, &args.server, secret)?;
    let root = format!("addresses/{}/state", saved.address_id);
    let key_path = key.map(|k| format!("{root}/{k}"));
    let token = Some(saved.read_token.as_str());
    let (method, path, query, body) = match args.command {
        StateCommand::Keys { .. } => (Method::GET, root, vec![], None),
        StateCommand::Get { .. } => (Method::GET, key_path.unwrap_or_default(), vec![], None),
        StateCommand::Set { if_revision, .. } => {
            let mut body = Map::new();
            body.insert("value".into(), value.unwrap_or(Value::Null));
            if let Some(n) = if_revision {
                body.insert("if_revision".into(), n.into());
            }
            (
                Method::PUT,
                key_path.unwrap_or_default(),
                vec![],
                Some(Value::Object(body)),
            )
        }
        StateCommand::Delete { if_revision, .. } => (
            Method::DELETE,
            key_path.unwrap_or_default(),
            if_revision
                .map(|n| vec![("if_revision", n.to_string())])
                .unwrap_or_default(),
            None,
        ),
    };
    api.call(method, &path, &query, token, body.as_ref(), Duration::ZERO)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(
            redact("a aat_x b aat_x", Some("aat_x")),
            "a [redacted] b [redacted]"
        );
        assert_eq!(redact("nothing", Some("aat_x")), "nothing");
        assert_eq!(redact("x", Some("")), "x");
        assert_eq!(redact("x", None), "x");
    }

    #[test]
    fn keys() {
        assert!(check_key("progress").is_ok());
        assert!(check_key("a.b:c-d_e").is_ok());
        for bad in ["", ".", "..", "...", "a/b", "a b", "é", &"k".repeat(129)] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn exit_codes_are_distinct_per_kind() {
        use error::exit_code_for as x;
        assert_eq!(x("invalid_request"), 2);
        assert_eq!(x("unreachable"), 3);
        assert_eq!(x("not_found"), 4);
        assert_eq!(x("unknown_task"), 4);
        assert_eq!(x("unauthorized"), 5);
        assert_eq!(x("address_gone"), 5);
        assert_eq!(x("revision_conflict"), 6);
        assert_eq!(x("task_exists"), 6);
        assert_eq!(x("request_closed"), 6);
        assert_eq!(x("timer_fired"), 6);
        assert_eq!(x("rate_limited"), 7);
        assert_eq!(x("timed_out"), 8);
        assert_eq!(x("interrupted"), 130);
        assert_eq!(x("internal"), 1);
        assert_eq!(x("request_timeout"), 1);
        assert_eq!(x("no_such_code"), 1);
    }

    #[test]
    fn client_codes_do_not_collide_with_the_catalogue() {
        use agentaddress_api::error::ErrorCode;
        for (code, _) in error::CLIENT_CODES {
            assert!(ErrorCode::parse(code).is_none(), "{code} is an API code");
        }
    }
}
