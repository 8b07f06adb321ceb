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
//! - `timers`: timers, firing with their events, and the scheduler's queries;
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
mod hooks;
mod purge;
mod rate_limit;
mod requests;
mod rows;
mod schema;
mod sends;
mod state;
mod timers;
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
use crate::store::{Backend, FeedSignal, StoreError, StoreResult, SweepReport};

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
    /// Waiting slots held (docs/API.md §6, "Waiting polls"): slot id → when it frees itself.
    wait_slots: Mutex<HashMap<String, Millis>>,
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
impl Backend for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn feed_signal(&self) -> Option<&FeedSignal> {
        self.inner.wakeups.then_some(&self.inner.signal)
    }

    async fn sweep(&self, limits: &Limits, now: Millis) -> StoreResult<SweepReport> {
        self.sweep_impl(limits, now).await
    }
}
