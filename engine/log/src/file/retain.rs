//! Retention by deletion: whole sealed segments at the front of the log, wholly
//! below a position the caller vouches for and outside the retention window, are
//! deleted, oldest first. Records are never rewritten here (that is `compact.rs`),
//! and the newest segment is never deleted.
//!
//! # The log's start
//!
//! Once segments are deleted the log starts above 0. The first offset is
//! recorded in `DIR/START` (text, `start <offset>`, written atomically, see
//! `marker.rs`) **before** any segment file is removed. A file
//! rather than the first segment's name alone, because the name cannot tell a
//! segment deleted by retention from one an operator or a failing disk lost: with
//! the file, a first segment above the recorded start is still refused at open
//! ("earlier segments are missing"), as it is for a log that never deleted one.
//!
//! # Crash safety
//!
//! The cut is the base of the first segment kept, so the segments being removed
//! hold only records below it. A crash after `START` is written and before (or
//! while) the files are removed leaves segments below the start: the next writer
//! open removes them, and a reader ignores them. Nothing at or above the cut is
//! opened for writing, renamed or removed, so no crash loses a record above it.
//!
//! # The window
//!
//! A segment is outside the window when it is older than the time window (its
//! file's modification time: the time of its last append, which compaction
//! carries over to the rewritten file), or, with a size window, when the segments
//! after it already hold at least that many bytes. Either is enough, as with
//! Kafka's `retention.ms` and `retention.bytes`.
//!
//! What it does NOT do: decide which position is safe (the caller passes the
//! position of its oldest checkpoint), or run by itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::marker::Marker;
use super::segment::{list_segments, segment_file_name};
use super::shared::Shared;
use super::writer::sync_dir;
use crate::{Error, Result};

/// The file holding the log's first offset once segments were deleted.
pub const START_FILE: &str = "START";

/// When a sealed segment lies outside the retention window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletePolicy {
    /// A segment last appended to longer ago than this is outside.
    pub max_age: Duration,
    /// A segment is outside when the segments after it hold at least this many
    /// bytes.
    pub max_bytes: Option<u64>,
    /// "Now", for the segments' age.
    pub now: SystemTime,
}

/// What one deletion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteReport {
    /// The log's first offset afterwards.
    pub start: u64,
    /// Segment files deleted.
    pub segments: usize,
    /// Their bytes.
    pub bytes: u64,
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error + use<> {
    let path = path.to_owned();
    move |source| Error::Io { op, path, source }
}

/// The start's marker file.
const START: Marker = Marker {
    file: START_FILE,
    word: "start",
};

/// The start recorded in `dir` (0 without a file).
pub(crate) fn read_start(dir: &Path) -> Result<u64> {
    START.read(dir)
}

/// The segment bases of `dir` at or above its recorded start, with that start;
/// the bases below it (left by a deletion that was cut short) come back apart.
/// The start is read after the listing: `START` is written before any file is
/// removed, so a listing taken before a deletion is still covered by it.
pub(crate) fn list_from_start(dir: &Path) -> Result<(u64, Vec<u64>, Vec<u64>)> {
    let mut bases = list_segments(dir)?;
    let start = read_start(dir)?;
    let kept = bases.split_off(bases.partition_point(|&b| b < start));
    Ok((start, kept, bases))
}

/// Removes segments below the recorded start that a deletion cut short left
/// (writer open only), once the segment at the start is known to exist.
pub(crate) fn remove_below_start(
    dir: &Path,
    start: u64,
    below: &[u64],
    kept: &[u64],
) -> Result<()> {
    if below.is_empty() || kept.first() != Some(&start) {
        return Ok(());
    }
    for &base in below {
        let path = dir.join(segment_file_name(base));
        tracing::warn!(segment = %path.display(), start, "embedded log: removing a segment below the log's start (a retention deletion was interrupted)");
        std::fs::remove_file(&path).map_err(io_err("remove deleted segment", &path))?;
    }
    sync_dir(dir)
}

/// A sealed segment at the front, copied out of the lock.
struct Candidate {
    path: Arc<Path>,
    end_offset: u64,
    bytes: u64,
}

/// Deletes the sealed segments at the front of `shared` whose records all lie
/// below `below` and that are outside `policy`'s window. The caller serialises
/// this with compaction; appends go on meanwhile (they only touch the newest
/// segment, which is never deleted).
pub(crate) fn delete(
    shared: &Shared,
    below: u64,
    policy: DeletePolicy,
    durable: bool,
) -> Result<DeleteReport> {
    let dir = shared.dir().to_owned();
    let (candidates, total) = {
        let segs = shared.segments();
        let n = segs.list.len();
        let total: u64 = segs.list.iter().map(|s| s.end_byte).sum();
        let c: Vec<Candidate> = segs
            .list
            .iter()
            .take(n.saturating_sub(1))
            .take_while(|s| s.end_offset <= below && s.checked_to.is_none())
            .map(|s| Candidate {
                path: s.path.clone(),
                end_offset: s.end_offset,
                bytes: s.end_byte,
            })
            .collect();
        (c, total)
    };
    let mut report = DeleteReport {
        start: shared.start(),
        ..Default::default()
    };
    let mut after = total;
    let mut doomed: Vec<PathBuf> = Vec::new();
    for c in &candidates {
        after -= c.bytes;
        let modified = std::fs::metadata(&c.path)
            .and_then(|m| m.modified())
            .map_err(io_err("stat segment", &c.path))?;
        let old = policy
            .now
            .duration_since(modified)
            .is_ok_and(|age| age > policy.max_age);
        let over = policy.max_bytes.is_some_and(|m| after >= m);
        if !(old || over) {
            break;
        }
        report.start = c.end_offset;
        report.segments += 1;
        report.bytes += c.bytes;
        doomed.push(c.path.to_path_buf());
    }
    if doomed.is_empty() {
        return Ok(report);
    }

    START.write(&dir, report.start)?;
    {
        let mut segs = shared.segments_mut();
        // The cut is the base of the first segment kept.
        let gone = segs.list.partition_point(|s| s.base < report.start);
        segs.list.drain(..gone);
    }
    shared.set_start(report.start);
    for path in &doomed {
        std::fs::remove_file(path).map_err(io_err("delete segment", path))?;
    }
    if durable {
        sync_dir(&dir)?;
    }
    tracing::info!(
        dir = %dir.display(),
        below,
        start = report.start,
        segments = report.segments,
        bytes = report.bytes,
        "embedded log: segments deleted by retention"
    );
    Ok(report)
}
