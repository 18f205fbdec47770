//! An adapter's persisted resync generation, shared by the adapters whose only
//! persisted state is that number (Eureka, Kubernetes), and the state-file
//! plumbing every adapter's state uses (the file adapter's too): where the file
//! lives, its format/source header check, and atomic writes.
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

use serde::de::DeserializeOwned;
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
        Ok(Self {
            path: state_path(dir, prefix, source)?,
            source: source.to_owned(),
        })
    }

    /// The store in `dir`, if one is configured, and the generation it holds: 0
    /// without a directory or a file, and 0 with a warning for an unusable file
    /// (the clock alone then picks the generation). `adapter` names the adapter
    /// in the warning.
    pub(crate) fn open_loaded(
        dir: Option<&Path>,
        prefix: &str,
        source: &str,
        adapter: &str,
    ) -> Result<(Option<Self>, u64)> {
        let Some(dir) = dir else {
            return Ok((None, 0));
        };
        let store = Self::open(dir, prefix, source)?;
        let generation = store.load().unwrap_or_else(|e| {
            tracing::warn!(adapter, state_file = %store.path().display(), error = %e,
                "adapter: ignoring unusable state file; generation from the clock");
            0
        });
        Ok((Some(store), generation))
    }

    /// The state file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The last generation used: 0 when there is no file, an error when the file is
    /// unusable (the caller logs it and starts from the clock).
    pub(crate) fn load(&self) -> Result<u64> {
        let state: Option<StateFile> = read_state(&self.path, &self.source, FORMAT)?;
        Ok(state.map_or(0, |s| s.generation))
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
        write_atomically(&self.path, &bytes)
    }
}

/// `<dir>/<prefix>-<fnv64(source)>.json`, creating `dir` if missing.
pub(crate) fn state_path(dir: &Path, prefix: &str, source: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        op: "create state directory",
        path: dir.to_owned(),
        source: e,
    })?;
    Ok(dir.join(format!("{prefix}-{:016x}.json", fnv1a64(source.as_bytes()))))
}

/// The part every adapter state file starts with.
#[derive(Deserialize)]
struct Header {
    format: u32,
    source: String,
}

/// Reads a JSON state file: `None` when it does not exist, an error when it is
/// unreadable, not JSON, of another `format`, or written for another `source`.
pub(crate) fn read_state<T: DeserializeOwned>(
    path: &Path,
    source: &str,
    format: u32,
) -> Result<Option<T>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Io {
                op: "read state file",
                path: path.to_owned(),
                source: e,
            });
        }
    };
    let bad = |reason: String| Error::State {
        path: path.to_owned(),
        reason,
    };
    let header: Header = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if header.format != format {
        return Err(bad(format!("format {} is not {format}", header.format)));
    }
    if header.source != source {
        return Err(bad(format!(
            "written for source {:?}, not {source:?}",
            header.source
        )));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

/// Writes `bytes` to a temporary file, syncs it, then renames it over `path`, so a
/// crash leaves the old or the new file, never half of one.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let io = |op: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { op, path, source }
    };
    let mut f = std::fs::File::create(&tmp).map_err(io("create state file", &tmp))?;
    f.write_all(bytes).map_err(io("write state file", &tmp))?;
    f.sync_all().map_err(io("sync state file", &tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io("replace state file", path))
}

/// The generation of a new resync: strictly above `previous`, and the clock's
/// microseconds when those are higher.
pub(crate) fn next_generation(previous: u64, now_micros: i64) -> u64 {
    u64::try_from(now_micros)
        .unwrap_or(0)
        .max(previous.saturating_add(1))
}

/// FNV-1a, 64-bit: the same in every build, for the file name.
fn fnv1a64(bytes: &[u8]) -> u64 {
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
