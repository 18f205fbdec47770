//! The file adapter's small persisted state: the last resync generation it used, and
//! every file's objects in force (its last good state).
//!
//! Why it exists:
//! - **Generation.** Each start resyncs under a generation above every earlier one of
//!   the same source (the engine ignores events below its last completed resync).
//!   The generation is `max(now in Unix microseconds, persisted + 1)`: the clock
//!   alone is enough as long as it never steps back across a restart by more than the
//!   downtime; the persisted value makes it strictly increasing even then.
//! - **Last good state across restarts.** A file that is broken when the adapter
//!   starts would otherwise contribute nothing to the start-up resync, and the
//!   engine's sweep would remove its entities. With the state file, its last good
//!   objects are re-emitted instead, exactly as if the adapter had kept running.
//!
//! The log stays the truth: this file is a cache the adapter can lose. Without it
//! (no state directory, or a corrupt file, which is logged and ignored), generations
//! come from the clock and a file broken at start-up loses its entities until fixed.
//!
//! Format: JSON, `{"format":1,"source":..,"generation":..,"files":{path:[object..]}}`,
//! entities in their proto3 JSON form; written to a temporary file, synced, then
//! renamed over the old one, so a crash leaves the old or the new state, never half.
//!
//! What it does NOT do: decide what to append, or store anything but what the files
//! said (no log positions: the adapter never reads the log).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltapilot_proto as pb;
use serde::{Deserialize, Serialize};

use super::parse::{IstioObject, ObjectId, restored_join};
use super::scan::FileState;
pub(crate) use crate::generation::next_generation;
use crate::generation::{read_state, state_path, write_atomically};
use crate::{Error, Result};

/// Version of the state file layout this build writes and reads.
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct StateFile {
    format: u32,
    source: String,
    generation: u64,
    files: BTreeMap<String, Vec<PersistedObject>>,
}

#[derive(Serialize, Deserialize)]
struct PersistedObject {
    document: usize,
    config: pb::ConfigObject,
    services: Vec<pb::Service>,
    endpoints: Vec<PersistedEndpoint>,
    /// A WorkloadEntry's health (from its `status`, which the config does not
    /// carry); absent in files written before WorkloadEntries were joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workload_health: Option<i32>,
}

#[derive(Serialize, Deserialize)]
struct PersistedEndpoint {
    key: String,
    endpoint: pb::Endpoint,
}

/// What a state file held.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// The last generation used (0 when none).
    pub(crate) generation: u64,
    /// Files and their objects in force.
    pub(crate) files: BTreeMap<PathBuf, FileState>,
}

/// Reads and writes one source's state file in a directory.
#[derive(Debug)]
pub(crate) struct StateStore {
    path: PathBuf,
    source: String,
}

impl StateStore {
    /// The store for `source` in `dir` (created if missing). Several sources may
    /// share a directory: the file name carries a hash of the source id.
    pub(crate) fn open(dir: &Path, source: &str) -> Result<Self> {
        Ok(Self {
            path: state_path(dir, "file-adapter", source)?,
            source: source.to_owned(),
        })
    }

    /// The state file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the state; a missing file is an empty state, an unusable one an error
    /// the caller logs before starting empty.
    pub(crate) fn load(&self) -> Result<Loaded> {
        let Some(state) = read_state::<StateFile>(&self.path, &self.source, FORMAT)? else {
            return Ok(Loaded::default());
        };
        let bad = |reason: String| Error::State {
            path: self.path.clone(),
            reason,
        };
        let mut files = BTreeMap::new();
        for (path, objects) in state.files {
            let objects = objects
                .into_iter()
                .map(restore_object)
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad)?;
            files.insert(PathBuf::from(path), FileState::restored(objects));
        }
        Ok(Loaded {
            generation: state.generation,
            files,
        })
    }

    /// Writes the state atomically.
    pub(crate) fn save<'a>(
        &self,
        generation: u64,
        files: impl IntoIterator<Item = (&'a Path, &'a [Arc<IstioObject>])>,
    ) -> Result<()> {
        let state = StateFile {
            format: FORMAT,
            source: self.source.clone(),
            generation,
            files: files
                .into_iter()
                .map(|(p, objs)| {
                    (
                        p.to_string_lossy().into_owned(),
                        objs.iter().map(|o| persist_object(o)).collect(),
                    )
                })
                .collect(),
        };
        let bytes = serde_json::to_vec(&state).map_err(|e| Error::State {
            path: self.path.clone(),
            reason: format!("encode: {e}"),
        })?;
        write_atomically(&self.path, &bytes)
    }
}

fn persist_object(o: &IstioObject) -> PersistedObject {
    PersistedObject {
        document: o.document,
        config: o.config.clone(),
        services: o.services.clone(),
        endpoints: o
            .endpoints
            .iter()
            .map(|(key, endpoint)| PersistedEndpoint {
                key: key.clone(),
                endpoint: endpoint.clone(),
            })
            .collect(),
        workload_health: o.workload.as_ref().map(|w| w.health as i32),
    }
}

fn restore_object(p: PersistedObject) -> Result<Arc<IstioObject>, String> {
    let kind = p.config.kind();
    if kind == pb::ConfigKind::Unspecified {
        return Err(format!(
            "object {}/{} has no kind",
            p.config.namespace, p.config.name
        ));
    }
    let health = p
        .workload_health
        .map(|h| pb::Health::try_from(h).unwrap_or(pb::Health::Unspecified));
    // The join facts are derived from the carried spec; one that no longer reads
    // (a state file from another build) joins nothing rather than losing the file.
    let (selector, workload) = restored_join(&p.config, health).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "file adapter: state file object without its join facts");
        (None, None)
    });
    Ok(Arc::new(IstioObject {
        selector,
        workload,
        id: ObjectId {
            kind,
            namespace: p.config.namespace.clone(),
            name: p.config.name.clone(),
        },
        document: p.document,
        config: p.config,
        services: p.services,
        endpoints: p
            .endpoints
            .into_iter()
            .map(|e| (e.key, e.endpoint))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_increase_even_when_the_clock_steps_back() {
        assert_eq!(next_generation(0, 1_000), 1_000);
        assert_eq!(
            next_generation(5_000, 1_000),
            5_001,
            "clock behind the last generation"
        );
        assert_eq!(
            next_generation(7, -1),
            8,
            "a clock before 1970 still moves forward"
        );
    }

    #[test]
    fn state_round_trips_and_refuses_another_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = StateStore::open(dir.path(), "file:/a").expect("open");
        assert_eq!(store.load().expect("missing is empty").generation, 0);
        let obj = Arc::new(IstioObject {
            id: ObjectId {
                kind: pb::ConfigKind::ServiceEntry,
                namespace: "ns".into(),
                name: "s".into(),
            },
            document: 2,
            config: pb::ConfigObject {
                kind: pb::ConfigKind::ServiceEntry as i32,
                namespace: "ns".into(),
                name: "s".into(),
                spec_json: "{}".into(),
                ..Default::default()
            },
            services: vec![pb::Service {
                hostname: "a.b".into(),
                namespace: "ns".into(),
                ..Default::default()
            }],
            endpoints: vec![(
                "ep/x".into(),
                pb::Endpoint {
                    address: "10.0.0.1".into(),
                    ..Default::default()
                },
            )],
            selector: None,
            workload: None,
        });
        let objs = [obj.clone()];
        store
            .save(42, [(Path::new("/w/a.yaml"), &objs[..])])
            .expect("save");
        let loaded = store.load().expect("load");
        assert_eq!(loaded.generation, 42);
        let f = loaded.files.get(Path::new("/w/a.yaml")).expect("file");
        assert_eq!(f.objects(), &objs[..]);

        let other = StateStore {
            path: store.path().to_owned(),
            source: "file:/b".into(),
        };
        assert!(matches!(other.load(), Err(Error::State { .. })));
        std::fs::write(store.path(), b"{not json").expect("write");
        assert!(matches!(store.load(), Err(Error::State { .. })));
    }
}
