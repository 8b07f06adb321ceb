//! Providers' handshakes on the inbox URL (docs/API.md §22): a sender proving the URL is
//! answered, never appended. Slack's `url_verification`, Microsoft Graph's `validationToken`,
//! Zoom's `endpoint.url_validation` (POSTs) and Meta's subscription (the one GET the inbox URL
//! answers). When the address verifies that provider, the handshake must verify too.
//!
//! A challenge is echoed only as JSON or `text/plain`, never into HTML or a header, and is at
//! most [`MAX_CHALLENGE_CHARS`] characters.

use serde_json::{json, Map, Value};
use subtle::ConstantTimeEq;

use super::super::envelope::{nesting_exceeds, MAX_JSON_DEPTH};
use super::super::ids::sha256_hex;
use super::{slack, zoom, Reason, Scheme, Signed, VerificationConfig};

/// The longest challenge (or token) echoed; a longer one is a 400.
pub const MAX_CHALLENGE_CHARS: usize = 1024;
/// The largest body read as a possible handshake: a larger one is a delivery.
const MAX_HANDSHAKE_BODY_BYTES: usize = 16 * 1024;

/// A handshake's answer (200).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handshake {
    /// `application/json`: Slack's `{"challenge"}`, Zoom's `{"plainToken", "encryptedToken"}`.
    Json(Value),
    /// `text/plain`: Microsoft Graph's token, Meta's challenge.
    Text(String),
}

/// Why a handshake is not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeRefusal {
    /// 400 `invalid_request`: a malformed or oversized handshake, or one the address cannot
    /// answer (Zoom's, at an address that does not verify `zoom`).
    Invalid(String),
    /// 401 `signature_invalid`: the address verifies this provider and the handshake did not
    /// verify.
    Unverified(Reason),
    /// 403 `forbidden`: Meta's verify token is not the address's (or the address has none).
    Forbidden,
}

fn invalid(message: impl Into<String>) -> HandshakeRefusal {
    HandshakeRefusal::Invalid(message.into())
}

/// A challenge of 1 to [`MAX_CHALLENGE_CHARS`] characters, or the refusal naming `what`.
fn challenge<'a>(value: Option<&'a str>, what: &str) -> Result<&'a str, HandshakeRefusal> {
    match value {
        Some(c) if !c.is_empty() && c.chars().count() <= MAX_CHALLENGE_CHARS => Ok(c),
        Some(c) if !c.is_empty() => Err(invalid(format!(
            "{what} is longer than {MAX_CHALLENGE_CHARS} characters."
        ))),
        _ => Err(invalid(format!("{what} must be a non-empty string."))),
    }
}

/// The single value of `name` in a query string; `Err` when it is repeated.
fn query_value(query: &str, name: &str) -> Result<Option<String>, HandshakeRefusal> {
    let mut found = form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| k == name);
    let first = found.next().map(|(_, v)| v.into_owned());
    if found.next().is_some() {
        return Err(invalid(format!("`{name}` is given more than once.")));
    }
    Ok(first)
}

/// Whether the address verifies `scheme`, and if it does, the handshake's own signature.
fn verified_if_required(
    config: Option<&VerificationConfig>, scheme: Scheme, d: &Signed<'_>,
) -> Result<(), HandshakeRefusal> {
    match config {
        Some(c) if c.scheme == scheme => match super::verify_signed(c, d).reason {
            None => Ok(()),
            Some(reason) => Err(HandshakeRefusal::Unverified(reason)),
        },
        _ => Ok(()),
    }
}

/// A POST to the inbox URL, with its raw `query`: `None` when it is no handshake (a delivery),
/// else the answer or the refusal.
pub fn handshake(
    query: Option<&str>, d: &Signed<'_>, config: Option<&VerificationConfig>,
) -> Option<Result<Handshake, HandshakeRefusal>> {
    // Microsoft Graph: `POST ?validationToken=…`, answered with the token as text.
    if let Some(query) = query {
        match query_value(query, "validationToken") {
            Err(refusal) => return Some(Err(refusal)),
            Ok(Some(token)) => {
                return Some(
                    challenge(Some(&token), "`validationToken`")
                        .map(|t| Handshake::Text(t.to_owned())),
                )
            }
            Ok(None) => {}
        }
    }
    let body = json_object(d.body)?;
    if let Some(c) = slack::challenge(&body) {
        return Some(answer_slack(c, d, config));
    }
    if let Some(t) = zoom::plain_token(&body) {
        return Some(answer_zoom(t, d, config));
    }
    None
}

fn answer_slack(
    c: Option<&str>, d: &Signed<'_>, config: Option<&VerificationConfig>,
) -> Result<Handshake, HandshakeRefusal> {
    let c = challenge(c, "Slack's `challenge`")?;
    verified_if_required(config, Scheme::Slack, d)?;
    Ok(Handshake::Json(json!({ "challenge": c })))
}

fn answer_zoom(
    t: Option<&str>, d: &Signed<'_>, config: Option<&VerificationConfig>,
) -> Result<Handshake, HandshakeRefusal> {
    let t = challenge(t, "Zoom's `payload.plainToken`")?;
    let Some(config) = config.filter(|c| c.scheme == Scheme::Zoom) else {
        return Err(invalid(
            "Zoom's URL validation is answered with the address's Zoom secret token: set its verification to scheme zoom first (PUT {root}/verification).",
        ));
    };
    verified_if_required(Some(config), Scheme::Zoom, d)?;
    Ok(Handshake::Json(json!({
        "plainToken": t,
        "encryptedToken": zoom::encrypted_token(config.secret.expose(), t),
    })))
}

/// A small JSON object body, parsed; `None` for anything else.
fn json_object(body: &[u8]) -> Option<Map<String, Value>> {
    if body.len() > MAX_HANDSHAKE_BODY_BYTES || nesting_exceeds(body, MAX_JSON_DEPTH) {
        return None;
    }
    match serde_json::from_slice::<Value>(body).ok()? {
        Value::Object(o) => Some(o),
        _ => None,
    }
}

/// Meta's subscription handshake, `GET {inbox_url}?hub.mode=subscribe&hub.verify_token=…
/// &hub.challenge=…`: the challenge, as text, when the token is the address's `verify_token`
/// (scheme `meta`); compared in constant time, and one 403 for every other address and token.
pub fn meta_subscription(
    query: Option<&str>, config: Option<&VerificationConfig>,
) -> Result<Handshake, HandshakeRefusal> {
    let query = query.unwrap_or("");
    let mode = query_value(query, "hub.mode")?;
    if mode.as_deref() != Some("subscribe") {
        return Err(invalid(
            "The inbox URL answers GET only for Meta's subscription handshake (`hub.mode=subscribe`, `hub.verify_token`, `hub.challenge`); deliveries are POSTs.",
        ));
    }
    let token = query_value(query, "hub.verify_token")?;
    let c = query_value(query, "hub.challenge")?;
    let c = challenge(c.as_deref(), "`hub.challenge`")?;
    let expected = config
        .filter(|c| c.scheme == Scheme::Meta)
        .and_then(|c| c.verify_token.as_ref());
    let matches = match (expected, token) {
        (Some(e), Some(t)) => bool::from(
            sha256_hex(e.expose().as_bytes())
                .as_bytes()
                .ct_eq(sha256_hex(t.as_bytes()).as_bytes()),
        ),
        _ => false,
    };
    if matches {
        Ok(Handshake::Text(c.to_owned()))
    } else {
        Err(HandshakeRefusal::Forbidden)
    }
}
