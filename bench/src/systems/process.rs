//! The servers' processes: started on a free port in a fresh directory, logged to a file,
//! killed when dropped.

use std::path::Path;
use std::process::{Child, Stdio};

pub(super) struct Server {
    pub(super) child: Child,
    pub(super) pid: u32,
    pub(super) url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

pub(super) fn fresh_dir(dir: &Path) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

pub(super) fn log_file(path: &Path) -> Result<Stdio, String> {
    std::fs::File::create(path)
        .map(Stdio::from)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}
