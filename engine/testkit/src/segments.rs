//! Records of a known size, and a small-segment embedded log with damage put into
//! one of its sealed segments: for the log's own read tests and for the replay
//! tests that must stop at the damage.

use std::path::{Path, PathBuf};

use deltapilot_log::file::{FileLog, FileLogOptions, FsyncPolicy};
use deltapilot_log::{EventLog, encode_event};
use deltapilot_proto::{Endpoint, EndpointUpsert, Event, SCHEMA_VERSION, event};

/// Number of distinct keys the generated events use, so that per-key order has
/// something to check.
pub const KEYS: u64 = 7;

/// An endpoint upsert numbered `i`, with a payload padded to roughly `size` bytes.
pub fn event(i: u64, size: usize) -> Event {
    let key = format!("ep/suite/ns/pod-{}", i % KEYS);
    let mut ep = Endpoint {
        address: format!("10.0.{}.{}", (i / 250) % 250, i % 250),
        weight: 1,
        ..Default::default()
    };
    ep.labels.insert("seq".into(), i.to_string());
    let base = encode_event(&mk(&key, i, ep.clone())).len();
    if size > base {
        ep.labels.insert("pad".into(), "x".repeat(size - base));
    }
    mk(&key, i, ep)
}

fn mk(key: &str, generation: u64, endpoint: Endpoint) -> Event {
    Event {
        schema_version: SCHEMA_VERSION,
        source: "suite".into(),
        generation,
        observed_at_unix_micros: 0,
        payload: Some(event::Payload::EndpointUpsert(EndpointUpsert {
            key: key.to_owned(),
            endpoint: Some(endpoint),
        })),
    }
}

/// `n` events numbered from `first`, ~200 bytes each.
pub fn batch(first: u64, n: u64) -> Vec<Event> {
    (first..first + n).map(|i| event(i, 200)).collect()
}

/// A segment file's header, in bytes (the format is documented in
/// `engine/log/src/file/format.rs`).
pub const SEGMENT_HEADER: u64 = 16;
/// A record's frame (length, CRC, offset), in bytes.
pub const RECORD_HEADER: u64 = 20;
/// Small segments (about 18 records of ~220 bytes) so a few hundred records make
/// many of them.
pub const SEGMENT_BYTES: u64 = 4096;

/// Options for a log of [`SEGMENT_BYTES`] segments, never fsynced.
pub fn small_segments() -> FileLogOptions {
    FileLogOptions {
        fsync: FsyncPolicy::Never,
        segment_bytes: SEGMENT_BYTES,
        ..FileLogOptions::default()
    }
}

/// Bytes record `i` of `batch` takes on disk.
pub fn framed(i: u64) -> u64 {
    RECORD_HEADER + encode_event(&event(i, 200)).len() as u64
}

/// The segment files, sorted, with their base offsets.
pub fn segments(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let base = p
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse().ok())
                .expect("a 20-digit name");
            (base, p)
        })
        .collect();
    v.sort();
    v
}

/// Writes records `0..n` in batches of 10 with small segments and closes the log.
pub async fn write_log(dir: &Path, n: u64) -> Vec<(u64, PathBuf)> {
    let log = FileLog::open(dir, small_segments()).expect("open");
    for b in (0..n).step_by(10) {
        log.append(&batch(b, 10.min(n - b))).await.expect("append");
    }
    drop(log);
    segments(dir)
}

/// Byte position of record `offset` in the segment based at `base`.
pub fn byte_in_segment(base: u64, offset: u64) -> u64 {
    SEGMENT_HEADER + (base..offset).map(framed).sum::<u64>()
}

/// Flips one bit of the byte at `at` of the file at `path`.
pub fn flip_byte(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).expect("read segment");
    bytes[at as usize] ^= 0x40;
    std::fs::write(path, bytes).expect("write segment");
}

/// Damages a payload byte of the record `k` records into the third segment (a
/// sealed one) and returns (its segment, its offset, its byte, the next base).
pub fn damage_third_segment(segs: &[(u64, PathBuf)], k: u64) -> (PathBuf, u64, u64, u64) {
    assert!(segs.len() >= 5, "{segs:?}");
    let (base, path) = segs[2].clone();
    let next = segs[3].0;
    let bad = base + k;
    assert!(bad + 1 < next, "segment {base}..{next} too small");
    let byte = byte_in_segment(base, bad);
    flip_byte(&path, byte + RECORD_HEADER + 7);
    (path, bad, byte, next)
}
