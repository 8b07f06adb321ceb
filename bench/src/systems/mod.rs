//! The two systems under test (agentaddress serve and etcd) and the phases run against each:
//! what a run reports lives here; each system in its own module, with what they share
//! (measurement, processes, the HTTP client) beside them.

use std::path::PathBuf;
use std::time::Duration;

mod agentaddress;
mod email;
mod etcd;
mod http;
mod measure;
mod process;

pub use agentaddress::{run_agentaddress, HTTP2_CONNECTIONS};
pub use etcd::run_etcd;

pub struct Config {
    pub clients: usize,
    pub phase: Duration,
    pub idle_polls: usize,
    pub delay_samples: usize,
    pub work_dir: PathBuf,
}

/// agentaddress with everything on, or with one optimisation turned off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Default,
    /// One request per SQLite transaction (`AGENTADDRESS_SQLITE_GROUP_MAX=1`).
    NoGroupCommit,
    /// Long polls re-read the feed with backoff instead of waiting for the commit's wake-up.
    NoWakeups,
}

impl Variant {
    pub fn label(self) -> &'static str {
        match self {
            Variant::Default => "default",
            Variant::NoGroupCommit => "group commit",
            Variant::NoWakeups => "wake-ups",
        }
    }

    fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Variant::Default => &[],
            Variant::NoGroupCommit => &[("AGENTADDRESS_SQLITE_GROUP_MAX", "1")],
            Variant::NoWakeups => &[("AGENTADDRESS_SQLITE_WAKEUPS", "false")],
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Throughput {
    pub per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub cpu_pct: f64,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Delay {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub samples: u64,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Idle {
    pub held: usize,
    pub rss_mb: f64,
    pub cpu_pct: f64,
}

#[derive(Debug, Default)]
pub struct Figures {
    pub cas: Throughput,
    pub cas_conflicts_per_s: f64,
    pub deliver: Throughput,
    pub read: Throughput,
    pub delay: Delay,
    /// One connection per poll (HTTP/1.1; etcd: one watch per HTTP/1.1 request).
    pub idle: Idle,
    /// The same polls over HTTP/2 (h2c, `HTTP2_CONNECTIONS` connections) on a fresh server:
    /// agentaddress in its default variant only.
    pub idle_http2: Option<Idle>,
    /// The email phase (agentaddress in its default variant only).
    pub email: Option<email::EmailFigures>,
    pub peak_rss_mb: f64,
    pub errors: Vec<String>,
}
