//! A local process's CPU time and memory, from `/proc/<pid>`.
//!
//! What it does NOT do: reach remote servers (see `metrics`).

use std::path::PathBuf;
use std::sync::OnceLock;

/// One reading of a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ProcSample {
    /// User plus system CPU time so far, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub rss_bytes: u64,
    /// Peak resident set size so far, in bytes.
    pub peak_rss_bytes: u64,
    /// Open file descriptors.
    pub fds: u64,
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux in practice).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// Reads `/proc/<pid>/{stat,status,fd}`; `None` if the process is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let stat = std::fs::read_to_string(base.join("stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(base.join("status")).ok()?;
    let fds = std::fs::read_dir(base.join("fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    Some(ProcSample {
        cpu_seconds: (utime + stime) / clock_ticks(),
        rss_bytes: status_kib(&status, "VmRSS:").unwrap_or(0) * 1024,
        peak_rss_bytes: status_kib(&status, "VmHWM:").unwrap_or(0) * 1024,
        fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = sample(std::process::id()).expect("self");
        assert!(s.rss_bytes > 0 && s.peak_rss_bytes >= s.rss_bytes);
        assert!(s.fds > 0);
        assert!(sample(u32::MAX).is_none());
    }
}
