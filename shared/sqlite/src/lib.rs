//! The embedded store: SQLite in WAL mode, `synchronous=FULL` by default, so a 2xx means the
//! change is on disk.
//!
//! One writer thread owns the only write connection. Requests reach it over a channel and it
//! commits whatever has queued up in ONE transaction (group commit), each request inside its
//! own savepoint so one request's failure never touches another's. Results are sent only after
//! COMMIT returns. Readers use their own connections (on a file) and see only committed data.
//! An in-memory database has no second connection, so its reads go through the writer.
//!
//! ## Where things are
//! - `connections`: the writer thread (group commit, savepoints) and the readers;
//! - `schema`: the tables and their migrations;
//! - `rows`: column lists, rows mapped to records, loading a live address, SQL errors;
//! - `addresses`: create, read, usage, delete;
//! - `email`: stored email messages with their events, read by event or by `email_id`;
//! - `events`: deliveries, feed pages, one event, acks, the last sequence;
//! - `state`: state keys (list, get, put, delete);
//! - `append`: appending an event (every delivery and state write) and the feed quota;
//! - `purge`: purging deleted addresses and the sweep of expired data;
//! - `rate_limit`: rate-limit counters;
//! - `viewer`: the inbox viewer's one-time sign-in codes.
//!
//! This file holds the options, [`SqliteStore`] and its constructors, and the `Store` impl, each
//! of whose methods is implemented in the module of its job.
#![forbid(unsafe_code)]

use agentaddress_core::{domain, metrics, store};

mod addresses;
mod append;
mod backup;
mod connections;
mod contacts;
mod email;
mod events;
mod purge;
mod rate_limit;
mod requests;
mod rows;
mod schema;
mod sends;
mod state;
mod viewer;

pub use backup::{backup, BackupError, BackupReport};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use async_trait::async_trait;
use rusqlite::Connection;

use crate::connections::Job;
use crate::domain::{Limits, Millis};
use crate::rows::sql_err;
use crate::store::{
    Acked, AddressRecord, Answer, AnswerOutcome, Appended, CodeCheck, CodeIssued, ContactRecord,
    CreatedRequest, Event, EventPage, FeedSignal, IdempotencyClaim, NewAddress, NewCode, NewEmail,
    NewEvent, NewRequest, NewSend, NewViewerCode, RedeemedViewerCode, RequestRecord, SendOutcome,
    SendRecord, SendRecorded, StateDeleted, StateEntry, StateListing, StateWritten, Store,
    StoreError, StoreResult, StoredEmail, SweepReport, Usage,
};

/// Most requests committed in one transaction (group commit).
pub const MAX_GROUP: usize = 256;

/// Tuning of the embedded store. The defaults are what `agentaddress serve` ships; the other
/// settings exist so `scripts/bench` can measure what each optimisation buys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteOptions {
    pub synchronous: Synchronous,
    /// Most write requests committed in one transaction; 1 turns group commit off.
    pub max_group: usize,
    /// Whether a commit wakes waiting long polls directly (else they re-read with backoff).
    pub wakeups: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Full,
            max_group: MAX_GROUP,
            wakeups: true,
        }
    }
}

/// How hard SQLite syncs. `Full` (the default) makes every acknowledged write survive power
/// loss; `Normal` survives process crashes only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Synchronous {
    #[default]
    Full,
    Normal,
}

struct Inner {
    writer: Mutex<mpsc::Sender<Job>>,
    path: Option<PathBuf>,
    readers: Mutex<Vec<Connection>>,
    reader_slots: Arc<tokio::sync::Semaphore>,
    signal: FeedSignal,
    wakeups: bool,
    rate: Mutex<HashMap<String, (i64, u64)>>,
}

/// See the module docs.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating and migrating as needed) the database file at `path`.
    pub fn open(path: &Path, synchronous: Synchronous) -> StoreResult<Self> {
        Self::open_with(
            path,
            SqliteOptions {
                synchronous,
                ..SqliteOptions::default()
            },
        )
    }

    /// [`SqliteStore::open`] with every tuning option.
    pub fn open_with(path: &Path, options: SqliteOptions) -> StoreResult<Self> {
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Internal(format!("cannot open {}: {e}", path.display())))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(sql_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Internal(format!(
                "{} does not support WAL mode (got {mode})",
                path.display()
            )));
        }
        Self::start(conn, Some(path.to_path_buf()), options)
    }

    /// A private in-memory database: the test double, running the same SQL.
    pub fn open_in_memory() -> StoreResult<Self> {
        let conn = Connection::open_in_memory().map_err(sql_err)?;
        Self::start(conn, None, SqliteOptions::default())
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn feed_signal(&self) -> Option<&FeedSignal> {
        self.inner.wakeups.then_some(&self.inner.signal)
    }

    async fn create_address(&self, a: NewAddress) -> StoreResult<()> {
        self.create_address_impl(a).await
    }

    async fn get_address(&self, id: &str, now: Millis) -> StoreResult<Option<AddressRecord>> {
        self.get_address_impl(id, now).await
    }

    async fn address_by_email(
        &self,
        email: &str,
        now: Millis,
    ) -> StoreResult<Option<AddressRecord>> {
        self.address_by_email_impl(email, now).await
    }

    async fn usage(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<Usage> {
        self.usage_impl(id, limits, now).await
    }

    async fn set_verification(
        &self,
        id: &str,
        verification: Option<domain::verification::VerificationConfig>,
        now: Millis,
    ) -> StoreResult<()> {
        self.set_verification_impl(id, verification, now).await
    }

    async fn delete_address(&self, id: &str, now: Millis) -> StoreResult<()> {
        self.delete_address_impl(id, now).await
    }

    async fn append_event(
        &self,
        id: &str,
        event: NewEvent,
        claim: Option<IdempotencyClaim>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<Appended> {
        self.append_event_impl(id, event, claim, limits, now).await
    }

    async fn append_email(
        &self,
        id: &str,
        email: NewEmail,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<Appended> {
        self.append_email_impl(id, email, limits, now).await
    }

    async fn email_of_event(
        &self,
        id: &str,
        event_id: &str,
        now: Millis,
    ) -> StoreResult<StoredEmail> {
        self.email_of_event_impl(id, event_id, now).await
    }

    async fn email_by_id(&self, id: &str, email_id: &str, now: Millis) -> StoreResult<StoredEmail> {
        self.email_by_id_impl(id, email_id, now).await
    }

    async fn create_request(
        &self,
        id: &str,
        request: NewRequest,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<CreatedRequest> {
        self.create_request_impl(id, request, limits, now).await
    }

    async fn get_request(
        &self,
        id: &str,
        request_id: &str,
        now: Millis,
    ) -> StoreResult<RequestRecord> {
        self.get_request_impl(id, request_id, now).await
    }

    async fn find_request(
        &self,
        request_id: &str,
        now: Millis,
    ) -> StoreResult<Option<RequestRecord>> {
        self.find_request_impl(request_id, now).await
    }

    async fn answer_request(
        &self,
        request_id: &str,
        answer: Answer,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<AnswerOutcome> {
        self.answer_request_impl(request_id, answer, limits, now)
            .await
    }

    async fn expire_requests(&self, id: &str, limits: &Limits, now: Millis) -> StoreResult<u64> {
        self.expire_requests_impl(id, limits, now).await
    }

    async fn list_contacts(&self, id: &str, now: Millis) -> StoreResult<Vec<ContactRecord>> {
        self.list_contacts_impl(id, now).await
    }

    async fn issue_contact_code(
        &self,
        id: &str,
        code: NewCode,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<CodeIssued> {
        self.issue_contact_code_impl(id, code, limits, now).await
    }

    async fn check_contact_code(
        &self,
        id: &str,
        email: &str,
        code_hash: &str,
        now: Millis,
    ) -> StoreResult<CodeCheck> {
        self.check_contact_code_impl(id, email, code_hash, now)
            .await
    }

    async fn record_send(
        &self,
        id: &str,
        send: NewSend,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<SendRecorded> {
        self.record_send_impl(id, send, limits, now).await
    }

    async fn claim_send(
        &self,
        id: &str,
        send_id: &str,
        lease_until: Millis,
        now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        self.claim_send_impl(id, send_id, lease_until, now).await
    }

    async fn get_send(
        &self,
        id: &str,
        send_id: &str,
        now: Millis,
    ) -> StoreResult<Option<SendRecord>> {
        self.get_send_impl(id, send_id, now).await
    }

    async fn finish_send(
        &self,
        id: &str,
        send_id: &str,
        outcome: SendOutcome,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<()> {
        self.finish_send_impl(id, send_id, outcome, limits, now)
            .await
    }

    async fn due_sends(&self, now: Millis, limit: usize) -> StoreResult<Vec<(String, String)>> {
        self.due_sends_impl(now, limit).await
    }

    async fn create_viewer_code(
        &self,
        id: &str,
        code: NewViewerCode,
        now: Millis,
    ) -> StoreResult<()> {
        self.create_viewer_code_impl(id, code, now).await
    }

    async fn redeem_viewer_code(
        &self,
        code_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<RedeemedViewerCode>> {
        self.redeem_viewer_code_impl(code_hash, now).await
    }

    async fn read_events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
        max_bytes: u64,
        now: Millis,
    ) -> StoreResult<EventPage> {
        self.read_events_impl(id, after, limit, max_bytes, now)
            .await
    }

    async fn get_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Event> {
        self.get_event_impl(id, event_id, now).await
    }

    async fn ack_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Acked> {
        self.ack_event_impl(id, event_id, now).await
    }

    async fn last_sequence(&self, id: &str, now: Millis) -> StoreResult<u64> {
        self.last_sequence_impl(id, now).await
    }

    async fn list_state(&self, id: &str, now: Millis) -> StoreResult<StateListing> {
        self.list_state_impl(id, now).await
    }

    async fn get_state(&self, id: &str, key: &str, now: Millis) -> StoreResult<StateEntry> {
        self.get_state_impl(id, key, now).await
    }

    async fn put_state(
        &self,
        id: &str,
        key: &str,
        value: String,
        expected: Option<u64>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateWritten> {
        self.put_state_impl(id, key, value, expected, limits, now)
            .await
    }

    async fn delete_state(
        &self,
        id: &str,
        key: &str,
        expected: Option<u64>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateDeleted> {
        self.delete_state_impl(id, key, expected, limits, now).await
    }

    async fn hit_rate_limit(
        &self,
        scope: &str,
        limit: u64,
        now: Millis,
    ) -> StoreResult<Option<u64>> {
        self.hit_rate_limit_impl(scope, limit, now).await
    }

    async fn sweep(&self, limits: &Limits, now: Millis) -> StoreResult<SweepReport> {
        self.sweep_impl(limits, now).await
    }
}
