//! Wake hooks (docs/API.md §19): the rules of a hook as the API accepts it (its URL, type
//! patterns, headers, format, debounce), which addresses a wake may be sent to, what a wake
//! says and how it is signed, and how a receiver's answer is read (delivered, retried when,
//! or failed for good). Pure code: the sender (`agentaddress-outbound`) resolves, connects and
//! sends; the stores keep the hooks and their cursors.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::rngs::OsRng;
use rand::RngCore;
use serde_json::{json, Map, Value};

use super::ids::random_b64;
use super::patterns::matches_any;
pub use super::patterns::TypePatterns;
use super::time::format_rfc3339;
use super::verification::standard_webhooks_headers;
use super::{Invalid, Millis};

/// Most hooks an address may have.
pub const MAX_HOOKS_PER_ADDRESS: usize = 5;
/// Most extra headers a hook sends.
pub const MAX_HEADERS: usize = 5;
/// Longest value of an extra header, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 1024;
/// Longest debounce between two wakes of one hook.
pub const MAX_DEBOUNCE_SECONDS: u64 = 3600;
/// Most events a wake lists (the woken run reads the rest from the feed).
pub const MAX_WAKE_EVENTS: usize = 100;
/// How long a receiver has to answer a wake, connection included.
pub const WAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a receiver's answer that are read.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// When a wake that could not be delivered is tried again, after the first try and each retry.
pub const RETRY_SCHEDULE: [u64; 6] = [10, 60, 300, 1_800, 7_200, 21_600];
/// Longest `Retry-After` honoured, in seconds.
pub const MAX_RETRY_AFTER_SECONDS: u64 = 21_600;
/// Consecutive failed ranges after which a hook is disabled.
pub const FAILED_RANGES_TO_DISABLE: u32 = 3;
/// Event types that never wake (a hook's own reports).
pub const NEVER_WAKES_PREFIX: &str = "hook.";
/// The prefix of hook ids.
pub const HOOK_ID_PREFIX: &str = "hk_";

/// A new hook id: `hk_` and 96 random bits.
pub fn new_hook_id() -> String {
    format!("{HOOK_ID_PREFIX}{}", random_b64(12))
}

/// Whether `id` has the shape of a hook id: `hk_` and an id's characters (docs/API.md §19).
pub fn is_hook_id(id: &str) -> bool {
    id.starts_with(HOOK_ID_PREFIX) && super::ids::is_valid_id(id)
}

/// A new signing secret: `whsec_` and the base64 of 32 random bytes from the OS (Standard
/// Webhooks' form; shown once, docs/API.md §19).
pub fn new_signing_secret() -> String {
    let mut key = [0u8; 32];
    OsRng.fill_bytes(&mut key);
    format!("whsec_{}", STANDARD.encode(key))
}

impl TypePatterns {
    /// Whether an event of `event_type` wakes a hook with these patterns: it matches, and it
    /// is not a hook's own report (`hook.*` never wakes).
    pub fn wakes(&self, event_type: &str) -> bool {
        wakes_for(self.as_slice(), event_type)
    }
}

/// [`TypePatterns::wakes`] of stored patterns (an address's hook types, read with it by an
/// append).
pub fn wakes_for(patterns: &[String], event_type: &str) -> bool {
    !patterns.is_empty()
        && !event_type.starts_with(NEVER_WAKES_PREFIX)
        && matches_any(patterns, event_type)
}

/// What a wake looks like on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookFormat {
    /// The wake object itself (Standard Webhooks).
    #[default]
    Standard,
    /// GitHub's `repository_dispatch`: `{"event_type", "client_payload": <the wake>}`.
    GithubDispatch,
    /// A Slack incoming webhook: `{"text"}`.
    Slack,
}

impl HookFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::GithubDispatch => "github-dispatch",
            Self::Slack => "slack",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Standard, Self::GithubDispatch, Self::Slack]
            .into_iter()
            .find(|f| f.as_str() == s)
    }
}

/// A debounce in seconds, 0 to [`MAX_DEBOUNCE_SECONDS`].
pub fn debounce_rule(seconds: u64) -> Result<u64, Invalid> {
    if seconds > MAX_DEBOUNCE_SECONDS {
        return Err(Invalid::new(format!(
            "`debounce_seconds` is {seconds}; at most {MAX_DEBOUNCE_SECONDS} is allowed."
        )));
    }
    Ok(seconds)
}

/// A hook as asked for (docs/API.md §19: the body of `POST {root}/hooks`, an entry of the
/// create body's `hooks`), every field checked but the addresses its URL's host resolves to,
/// which the sender checks (`HookCaller::check`, 400 `invalid_hook_url`).
#[derive(Clone, PartialEq, Eq)]
pub struct HookSpec {
    pub url: String,
    pub types: TypePatterns,
    pub format: HookFormat,
    /// Lower-cased names; values never shown again.
    pub headers: Vec<(String, String)>,
    pub debounce_seconds: u64,
}

impl std::fmt::Debug for HookSpec {
    /// Without the header values (a token, often) or the URL's path and query (a Slack
    /// webhook's secret).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookSpec")
            .field("types", &self.types)
            .field("format", &self.format)
            .field(
                "header_names",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("debounce_seconds", &self.debounce_seconds)
            .finish_non_exhaustive()
    }
}

impl HookSpec {
    /// Reads a hook object: `url` (required, a string of at most [`MAX_URL_BYTES`] bytes;
    /// its rules are [`check_hook_url`]'s), `types` (default `["*"]`), `format` (default
    /// `standard`), `headers`, `debounce_seconds` (default 0), checked in that order; `null`
    /// is absent, unknown members are ignored.
    pub fn from_json(value: &Value) -> Result<Self, Invalid> {
        let Some(object) = value.as_object() else {
            return Err(Invalid::new(
                "A hook must be a JSON object: {\"url\", \"types\"?, \"format\"?, \"headers\"?, \"debounce_seconds\"?}.",
            ));
        };
        let present = |name: &str| object.get(name).filter(|v| !v.is_null());
        let url = match present("url") {
            None => {
                return Err(Invalid::new(
                    "A hook must have a `url` field (an https:// URL).",
                ))
            }
            Some(Value::String(u)) if u.len() <= MAX_URL_BYTES => u.clone(),
            Some(Value::String(_)) => {
                return Err(Invalid::new(format!(
                    "`url` is longer than {MAX_URL_BYTES} bytes."
                )))
            }
            Some(_) => return Err(Invalid::new("`url` must be a string (an https:// URL).")),
        };
        let types = match present("types") {
            None => TypePatterns::default(),
            Some(Value::Array(items)) => {
                let mut patterns = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str() {
                        Some(p) => patterns.push(p.to_owned()),
                        None => {
                            return Err(Invalid::new(
                                "`types` must be an array of strings (event types or patterns such as `email.*`).",
                            ))
                        }
                    }
                }
                TypePatterns::parse(&patterns)?
            }
            Some(_) => return Err(Invalid::new(
                "`types` must be an array of strings (event types or patterns such as `email.*`).",
            )),
        };
        let format = match present("format") {
            None => HookFormat::default(),
            Some(Value::String(f)) => HookFormat::parse(f).ok_or_else(|| {
                Invalid::new("`format` must be \"standard\", \"github-dispatch\" or \"slack\".")
            })?,
            Some(_) => {
                return Err(Invalid::new(
                    "`format` must be \"standard\", \"github-dispatch\" or \"slack\".",
                ))
            }
        };
        let headers = match present("headers") {
            None => Vec::new(),
            Some(Value::Object(h)) => check_headers(h)?,
            Some(_) => {
                return Err(Invalid::new(
                    "`headers` must be an object of header names and string values.",
                ))
            }
        };
        let debounce_seconds = match present("debounce_seconds") {
            None => 0,
            Some(v) => match v.as_u64() {
                Some(n) => debounce_rule(n)?,
                None => {
                    return Err(Invalid::new(format!(
                    "`debounce_seconds` must be a whole number from 0 to {MAX_DEBOUNCE_SECONDS}."
                )))
                }
            },
        };
        Ok(Self {
            url,
            types,
            format,
            headers,
            debounce_seconds,
        })
    }
}

/// Why a hook's URL is refused (`invalid_hook_url`, docs/API.md §19): the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookUrlRefused(pub String);

/// The longest hook URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Checks a hook URL before any name is resolved: `https://` (or `http://` when private
/// receivers are allowed), a host, no userinfo, no fragment, and, where the host is an IP
/// address, a public one (unless allowed). The sender checks every address a name resolves to
/// with [`is_public`] again at each send.
pub fn check_hook_url(raw: &str, allow_private: bool) -> Result<url::Url, HookUrlRefused> {
    let refuse = |why: &str| Err(HookUrlRefused(format!("The hook URL is refused: {why}")));
    if raw.len() > MAX_URL_BYTES {
        return refuse(&format!("it is longer than {MAX_URL_BYTES} bytes."));
    }
    let Ok(url) = url::Url::parse(raw) else {
        return refuse("it is not an absolute URL.");
    };
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => return refuse("only `https://` URLs are allowed."),
        _ => return refuse("only `https://` URLs are allowed."),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return refuse("it has a user name or password; send credentials in `headers`.");
    }
    if url.fragment().is_some() {
        return refuse("it has a fragment (`#…`).");
    }
    let ip = match url.host() {
        None => return refuse("it has no host."),
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name == "localhost" || name.ends_with(".localhost") {
                Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
            } else {
                None
            }
        }
    };
    if let Some(ip) = ip {
        if !allow_private && !is_public(ip) {
            return refuse(&format!(
                "its host is {ip}, which is not a public address (loopback, private, link-local, shared, multicast and reserved ranges are refused)."
            ));
        }
    }
    Ok(url)
}

/// Whether a wake may be sent to `ip`: a public unicast address (the special-purpose registries
/// of RFC 6890 and its updates: loopback, private, shared CGNAT, link-local — the cloud metadata
/// address 169.254.169.254 among them —, documentation, benchmarking, multicast, reserved,
/// unique-local, and the IPv6 forms that embed an IPv4 address, judged by that address).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0 // "this network"
        || a == 10 // private
        || (a == 100 && (64..=127).contains(&b)) // shared address space (CGNAT)
        || a == 127 // loopback
        || (a == 169 && b == 254) // link-local (cloud metadata)
        || (a == 172 && (16..=31).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // documentation (TEST-NET-1)
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 192 && b == 168) // private
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // documentation (TEST-NET-2)
        || (a == 203 && b == 0 && c == 113) // documentation (TEST-NET-3)
        || a >= 224; // multicast, reserved, broadcast
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // Forms that carry an IPv4 address are judged by it.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] {
        // Unspecified, loopback and the deprecated IPv4-compatible form.
        return false;
    }
    if s[0] == 0x0064 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        // NAT64 (64:ff9b::/96): the embedded IPv4 address.
        return is_public_v4(Ipv4Addr::new(
            (s[6] >> 8) as u8,
            s[6] as u8,
            (s[7] >> 8) as u8,
            s[7] as u8,
        ));
    }
    if s[0] == 0x2002 {
        // 6to4 (2002::/16): the embedded IPv4 address.
        return is_public_v4(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    let refused = (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64 (64:ff9b:1::/48)
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard (100::/64)
        || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments (2001::/23: Teredo, ORCHID, …)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation (2001:db8::/32)
        || (s[0] == 0x3fff && s[1] < 0x1000) // documentation (3fff::/20)
        || (s[0] & 0xfe00) == 0xfc00 // unique-local (fc00::/7)
        || (s[0] & 0xffc0) == 0xfe80 // link-local (fe80::/10)
        || (s[0] & 0xffc0) == 0xfec0 // site-local, deprecated (fec0::/10)
        || (s[0] & 0xff00) == 0xff00; // multicast
    !refused
}

/// Header names a hook may not set: the ones the sender owns.
const OWNED_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
];

/// Checks a hook's extra `headers` (a JSON object): at most [`MAX_HEADERS`], each name an HTTP
/// token that is none of the sender's own (`host`, `content-length`, `content-type`,
/// `transfer-encoding`, `connection`, `webhook-*`), each value a string of at most
/// [`MAX_HEADER_VALUE_BYTES`] bytes without CR, LF or NUL. Names are kept lower-cased.
pub fn check_headers(headers: &Map<String, Value>) -> Result<Vec<(String, String)>, Invalid> {
    if headers.len() > MAX_HEADERS {
        return Err(Invalid::new(format!(
            "`headers` has {} entries; at most {MAX_HEADERS} are allowed.",
            headers.len()
        )));
    }
    let mut out: Vec<(String, String)> = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let is_token = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !is_token {
            return Err(Invalid::new(format!(
                "The header name {:?} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~, at most 64).",
                truncate(name, 64)
            )));
        }
        let lower = name.to_ascii_lowercase();
        if OWNED_HEADERS.contains(&lower.as_str()) || lower.starts_with("webhook-") {
            return Err(Invalid::new(format!(
                "The header {name:?} is set by the sender itself and cannot be given."
            )));
        }
        if out.iter().any(|(n, _)| *n == lower) {
            return Err(Invalid::new(format!(
                "The header {name:?} is given twice (names are case-insensitive)."
            )));
        }
        let Some(value) = value.as_str() else {
            return Err(Invalid::new(format!(
                "The header {name:?} must be a string."
            )));
        };
        if value.len() > MAX_HEADER_VALUE_BYTES {
            return Err(Invalid::new(format!(
                "The header {name:?} is longer than {MAX_HEADER_VALUE_BYTES} bytes."
            )));
        }
        if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(Invalid::new(format!(
                "The header {name:?} has a line break or NUL in its value."
            )));
        }
        out.push((lower, value.to_owned()));
    }
    Ok(out)
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// One event a wake lists: no data, only what tells the woken run what to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeEvent {
    pub id: String,
    pub sequence: u64,
    pub event_type: String,
    pub source: Option<String>,
    pub created_at: Millis,
}

/// What one wake covers: the hook's matching events in `(from_sequence - 1, to_sequence]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    pub address_id: String,
    pub task_id: Option<String>,
    pub hook_id: String,
    /// The first sequence the range covers (the hook's `delivered_through` + 1).
    pub from_sequence: u64,
    /// The feed's head when the wake was made: the hook's `delivered_through` once delivered.
    pub to_sequence: u64,
    /// The matching events of the range, at most [`MAX_WAKE_EVENTS`], in sequence order.
    pub events: Vec<WakeEvent>,
    /// `{base}/api/v1/addresses/{id}/events?after={from_sequence - 1}`.
    pub events_url: String,
    /// `Some(sent_at)` for the wake of `POST {root}/hooks/{id}/test`: `type: "hook.test"`, its
    /// own `webhook-id` (`{hook_id}_test_{sent_at}`), and no range delivered by it.
    pub test: Option<Millis>,
}

impl Wake {
    /// The Standard Webhooks message id: `{hook_id}_{to_sequence}`, the same for every try of
    /// one range, so a receiver can drop a repeat.
    pub fn message_id(&self) -> String {
        match self.test {
            Some(at) => format!("{}_test_{at}", self.hook_id),
            None => format!("{}_{}", self.hook_id, self.to_sequence),
        }
    }

    /// The wake object (`type: "address.wake"`).
    pub fn to_json(&self) -> Value {
        json!({
            "type": if self.test.is_some() { "hook.test" } else { "address.wake" },
            "address_id": self.address_id,
            "task_id": self.task_id,
            "hook_id": self.hook_id,
            "from_sequence": self.from_sequence,
            "to_sequence": self.to_sequence,
            "events": self.events.iter().take(MAX_WAKE_EVENTS).map(|e| json!({
                "id": e.id,
                "sequence": e.sequence,
                "type": e.event_type,
                "source": e.source,
                "created_at": format_rfc3339(e.created_at),
            })).collect::<Vec<_>>(),
            "events_url": self.events_url,
        })
    }

    /// The body a hook of `format` sends.
    pub fn body(&self, format: HookFormat) -> Value {
        match format {
            HookFormat::Standard => self.to_json(),
            HookFormat::GithubDispatch => json!({
                "event_type": "agentaddress.wake",
                "client_payload": self.to_json(),
            }),
            HookFormat::Slack => json!({ "text": self.slack_text() }),
        }
    }

    /// A Slack message: the address (and task), the events by type, and where to read them.
    fn slack_text(&self) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for e in &self.events {
            match counts.iter_mut().find(|(t, _)| *t == e.event_type) {
                Some((_, n)) => *n += 1,
                None => counts.push((&e.event_type, 1)),
            }
        }
        let listed: Vec<String> = counts.iter().map(|(t, n)| format!("{n} × {t}")).collect();
        let task = self
            .task_id
            .as_deref()
            .map(|t| format!(" (task {t})"))
            .unwrap_or_default();
        format!(
            "New events for {}{task}: {}. Read them: {}",
            self.address_id,
            if listed.is_empty() {
                "none listed".to_owned()
            } else {
                listed.join(", ")
            },
            self.events_url
        )
    }

    /// The headers that go with `body` (serialized) sent at `timestamp` (Unix seconds), signed
    /// with the hook's `secret`: `content-type`, `user-agent`, the Standard Webhooks headers, and
    /// `accept` for GitHub.
    pub fn headers(
        &self, format: HookFormat, secret: &str, timestamp: i64, body: &[u8],
    ) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("content-type", "application/json".to_owned()),
            (
                "user-agent",
                format!("agentaddress/{}", env!("CARGO_PKG_VERSION")),
            ),
        ];
        if format == HookFormat::GithubDispatch {
            headers.push(("accept", "application/vnd.github+json".to_owned()));
        }
        headers.extend(standard_webhooks_headers(
            secret,
            &self.message_id(),
            timestamp,
            body,
        ));
        headers
    }
}

/// How a try of a wake ended, as read from the receiver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TryOutcome {
    /// 2xx: the range is delivered.
    Delivered,
    /// Worth trying again (a timeout, a network error, 3xx, 408, 429, 5xx), `after` from now
    /// (the schedule's next step, or a `Retry-After` up to six hours); `None`: the schedule is
    /// spent, the range failed.
    Retry { after: Option<Duration> },
    /// Any other 4xx: failed for good.
    Permanent,
}

/// Reads a try's answer: `status` (`None` when no answer came: a timeout, a refused or reset
/// connection, a refused address), its `Retry-After` header, and `retries` — how many retries
/// of this range were already made.
pub fn try_outcome(status: Option<u16>, retry_after: Option<&str>, retries: usize) -> TryOutcome {
    let retryable = match status {
        None => true,
        Some(s) if (200..300).contains(&s) => return TryOutcome::Delivered,
        Some(s) => (300..400).contains(&s) || s == 408 || s == 429 || s >= 500,
    };
    if !retryable {
        return TryOutcome::Permanent;
    }
    let Some(step) = RETRY_SCHEDULE.get(retries) else {
        return TryOutcome::Retry { after: None };
    };
    let asked = retry_after
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s.min(MAX_RETRY_AFTER_SECONDS));
    TryOutcome::Retry {
        after: Some(Duration::from_secs(asked.map_or(*step, |a| a.max(*step)))),
    }
}

#[cfg(test)]
mod tests;
