//! Verified webhooks (docs/API.md §15): an address may hold one signing secret of a webhook
//! provider's scheme, and every delivery to its inbox is checked against it on the exact bytes
//! received. Pure code: parsing and validating the configuration, [`verify`], the providers'
//! handshakes on the inbox URL ([`handshake`], §22) and the event types they name
//! ([`provider_event_type`], §3).
//!
//! Each provider is one file of this module: its headers, its signature rule, its handshake,
//! its implicit idempotency key and its type naming, with the provider's published example as
//! its test (verification/tests.rs).
//!
//! Every parser here is bounded (header length, number of signatures), every comparison of a
//! signature is constant-time (`hmac`'s `verify_slice`), and the secret is never shown: its
//! `Debug` is redacted and no message of this module includes it.

use std::fmt;

use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::Sha256;

use super::{Invalid, Millis};

type HmacSha256 = Hmac<Sha256>;

/// `tolerance_seconds` by default: 5 minutes, as the providers' own libraries use.
pub const TOLERANCE_DEFAULT_SECONDS: u64 = 300;
/// `tolerance_seconds`: at least 1 second.
pub const TOLERANCE_MIN_SECONDS: u64 = 1;
/// `tolerance_seconds`: at most an hour.
pub const TOLERANCE_MAX_SECONDS: u64 = 3600;
/// A Standard Webhooks secret: `whsec_` and the base64 of 24 to 64 bytes (the spec's range).
pub const STANDARD_KEY_MIN_BYTES: usize = 24;
pub const STANDARD_KEY_MAX_BYTES: usize = 64;
/// A Stripe secret: `whsec_` and 8 to 250 ASCII letters, digits and `_`.
pub const STRIPE_SUFFIX_MIN_CHARS: usize = 8;
pub const STRIPE_SUFFIX_MAX_CHARS: usize = 250;
/// A GitHub, Slack, Zoom, Shopify, Meta, Twilio or Linear secret: 1 to 1024 bytes of UTF-8
/// without control characters.
pub const GITHUB_SECRET_MAX_BYTES: usize = 1024;
/// Meta's `verify_token`: 1 to 256 bytes of UTF-8 without control characters.
pub const VERIFY_TOKEN_MAX_BYTES: usize = 256;
/// The longest signature header read (the signature, timestamp and id headers alike); a longer
/// one is a `bad_signature`.
pub const MAX_HEADER_BYTES: usize = 4096;
/// The most signatures one header may carry (Standard Webhooks' space-separated `v1,…`,
/// Stripe's `v1=…` entries); more is a `bad_signature`.
pub const MAX_SIGNATURES: usize = 16;

mod github;
mod handshake;
mod linear;
mod meta;
mod shopify;
mod slack;
mod standard;
mod stripe;
mod twilio;
mod zoom;

pub use handshake::{
    handshake, meta_subscription, Handshake, HandshakeRefusal, MAX_CHALLENGE_CHARS,
};

/// The webhook provider conventions the service verifies (docs/API.md §15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// <https://www.standardwebhooks.com/>: `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature: v1,<base64>` over `{id}.{timestamp}.{body}`.
    StandardWebhooks,
    /// `Stripe-Signature: t=<unix>,v1=<hex>` over `{t}.{body}`.
    Stripe,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body.
    Github,
    /// `X-Slack-Signature: v0=<hex>` over `v0:{ts}:{body}`.
    Slack,
    /// `x-zm-signature: v0=<hex>` over `v0:{ts}:{body}`.
    Zoom,
    /// `X-Shopify-Hmac-Sha256: <base64>` over the body.
    Shopify,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body with the app secret, and a
    /// `verify_token` for the subscription handshake.
    Meta,
    /// `X-Twilio-Signature: <base64 HMAC-SHA1>` over the URL and the sorted form parameters.
    Twilio,
    /// `Linear-Signature: <hex>` over the body, whose `webhookTimestamp` is checked.
    Linear,
}

impl Scheme {
    pub const ALL: [Scheme; 9] = [
        Scheme::StandardWebhooks,
        Scheme::Stripe,
        Scheme::Github,
        Scheme::Slack,
        Scheme::Zoom,
        Scheme::Shopify,
        Scheme::Meta,
        Scheme::Twilio,
        Scheme::Linear,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Stripe => "stripe",
            Scheme::Github => "github",
            Scheme::Slack => "slack",
            Scheme::Zoom => "zoom",
            Scheme::Shopify => "shopify",
            Scheme::Meta => "meta",
            Scheme::Twilio => "twilio",
            Scheme::Linear => "linear",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Whether the scheme signs a timestamp (so `tolerance_seconds` applies): GitHub, Shopify,
    /// Meta and Twilio do not.
    pub fn has_timestamp(self) -> bool {
        !matches!(
            self,
            Scheme::Github | Scheme::Shopify | Scheme::Meta | Scheme::Twilio
        )
    }

    /// The headers of the scheme, recorded with every delivery (docs/API.md §3: the envelope's
    /// `RECORDED_HEADERS` holds them all).
    pub fn headers(self) -> &'static [&'static str] {
        match self {
            Scheme::StandardWebhooks => standard::HEADERS,
            Scheme::Stripe => stripe::HEADERS,
            Scheme::Github => github::HEADERS,
            Scheme::Slack => slack::HEADERS,
            Scheme::Zoom => zoom::HEADERS,
            Scheme::Shopify => shopify::HEADERS,
            Scheme::Meta => meta::HEADERS,
            Scheme::Twilio => twilio::HEADERS,
            Scheme::Linear => linear::HEADERS,
        }
    }
}

/// The list of every scheme's name, for messages.
fn scheme_names() -> String {
    let names: Vec<String> = Scheme::ALL
        .iter()
        .map(|s| format!("\"{}\"", s.as_str()))
        .collect();
    names.join(", ")
}

impl Serialize for Scheme {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A signing secret as given (it must be usable, so it is stored as is). Its `Debug` never
/// shows it, and it is not `Serialize`: only [`VerificationConfig::to_stored`] writes it, for
/// the store.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret(String);

impl SigningSecret {
    /// The secret, for the store and for computing signatures.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(<redacted>)")
    }
}

/// An address's verification: one secret of one scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationConfig {
    pub scheme: Scheme,
    pub secret: SigningSecret,
    /// Refuse an unverified delivery (401 `signature_invalid`) instead of recording it.
    pub reject_unverified: bool,
    pub tolerance_seconds: u64,
    /// `meta` only: the token Meta's subscription handshake must present (docs/API.md §22).
    pub verify_token: Option<SigningSecret>,
}

/// The public view of a [`VerificationConfig`] (`GET {root}`): everything but the secret (and
/// Meta's verify token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct VerificationView {
    /// `standard-webhooks`, `stripe`, `github`, `slack`, `zoom`, `shopify`, `meta`, `twilio`
    /// or `linear`.
    #[schema(value_type = String, example = "standard-webhooks")]
    pub scheme: Scheme,
    pub reject_unverified: bool,
    /// How far a signed timestamp may be from the server's clock. Absent for `github`,
    /// `shopify`, `meta` and `twilio`, whose signatures carry no timestamp (docs/API.md §15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance_seconds: Option<u64>,
}

impl VerificationConfig {
    /// Validates a configuration. The messages name the rule broken (and the field, as in the
    /// body of `PUT {root}/verification`), never the secret.
    pub fn new(
        scheme: &str, secret: &str, reject_unverified: Option<bool>, tolerance_seconds: Option<u64>,
    ) -> Result<Self, Invalid> {
        Self::with_token(scheme, secret, reject_unverified, tolerance_seconds, None)
    }

    /// [`VerificationConfig::new`] with Meta's `verify_token` (required for `meta`, refused for
    /// the other schemes).
    pub fn with_token(
        scheme: &str, secret: &str, reject_unverified: Option<bool>,
        tolerance_seconds: Option<u64>, verify_token: Option<&str>,
    ) -> Result<Self, Invalid> {
        let scheme = Scheme::parse(scheme)
            .ok_or_else(|| Invalid::new(format!("`scheme` must be one of {}.", scheme_names())))?;
        check_secret(scheme, secret).map_err(Invalid::new)?;
        let verify_token = match (scheme, verify_token) {
            (Scheme::Meta, Some(t)) if printable(t, VERIFY_TOKEN_MAX_BYTES) => {
                Some(SigningSecret(t.to_owned()))
            }
            (Scheme::Meta, Some(_)) => {
                return Err(Invalid::new(format!(
                    "`verify_token` must be 1 to {VERIFY_TOKEN_MAX_BYTES} bytes without control characters."
                )))
            }
            (Scheme::Meta, None) => {
                return Err(Invalid::new(
                    "The verification of scheme meta needs a `verify_token`: the token you give Meta for its subscription handshake.",
                ))
            }
            (_, Some(_)) => {
                return Err(Invalid::new(
                    "`verify_token` is only for scheme meta.",
                ))
            }
            (_, None) => None,
        };
        let tolerance_seconds = tolerance_seconds.unwrap_or(TOLERANCE_DEFAULT_SECONDS);
        if !(TOLERANCE_MIN_SECONDS..=TOLERANCE_MAX_SECONDS).contains(&tolerance_seconds) {
            return Err(Invalid::new(format!(
                "`tolerance_seconds` must be an integer from {TOLERANCE_MIN_SECONDS} to {TOLERANCE_MAX_SECONDS}."
            )));
        }
        Ok(Self {
            scheme,
            secret: SigningSecret(secret.to_owned()),
            reject_unverified: reject_unverified.unwrap_or(false),
            tolerance_seconds,
            verify_token,
        })
    }

    /// Parses the JSON object of the create body's `verification` and of `PUT
    /// {root}/verification`: `{"scheme", "secret", "reject_unverified"?, "tolerance_seconds"?,
    /// "verify_token"?}` (`null` for an optional field is absent; unknown fields are ignored).
    pub fn from_json(value: &Value) -> Result<Self, Invalid> {
        let Some(object) = value.as_object() else {
            return Err(Invalid::new("The verification must be a JSON object."));
        };
        let field = |name: &str| object.get(name).filter(|v| !v.is_null());
        let scheme = match field("scheme") {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(Invalid::new("`scheme` must be a string.")),
            None => return Err(Invalid::new("The verification must have a `scheme` field.")),
        };
        let secret = match field("secret") {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(Invalid::new("`secret` must be a string.")),
            None => return Err(Invalid::new("The verification must have a `secret` field.")),
        };
        let reject = match field("reject_unverified") {
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(Invalid::new("`reject_unverified` must be true or false.")),
            None => None,
        };
        let tolerance = match field("tolerance_seconds") {
            None => None,
            Some(v) => Some(integral(v).ok_or_else(|| {
                Invalid::new(format!(
                    "`tolerance_seconds` must be an integer from {TOLERANCE_MIN_SECONDS} to {TOLERANCE_MAX_SECONDS}."
                ))
            })?),
        };
        let verify_token = match field("verify_token") {
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err(Invalid::new("`verify_token` must be a string.")),
            None => None,
        };
        Self::with_token(scheme, secret, reject, tolerance, verify_token)
    }

    pub fn view(&self) -> VerificationView {
        VerificationView {
            scheme: self.scheme,
            reject_unverified: self.reject_unverified,
            tolerance_seconds: self
                .scheme
                .has_timestamp()
                .then_some(self.tolerance_seconds),
        }
    }

    /// The stored form (secret included): compact JSON, the same in both stores.
    pub fn to_stored(&self) -> String {
        let mut v = json!({
            "scheme": self.scheme.as_str(),
            "secret": self.secret.expose(),
            "reject_unverified": self.reject_unverified,
            "tolerance_seconds": self.tolerance_seconds,
        });
        if let (Some(t), Some(o)) = (&self.verify_token, v.as_object_mut()) {
            o.insert("verify_token".into(), Value::String(t.expose().to_owned()));
        }
        v.to_string()
    }

    /// Reads [`VerificationConfig::to_stored`]'s form back (`None` when it does not parse: a
    /// corrupted record, which the stores report as an internal error).
    pub fn from_stored(stored: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(stored).ok()?;
        Self::from_json(&value).ok()
    }
}

/// A JSON number with an integral, non-negative value (`300` and `300.0` alike, docs/API.md §1).
fn integral(v: &Value) -> Option<u64> {
    if let Some(n) = v.as_u64() {
        return Some(n);
    }
    let f = v.as_f64()?;
    (f.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&f)).then_some(f as u64)
}

/// 1 to `max` bytes without control characters.
fn printable(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control)
}

fn check_secret(scheme: Scheme, secret: &str) -> Result<(), String> {
    match scheme {
        Scheme::StandardWebhooks => standard::check_secret(secret),
        Scheme::Stripe => stripe::check_secret(secret),
        _ if printable(secret, GITHUB_SECRET_MAX_BYTES) => Ok(()),
        _ => Err(format!(
            "`secret` for {} must be 1 to {GITHUB_SECRET_MAX_BYTES} bytes without control characters.",
            scheme.as_str()
        )),
    }
}

/// The headers a Standard Webhooks sender adds to `body` (message `id`, `timestamp` in Unix
/// seconds) signed with `secret` (`whsec_…`): `webhook-id`, `webhook-timestamp` and
/// `webhook-signature` (`v1,` and the base64 of the MAC). Empty for a secret that is not one.
pub fn standard_webhooks_headers(
    secret: &str, id: &str, timestamp: i64, body: &[u8],
) -> Vec<(&'static str, String)> {
    standard::sign(secret, id, timestamp, body)
}

/// Why a delivery did not verify.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A header the scheme needs is absent.
    MissingSignature,
    /// The signature does not match, or a header is malformed, repeated or too long.
    BadSignature,
    /// The signature matches, but its timestamp is further than `tolerance_seconds` from now.
    TimestampOutOfTolerance,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MissingSignature => "missing_signature",
            Reason::BadSignature => "bad_signature",
            Reason::TimestampOutOfTolerance => "timestamp_out_of_tolerance",
        }
    }
}

/// The outcome of [`verify`]: what the event records, and the provider's delivery id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub scheme: Scheme,
    /// `None` when verified.
    pub reason: Option<Reason>,
    /// The provider's delivery id (`webhook-id`, `X-GitHub-Delivery`, the Stripe event's `id`)
    /// when the delivery verified and it has one that is a valid idempotency key (1 to 255
    /// printable ASCII characters): its implicit `Idempotency-Key`.
    pub delivery_id: Option<String>,
}

impl Verification {
    pub fn verified(&self) -> bool {
        self.reason.is_none()
    }

    /// The event's `verification` record: `{"scheme", "verified", "reason"?}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"scheme": self.scheme.as_str(), "verified": self.verified()});
        if let (Some(reason), Some(o)) = (self.reason, v.as_object_mut()) {
            o.insert("reason".into(), Value::String(reason.as_str().into()));
        }
        v
    }
}

/// The value of header `name` (lower case) among `headers`: `Err(Missing)` when absent,
/// `Err(Bad)` when repeated, too long or not visible ASCII and spaces.
fn one_header<'a>(headers: &[(&str, &'a [u8])], name: &str) -> Result<&'a str, Reason> {
    let mut found = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v);
    let value = found.next().ok_or(Reason::MissingSignature)?;
    if found.next().is_some() || value.len() > MAX_HEADER_BYTES {
        return Err(Reason::BadSignature);
    }
    if !value.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(Reason::BadSignature);
    }
    std::str::from_utf8(value)
        .map(str::trim)
        .map_err(|_| Reason::BadSignature)
}

/// A valid idempotency key (the rule of `Idempotency-Key`, docs/API.md §3).
fn as_key(s: &str) -> Option<String> {
    (!s.is_empty() && s.len() <= 255 && s.bytes().all(|b| (0x20..=0x7e).contains(&b)))
        .then(|| s.to_owned())
}

fn unix_seconds(s: &str) -> Result<i64, Reason> {
    if s.is_empty() || s.len() > 18 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reason::BadSignature);
    }
    s.parse().map_err(|_| Reason::BadSignature)
}

fn within(timestamp: i64, tolerance: u64, now: Millis) -> bool {
    let now_s = now.div_euclid(1000);
    now_s.abs_diff(timestamp) <= tolerance
}

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

/// A delivery as received, for [`verify_signed`].
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    /// (name, value) as received.
    pub headers: &'a [(&'a str, &'a [u8])],
    /// The exact bytes received.
    pub body: &'a [u8],
    /// The URL the sender was given, with the query as received: the address's public inbox
    /// URL. Only `twilio` signs it; without it, a Twilio signature never verifies.
    pub url: Option<&'a str>,
    pub now: Millis,
}

/// Verifies a delivery of `body` (the exact bytes received) with `headers` (name, value as
/// received) against `config`, at `now`, without its URL (see [`verify_signed`]).
pub fn verify(
    config: &VerificationConfig, headers: &[(&str, &[u8])], body: &[u8], now: Millis,
) -> Verification {
    verify_signed(
        config,
        &Signed {
            headers,
            body,
            url: None,
            now,
        },
    )
}

/// Verifies a delivery against `config`.
pub fn verify_signed(config: &VerificationConfig, d: &Signed<'_>) -> Verification {
    let result = match config.scheme {
        Scheme::StandardWebhooks => standard::verify(config, d),
        Scheme::Stripe => stripe::verify(config, d),
        Scheme::Github => github::verify(config, d),
        Scheme::Slack => slack::verify(config, d),
        Scheme::Zoom => zoom::verify(config, d),
        Scheme::Shopify => shopify::verify(config, d),
        Scheme::Meta => meta::verify(config, d),
        Scheme::Twilio => twilio::verify(config, d),
        Scheme::Linear => linear::verify(config, d),
    };
    match result {
        Ok(delivery_id) => Verification {
            scheme: config.scheme,
            reason: None,
            delivery_id,
        },
        Err(reason) => Verification {
            scheme: config.scheme,
            reason: Some(reason),
            delivery_id: None,
        },
    }
}

type Checked = Result<Option<String>, Reason>;

/// The hex HMAC-SHA256 of `body` keyed by `secret`.
fn body_mac(secret: &str, body: &[u8]) -> String {
    let mut m = mac(secret.as_bytes());
    m.update(body);
    hex::encode(m.finalize().into_bytes())
}

/// Checks header `name`, `prefix` then the hex HMAC-SHA256 of the body (GitHub, Meta, Linear).
fn hex_signature(
    config: &VerificationConfig, d: &Signed<'_>, name: &str, prefix: &str,
) -> Result<(), Reason> {
    let header = one_header(d.headers, name)?;
    let sig = header
        .strip_prefix(prefix)
        .and_then(|h| hex::decode(h).ok())
        .ok_or(Reason::BadSignature)?;
    let mut m = mac(config.secret.expose().as_bytes());
    m.update(d.body);
    m.verify_slice(&sig).map_err(|_| Reason::BadSignature)
}

/// Slack's and Zoom's rule: `v0=<hex>` HMAC-SHA256 of `v0:{timestamp}:{body}`, the timestamp
/// in Unix seconds in a header of its own.
mod timed_hex {
    use super::*;

    fn base(secret: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        let mut m = mac(secret.as_bytes());
        m.update(b"v0:");
        m.update(timestamp.as_bytes());
        m.update(b":");
        m.update(body);
        m
    }

    pub(super) fn verify(
        config: &VerificationConfig, d: &Signed<'_>, signature: &str, timestamp: &str,
    ) -> Result<(), Reason> {
        let sig = one_header(d.headers, signature)?;
        let ts = one_header(d.headers, timestamp)?;
        let t = unix_seconds(ts)?;
        let sig = sig
            .strip_prefix("v0=")
            .and_then(|h| hex::decode(h).ok())
            .ok_or(Reason::BadSignature)?;
        base(config.secret.expose(), ts, d.body)
            .verify_slice(&sig)
            .map_err(|_| Reason::BadSignature)?;
        if !within(t, config.tolerance_seconds, d.now) {
            return Err(Reason::TimestampOutOfTolerance);
        }
        Ok(())
    }

    pub(super) fn sign(
        secret: &str, timestamp: i64, body: &[u8], signature: &'static str,
        timestamp_header: &'static str,
    ) -> Vec<(&'static str, String)> {
        let ts = timestamp.to_string();
        let sig = hex::encode(base(secret, &ts, body).finalize().into_bytes());
        vec![(signature, format!("v0={sig}")), (timestamp_header, ts)]
    }
}

/// Signs like the providers do, for tests and tools: the header(s) a provider would send for
/// `body` at `timestamp` (Unix seconds) with `id` as its delivery id. A Twilio signature needs
/// the URL: see [`sign_for_url`].
pub fn sign(
    config: &VerificationConfig, id: &str, timestamp: i64, body: &[u8],
) -> Vec<(&'static str, String)> {
    sign_for_url(config, id, timestamp, body, "")
}

/// [`sign`] for a delivery to `url` (what Twilio signs; the other schemes ignore it).
pub fn sign_for_url(
    config: &VerificationConfig, id: &str, timestamp: i64, body: &[u8], url: &str,
) -> Vec<(&'static str, String)> {
    let secret = config.secret.expose();
    match config.scheme {
        Scheme::StandardWebhooks => standard::sign(secret, id, timestamp, body),
        Scheme::Stripe => stripe::sign(secret, timestamp, body),
        Scheme::Github => github::sign(secret, id, body),
        Scheme::Slack => slack::sign(secret, timestamp, body),
        Scheme::Zoom => zoom::sign(secret, timestamp, body),
        Scheme::Shopify => shopify::sign(secret, id, body),
        Scheme::Meta => meta::sign(secret, body),
        Scheme::Twilio => twilio::sign(secret, id, url, body),
        Scheme::Linear => linear::sign(secret, id, body),
    }
}

/// The longest provider-given name kept in an event type (`github.{X-GitHub-Event}`, …).
const MAX_PROVIDER_NAME_CHARS: usize = 100;

/// `{provider}.{name}` when `name` is a usable type segment: 1 to 100 characters that a type
/// pattern can name (letters, digits, `_ - : / .`, docs/API.md §21).
fn provider_type(provider: &str, name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_PROVIDER_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'/' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..");
    ok.then(|| format!("{provider}.{name}"))
}

/// `{provider}.{value of header name}`, when the header is there once and usable.
fn named_by_header(headers: &[(&str, &str)], name: &str, provider: &str) -> Option<String> {
    let mut values = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim());
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    provider_type(provider, value)
}

fn has_any(headers: &[(&str, &str)], names: &[&str]) -> bool {
    headers
        .iter()
        .any(|(n, _)| names.iter().any(|m| n.eq_ignore_ascii_case(m)))
}

/// The event type a provider gives a delivery that is not an envelope (docs/API.md §3, §22):
/// `github.{X-GitHub-Event}`, `shopify.{X-Shopify-Topic}`, a Slack event callback's
/// `slack.{event.type}`, a Zoom body's `zoom.{event}`, a Linear body's `linear.{type}` — each
/// only with that provider's own headers, whether or not the address verifies it. `None`: the
/// envelope rule's type stands.
pub fn provider_event_type(
    headers: &[(&str, &str)], body: Option<&Map<String, Value>>,
) -> Option<String> {
    github::event_type(headers)
        .or_else(|| shopify::event_type(headers))
        .or_else(|| {
            let body = body?;
            slack::event_type(headers, body)
                .or_else(|| zoom::event_type(headers, body))
                .or_else(|| linear::event_type(headers, body))
        })
}

#[cfg(test)]
mod tests;
