//! File-descriptor limits: 10,000 simulated proxies need 10,000 sockets here (and
//! twice that during the baseline, whose server runs in this process), far above
//! the usual soft limit of 1,024.
//!
//! At start the soft `RLIMIT_NOFILE` is raised to the hard limit, and above it when
//! the process may (root), with rustix's `setrlimit` (the crate forbids `unsafe`,
//! and the standard library has no `setrlimit`); the new limit applies to the whole
//! process and is inherited by a spawned server. If the limit is still too low the
//! run stops before connecting anything, with the `ulimit -n` to use — never a hang
//! halfway through.
//!
//! What it does NOT do: change system-wide limits (`fs.file-max`, `fs.nr_open`).

use anyhow::bail;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept free for everything that is not a proxy connection: the
/// runtime, the log, files, the admin scrapes.
pub const RESERVE: u64 = 512;

/// The soft and hard `RLIMIT_NOFILE` of this process (`u64::MAX` for unlimited).
pub fn current() -> Option<(u64, u64)> {
    let limit = getrlimit(Resource::Nofile);
    Some((
        limit.current.unwrap_or(u64::MAX),
        limit.maximum.unwrap_or(u64::MAX),
    ))
}

/// Sets the soft and hard limit; whether the kernel allowed it.
fn set(soft: u64, hard: u64) -> bool {
    let limit = Rlimit {
        current: Some(soft),
        maximum: Some(hard),
    };
    setrlimit(Resource::Nofile, limit).is_ok()
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
        set(need, need);
    }
    if let Some((s, h)) = current()
        && s < need
        && s < h
    {
        set(h, h);
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
