//! Request parsing shared by the handlers: authentication, bodies, JSON, query strings, the
//! public base URL and the client's IP. Every failure is an [`ApiError`], never a panic.
//!
//! What most handlers take first is an extractor here, whose rejection is the [`ApiError`] the
//! handler answered before: [`Authenticated`] (the read token of the address in the path), the
//! path parameters with a rule of their own ([`EventId`], [`StateKey`], [`RequestId`],
//! [`AttachmentId`]), [`IdempotencyKey`] and [`JsonBody`]. axum runs a handler's extractors in
//! the order of its parameters, a body extractor last: a handler lists them in the order its
//! checks answer, which decides the error a request with several problems gets (the token
//! first: docs/API.md §0, "Authentication first"). A handler that checks something else first
//! (a rate limit, a capability URL) calls the same functions itself, in its own order.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, RawPathParams, Request};
use http::request::Parts;
use http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::inputs::{parse_fields, FeedParams, Fields, FEED_LIMIT_MAX};
use super::{ApiError, AppState};
use crate::domain::state::validate_key;
use crate::domain::{envelope::is_json_content_type, ids, Millis};
pub use crate::numbers::{optional_integer, parse_count};
use crate::store::AddressRecord;

/// Path parameters, with a JSON 400 instead of axum's plain-text rejection.
pub struct PathParams<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|e| ApiError::invalid(format!("Bad path parameter: {}", e.body_text())))
    }
}

/// The IP a request came from, as set by the serving layer (a `ClientIp` extension from the
/// Lambda adapter, or the socket's peer address).
#[derive(Debug, Clone)]
pub struct ClientIp(pub String);

pub fn client_ip(parts: &Parts) -> String {
    if let Some(ip) = parts.extensions.get::<ClientIp>() {
        return ip.0.clone();
    }
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The client a request counts against for per-client limits (the address creation rate):
/// its IPv4 address or its IPv6 /64 (`agentaddress_core::domain::client`).
pub fn client_key(parts: &Parts) -> String {
    crate::domain::client::ClientKey::of_text(&client_ip(parts))
}

/// The client a request counts against for per-client limits ([`client_key`]), as an
/// extractor: the page memory share (`page_budget`).
pub struct Client(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Client(client_key(parts)))
    }
}

/// The public base URL: configured, or derived from the request's Host and
/// X-Forwarded-Proto headers. The router's hygiene layer has already refused an invalid or
/// repeated Host and put an absolute-form target's authority in Host (docs/API.md, "Request
/// hygiene"); the same check here keeps anything else out of the URLs whatever the caller.
pub fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(u) = &state.config.public_url {
        return u.clone();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| super::hygiene::is_valid_authority(h))
        .unwrap_or("localhost");
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .map(|s| {
            s.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        }) {
        Some(s) if s == "https" => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// The service's clock, read once for the request: handlers that have no [`Authenticated`]
/// (which reads it) take their `now` from here.
#[derive(Debug, Clone, Copy)]
pub struct Now(pub Millis);

impl FromRequestParts<AppState> for Now {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        Ok(Now(state.clock.now()))
    }
}

/// When the request reached its handler (this process's monotonic clock), before the extractors
/// that follow it: a long poll's `wait` counts from here (docs/API.md §4), not from after
/// authentication.
#[derive(Debug, Clone, Copy)]
pub struct Arrived(pub Instant);

impl<S: Send + Sync> FromRequestParts<S> for Arrived {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(_: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Arrived(Instant::now()))
    }
}

/// The path parameter `name`, percent-decoded. A parameter that does not decode to UTF-8 is
/// the 400 that [`PathParams`] answers (docs/API.md §T, "Request hygiene"); a route without the
/// parameter is a bug of the route table (500).
async fn path_param(parts: &mut Parts, name: &str) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, &())
        .await
        .map_err(|e| match e {
            // As `Path` says it, through `PathParams`.
            RawPathParamsRejection::InvalidUtf8InPathParam(e) => ApiError::invalid(format!(
                "Bad path parameter: Invalid URL: {}",
                e.body_text()
            )),
            other => ApiError::Internal(format!("no path parameters: {}", other.body_text())),
        })?;
    let value = params.iter().find(|(key, _)| *key == name);
    value
        .map(|(_, v)| v.to_owned())
        .ok_or_else(|| ApiError::Internal(format!("the route has no `{name}` parameter")))
}

/// A request with the read token of the address of its path (`{address_id}`), checked by
/// [`authenticate`] at `now`, the service's clock read once for the request: what every bearer
/// route takes first (docs/API.md §0, "Authentication first").
pub struct Authenticated {
    pub address_id: String,
    /// The address, as authentication read it.
    pub address: AddressRecord,
    pub now: Millis,
}

impl Authenticated {
    /// Reads the clock and checks the bearer token of `address_id` among `headers`: for a
    /// handler that checks something before authenticating (docs/API.md §14: a deployment
    /// that cannot stream says so first).
    pub async fn check(
        state: &AppState, headers: &HeaderMap, address_id: String,
    ) -> Result<Self, ApiError> {
        let now = state.clock.now();
        let address = authenticate(state, headers, &address_id, now).await?;
        Ok(Self {
            address_id,
            address,
            now,
        })
    }
}

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let address_id = path_param(parts, "address_id").await?;
        Self::check(state, &parts.headers, address_id).await
    }
}

/// An authenticated address whose due requests for a person have their `request.expired`
/// events appended first (docs/API.md §12), and whose due timers have fired (§20): what a
/// handler extracts that reads or appends to the feed, reads or writes state, or shows a
/// request or a timer, so that an expiry or a timer is never shown after something that
/// happened later.
pub struct Current(pub Authenticated);

impl FromRequestParts<AppState> for Current {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let authenticated = Authenticated::from_request_parts(parts, state).await?;
        append_due(state, &authenticated.address, authenticated.now).await?;
        Ok(Self(authenticated))
    }
}

/// Appends what is due — `request.expired` events (docs/API.md §12), timers' events (§20) —
/// before a read shows the feed, a request or a timer, or anything is appended: `address` is
/// the record authentication loaded.
pub async fn append_due(
    state: &AppState, address: &crate::store::AddressRecord, now: Millis,
) -> Result<(), ApiError> {
    Ok(state
        .store
        .append_due(address, &state.config.limits, now)
        .await?)
}

/// Declares an extractor of the path parameter `$name` that `$check` accepts.
macro_rules! path_parameter {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $ty(pub String);

        impl<S: Send + Sync> FromRequestParts<S> for $ty {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
                let value = path_param(parts, $name).await?;
                let check: fn(&str) -> Result<(), ApiError> = $check;
                check(&value)?;
                Ok($ty(value))
            }
        }
    };
}

path_parameter!(
    /// `{hook_id}` (docs/API.md §19): 404 unless it has the shape of a hook id.
    HookId,
    "hook_id",
    |id| {
        if crate::domain::hooks::is_hook_id(id) {
            Ok(())
        } else {
            Err(ApiError::not_found("No such hook."))
        }
    }
);

path_parameter!(
    /// `{event_id}` (docs/API.md §4, "Events"): 400 unless it has the shape of an id.
    EventId,
    "event_id",
    |id| {
        if ids::is_valid_id(id) {
            Ok(())
        } else {
            Err(ApiError::invalid(
                "Event ids are 1 to 64 characters of letters, digits, _ and -.",
            ))
        }
    }
);

path_parameter!(
    /// `{timer_id}` (docs/API.md §20): 404 unless it has the shape of a timer id.
    TimerId,
    "timer_id",
    |id| {
        if crate::domain::timer::is_timer_id(id) {
            Ok(())
        } else {
            Err(ApiError::not_found("No such timer."))
        }
    }
);

path_parameter!(
    /// `{key}` of the state routes (docs/API.md §7): 400 unless it is a valid key.
    StateKey,
    "key",
    |key| validate_key(key).map_err(|e| ApiError::invalid(format!("Bad state key: {e}.")))
);

path_parameter!(
    /// `{request_id}` (docs/API.md §12): 404 unless it has the shape of an id.
    RequestId,
    "request_id",
    |id| {
        if ids::is_valid_id(id) {
            Ok(())
        } else {
            Err(ApiError::not_found("No such request."))
        }
    }
);

path_parameter!(
    /// `{attachment_id}` (docs/API.md §11): 404 unless it has the shape of an id.
    AttachmentId,
    "attachment_id",
    |id| {
        if ids::is_valid_id(id) {
            Ok(())
        } else {
            Err(ApiError::not_found("No such attachment."))
        }
    }
);

/// Checks the bearer token of `address_id`: 401 for a missing or wrong token and for an unknown
/// address alike; 410 for a deleted or expired address with the right token.
pub async fn authenticate(
    state: &AppState, headers: &HeaderMap, address_id: &str, now: Millis,
) -> Result<AddressRecord, ApiError> {
    let token = bearer_token(headers).ok_or(ApiError::Unauthorized)?;
    if !ids::is_valid_id(address_id) {
        return Err(ApiError::Unauthorized);
    }
    let record = state.store.get_address(address_id, now).await?;
    let Some(record) = record else {
        ids::verify_secret(token, DUMMY_HASH);
        return Err(ApiError::Unauthorized);
    };
    if !ids::verify_secret(token, &record.token_hash) {
        return Err(ApiError::Unauthorized);
    }
    if record.is_gone(now) {
        return Err(ApiError::AddressGone);
    }
    Ok(record)
}

/// The `Idempotency-Key` header (docs/API.md §3, §12): 1 to 255 printable ASCII characters,
/// or absent.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<Vec<u8>>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bytes = v.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(ApiError::invalid(
            "Idempotency-Key must be 1 to 255 printable ASCII characters.",
        ));
    }
    Ok(Some(bytes.to_vec()))
}

/// The `Idempotency-Key` header, as [`idempotency_key`] checks it.
#[derive(Debug, Clone)]
pub struct IdempotencyKey(pub Option<Vec<u8>>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        idempotency_key(&parts.headers).map(IdempotencyKey)
    }
}

/// Compared against when the address is unknown, so both paths hash and compare.
pub(crate) const DUMMY_HASH: &str =
    "0000000000000000000000000000000000000000000000000000000000000000";

pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

/// Refuses a declared Content-Length over `limit` before reading anything.
pub fn check_content_length(headers: &HeaderMap, limit: u64, what: &str) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit => Err(too_large(limit, what)),
        _ => Ok(()),
    }
}

fn too_large(limit: u64, what: &str) -> ApiError {
    ApiError::PayloadTooLarge(format!(
        "The {what} is larger than the limit of {limit} bytes."
    ))
}

/// Reads the whole body, refusing more than `limit` bytes with 413.
pub async fn read_body(
    headers: &HeaderMap, body: Body, limit: u64, what: &str,
) -> Result<Bytes, ApiError> {
    check_content_length(headers, limit, what)?;
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, cap).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large(limit, what)),
        Err(_) => Err(ApiError::invalid("The request body could not be read.")),
    }
}

/// A JSON endpoint accepts a JSON content type, or none at all; anything else is 415.
pub fn require_json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    match headers.get(header::CONTENT_TYPE) {
        None => Ok(()),
        Some(v) => match v.to_str() {
            Ok(ct) if is_json_content_type(ct) => Ok(()),
            _ => Err(ApiError::UnsupportedMediaType(
                "This endpoint takes a JSON body (Content-Type: application/json).".into(),
            )),
        },
    }
}

/// Parses a body that must be one JSON object.
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("The body is not valid JSON: {e}.")))?;
    match value {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::invalid("The body must be a JSON object.")),
    }
}

/// The query string as (name, value) pairs; a name given twice is refused.
pub fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if pairs.iter().any(|(seen, _)| *seen == k) {
            return Err(ApiError::invalid(format!(
                "Query parameter `{k}` is given more than once."
            )));
        }
        pairs.push((k.into_owned(), v.into_owned()));
    }
    Ok(pairs)
}

/// The query string's parameters as the fields of a query struct ([`parse_fields`]): each
/// value a JSON string; a name given twice is refused.
pub fn query_fields(query: Option<&str>) -> Result<Map<String, Value>, ApiError> {
    Ok(query_pairs(query)?
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect())
}

/// A JSON body that must be one object, parsed into its request struct ([`parse_fields`]).
pub fn json_body<T: Fields>(body: &[u8]) -> Result<T, ApiError> {
    parse_fields(json_object(body)?)
}

/// How a JSON request body parses: a request struct of [`Fields`] with [`json_body`] (its
/// fields in their declared order); another type its own way.
pub trait ParseBody: Sized {
    fn parse_body(body: &[u8]) -> Result<Self, ApiError>;
}

impl<T: Fields> ParseBody for T {
    fn parse_body(body: &[u8]) -> Result<Self, ApiError> {
        json_body(body)
    }
}

/// A JSON request body: how much of it is read and when its content type is checked.
/// Implemented next to the handler that takes it.
pub trait JsonRequest: ParseBody {
    /// The largest body read: a larger one is 413 `payload_too_large`.
    fn limit(state: &AppState) -> u64;

    /// Whether a content type that is not JSON is refused (415) before the body is read, so
    /// before a body over the limit (413); by default the body is read first.
    const CONTENT_TYPE_FIRST: bool = false;

    /// What an empty or all-whitespace body stands for, when the route takes none (the content
    /// type is then not checked); by default such a body is parsed, and refused, like any other.
    fn when_blank() -> Option<Self> {
        None
    }
}

/// A JSON request body ([`JsonRequest`]), parsed, and the bytes it was parsed from (an
/// idempotency claim hashes them, docs/API.md §3): read within its limit, with a JSON content
/// type (or none), each refusal as its handler answered it before.
#[derive(Debug)]
pub struct JsonBody<T> {
    pub value: T,
    pub bytes: Bytes,
}

impl<T: JsonRequest> JsonBody<T> {
    /// Reads and parses `body`: for a handler that checks something before (a rate limit).
    pub async fn read(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Self, ApiError> {
        if T::CONTENT_TYPE_FIRST {
            require_json_content_type(headers)?;
        }
        let bytes = read_body(headers, body, T::limit(state), "request body").await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            if let Some(value) = T::when_blank() {
                return Ok(Self { value, bytes });
            }
        }
        if !T::CONTENT_TYPE_FIRST {
            require_json_content_type(headers)?;
        }
        let value = T::parse_body(&bytes)?;
        Ok(Self { value, bytes })
    }
}

impl<T: JsonRequest + Send> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        Self::read(state, &parts.headers, body).await
    }
}

/// The query of `GET {root}/events` (docs/API.md §4), parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedQuery {
    /// Events with `sequence > after`; 0 by default.
    pub after: u64,
    /// Page size, 1..=[`FEED_LIMIT_MAX`]; that by default.
    pub limit: usize,
    /// How long to hold the request while the feed is empty: `wait` seconds, clamped to the
    /// server's longest wait; zero by default.
    pub wait: Duration,
    /// Only events of these types (docs/API.md §21), examining at most
    /// [`crate::store::MAX_EXAMINED`] per page; every event by default.
    pub types: Option<crate::domain::patterns::TypePatterns>,
}

/// Parses the feed query ([`FeedParams`]). `after` is a non-negative decimal integer up to
/// 2^63−1; `limit` an integer 1..=[`FEED_LIMIT_MAX`] (anything else is refused, not clamped);
/// `wait` a non-negative decimal number of seconds (fraction and exponent allowed; `inf`, `nan`
/// and overflowing values refused) clamped to `max_wait_seconds`. A parameter given twice is
/// refused; unknown ones are ignored.
pub fn parse_feed_query(query: Option<&str>, max_wait_seconds: u64) -> Result<FeedQuery, ApiError> {
    let params: FeedParams = parse_fields(query_fields(query)?)?;
    let limit = params.limit.unwrap_or(FEED_LIMIT_MAX);
    Ok(FeedQuery {
        after: params.after.unwrap_or(0),
        limit: usize::try_from(limit).unwrap_or(usize::MAX),
        wait: Duration::from_secs_f64(params.wait.unwrap_or(0.0).min(max_wait_seconds as f64)),
        types: params.types,
    })
}

/// The expected revision of a state write or delete, from `If-Match` (`N` or `"N"`) and/or the
/// request's own `if_revision`; both given and different is a 400.
pub fn expected_revision(
    headers: &HeaderMap, from_request: Option<u64>,
) -> Result<Option<u64>, ApiError> {
    let header_value = match headers.get(header::IF_MATCH) {
        None => None,
        Some(v) => {
            let text = v.to_str().unwrap_or("").trim();
            let text = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(text);
            Some(parse_count(text).ok_or_else(|| {
                ApiError::invalid("If-Match must be a revision number, like If-Match: 7.")
            })?)
        }
    };
    match (header_value, from_request) {
        (Some(h), Some(r)) if h != r => Err(ApiError::invalid(
            "If-Match and if_revision disagree; send one of them.",
        )),
        (Some(h), _) => Ok(Some(h)),
        (None, r) => Ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path parameter that does not decode is the same 400 through [`path_param`] (the
    /// extractors of this module) as through [`PathParams`].
    #[tokio::test]
    async fn undecodable_path_parameters_answer_as_path_params_does() {
        use axum::routing::get;
        use tower::ServiceExt;

        async fn answer(router: axum::Router, uri: &str) -> (http::StatusCode, Bytes) {
            let request = http::Request::get(uri)
                .body(Body::empty())
                .expect("request");
            let response = router.oneshot(request).await.expect("infallible");
            let status = response.status();
            let body = response.into_body().collect().await.expect("body");
            (status, body.to_bytes())
        }
        let typed = axum::Router::new().route(
            "/{event_id}",
            get(|PathParams(_): PathParams<String>| async { "ok" }),
        );
        let ours = axum::Router::new().route("/{event_id}", get(|_: EventId| async { "ok" }));
        let expected = answer(typed, "/%FF").await;
        assert_eq!(expected.0, http::StatusCode::BAD_REQUEST);
        assert!(
            String::from_utf8_lossy(&expected.1).contains("Invalid UTF-8 in `event_id`"),
            "{expected:?}"
        );
        assert_eq!(answer(ours.clone(), "/%FF").await, expected);
        assert_eq!(answer(ours, "/e_1").await.0, http::StatusCode::OK);
    }

    #[test]
    fn bearer_tokens() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().expect("header"));
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            "bearer  abc ".parse().expect("header"),
        );
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().expect("header"));
        assert_eq!(bearer_token(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().expect("header"));
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn feed_queries() {
        let q = parse_feed_query(None, 25).expect("defaults");
        assert_eq!((q.after, q.limit, q.wait), (0, 100, Duration::ZERO));
        let q = parse_feed_query(Some("after=7&limit=3&wait=2.5e1&x=y"), 25).expect("valid");
        assert_eq!((q.after, q.limit, q.wait), (7, 3, Duration::from_secs(25)));
        let q = parse_feed_query(Some("wait=3.7e307"), 25).expect("huge wait");
        assert_eq!(q.wait, Duration::from_secs(25));
        assert_eq!(
            parse_feed_query(Some("wait=0.5"), 0).expect("valid").wait,
            Duration::ZERO
        );
        for bad in [
            "after=-1",
            "limit=0",
            "limit=101",
            "wait=-1",
            "wait=1e400",
            "wait=inf",
            "after=1&after=2",
        ] {
            assert!(parse_feed_query(Some(bad), 25).is_err(), "{bad}");
        }
    }

    #[test]
    fn if_match() {
        let mut h = HeaderMap::new();
        assert_eq!(expected_revision(&h, Some(3)), Ok(Some(3)));
        h.insert(header::IF_MATCH, "\"7\"".parse().expect("header"));
        assert_eq!(expected_revision(&h, None), Ok(Some(7)));
        assert_eq!(expected_revision(&h, Some(7)), Ok(Some(7)));
        assert!(expected_revision(&h, Some(8)).is_err());
        h.insert(header::IF_MATCH, "*".parse().expect("header"));
        assert!(expected_revision(&h, None).is_err());
    }
}
