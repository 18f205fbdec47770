//! The embedded log's on-disk bytes: the segment header and the framed record.
//!
//! ```text
//! segment file  = segment header, then records back to back
//! segment header (16 bytes)
//!   0  magic   8 bytes  b"DPLOGv02"  (format version lives in the last two bytes;
//!                       this build reads v01 and v02 and writes v02), or
//!                       b"DPLOGc03" for a compacted segment (see below)
//!   8  base    u64 LE   offset of the segment's first record (also in the file name)
//! record (20-byte header + payload)
//!   0  magic   4 bytes  b"dpR1": the last record of its append batch;
//!                       b"dpRm": more records of its batch follow (v02 only)
//!   4  crc     u32 LE   CRC-32 (IEEE, crc32fast) of bytes 8.. of the record,
//!                       i.e. of (len, offset, payload)
//!   8  len     u32 LE   payload length, at most MAX_RECORD_BYTES
//!  12  offset  u64 LE   the record's log offset
//!  20  payload len bytes: one encoded `deltapilot.events.v1.Event`
//! ```
//!
//! The CRC covers the length and the offset as well as the payload, so a flipped bit
//! anywhere in a record but its magic is caught by the CRC, and a flipped magic is
//! caught by the magic check. The magic also lets recovery look for the next record
//! after a bad one (see `recovery.rs`).
//!
//! A batch is all-or-nothing: recovery keeps a record only once the record that
//! ends its batch (`dpR1`) is on disk too, so a crash in the middle of an append
//! never leaves part of a batch. In a v01 segment every record is `dpR1` (each
//! counts as its own batch). `dpRm` is written only into v02 segments, so a build
//! that reads only v01 refuses the segment by its header instead of taking the
//! unknown magic for a torn tail.
//!
//! A **compacted** segment (`DPLOGc03`, written only by compaction, see
//! `compact.rs`) holds v02 records whose offsets strictly increase but may skip:
//! the records compaction dropped leave gaps, and every kept record keeps its
//! original offset. Its range ends where the next segment starts (a compacted
//! segment is never the newest). Builds before compaction refuse it by its header.
//!
//! What it does NOT do: any I/O, or decide what a bad record means (torn tail or
//! corruption): that is recovery's job.

use std::fmt;

/// Length of the segment header.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 16;
/// First bytes of every segment file this build writes. The trailing `02` is the
/// format version.
const SEGMENT_MAGIC: [u8; 8] = *b"DPLOGv02";
/// The header of segments written before records carried their batch's end.
const SEGMENT_MAGIC_V1: [u8; 8] = *b"DPLOGv01";
/// The header of a compacted segment: v02 records, offsets with gaps.
const SEGMENT_MAGIC_COMPACTED: [u8; 8] = *b"DPLOGc03";
/// The version [`check_segment_header`] returns for a compacted segment.
pub(crate) const VERSION_COMPACTED: u8 = 3;

/// Length of a record header.
pub(crate) const RECORD_HEADER_LEN: usize = 20;
/// First bytes of a record that ends its append batch.
pub(crate) const RECORD_MAGIC: [u8; 4] = *b"dpR1";
/// First bytes of a record of a batch whose later records follow it.
pub(crate) const RECORD_MAGIC_MORE: [u8; 4] = *b"dpRm";

/// Whether `m` is a record magic (either kind).
pub(crate) fn is_record_magic(m: &[u8]) -> bool {
    m == RECORD_MAGIC || m == RECORD_MAGIC_MORE
}
/// Largest payload a record may carry. Far above any sane event (a service with
/// thousands of ports is still kilobytes) and low enough that a corrupt length is
/// recognised as impossible instead of making a reader allocate gigabytes.
pub(crate) const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// The header a segment based at `base` starts with.
pub(crate) fn segment_header(base: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    header_with(SEGMENT_MAGIC, base)
}

/// The header of a compacted segment based at `base`.
pub(crate) fn compacted_segment_header(base: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    header_with(SEGMENT_MAGIC_COMPACTED, base)
}

fn header_with(magic: [u8; 8], base: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[..8].copy_from_slice(&magic);
    h[8..].copy_from_slice(&base.to_le_bytes());
    h
}

/// `bytes`, a segment's header and whole records, with its last record marked as
/// ending its batch: the records before a damage, made a log of their own (the
/// magic is outside the CRC, so the record still checks out).
pub fn end_last_batch(bytes: &mut [u8]) {
    let mut at = SEGMENT_HEADER_LEN as usize;
    let mut last = None;
    while at < bytes.len() {
        match parse_record(&bytes[at..]) {
            Ok(f) => {
                last = Some(at);
                at += f.total();
            }
            Err(_) => break,
        }
    }
    if let Some(at) = last {
        bytes[at..at + 4].copy_from_slice(&RECORD_MAGIC);
    }
}

/// Checks a segment header read from a file whose name says it starts at `base`;
/// returns the segment's format version (1 or 2, or [`VERSION_COMPACTED`]).
pub(crate) fn check_segment_header(bytes: &[u8], base: u64) -> Result<u8, String> {
    if bytes.len() < SEGMENT_HEADER_LEN as usize {
        return Err(format!(
            "segment header is {} bytes, expected 16",
            bytes.len()
        ));
    }
    let version = if bytes[..8] == SEGMENT_MAGIC {
        2
    } else if bytes[..8] == SEGMENT_MAGIC_V1 {
        1
    } else if bytes[..8] == SEGMENT_MAGIC_COMPACTED {
        VERSION_COMPACTED
    } else {
        return Err(format!(
            "not a deltapilot log segment, or a format version this build cannot read \
             (magic {:02x?}, expected {:02x?})",
            &bytes[..8],
            SEGMENT_MAGIC
        ));
    };
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[8..16]);
    let found = u64::from_le_bytes(b);
    if found != base {
        return Err(format!(
            "segment header says base offset {found} but the file name says {base}"
        ));
    }
    Ok(version)
}

/// Appends one framed record to `buf`; `more` when later records of its batch
/// follow it.
pub(crate) fn frame_record(buf: &mut Vec<u8>, offset: u64, payload: &[u8], more: bool) {
    let start = buf.len();
    buf.extend_from_slice(if more {
        &RECORD_MAGIC_MORE
    } else {
        &RECORD_MAGIC
    });
    buf.extend_from_slice(&[0; 4]);
    // Callers refuse payloads above MAX_RECORD_BYTES, which fits in u32.
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(payload);
    let crc = crc32fast::hash(&buf[start + 8..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Bytes a record with a payload of `len` bytes takes on disk.
pub(crate) fn framed_len(len: usize) -> usize {
    RECORD_HEADER_LEN + len
}

/// A well-formed record at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The log offset stored in the record.
    pub(crate) offset: u64,
    /// Payload length.
    pub(crate) len: usize,
    /// Later records of its batch follow (`dpRm`).
    pub(crate) more: bool,
}

impl Frame {
    /// Bytes the whole record takes.
    pub(crate) fn total(&self) -> usize {
        framed_len(self.len)
    }
}

/// Why the bytes at the start of a buffer are not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Flaw {
    /// The buffer ends before the record does; `need` bytes (from the record start)
    /// would complete it. At the end of a file this is a torn write.
    Short {
        /// Bytes needed from the start of the record.
        need: usize,
    },
    /// The record is complete but wrong.
    Bad(BadRecord),
}

/// What check a complete record failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BadRecord {
    /// The first four bytes are not the record magic.
    Magic([u8; 4]),
    /// The length field exceeds [`MAX_RECORD_BYTES`].
    Length(u64),
    /// The stored CRC does not match the bytes.
    Crc {
        /// CRC in the header.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRecord::Magic(m) => write!(f, "bad record magic {m:02x?}"),
            BadRecord::Length(n) => {
                write!(f, "impossible record length {n} (max {MAX_RECORD_BYTES})")
            }
            BadRecord::Crc { stored, computed } => write!(
                f,
                "CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// Parses and verifies the record at the start of `buf`. The caller checks that
/// [`Frame::offset`] is the offset it expects.
pub(crate) fn parse_record(buf: &[u8]) -> Result<Frame, Flaw> {
    if buf.len() < RECORD_HEADER_LEN {
        return Err(Flaw::Short {
            need: RECORD_HEADER_LEN,
        });
    }
    let mut magic = [0u8; 4];
    magic.copy_from_slice(&buf[..4]);
    if !is_record_magic(&magic) {
        return Err(Flaw::Bad(BadRecord::Magic(magic)));
    }
    let len = u32_at(buf, 8) as usize;
    if len > MAX_RECORD_BYTES {
        return Err(Flaw::Bad(BadRecord::Length(len as u64)));
    }
    let total = framed_len(len);
    if buf.len() < total {
        return Err(Flaw::Short { need: total });
    }
    let stored = u32_at(buf, 4);
    let computed = crc32fast::hash(&buf[8..total]);
    if stored != computed {
        return Err(Flaw::Bad(BadRecord::Crc { stored, computed }));
    }
    Ok(Frame {
        offset: u64_at(buf, 12),
        len,
        more: magic == RECORD_MAGIC_MORE,
    })
}

/// Payload length announced by a record header, if `buf` holds at least a header
/// with the right magic and a plausible length. Used to size a read before the
/// whole record is available.
pub(crate) fn announced_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < RECORD_HEADER_LEN || !is_record_magic(&buf[..4]) {
        return None;
    }
    let len = u32_at(buf, 8) as usize;
    (len <= MAX_RECORD_BYTES).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(offset: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        frame_record(&mut b, offset, payload, false);
        b
    }

    #[test]
    fn round_trip() {
        let b = one(42, b"hello");
        assert_eq!(b.len(), framed_len(5));
        let f = parse_record(&b).expect("valid");
        assert_eq!(
            f,
            Frame {
                offset: 42,
                len: 5,
                more: false
            }
        );
        let mut m = Vec::new();
        frame_record(&mut m, 42, b"hello", true);
        assert!(
            parse_record(&m).expect("valid").more,
            "dpRm means more follow"
        );
        assert_eq!(&b[RECORD_HEADER_LEN..f.total()], b"hello");
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let b = one(7, b"some payload bytes");
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[i] ^= 1 << bit;
                match parse_record(&c) {
                    Ok(f) => panic!("flip at byte {i} bit {bit} accepted as {f:?}"),
                    Err(Flaw::Bad(_) | Flaw::Short { .. }) => {}
                }
            }
        }
    }

    #[test]
    fn short_buffers_ask_for_more() {
        let b = one(1, &[9; 100]);
        assert_eq!(
            parse_record(&b[..10]),
            Err(Flaw::Short {
                need: RECORD_HEADER_LEN
            })
        );
        assert_eq!(parse_record(&b[..50]), Err(Flaw::Short { need: b.len() }));
        assert_eq!(announced_len(&b[..50]), Some(100));
    }

    #[test]
    fn segment_header_checks_magic_and_base() {
        let h = segment_header(20);
        assert!(check_segment_header(&h, 20).is_ok());
        assert!(
            check_segment_header(&h, 21)
                .expect_err("base")
                .contains("base")
        );
        let mut bad = h;
        bad[0] ^= 1;
        assert!(
            check_segment_header(&bad, 20)
                .expect_err("magic")
                .contains("magic")
        );
        assert!(check_segment_header(&h[..3], 20).is_err());
    }
}
