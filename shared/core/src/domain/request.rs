//! Requests for a person (docs/API.md §12): an agent asks a question, a person answers on a
//! page reached by a capability URL, and the answer arrives in the agent's feed. The rules here
//! are written once for both stores: the request's limits, its secret, its status at a moment,
//! and the events it appends.

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use super::time::format_rfc3339;
use super::Millis;

/// Request ids: `req_` and 128 random bits.
pub const REQUEST_PREFIX: &str = "req_";
/// The request secret in the page URL: `ars_` and 256 bits.
pub const REQUEST_SECRET_PREFIX: &str = "ars_";
/// `title`: 1 to 200 characters.
pub const TITLE_MAX_CHARS: usize = 200;
/// `body`: at most 20,000 characters of Markdown.
pub const BODY_MAX_CHARS: usize = 20_000;
/// `options`: 1 to 5 labels.
pub const OPTIONS_MAX: usize = 5;
/// Each option: 1 to 40 characters.
pub const OPTION_MAX_CHARS: usize = 40;
/// A person's comment: at most 2,000 characters.
pub const COMMENT_MAX_CHARS: usize = 2_000;
/// `expires_in_seconds`: at least a minute.
pub const REQUEST_EXPIRES_MIN_SECONDS: u64 = 60;
/// `expires_in_seconds`: at most 30 days.
pub const REQUEST_EXPIRES_MAX_SECONDS: u64 = 2_592_000;
/// `expires_in_seconds` by default: 7 days.
pub const REQUEST_EXPIRES_DEFAULT_SECONDS: u64 = 604_800;
/// The options when none are given.
pub const DEFAULT_OPTIONS: [&str; 2] = ["Approve", "Reject"];

/// Whether the person may, must or cannot add a comment to the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommentMode {
    None,
    #[default]
    Optional,
    Required,
}

impl CommentMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CommentMode::None => "none",
            CommentMode::Optional => "optional",
            CommentMode::Required => "required",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(CommentMode::None),
            "optional" => Some(CommentMode::Optional),
            "required" => Some(CommentMode::Required),
            _ => None,
        }
    }
}

/// Where a request stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RequestStatus {
    Open,
    Answered,
    Expired,
}

impl RequestStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestStatus::Open => "open",
            RequestStatus::Answered => "answered",
            RequestStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(RequestStatus::Open),
            "answered" => Some(RequestStatus::Answered),
            "expired" => Some(RequestStatus::Expired),
            _ => None,
        }
    }
}

/// The status a stored request has at `now`: an open request past its expiry is expired, even
/// before its `request.expired` event is appended.
pub fn status_at(stored: RequestStatus, expires_at: Millis, now: Millis) -> RequestStatus {
    match stored {
        RequestStatus::Open if expires_at <= now => RequestStatus::Expired,
        other => other,
    }
}

/// A new request id.
pub fn new_request_id() -> String {
    format!("{REQUEST_PREFIX}{}", super::ids::random_b64(16))
}

/// The secret of request `request_id` created with `read_token`: a keyed hash of the id under
/// the address's read token, so that a client retrying the creation with the same
/// Idempotency-Key gets the same URL back, while the store keeps only the secret's hash and
/// nobody without the token (which is never stored) can compute it.
pub fn request_secret(read_token: &str, request_id: &str) -> String {
    // HMAC accepts a key of any length: this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(read_token.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(b"agentaddress request secret\0");
    mac.update(request_id.as_bytes());
    format!(
        "{REQUEST_SECRET_PREFIX}{}",
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            mac.finalize().into_bytes()
        )
    )
}

/// The `data` of a `request.answered` event.
pub fn answered_data(
    request_id: &str, choice: &str, comment: Option<&str>, answered_at: Millis,
) -> String {
    serde_json::json!({
        "request_id": request_id,
        "choice": choice,
        "comment": comment,
        "answered_at": format_rfc3339(answered_at),
    })
    .to_string()
}

/// The `data` of a `request.expired` event.
pub fn expired_data(request_id: &str) -> String {
    serde_json::json!({ "request_id": request_id }).to_string()
}

/// Checks a person's answer against the request: the choice is one of `options`, and the
/// comment is present, absent or optional as `comment` says, and not too long. The message is
/// shown to the person (and to an API client).
pub fn check_answer(
    options: &[String], comment_mode: CommentMode, choice: &str, comment: Option<&str>,
) -> Result<(), super::Invalid> {
    if !options.iter().any(|o| o == choice) {
        return Err(super::Invalid::new("Choose one of the request's options."));
    }
    let comment = comment.map(str::trim).filter(|c| !c.is_empty());
    match (comment_mode, comment) {
        (CommentMode::Required, None) => Err(super::Invalid::new("A comment is required.")),
        (CommentMode::None, Some(_)) => Err(super::Invalid::new("This request takes no comment.")),
        (_, Some(c)) if c.chars().count() > COMMENT_MAX_CHARS => Err(super::Invalid::new(format!(
            "A comment has at most {COMMENT_MAX_CHARS} characters."
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_request_past_its_expiry_is_expired() {
        assert_eq!(status_at(RequestStatus::Open, 10, 9), RequestStatus::Open);
        assert_eq!(
            status_at(RequestStatus::Open, 10, 10),
            RequestStatus::Expired
        );
        assert_eq!(
            status_at(RequestStatus::Answered, 10, 99),
            RequestStatus::Answered
        );
    }

    #[test]
    fn the_secret_depends_on_the_token_and_the_id_and_is_stable() {
        let a = request_secret("aat_token-one", "req_1");
        assert_eq!(a, request_secret("aat_token-one", "req_1"));
        assert_ne!(a, request_secret("aat_token-two", "req_1"));
        assert_ne!(a, request_secret("aat_token-one", "req_2"));
        assert!(a.starts_with(REQUEST_SECRET_PREFIX));
        assert!(super::super::ids::is_valid_id(&a));
    }

    #[test]
    fn answers_are_checked_against_the_request() {
        let options = vec!["Approve".to_owned(), "Reject".to_owned()];
        assert!(check_answer(&options, CommentMode::Optional, "Approve", None).is_ok());
        assert!(check_answer(&options, CommentMode::Optional, "Maybe", None).is_err());
        assert!(check_answer(&options, CommentMode::Required, "Reject", Some("  ")).is_err());
        assert!(check_answer(&options, CommentMode::Required, "Reject", Some("why")).is_ok());
        assert!(check_answer(&options, CommentMode::None, "Reject", Some("why")).is_err());
        let long = "x".repeat(COMMENT_MAX_CHARS + 1);
        assert!(check_answer(&options, CommentMode::Optional, "Reject", Some(&long)).is_err());
    }

    #[test]
    fn event_data_is_json_with_the_contract_fields() {
        let d: serde_json::Value =
            serde_json::from_str(&answered_data("req_1", "Approve", Some("ok <b>"), 0))
                .unwrap_or_default();
        assert_eq!(d["request_id"], "req_1");
        assert_eq!(d["choice"], "Approve");
        assert_eq!(d["comment"], "ok <b>");
        assert_eq!(d["answered_at"], "1970-01-01T00:00:00.000Z");
        let d: serde_json::Value =
            serde_json::from_str(&answered_data("req_1", "Reject", None, 0)).unwrap_or_default();
        assert!(d["comment"].is_null());
        assert_eq!(expired_data("req_9"), r#"{"request_id":"req_9"}"#);
    }
}
