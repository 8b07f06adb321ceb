//! Backups of the embedded store (README, "Backups"): a consistent copy of a database file,
//! taken with SQLite's online backup API while `agentaddress serve` keeps writing to it.
//!
//! The copy is one read transaction on the source — every page in a single step — so it holds
//! exactly the transactions committed before the step began: a write acknowledged to a client
//! is committed, so one acknowledged before the backup starts is in it. Writers are never
//! blocked (the database is in WAL mode); the copy is written beside the destination, checked
//! (`PRAGMA integrity_check`, the schema version), synced, and only then renamed into place,
//! so a crash or a failed check never leaves a half-written file under the destination's name.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::schema::MIGRATIONS;

/// What a backup copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// Bytes of the copy.
    pub bytes: u64,
    /// Its schema version (`PRAGMA user_version`).
    pub schema_version: i64,
    /// Addresses and events in it, for the operator's log.
    pub addresses: u64,
    pub events: u64,
}

/// Why a backup failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} does not exist")]
    NoSource(PathBuf),
    #[error("{0} exists already (choose another file, or remove it first)")]
    Exists(PathBuf),
    #[error("{0} is not an agentaddress database: {1}")]
    NotOurs(PathBuf, String),
    #[error("the copy failed its integrity check: {0}")]
    Corrupt(String),
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Copies the database at `db` to a new file `out`, online (see the module docs). `out` must
/// not exist.
pub fn backup(db: &Path, out: &Path) -> Result<BackupReport, BackupError> {
    if !db.is_file() {
        return Err(BackupError::NoSource(db.to_path_buf()));
    }
    if out.exists() {
        return Err(BackupError::Exists(out.to_path_buf()));
    }
    // Read-only: a backup never changes the source, and never creates one by mistake.
    let src = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    src.busy_timeout(Duration::from_secs(30))?;
    let version = schema_version(&src).map_err(|e| BackupError::NotOurs(db.into(), e))?;

    let partial = partial_name(out);
    let _ = std::fs::remove_file(&partial);
    let result = copy_and_check(&src, &partial, version);
    match result {
        Ok(report) => {
            std::fs::rename(&partial, out)?;
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
                // The rename itself is durable once the directory is synced.
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(report)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// `out.partial` beside `out`.
fn partial_name(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

/// The schema version of an agentaddress database, or why `conn` is not one.
fn schema_version(conn: &Connection) -> Result<i64, String> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    let known = MIGRATIONS.len() as i64;
    if !(1..=known).contains(&version) {
        return Err(format!(
            "schema version {version} (this binary knows 1 to {known})"
        ));
    }
    conn.query_row("SELECT count(*) FROM addresses", [], |r| r.get::<_, i64>(0))
        .map_err(|e| e.to_string())?;
    Ok(version)
}

fn copy_and_check(
    src: &Connection, partial: &Path, version: i64,
) -> Result<BackupReport, BackupError> {
    let mut dst = Connection::open(partial)?;
    {
        let backup = Backup::new(src, &mut dst)?;
        // Every page in one step: one read transaction, so one consistent moment.
        loop {
            match backup.step(-1)? {
                StepResult::Done => break,
                StepResult::More => continue,
                // Locked or busy: the writer holds a lock for a moment; try again.
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    // A standalone file: no WAL beside it to lose when it is copied or renamed.
    dst.pragma_update(None, "journal_mode", "DELETE")?;
    let check: String = dst.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if check != "ok" {
        return Err(BackupError::Corrupt(check));
    }
    let copied = schema_version(&dst).map_err(BackupError::Corrupt)?;
    if copied != version {
        return Err(BackupError::Corrupt(format!(
            "schema version {copied}, the source's is {version}"
        )));
    }
    let addresses: i64 = dst.query_row("SELECT count(*) FROM addresses", [], |r| r.get(0))?;
    let events: i64 = dst.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    dst.close().map_err(|(_, e)| e)?;
    let file = std::fs::File::open(partial)?;
    file.sync_all()?;
    Ok(BackupReport {
        bytes: file.metadata()?.len(),
        schema_version: copied,
        addresses: u64::try_from(addresses).unwrap_or(0),
        events: u64::try_from(events).unwrap_or(0),
    })
}
