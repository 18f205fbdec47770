//! File-descriptor limits: 10,000 simulated proxies need 10,000 sockets here (and
//! twice that during the baseline, whose server runs in this process), far above
//! the usual soft limit of 1,024.
//!
//! At start the soft `RLIMIT_NOFILE` is raised to the hard limit, and above it when
//! the process may (root). The standard library has no `setrlimit`, and the crate
//! forbids `unsafe`, so this runs util-linux's `prlimit --pid <self>`; the new
//! limit applies to the whole process and is inherited by a spawned server. If the
//! limit is still too low the run stops before connecting anything, with the
//! `ulimit -n` to use — never a hang halfway through.
//!
//! What it does NOT do: change system-wide limits (`fs.file-max`, `fs.nr_open`).

use anyhow::bail;

/// Descriptors kept free for everything that is not a proxy connection: the
/// runtime, the log, files, the admin scrapes.
pub const RESERVE: u64 = 512;

/// The soft and hard `RLIMIT_NOFILE` of this process, from `/proc/self/limits`.
pub fn current() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut it = line["Max open files".len()..].split_whitespace();
    let parse = |s: Option<&str>| -> Option<u64> {
        match s? {
            "unlimited" => Some(u64::MAX),
            n => n.parse().ok(),
        }
    };
    Some((parse(it.next())?, parse(it.next())?))
}

fn prlimit(soft: u64, hard: u64) -> bool {
    std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={soft}:{hard}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Raises the soft limit to at least `need` if it can (to the hard limit, or
/// beyond when privileged) and returns the limits now in force.
pub fn raise(need: u64) -> (u64, u64) {
    let Some((soft, hard)) = current() else {
        return (0, 0);
    };
    if soft >= need {
        return (soft, hard);
    }
    if need > hard {
        // Only a privileged process may raise the hard limit; try, quietly.
        prlimit(need, need);
    }
    if let Some((s, h)) = current()
        && s < need
        && s < h
    {
        prlimit(h, h);
    }
    current().unwrap_or((soft, hard))
}

/// Fails with a clear message when `need` descriptors are not available.
pub fn ensure(need: u64, what: &str) -> anyhow::Result<(u64, u64)> {
    let (soft, hard) = raise(need);
    if soft < need {
        bail!(
            "{what} needs about {need} file descriptors, but RLIMIT_NOFILE is {soft} (hard {hard}) \
             and could not be raised further. Run `ulimit -n {need}` (as root, or after raising \
             the hard limit in /etc/security/limits.conf) in the shell that starts the load \
             generator, or use fewer --proxies"
        );
    }
    Ok((soft, hard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_limits_and_refuses_the_impossible_clearly() {
        let (soft, hard) = current().expect("limits");
        assert!(soft > 0 && hard >= soft);
        let e = ensure(u64::MAX / 2, "this test")
            .expect_err("impossible")
            .to_string();
        assert!(e.contains("ulimit -n"), "{e}");
    }
}
