//! Where `serve`'s database is, and the lock that keeps one `serve` per database file
//! (README, "One server per database file").
//!
//! Long polls, event streams and wake-up sockets are woken by the process that commits: a
//! second `serve` on the same file would commit deliveries that the first one's waiters never
//! hear of (SQLite itself is fine with two processes; the waiting is not). So `serve` takes an
//! exclusive advisory lock on `{db}.lock` before it opens the store, and a second one exits at
//! once, naming the first one's pid. `agentaddress backup` and other readers take no lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The database `--db` names: a throwaway in-memory one, or a file by its absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbPlace {
    Memory,
    /// Canonical (symbolic links resolved), so that two spellings of one file share one lock.
    File(PathBuf),
}

impl DbPlace {
    /// Resolves `--db`: `:memory:`, an existing file, or a new file in an existing directory.
    /// The error is the whole start-up message, with the path once and the cause in words.
    pub fn resolve(db: &Path) -> Result<Self, String> {
        if db.as_os_str() == ":memory:" {
            return Ok(Self::Memory);
        }
        let absolute = std::path::absolute(db).unwrap_or_else(|_| db.to_path_buf());
        let fail = |why: String| format!("cannot open the database {}: {why}", absolute.display());
        match std::fs::canonicalize(db) {
            Ok(path) if path.is_dir() => Err(fail("it is a directory".into())),
            Ok(path) => {
                // An existing file must be readable and writable by us: say so now rather than
                // let SQLite answer "unable to open database file".
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| fail(io_cause(&e)))?;
                Ok(Self::File(path))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A new database: its directory must exist.
                let (Some(dir), Some(name)) = (absolute.parent(), absolute.file_name()) else {
                    return Err(fail("that is not a file name".into()));
                };
                match std::fs::canonicalize(dir) {
                    Ok(dir) if dir.is_dir() => Ok(Self::File(dir.join(name))),
                    Ok(_) => Err(fail(format!("{} is not a directory", dir.display()))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(fail(format!(
                        "the directory {} does not exist",
                        dir.display()
                    ))),
                    Err(e) => Err(fail(format!("{}: {}", dir.display(), io_cause(&e)))),
                }
            }
            Err(e) => Err(fail(io_cause(&e))),
        }
    }

    /// How the banner and the logs name it.
    pub fn describe(&self) -> String {
        match self {
            Self::Memory => {
                "in memory (:memory:): everything is lost when the server stops".to_owned()
            }
            Self::File(path) => path.display().to_string(),
        }
    }
}

/// An I/O error's cause in plain words (`permission denied`, `address already in use`), without
/// the OS error number.
pub fn io_cause(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => "no such file or directory".into(),
        K::PermissionDenied => "permission denied".into(),
        K::AddrInUse => "address already in use (another process is listening there)".into(),
        K::AddrNotAvailable => "address not available (not an address of this machine)".into(),
        K::ReadOnlyFilesystem => "the file system is read-only".into(),
        K::NotADirectory => "a part of the path is not a directory".into(),
        K::IsADirectory => "it is a directory".into(),
        K::StorageFull => "no space left on the device".into(),
        K::QuotaExceeded => "the disk quota is exceeded".into(),
        _ => e.to_string(),
    }
}

/// The lock held for the life of the process: the open lock file. Dropping it (or the process
/// ending in any way, SIGKILL included: the kernel drops advisory locks with their last open
/// descriptor) releases the lock. The file itself stays: removing it would let a starting
/// server lock a new file while another still holds the old one.
#[derive(Debug)]
pub struct DbLock {
    _file: File,
}

/// The lock file of a database file: `{db}.lock`, beside it.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// How long a server that finds the lock held waits for the holder's pid to appear in the file
/// (the holder writes it right after locking).
const PID_WAIT: Duration = Duration::from_millis(500);

/// Takes the exclusive lock of `db` (an absolute path) and writes our pid into the lock file;
/// if another process holds it, the error names that process's pid, the database and the lock.
///
/// The lock is std's `File::try_lock` (`flock(LOCK_EX | LOCK_NB)` on Linux and macOS,
/// `LockFileEx` on Windows), stable since Rust 1.89 — the workspace's `rust-version` — so
/// no crate and no unsafe code is needed. It is advisory: only `serve` asks for it, so
/// `agentaddress backup` and SQLite readers are never blocked. `Ok(None)` where the file system
/// cannot lock at all (then `serve` runs unguarded, with a warning).
pub fn lock(db: &Path) -> Result<Option<DbLock>, String> {
    let lock = lock_path(db);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .map_err(|e| {
            format!(
                "cannot open the database {}: cannot create its lock file {}: {}",
                db.display(),
                lock.display(),
                io_cause(&e)
            )
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let pid =
                holder(&file).map_or_else(|| "pid unknown".to_owned(), |p| format!("pid {p}"));
            return Err(format!(
                "another agentaddress serve ({pid}) is using {} (lock {}); one server per \
                 database file",
                db.display(),
                lock.display()
            ));
        }
        Err(TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
            tracing::warn!(
                lock = %lock.display(),
                "the file system cannot lock files: nothing stops a second serve on this \
                 database (its long polls would not wake for this one's deliveries)"
            );
            return Ok(None);
        }
        Err(TryLockError::Error(e)) => {
            return Err(format!(
                "cannot lock the database {} (lock {}): {}",
                db.display(),
                lock.display(),
                io_cause(&e)
            ))
        }
    }
    // Ours: say who holds it, for the next one who tries.
    let write = |mut f: &File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        writeln!(f, "{}", std::process::id())?;
        f.flush()
    };
    if let Err(e) = write(&file) {
        tracing::warn!(lock = %lock.display(), "cannot write the pid into the lock file: {}", io_cause(&e));
    }
    Ok(Some(DbLock { _file: file }))
}

/// The pid written in a lock file another process holds, waiting briefly for it to be written.
fn holder(mut file: &File) -> Option<u32> {
    let started = Instant::now();
    loop {
        let mut text = String::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text));
        if let Ok(pid) = text.trim().parse::<u32>() {
            return Some(pid);
        }
        if read.is_err() || started.elapsed() >= PID_WAIT {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused<T: std::fmt::Debug>(r: Result<T, String>) -> String {
        match r {
            Ok(v) => panic!("accepted: {v:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn places_and_their_errors() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(DbPlace::resolve(Path::new(":memory:")), Ok(DbPlace::Memory));
        assert_eq!(
            DbPlace::resolve(&dir.path().join("new.db")),
            Ok(DbPlace::File(root.join("new.db")))
        );
        let e = refused(DbPlace::resolve(&dir.path().join("nope/x.db")));
        assert_eq!(
            e,
            format!(
                "cannot open the database {}: the directory {} does not exist",
                dir.path().join("nope/x.db").display(),
                dir.path().join("nope").display()
            )
        );
        let e = refused(DbPlace::resolve(dir.path()));
        assert!(e.ends_with(": it is a directory"), "{e}");
    }

    #[test]
    fn a_second_lock_names_the_first_holder() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let db = dir.path().join("a.db");
        let first = lock(&db).unwrap_or_else(|e| panic!("{e}"));
        assert!(first.is_some());
        let text = std::fs::read_to_string(lock_path(&db)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, format!("{}\n", std::process::id()));
        // Another open file description of the same file: flock locks conflict between them
        // even within one process.
        let e = refused(lock(&db));
        assert!(e.contains(&format!("(pid {})", std::process::id())), "{e}");
        assert!(e.contains(&format!("(lock {}.lock)", db.display())), "{e}");
        drop(first);
        assert!(
            lock(&db).unwrap_or_else(|e| panic!("{e}")).is_some(),
            "released on drop"
        );
    }
}
