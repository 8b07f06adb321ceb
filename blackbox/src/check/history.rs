//! What the checker records: every HTTP request it issued and what came back.
//!
//! The history is plain data so that [`super::verify`] is a pure function over it: the workload
//! fills it, and the unit tests build (or tamper with) histories by hand.

use std::fmt;

use serde_json::Value;

/// State keys whose name starts with this are CAS counters: written only by read-then-PUT with
/// `if_revision`, never deleted, so their `state.updated` values must be 1, 2, 3, … in feed order.
pub const COUNTER_PREFIX: &str = "counter-";

/// The `type` of the events the workload delivers to inboxes. Their body is
/// `{"type": DELIVERY_TYPE, "data": {"marker": …, …}}`, so the event's `data` is the body's `data`.
pub const DELIVERY_TYPE: &str = "check.delivery";

/// The `type` of an event whose body is kept as text (docs/API.md, "Inbox.").
pub const RAW_TYPE: &str = "http.request";
/// The type of an email's event (docs/API.md §10).
pub const EMAIL_TYPE: &str = "email.received";
/// The sender of the checker's emails.
pub const EMAIL_SENDER: &str = "checker@agentaddress-check.test";

/// The raw message of the checker's email `marker`.
pub fn email_message(marker: &str) -> Vec<u8> {
    format!(
        "From: agentaddress-check <{EMAIL_SENDER}>\r\nSubject: {marker}\r\n\
         Message-ID: <{marker}@agentaddress-check.test>\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\nemail {marker}\r\n"
    )
    .into_bytes()
}

/// How many bodies [`lossy_body`] knows.
pub const LOSSY_BODIES: usize = 4;

/// A JSON body that parsing would change, carrying `marker` (docs/API.md, "Inbox."): the
/// poison event nested 125 deep, a repeated key, a repeated `type`, a number written `1E5`.
/// The server must keep each as its exact text: a [`RAW_TYPE`] event whose data is
/// `{"content_type": "application/json", "text": body}`.
pub fn lossy_body(kind: usize, marker: &str) -> String {
    match kind % LOSSY_BODIES {
        0 => format!("{}\"{marker}\"{}", "[".repeat(125), "]".repeat(125)),
        1 => format!(r#"{{"a":1,"a":2,"marker":"{marker}"}}"#),
        2 => format!(r#"{{"type":"x","type":"y","marker":"{marker}"}}"#),
        _ => format!(r#"{{"n":1E5,"marker":"{marker}"}}"#),
    }
}

/// The `type` of the checker's timers' events (docs/API.md §20).
pub const TIMER_TYPE: &str = "timer.check";

/// Which part of the run issued a request.
/// The `types` of the filtered consumers' polls (docs/API.md §21).
pub const FILTER: &str = "state.*";

/// Whether an event of `event_type` matches [`FILTER`]: `*` stands for one or more
/// dot-separated segments, whatever they hold.
pub fn filter_matches(event_type: &str) -> bool {
    event_type.starts_with("state.")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Creating the addresses and reading the server's limits.
    Setup,
    /// The concurrent random mix (and the consumers running alongside it).
    Workload,
    /// Consumers reading the rest of the feed after writes to their address stopped.
    Drain,
    /// The read-back after everything stopped: usage, state list, every key.
    Final,
}

/// One request the checker issued (what it asked, not what came back).
#[derive(Debug, Clone, PartialEq)]
pub enum OpKind {
    /// `POST /api/v1/addresses`.
    Create,
    /// `GET {root}`.
    Inspect,
    /// `GET {state_url}`.
    ListState,
    /// `GET {state_url}/{key}`.
    ReadKey { key: String },
    /// `PUT {state_url}/{key}` with `{"value", "if_revision"?}` (or `If-Match`).
    Put {
        key: String,
        value: Value,
        if_revision: Option<u64>,
    },
    /// `DELETE {state_url}/{key}` with `If-Match` or `?if_revision=`.
    Delete { key: String, if_revision: u64 },
    /// `POST {inbox_url}` of `{"type": DELIVERY_TYPE, "data": data}`, with an optional
    /// Idempotency-Key. `data.marker` names the logical delivery (retries share it);
    /// `other_body` marks a deliberate reuse of a key with a different body (expects 422).
    Deliver {
        idempotency_key: Option<String>,
        data: Value,
        other_body: bool,
    },
    /// `POST {inbox_url}` of `body` (a [`lossy_body`]) as `application/json`, with an
    /// Idempotency-Key (retries share it and the body).
    DeliverRaw {
        idempotency_key: String,
        body: String,
    },
    /// `POST /api/v1/email/inbound?rcpt={email}` (the raw-MIME webhook door) of a message
    /// whose `Message-ID` and `Subject` carry `marker` (retries send the same bytes).
    Email { marker: String },
    /// `GET {events_url}?after=..&wait=..&limit=..` by consumer `consumer`; `filtered`: with
    /// `types=` [`FILTER`] (docs/API.md §21).
    Poll {
        consumer: usize,
        after: u64,
        limit: u64,
        wait: f64,
        filtered: bool,
    },
    /// `GET {events_url}/{event_id}`.
    ReadEvent { event_id: String },
    /// `POST {events_url}/{event_id}/ack`.
    Ack { event_id: String },
    /// `POST {root}/timers` of `{"in_seconds", "type": TIMER_TYPE, "data": {"marker"}}` with
    /// the marker as its Idempotency-Key (retries share both): docs/API.md §20.
    SetTimer { marker: String, in_seconds: u64 },
    /// `DELETE {root}/timers/{timer_id}`.
    CancelTimer { timer_id: String },
}

impl OpKind {
    /// A short name for summaries.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Inspect => "inspect",
            Self::ListState => "list_state",
            Self::ReadKey { .. } => "read_key",
            Self::Put {
                key, if_revision, ..
            } => match (key.starts_with(COUNTER_PREFIX), if_revision) {
                (true, _) => "put_cas_increment",
                (false, None) => "put_unconditional",
                (false, Some(0)) => "put_create_only",
                (false, Some(_)) => "put_conditional",
            },
            Self::Delete { .. } => "delete_conditional",
            Self::Deliver {
                idempotency_key,
                other_body,
                ..
            } => match (idempotency_key.is_some(), other_body) {
                (_, true) => "deliver_other_body",
                (true, false) => "deliver_idempotent",
                (false, false) => "deliver_plain",
            },
            Self::DeliverRaw { .. } => "deliver_lossy",
            Self::Email { .. } => "email",
            Self::Poll { .. } => "poll",
            Self::ReadEvent { .. } => "read_event",
            Self::Ack { .. } => "ack",
            Self::SetTimer { .. } => "set_timer",
            Self::CancelTimer { .. } => "cancel_timer",
        }
    }

    /// Whether this request may change what the server stores.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Self::Put { .. }
                | Self::Delete { .. }
                | Self::Deliver { .. }
                | Self::DeliverRaw { .. }
                | Self::Email { .. }
                | Self::Ack { .. }
                | Self::SetTimer { .. }
                | Self::CancelTimer { .. }
        )
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A complete HTTP answer. `body` is the parsed JSON, or `Value::Null` with `json: false`
    /// when the body was not JSON (then `raw` keeps its start).
    Answer {
        status: u16,
        body: Value,
        json: bool,
        raw: String,
        content_type: Option<String>,
        retry_after: Option<String>,
    },
    /// No complete answer: connection refused or reset, timeout, a cut body.
    Transport(String),
}

impl Outcome {
    /// An answer with a JSON body (for tests and tools).
    pub fn json(status: u16, body: Value) -> Self {
        let retry_after = match status {
            429 => body["error"]["retry_after_seconds"]
                .as_u64()
                .map(|s| s.to_string()),
            503 => Some("1".into()),
            _ => None,
        };
        Self::Answer {
            status,
            body,
            json: true,
            raw: String::new(),
            content_type: Some("application/json; charset=utf-8".into()),
            retry_after,
        }
    }

    /// The HTTP status, or `None` for a transport failure.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Answer { status, .. } => Some(*status),
            Self::Transport(_) => None,
        }
    }

    /// The JSON body (`Value::Null` for a transport failure).
    pub fn body(&self) -> &Value {
        static NULL: Value = Value::Null;
        match self {
            Self::Answer { body, .. } => body,
            Self::Transport(_) => &NULL,
        }
    }

    /// `error.code` of an error answer, or `""`.
    pub fn code(&self) -> &str {
        self.body()["error"]["code"].as_str().unwrap_or("")
    }

    /// The answer is `status` (a 2xx etc.).
    pub fn is(&self, status: u16) -> bool {
        self.status() == Some(status)
    }

    /// The outcome of a write is unknown: no answer, or 503 (`unavailable` says "outcome
    /// unknown"; a 503 from something else in front of the server says nothing either). The
    /// write may or may not have been applied.
    ///
    /// A 5xx that is not agentaddress's own error envelope (a gateway in front of the server —
    /// API Gateway's 502/504, cargo-lambda's emulator's 500 — answered instead of it) is the
    /// same: the server's outcome is unknown. The histograms still show it, and the summary
    /// counts it; a 5xx from agentaddress itself other than 503 is an anomaly.
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Self::Transport(_)) || self.is(503) || self.is_gateway_error()
    }

    /// A 5xx answered by something in front of the server, not by agentaddress (no
    /// `{"error": {"code", "message"}}` body).
    pub fn is_gateway_error(&self) -> bool {
        self.status().is_some_and(|s| s >= 500)
            && (self.code().is_empty() || self.body()["error"]["message"].as_str().is_none())
    }

    /// Label for histograms: `200`, `409 revision_conflict`, `transport`.
    pub fn label(&self) -> String {
        match self {
            Self::Transport(_) => "transport".into(),
            Self::Answer { status, .. } => {
                let code = self.code();
                if *status >= 400 && !code.is_empty() {
                    format!("{status} {code}")
                } else {
                    status.to_string()
                }
            }
        }
    }
}

/// One request and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// Who issued it: `w3` (workload client 3), `c5` (consumer 5), `setup`, `final`.
    pub client: String,
    pub phase: Phase,
    /// Index into [`History::addresses`]; `None` for a creation.
    pub address: Option<usize>,
    pub kind: OpKind,
    /// Microseconds since the run started, when the request was sent and when its outcome was
    /// known. `a.end_us < b.start_us` means `a` was answered before `b` was sent.
    pub start_us: u64,
    pub end_us: u64,
    pub outcome: Outcome,
}

/// Everything the run did, in completion order (each client's requests in its own order).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// The server's `limits` as `GET {root}` reported them.
    pub limits: Value,
    /// The address ids the checker created and uses, by index.
    pub addresses: Vec<String>,
    pub ops: Vec<Op>,
    /// The wakes the checker's receiver answered (docs/API.md §19), when the run checked them
    /// (`Config::wakes`): every address had a hook for [`DELIVERY_TYPE`] pointing at it.
    pub wakes: Option<Vec<WakeSeen>>,
}

/// A wake the checker's receiver was sent and answered 204.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeSeen {
    pub address_id: String,
    pub webhook_id: String,
    /// Its range of the feed, `from_sequence..=to_sequence`.
    pub from: u64,
    pub to: u64,
    /// Whether its Standard Webhooks signature verified with the hook's secret.
    pub signed: bool,
}

/// A contradiction found by [`super::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    /// What kind of invariant broke (`lost_update`, `consumer_gap`, `server_error`, …).
    pub kind: &'static str,
    /// The address (index into [`History::addresses`]), when it is about one.
    pub address: Option<usize>,
    /// The op (index into [`History::ops`]), when one request shows it.
    pub op: Option<usize>,
    pub detail: String,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(a) = self.address {
            write!(f, " [address #{a}]")?;
        }
        if let Some(o) = self.op {
            write!(f, " [op #{o}]")?;
        }
        write!(f, ": {}", self.detail)
    }
}
