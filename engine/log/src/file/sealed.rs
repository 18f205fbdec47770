//! Opening a sealed segment for a read-only view without reading its records.
//!
//! A segment followed by another is sealed: the writer never appends to it again,
//! and its records must run from its base up to the next segment's base (both in
//! the file names). So a reader needs to read it only when a read lands in it; its
//! records are then verified and indexed as reads pass them (see `segment.rs`).
//!
//! At open, two cheap checks stand in for the full scan, so that what open used to
//! report stays reported at open:
//!
//! - the segment header (magic, format version, base offset);
//! - the **last record**: within the last [`TAIL_WINDOW_BYTES`] of the file there
//!   must be a record that passes every check (magic, length, CRC), ends exactly at
//!   the end of the file, and carries offset `next base - 1`. This is what catches
//!   a missing segment between two others (the records stop short of the next
//!   base), a segment cut short, or trailing garbage, without reading the rest.
//!
//! When either check does not pass (including a last record larger than the
//! window), [`open_sealed`] answers `None` and the caller scans the segment in full
//! as before, so the error, if any, is exactly the one a full scan gives. A
//! damaged record further inside is found by the read that reaches it.
//!
//! What it does NOT do: verify the records before the last one (reads do), or
//! open the newest segment (that one is always scanned: it holds the head and a
//! possibly torn tail).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::format::{self, RECORD_HEADER_LEN, RECORD_MAGIC, SEGMENT_HEADER_LEN};
use super::segment::{Checked, Segment, read_exact_at};
use crate::{Error, Result};

/// Bytes read from the end of a sealed segment to find its last record. Events are
/// hundreds of bytes to a few KiB, so this holds the last record of any realistic
/// segment; a larger last record only costs a full scan of that segment.
pub(crate) const TAIL_WINDOW_BYTES: u64 = 64 * 1024;

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error + use<> {
    let path = path.to_owned();
    move |source| Error::Io { op, path, source }
}

/// Opens the sealed segment `path` based at `base`, whose successor starts at
/// `next_base`, without reading its records, if its header and last record check
/// out. `None` means: scan it in full.
pub(crate) fn open_sealed(path: &Path, base: u64, next_base: u64) -> Result<Option<Segment>> {
    let file = File::open(path).map_err(io_err("open segment", path))?;
    let len = file.metadata().map_err(io_err("stat segment", path))?.len();
    if len < SEGMENT_HEADER_LEN + RECORD_HEADER_LEN as u64 || next_base <= base {
        return Ok(None);
    }
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    read_exact_at(&file, &mut header, 0).map_err(io_err("read segment header", path))?;
    // A compacted segment's last record need not be `next_base - 1`; it is
    // small, so it is scanned in full.
    match format::check_segment_header(&header, base) {
        Ok(format::VERSION_COMPACTED) | Err(_) => return Ok(None),
        Ok(_) => {}
    }
    let window = (len - SEGMENT_HEADER_LEN).min(TAIL_WINDOW_BYTES);
    let mut tail = vec![0u8; window as usize];
    read_exact_at(&file, &mut tail, len - window).map_err(io_err("read segment", path))?;
    if last_record_offset(&tail) != Some(next_base - 1) {
        return Ok(None);
    }
    let mut seg = Segment::new(base, path.to_owned(), Arc::new(file));
    seg.end_byte = len;
    seg.end_offset = next_base;
    seg.checked_to = Some(Checked {
        byte: SEGMENT_HEADER_LEN,
        offset: base,
    });
    Ok(Some(seg))
}

/// The offset of the record that ends `tail` exactly, if one starts in it and
/// passes every check. Searches backwards from the end by the record magic, so
/// payload bytes that merely contain the magic do not count.
fn last_record_offset(tail: &[u8]) -> Option<u64> {
    let mut end = tail.len();
    while let Some(at) = tail[..end].windows(4).rposition(|w| w == RECORD_MAGIC) {
        let rest = &tail[at..];
        let ends_here =
            format::announced_len(rest).is_some_and(|n| format::framed_len(n) == rest.len());
        if ends_here && let Ok(f) = format::parse_record(rest) {
            return Some(f.offset);
        }
        // Look again for a magic starting before this one.
        end = at + 3;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::file::segment::segment_file_name;

    fn framed(offset: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        format::frame_record(&mut b, offset, payload, false);
        b
    }

    /// A segment file based at `base` holding `records` (framed bytes).
    fn segment(dir: &Path, base: u64, records: &[Vec<u8>]) -> std::path::PathBuf {
        let path = dir.join(segment_file_name(base));
        let mut f = File::create(&path).expect("create");
        f.write_all(&format::segment_header(base)).expect("header");
        for r in records {
            f.write_all(r).expect("record");
        }
        path
    }

    #[test]
    fn a_segment_whose_last_record_reaches_the_next_base_opens_unread() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A payload holding the magic must not be mistaken for a record start.
        let mut tricky = b"ab".to_vec();
        tricky.extend_from_slice(&RECORD_MAGIC);
        tricky.extend_from_slice(&[7; 30]);
        let path = segment(
            dir.path(),
            10,
            &[
                framed(10, b"ten"),
                framed(11, b"eleven"),
                framed(12, &tricky),
            ],
        );
        let seg = open_sealed(&path, 10, 13)
            .expect("io")
            .expect("opened unread");
        let len = std::fs::metadata(&path).expect("stat").len();
        assert_eq!((seg.end_byte, seg.end_offset), (len, 13));
        assert_eq!(
            seg.checked_to,
            Some(Checked {
                byte: SEGMENT_HEADER_LEN,
                offset: 10
            })
        );
    }

    #[test]
    fn anything_doubtful_asks_for_a_full_scan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let records = [framed(0, b"zero"), framed(1, b"one")];
        let path = segment(dir.path(), 0, &records);
        // The next segment does not start where the records end: a gap.
        assert!(open_sealed(&path, 0, 5).expect("io").is_none());
        // Trailing bytes after the last record.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        f.write_all(b"junk").expect("write");
        assert!(open_sealed(&path, 0, 2).expect("io").is_none());
        // A damaged last record.
        let mut bytes = std::fs::read(&path).expect("read");
        bytes.truncate(bytes.len() - 4);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        assert!(open_sealed(&path, 0, 2).expect("io").is_none());
        // A header naming another base.
        let path = segment(dir.path(), 3, &[framed(3, b"three")]);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[8] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        assert!(open_sealed(&path, 3, 4).expect("io").is_none());
        // A last record larger than the window.
        let big = vec![1u8; TAIL_WINDOW_BYTES as usize];
        let path = segment(dir.path(), 7, &[framed(7, b"seven"), framed(8, &big)]);
        assert!(open_sealed(&path, 7, 9).expect("io").is_none());
        // Just a header.
        let path = segment(dir.path(), 20, &[]);
        assert!(open_sealed(&path, 20, 21).expect("io").is_none());
    }
}
