//! The error catalogue of docs/API.md §9 ([`ErrorCode`]: each code, its status and its
//! default message), the one error type of the HTTP layer and its one mapping to responses.
//! The OpenAPI document, the MCP tools and the CLI's exit codes read the same catalogue.
//! Messages never carry secrets or internal details.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use crate::store::StoreError;

/// `Retry-After` of a wait refused because every waiting slot is held (docs/API.md §6).
pub const WAITING_FULL_RETRY_AFTER_SECONDS: u64 = 5;

/// What a handler answers: a response, or an [`ApiError`] that becomes one.
pub type ApiResult = Result<Response, ApiError>;

/// The error catalogue of docs/API.md §9: every `error.code` the API answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    NotFound,
    MethodNotAllowed,
    /// `agentaddress serve` only: a request body that stopped or came too slowly (docs/API.md
    /// §T, "Connections").
    RequestTimeout,
    RevisionConflict,
    QuotaExceeded,
    StateLimitExceeded,
    AddressGone,
    PayloadTooLarge,
    UnsupportedMediaType,
    IdempotencyKeyReused,
    RateLimited,
    Internal,
    NotSupported,
    Unavailable,
    /// docs/API.md §11: the event's stored message is gone.
    AttachmentUnavailable,
    /// docs/API.md §12: the request was answered already, or has expired.
    RequestClosed,
    /// docs/API.md §15: a delivery to an address that refuses unverified ones did not verify.
    SignatureInvalid,
    /// docs/API.md §16: a wrong confirmation code (tries counted), or one with no tries left.
    InvalidCode,
    /// docs/API.md §16: the confirmation code has expired; ask for a new one. Also a viewer
    /// sign-in code that is unknown, used or expired (§13).
    CodeExpired,
    /// docs/API.md §16: a send to an address that is not a confirmed contact.
    ContactNotConfirmed,
    /// docs/API.md §16: this deployment has no sender and relay configured.
    OutboundNotConfigured,
    /// docs/API.md §19: a hook URL that breaks a rule (the message names it).
    InvalidHookUrl,
    /// docs/API.md §19: a test wake got no answer (the message says why).
    HookUnreachable,
    /// docs/API.md §20: the timer fired before it could be cancelled.
    TimerFired,
    /// docs/API.md §22: Meta's subscription handshake with a verify token that is not the
    /// address's.
    Forbidden,
}

impl ErrorCode {
    /// Every code, in the order of docs/API.md §9.
    pub const ALL: [ErrorCode; 27] = [
        ErrorCode::InvalidRequest,
        ErrorCode::Unauthorized,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::RequestTimeout,
        ErrorCode::RevisionConflict,
        ErrorCode::QuotaExceeded,
        ErrorCode::StateLimitExceeded,
        ErrorCode::AddressGone,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::RateLimited,
        ErrorCode::Internal,
        ErrorCode::NotSupported,
        ErrorCode::Unavailable,
        ErrorCode::AttachmentUnavailable,
        ErrorCode::RequestClosed,
        ErrorCode::SignatureInvalid,
        ErrorCode::InvalidCode,
        ErrorCode::CodeExpired,
        ErrorCode::ContactNotConfirmed,
        ErrorCode::OutboundNotConfigured,
        ErrorCode::InvalidHookUrl,
        ErrorCode::HookUnreachable,
        ErrorCode::TimerFired,
        ErrorCode::Forbidden,
    ];

    /// The code on the wire (`error.code`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::Unauthorized => "unauthorized",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::RequestTimeout => "request_timeout",
            Self::RevisionConflict => "revision_conflict",
            Self::QuotaExceeded => "quota_exceeded",
            Self::StateLimitExceeded => "state_limit_exceeded",
            Self::AddressGone => "address_gone",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::RateLimited => "rate_limited",
            Self::Internal => "internal",
            Self::NotSupported => "not_supported",
            Self::Unavailable => "unavailable",
            Self::AttachmentUnavailable => "attachment_unavailable",
            Self::RequestClosed => "request_closed",
            Self::SignatureInvalid => "signature_invalid",
            Self::InvalidCode => "invalid_code",
            Self::CodeExpired => "code_expired",
            Self::ContactNotConfirmed => "contact_not_confirmed",
            Self::OutboundNotConfigured => "outbound_not_configured",
            Self::InvalidHookUrl => "invalid_hook_url",
            Self::HookUnreachable => "hook_unreachable",
            Self::TimerFired => "timer_fired",
            Self::Forbidden => "forbidden",
        }
    }

    /// The code named `code`, if it is one of the catalogue's.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The HTTP status a code is answered with.
    pub const fn status(self) -> StatusCode {
        match self {
            Self::InvalidRequest | Self::InvalidHookUrl => StatusCode::BAD_REQUEST,
            Self::HookUnreachable => StatusCode::BAD_GATEWAY,
            Self::Unauthorized | Self::SignatureInvalid => StatusCode::UNAUTHORIZED,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::RevisionConflict
            | Self::QuotaExceeded
            | Self::StateLimitExceeded
            | Self::RequestClosed
            | Self::TimerFired => StatusCode::CONFLICT,
            Self::AddressGone | Self::AttachmentUnavailable | Self::CodeExpired => StatusCode::GONE,
            Self::ContactNotConfirmed | Self::Forbidden => StatusCode::FORBIDDEN,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::IdempotencyKeyReused | Self::InvalidCode => StatusCode::UNPROCESSABLE_ENTITY,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NotSupported => StatusCode::NOT_IMPLEMENTED,
            Self::Unavailable | Self::OutboundNotConfigured => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The message of an answer with this code, when the error does not give its own (the
    /// codes whose errors always do have a generic one here).
    pub const fn default_message(self) -> &'static str {
        match self {
            Self::InvalidRequest => "The request is not valid.",
            Self::Unauthorized => {
                "A valid bearer token for this address is required (Authorization: Bearer <read_token>)."
            }
            Self::NotFound => "Not found.",
            Self::MethodNotAllowed => "This path does not support that HTTP method.",
            Self::RequestTimeout => {
                "The request body did not arrive in time; send the request again."
            }
            Self::RevisionConflict => {
                "The key's current revision does not match the expected revision."
            }
            Self::QuotaExceeded => {
                "The feed holds its maximum of retained events; older events must expire first."
            }
            Self::StateLimitExceeded => {
                "The write would exceed this address's state key or byte limit."
            }
            Self::AddressGone => "This address was deleted or has expired.",
            Self::PayloadTooLarge => "The request body is larger than its limit.",
            Self::UnsupportedMediaType => "This endpoint takes a JSON body.",
            Self::IdempotencyKeyReused => {
                "This Idempotency-Key was already used with a different body."
            }
            Self::RateLimited => "Too many requests; retry after the given delay.",
            Self::Internal => "An internal error occurred.",
            Self::NotSupported => "This request feature is not supported.",
            Self::Unavailable => {
                "The store is temporarily unavailable; the request can be retried safely."
            }
            Self::AttachmentUnavailable => {
                "The stored message of this event is gone; its attachments can no longer be read."
            }
            Self::RequestClosed => {
                "This request was already answered or has expired; the answer stays as it was."
            }
            Self::SignatureInvalid => {
                "The delivery's webhook signature did not verify; nothing was recorded."
            }
            Self::InvalidCode => "The confirmation code is wrong.",
            Self::CodeExpired => {
                "The confirmation code has expired; ask for a new one (POST the email alone)."
            }
            Self::ContactNotConfirmed => {
                "The recipient is not a confirmed contact of this address: add it with \
                 POST {root}/email/contacts and confirm it with the code mailed to it."
            }
            Self::OutboundNotConfigured => {
                "This deployment sends no email: its operator has configured no sender and relay."
            }
            Self::InvalidHookUrl => {
                "The hook URL is refused: https:// only, no user info, and every address its \
                 host resolves to must be public."
            }
            Self::HookUnreachable => "The hook's receiver did not answer.",
            Self::TimerFired => {
                "This timer has fired already: its event is in the feed, and it cannot be cancelled."
            }
            Self::Forbidden => "The verify token is not this address's; nothing is answered.",
        }
    }
}

/// The schema of `error.code` in the OpenAPI document: a string, one of the catalogue's.
pub fn code_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .enum_values(Some(ErrorCode::ALL.map(ErrorCode::as_str)))
        .description(Some("One of the codes of the catalogue (docs/API.md §9)."))
        .build()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    /// `quota_exceeded`: the address has its most wake hooks (docs/API.md §19).
    #[error("hooks full")]
    HooksFull,
    /// `invalid_hook_url` (docs/API.md §19), naming the rule broken.
    #[error("{0}")]
    InvalidHookUrl(String),
    /// `hook_unreachable` (docs/API.md §19), with the reason (never the URL or a header).
    #[error("{0}")]
    HookUnreachable(String),
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("{0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("revision conflict")]
    RevisionConflict { current: Option<u64> },
    #[error("quota exceeded")]
    QuotaExceeded,
    /// `quota_exceeded` for stored email: the address keeps its most raw message bytes.
    #[error("stored email quota exceeded")]
    EmailStorageFull,
    #[error("attachment unavailable")]
    AttachmentUnavailable,
    /// `quota_exceeded` for requests for a person: the address has its most open requests.
    #[error("open requests quota exceeded")]
    OpenRequestsFull,
    /// `quota_exceeded` for outbound email: the address has its most contacts.
    #[error("contacts quota exceeded")]
    ContactsFull,
    #[error("request closed")]
    RequestClosed,
    /// `quota_exceeded` for timers: the address has its most pending timers (docs/API.md §20).
    #[error("pending timers quota exceeded")]
    TimersFull,
    /// `timer_fired` (docs/API.md §20).
    #[error("timer fired")]
    TimerFired,
    /// `forbidden`: Meta's handshake with a verify token that is not the address's (§22).
    #[error("forbidden")]
    Forbidden,
    #[error("state limit exceeded")]
    StateLimitExceeded,
    #[error("address gone")]
    AddressGone,
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A request feature this server does not implement (a transfer coding other than
    /// `chunked`: docs/API.md, "Request hygiene").
    #[error("{0}")]
    NotSupported(String),
    #[error("idempotency key reused")]
    IdempotencyKeyReused,
    #[error("rate limited")]
    RateLimited { retry_after: u64 },
    /// The detail goes to the log, never to the client.
    #[error("internal error: {0}")]
    Internal(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// `serve`'s page memory stayed in use for the whole wait (docs/API.md, "Pages under
    /// memory pressure"): 503 `unavailable` with `Retry-After`.
    #[error("no page memory free")]
    MemoryBusy,
    /// Every waiting slot of the deployment is held (docs/API.md §6, "Waiting polls"): 503
    /// `unavailable` with `Retry-After`.
    #[error("waiting slots full")]
    WaitingFull,
    /// docs/API.md §15: `reason` is `missing_signature`, `bad_signature` or
    /// `timestamp_out_of_tolerance`.
    #[error("signature invalid: {reason}")]
    SignatureInvalid { reason: &'static str },
    /// docs/API.md §16: `tries_left` of this code remain.
    #[error("invalid code")]
    InvalidCode { tries_left: u32 },
    #[error("code expired")]
    CodeExpired,
    /// docs/API.md §13: a viewer sign-in code that is unknown, used or expired (one answer for
    /// all three, so that nothing can be told apart).
    #[error("viewer code expired")]
    ViewerCodeExpired,
    #[error("contact not confirmed")]
    ContactNotConfirmed,
    #[error("outbound not configured")]
    OutboundNotConfigured,
    /// `rate_limited` for a daily limit of docs/API.md §16, with its own message.
    #[error("{message}")]
    DailyLimit {
        retry_after: u64,
        message: &'static str,
    },
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest(message.into())
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NotFound(message.into())
    }

    /// The catalogue's entry of this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest,
            Self::InvalidHookUrl(_) => ErrorCode::InvalidHookUrl,
            Self::HookUnreachable(_) => ErrorCode::HookUnreachable,
            Self::Unauthorized => ErrorCode::Unauthorized,
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            Self::RevisionConflict { .. } => ErrorCode::RevisionConflict,
            Self::QuotaExceeded
            | Self::EmailStorageFull
            | Self::OpenRequestsFull
            | Self::ContactsFull
            | Self::HooksFull
            | Self::TimersFull => ErrorCode::QuotaExceeded,
            Self::RequestClosed => ErrorCode::RequestClosed,
            Self::TimerFired => ErrorCode::TimerFired,
            Self::Forbidden => ErrorCode::Forbidden,
            Self::AttachmentUnavailable => ErrorCode::AttachmentUnavailable,
            Self::StateLimitExceeded => ErrorCode::StateLimitExceeded,
            Self::AddressGone => ErrorCode::AddressGone,
            Self::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            Self::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            Self::NotSupported(_) => ErrorCode::NotSupported,
            Self::IdempotencyKeyReused => ErrorCode::IdempotencyKeyReused,
            Self::RateLimited { .. } | Self::DailyLimit { .. } => ErrorCode::RateLimited,
            Self::InvalidCode { .. } => ErrorCode::InvalidCode,
            Self::CodeExpired | Self::ViewerCodeExpired => ErrorCode::CodeExpired,
            Self::ContactNotConfirmed => ErrorCode::ContactNotConfirmed,
            Self::OutboundNotConfigured => ErrorCode::OutboundNotConfigured,
            Self::Internal(_) => ErrorCode::Internal,
            Self::Unavailable(_) | Self::MemoryBusy | Self::WaitingFull => ErrorCode::Unavailable,
            Self::SignatureInvalid { .. } => ErrorCode::SignatureInvalid,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.error_code().status()
    }

    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The client's message: the error's own, or the catalogue's (never an internal detail).
    fn message(&self) -> String {
        match self {
            Self::InvalidRequest(m)
            | Self::InvalidHookUrl(m)
            | Self::HookUnreachable(m)
            | Self::NotFound(m)
            | Self::PayloadTooLarge(m)
            | Self::UnsupportedMediaType(m)
            | Self::NotSupported(m) => m.clone(),
            Self::EmailStorageFull => "This address keeps its most bytes of email messages; \
                 older messages must expire first."
                .into(),
            Self::OpenRequestsFull => "This address has its most open requests for a person; \
                 one must be answered or expire first."
                .into(),
            Self::ContactsFull => "This address has its most contacts.".into(),
            Self::TimersFull => format!(
                "This address has its most pending timers ({}); one must fire or be cancelled \
                 first.",
                crate::domain::timer::MAX_PENDING_TIMERS
            ),
            Self::HooksFull => format!(
                "This address has its most wake hooks ({}); delete one first.",
                crate::domain::hooks::MAX_HOOKS_PER_ADDRESS
            ),
            Self::InvalidCode { tries_left: 0 } => "The confirmation code is wrong, and this \
                 code has no tries left: ask for a new one (POST the email alone)."
                .into(),
            Self::InvalidCode { tries_left } => {
                format!("The confirmation code is wrong; {tries_left} more tries of this code.")
            }
            Self::DailyLimit { message, .. } => (*message).into(),
            Self::ViewerCodeExpired => {
                "This sign-in link was already used or has expired; run the command again.".into()
            }
            Self::WaitingFull => "Every waiting slot of this deployment is held by other long \
                 polls; nothing was lost: retry from the same cursor after Retry-After, or wait \
                 on the wake-up socket or a wake hook instead (docs/API.md §17, §19)."
                .into(),
            Self::MemoryBusy => "The server's memory for pages of events is in use by other \
                 answers being written; nothing was lost, retry from the same cursor in a moment."
                .into(),
            _ => self.error_code().default_message().into(),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after } | Self::DailyLimit { retry_after, .. } => {
                Some(*retry_after)
            }
            Self::Unavailable(_) | Self::MemoryBusy => Some(1),
            Self::WaitingFull => Some(WAITING_FULL_RETRY_AFTER_SECONDS),
            _ => None,
        }
    }
}

impl From<StoreError> for ApiError {
    /// The mapping for bearer routes; the inbox maps an unknown address to 404 itself.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::AddressNotFound => Self::Unauthorized,
            StoreError::AddressGone => Self::AddressGone,
            StoreError::NotFound => Self::not_found("No such event or state key."),
            StoreError::RevisionConflict { current } => Self::RevisionConflict { current },
            StoreError::QuotaExceeded => Self::QuotaExceeded,
            StoreError::StateLimitExceeded => Self::StateLimitExceeded,
            StoreError::IdempotencyKeyReused => Self::IdempotencyKeyReused,
            StoreError::AddressExists => Self::Internal("address id collision".into()),
            StoreError::EmailStorageFull => Self::EmailStorageFull,
            StoreError::EmailUnavailable => Self::AttachmentUnavailable,
            StoreError::ContactNotConfirmed => Self::ContactNotConfirmed,
            StoreError::DailyLimit {
                retry_after_seconds,
            } => Self::DailyLimit {
                retry_after: retry_after_seconds,
                message: "A daily limit of this address is reached; it resets at 00:00 UTC.",
            },
            StoreError::CodeMailCap {
                retry_after_seconds,
                ..
            } => Self::DailyLimit {
                retry_after: retry_after_seconds,
                message: "A daily cap on code mails is reached; it resets at 00:00 UTC.",
            },
            StoreError::NotSupported(what) => {
                Self::NotSupported(format!("This deployment does not support {what} yet."))
            }
            StoreError::Unavailable(m) => Self::Unavailable(m),
            StoreError::Internal(m) => Self::Internal(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            Self::Internal(detail) => {
                crate::metrics::store_error("internal");
                tracing::error!(%detail, "internal error");
            }
            Self::Unavailable(detail) => {
                crate::metrics::store_error("unavailable");
                tracing::warn!(%detail, "store unavailable");
            }
            _ => {}
        }
        let mut error = Map::new();
        error.insert("code".into(), Value::from(self.code()));
        error.insert("message".into(), Value::from(self.message()));
        match &self {
            Self::RevisionConflict { current } => {
                error.insert("current_revision".into(), json!(current));
            }
            Self::RateLimited { retry_after } | Self::DailyLimit { retry_after, .. } => {
                error.insert("retry_after_seconds".into(), json!(retry_after));
            }
            Self::InvalidCode { tries_left } => {
                error.insert("tries_left".into(), json!(tries_left));
            }
            Self::SignatureInvalid { reason } => {
                error.insert("reason".into(), json!(reason));
            }
            _ => {}
        }
        let mut response =
            super::json_response(self.status(), &json!({ "error": Value::Object(error) }));
        if let Some(secs) = self.retry_after() {
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows `| code | HTTP | when |` of docs/API.md §9.
    fn documented_codes() -> Vec<(String, u16)> {
        let doc = include_str!("../../../docs/API.md");
        let section = doc
            .split("\n## 9.")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or("");
        section
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                match cells.as_slice() {
                    ["", code, status, _, ""] => {
                        Some(((*code).to_owned(), status.parse::<u16>().ok()?))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    #[test]
    fn the_catalogue_is_docs_api_section_9() {
        let documented = documented_codes();
        assert_eq!(documented.len(), ErrorCode::ALL.len(), "{documented:?}");
        for (code, status) in &documented {
            let c = ErrorCode::parse(code).unwrap_or_else(|| panic!("{code} is not in ErrorCode"));
            assert_eq!(c.status().as_u16(), *status, "{code}");
        }
        for c in ErrorCode::ALL {
            assert!(
                documented.iter().any(|(code, _)| code == c.as_str()),
                "{} is not in docs/API.md §9",
                c.as_str()
            );
        }
    }

    #[test]
    fn every_api_error_answers_its_catalogue_entry() {
        let errors = [
            ApiError::invalid("x"),
            ApiError::Unauthorized,
            ApiError::not_found("x"),
            ApiError::MethodNotAllowed,
            ApiError::RevisionConflict { current: None },
            ApiError::QuotaExceeded,
            ApiError::StateLimitExceeded,
            ApiError::AddressGone,
            ApiError::PayloadTooLarge("x".into()),
            ApiError::UnsupportedMediaType("x".into()),
            ApiError::NotSupported("x".into()),
            ApiError::IdempotencyKeyReused,
            ApiError::RateLimited { retry_after: 1 },
            ApiError::InvalidCode { tries_left: 2 },
            ApiError::CodeExpired,
            ApiError::ViewerCodeExpired,
            ApiError::ContactNotConfirmed,
            ApiError::OutboundNotConfigured,
            ApiError::InvalidHookUrl("x".into()),
            ApiError::HookUnreachable("x".into()),
            ApiError::TimersFull,
            ApiError::TimerFired,
            ApiError::Forbidden,
            ApiError::WaitingFull,
            ApiError::Internal("secret detail".into()),
            ApiError::Unavailable("secret detail".into()),
        ];
        for e in errors {
            let c = e.error_code();
            assert_eq!((e.status(), e.code()), (c.status(), c.as_str()));
            assert!(!e.message().contains("secret"), "{e:?}");
        }
    }
}
