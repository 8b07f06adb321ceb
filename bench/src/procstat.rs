//! A process's memory and CPU from `/proc/<pid>` (Linux).

use std::time::Instant;

/// Resident set size now and its peak, in MiB.
pub fn rss_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// User + system CPU time of the process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after its closing parenthesis start with
    // `state` (field 3), so utime (14) and stime (15) are the 12th and 13th of them.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// CPU use between `start()` and `percent()`: 100 = one core busy all the time.
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    pid: u32,
    ticks: u64,
    at: Instant,
}

impl CpuMeter {
    pub fn start(pid: u32) -> Self {
        Self {
            pid,
            ticks: cpu_ticks(pid).unwrap_or(0),
            at: Instant::now(),
        }
    }

    pub fn percent(&self) -> f64 {
        let used = cpu_ticks(self.pid)
            .unwrap_or(self.ticks)
            .saturating_sub(self.ticks);
        let wall = self.at.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return f64::NAN;
        }
        used as f64 / ticks_per_second() / wall * 100.0
    }
}
