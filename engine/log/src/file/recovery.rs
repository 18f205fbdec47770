//! Verifying segments: at open (writer: recover a torn tail; reader: stop before it)
//! and when a read-only handle polls for what another process appended.
//!
//! The rule that tells a torn tail from corruption is documented in the parent
//! module; [`scan`] gathers the facts (where the first bad record is, and whether a
//! valid record follows it in the same file) and the callers here apply the rule.
//! The writer scans every segment; a read-only view scans only its newest segment
//! and opens the sealed ones through `sealed.rs`, falling back to a scan when that
//! module's cheap checks do not pass.
//!
//! What it does NOT do: append, or serve reads.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{self, Flaw, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use super::retain::{START_FILE, list_from_start, remove_below_start};
use super::sealed::open_sealed;
use super::segment::{Segment, Segments, SparseIndex, read_exact_at, segment_file_name};
use super::shared::Shared;
use super::writer::create_segment;
use crate::{Error, Result};

/// Bytes read at a time while scanning a segment. Scanning memory stays at this
/// plus one record, whatever the segment size.
const SCAN_CHUNK_BYTES: usize = 1024 * 1024;

/// What opening a log for writing found at its tail and cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The segment whose tail was cut.
    pub segment: PathBuf,
    /// Byte offset in the segment where the first bad record started; the segment
    /// now ends here.
    pub byte_offset: u64,
    /// Log offset the bad record would have had; the head is now here, and the next
    /// append gets this offset.
    pub offset: u64,
    /// How many bytes were cut.
    pub truncated_bytes: u64,
    /// What was wrong with the first cut record.
    pub reason: String,
}

/// The first bad record a scan met.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ScanFlaw {
    /// What check failed.
    pub(crate) reason: String,
    /// A valid record found after the bad one in the same file: (byte, offset).
    pub(crate) next_valid: Option<(u64, u64)>,
    /// Where the scan stopped: (byte, offset) of the bad or missing record. A
    /// batch cut with it starts earlier, at the scan's end.
    pub(crate) at: (u64, u64),
}

/// How far a scan verified a segment.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Byte after the last valid record (0 if even the header is incomplete).
    pub(crate) end_byte: u64,
    /// Offset after the last valid record.
    pub(crate) end_offset: u64,
    /// The bad record at `end_byte`, if the scan stopped before the file's end.
    pub(crate) flaw: Option<ScanFlaw>,
    /// The header says compacted: offsets may skip, and the range ends at the
    /// next segment's base (which is then `end_offset` when nothing is wrong).
    pub(crate) compacted: bool,
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error + use<> {
    let path = path.to_owned();
    move |source| Error::Io { op, path, source }
}

/// Verifies the records of `file` (a segment based at `base`) from `from_byte`
/// (a record boundary, or 0 to check the header first), expecting offset
/// `from_offset` there, up to `file_len`. Notes valid records in `index`.
/// `next_base` is where the next segment starts, if there is one: a compacted
/// segment's records must stay below it, and one without a successor is refused.
pub(crate) fn scan(
    file: &File,
    path: &Path,
    base: u64,
    from: (u64, u64),
    file_len: u64,
    index: &mut SparseIndex,
    next_base: Option<u64>,
) -> Result<Scan> {
    let (mut pos, mut off) = from;
    let mut compacted = false;
    if pos == 0 {
        if file_len < SEGMENT_HEADER_LEN {
            return Ok(Scan {
                end_byte: 0,
                end_offset: off,
                flaw: Some(ScanFlaw {
                    reason: format!("segment header incomplete ({file_len} of 16 bytes)"),
                    next_valid: None,
                    at: (0, off),
                }),
                compacted,
            });
        }
        let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
        read_exact_at(file, &mut h, 0).map_err(io_err("read segment header", path))?;
        let version =
            format::check_segment_header(&h, base).map_err(|reason| Error::InvalidLogDir {
                path: path.to_owned(),
                reason,
            })?;
        compacted = version == format::VERSION_COMPACTED;
        if compacted && next_base.is_none() {
            return Err(Error::Corrupt {
                segment: path.to_owned(),
                byte_offset: 0,
                offset: base,
                reason: "a compacted segment is the newest one: the segments after it are \
                         missing (compaction never touches the newest segment)"
                    .into(),
            });
        }
        pos = SEGMENT_HEADER_LEN;
    }
    let range_end = next_base.unwrap_or(u64::MAX);
    // A record counts only once the record that ends its batch is verified too:
    // until then its index note waits here, and the scan's end stays at the last
    // batch end (a crash mid-append never leaves part of a batch; see `format`).
    let mut batch_end = (pos, off);
    let mut pending: Vec<(u64, u64)> = Vec::new();
    let mut buf = Vec::new();
    let mut need = 0usize;
    while pos < file_len {
        let len = (file_len - pos).min(SCAN_CHUNK_BYTES.max(need) as u64) as usize;
        buf.resize(len, 0);
        read_exact_at(file, &mut buf, pos).map_err(io_err("read segment", path))?;
        let mut at = 0;
        need = 0;
        let bad = loop {
            if at == buf.len() {
                break None;
            }
            match format::parse_record(&buf[at..]) {
                Ok(f)
                    if f.offset == off || (compacted && f.offset > off && f.offset < range_end) =>
                {
                    off = f.offset;
                    pending.push((off, pos + at as u64));
                    at += f.total();
                    off += 1;
                    if !f.more {
                        for (o, b) in pending.drain(..) {
                            index.note(o, b);
                        }
                        batch_end = (pos + at as u64, off);
                    }
                }
                Ok(f) => {
                    break Some(format!(
                        "record carries offset {}, expected {off}",
                        f.offset
                    ));
                }
                Err(Flaw::Short { need: n }) if pos + (at + n) as u64 <= file_len => {
                    if at == 0 {
                        need = n;
                    }
                    break None;
                }
                Err(Flaw::Short { need: n }) => {
                    break Some(format!(
                        "record incomplete: {} of {n} bytes before the end of the file",
                        buf.len() - at
                    ));
                }
                Err(Flaw::Bad(b)) => break Some(b.to_string()),
            }
        };
        pos += at as u64;
        if let Some(reason) = bad {
            let next_valid = find_valid_after(file, path, pos + 1, file_len, off)?;
            let reason = if batch_end.1 < off {
                format!(
                    "{reason} (records {}..{off} of its batch go with it)",
                    batch_end.1
                )
            } else {
                reason
            };
            return Ok(Scan {
                end_byte: batch_end.0,
                end_offset: batch_end.1,
                flaw: Some(ScanFlaw {
                    reason,
                    next_valid,
                    at: (pos, off),
                }),
                compacted,
            });
        }
    }
    let flaw = (batch_end.1 < off).then(|| ScanFlaw {
        reason: format!(
            "incomplete batch: records {}..{off} are on disk but the record that ends their \
             batch is not",
            batch_end.1
        ),
        next_valid: None,
        at: (pos, off),
    });
    let end_offset = match (compacted, flaw.is_none(), next_base) {
        (true, true, Some(next)) => next,
        _ => batch_end.1,
    };
    Ok(Scan {
        end_byte: batch_end.0,
        end_offset,
        flaw,
        compacted,
    })
}

/// Looks for a valid record in `[start, end)` of `file` whose offset is at least
/// `min_offset`: evidence that the bad record before `start` is not a torn tail.
/// Candidates are found by the record magic and must pass every check, so payload
/// bytes that merely contain the magic do not count.
fn find_valid_after(
    file: &File,
    path: &Path,
    start: u64,
    end: u64,
    min_offset: u64,
) -> Result<Option<(u64, u64)>> {
    let mut chunk = Vec::new();
    let mut record = Vec::new();
    let mut pos = start;
    while pos + RECORD_HEADER_LEN as u64 <= end {
        let len = (end - pos).min(SCAN_CHUNK_BYTES as u64) as usize;
        chunk.resize(len, 0);
        read_exact_at(file, &mut chunk, pos).map_err(io_err("read segment", path))?;
        let mut i = 0;
        while let Some(k) = chunk[i..].windows(4).position(format::is_record_magic) {
            let at = pos + (i + k) as u64;
            let mut header = [0u8; RECORD_HEADER_LEN];
            if at + RECORD_HEADER_LEN as u64 <= end {
                read_exact_at(file, &mut header, at).map_err(io_err("read segment", path))?;
                if let Some(n) = format::announced_len(&header) {
                    let total = format::framed_len(n);
                    if at + total as u64 <= end {
                        record.resize(total, 0);
                        read_exact_at(file, &mut record, at)
                            .map_err(io_err("read segment", path))?;
                        if let Ok(f) = format::parse_record(&record)
                            && f.offset >= min_offset
                        {
                            return Ok(Some((at, f.offset)));
                        }
                    }
                }
            }
            i += k + 1;
        }
        // Overlap by three bytes so a magic split across chunks is still seen.
        pos += (len as u64).saturating_sub(3).max(1);
    }
    Ok(None)
}

/// The error for a bad record that is not a torn tail.
fn corruption(path: &Path, flaw: &ScanFlaw, last: bool) -> Error {
    let why = match flaw.next_valid {
        Some((byte, offset)) => {
            format!("a valid record (offset {offset}) follows at byte {byte}")
        }
        None if !last => "it is not in the last segment".to_owned(),
        None => "a newer segment exists".to_owned(),
    };
    Error::Corrupt {
        segment: path.to_owned(),
        byte_offset: flaw.at.0,
        offset: flaw.at.1,
        reason: format!("{}; not a torn tail because {why}", flaw.reason),
    }
}

/// Error for segments that do not continue each other.
fn gap(prev: &Segment, next_base: u64, dir: &Path) -> Error {
    Error::Corrupt {
        segment: prev.path.to_path_buf(),
        byte_offset: prev.end_byte,
        offset: prev.end_offset,
        reason: format!(
            "segment ends at offset {} but the next segment {} starts at offset {next_base}",
            prev.end_offset,
            dir.join(segment_file_name(next_base)).display()
        ),
    }
}

/// Opens every segment in `dir` for appending, verifies it, and cuts a torn tail
/// off the last one. Creates the first segment of an empty log. Also returns the
/// log's start (see `retain.rs`), after removing what an interrupted deletion
/// left below it.
pub(crate) fn open_for_write(
    dir: &Path,
    durable: bool,
) -> Result<(Segments, Option<Recovery>, u64)> {
    let (start, bases, below) = list_from_start(dir)?;
    remove_below_start(dir, start, &below, &bases)?;
    if bases.is_empty() {
        if start > 0 {
            return Err(Error::InvalidLogDir {
                path: dir.to_owned(),
                reason: format!(
                    "{} says the log starts at offset {start}, but no segment at or above it \
                     exists: the segments were lost",
                    dir.join(START_FILE).display()
                ),
            });
        }
        let (path, file) = create_segment(dir, 0, durable)?;
        let seg = Segment {
            end_byte: SEGMENT_HEADER_LEN,
            ..Segment::new(0, path, file)
        };
        return Ok((
            Segments {
                list: vec![seg],
                head: 0,
            },
            None,
            0,
        ));
    }
    check_first_base(dir, bases[0], start)?;
    let mut list: Vec<Segment> = Vec::with_capacity(bases.len());
    let mut recovery = None;
    for (i, &base) in bases.iter().enumerate() {
        let last = i + 1 == bases.len();
        if let Some(prev) = list.last()
            && prev.end_offset != base
        {
            return Err(gap(prev, base, dir));
        }
        let path = dir.join(segment_file_name(base));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .map_err(io_err("open segment", &path))?;
        let len = file
            .metadata()
            .map_err(io_err("stat segment", &path))?
            .len();
        let mut seg = Segment::new(base, path, Arc::new(file));
        let next_base = bases.get(i + 1).copied();
        let scan = scan(
            &seg.file,
            &seg.path,
            base,
            (0, base),
            len,
            &mut seg.index,
            next_base,
        )?;
        if let Some(flaw) = &scan.flaw {
            if !last || flaw.next_valid.is_some() {
                return Err(corruption(&seg.path, flaw, last));
            }
            recovery = Some(cut_tail(&seg, &scan, flaw, len)?);
        }
        seg.end_byte = scan.end_byte.max(SEGMENT_HEADER_LEN);
        seg.end_offset = scan.end_offset;
        seg.compacted = scan.compacted;
        list.push(seg);
    }
    let head = list.last().map_or(0, |s| s.end_offset);
    Ok((Segments { list, head }, recovery, start))
}

/// Checks that the first segment starts where the log does: at 0, or at the
/// start `DIR/START` records once retention deleted segments.
fn check_first_base(dir: &Path, base: u64, start: u64) -> Result<()> {
    if base == start {
        return Ok(());
    }
    let reason = if start == 0 {
        format!("the first segment starts at offset {base}, not 0: earlier segments are missing")
    } else {
        format!(
            "the first segment starts at offset {base}, but the log starts at {start} ({}): \
             segments {start}..{base} are missing",
            dir.join(START_FILE).display()
        )
    };
    Err(Error::InvalidLogDir {
        path: dir.to_owned(),
        reason,
    })
}

/// Truncates the torn tail of the last segment (rewriting its header if even that
/// was torn), makes the cut durable, and reports it.
fn cut_tail(seg: &Segment, scan: &Scan, flaw: &ScanFlaw, len: u64) -> Result<Recovery> {
    let file = &*seg.file;
    let path = &*seg.path;
    file.set_len(scan.end_byte)
        .map_err(io_err("truncate torn tail", path))?;
    if scan.end_byte == 0 {
        use std::io::Write;
        (&*file)
            .write_all(&format::segment_header(seg.base))
            .map_err(io_err("rewrite segment header", path))?;
    }
    file.sync_all()
        .map_err(io_err("fsync after truncation", path))?;
    let rec = Recovery {
        segment: path.to_owned(),
        byte_offset: scan.end_byte,
        offset: scan.end_offset,
        truncated_bytes: len - scan.end_byte,
        reason: flaw.reason.clone(),
    };
    tracing::warn!(
        segment = %rec.segment.display(),
        byte_offset = rec.byte_offset,
        offset = rec.offset,
        truncated_bytes = rec.truncated_bytes,
        reason = %rec.reason,
        "embedded log: torn tail truncated to the last good record"
    );
    Ok(rec)
}

/// The last segment of a read-only view, copied out of the lock.
struct Tail {
    base: u64,
    path: Arc<Path>,
    file: Arc<File>,
    end: (u64, u64),
    index: SparseIndex,
}

/// Brings a read-only view up to date with the files: verifies what was appended
/// to its last segment and picks up new segments. Never writes. A bad record at the
/// end of the newest segment is "not written yet" and retried at the next refresh;
/// by the parent module's rule anything else is corruption. New segments other
/// than the newest are opened without reading their records when their header and
/// last record check out (`sealed.rs`); reads verify the rest.
pub(crate) fn refresh(shared: &Shared) -> Result<()> {
    let _serial = shared.refresh_guard();
    // A segment listed and then deleted by the writer's retention before it was
    // opened: look again (the writer records the new start before deleting).
    let mut tries = 0;
    loop {
        match refresh_once(shared) {
            Err(Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && tries < 3 =>
            {
                tries += 1;
            }
            other => return other,
        }
    }
}

fn refresh_once(shared: &Shared) -> Result<()> {
    let dir = shared.dir();
    let (start, bases, _below) = list_from_start(dir)?;
    let tail = shared.segments().list.last().map(|s| Tail {
        base: s.base,
        path: s.path.clone(),
        file: s.file.clone(),
        end: (s.end_byte, s.end_offset),
        index: s.index.continuation(),
    });
    // Retention deleted even the newest segment this view knew: start over
    // from the log's start.
    let tail = tail.filter(|t| t.base >= start);
    let newer: Vec<u64> = match &tail {
        Some(t) => bases.into_iter().filter(|&b| b > t.base).collect(),
        None => bases,
    };
    if tail.is_none()
        && let Some(&first) = newer.first()
    {
        check_first_base(dir, first, start)?;
    }

    // The last known segment: listed before it is stat'ed, so if a newer segment
    // exists, this one was complete when we looked.
    let mut updated_tail = None;
    let mut prev_end = None;
    if let Some(mut t) = tail {
        let len = t
            .file
            .metadata()
            .map_err(io_err("stat segment", &t.path))?
            .len();
        let mut end = t.end;
        if len > t.end.0 {
            let s = scan(
                &t.file,
                &t.path,
                t.base,
                t.end,
                len,
                &mut t.index,
                newer.first().copied(),
            )?;
            if let Some(flaw) = &s.flaw
                && (!newer.is_empty() || flaw.next_valid.is_some())
            {
                return Err(corruption(&t.path, flaw, newer.is_empty()));
            }
            end = (s.end_byte, s.end_offset);
            updated_tail = Some((end, t.index));
        } else if t.end.0 == 0 && !newer.is_empty() {
            return Err(Error::Corrupt {
                segment: t.path.to_path_buf(),
                byte_offset: 0,
                offset: t.base,
                reason: "segment header incomplete but a newer segment exists".into(),
            });
        }
        prev_end = Some((end, t.path));
    }

    let mut added = Vec::new();
    for (j, &base) in newer.iter().enumerate() {
        let last = j + 1 == newer.len();
        if let Some(((byte, off), path)) = &prev_end
            && *off != base
        {
            return Err(Error::Corrupt {
                segment: path.to_path_buf(),
                byte_offset: *byte,
                offset: *off,
                reason: format!(
                    "segment ends at offset {off} but the next segment starts at offset {base}"
                ),
            });
        }
        let path = dir.join(segment_file_name(base));
        if let Some(&next_base) = newer.get(j + 1)
            && let Some(seg) = open_sealed(&path, base, next_base)?
        {
            prev_end = Some(((seg.end_byte, seg.end_offset), seg.path.clone()));
            added.push(seg);
            continue;
        }
        let file = File::open(&path).map_err(io_err("open segment", &path))?;
        let len = file
            .metadata()
            .map_err(io_err("stat segment", &path))?
            .len();
        let mut seg = Segment::new(base, path, Arc::new(file));
        let s = scan(
            &seg.file,
            &seg.path,
            base,
            (0, base),
            len,
            &mut seg.index,
            newer.get(j + 1).copied(),
        )?;
        if let Some(flaw) = &s.flaw
            && (!last || flaw.next_valid.is_some())
        {
            return Err(corruption(&seg.path, flaw, last));
        }
        seg.end_byte = s.end_byte;
        seg.end_offset = s.end_offset;
        seg.compacted = s.compacted;
        prev_end = Some(((s.end_byte, s.end_offset), seg.path.clone()));
        added.push(seg);
    }

    let head = {
        let mut segs = shared.segments_mut();
        // Segments retention deleted (their open files still read, but the log
        // no longer holds them).
        let gone = segs.list.partition_point(|s| s.base < start);
        segs.list.drain(..gone);
        if let Some(((byte, off), index)) = updated_tail
            && let Some(last) = segs.list.last_mut()
        {
            last.end_byte = byte;
            last.end_offset = off;
            last.index.extend(index);
        }
        segs.list.extend(added);
        segs.list.last().map_or(0, |s| s.end_offset)
    };
    shared.set_start(start);
    shared.publish(head);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A segment file based at 0 holding `records` (already framed bytes).
    fn segment(dir: &Path, records: &[Vec<u8>]) -> (PathBuf, File, u64) {
        let path = dir.join(segment_file_name(0));
        let mut f = File::create(&path).expect("create");
        f.write_all(&format::segment_header(0)).expect("header");
        for r in records {
            f.write_all(r).expect("record");
        }
        drop(f);
        let file = File::open(&path).expect("open");
        let len = file.metadata().expect("stat").len();
        (path, file, len)
    }

    fn framed(offset: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        format::frame_record(&mut b, offset, payload, false);
        b
    }

    /// A damaged record whose payload embeds something that starts like a record
    /// (the magic) but is not one.
    fn damaged_with_fake_magic(offset: u64) -> Vec<u8> {
        let mut payload = b"xx".to_vec();
        payload.extend_from_slice(&format::RECORD_MAGIC);
        payload.extend_from_slice(&[0xff; 40]);
        let mut r = framed(offset, &payload);
        let last = r.len() - 1;
        r[last] ^= 1;
        r
    }

    #[test]
    fn magic_inside_a_damaged_tail_is_not_a_following_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r0 = framed(0, b"zero");
        let (path, file, len) = segment(dir.path(), &[r0.clone(), damaged_with_fake_magic(1)]);
        let mut ix = SparseIndex::new();
        let s = scan(&file, &path, 0, (0, 0), len, &mut ix, None).expect("scan");
        assert_eq!((s.end_byte, s.end_offset), (16 + r0.len() as u64, 1));
        let flaw = s.flaw.expect("a flaw");
        assert!(flaw.reason.contains("CRC"), "{}", flaw.reason);
        assert_eq!(flaw.next_valid, None);
    }

    #[test]
    fn a_valid_record_after_the_damage_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r0 = framed(0, b"zero");
        let bad = damaged_with_fake_magic(1);
        let r2 = framed(2, b"two");
        let (path, file, len) = segment(dir.path(), &[r0.clone(), bad.clone(), r2]);
        let mut ix = SparseIndex::new();
        let s = scan(&file, &path, 0, (0, 0), len, &mut ix, None).expect("scan");
        let at = 16 + (r0.len() + bad.len()) as u64;
        assert_eq!(s.flaw.expect("a flaw").next_valid, Some((at, 2)));
    }

    #[test]
    fn a_stale_record_with_an_older_offset_does_not_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r0 = framed(0, b"zero");
        let (path, file, len) = segment(
            dir.path(),
            &[r0, damaged_with_fake_magic(1), framed(0, b"old")],
        );
        let mut ix = SparseIndex::new();
        let s = scan(&file, &path, 0, (0, 0), len, &mut ix, None).expect("scan");
        assert_eq!(s.flaw.expect("a flaw").next_valid, None);
    }
}
