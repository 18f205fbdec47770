//! An adapter's persisted resync generation, shared by the adapters whose only
//! persisted state is that number (Eureka, Kubernetes).
//!
//! Each start resyncs under a generation above every earlier one of the same source
//! (the engine skips events below its last completed resync). The generation is
//! `max(now in Unix microseconds, persisted + 1)`: the clock alone suffices unless
//! it steps back across a restart, the persisted value covers that case.
//!
//! Format: JSON `{"format":1,"source":..,"generation":..}` in
//! `<prefix>-<fnv64(source)>.json`, written to a temporary file, synced, then
//! renamed over the old one.
//!
//! What it does NOT do: decide what to append or read the log.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct StateFile {
    format: u32,
    source: String,
    generation: u64,
}

/// Reads and writes one source's state file in a directory.
#[derive(Debug)]
pub(crate) struct GenerationStore {
    path: PathBuf,
    source: String,
}

impl GenerationStore {
    /// The store for `source` in `dir` (created if missing). Several sources may
    /// share a directory: the file name carries a hash of the source id.
    pub(crate) fn open(dir: &Path, prefix: &str, source: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            op: "create state directory",
            path: dir.to_owned(),
            source: e,
        })?;
        let path = dir.join(format!("{prefix}-{:016x}.json", fnv1a64(source.as_bytes())));
        Ok(Self {
            path,
            source: source.to_owned(),
        })
    }

    /// The state file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The last generation used: 0 when there is no file, an error when the file is
    /// unusable (the caller logs it and starts from the clock).
    pub(crate) fn load(&self) -> Result<u64> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => {
                return Err(Error::Io {
                    op: "read state file",
                    path: self.path.clone(),
                    source: e,
                });
            }
        };
        let bad = |reason: String| Error::State {
            path: self.path.clone(),
            reason,
        };
        let state: StateFile = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if state.format != FORMAT {
            return Err(bad(format!("format {} is not {FORMAT}", state.format)));
        }
        if state.source != self.source {
            return Err(bad(format!(
                "written for source {:?}, not {:?}",
                state.source, self.source
            )));
        }
        Ok(state.generation)
    }

    /// Writes `generation` atomically.
    pub(crate) fn save(&self, generation: u64) -> Result<()> {
        let bytes = serde_json::to_vec(&StateFile {
            format: FORMAT,
            source: self.source.clone(),
            generation,
        })
        .map_err(|e| Error::State {
            path: self.path.clone(),
            reason: format!("encode: {e}"),
        })?;
        let tmp = self.path.with_extension("json.tmp");
        let io = |op: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| Error::Io { op, path, source }
        };
        let mut f = std::fs::File::create(&tmp).map_err(io("create state file", &tmp))?;
        f.write_all(&bytes).map_err(io("write state file", &tmp))?;
        f.sync_all().map_err(io("sync state file", &tmp))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(io("replace state file", &self.path))
    }
}

/// The generation of a new resync: strictly above `previous`, and the clock's
/// microseconds when those are higher.
pub(crate) fn next_generation(previous: u64, now_micros: i64) -> u64 {
    u64::try_from(now_micros)
        .unwrap_or(0)
        .max(previous.saturating_add(1))
}

/// FNV-1a, 64-bit: the same in every build, for the file name.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_persist_increase_and_belong_to_one_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = GenerationStore::open(dir.path(), "eureka-adapter", "eureka").expect("open");
        assert_eq!(store.load().expect("missing is 0"), 0);
        store.save(42).expect("save");
        assert_eq!(store.load().expect("load"), 42);
        assert_eq!(
            next_generation(42, 10),
            43,
            "clock behind the last generation"
        );
        assert_eq!(next_generation(42, 1_000), 1_000);

        let other = GenerationStore {
            path: store.path().to_owned(),
            source: "eureka-b".into(),
        };
        assert!(matches!(other.load(), Err(Error::State { .. })));
        std::fs::write(store.path(), b"{").expect("write");
        assert!(matches!(store.load(), Err(Error::State { .. })));
    }
}
