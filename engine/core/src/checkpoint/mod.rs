//! Checkpoints: a log position plus the folded state at that position, on disk, so
//! that a restart or a replay starts near where it wants to be instead of at the
//! beginning of the log.
//!
//! ## What is stored
//!
//! The **entity set**, not the in-memory maps: every raw entity (service
//! definitions per source, endpoints, config objects) written as its event payload
//! with its key, source and generation, plus each source's resync bookkeeping.
//! The merged view, the indexes, the hash and every xDS resource are derived from
//! that set, so restoring re-derives them with the code of the build that restores
//! (a checkpoint never freezes an old generator's output), and the restored state
//! equals the original exactly: same `ModelState`, same hash, and so the same
//! resources byte for byte and the same snapshot hash.
//!
//! Next to it, optionally, the **resources** built from that state, tagged with
//! the build and options that generated them ([`StoredResources`]): a replay
//! with the same build and options uses them instead of generating every
//! resource again. They are derived data and never the truth: the fold runner
//! rebuilds from the entity set, and a reader with another generator ignores
//! them.
//!
//! Each checkpoint also carries **fingerprints** of the log it was taken from: for
//! each partition, the xxh3 of the last record folded. A checkpoint is only used
//! with a log whose record at that offset has the same digest, so a checkpoint
//! directory pointed at another (or a rewritten) log is ignored rather than
//! silently merged in. A fingerprint record that the log no longer holds (Kafka
//! retention or compaction removed it) cannot be checked and is accepted. A
//! checkpoint below the log's compaction horizon ([`EventLog::horizon`]) is not
//! used: the records between it and the horizon are no longer those it followed.
//!
//! ## Files
//!
//! `DATA_DIR/checkpoints/checkpoint-<records>.dpc`, written atomically (temp file,
//! fsync, rename), the newest [`CheckpointPolicy::keep`] kept. A header with magic,
//! format version and xxh3 checksums of header and body detects any damage; a
//! damaged, foreign or too-new checkpoint is skipped (with a warning naming it
//! and why) in favour of the next older one, and with none left, of the start of
//! the log. See `format.rs` for the layout.
//!
//! ## Who writes and reads them
//!
//! - [`run_checkpointer`] watches the published snapshots and writes one every
//!   [`CheckpointPolicy::every_events`] records or [`CheckpointPolicy::every`]
//!   (whichever comes first, if the position moved), and a last one at shutdown.
//!   It reads snapshots, so the fold never waits for a checkpoint.
//! - [`load_verified`] finds the newest usable checkpoint at or before a position;
//!   `deltapilot run` restores from it at start, `deltapilot replay` starts there,
//!   having read it ahead ([`CheckpointStore::prefetch`]) while opening the log.
//!
//! What it does NOT do: fold events or generate resources (a restored
//! [`Checkpoint::model`] goes to the fold runner or the replayer, which do).

mod endpoints;
mod entities;
mod format;
mod prefetch;
mod store;
mod task;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use xxhash_rust::xxh3::xxh3_64;

use crate::Result;
use deltapilot_log::{EventLog, Position, RecordPos};
use deltapilot_model::state::ModelState;
use deltapilot_xds::ResourceSet;
use deltapilot_xds::generate::GenOptions;

pub use format::FORMAT_VERSION;
pub use store::{CheckpointFile, CheckpointStore, Loaded};
pub use task::{
    CheckpointFailure, CheckpointPolicy, CheckpointStats, run_checkpointer, run_counted,
};

/// The directory name, under the data directory, that holds checkpoints.
pub const CHECKPOINT_DIR: &str = "checkpoints";

/// A restored checkpoint.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// Everything before this position is folded into `model`.
    pub position: Position,
    /// The last record folded per partition, to recognise the log.
    pub fingerprints: Vec<Fingerprint>,
    /// The folded state at `position`.
    pub model: ModelState,
    /// The resources the writer had built from `model`, if it stored them.
    pub resources: Option<StoredResources>,
}

/// Resources stored with a checkpoint. They are derived data: a reader may use
/// them instead of building every resource again (what makes a replay from a
/// checkpoint fast) only if `generator` equals its own [`generator_id`]; the
/// entity set stays the truth, and the fold runner always rebuilds from it.
#[derive(Debug, Clone)]
pub struct StoredResources {
    /// The [`generator_id`] of the writer.
    pub generator: String,
    /// Every resource at the checkpoint's position.
    pub set: ResourceSet,
    /// `resources_hash` of `set` (see the fold runner), computed while reading
    /// it: a replay then keeps the snapshot hash current without walking the
    /// whole set at the end.
    pub hash: u64,
}

/// Identifies what generated a resource set: this build's version and the
/// generation options. Stored resources are reused only under an equal id (and
/// a spot check, see `replay`).
pub fn generator_id(opts: &GenOptions) -> String {
    format!("deltapilot {} {opts:?}", env!("CARGO_PKG_VERSION"))
}

/// The digest of one record of the log a checkpoint was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// Partition.
    pub partition: u32,
    /// Offset of the record (the last one folded in that partition).
    pub offset: u64,
    /// xxh3-64 of the record's bytes.
    pub digest: u64,
}

/// A checkpoint file that was passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The file.
    pub path: PathBuf,
    /// Why it was not used (corrupt, wrong log, beyond the wanted position, …).
    pub reason: String,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// Encodes a checkpoint file's bytes (what [`CheckpointStore::write`] writes), for
/// tests and tools that want the bytes without a directory.
pub fn encode(
    position: &Position,
    fingerprints: &[Fingerprint],
    model: &ModelState,
    resources: Option<(&str, &ResourceSet)>,
) -> Vec<u8> {
    format::encode(position, fingerprints, model, resources)
}

/// Decodes checkpoint bytes, verifying checksums and every entity; the error says
/// what is wrong.
pub fn decode(bytes: &[u8]) -> std::result::Result<Checkpoint, String> {
    format::decode(&bytes::Bytes::copy_from_slice(bytes))
}

/// Reads the record at `at` (if the log still holds it): every other partition is
/// asked from its head, so only `at`'s partition can answer.
async fn record_at<L: EventLog + ?Sized>(
    log: &L,
    head: &Position,
    at: RecordPos,
) -> Result<Option<bytes::Bytes>> {
    let mut offsets: Vec<u64> = head.offsets().to_vec();
    let p = at.partition as usize;
    if offsets.len() <= p {
        offsets.resize(p + 1, 0);
    }
    // Below the log's start the record was deleted by retention: nothing to
    // compare (and a read there is refused).
    if at.offset < log.start().offset(at.partition) {
        return Ok(None);
    }
    offsets[p] = at.offset;
    let recs = log.read(&Position::from_offsets(offsets), 1).await?;
    Ok(recs.into_iter().find(|r| r.pos == at).map(|r| r.bytes))
}

/// The fingerprints of `log` at `position`: the digest of the last record before
/// it in each partition (partitions at offset 0, or whose record is gone, have
/// none).
pub async fn fingerprints<L: EventLog + ?Sized>(
    log: &L,
    position: &Position,
) -> Result<Vec<Fingerprint>> {
    let head = log.head().await?;
    let mut out = Vec::new();
    for (p, &o) in position.offsets().iter().enumerate() {
        if o == 0 {
            continue;
        }
        let at = RecordPos {
            partition: u32::try_from(p).unwrap_or(u32::MAX),
            offset: o - 1,
        };
        if let Some(bytes) = record_at(log, &head, at).await? {
            out.push(Fingerprint {
                partition: at.partition,
                offset: at.offset,
                digest: xxh3_64(&bytes),
            });
        }
    }
    Ok(out)
}

/// Whether `cp` was taken from `log`: every fingerprinted record that the log
/// still holds has the same digest. `Err` carries the reason it was not.
pub async fn verify<L: EventLog + ?Sized>(
    log: &L,
    cp: &Checkpoint,
) -> Result<std::result::Result<(), String>> {
    let head = log.head().await?;
    if !head.covers(&cp.position) {
        return Ok(Err(format!(
            "taken at position {}, beyond the log's head {head} (the log was truncated or is another log)",
            cp.position
        )));
    }
    let horizon = log.horizon();
    if !cp.position.covers(&horizon) {
        return Ok(Err(format!(
            "taken at position {}, below the log's compaction horizon {horizon} (or its start, \
             once retention deleted segments): the records after it were compacted or deleted, \
             so resuming there would miss writes",
            cp.position
        )));
    }
    for f in &cp.fingerprints {
        let at = RecordPos {
            partition: f.partition,
            offset: f.offset,
        };
        if let Some(bytes) = record_at(log, &head, at).await? {
            let digest = xxh3_64(&bytes);
            if digest != f.digest {
                return Ok(Err(format!(
                    "the record at {at} differs from the one the checkpoint was taken after (another log?)"
                )));
            }
        }
    }
    Ok(Ok(()))
}

/// A blocking task that panicked or was cancelled while reading checkpoints under
/// `path`: an internal failure, not a bad file (bad files are passed over).
fn join_error(path: &std::path::Path) -> impl FnOnce(tokio::task::JoinError) -> crate::Error + '_ {
    move |e| crate::Error::Task(format!("reading checkpoints in {}: {e}", path.display()))
}

/// The newest checkpoint in `store` that decodes, lies at or before `at_most`
/// (when given) and the log's head, and was taken from `log`; with every newer
/// file passed over and why. Decoding runs on a blocking thread; a file that
/// [`CheckpointStore::prefetch`] read ahead is taken from there (and checked the
/// same way).
pub async fn load_verified<L: EventLog + ?Sized>(
    store: &CheckpointStore,
    log: &L,
    at_most: Option<&Position>,
) -> Result<Loaded> {
    let head = log.head().await?;
    let files = {
        let owned = store.clone();
        tokio::task::spawn_blocking(move || owned.list())
            .await
            .map_err(join_error(store.dir()))??
    };
    // A prefetch that failed to run is no loss: the files are read below.
    let mut ahead = match store.slot().take() {
        Some(task) => task.await.ok().flatten(),
        None => None,
    };
    let mut loaded = Loaded::default();
    for f in files.into_iter().rev() {
        let read = match ahead.take_if(|d| d.path == f.path) {
            Some(d) => d.for_load(at_most, &head),
            None => {
                let (head2, at_most2, path) = (head.clone(), at_most.cloned(), f.path.clone());
                tokio::task::spawn_blocking(move || {
                    store::read_checked(&path, &|p: &Position| {
                        prefetch::usable(p, at_most2.as_ref(), Some(&head2))
                    })
                })
                .await
                .map_err(join_error(&f.path))?
            }
        };
        let cp = match read {
            Ok(cp) => cp,
            Err(reason) => {
                loaded.rejected.push(Rejected {
                    path: f.path,
                    reason,
                });
                continue;
            }
        };
        match verify(log, &cp).await? {
            Ok(()) => {
                loaded.checkpoint = Some((f.path, cp));
                break;
            }
            Err(reason) => loaded.rejected.push(Rejected {
                path: f.path,
                reason,
            }),
        }
    }
    Ok(loaded)
}
