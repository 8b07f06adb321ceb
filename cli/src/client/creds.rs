//! The saved credentials of a task: one JSON file per task in the credentials directory
//! (`$AGENTADDRESS_HOME`, else `~/.agentaddress`), directory 0700, files 0600 from the moment
//! they exist, replaced atomically (a temporary file in the same directory, then a rename).

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{CliError, Result};

/// The environment variable that names the credentials directory.
pub const HOME_ENV: &str = "AGENTADDRESS_HOME";
/// The longest task name.
pub const MAX_TASK_LEN: usize = 128;
/// The file format written by this version.
const FORMAT_VERSION: u32 = 1;

/// What `create` saves for a task, and what the later commands read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub version: u32,
    pub task: String,
    /// The server URL the address was created on (later commands use it unless `--url` or
    /// `AGENTADDRESS_URL` is given).
    pub base_url: String,
    pub address_id: String,
    pub read_token: String,
    pub inbox_url: String,
    pub email: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Where the next `poll` starts (`after`): the highest acknowledged sequence.
    #[serde(default)]
    pub cursor: u64,
    /// The signing secrets of the wake hooks `hook add` made (docs/API.md §19), by hook id:
    /// a receiver needs one to verify its wakes, and the server shows it only once.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub hook_secrets: std::collections::BTreeMap<String, String>,
    /// Fields a newer writer added (the Python and TypeScript clients share these files), kept
    /// as they are when this file is written again: the format grows by adding fields.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

impl Credentials {
    pub fn new(
        task: &str, base_url: &str, address_id: String, read_token: String, inbox_url: String,
        email: String,
    ) -> Self {
        Self {
            version: FORMAT_VERSION,
            task: task.to_owned(),
            base_url: base_url.to_owned(),
            address_id,
            read_token,
            inbox_url,
            email,
            name: None,
            created_at: None,
            expires_at: None,
            cursor: 0,
            hook_secrets: Default::default(),
            other: Default::default(),
        }
    }
}

/// A task name must be a safe file name: 1..128 of `[A-Za-z0-9._-]`, not starting with `.`
/// (so never `.`, `..`, a hidden file or a path).
pub fn validate_task(task: &str) -> Result<()> {
    let ok = !task.is_empty()
        && task.len() <= MAX_TASK_LEN
        && !task.starts_with('.')
        && task
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(CliError::new(
            "invalid_task",
            format!(
                "the task name must be 1 to {MAX_TASK_LEN} of the characters A-Z a-z 0-9 . _ - \
                 and must not start with '.' (it names a file in the credentials directory)"
            ),
        ))
    }
}

/// The credentials directory: `$AGENTADDRESS_HOME`, else `$HOME/.agentaddress`.
pub fn directory() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(HOME_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".agentaddress")),
        None => Err(CliError::new(
            "credentials_error",
            format!("neither {HOME_ENV} nor HOME is set: cannot find the credentials directory"),
        )),
    }
}

/// The credentials file of a (validated) task.
pub fn path_of(dir: &Path, task: &str) -> PathBuf {
    dir.join(format!("{task}.json"))
}

fn io_error(what: &str, path: &Path, e: &std::io::Error) -> CliError {
    CliError::new(
        "credentials_error",
        format!("cannot {what} {}: {e}", path.display()),
    )
}

/// Reads the credentials of `task` (`unknown_task` when there are none).
pub fn load(dir: &Path, task: &str) -> Result<Credentials> {
    let path = path_of(dir, task);
    refuse_if_exposed(&path)?;
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let message = format!(
                "no saved address for task '{task}' in {} \
                 (run `agentaddress create {task}` first)",
                dir.display()
            );
            return Err(CliError::new("unknown_task", message));
        }
        Err(e) => return Err(io_error("read", &path, &e)),
    };
    // The parser's message names a line and column, never the content.
    serde_json::from_slice::<Credentials>(&bytes).map_err(|e| {
        CliError::new(
            "credentials_error",
            format!(
                "the credentials file {} is not valid: {}",
                path.display(),
                describe_json_error(&e)
            ),
        )
    })
}

/// A credentials file that others may read (or write) is refused before it is read: its token
/// may already be someone else's, and using it would hide that (docs/CLI.md, "Credentials
/// files"). A missing file is left to the read, which names the task.
fn refuse_if_exposed(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = match fs::metadata(path) {
            Ok(meta) => meta.permissions().mode() & 0o777,
            Err(_) => return Ok(()),
        };
        if mode & 0o077 != 0 {
            return Err(CliError::new(
                "credentials_insecure",
                format!(
                    "the credentials file {} has mode {mode:04o}: others may read its token, so                      it is not used. If nobody else could have read it, run `chmod 600 {}`;                      otherwise treat the token as leaked",
                    path.display(),
                    path.display()
                ),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// A parse error described without any of the parsed text (which may hold a secret).
pub fn describe_json_error(e: &serde_json::Error) -> String {
    let kind = match e.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "missing or mistyped field",
        serde_json::error::Category::Eof => "unexpected end of input",
    };
    format!("{kind} at line {} column {}", e.line(), e.column())
}

/// Whether `task` has saved credentials.
pub fn exists(dir: &Path, task: &str) -> bool {
    path_of(dir, task).exists()
}

/// How `save` treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fail with `task_exists` when the task already has a file (checked atomically).
    CreateNew,
    /// Replace the file.
    Replace,
}

/// Writes the credentials of `creds.task` atomically with mode 0600, creating the directory
/// (0700) if needed.
pub fn save(dir: &Path, creds: &Credentials, mode: Mode) -> Result<PathBuf> {
    ensure_directory(dir)?;
    let path = path_of(dir, &creds.task);
    let mut text = serde_json::to_vec_pretty(creds).map_err(|e| {
        CliError::new(
            "credentials_error",
            format!("cannot encode the credentials: {e}"),
        )
    })?;
    text.push(b'\n');
    let (tmp, mut file) = create_temp(dir, &creds.task)?;
    let written = file
        .write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error("write", &tmp, &e));
    drop(file);
    let placed = written.and_then(|()| match mode {
        Mode::Replace => fs::rename(&tmp, &path).map_err(|e| io_error("replace", &path, &e)),
        // A hard link fails when the target exists: no check-then-write race with another
        // `create` of the same task.
        Mode::CreateNew => match fs::hard_link(&tmp, &path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(task_exists(&creds.task, dir)),
            Err(e) => Err(io_error("create", &path, &e)),
        },
    });
    // After a rename the temporary name is gone already; after a link (or a failure) it goes.
    let _ = fs::remove_file(&tmp);
    placed?;
    sync_directory(dir);
    Ok(path)
}

/// The error of `create` for a task that has credentials already.
pub fn task_exists(task: &str, dir: &Path) -> CliError {
    CliError::new(
        "task_exists",
        format!(
            "task '{task}' already has a saved address in {} (use --force to replace it)",
            dir.display()
        ),
    )
}

fn ensure_directory(dir: &Path) -> Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| io_error("create the directory", dir, &e))?;
    #[cfg(unix)]
    {
        // An existing directory readable by others is tightened to 0700.
        use std::os::unix::fs::PermissionsExt;
        let meta = fs::metadata(dir).map_err(|e| io_error("inspect", dir, &e))?;
        if meta.permissions().mode() & 0o777 != 0o700 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| io_error("set the permissions of", dir, &e))?;
        }
    }
    Ok(())
}

/// A new temporary file next to the task's file, created exclusively with mode 0600.
fn create_temp(dir: &Path, task: &str) -> Result<(PathBuf, fs::File)> {
    let pid = std::process::id();
    let mut last = None;
    for attempt in 0..100u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = dir.join(format!(".{task}.json.{pid}.{nanos}.{attempt}.tmp"));
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        match options.open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io_error("create", &tmp, &e)),
        }
    }
    let e = last.unwrap_or_else(|| std::io::Error::other("no free temporary name"));
    Err(io_error("create a temporary file in", dir, &e))
}

/// Makes a rename durable (best effort: not every platform can sync a directory).
fn sync_directory(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names() {
        for ok in ["t", "task-42", "A.b_c-1", "x".repeat(128).as_str()] {
            assert!(validate_task(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "a b",
            "a\\b",
            "a\0b",
            "é",
            "x".repeat(129).as_str(),
        ] {
            assert!(validate_task(bad).is_err(), "{bad:?}");
        }
    }
}
