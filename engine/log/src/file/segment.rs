//! Segments in memory and the read path.
//!
//! A segment file is named after its base offset, 20 zero-padded digits plus `.log`
//! (`00000000000000001234.log`), so names sort in log order and the segment holding
//! an offset is found by binary search over the in-memory list. Each segment keeps a
//! sparse offset→byte index with one entry per [`INDEX_INTERVAL_BYTES`] of records:
//! a read seeks to the nearest entry at or before its offset and scans at most that
//! many bytes to reach it. Memory is 16 bytes per 4 KiB of log (about 0.4 %).
//!
//! Reads re-verify every record they return (magic, CRC, expected offset) and never
//! go past the head the log has published.
//!
//! A sealed segment that a read-only view opened without reading it (see
//! `sealed.rs`) starts with an empty index and a *checked prefix* of just its
//! header. A read landing past that prefix starts scanning at its end, so every
//! record on the way is verified; the records it passes are added to the index and
//! the prefix grows, so the next read seeks directly. The first bad record met this
//! way is `Error::Corrupt` for the read that reached it, while reads that stay
//! before it still succeed. Once a read reaches the segment's last record (and
//! finds it ends the file) the segment is like any other.
//!
//! What it does NOT do: decide what is valid at open (recovery.rs), write records
//! (writer.rs), or wait for new ones (follow.rs).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::format::{self, Flaw, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use crate::{Error, Result};
use crate::{Record, RecordPos};

/// One index entry per this many bytes of records. Bounds both the index size and
/// the bytes a read scans before reaching its first record.
pub(crate) const INDEX_INTERVAL_BYTES: u64 = 4096;

/// Largest single read the read path issues, unless one record is larger. Keeps a
/// read of many small records from allocating more than this at once beyond what
/// it returns.
const READ_CHUNK_BYTES: u64 = 1024 * 1024;

/// Suffix of segment files.
const SEGMENT_SUFFIX: &str = ".log";

/// File name of the segment based at `base`.
pub(crate) fn segment_file_name(base: u64) -> String {
    format!("{base:020}{SEGMENT_SUFFIX}")
}

/// Base offsets of the segment files in `dir`, sorted. Files that are not segments
/// (the `LOCK` file, anything an operator left there) are ignored; a `.log` file
/// whose name is not 20 digits is an error, since it can only be a damaged segment.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let io_err = |source| Error::Io {
        op: "list log directory",
        path: dir.to_owned(),
        source,
    };
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(SEGMENT_SUFFIX) else {
            continue;
        };
        let base = (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
            .then(|| stem.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| Error::InvalidLogDir {
                path: dir.to_owned(),
                reason: format!(
                    "{name:?} looks like a segment but its name is not a 20-digit base offset"
                ),
            })?;
        bases.push(base);
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Reads exactly `buf.len()` bytes at byte `pos` of `file`, without moving any
/// shared cursor (so readers never contend with each other or the writer).
pub fn read_exact_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, pos)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n = std::os::windows::fs::FileExt::seek_read(
                file,
                &mut buf[done..],
                pos + done as u64,
            )?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(())
    }
}

/// Sparse offset→byte index of one segment.
#[derive(Debug, Clone)]
pub(crate) struct SparseIndex {
    /// (offset, byte position of that record), increasing in both.
    entries: Vec<(u64, u64)>,
    /// The next record at or past this byte gets an entry.
    next_at: u64,
}

impl SparseIndex {
    /// An empty index for a segment whose records start at the segment header's end.
    pub(crate) fn new() -> Self {
        Self {
            entries: Vec::new(),
            next_at: 0,
        }
    }

    /// Records that the record `offset` starts at `byte`.
    pub(crate) fn note(&mut self, offset: u64, byte: u64) {
        if byte >= self.next_at {
            self.entries.push((offset, byte));
            self.next_at = byte + INDEX_INTERVAL_BYTES;
        }
    }

    /// An empty index that continues this one: entries noted in it belong after
    /// this one's, and [`SparseIndex::extend`] appends them. Lets a refresh scan
    /// new records without copying the whole index.
    pub(crate) fn continuation(&self) -> Self {
        Self {
            entries: Vec::new(),
            next_at: self.next_at,
        }
    }

    /// Appends the entries of a [`SparseIndex::continuation`] of this index.
    pub(crate) fn extend(&mut self, more: SparseIndex) {
        self.entries.extend(more.entries);
        self.next_at = more.next_at;
    }

    /// The nearest (offset, byte) at or before `offset`; the segment start if none.
    fn floor(&self, offset: u64, base: u64) -> (u64, u64) {
        let i = self.entries.partition_point(|&(o, _)| o <= offset);
        match i {
            0 => (base, SEGMENT_HEADER_LEN),
            _ => self.entries[i - 1],
        }
    }

    /// A byte position at or past the start of record `offset`, if indexed: every
    /// record before `offset` ends there or earlier.
    fn ceil_byte(&self, offset: u64) -> Option<u64> {
        let i = self.entries.partition_point(|&(o, _)| o < offset);
        self.entries.get(i).map(|&(_, b)| b)
    }
}

/// The end of the records of a segment verified so far: the byte after the last
/// one and the offset the next one must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Byte position after the last verified record (a record boundary).
    pub(crate) byte: u64,
    /// Offset of the record expected at `byte`.
    pub(crate) offset: u64,
}

/// One segment as readers see it.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Offset of the first record.
    pub(crate) base: u64,
    /// The file.
    pub(crate) path: Arc<Path>,
    /// A handle readers use with positioned reads (the writer appends through it
    /// too for the active segment).
    pub(crate) file: Arc<File>,
    /// One past the last verified record.
    pub(crate) end_offset: u64,
    /// Byte length of the verified part (header and records); 0 while the header
    /// has not been seen yet (a read-only reader racing a segment's creation).
    pub(crate) end_byte: u64,
    /// The sparse index (of the checked prefix only, while `checked_to` is set).
    pub(crate) index: SparseIndex,
    /// `None` when every record up to `end_byte` was verified and indexed (at open,
    /// by a refresh, or by the writer). `Some` for a sealed segment a read-only view
    /// opened without scanning: its records were verified up to here, and reads
    /// verify and index the rest as they pass it. Its `end_byte` is then the file
    /// length and its `end_offset` the next segment's base, both unverified.
    pub(crate) checked_to: Option<Checked>,
    /// A compacted segment (see `format.rs`): its records' offsets may skip, and
    /// its range still ends at `end_offset` (the next segment's base).
    pub(crate) compacted: bool,
}

impl Segment {
    /// A segment with nothing verified yet.
    pub(crate) fn new(base: u64, path: PathBuf, file: Arc<File>) -> Self {
        Self {
            base,
            path: path.into(),
            file,
            end_offset: base,
            end_byte: 0,
            index: SparseIndex::new(),
            checked_to: None,
            compacted: false,
        }
    }
}

/// The segments of a log, in offset order, and the published head.
#[derive(Debug, Default)]
pub(crate) struct Segments {
    /// Segments, strictly increasing bases, contiguous offsets.
    pub(crate) list: Vec<Segment>,
    /// One past the last record readers may see. Trails the last segment's
    /// `end_offset` while an append is in flight (its fsync pending).
    pub(crate) head: u64,
}

impl Segments {
    /// Index in `list` of the segment holding `offset` (which must be below head).
    fn find(&self, offset: u64) -> Option<usize> {
        self.list
            .partition_point(|s| s.base <= offset)
            .checked_sub(1)
    }
}

/// What one read needs from one segment, copied out of the lock.
struct Plan {
    base: u64,
    path: Arc<Path>,
    file: Arc<File>,
    /// Where to start scanning: a record boundary at or before the wanted offset.
    start: (u64, u64),
    /// Stop before this offset (segment end or head).
    stop_offset: u64,
    /// The verified end of the segment.
    end_byte: u64,
    /// Reading to here covers every record the read may want.
    bound_byte: u64,
    /// The segment's last offset + 1 (the next segment's base once sealed).
    end_offset: u64,
    /// Offsets may skip (a compacted segment).
    compacted: bool,
    /// For a segment not fully checked yet: where its checked prefix ends, and an
    /// index continuing the segment's, to note the records this read verifies past
    /// that point.
    lazy: Option<Progress>,
}

/// What a read verified past a segment's checked prefix, to be kept in the
/// segment if nobody extended the prefix meanwhile.
struct Progress {
    /// The checked prefix the read started from.
    from: Checked,
    /// How far the read verified, contiguously from `from`.
    to: Checked,
    /// Index entries for the records between `from` and `to`.
    index: SparseIndex,
}

fn corrupt(path: &Path, byte: u64, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        segment: path.to_owned(),
        byte_offset: byte,
        offset,
        reason: reason.into(),
    }
}

/// Reads up to `limit` records from `from` (below `segs.head` or returns none),
/// stopping early once the payloads read reach `max_bytes` (at least one record
/// is always returned when any is available). A damaged record ends the read
/// after the records before it; a read that starts at it is the error.
pub(crate) fn read(
    segs: &std::sync::RwLock<Segments>,
    from: u64,
    limit: usize,
    max_bytes: usize,
) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    let mut next = from;
    let mut bytes = 0usize;
    while out.len() < limit && bytes < max_bytes {
        let mut plan = {
            let segs = segs
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if next >= segs.head {
                break;
            }
            let Some(i) = segs.find(next) else { break };
            let s = &segs.list[i];
            let stop_offset = s.end_offset.min(segs.head);
            let want_end = next.saturating_add((limit - out.len()) as u64);
            let start = match s.checked_to {
                // The index ends at the checked prefix: scan on from its end.
                Some(c) if next >= c.offset => (c.offset, c.byte),
                _ => s.index.floor(next, s.base),
            };
            Plan {
                base: s.base,
                path: s.path.clone(),
                file: s.file.clone(),
                start,
                stop_offset,
                end_byte: s.end_byte,
                bound_byte: s
                    .index
                    .ceil_byte(want_end)
                    .map_or(s.end_byte, |b| b.min(s.end_byte)),
                end_offset: s.end_offset,
                compacted: s.compacted,
                lazy: s.checked_to.map(|c| Progress {
                    from: c,
                    to: c,
                    index: s.index.continuation(),
                }),
            }
        };
        if next >= plan.stop_offset {
            // The segment holding `next` ends before it: only possible if the
            // segment list has a hole, which open and refresh rule out.
            return Err(corrupt(
                &plan.path,
                plan.end_byte,
                next,
                "offset not found in the segment that should hold it",
            ));
        }
        let before = out.len();
        let mut progress = plan.lazy.take();
        let res = read_segment(
            &plan,
            next,
            limit,
            max_bytes,
            &mut out,
            &mut bytes,
            &mut progress,
        );
        // Keep what was verified even when the read then met a bad record: reads
        // that stay before it need not verify those records again.
        if let Some(p) = progress {
            keep_progress(segs, plan.base, p);
        }
        let was = next;
        next = match res {
            Ok(next) => next,
            // The records before a damage are returned; the read that starts at
            // the damage reports it (so a reader shows everything before it, then
            // the error naming segment and offset).
            Err(_) if !out.is_empty() => return Ok(out),
            Err(e) => return Err(e),
        };
        // A compacted segment may end in a gap: the read moves on to the next
        // segment without records from this one.
        if out.len() == before && next <= was {
            break;
        }
    }
    Ok(out)
}

/// Extends the checked prefix of the segment based at `base` with what a read
/// verified, unless another read changed the prefix meanwhile (then this read's
/// work is dropped; the other's stands).
fn keep_progress(segs: &std::sync::RwLock<Segments>, base: u64, p: Progress) {
    if p.to.offset == p.from.offset {
        return;
    }
    let mut segs = segs
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(i) = segs.find(base) else { return };
    let s = &mut segs.list[i];
    if s.base != base || s.checked_to != Some(p.from) {
        return;
    }
    s.index.extend(p.index);
    s.checked_to = (p.to.offset < s.end_offset).then_some(p.to);
}

/// Reads records of one segment from `from` into `out`; returns the next offset.
/// Notes in `progress` (if the segment is not fully checked) the records it
/// verified past the checked prefix.
fn read_segment(
    plan: &Plan,
    from: u64,
    limit: usize,
    max_bytes: usize,
    out: &mut Vec<Record>,
    bytes: &mut usize,
    progress: &mut Option<Progress>,
) -> Result<u64> {
    let (mut off, mut pos) = plan.start;
    let mut need = 0u64;
    while off < plan.stop_offset && out.len() < limit && *bytes < max_bytes {
        let avail = plan.end_byte.saturating_sub(pos);
        if avail == 0 && plan.compacted {
            // The rest of the range was compacted away.
            return Ok(plan.stop_offset);
        }
        let want = plan
            .bound_byte
            .saturating_sub(pos)
            .clamp(RECORD_HEADER_LEN as u64, READ_CHUNK_BYTES)
            .max(need);
        let len = want.min(avail);
        if len == 0 && progress.is_some() {
            return Err(corrupt(
                &plan.path,
                pos,
                off,
                format!(
                    "segment ends at offset {off} but the next segment starts at offset {}",
                    plan.end_offset
                ),
            ));
        }
        if len < need || len == 0 {
            return Err(corrupt(
                &plan.path,
                pos,
                off,
                "record runs past the verified end of the segment",
            ));
        }
        let mut buf = vec![0u8; len as usize];
        read_exact_at(&plan.file, &mut buf, pos).map_err(|source| Error::Io {
            op: "read segment",
            path: plan.path.to_path_buf(),
            source,
        })?;
        let buf = Bytes::from(buf);
        let mut at = 0usize;
        need = 0;
        while off < plan.stop_offset && out.len() < limit && *bytes < max_bytes {
            match format::parse_record(&buf[at..]) {
                Ok(f) => {
                    if plan.compacted && f.offset > off && f.offset < plan.end_offset {
                        // A gap left by compaction.
                        off = f.offset;
                        if off >= plan.stop_offset {
                            break;
                        }
                    }
                    if f.offset != off {
                        return Err(corrupt(
                            &plan.path,
                            pos + at as u64,
                            off,
                            format!("record carries offset {}, expected {off}", f.offset),
                        ));
                    }
                    let byte = pos + at as u64;
                    if let Some(p) = progress
                        && p.to.byte == byte
                    {
                        let after = byte + f.total() as u64;
                        if off + 1 == plan.end_offset && after != plan.end_byte {
                            return Err(corrupt(
                                &plan.path,
                                after,
                                off + 1,
                                format!(
                                    "{} bytes follow the segment's last record (offset {off}); \
                                     the next segment starts at offset {}",
                                    plan.end_byte.saturating_sub(after),
                                    plan.end_offset
                                ),
                            ));
                        }
                        p.index.note(off, byte);
                        p.to = Checked {
                            byte: after,
                            offset: off + 1,
                        };
                    }
                    if off >= from {
                        let start = at + RECORD_HEADER_LEN;
                        out.push(Record {
                            pos: RecordPos {
                                partition: 0,
                                offset: off,
                            },
                            bytes: buf.slice(start..start + f.len),
                        });
                        *bytes += f.len;
                    }
                    at += f.total();
                    off += 1;
                }
                Err(Flaw::Short { need: n }) => {
                    if at == 0 {
                        need = n as u64;
                    }
                    break;
                }
                Err(Flaw::Bad(b)) => {
                    return Err(corrupt(&plan.path, pos + at as u64, off, b.to_string()));
                }
            }
        }
        pos += at as u64;
    }
    Ok(off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_in_offset_order() {
        assert_eq!(segment_file_name(1234), "00000000000000001234.log");
        let mut names: Vec<_> = [10, 9, 100, 0].map(segment_file_name).to_vec();
        names.sort();
        assert_eq!(names[0], segment_file_name(0));
        assert_eq!(names[3], segment_file_name(100));
    }

    #[test]
    fn sparse_index_floor_and_ceil() {
        let mut ix = SparseIndex::new();
        for i in 0..100u64 {
            ix.note(1000 + i, SEGMENT_HEADER_LEN + i * 1000);
        }
        // One entry per ~4 KiB: offsets 1000, 1005, 1010, ...
        assert_eq!(ix.entries.len(), 20);
        assert_eq!(ix.floor(1007, 1000), (1005, SEGMENT_HEADER_LEN + 5000));
        assert_eq!(ix.floor(999, 1000), (1000, SEGMENT_HEADER_LEN));
        assert_eq!(ix.ceil_byte(1006), Some(SEGMENT_HEADER_LEN + 10_000));
        assert_eq!(ix.ceil_byte(1099), None);
        let mut more = ix.continuation();
        more.note(1100, SEGMENT_HEADER_LEN + 100_000);
        more.note(1101, SEGMENT_HEADER_LEN + 100_001);
        ix.extend(more);
        assert_eq!(ix.entries.len(), 21);
        assert_eq!(ix.floor(1101, 1000), (1100, SEGMENT_HEADER_LEN + 100_000));
    }

    #[test]
    fn bad_segment_names_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("LOCK"), b"").expect("write");
        std::fs::write(dir.path().join(segment_file_name(7)), b"").expect("write");
        assert_eq!(list_segments(dir.path()).expect("list"), vec![7]);
        std::fs::write(dir.path().join("7.log"), b"").expect("write");
        let e = list_segments(dir.path()).expect_err("bad name");
        assert!(e.to_string().contains("20-digit"), "{e}");
    }
}
