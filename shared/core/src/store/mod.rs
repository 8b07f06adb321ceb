//! The Store: every operation of the contract as ONE atomic step, so that each backend can do it
//! natively (one SQLite transaction; one DynamoDB `TransactWriteItems`).
//!
//! Stores know nothing of HTTP and never check tokens; the API layer authenticates with
//! [`Addresses::get_address`] and then calls one operation, which re-checks that the address is
//! alive inside its own atomic step. Every backend passes the [`conformance`] suite.

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "conformance")]
pub mod email_conformance;
#[cfg(feature = "conformance")]
pub mod hook_conformance;
mod hook_records;
mod mail_records;
#[cfg(feature = "conformance")]
pub mod outbound_conformance;
#[cfg(feature = "conformance")]
pub mod request_conformance;
pub mod rules;
mod signal;
#[cfg(feature = "conformance")]
pub mod timer_conformance;
mod timer_records;
#[cfg(feature = "conformance")]
pub mod viewer_conformance;

use async_trait::async_trait;

use crate::domain::email_policy::EmailPolicy;
use crate::domain::request::{self, CommentMode, RequestStatus};
use crate::domain::verification::VerificationConfig;
use crate::domain::{Ingress, Limits, Millis};
pub use hook_records::{
    hook_types, DueHooks, HookDelivery, HookRecord, HookStatus, Hooks, NewHook,
};
pub use mail_records::{
    CodeCheck, CodeIssued, CodeMailCap, ContactRecord, NewCode, NewSend, OutboundMessage,
    SendOutcome, SendRecord, SendRecorded,
};
pub use signal::FeedSignal;
pub use timer_records::{CancelOutcome, CreatedTimer, NewTimer, TimerRecord, TimerStatus, Timers};

/// Meaning-based failures of a store operation. The API maps each to one code of docs/API.md §9.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store's truth; the API answers it 401 `unauthorized`, like a wrong token, so that
    /// nobody can tell an unknown address from a known one (docs/API.md §0).
    #[error("no such address")]
    AddressNotFound,
    #[error("the address was deleted or has expired")]
    AddressGone,
    #[error("no such event or state key")]
    NotFound,
    #[error("revision conflict (current revision {current:?})")]
    RevisionConflict { current: Option<u64> },
    #[error("the feed holds its maximum of retained events")]
    QuotaExceeded,
    #[error("the state limits would be exceeded")]
    StateLimitExceeded,
    #[error("the idempotency key was used with a different body")]
    IdempotencyKeyReused,
    #[error("an address with this id already exists")]
    AddressExists,
    /// The address's stored email messages would pass `max_stored_email_bytes`.
    #[error("the address's stored messages would exceed their limit")]
    EmailStorageFull,
    /// The event is an email whose stored message is gone (removed, or never kept).
    #[error("the stored message is gone")]
    EmailUnavailable,
    /// A send to an address that is not a confirmed contact (docs/API.md §16).
    #[error("the recipient is not a confirmed contact")]
    ContactNotConfirmed,
    /// A daily limit is reached (docs/API.md §16); it resets in `retry_after_seconds`.
    #[error("a daily limit is reached (retry in {retry_after_seconds} s)")]
    DailyLimit { retry_after_seconds: u64 },
    /// A server-wide daily cap on code mails is reached (docs/API.md §16): the recipient
    /// mailbox's or the asking client's; it resets in `retry_after_seconds`.
    #[error("a daily cap on code mails is reached ({cap:?}; retry in {retry_after_seconds} s)")]
    CodeMailCap {
        cap: CodeMailCap,
        retry_after_seconds: u64,
    },
    /// This store does not implement the operation (yet); answered as 501 `not_supported`.
    #[error("not supported by this store: {0}")]
    NotSupported(&'static str),
    /// Throttled, or the outcome is unknown; the caller may retry safely.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A bug or corrupted data; details go to the log only.
    #[error("store failure: {0}")]
    Internal(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A new address; secrets arrive hashed.
#[derive(Debug, Clone)]
pub struct NewAddress {
    pub id: String,
    pub name: Option<String>,
    pub task_id: Option<String>,
    pub email: String,
    pub created_at: Millis,
    pub expires_at: Option<Millis>,
    pub token_hash: String,
    pub inbox_hash: String,
    /// The signing secret its deliveries are verified with (docs/API.md §15), if any.
    pub verification: Option<VerificationConfig>,
    /// The sender rules of its inbound email (docs/API.md §10, "Sender rules"), if any.
    pub email_policy: Option<EmailPolicy>,
    /// Wake hooks made with it, in the same atomic step (docs/API.md §19), each with its
    /// cursor at 0.
    pub hooks: Vec<NewHook>,
}

/// An address as stored, tombstones included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressRecord {
    pub id: String,
    pub name: Option<String>,
    pub task_id: Option<String>,
    pub email: String,
    pub created_at: Millis,
    pub expires_at: Option<Millis>,
    pub deleted_at: Option<Millis>,
    pub token_hash: String,
    pub inbox_hash: String,
    pub last_sequence: u64,
    pub state_keys: u64,
    pub state_bytes: u64,
    /// The earliest `expires_at` of the address's open requests (docs/API.md §12): a feed read
    /// at or after it first appends the due `request.expired` events
    /// ([`Requests::expire_requests`]).
    pub next_request_expiry: Option<Millis>,
    /// The earliest `fire_at` of the address's pending timers (docs/API.md §20): a feed read at
    /// or after it first fires the due timers ([`Timers::fire_timers`]).
    pub next_timer_at: Option<Millis>,
    /// The signing secret its deliveries are verified with (docs/API.md §15), if any. Its
    /// secret is stored as given (it must be usable) and never shown ([`VerificationConfig`]).
    pub verification: Option<VerificationConfig>,
    /// The sender rules of its inbound email (docs/API.md §10, "Sender rules"), if any.
    pub email_policy: Option<EmailPolicy>,
    /// How many messages its sender rules refused ([`Addresses::count_email_refusal`]):
    /// `email.refused_count` of `GET {root}`.
    pub email_refused: u64,
    /// The patterns of its active wake hooks ([`hook_types`]): an append of an event they wake
    /// for (`crate::domain::hooks::TypePatterns::wakes`) tells the wake machine.
    pub hook_types: Vec<String>,
}

impl AddressRecord {
    /// Deleted, or expired: from the second it expires, whatever a sweeper has done yet.
    pub fn is_gone(&self, now: Millis) -> bool {
        self.deleted_at.is_some() || self.expires_at.is_some_and(|e| e <= now)
    }

    /// When something of this address next falls due: a request's expiry or a timer
    /// ([`Timers::append_due`]). A wait on the feed ends by then.
    pub fn next_due(&self) -> Option<Millis> {
        match (self.next_request_expiry, self.next_timer_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `GET {root}` usage figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub last_sequence: u64,
    pub retained_events: u64,
    pub state_keys: u64,
    pub state_bytes: u64,
}

/// An event to append; the store assigns sequence, id and time.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_type: String,
    pub source: Option<String>,
    pub ingress: Ingress,
    /// Compact JSON text.
    pub data: String,
    /// Compact JSON text of the `http` record (HTTP ingress only).
    pub http: Option<String>,
}

/// An inbound email to append: its event, and the raw message stored with it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEmail {
    /// The email's idempotency key (docs/API.md §10), unique per address among retained events.
    pub email_id: String,
    /// The message as received (RFC 822 bytes).
    pub raw: Vec<u8>,
    /// The `email.received` event.
    pub event: NewEvent,
}

/// A stored message and the event it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEmail {
    pub email_id: String,
    pub event: EventRef,
    pub raw: Vec<u8>,
}

/// A download of part of a stored message (the raw message, or one attachment decoded), as
/// the API answers it (docs/API.md §11).
#[derive(Debug, Clone, Copy)]
pub struct Download<'a> {
    pub content_type: &'a str,
    /// The `Content-Disposition` header's value.
    pub disposition: &'a str,
    pub bytes: &'a [u8],
}

/// Where a client fetches a [`Download`] the deployment does not answer itself: a URL that
/// needs no token, valid for `valid_for` from when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadLink {
    pub url: String,
    pub valid_for: std::time::Duration,
}

/// A new request for a person (docs/API.md §12); its secret arrives hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRequest {
    pub id: String,
    pub title: String,
    /// Markdown, as the agent wrote it (the page sanitises it when rendering).
    pub body: Option<String>,
    pub options: Vec<String>,
    pub comment: CommentMode,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub secret_hash: String,
    /// The `Idempotency-Key` of the creation, if any.
    pub claim: Option<IdempotencyClaim>,
}

/// A person's answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub choice: String,
    pub comment: Option<String>,
    pub answered_at: Millis,
}

/// A request as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub id: String,
    pub address_id: String,
    pub title: String,
    pub body: Option<String>,
    pub options: Vec<String>,
    pub comment: CommentMode,
    pub created_at: Millis,
    pub expires_at: Millis,
    pub secret_hash: String,
    /// As stored: an open request past its expiry may not be marked expired yet; see
    /// [`RequestRecord::status_at`].
    pub status: RequestStatus,
    pub answer: Option<Answer>,
}

impl RequestRecord {
    /// The status at `now` ([`crate::domain::request::status_at`]).
    pub fn status_at(&self, now: Millis) -> RequestStatus {
        request::status_at(self.status, self.expires_at, now)
    }
}

/// The store's traits, for code that calls a [`Store`]'s methods:
/// `use agentaddress_core::store::prelude::*;` (a store implements them by name).
pub mod prelude {
    pub use super::{
        Addresses as _, Backend as _, Contacts as _, Emails as _, Feed as _, Hooks as _,
        RateLimits as _, Requests as _, Sends as _, States as _, Store, Timers as _,
        ViewerCodes as _,
    };
}

/// What [`Requests::create_request`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedRequest {
    pub request: RequestRecord,
    /// `true` when an earlier creation with the same Idempotency-Key made `request`.
    pub duplicate: bool,
}

/// What [`Requests::answer_request`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// This answer closed the request and appended its `request.answered` event.
    Answered {
        request: RequestRecord,
        event: EventRef,
    },
    /// The request was closed already (answered, or expired): nothing changed.
    Closed(RequestRecord),
}

/// An idempotency claim: the SHA-256 of the key and of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyClaim {
    pub key_hash: String,
    pub body_hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRef {
    pub id: String,
    pub sequence: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub event: EventRef,
    /// `true` when an earlier delivery with the same idempotency key produced `event`.
    pub duplicate: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub sequence: u64,
    pub event_type: String,
    pub source: Option<String>,
    pub ingress: Ingress,
    pub received_at: Millis,
    pub acknowledged_at: Option<Millis>,
    pub data: String,
    pub http: Option<String>,
}

impl Event {
    /// Bytes this event takes in a page (its stored JSON plus a bound on the metadata), used to
    /// cut pages at the byte limit.
    pub fn page_bytes(&self) -> u64 {
        (self.data.len()
            + self.http.as_ref().map_or(0, String::len)
            + self.event_type.len()
            + self.source.as_ref().map_or(0, String::len)
            + self.id.len()
            + 256) as u64
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// More events follow the last one returned.
    pub has_more: bool,
}

/// Which events a filtered read returns (docs/API.md §21): those whose type matches `types`,
/// among at most `examine` events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeFilter {
    pub types: crate::domain::patterns::TypePatterns,
    /// Most events one read examines, matching or not.
    pub examine: usize,
}

/// Most events a filtered read examines (docs/API.md §21).
pub const MAX_EXAMINED: usize = 1_000;

impl TypeFilter {
    /// `types` among at most [`MAX_EXAMINED`] events.
    pub fn new(types: crate::domain::patterns::TypePatterns) -> Self {
        Self {
            types,
            examine: MAX_EXAMINED,
        }
    }
}

/// A page of a filtered read ([`Feed::read_matching`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MatchingPage {
    /// The matching events; `has_more`: events follow `examined_through`.
    pub page: EventPage,
    /// The last sequence examined (`after` when none was): the next read starts after it, so
    /// that a reader passes over the events that did not match. When the page was cut at its
    /// `limit` or `max_bytes`, the last one examined before the first matching event left out.
    pub examined_through: u64,
}

impl MatchingPage {
    /// A page of every event after `after`, as a filtered one: examined through its last
    /// event (`after` when empty).
    pub fn all(page: EventPage, after: u64) -> Self {
        let examined_through = page.events.last().map_or(after, |e| e.sequence);
        Self {
            page,
            examined_through,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub event: EventRef,
    pub acknowledged_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMeta {
    pub key: String,
    pub revision: u64,
    pub size: u64,
    pub updated_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateListing {
    pub keys: Vec<StateMeta>,
    pub state_keys: u64,
    pub state_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateEntry {
    pub key: String,
    /// Compact JSON text.
    pub value: String,
    pub revision: u64,
    pub updated_at: Millis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWritten {
    pub entry: StateEntry,
    pub event: EventRef,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDeleted {
    pub key: String,
    /// The sequence of the `state.deleted` event.
    pub revision: u64,
    pub event: EventRef,
}

/// A one-time sign-in code of the inbox viewer (docs/API.md §13, "Sign-in links"), as the store
/// keeps it: the code's hash and the read token sealed under a key only the code gives
/// ([`crate::domain::viewer`]); never the code or the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewViewerCode {
    /// [`crate::domain::viewer::code_hash`] of the code.
    pub code_hash: String,
    /// [`crate::domain::viewer::seal_token`] of the read token.
    pub sealed_token: String,
    pub created_at: Millis,
    pub expires_at: Millis,
}

/// A viewer code [`ViewerCodes::redeem_viewer_code`] answered (once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedeemedViewerCode {
    pub address_id: String,
    pub sealed_token: String,
    pub expires_at: Millis,
}

/// What a sweep removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub events: u64,
    pub addresses_purged: u64,
    pub tombstones: u64,
}

/// The durable store behind the API.
///
/// Every method is one atomic step. Methods taking `id` answer [`StoreError::AddressNotFound`]
/// for an unknown address and [`StoreError::AddressGone`] for a deleted or expired one (judged at
/// `now`), checked inside the same atomic step as the operation itself.
pub trait Store:
    Backend
    + Addresses
    + Feed
    + Emails
    + Requests
    + Contacts
    + Sends
    + ViewerCodes
    + States
    + RateLimits
    + Hooks
    + Timers
{
}

impl<T> Store for T where
    T: Backend
        + Addresses
        + Feed
        + Emails
        + Requests
        + Contacts
        + Sends
        + ViewerCodes
        + States
        + RateLimits
        + Hooks
        + Timers
{
}

/// What a store is and how it keeps itself: its name, its wake-up signal, its sweep. Part of [`Store`].
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// `"sqlite"` or `"dynamodb"`, for `/healthz`.
    fn kind(&self) -> &'static str;

    /// A wake-up signal fired after every commit that appends to a feed, if the backend has one
    /// (in-process stores do). Without it, long polls fall back to a bounded query loop.
    fn feed_signal(&self) -> Option<&FeedSignal> {
        None
    }

    /// Removes what has expired: events past retention, data of expired addresses, and
    /// tombstones older than `limits.tombstone_seconds`. Reads never depend on it having run.
    async fn sweep(&self, limits: &Limits, now: Millis) -> StoreResult<SweepReport>;
}

/// Addresses: created, read, configured, deleted (docs/API.md §1, §2, §15). Part of [`Store`].
#[async_trait]
pub trait Addresses: Send + Sync + 'static {
    /// Stores a new address with sequence 0 and no state, and its email key
    /// ([`crate::domain::ids::email_key`] of `email`) in the same atomic step.
    /// [`StoreError::AddressExists`] if the id is taken, or the email key is another address's
    /// (ids differing only by case).
    async fn create_address(&self, address: NewAddress) -> StoreResult<()>;

    /// The address as stored, tombstones included; `None` once it is forgotten (its tombstone
    /// period over at `now`, or swept). No liveness check: callers authenticate with it and
    /// judge [`AddressRecord::is_gone`] themselves.
    async fn get_address(&self, id: &str, now: Millis) -> StoreResult<Option<AddressRecord>>;

    /// The address whose email key is [`crate::domain::ids::email_key`] of `email` (an email
    /// address as received, in any case), as [`Addresses::get_address`] answers it: tombstones
    /// (deleted or expired addresses) included, `None` once forgotten, and no liveness check
    /// (callers judge [`AddressRecord::is_gone`]). A store whose addresses may predate email
    /// keys documents how it finds those (DynamoDB: by the local part as the id, exact case).
    async fn address_by_email(
        &self, email: &str, now: Millis,
    ) -> StoreResult<Option<AddressRecord>>;

    /// Sets (`Some`) or removes (`None`) the live address's verification (docs/API.md §15),
    /// replacing any earlier one: the next delivery is verified with it.
    async fn set_verification(
        &self, id: &str, verification: Option<VerificationConfig>, now: Millis,
    ) -> StoreResult<()>;

    /// Sets (`Some`) or removes (`None`) the live address's sender rules (docs/API.md §10,
    /// "Sender rules"), replacing any earlier ones: the next message is judged by them. Its
    /// refusal count stays.
    async fn set_email_policy(
        &self, id: &str, policy: Option<EmailPolicy>, now: Millis,
    ) -> StoreResult<()>;

    /// Counts one message the live address's sender rules refused
    /// ([`AddressRecord::email_refused`]), atomically: concurrent refusals each count.
    async fn count_email_refusal(&self, id: &str, now: Millis) -> StoreResult<()>;

    /// Usage figures of a live address.
    async fn usage(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<Usage>;

    /// Marks the address deleted (a tombstone that keeps the hashes) and removes, or schedules
    /// the removal of, all its events, state and idempotency records. From this call on, no
    /// operation reads or writes its data.
    async fn delete_address(&self, id: &str, now: Millis) -> StoreResult<()>;
}

/// An address's feed: appends, reads, acknowledgements (docs/API.md §3–§5). Part of [`Store`].
#[async_trait]
pub trait Feed: Send + Sync + 'static {
    /// Appends an event with the next sequence, atomically with its idempotency record.
    /// With a claim whose key was seen on a still-retained event: the same body hash returns
    /// that event with `duplicate: true` and appends nothing; another body is
    /// [`StoreError::IdempotencyKeyReused`]. A feed holding `max_retained_events` unexpired
    /// events is [`StoreError::QuotaExceeded`].
    async fn append_event(
        &self, id: &str, event: NewEvent, claim: Option<IdempotencyClaim>, limits: &Limits,
        now: Millis,
    ) -> StoreResult<Appended>;

    /// Unexpired events with `sequence > after`, ascending, at most `limit`, cut before
    /// `max_bytes` of [`Event::page_bytes`] but never empty when an event is available.
    async fn read_events(
        &self, id: &str, after: u64, limit: usize, max_bytes: u64, now: Millis,
    ) -> StoreResult<EventPage>;

    /// [`Feed::read_events`] of the events whose type matches `filter.types`, examining at
    /// most `filter.examine` unexpired events after `after` ([`MatchingPage`]).
    async fn read_matching(
        &self, id: &str, after: u64, filter: &TypeFilter, limit: usize, max_bytes: u64, now: Millis,
    ) -> StoreResult<MatchingPage>;

    /// One unexpired event by id, else [`StoreError::NotFound`].
    async fn get_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Event>;

    /// Records the first acknowledgement of an event and returns it; acking again keeps the
    /// first time. [`StoreError::NotFound`] for an unknown or expired event.
    async fn ack_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Acked>;

    /// The sequence of the last event appended (0 if none): a cheap check for long polls.
    async fn last_sequence(&self, id: &str, now: Millis) -> StoreResult<u64>;

    /// [`Feed::last_sequence`] as a hint that may lag behind a write by a moment (an
    /// eventually consistent read on DynamoDB: half the read units). Long polls use it only to
    /// decide when to read the feed again, with a consistent read.
    async fn feed_head_hint(&self, id: &str, now: Millis) -> StoreResult<u64> {
        self.last_sequence(id, now).await
    }
}

/// Received email kept with its event (docs/API.md §10, §11). Part of [`Store`].
#[async_trait]
pub trait Emails: Send + Sync + 'static {
    /// Appends an `email.received` event and stores the raw message with it, in one atomic step
    /// (both or neither). Idempotent on `email.email_id`: when a retained event of this address
    /// came from the same `email_id`, returns it with `duplicate: true` and stores nothing. The
    /// feed quota is [`StoreError::QuotaExceeded`]; the raw bytes of the address's retained
    /// messages passing `limits.max_stored_email_bytes` is [`StoreError::EmailStorageFull`].
    /// The stored message follows its event: removed with it at retention, at address deletion
    /// and at expiry.
    async fn append_email(
        &self, id: &str, email: NewEmail, limits: &Limits, now: Millis,
    ) -> StoreResult<Appended>;

    /// The stored message of the retained event `event_id`. [`StoreError::NotFound`] for an
    /// unknown or expired event; [`StoreError::EmailUnavailable`] when the event has no stored
    /// message (not an email, or its message is gone).
    async fn email_of_event(
        &self, id: &str, event_id: &str, now: Millis,
    ) -> StoreResult<StoredEmail>;

    /// The stored message `email_id` of this address, with its event, while that event is
    /// retained; else [`StoreError::NotFound`].
    async fn email_by_id(&self, id: &str, email_id: &str, now: Millis) -> StoreResult<StoredEmail>;

    /// Where a client fetches `download`, part of the stored message `email_id` of address `id`,
    /// when it is too large for this deployment to answer itself (on AWS, Lambda answers at most
    /// 6 MB): a short-lived URL that needs no token and answers it with the same content type
    /// and disposition. `None`, the default: the bytes are answered directly.
    async fn download_link(
        &self, id: &str, email_id: &str, download: &Download<'_>,
    ) -> StoreResult<Option<DownloadLink>> {
        let _ = (id, email_id, download);
        Ok(None)
    }

    /// A received message that no delivery has taken yet, held where the provider put it under
    /// its `email_id` (on AWS: the object SES wrote, until the `email` function delivers it) —
    /// what replay (docs/API.md §11) re-ingests when its event is missing. `None` when there is
    /// none; the embedded store delivers as it receives, so it never holds one.
    async fn pending_email(&self, email_id: &str) -> StoreResult<Option<Vec<u8>>> {
        let _ = email_id;
        Ok(None)
    }
}

/// Requests for a person (docs/API.md §12). Part of [`Store`].
#[async_trait]
pub trait Requests: Send + Sync + 'static {
    /// Stores a new open request of address `id` (docs/API.md §12). With a claim whose key an
    /// earlier request of this address holds: the same body hash returns that request with
    /// `duplicate: true` and stores nothing; another body is
    /// [`StoreError::IdempotencyKeyReused`]. An address with `limits.max_open_requests` open
    /// requests (unexpired at `now`) is [`StoreError::QuotaExceeded`]. Keeps
    /// [`AddressRecord::next_request_expiry`] the earliest open expiry.
    async fn create_request(
        &self, id: &str, request: NewRequest, limits: &Limits, now: Millis,
    ) -> StoreResult<CreatedRequest>;

    /// Request `request_id` of address `id`, else [`StoreError::NotFound`] (another address's
    /// request too).
    async fn get_request(
        &self, id: &str, request_id: &str, now: Millis,
    ) -> StoreResult<RequestRecord>;

    /// Request `request_id` of any live address (for its page, whose caller checks the
    /// secret); `None` when there is none or its address is gone.
    async fn find_request(
        &self, request_id: &str, now: Millis,
    ) -> StoreResult<Option<RequestRecord>>;

    /// Answers request `request_id` with `answer` (already checked against the request by
    /// [`crate::domain::request::check_answer`]) in one atomic step: when the request is open
    /// and unexpired at `now`, marks it answered and appends its `request.answered` event;
    /// otherwise changes nothing and returns [`AnswerOutcome::Closed`] — under concurrent
    /// answers exactly one wins. [`StoreError::NotFound`] for an unknown request or a gone
    /// address; [`StoreError::QuotaExceeded`] when the feed is full.
    async fn answer_request(
        &self, request_id: &str, answer: Answer, limits: &Limits, now: Millis,
    ) -> StoreResult<AnswerOutcome>;

    /// Appends `request.expired` for each open request of address `id` whose expiry is at or
    /// before `now` and marks it expired, each conditioned on its still being open (two
    /// concurrent callers append each expiry once); updates
    /// [`AddressRecord::next_request_expiry`]. Returns how many it expired. A full feed leaves
    /// the rest open (they read as expired) for a later call. Callers go through
    /// [`Timers::append_due`], the feed's order rule for everything that falls due.
    async fn expire_requests(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64> {
        let _ = (id, limits, now);
        Ok(0)
    }
}

/// An address's email contacts and their confirmation codes (docs/API.md §16). Part of [`Store`].
#[async_trait]
pub trait Contacts: Send + Sync + 'static {
    /// The contacts of address `id` (docs/API.md §16), sorted by email.
    async fn list_contacts(&self, id: &str, now: Millis) -> StoreResult<Vec<ContactRecord>>;

    /// Stores a new code for contact `code.email` of address `id`, creating it pending when new,
    /// in one atomic step: the code replaces any earlier one and its tries start at 0. A
    /// confirmed contact is [`CodeIssued::AlreadyConfirmed`] and changes nothing. A new contact
    /// beyond `limits.max_contacts` is [`StoreError::QuotaExceeded`]; a fourth code on one UTC
    /// day ([`crate::domain::mail_out::CODE_MAILS_PER_DAY`]) is [`StoreError::DailyLimit`].
    /// The same step counts the code against two server-wide daily counts (each UTC day's,
    /// whatever the address): the recipient mailbox's
    /// ([`crate::domain::mail_out::code_mails_to_scope`]) and the asking client's
    /// ([`crate::domain::mail_out::code_mails_from_scope`] of `code.client`); one already at
    /// `limits.code_mails_per_recipient_per_day` or `limits.code_mails_per_client_per_day` is
    /// [`StoreError::CodeMailCap`], checked in that order after the contact's own limits. A
    /// refusal changes nothing, counts included.
    async fn issue_contact_code(
        &self, id: &str, code: NewCode, limits: &Limits, now: Millis,
    ) -> StoreResult<CodeIssued>;

    /// Tries `code_hash` against contact `email`'s current code, in one atomic step that counts
    /// the try: under concurrent tries at most [`crate::domain::mail_out::CODE_TRIES`] are
    /// compared. The hashes are compared in constant time. [`StoreError::NotFound`] for an
    /// unknown contact.
    async fn check_contact_code(
        &self, id: &str, email: &str, code_hash: &str, now: Millis,
    ) -> StoreResult<CodeCheck>;
}

/// Email an address sends to its contacts, and its delivery state (docs/API.md §16). Part of [`Store`].
#[async_trait]
pub trait Sends: Send + Sync + 'static {
    /// Records a send and appends its `email.sent` event in one atomic step, before anything is
    /// mailed. In order: a claim whose key an earlier send of this address holds answers that
    /// send (`duplicate`, same body hash) or [`StoreError::IdempotencyKeyReused`]; a recipient
    /// that is not a confirmed contact is [`StoreError::ContactNotConfirmed`]; the
    /// `limits.sends_per_day`-th send of the UTC day is [`StoreError::DailyLimit`]; a feed
    /// without two free slots (the send and its answer) is [`StoreError::QuotaExceeded`]. The
    /// send is pending, due now.
    async fn record_send(
        &self, id: &str, send: NewSend, limits: &Limits, now: Millis,
    ) -> StoreResult<SendRecorded>;

    /// Claims send `send_id` of address `id` for one delivery attempt: when it is pending, due
    /// at `now` and no other attempt holds it, counts the attempt, holds it until `lease_until`
    /// and returns it; else `None` (sent, failed, not due, or held). An attempt that never
    /// finishes (a crash) lets the send be claimed again after its lease. The address gone is
    /// [`StoreError::AddressGone`]: nothing is sent for it.
    async fn claim_send(
        &self, id: &str, send_id: &str, lease_until: Millis, now: Millis,
    ) -> StoreResult<Option<SendRecord>>;

    /// Send `send_id` of address `id` as stored, whatever its state (`None` when there is no
    /// such send): what a queue consumer reads when [`Sends::claim_send`] took nothing, to know
    /// whether the send is done or when to look again.
    async fn get_send(
        &self, id: &str, send_id: &str, now: Millis,
    ) -> StoreResult<Option<SendRecord>>;

    /// Ends the attempt on a claimed send with `outcome`, in one atomic step (a failure with its
    /// `email.send_failed` event). Only a pending send changes.
    async fn finish_send(
        &self, id: &str, send_id: &str, outcome: SendOutcome, limits: &Limits, now: Millis,
    ) -> StoreResult<()>;

    /// Pending sends of live addresses due at `now` and not held, oldest first, at most `limit`,
    /// as (address id, send id): what the embedded deployment's delivery loop attempts. Stores
    /// whose sends are driven by a queue (DynamoDB: the send queue) answer none.
    async fn due_sends(&self, now: Millis, limit: usize) -> StoreResult<Vec<(String, String)>> {
        let _ = (now, limit);
        Ok(Vec::new())
    }
}

/// The viewer's one-time sign-in codes (docs/API.md §13). Part of [`Store`].
#[async_trait]
pub trait ViewerCodes: Send + Sync + 'static {
    /// Stores a viewer sign-in code of the live address `id` (docs/API.md §13, "Sign-in
    /// links"), redeemable until `code.expires_at`.
    async fn create_viewer_code(
        &self, id: &str, code: NewViewerCode, now: Millis,
    ) -> StoreResult<()>;

    /// Redeems the viewer code whose hash is `code_hash`, in one atomic step: an unused code
    /// unexpired at `now` is marked used and answered; an unknown, used or expired one is
    /// `None`, all alike. Under concurrent redeems of one code exactly one gets it. No check of
    /// the address: the caller judges it ([`Addresses::get_address`]).
    async fn redeem_viewer_code(
        &self, code_hash: &str, now: Millis,
    ) -> StoreResult<Option<RedeemedViewerCode>>;
}

/// An address's state keys, each write committed with its event (docs/API.md §6, §7). Part of [`Store`].
#[async_trait]
pub trait States: Send + Sync + 'static {
    /// Every state key's metadata, sorted by key, with the totals.
    async fn list_state(&self, id: &str, now: Millis) -> StoreResult<StateListing>;

    /// One key's value, else [`StoreError::NotFound`].
    async fn get_state(&self, id: &str, key: &str, now: Millis) -> StoreResult<StateEntry>;

    /// Writes `value` (compact JSON) under `key` and appends its `state.updated` event in the
    /// same atomic step; the new revision is that event's sequence.
    /// `expected`: `None` unconditional, `Some(0)` only if absent, `Some(n)` only if the current
    /// revision is `n`, else [`StoreError::RevisionConflict`] with the current revision.
    /// [`StoreError::StateLimitExceeded`] if the key count or bytes would pass the limits;
    /// [`StoreError::QuotaExceeded`] if the feed is full.
    async fn put_state(
        &self, id: &str, key: &str, value: String, expected: Option<u64>, limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateWritten>;

    /// Deletes `key` and appends its `state.deleted` event in the same atomic step.
    /// [`StoreError::NotFound`] if absent; `expected` as for [`States::put_state`].
    async fn delete_state(
        &self, id: &str, key: &str, expected: Option<u64>, limits: &Limits, now: Millis,
    ) -> StoreResult<StateDeleted>;
}

/// Fixed-window rate limits (docs/API.md §8). Part of [`Store`].
#[async_trait]
pub trait RateLimits: Send + Sync + 'static {
    /// Counts one hit in the fixed one-minute window of `scope`. `Ok(None)` when within `limit`;
    /// `Ok(Some(seconds))` when over it, with the seconds until the window ends (at least 1).
    async fn hit_rate_limit(
        &self, scope: &str, limit: u64, now: Millis,
    ) -> StoreResult<Option<u64>>;

    /// Takes one of `cap` waiting slots until `until` (docs/API.md §6, "Waiting polls": a
    /// deployment may cap the long polls waiting at once, so that waiting never takes the
    /// capacity deliveries need). `Ok(Some(slot))`: hand it back with
    /// [`RateLimits::release_wait_slot`] when the wait ends; `Ok(None)`: every slot is held.
    /// A slot never released (a process that died) frees itself at `until`. The cap is exact
    /// on one process; a store shared by many processes may refuse a little before it (its
    /// slots are kept in shards, each with its share of the cap).
    async fn acquire_wait_slot(
        &self, cap: u64, until: Millis, now: Millis,
    ) -> StoreResult<Option<String>>;

    /// Hands back a slot of [`RateLimits::acquire_wait_slot`] (one already freed: nothing).
    async fn release_wait_slot(&self, slot: &str) -> StoreResult<()>;
}
