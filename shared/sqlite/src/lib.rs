//! The embedded store: SQLite in WAL mode, `synchronous=FULL` by default, so a 2xx means the
//! change is on disk.
//!
//! One writer thread owns the only write connection. Requests reach it over a channel and it
//! commits whatever has queued up in ONE transaction (group commit), each request inside its
//! own savepoint so one request's failure never touches another's. Results are sent only after
//! COMMIT returns. Readers use their own connections (on a file) and see only committed data.
//! An in-memory database has no second connection, so its reads go through the writer.
#![forbid(unsafe_code)]

use agentaddress_core::{domain, store};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};

use crate::domain::{ids, state::entry_size, Ingress, Limits, Millis};
use crate::store::rules::{self, check_expected, rate_window, Quota, StateTotals};
use crate::store::{
    Acked, AddressRecord, Appended, Event, EventPage, EventRef, FeedSignal, IdempotencyClaim,
    NewAddress, NewEvent, StateDeleted, StateEntry, StateListing, StateMeta, StateWritten, Store,
    StoreError, StoreResult, SweepReport, Usage,
};

/// Most reads running at once, each on its own connection and blocking thread. A long-poll
/// burst (10,000 polls arriving together) queues here instead of opening a connection and a
/// thread per request: memory stays flat, and two cores gain nothing from more.
const MAX_READERS: usize = 4;

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

type Completion = Box<dyn FnOnce(StoreResult<()>) + Send>;
type Job = Box<dyn FnOnce(StoreResult<&Connection>) -> Completion + Send>;

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

const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE addresses (
    id          TEXT PRIMARY KEY,
    name        TEXT,
    task_id     TEXT,
    email       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,
    deleted_at  INTEGER,
    purged_at   INTEGER,
    token_hash  TEXT NOT NULL,
    inbox_hash  TEXT NOT NULL,
    last_seq    INTEGER NOT NULL DEFAULT 0,
    state_keys  INTEGER NOT NULL DEFAULT 0,
    state_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX addresses_expiry ON addresses(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE events (
    address_id  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    id          TEXT NOT NULL,
    type        TEXT NOT NULL,
    source      TEXT,
    ingress     TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    acked_at    INTEGER,
    data        TEXT NOT NULL,
    http        TEXT,
    PRIMARY KEY (address_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_expiry ON events(expires_at);
CREATE TABLE state (
    address_id  TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    size        INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (address_id, key)
) WITHOUT ROWID;
CREATE TABLE idempotency (
    address_id  TEXT NOT NULL,
    key_hash    TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    event_id    TEXT NOT NULL,
    body_hash   TEXT NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (address_id, key_hash)
) WITHOUT ROWID;
CREATE INDEX idempotency_expiry ON idempotency(expires_at);
"#];

fn sql_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable(e.to_string())
        }
        // Out of file descriptors (or memory): a passing condition of the process, not a bug,
        // so 503 with Retry-After rather than 500.
        Some(rusqlite::ErrorCode::CannotOpen) | Some(rusqlite::ErrorCode::OutOfMemory) => {
            StoreError::Unavailable(e.to_string())
        }
        _ => StoreError::Internal(e.to_string()),
    }
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql_err)?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::Internal(format!(
            "database schema version {version} is newer than this binary understands ({known})"
        )));
    }
    for (n, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction().map_err(sql_err)?;
        tx.execute_batch(sql).map_err(sql_err)?;
        tx.pragma_update(None, "user_version", n as i64 + 1)
            .map_err(sql_err)?;
        tx.commit().map_err(sql_err)?;
    }
    Ok(())
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

    fn start(
        mut conn: Connection,
        path: Option<PathBuf>,
        options: SqliteOptions,
    ) -> StoreResult<Self> {
        let sync = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        conn.execute_batch(&format!(
            "PRAGMA synchronous={sync}; PRAGMA busy_timeout=5000; PRAGMA foreign_keys=OFF; \
             PRAGMA temp_store=MEMORY;"
        ))
        .map_err(sql_err)?;
        migrate(&mut conn)?;
        // Every reader connection is opened now, so that no request ever needs a new file
        // descriptor from the store: under descriptor pressure (many client connections) a
        // request is refused at the door, never failed half-way by SQLite.
        let readers = match &path {
            Some(path) => (0..MAX_READERS)
                .map(|_| open_reader(path))
                .collect::<StoreResult<Vec<_>>>()?,
            None => Vec::new(),
        };
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || writer_loop(conn, rx, options.max_group.max(1)))
            .map_err(|e| StoreError::Internal(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                writer: Mutex::new(tx),
                path,
                readers: Mutex::new(readers),
                reader_slots: Arc::new(tokio::sync::Semaphore::new(MAX_READERS)),
                signal: FeedSignal::default(),
                wakeups: options.wakeups,
                rate: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Runs `f` on the writer connection inside its own savepoint of the current group
    /// transaction; its result is delivered once that transaction has committed.
    async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel::<StoreResult<T>>();
        let job: Job = Box::new(move |conn: StoreResult<&Connection>| -> Completion {
            let conn = match conn {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return Box::new(|_| {});
                }
            };
            if let Err(e) = conn.execute_batch("SAVEPOINT job") {
                let _ = tx.send(Err(sql_err(e)));
                return Box::new(|_| {});
            }
            let result = f(conn);
            let end = if result.is_ok() {
                conn.execute_batch("RELEASE job")
            } else {
                conn.execute_batch("ROLLBACK TO job; RELEASE job")
            };
            let result = match end {
                Ok(()) => result,
                Err(e) => Err(sql_err(e)),
            };
            Box::new(move |commit: StoreResult<()>| {
                let _ = tx.send(commit.and(result));
            })
        });
        self.inner
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send(job)
            .map_err(|_| StoreError::Unavailable("the database writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the database writer has stopped".into()))?
    }

    /// Runs `f` on a reader connection (on a file), or through the writer (in memory), in one
    /// read transaction: every statement of `f` sees the same snapshot, so a read made of
    /// several queries (the state listing and its totals) never mixes two moments.
    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let Some(path) = self.inner.path.clone() else {
            return self.write(f).await;
        };
        // Held by the blocking task itself, so a cancelled request frees it only when done.
        let slot = Arc::clone(&self.inner.reader_slots)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable("the database readers have stopped".into()))?;
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let pooled = inner
                .readers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop();
            let conn = match pooled {
                Some(c) => c,
                None => open_reader(&path)?,
            };
            let result = read_snapshot(&conn, f);
            inner
                .readers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Internal(format!("reader task failed: {e}")))?
    }
}

/// `f` inside one deferred transaction (WAL: one snapshot for all its statements), ended
/// without writing anything.
fn read_snapshot<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    let tx = conn.unchecked_transaction().map_err(sql_err)?;
    let result = f(&tx);
    tx.rollback().map_err(sql_err)?;
    result
}

fn open_reader(path: &Path) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql_err)?;
    conn.execute_batch("PRAGMA busy_timeout=5000; PRAGMA temp_store=MEMORY;")
        .map_err(sql_err)?;
    Ok(conn)
}

fn writer_loop(conn: Connection, rx: mpsc::Receiver<Job>, max_group: usize) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < max_group {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        match conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {
                let completions: Vec<Completion> = jobs.into_iter().map(|j| j(Ok(&conn))).collect();
                let commit = conn.execute_batch("COMMIT").map_err(|e| {
                    let _ = conn.execute_batch("ROLLBACK");
                    StoreError::Unavailable(format!("commit failed: {e}"))
                });
                for c in completions {
                    c(commit.clone());
                }
            }
            Err(e) => {
                let err = sql_err(e);
                for j in jobs {
                    j(Err(err.clone()))(Err(err.clone()));
                }
            }
        }
    }
}

const ADDRESS_COLUMNS: &str = "id, name, task_id, email, created_at, expires_at, deleted_at, \
     token_hash, inbox_hash, last_seq, state_keys, state_bytes";

fn address_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AddressRecord> {
    Ok(AddressRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        task_id: r.get(2)?,
        email: r.get(3)?,
        created_at: r.get(4)?,
        expires_at: r.get(5)?,
        deleted_at: r.get(6)?,
        token_hash: r.get(7)?,
        inbox_hash: r.get(8)?,
        last_sequence: u(r.get(9)?),
        state_keys: u(r.get(10)?),
        state_bytes: u(r.get(11)?),
    })
}

fn load_address(conn: &Connection, id: &str) -> StoreResult<Option<AddressRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {ADDRESS_COLUMNS} FROM addresses WHERE id = ?1"
    ))
    .map_err(sql_err)?
    .query_row([id], address_row)
    .optional()
    .map_err(sql_err)
}

fn live_address(conn: &Connection, id: &str, now: Millis) -> StoreResult<AddressRecord> {
    match load_address(conn, id)? {
        None => Err(StoreError::AddressNotFound),
        Some(a) if a.is_gone(now) => Err(StoreError::AddressGone),
        Some(a) => Ok(a),
    }
}

const EVENT_COLUMNS: &str = "id, seq, type, source, ingress, received_at, acked_at, data, http";

fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    let ingress: String = r.get(4)?;
    Ok(Event {
        id: r.get(0)?,
        sequence: u(r.get(1)?),
        event_type: r.get(2)?,
        source: r.get(3)?,
        ingress: Ingress::parse(&ingress).unwrap_or(Ingress::Http),
        received_at: r.get(5)?,
        acknowledged_at: r.get(6)?,
        data: r.get(7)?,
        http: r.get(8)?,
    })
}

/// Appends the next event of `address` (already checked live in this transaction).
fn append_in_tx(
    conn: &Connection,
    address: &AddressRecord,
    event: &NewEvent,
    limits: &Limits,
    now: Millis,
) -> StoreResult<EventRef> {
    let seq = address.last_sequence + 1;
    check_quota(conn, &address.id, seq, limits, now)?;
    let id = ids::new_event_id(seq);
    let expires_at = limits.event_expiry(now, address.expires_at);
    conn.prepare_cached(
        "INSERT INTO events (address_id, seq, id, type, source, ingress, received_at, expires_at, \
         data, http) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .map_err(sql_err)?
    .execute(params![
        address.id,
        i(seq),
        id,
        event.event_type,
        event.source,
        event.ingress.as_str(),
        now,
        expires_at,
        event.data,
        event.http,
    ])
    .map_err(sql_err)?;
    conn.prepare_cached("UPDATE addresses SET last_seq = ?2 WHERE id = ?1")
        .map_err(sql_err)?
        .execute(params![address.id, i(seq)])
        .map_err(sql_err)?;
    Ok(EventRef { id, sequence: seq })
}

/// The feed quota of `rules::quota` for appending `seq`.
fn check_quota(
    conn: &Connection,
    address_id: &str,
    seq: u64,
    limits: &Limits,
    now: Millis,
) -> StoreResult<()> {
    let deciding = match rules::quota(seq, limits) {
        Quota::Allows => return Ok(()),
        Quota::Full => return Err(StoreError::QuotaExceeded),
        Quota::DecidedBy(deciding) => deciding,
    };
    let expires_at: Option<i64> = conn
        .prepare_cached("SELECT expires_at FROM events WHERE address_id = ?1 AND seq = ?2")
        .map_err(sql_err)?
        .query_row(params![address_id, i(deciding)], |r| r.get(0))
        .optional()
        .map_err(sql_err)?;
    if rules::quota_allows(expires_at, now) {
        Ok(())
    } else {
        Err(StoreError::QuotaExceeded)
    }
}

fn totals_of(address: &AddressRecord) -> StateTotals {
    StateTotals {
        keys: address.state_keys,
        bytes: address.state_bytes,
    }
}

fn current_state(
    conn: &Connection,
    address_id: &str,
    key: &str,
) -> StoreResult<Option<(u64, u64)>> {
    conn.prepare_cached("SELECT revision, size FROM state WHERE address_id = ?1 AND key = ?2")
        .map_err(sql_err)?
        .query_row(params![address_id, key], |r| {
            Ok((u(r.get(0)?), u(r.get(1)?)))
        })
        .optional()
        .map_err(sql_err)
}

fn purge_data(conn: &Connection, address_id: &str) -> StoreResult<u64> {
    let mut removed = 0;
    for sql in [
        "DELETE FROM events WHERE address_id = ?1",
        "DELETE FROM state WHERE address_id = ?1",
        "DELETE FROM idempotency WHERE address_id = ?1",
    ] {
        removed += conn.execute(sql, [address_id]).map_err(sql_err)? as u64;
    }
    Ok(removed)
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
        self.write(move |conn| {
            let n = conn
                .prepare_cached(
                    "INSERT INTO addresses (id, name, task_id, email, created_at, expires_at, \
                     token_hash, inbox_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
                     ON CONFLICT(id) DO NOTHING",
                )
                .map_err(sql_err)?
                .execute(params![
                    a.id,
                    a.name,
                    a.task_id,
                    a.email,
                    a.created_at,
                    a.expires_at,
                    a.token_hash,
                    a.inbox_hash
                ])
                .map_err(sql_err)?;
            if n == 0 {
                return Err(StoreError::AddressExists);
            }
            Ok(())
        })
        .await
    }

    async fn get_address(&self, id: &str, _now: Millis) -> StoreResult<Option<AddressRecord>> {
        let id = id.to_owned();
        self.read(move |conn| load_address(conn, &id)).await
    }

    async fn usage(&self, id: &str, _limits: &Limits, now: Millis) -> StoreResult<Usage> {
        let id = id.to_owned();
        self.read(move |conn| {
            let a = live_address(conn, &id, now)?;
            let retained: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM events WHERE address_id = ?1 AND expires_at > ?2",
                )
                .map_err(sql_err)?
                .query_row(params![id, now], |r| r.get(0))
                .map_err(sql_err)?;
            Ok(Usage {
                last_sequence: a.last_sequence,
                retained_events: u(retained),
                state_keys: a.state_keys,
                state_bytes: a.state_bytes,
            })
        })
        .await
    }

    async fn delete_address(&self, id: &str, now: Millis) -> StoreResult<()> {
        let id = id.to_owned();
        let result = {
            let id = id.clone();
            self.write(move |conn| {
                live_address(conn, &id, now)?;
                conn.execute(
                    "UPDATE addresses SET deleted_at = ?2, purged_at = ?2, state_keys = 0, \
                     state_bytes = 0 WHERE id = ?1",
                    params![id, now],
                )
                .map_err(sql_err)?;
                purge_data(conn, &id)?;
                Ok(())
            })
            .await
        };
        if result.is_ok() {
            self.inner.signal.notify(&id, 0);
        }
        result
    }

    async fn append_event(
        &self,
        id: &str,
        event: NewEvent,
        claim: Option<IdempotencyClaim>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<Appended> {
        let id = id.to_owned();
        let limits = limits.clone();
        let address_id = id.clone();
        let appended = self
            .write(move |conn| {
                let address = live_address(conn, &id, now)?;
                if let Some(claim) = &claim {
                    let seen: Option<(i64, String, String)> = conn
                        .prepare_cached(
                            "SELECT seq, event_id, body_hash FROM idempotency \
                             WHERE address_id = ?1 AND key_hash = ?2 AND expires_at > ?3",
                        )
                        .map_err(sql_err)?
                        .query_row(params![id, claim.key_hash, now], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                        })
                        .optional()
                        .map_err(sql_err)?;
                    if let Some((seq, event_id, body_hash)) = seen {
                        let original = EventRef {
                            id: event_id,
                            sequence: u(seq),
                        };
                        return rules::repeated_delivery(original, &body_hash, claim);
                    }
                }
                let event_ref = append_in_tx(conn, &address, &event, &limits, now)?;
                if let Some(claim) = &claim {
                    conn.prepare_cached(
                        "INSERT OR REPLACE INTO idempotency (address_id, key_hash, seq, event_id, \
                         body_hash, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )
                    .map_err(sql_err)?
                    .execute(params![
                        id,
                        claim.key_hash,
                        i(event_ref.sequence),
                        event_ref.id,
                        claim.body_hash,
                        limits.event_expiry(now, address.expires_at)
                    ])
                    .map_err(sql_err)?;
                }
                Ok(Appended {
                    event: event_ref,
                    duplicate: false,
                })
            })
            .await?;
        if !appended.duplicate {
            self.inner
                .signal
                .notify(&address_id, appended.event.sequence);
        }
        Ok(appended)
    }

    async fn read_events(
        &self,
        id: &str,
        after: u64,
        limit: usize,
        max_bytes: u64,
        now: Millis,
    ) -> StoreResult<EventPage> {
        let id = id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE address_id = ?1 AND seq > ?2 \
                     AND expires_at > ?3 ORDER BY seq LIMIT ?4"
                ))
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(
                    params![id, i(after), now, (limit as i64).saturating_add(1)],
                    event_row,
                )
                .map_err(sql_err)?;
            let mut events = Vec::new();
            let mut bytes = 0u64;
            let mut has_more = false;
            for row in rows {
                let event = row.map_err(sql_err)?;
                if events.len() == limit
                    || (!events.is_empty() && bytes + event.page_bytes() > max_bytes)
                {
                    has_more = true;
                    break;
                }
                bytes += event.page_bytes();
                events.push(event);
            }
            Ok(EventPage { events, has_more })
        })
        .await
    }

    async fn get_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Event> {
        let id = id.to_owned();
        let event_id = event_id.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            let Some(seq) = ids::event_sequence(&event_id) else {
                return Err(StoreError::NotFound);
            };
            conn.prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE address_id = ?1 AND seq = ?2 \
                 AND id = ?3 AND expires_at > ?4"
            ))
            .map_err(sql_err)?
            .query_row(params![id, i(seq), event_id, now], event_row)
            .optional()
            .map_err(sql_err)?
            .ok_or(StoreError::NotFound)
        })
        .await
    }

    async fn ack_event(&self, id: &str, event_id: &str, now: Millis) -> StoreResult<Acked> {
        let id = id.to_owned();
        let event_id = event_id.to_owned();
        self.write(move |conn| {
            live_address(conn, &id, now)?;
            let Some(seq) = ids::event_sequence(&event_id) else {
                return Err(StoreError::NotFound);
            };
            let acked: Option<i64> = conn
                .prepare_cached(
                    "UPDATE events SET acked_at = coalesce(acked_at, ?4) WHERE address_id = ?1 \
                     AND seq = ?2 AND id = ?3 AND expires_at > ?4 RETURNING acked_at",
                )
                .map_err(sql_err)?
                .query_row(params![id, i(seq), event_id, now], |r| r.get(0))
                .optional()
                .map_err(sql_err)?;
            match acked {
                Some(at) => Ok(Acked {
                    event: EventRef {
                        id: event_id,
                        sequence: seq,
                    },
                    acknowledged_at: at,
                }),
                None => Err(StoreError::NotFound),
            }
        })
        .await
    }

    async fn last_sequence(&self, id: &str, now: Millis) -> StoreResult<u64> {
        let id = id.to_owned();
        self.read(move |conn| Ok(live_address(conn, &id, now)?.last_sequence))
            .await
    }

    async fn list_state(&self, id: &str, now: Millis) -> StoreResult<StateListing> {
        let id = id.to_owned();
        self.read(move |conn| {
            let a = live_address(conn, &id, now)?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT key, revision, size, updated_at FROM state WHERE address_id = ?1 \
                     ORDER BY key",
                )
                .map_err(sql_err)?;
            let keys = stmt
                .query_map([&id], |r| {
                    Ok(StateMeta {
                        key: r.get(0)?,
                        revision: u(r.get(1)?),
                        size: u(r.get(2)?),
                        updated_at: r.get(3)?,
                    })
                })
                .map_err(sql_err)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(sql_err)?;
            Ok(StateListing {
                keys,
                state_keys: a.state_keys,
                state_bytes: a.state_bytes,
            })
        })
        .await
    }

    async fn get_state(&self, id: &str, key: &str, now: Millis) -> StoreResult<StateEntry> {
        let id = id.to_owned();
        let key = key.to_owned();
        self.read(move |conn| {
            live_address(conn, &id, now)?;
            conn.prepare_cached(
                "SELECT key, value, revision, updated_at FROM state \
                 WHERE address_id = ?1 AND key = ?2",
            )
            .map_err(sql_err)?
            .query_row(params![id, key], |r| {
                Ok(StateEntry {
                    key: r.get(0)?,
                    value: r.get(1)?,
                    revision: u(r.get(2)?),
                    updated_at: r.get(3)?,
                })
            })
            .optional()
            .map_err(sql_err)?
            .ok_or(StoreError::NotFound)
        })
        .await
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
        let id = id.to_owned();
        let key = key.to_owned();
        let limits = limits.clone();
        let address_id = id.clone();
        let written = self
            .write(move |conn| {
                let address = live_address(conn, &id, now)?;
                let current = current_state(conn, &id, &key)?;
                check_expected(expected, current.map(|c| c.0))?;
                let size = entry_size(&key, &value);
                let totals = rules::state_after_put(
                    totals_of(&address),
                    current.map(|c| c.1),
                    size,
                    &limits,
                )?;
                let revision = address.last_sequence + 1;
                let event = rules::state_updated_event(&key, revision, &value);
                let event_ref = append_in_tx(conn, &address, &event, &limits, now)?;
                conn.prepare_cached(
                    "INSERT INTO state (address_id, key, value, revision, size, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(address_id, key) DO UPDATE SET \
                     value = excluded.value, revision = excluded.revision, size = excluded.size, \
                     updated_at = excluded.updated_at",
                )
                .map_err(sql_err)?
                .execute(params![id, key, value, i(revision), i(size), now])
                .map_err(sql_err)?;
                conn.prepare_cached(
                    "UPDATE addresses SET state_keys = ?2, state_bytes = ?3 WHERE id = ?1",
                )
                .map_err(sql_err)?
                .execute(params![id, i(totals.keys), i(totals.bytes)])
                .map_err(sql_err)?;
                Ok(StateWritten {
                    entry: StateEntry {
                        key,
                        value,
                        revision,
                        updated_at: now,
                    },
                    event: event_ref,
                })
            })
            .await?;
        self.inner
            .signal
            .notify(&address_id, written.event.sequence);
        Ok(written)
    }

    async fn delete_state(
        &self,
        id: &str,
        key: &str,
        expected: Option<u64>,
        limits: &Limits,
        now: Millis,
    ) -> StoreResult<StateDeleted> {
        let id = id.to_owned();
        let key = key.to_owned();
        let limits = limits.clone();
        let address_id = id.clone();
        let deleted = self
            .write(move |conn| {
                let address = live_address(conn, &id, now)?;
                let Some((revision, size)) = current_state(conn, &id, &key)? else {
                    return Err(StoreError::NotFound);
                };
                check_expected(expected, Some(revision))?;
                let new_revision = address.last_sequence + 1;
                let event = rules::state_deleted_event(&key, new_revision);
                let totals = rules::state_after_delete(totals_of(&address), size);
                let event_ref = append_in_tx(conn, &address, &event, &limits, now)?;
                conn.prepare_cached("DELETE FROM state WHERE address_id = ?1 AND key = ?2")
                    .map_err(sql_err)?
                    .execute(params![id, key])
                    .map_err(sql_err)?;
                conn.prepare_cached(
                    "UPDATE addresses SET state_keys = ?2, state_bytes = ?3 WHERE id = ?1",
                )
                .map_err(sql_err)?
                .execute(params![id, i(totals.keys), i(totals.bytes)])
                .map_err(sql_err)?;
                Ok(StateDeleted {
                    key,
                    revision: new_revision,
                    event: event_ref,
                })
            })
            .await?;
        self.inner
            .signal
            .notify(&address_id, deleted.event.sequence);
        Ok(deleted)
    }

    async fn hit_rate_limit(
        &self,
        scope: &str,
        limit: u64,
        now: Millis,
    ) -> StoreResult<Option<u64>> {
        let (window, retry_after) = rate_window(now);
        let mut windows = self
            .inner
            .rate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() > 100_000 {
            windows.retain(|_, (w, _)| *w >= window);
        }
        let entry = windows.entry(scope.to_owned()).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        entry.1 += 1;
        Ok((entry.1 > limit).then_some(retry_after))
    }

    async fn sweep(&self, limits: &Limits, now: Millis) -> StoreResult<SweepReport> {
        let tombstone_ms = limits.tombstone_ms();
        let report = self
            .write(move |conn| {
                let events = conn
                    .execute("DELETE FROM events WHERE expires_at <= ?1", [now])
                    .map_err(sql_err)? as u64;
                conn.execute("DELETE FROM idempotency WHERE expires_at <= ?1", [now])
                    .map_err(sql_err)?;
                let expired: Vec<String> = conn
                    .prepare(
                        "SELECT id FROM addresses WHERE purged_at IS NULL \
                         AND expires_at IS NOT NULL AND expires_at <= ?1",
                    )
                    .map_err(sql_err)?
                    .query_map([now], |r| r.get(0))
                    .map_err(sql_err)?
                    .collect::<Result<_, _>>()
                    .map_err(sql_err)?;
                for id in &expired {
                    purge_data(conn, id)?;
                    conn.execute(
                        "UPDATE addresses SET purged_at = ?2 WHERE id = ?1",
                        params![id, now],
                    )
                    .map_err(sql_err)?;
                }
                let tombstones = conn
                    .execute(
                        "DELETE FROM addresses WHERE purged_at IS NOT NULL \
                         AND coalesce(deleted_at, expires_at) <= ?1",
                        [now.saturating_sub(tombstone_ms)],
                    )
                    .map_err(sql_err)? as u64;
                Ok(SweepReport {
                    events,
                    addresses_purged: expired.len() as u64,
                    tombstones,
                })
            })
            .await?;
        self.inner.signal.prune();
        {
            let (window, _) = rate_window(now);
            self.inner
                .rate
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|_, (w, _)| *w >= window);
        }
        Ok(report)
    }
}
