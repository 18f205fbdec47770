//! The checkpoint file format: a fixed header that makes a damaged file
//! detectable, then a body holding the position, the log fingerprints and the
//! entity set.
//!
//! ```text
//! header (40 bytes, little-endian)
//!   magic            8  b"DPCKPT\r\n"  (the CR LF catches text-mode mangling)
//!   format version   4  FORMAT_VERSION
//!   reserved         4  0
//!   body length      8
//!   table xxh3-64    8  over the section table (the body's first 32 bytes)
//!   header xxh3-64   8  over the 32 bytes above
//! body
//!   section table    u64 state length, u64 state xxh3-64,
//!                    u64 resources length, u64 resources xxh3-64
//! state section
//!   position         u32 partitions, then u64 next offset per partition
//!   fingerprints     u32 n, then n × (u32 partition, u64 offset, u64 xxh3 of the record)
//!   sources          u32 n, then n × (str name, u64 started, u64 completed),
//!                    then u32 m, then m × pending resync (str source,
//!                    u64 generation, u32 copies, u32 k, then k × u32 partition)
//!   entities         u64 n, then n × (u8 kind, str key, str source, u64 generation,
//!                                      bytes payload); services and configs
//!   endpoints        distinct shapes, then endpoints by shape (see `endpoints`)
//! resources section
//!   resources        u8 0 (none), or 1 then str generator id, u32 n, then
//!                    n × (u8 map, str name, bytes encoded resource)
//! str, bytes: u32 length then the bytes
//! ```
//!
//! The position comes first in the state section so that [`peek_position`] can
//! tell whether a checkpoint is usable (at or before a wanted position) without
//! reading and hashing the whole file.
//!
//! Why two sections, each with its own checksum: a reader can then read and
//! check each on a thread of its own and start on the resources (two thirds of
//! the bytes) while the state is still being read. With one checksum over the
//! whole body, reading, hashing and framing it came first, on one core, before
//! anything could be built. The stored resources are slices of their section's
//! buffer only, so the state section's bytes are freed once the state is built.
//!
//! What it does NOT do: touch files (see `store`) or turn entities into a state
//! (see `entities`).

use xxhash_rust::xxh3::xxh3_64;

use super::endpoints;
use super::entities::{Converted, EntityKind, Restorer, StoredEntity, convert, for_each_entity};
use super::{Checkpoint, Fingerprint, StoredResources};
use deltapilot_log::Position;
use deltapilot_model::state::{ModelState, PendingResync, SourceGen};
use deltapilot_xds::hash::replace_entry_hash;
use deltapilot_xds::{Resource, ResourceKind, ResourceSet};

use std::sync::Arc;

use bytes::Bytes;

/// Identifies a checkpoint file.
pub(super) const MAGIC: [u8; 8] = *b"DPCKPT\r\n";

/// The body layout version this build writes and reads. A file with another
/// version is skipped (never misread): an older build ignores newer checkpoints and
/// falls back to replaying the log.
///
/// Version 3 added the pending multi-copy resyncs to the sources section;
/// version 4 moved endpoints to their own section, each shape stored once;
/// version 5 split the body into a state and a resources section, each with
/// its own checksum; version 6 added the proxyless cluster flavour
/// (`ResourceKind::GrpcCluster`, tag 6) to the resources section; version 7
/// the VHDS route configurations and virtual hosts (tags 7 and 8).
pub const FORMAT_VERSION: u32 = 7;

/// Header size in bytes.
pub(super) const HEADER_LEN: usize = 40;

/// Size of the section table at the start of the body.
pub(super) const TABLE_LEN: usize = 32;

/// Most partitions a position may list (as `Position::from_str` allows).
const MAX_PARTITIONS: u32 = 65_536;

pub(super) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    // Entities come from events, which the log bounds far below 4 GiB.
    put_u32(out, u32::try_from(b.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(b);
}

fn put_position(out: &mut Vec<u8>, p: &Position) {
    put_u32(out, u32::try_from(p.partitions()).unwrap_or(u32::MAX));
    for o in p.offsets() {
        put_u64(out, *o);
    }
}

/// Encodes a whole checkpoint file (header and body).
pub(super) fn encode(
    position: &Position,
    fingerprints: &[Fingerprint],
    model: &ModelState,
    resources: Option<(&str, &ResourceSet)>,
) -> Vec<u8> {
    let counts = model.counts();
    let mut body = Vec::with_capacity(
        64 + 160 * (counts.service_definitions + counts.endpoints + counts.configs),
    );
    // The state section is built in `body`, the resources section in `res`.
    put_position(&mut body, position);
    put_u32(
        &mut body,
        u32::try_from(fingerprints.len()).unwrap_or(u32::MAX),
    );
    for f in fingerprints {
        put_u32(&mut body, f.partition);
        put_u64(&mut body, f.offset);
        put_u64(&mut body, f.digest);
    }
    let sources: Vec<_> = model.sources().collect();
    put_u32(&mut body, u32::try_from(sources.len()).unwrap_or(u32::MAX));
    for (name, g) in sources {
        put_bytes(&mut body, name.as_bytes());
        put_u64(&mut body, g.started);
        put_u64(&mut body, g.completed);
    }
    let pending: Vec<_> = model.pending_resyncs().collect();
    put_u32(&mut body, u32::try_from(pending.len()).unwrap_or(u32::MAX));
    for (name, p) in pending {
        put_bytes(&mut body, name.as_bytes());
        put_u64(&mut body, p.generation);
        put_u32(&mut body, p.copies);
        put_u32(
            &mut body,
            u32::try_from(p.partitions.len()).unwrap_or(u32::MAX),
        );
        for part in &p.partitions {
            put_u32(&mut body, *part);
        }
    }
    let n_at = body.len();
    put_u64(&mut body, 0);
    let mut n = 0u64;
    for_each_entity(model, &mut |e: &StoredEntity| {
        body.push(e.kind as u8);
        put_bytes(&mut body, e.key.as_bytes());
        put_bytes(&mut body, e.source.as_bytes());
        put_u64(&mut body, e.generation);
        put_bytes(&mut body, &e.payload);
        n += 1;
    });
    body[n_at..n_at + 8].copy_from_slice(&n.to_le_bytes());
    endpoints::encode(model, &mut body);
    let mut res = Vec::new();
    match resources {
        None => res.push(0),
        Some((generator, set)) => {
            res.push(1);
            put_bytes(&mut res, generator.as_bytes());
            let total: usize = ResourceKind::ALL.iter().map(|k| k.map(set).len()).sum();
            put_u32(&mut res, u32::try_from(total).unwrap_or(u32::MAX));
            for kind in ResourceKind::ALL {
                for (name, r) in kind.map(set).iter() {
                    res.push(kind.tag());
                    put_bytes(&mut res, name.as_bytes());
                    put_bytes(&mut res, &r.bytes);
                }
            }
        }
    }

    let mut table = Vec::with_capacity(TABLE_LEN);
    for section in [&body, &res] {
        put_u64(&mut table, section.len() as u64);
        put_u64(&mut table, xxh3_64(section));
    }
    let body_len = TABLE_LEN + body.len() + res.len();
    let mut file = Vec::with_capacity(HEADER_LEN + body_len);
    file.extend_from_slice(&MAGIC);
    put_u32(&mut file, FORMAT_VERSION);
    put_u32(&mut file, 0);
    put_u64(&mut file, body_len as u64);
    put_u64(&mut file, xxh3_64(&table));
    let header_digest = xxh3_64(&file[..32]);
    put_u64(&mut file, header_digest);
    file.extend_from_slice(&table);
    file.extend_from_slice(&body);
    file.extend_from_slice(&res);
    file
}

/// A cursor over a body that turns every overrun into a reason, never a panic.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }

    /// Bytes left after the cursor (what bounds a preallocation).
    pub(super) fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    pub(super) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| format!("body ends inside {what} (at byte {})", self.at))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(super) fn bytes(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }

    pub(super) fn str(&mut self, what: &str) -> Result<&'a str, String> {
        std::str::from_utf8(self.bytes(what)?).map_err(|_| format!("{what} is not UTF-8"))
    }

    fn position(&mut self) -> Result<Position, String> {
        let n = self.u32("position")?;
        if n > MAX_PARTITIONS {
            return Err(format!("position lists {n} partitions"));
        }
        let offsets = (0..n)
            .map(|_| self.u64("position"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Position::from_offsets(offsets))
    }
}

/// One entity's fields as they sit in the body.
struct Framed<'a> {
    kind: EntityKind,
    key: &'a str,
    source: &'a str,
    generation: u64,
    payload: &'a [u8],
}

/// Below this many entities a restore converts on the calling thread only.
const PARALLEL_MIN: usize = 4096;

/// Most threads a restore converts entities on: decoding and validating is about
/// half of a restore, and inserting (one thread) the other half.
const MAX_THREADS: usize = 4;

/// Decodes and converts every entity, in order, on up to [`MAX_THREADS`] threads.
fn convert_all(framed: &[Framed<'_>]) -> Vec<Result<Converted, String>> {
    deltapilot_model::par::map_chunks(
        framed,
        PARALLEL_MIN,
        MAX_THREADS,
        |chunk: &[Framed<'_>]| {
            chunk
                .iter()
                .map(|f| convert(f.kind, f.key, f.payload))
                .collect()
        },
        // A panic while converting is a bug, not corruption; every entity of that
        // part is reported as not restored.
        |len, _| {
            (0..len)
                .map(|_| Err("entity conversion panicked".to_string()))
                .collect()
        },
    )
}

/// Checks magic, length and header checksum; returns the format version and the
/// body length the header announces, whatever the version.
fn intact_header(file: &[u8]) -> Result<(u32, u64), String> {
    if file.len() < HEADER_LEN {
        return Err(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            file.len()
        ));
    }
    if file[..8] != MAGIC {
        return Err("bad magic (not a deltapilot checkpoint)".into());
    }
    if xxh3_64(&file[..32]) != le_u64(file, 32) {
        return Err("header checksum mismatch".into());
    }
    let version = u32::from_le_bytes([file[8], file[9], file[10], file[11]]);
    Ok((version, le_u64(file, 16)))
}

/// The little-endian `u64` at byte `at` of `b`, which the caller has checked
/// holds it (the header's and the section table's fixed fields).
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Checks the header and returns the body length it announces.
fn check_header(file: &[u8]) -> Result<u64, String> {
    match intact_header(file)? {
        (FORMAT_VERSION, body_len) => Ok(body_len),
        (version, _) => Err(format!(
            "format version {version}; this build reads version {FORMAT_VERSION}"
        )),
    }
}

/// The format version of a checkpoint whose header is intact but whose version is
/// not [`FORMAT_VERSION`] (another build wrote it); `None` otherwise.
pub(super) fn foreign_version(prefix: &[u8]) -> Option<u32> {
    intact_header(prefix)
        .ok()
        .map(|(version, _)| version)
        .filter(|v| *v != FORMAT_VERSION)
}

/// Where one section of a body lies in the file, and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Section {
    /// Byte offset in the file.
    pub(super) offset: u64,
    /// Length in bytes.
    pub(super) len: u64,
    digest: u64,
}

impl Section {
    /// Checks `bytes`, the section as read, against its length and checksum.
    fn check(&self, bytes: &[u8], name: &str) -> Result<(), String> {
        if bytes.len() as u64 != self.len {
            return Err(format!(
                "the {name} section is {} bytes but the table says {} (truncated)",
                bytes.len(),
                self.len
            ));
        }
        if xxh3_64(bytes) != self.digest {
            return Err(format!("body checksum mismatch in the {name} section"));
        }
        Ok(())
    }

    /// Its bytes within a whole file.
    fn of(&self, file: &Bytes) -> Bytes {
        // `layout` checked that both sections lie within the announced body, and
        // `decode` that the file holds exactly that body.
        let start = usize::try_from(self.offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(self.len).unwrap_or(usize::MAX));
        file.slice(start.min(file.len())..end.min(file.len()))
    }
}

/// The two sections of a checkpoint body, from its section table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    /// Total length of the body (table included), as the header announces it.
    pub(super) body_len: u64,
    /// Position, fingerprints, sources and every entity.
    pub(super) state: Section,
    /// The stored resources.
    pub(super) resources: Section,
}

impl Layout {
    /// Checks that a file of `file_len` bytes holds exactly the announced body.
    pub(super) fn check_len(&self, file_len: u64) -> Result<(), String> {
        let body = file_len.saturating_sub(HEADER_LEN as u64);
        if body != self.body_len {
            return Err(format!(
                "body is {body} bytes but the header says {} (truncated or extended)",
                self.body_len
            ));
        }
        Ok(())
    }
}

/// Checks the header and the section table at the start of `prefix` (the
/// file's first bytes, or all of them) and returns where the sections lie.
pub(super) fn layout(prefix: &[u8]) -> Result<Layout, String> {
    let body_len = check_header(prefix)?;
    let table = prefix
        .get(HEADER_LEN..HEADER_LEN + TABLE_LEN)
        .ok_or_else(|| format!("file ends inside the {TABLE_LEN}-byte section table"))?;
    if xxh3_64(table) != le_u64(prefix, 24) {
        return Err("body checksum mismatch in the section table".into());
    }
    let state = Section {
        offset: (HEADER_LEN + TABLE_LEN) as u64,
        len: le_u64(table, 0),
        digest: le_u64(table, 8),
    };
    let resources = Section {
        offset: state.offset.saturating_add(state.len),
        len: le_u64(table, 16),
        digest: le_u64(table, 24),
    };
    let sum = (TABLE_LEN as u64)
        .checked_add(state.len)
        .and_then(|n| n.checked_add(resources.len));
    if sum != Some(body_len) {
        return Err(format!(
            "the sections ({} and {} bytes) do not fill the {body_len}-byte body",
            state.len, resources.len
        ));
    }
    Ok(Layout {
        body_len,
        state,
        resources,
    })
}

/// The position a checkpoint file was taken at, read from its header and the first
/// bytes of its state section, without verifying the section's checksum.
pub(super) fn peek_position(prefix: &[u8]) -> Result<Position, String> {
    layout(prefix)?;
    Reader::new(&prefix[HEADER_LEN + TABLE_LEN..]).position()
}

/// Decodes a whole checkpoint file, verifying every checksum and every entity.
///
/// Stored resources are slices of `file` (no copy), so the file's buffer lives as
/// long as any of them does.
pub(super) fn decode(file: &Bytes) -> Result<Checkpoint, String> {
    let layout = layout(file)?;
    layout.check_len(file.len() as u64)?;
    decode_sections(
        &layout,
        || Ok(layout.state.of(file)),
        || Ok(layout.resources.of(file)),
    )
    .map_err(Failed::into_reason)
}

/// Why [`decode_sections`] failed: a section could not be read (an I/O error,
/// with the reader's words), or its content is damaged.
#[derive(Debug)]
pub(super) enum Failed {
    /// Reading a section failed.
    Read(String),
    /// A section is damaged: a checksum, a length or a value.
    Corrupt(String),
}

impl Failed {
    /// The reason alone.
    pub(super) fn into_reason(self) -> String {
        match self {
            Failed::Read(e) | Failed::Corrupt(e) => e,
        }
    }
}

/// Decodes a checkpoint laid out as `layout` from its two sections, which
/// `state` and `resources` read (from a buffer or a file). The resources are
/// read, checked and decoded on a thread of their own while the state is (see
/// the module documentation). The first error in file order wins: the state's,
/// then the resources'. Stored resources are slices of their section's bytes.
pub(super) fn decode_sections(
    layout: &Layout,
    state: impl FnOnce() -> Result<Bytes, String>,
    resources: impl FnOnce() -> Result<Bytes, String> + Send,
) -> Result<Checkpoint, Failed> {
    let decode_resources = |bytes: Bytes| {
        layout.resources.check(&bytes, "resources")?;
        let mut r = Reader::new(&bytes);
        let stored = read_resources(&mut r, &bytes)?;
        if r.remaining() != 0 {
            return Err(format!(
                "{} bytes after the last stored resource",
                r.remaining()
            ));
        }
        Ok(stored)
    };
    std::thread::scope(|scope| {
        let reading = scope.spawn(|| match resources() {
            Ok(bytes) => decode_resources(bytes).map_err(Failed::Corrupt),
            Err(e) => Err(Failed::Read(e)),
        });
        let decoded = match state() {
            Ok(bytes) => layout
                .state
                .check(&bytes, "state")
                .and_then(|()| decode_state(&bytes))
                .map_err(Failed::Corrupt),
            Err(e) => Err(Failed::Read(e)),
        };
        let stored = reading.join().unwrap_or_else(|_| {
            Err(Failed::Corrupt(
                "reading the stored resources panicked".to_string(),
            ))
        });
        let (position, fingerprints, model) = decoded?;
        Ok(Checkpoint {
            position,
            fingerprints,
            model,
            resources: stored?,
        })
    })
}

/// Decodes the state section: the position, the fingerprints and the state.
fn decode_state(body: &[u8]) -> Result<(Position, Vec<Fingerprint>, ModelState), String> {
    let mut r = Reader::new(body);
    let position = r.position()?;
    let n = r.u32("fingerprints")?;
    if n > MAX_PARTITIONS {
        return Err(format!("{n} fingerprints"));
    }
    let mut fingerprints = Vec::with_capacity(n as usize);
    for _ in 0..n {
        fingerprints.push(Fingerprint {
            partition: r.u32("fingerprint")?,
            offset: r.u64("fingerprint")?,
            digest: r.u64("fingerprint")?,
        });
    }
    let mut restorer = Restorer::new();
    let n = r.u32("sources")?;
    for _ in 0..n {
        let name = r.str("source name")?;
        let g = SourceGen {
            started: r.u64("source")?,
            completed: r.u64("source")?,
        };
        restorer.source_gen(name, g);
    }
    let n = r.u32("pending resyncs")?;
    let mut pending = Vec::new();
    for _ in 0..n {
        let name = r.str("pending resync source")?;
        let mut p = PendingResync {
            generation: r.u64("pending resync")?,
            copies: r.u32("pending resync")?,
            ..Default::default()
        };
        let k = r.u32("pending resync partitions")?;
        if k > MAX_PARTITIONS {
            return Err(format!("pending resync of {name:?} lists {k} partitions"));
        }
        for _ in 0..k {
            p.partitions.insert(r.u32("pending resync partition")?);
        }
        pending.push((Arc::<str>::from(name), p));
    }
    let n = r.u64("entity count")?;
    let mut framed = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(body.len() / 16));
    for i in 0..n {
        let kind = r.u8("entity")?;
        let kind = EntityKind::from_u8(kind)
            .ok_or_else(|| format!("entity {i} has unknown kind {kind}"))?;
        framed.push(Framed {
            kind,
            key: r.str("entity key")?,
            source: r.str("entity source")?,
            generation: r.u64("entity generation")?,
            payload: r.bytes("entity payload")?,
        });
    }
    let endpoints = endpoints::frame(&mut r)?;
    if r.remaining() != 0 {
        return Err(format!("{} bytes after the last endpoint", r.remaining()));
    }
    // Two independent parts, run at once so that both cores stay busy (the
    // stored resources are being read on a third): the entities (services and
    // configs) converted and loaded on one thread, and the endpoints converted
    // on this one (which spreads them over several).
    let (restored, endpoints) = std::thread::scope(|scope| {
        let entities = scope.spawn(move || {
            for (f, converted) in framed.iter().zip(convert_all(&framed)) {
                restorer.insert(f.source, f.generation, converted?);
            }
            restorer.load_services();
            Ok::<_, String>(restorer)
        });
        let endpoints = endpoints::convert(&endpoints);
        let restored = entities
            .join()
            .unwrap_or_else(|_| Err("loading the entities panicked".to_string()));
        (restored, endpoints)
    });
    // The first error in file order: endpoints were checked before the entities
    // were inserted, as before these parts ran at once.
    let endpoints = endpoints?;
    let mut restorer = restored?;
    restorer.endpoints(endpoints);
    let mut model = restorer.finish();
    for (source, p) in pending {
        model.set_pending_resync(source, Some(p));
    }
    Ok((position, fingerprints, model))
}

/// Reads the resources section (see the layout) from `r`; stored resources are
/// slices of `file`.
fn read_resources(r: &mut Reader<'_>, file: &Bytes) -> Result<Option<StoredResources>, String> {
    Ok(match r.u8("resources")? {
        0 => None,
        1 => {
            let generator = r.str("generator id")?.to_owned();
            let mut set = ResourceSet::default();
            let mut hash = 0u64;
            let n = r.u32("resource count")?;
            for i in 0..n {
                let tag = r.u8("resource")?;
                let name: Arc<str> = Arc::from(r.str("resource name")?);
                let bytes = file.slice_ref(r.bytes("resource body")?);
                let kind = ResourceKind::from_tag(tag)
                    .ok_or_else(|| format!("resource {i} has unknown map {tag}"))?;
                let resource = Arc::new(Resource::new(name, bytes));
                let replaced = kind.map_mut(&mut set).insert(resource.clone());
                hash = replace_entry_hash(hash, tag, replaced.as_deref(), Some(&resource));
            }
            Some(StoredResources {
                generator,
                set,
                hash,
            })
        }
        other => return Err(format!("resources flag {other}")),
    })
}
