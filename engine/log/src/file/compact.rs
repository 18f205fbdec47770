//! Compaction of the embedded log: sealed segments wholly below a "safe" position
//! are rewritten to what `compact_plan.rs` keeps. Positions never move: a kept
//! record keeps its offset, dropped ones leave gaps, and the segment keeps its
//! name and range (a compacted segment, `DPLOGc03`, see `format.rs`).
//!
//! # Who says what is safe
//!
//! The log knows nothing about checkpoints (it must not depend on the engine), so
//! the caller passes `below`: every reader that matters resumes at or after it.
//! `deltapilot run` passes the position of its **oldest kept** checkpoint (not the
//! newest: a damaged newest checkpoint makes a restart fall back to an older one,
//! and that one must still lie at or above the compacted range); `deltapilot log
//! compact` passes `--below`, or the head.
//!
//! # The horizon
//!
//! State at a position inside a compacted range is not what it was (superseded
//! writes are gone); at the range's end and after it, folding from the start gives
//! exactly the original state. That end is the log's **horizon**
//! (`FileLog::horizon_offset`): replays refuse positions below it, and checkpoints below
//! it are not restored. It is written to `DIR/COMPACTED` (text, atomically: temp
//! file, fsync, rename) **before** any segment is rewritten, so after a crash the
//! recorded horizon is never below the compacted data.
//!
//! # Crash safety
//!
//! Segments are rewritten oldest first, each to `NAME.compact` (fsynced), then
//! renamed over the original and the directory fsynced: a crash leaves each
//! segment either whole or compacted, never torn, and a leftover `.compact` file
//! is removed at the next writer open. Oldest first keeps every state exact at the
//! horizon after a crash in the middle: a record is dropped only for a later one
//! that the rewrite of its own or a later segment keeps, and a tombstone is dropped
//! only with every earlier write of its entity, all of which sit in segments
//! already rewritten. Batches stay atomic: within each original batch, the last
//! kept record ends the batch (`dpR1`), so recovery's batch rule holds unchanged.
//! A compacted segment is never the newest, so damage in one is corruption
//! (reported at open), never a torn tail.
//!
//! # Memory
//!
//! The plan holds one entry per record of the range (tens of bytes) and the
//! distinct keys; segment bytes are read one segment at a time, twice (plan, then
//! rewrite), so memory is one segment plus the range's keys.
//!
//! A rewritten segment keeps the original's modification time: retention by
//! deletion (`retain.rs`) reads a segment's age from it.
//!
//! What it does NOT do: compact the newest segment, delete segments (`retain.rs`),
//! run by itself (the caller decides when), or know which checkpoints exist.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::compact_plan::{Admit, CompactPolicy, Planner};
use super::format::{self, RECORD_MAGIC, RECORD_MAGIC_MORE, SEGMENT_HEADER_LEN};
use super::marker::Marker;
use super::segment::{Segment, SparseIndex, read_exact_at};
use super::shared::Shared;
use super::writer::sync_dir;
use crate::{Error, RecordPos, Result};

/// The file holding the horizon, in the log directory.
pub const HORIZON_FILE: &str = "COMPACTED";
/// Suffix of a segment being rewritten (a marker being written ends so too).
const TEMP_SUFFIX: &str = super::marker::TEMP_SUFFIX;

/// What one compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// The horizon afterwards: the end of the compacted range (0: nothing is).
    pub horizon: u64,
    /// Segments in the range.
    pub segments: usize,
    /// Segments rewritten this time.
    pub rewritten: usize,
    /// Records in the range before and after.
    pub records_before: u64,
    /// Records in the range after.
    pub records_after: u64,
    /// Bytes of the range's segment files before.
    pub bytes_before: u64,
    /// Bytes of the range's segment files after.
    pub bytes_after: u64,
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error + use<> {
    let path = path.to_owned();
    move |source| Error::Io { op, path, source }
}

/// The horizon's marker file.
const HORIZON: Marker = Marker {
    file: HORIZON_FILE,
    word: "horizon",
};

/// The horizon recorded in `dir` (0 without a file).
pub(crate) fn read_horizon(dir: &Path) -> Result<u64> {
    HORIZON.read(dir)
}

/// Removes what a compaction killed midway left behind (writer open only).
pub(crate) fn remove_leftovers(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(io_err("list log directory", dir))?;
    for entry in entries {
        let entry = entry.map_err(io_err("list log directory", dir))?;
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| n.ends_with(TEMP_SUFFIX)) {
            let path = entry.path();
            tracing::warn!(file = %path.display(), "embedded log: removing the leftover of an interrupted compaction");
            std::fs::remove_file(&path).map_err(io_err("remove compaction leftover", &path))?;
        }
    }
    Ok(())
}

/// One record of a segment, as compaction sees it.
struct Raw {
    offset: u64,
    /// Byte range of the whole framed record in the segment's bytes.
    at: usize,
    total: usize,
    /// Ends its original batch.
    ends_batch: bool,
}

/// A segment of the range, copied out of the lock.
struct Part {
    base: u64,
    path: Arc<Path>,
    file: Arc<File>,
    end_byte: u64,
    end_offset: u64,
}

fn load(part: &Part) -> Result<(Vec<u8>, Vec<Raw>)> {
    let mut bytes = vec![0u8; part.end_byte as usize];
    read_exact_at(&part.file, &mut bytes, 0).map_err(io_err("read segment", &part.path))?;
    let mut raws = Vec::new();
    let mut at = SEGMENT_HEADER_LEN as usize;
    while at < bytes.len() {
        let f = format::parse_record(&bytes[at..]).map_err(|flaw| Error::Corrupt {
            segment: part.path.to_path_buf(),
            byte_offset: at as u64,
            offset: raws.last().map_or(part.base, |r: &Raw| r.offset + 1),
            reason: format!("while compacting: {flaw:?}"),
        })?;
        raws.push(Raw {
            offset: f.offset,
            at,
            total: f.total(),
            ends_batch: !f.more,
        });
        at += f.total();
    }
    Ok((bytes, raws))
}

/// Compacts the sealed segments of `shared` whose range ends at or below `below`.
/// The caller serialises compactions; appends go on meanwhile (they only touch
/// the newest segment, which is never in the range).
pub(crate) fn compact(
    shared: &Shared,
    below: u64,
    admit: &Admit,
    policy: CompactPolicy,
    durable: bool,
) -> Result<CompactReport> {
    let dir = shared.dir().to_owned();
    let parts: Vec<Part> = {
        let segs = shared.segments();
        let n = segs.list.len();
        segs.list
            .iter()
            .take(n.saturating_sub(1))
            .take_while(|s| s.end_offset <= below && s.checked_to.is_none())
            .map(|s| Part {
                base: s.base,
                path: s.path.clone(),
                file: s.file.clone(),
                end_byte: s.end_byte,
                end_offset: s.end_offset,
            })
            .collect()
    };
    let mut report = CompactReport {
        horizon: read_horizon(&dir)?,
        segments: parts.len(),
        ..Default::default()
    };
    let Some(range_end) = parts.last().map(|p| p.end_offset) else {
        return Ok(report);
    };

    // Pass 1: every record of the range, in order, to decide.
    let mut planner = Planner::new(admit);
    let refuse = |reason| Error::Compact {
        path: dir.clone(),
        reason,
    };
    for part in &parts {
        let (bytes, raws) = load(part)?;
        for r in &raws {
            let start = r.at + format::RECORD_HEADER_LEN;
            let pos = RecordPos {
                partition: 0,
                offset: r.offset,
            };
            planner
                .push(pos, &bytes[start..r.at + r.total])
                .map_err(refuse)?;
        }
        report.bytes_before += part.end_byte;
        report.records_before += raws.len() as u64;
    }
    let keep = planner.finish(policy);
    report.records_after = keep.iter().filter(|k| **k).count() as u64;

    if range_end > report.horizon {
        HORIZON.write(&dir, range_end)?;
        report.horizon = range_end;
        shared.set_horizon(range_end);
    }

    // Pass 2: rewrite, oldest first, each segment that loses records.
    let mut next = 0usize;
    for part in &parts {
        let (bytes, raws) = load(part)?;
        let flags = &keep[next..next + raws.len()];
        next += raws.len();
        if flags.iter().all(|k| *k) {
            report.bytes_after += part.end_byte;
            continue;
        }
        let seg = rewrite(part, &bytes, &raws, flags, durable)?;
        report.bytes_after += seg.end_byte;
        report.rewritten += 1;
        let mut segs = shared.segments_mut();
        if let Some(s) = segs.list.iter_mut().find(|s| s.base == part.base) {
            *s = seg;
        }
    }
    tracing::info!(
        dir = %dir.display(),
        below,
        horizon = report.horizon,
        segments = report.segments,
        rewritten = report.rewritten,
        records_before = report.records_before,
        records_after = report.records_after,
        "embedded log compacted"
    );
    Ok(report)
}

/// Writes the kept records of one segment as a compacted segment and puts it in
/// place of the original.
fn rewrite(
    part: &Part,
    bytes: &[u8],
    raws: &[Raw],
    keep: &[bool],
    durable: bool,
) -> Result<Segment> {
    let mut out = Vec::with_capacity(bytes.len() / 2);
    out.extend_from_slice(&format::compacted_segment_header(part.base));
    let mut index = SparseIndex::new();
    // Within each original batch, the last kept record now ends it.
    let mut ends = vec![false; raws.len()];
    let mut batch_has_later_kept = false;
    for i in (0..raws.len()).rev() {
        if raws[i].ends_batch {
            batch_has_later_kept = false;
        }
        if keep[i] {
            ends[i] = !batch_has_later_kept;
            batch_has_later_kept = true;
        }
    }
    for (i, r) in raws.iter().enumerate() {
        if !keep[i] {
            continue;
        }
        index.note(r.offset, out.len() as u64);
        let start = out.len();
        out.extend_from_slice(&bytes[r.at..r.at + r.total]);
        // The magic is outside the CRC: changing it keeps the record valid.
        let magic = if ends[i] {
            RECORD_MAGIC
        } else {
            RECORD_MAGIC_MORE
        };
        out[start..start + 4].copy_from_slice(&magic);
    }
    let path: PathBuf = part.path.to_path_buf();
    let tmp = PathBuf::from(format!("{}{TEMP_SUFFIX}", path.display()));
    {
        let mut f = File::create(&tmp).map_err(io_err("write compacted segment", &tmp))?;
        f.write_all(&out)
            .map_err(io_err("write compacted segment", &tmp))?;
        // The age retention judges a segment by (`retain.rs`) is its last append,
        // not its last rewrite: a segment compacted again and again must still
        // age out.
        let appended = part
            .file
            .metadata()
            .and_then(|m| m.modified())
            .map_err(io_err("stat segment", &part.path))?;
        f.set_modified(appended)
            .map_err(io_err("write compacted segment", &tmp))?;
        if durable {
            f.sync_all()
                .map_err(io_err("fsync compacted segment", &tmp))?;
        }
    }
    std::fs::rename(&tmp, &path).map_err(io_err("replace segment", &path))?;
    if let Some(dir) = path.parent()
        && durable
    {
        sync_dir(dir)?;
    }
    let file = OpenOptions::new()
        .read(true)
        .open(&path)
        .map_err(io_err("open compacted segment", &path))?;
    let mut seg = Segment::new(part.base, path, Arc::new(file));
    seg.end_byte = out.len() as u64;
    seg.end_offset = part.end_offset;
    seg.index = index;
    seg.compacted = true;
    Ok(seg)
}
