//! The connections (crate docs): the one writer thread, which commits whatever has queued up
//! in one transaction (group commit) with each request in its own savepoint, and the readers,
//! each on its own connection, bounded by [`MAX_READERS`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use rusqlite::Connection;

use crate::rows::sql_err;
use crate::schema::migrate;
use crate::store::{FeedSignal, StoreError, StoreResult};
use crate::{Inner, SqliteOptions, SqliteStore, Synchronous};

/// Most reads running at once, each on its own connection and blocking thread. A long-poll
/// burst (10,000 polls arriving together) queues here instead of opening a connection and a
/// thread per request: memory stays flat, and two cores gain nothing from more.
const MAX_READERS: usize = 4;

pub(crate) type Completion = Box<dyn FnOnce(StoreResult<()>) + Send>;

/// The writer's connection inside one write, with the news of what it appended: the waiters of
/// each address told of ([`Tx::tell`]) are woken once the write has committed, and never when
/// it rolled back (the feed signal, docs/ARCHITECTURE.md).
pub(crate) struct Tx<'c> {
    conn: &'c Connection,
    told: std::cell::RefCell<Vec<(String, u64)>>,
    hooks_told: std::cell::Cell<bool>,
    timers_told: std::cell::Cell<bool>,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Tx<'_> {
    /// Wakes the waiters of `address_id` with its feed's head `sequence` once this write has
    /// committed (0 with no new event: the address was deleted).
    pub(crate) fn tell(&self, address_id: &str, sequence: u64) {
        self.told
            .borrow_mut()
            .push((address_id.to_owned(), sequence));
    }

    /// Wakes the wake loop once this write has committed: a hook has something to do
    /// (docs/API.md §19).
    pub(crate) fn tell_hooks(&self) {
        self.hooks_told.set(true);
    }

    /// Wakes the timer scheduler once this write has committed: the earliest pending timer
    /// may have changed (docs/API.md §20).
    pub(crate) fn tell_timers(&self) {
        self.timers_told.set(true);
    }
}

pub(crate) type Job = Box<dyn FnOnce(StoreResult<&Connection>) -> Completion + Send>;

impl SqliteStore {
    pub(crate) fn start(
        mut conn: Connection, path: Option<PathBuf>, options: SqliteOptions,
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
                wait_slots: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Runs `f` on the writer connection inside its own savepoint of the current group
    /// transaction; once that transaction has committed, the waiters `f` told of are woken and
    /// its result is delivered.
    pub(crate) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Tx<'_>) -> StoreResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
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
            let tx_view = Tx {
                conn,
                told: Default::default(),
                hooks_told: Default::default(),
                timers_told: Default::default(),
            };
            let result = f(&tx_view);
            let hooks_told = tx_view.hooks_told.get();
            let timers_told = tx_view.timers_told.get();
            let told = tx_view.told.into_inner();
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
                let result = commit.and(result);
                if result.is_ok() {
                    for (address_id, sequence) in told {
                        inner.signal.notify(&address_id, sequence);
                    }
                    if hooks_told {
                        inner.signal.wake_hooks();
                    }
                    if timers_told {
                        inner.signal.wake_timers();
                    }
                }
                let _ = tx.send(result);
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
    pub(crate) async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let Some(path) = self.inner.path.clone() else {
            return self.write(move |tx: &Tx<'_>| f(tx)).await;
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
pub(crate) fn read_snapshot<T>(
    conn: &Connection, f: impl FnOnce(&Connection) -> StoreResult<T>,
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
        let began = std::time::Instant::now();
        match conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {
                let writes = jobs.len();
                let completions: Vec<Completion> = jobs.into_iter().map(|j| j(Ok(&conn))).collect();
                let commit = conn.execute_batch("COMMIT").map_err(|e| {
                    let _ = conn.execute_batch("ROLLBACK");
                    StoreError::Unavailable(format!("commit failed: {e}"))
                });
                crate::metrics::commit(writes, began.elapsed());
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
