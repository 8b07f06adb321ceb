//! Errors of the command-line client: the contract's error codes (docs/API.md §9), passed
//! through from the server, and the client's own, each with an exit code; printed as JSON on
//! stderr.

use std::io::Write;
use std::process::ExitCode;

use agentaddress_api::error::ErrorCode;
use serde_json::{json, Map, Value};

/// Exit codes of the client commands (docs/CLI.md lists them).
pub mod exit {
    /// Any other error: a server bug (`internal`), an answer the client cannot use
    /// (`bad_response`), a credentials file that cannot be read or written, …
    pub const OTHER: u8 = 1;
    /// The request is wrong: command line, task name, JSON input, `invalid_request` (400).
    pub const USAGE: u8 = 2;
    /// The server could not be reached or did not answer in time (`unreachable`).
    pub const UNREACHABLE: u8 = 3;
    /// `not_found` (404: event, state key) or `unknown_task` (no saved credentials).
    pub const NOT_FOUND: u8 = 4;
    /// The saved credentials no longer work: `unauthorized` (401), `address_gone` (410).
    pub const AUTH: u8 = 5;
    /// A conflict: `revision_conflict`, `state_limit_exceeded`, `quota_exceeded`,
    /// `request_closed`, `timer_fired` (409), `task_exists`, `file_exists`.
    pub const CONFLICT: u8 = 6;
    /// Retry later: `rate_limited` (429), `unavailable` (503).
    pub const RETRY: u8 = 7;
    /// `wait --timeout`: no event arrived in time (`timed_out`).
    pub const TIMED_OUT: u8 = 8;
    /// `wait` was interrupted (Ctrl-C, `interrupted`): the shell's code for SIGINT.
    pub const INTERRUPTED: u8 = 130;
}

/// One failed command: the `error` object printed on stderr, and the exit code.
#[derive(Debug)]
pub struct CliError {
    /// `{"code", "message", …extra fields of the server's error}`.
    body: Map<String, Value>,
    exit: u8,
}

impl CliError {
    /// An error of the client itself; the exit code follows from the code.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        let mut body = Map::new();
        body.insert("code".into(), Value::String(code.to_owned()));
        body.insert("message".into(), Value::String(message.into()));
        Self {
            exit: exit_code_for(code),
            body: with_hint(body),
        }
    }

    /// The server's `{"error": {...}}` object, kept as it is (extra fields such as
    /// `current_revision` and `retry_after_seconds` included).
    pub fn from_server(error: Map<String, Value>) -> Self {
        let code = error
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("bad_response")
            .to_owned();
        Self {
            exit: exit_code_for(&code),
            body: with_hint(error),
        }
    }

    /// The error's code.
    pub fn code(&self) -> &str {
        self.body.get("code").and_then(Value::as_str).unwrap_or("")
    }

    /// A field of the error object (e.g. `retry_after_seconds`).
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.body.get(field)
    }

    /// Adds a field to the error object (e.g. `http_status`).
    pub fn with(mut self, field: &str, value: Value) -> Self {
        self.body.insert(field.to_owned(), value);
        self
    }

    /// Prints `{"error": {...}}` on stderr (with `secret` redacted) and returns the exit code.
    pub fn report(self, secret: Option<&str>) -> ExitCode {
        let line = json!({ "error": Value::Object(self.body) }).to_string();
        // Nothing more can be said if stderr is closed: no panic for it.
        let _ = writeln!(std::io::stderr(), "{}", super::redact(&line, secret));
        ExitCode::from(self.exit)
    }
}

/// What to check when a token is refused (docs/CLI.md, "Errors and exit codes"): the address
/// is unknown to this server as often as the token is wrong.
pub const UNAUTHORIZED_HINT: &str =
    "check --url: is this the server, and the database, that made the address?";

/// `unauthorized` (exit 5) with [`UNAUTHORIZED_HINT`] after its message.
fn with_hint(mut body: Map<String, Value>) -> Map<String, Value> {
    if body.get("code").and_then(Value::as_str) == Some("unauthorized") {
        let message = body.get("message").and_then(Value::as_str).unwrap_or("");
        if !message.contains(UNAUTHORIZED_HINT) {
            let hinted = format!("{} ({UNAUTHORIZED_HINT})", message.trim_end());
            body.insert(
                "message".into(),
                Value::String(hinted.trim_start().to_owned()),
            );
        }
    }
    body
}

/// The client's own error codes (docs/CLI.md, "Errors and exit codes"), each with its exit
/// code. None is a code of the API's catalogue ([`ErrorCode`]).
pub const CLIENT_CODES: &[(&str, u8)] = &[
    ("usage", exit::USAGE),
    ("invalid_task", exit::USAGE),
    ("invalid_json", exit::USAGE),
    ("unreachable", exit::UNREACHABLE),
    ("unknown_task", exit::NOT_FOUND),
    ("task_exists", exit::CONFLICT),
    ("file_exists", exit::CONFLICT),
    ("bad_response", exit::OTHER),
    ("credentials_error", exit::OTHER),
    ("credentials_insecure", exit::OTHER),
    ("output_error", exit::OTHER),
    ("timed_out", exit::TIMED_OUT),
    ("interrupted", exit::INTERRUPTED),
];

/// The exit code of an API error code (docs/API.md §9).
pub fn exit_code_for_api(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::InvalidRequest
        | ErrorCode::InvalidCode
        | ErrorCode::CodeExpired
        | ErrorCode::ContactNotConfirmed
        | ErrorCode::InvalidHookUrl => exit::USAGE,
        ErrorCode::NotFound | ErrorCode::AttachmentUnavailable => exit::NOT_FOUND,
        ErrorCode::Unauthorized | ErrorCode::AddressGone => exit::AUTH,
        ErrorCode::RevisionConflict
        | ErrorCode::StateLimitExceeded
        | ErrorCode::QuotaExceeded
        | ErrorCode::RequestClosed
        | ErrorCode::TimerFired => exit::CONFLICT,
        ErrorCode::RateLimited | ErrorCode::Unavailable | ErrorCode::HookUnreachable => exit::RETRY,
        ErrorCode::OutboundNotConfigured => exit::OTHER,
        ErrorCode::MethodNotAllowed
        | ErrorCode::RequestTimeout
        | ErrorCode::PayloadTooLarge
        | ErrorCode::UnsupportedMediaType
        | ErrorCode::IdempotencyKeyReused
        | ErrorCode::Internal
        | ErrorCode::NotSupported
        | ErrorCode::SignatureInvalid
        | ErrorCode::Forbidden => exit::OTHER,
    }
}

/// The exit code of an error code: the API's catalogue, then the client's own codes (unknown
/// codes: 1).
pub fn exit_code_for(code: &str) -> u8 {
    if let Some(api) = ErrorCode::parse(code) {
        return exit_code_for_api(api);
    }
    CLIENT_CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(exit::OTHER, |(_, exit)| *exit)
}

pub type Result<T> = std::result::Result<T, CliError>;
