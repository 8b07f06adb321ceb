//! The one error type of the HTTP layer and its one mapping to responses. The codes are the
//! catalogue of docs/API.md §9; messages never carry secrets or internal details.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};

use crate::store::StoreError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
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
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidRequest(message.into())
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NotFound(message.into())
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RevisionConflict { .. } | Self::QuotaExceeded | Self::StateLimitExceeded => {
                StatusCode::CONFLICT
            }
            Self::AddressGone => StatusCode::GONE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::NotSupported(_) => StatusCode::NOT_IMPLEMENTED,
            Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::Unauthorized => "unauthorized",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::RevisionConflict { .. } => "revision_conflict",
            Self::QuotaExceeded => "quota_exceeded",
            Self::StateLimitExceeded => "state_limit_exceeded",
            Self::AddressGone => "address_gone",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::NotSupported(_) => "not_supported",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::RateLimited { .. } => "rate_limited",
            Self::Internal(_) => "internal",
            Self::Unavailable(_) => "unavailable",
        }
    }

    fn message(&self) -> String {
        match self {
            Self::InvalidRequest(m)
            | Self::NotFound(m)
            | Self::PayloadTooLarge(m)
            | Self::UnsupportedMediaType(m)
            | Self::NotSupported(m) => m.clone(),
            Self::Unauthorized => {
                "A valid bearer token for this address is required (Authorization: Bearer <read_token>).".into()
            }
            Self::MethodNotAllowed => "This path does not support that HTTP method.".into(),
            Self::RevisionConflict { .. } => {
                "The key's current revision does not match the expected revision.".into()
            }
            Self::QuotaExceeded => {
                "The feed holds its maximum of retained events; older events must expire first."
                    .into()
            }
            Self::StateLimitExceeded => {
                "The write would exceed this address's state key or byte limit.".into()
            }
            Self::AddressGone => "This address was deleted or has expired.".into(),
            Self::IdempotencyKeyReused => {
                "This Idempotency-Key was already used with a different body.".into()
            }
            Self::RateLimited { .. } => "Too many requests; retry after the given delay.".into(),
            Self::Internal(_) => "An internal error occurred.".into(),
            Self::Unavailable(_) => {
                "The store is temporarily unavailable; the request can be retried safely.".into()
            }
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after } => Some(*retry_after),
            Self::Unavailable(_) => Some(1),
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
            StoreError::Unavailable(m) => Self::Unavailable(m),
            StoreError::Internal(m) => Self::Internal(m),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            Self::Internal(detail) => tracing::error!(%detail, "internal error"),
            Self::Unavailable(detail) => tracing::warn!(%detail, "store unavailable"),
            _ => {}
        }
        let mut error = Map::new();
        error.insert("code".into(), Value::from(self.code()));
        error.insert("message".into(), Value::from(self.message()));
        match &self {
            Self::RevisionConflict { current } => {
                error.insert("current_revision".into(), json!(current));
            }
            Self::RateLimited { retry_after } => {
                error.insert("retry_after_seconds".into(), json!(retry_after));
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
