//! The embedded event log: a segmented, append-only file log in one directory.
//!
//! # Layout
//!
//! ```text
//! DIR/LOCK                       held (flock-style) by the one writer; holds its pid
//! DIR/00000000000000000000.log   segment with records 0..N
//! DIR/0000000000000000000N.log   next segment, named after its first offset
//! DIR/COMPACTED                  the compaction horizon, once compacted (`compact.rs`)
//! DIR/START                      the first offset, once segments were deleted (`retain.rs`)
//! ```
//!
//! A segment starts with a 16-byte header (magic with format version, base offset)
//! followed by records, each `magic | crc32 | len | offset | payload` with the CRC
//! over length, offset and payload (details in `format.rs`). The log has one
//! partition; positions are `Position::single(next_offset)`.
//!
//! # Torn tail or corruption
//!
//! At writer open ([`FileLog::open`]) every segment is read and every record checked
//! (magic, length bound, CRC, expected offset); a read-only open checks less up
//! front (see below). The first record that fails is a **torn tail** if and only
//! if
//!
//! 1. it is in the **last** segment, and
//! 2. **no valid record follows it** in that segment: searching the rest of the
//!    file for the record magic finds no record that passes every check with an
//!    offset at or after the bad record's.
//!
//! A torn tail is what a crash during an append leaves (a record cut short, or a
//! damaged last record); a writer open logs it with `tracing::warn!` (segment,
//! byte offset, log offset), truncates the segment to the end of the last good
//! record, and reports it through [`FileLog::recovery`]. Anything else (a bad
//! record followed by a valid one, a bad record or trailing bytes in an older
//! segment, segments whose offsets do not continue each other) is **corruption in
//! the middle**: open fails with [`Error::Corrupt`] naming the segment, byte offset
//! and log offset, and nothing is truncated. Reads check every record again, so
//! damage after open surfaces as `Error::Corrupt` from `read` or `follow`.
//!
//! So a flipped byte in the last record is a torn tail (cut), and a flipped byte in
//! an earlier record is corruption (error), even within the last segment. Rolling
//! fsyncs the old segment before creating the next (except with
//! [`FsyncPolicy::Never`]), so a crash cannot tear an older segment. One case the
//! rule cannot tell from corruption: after a power loss (not a process crash) with
//! `Interval` or `Never`, the unsynced tail may reach the disk out of order, leaving
//! a bad record followed by good ones; the log then refuses to open, naming the
//! spot, rather than guessing what was acknowledged.
//!
//! # Read-only open: the newest segment only
//!
//! [`FileLog::open_read_only`] costs the newest segment, not the log: a replay
//! from a checkpoint near the end, or an admin reader, should not wait for
//! gigabytes it will not read. A segment followed by another is **sealed** (the
//! writer never appends to it again) and its records must run from its base to the
//! next segment's base, both known from the file names. So open
//!
//! 1. lists the directory: a bad segment name, or a first segment not at the log's
//!    start (0, or what `DIR/START` records), fails the open, as before;
//! 2. checks each sealed segment cheaply: its header, and its last record (found
//!    by reading the last 64 KiB): it must pass every check, end the file and carry
//!    offset `next base - 1`. That catches a missing segment in between, a segment
//!    cut short or trailing garbage, and the open fails as before. If the cheap
//!    check does not pass, that segment is scanned in full at open, exactly as
//!    before, so its error (if any) is the one a full scan gives;
//! 3. scans the newest segment in full, which finds the head and applies the
//!    torn-tail rule above ("not written yet" for a reader).
//!
//! A sealed segment opened that way is read lazily: the first read that lands in
//! it scans forward from the end of its checked prefix (its header at first),
//! verifying every record on the way and adding it to the segment's sparse index,
//! which is then kept; the next read seeks directly. The first bad record in the
//! middle of a sealed segment is therefore [`Error::Corrupt`] (segment, byte
//! offset, log offset) from the read or follow that reaches it, instead of from
//! the open; reads that stay before it, or read later segments, still succeed, and
//! a replay stops there saying so. Nothing a reader could see before is hidden: a
//! read over damaged records still fails, and a read-only open still fails for
//! everything except damage inside a sealed segment.
//!
//! The writer keeps the full scan at open. It is the one place where the whole
//! log gets verified, and it decides for good what is a torn tail (it truncates);
//! a writer that appended to a log damaged in the middle would leave that damage to
//! be found by whichever reader happens to reach it, possibly much later. It runs
//! once per process start, and readers never wait for it.
//!
//! # Writers and readers
//!
//! [`FileLog::open`] takes an exclusive lock on `DIR/LOCK` (`File::try_lock`), so a
//! second writer, in this process or another, fails with [`Error::InvalidLogDir`].
//! [`FileLog::open_read_only`] takes no lock and never writes: a bad record at the end
//! of the newest segment is treated as "not written yet" (it stops before it), and
//! its followers poll the files every 100 ms for what the writer appends. A reader
//! only looks at bytes below the file length it saw; on a local filesystem the
//! length only grows past bytes already copied in, so the only half-written thing it
//! can see is the end of a batch still being written, which is exactly the "not yet
//! written" case. In-process followers instead wake on a `tokio::sync::watch` of
//! the head, with no polling.
//!
//! # Blocking I/O
//!
//! `append`, `read` and the follower's reads run on tokio's blocking pool
//! (`spawn_blocking`). Writing a batch to the page cache is quick, but an fsync
//! (`Always`), a write stalled by dirty-page throttling or a cold read can take
//! milliseconds, and that must not stall an async worker serving xDS streams.
//! The hop is paid once per call and amortised over the batch: in the log
//! benchmark (`benches/benches/log.rs`) the bound is copying, encoding and CRC,
//! not the hop. Events are encoded on the caller's task; framing (which needs
//! the offsets) happens under the writer lock. `open` and `open_read_only` are
//! synchronous; `open` scans the whole log and `open_read_only` the newest
//! segment (see above), so call them from `spawn_blocking` when the log (or a
//! segment) may be large. A read landing in a sealed segment a read-only handle
//! has not read yet scans up to the segment's size once, on the blocking pool
//! like any read.
//!
//! # Memory
//!
//! Bounded by design: per segment an index entry (16 bytes) per 4 KiB of records
//! (for a sealed segment of a read-only handle, of the records reads have passed);
//! one reusable write buffer (a batch; dropped if it grew past 8 MiB); scans read in
//! 1 MiB chunks; a read allocates about what it returns, in buffers of at most
//! 1 MiB (or one record) whose records are zero-copy slices, so a record kept alive
//! keeps its buffer alive.
//!
//! # Compaction
//!
//! [`FileLog::compact`] rewrites sealed segments below a position the caller
//! vouches for to the latest effective record per entity (see `compact.rs` and
//! `compact_plan.rs`): offsets stay, dropped records leave gaps, and
//! [`FileLog::horizon_offset`] says from where state is exact again.
//!
//! # Retention by deletion
//!
//! [`FileLog::delete_segments`] deletes whole sealed segments at the front that lie
//! below a position the caller vouches for and outside the retention window (see
//! `retain.rs`). The log then starts above 0 ([`FileLog::start_offset`]); a read
//! or follow below the start fails with [`Error::BeforeRetention`], naming it.
//!
//! What it does NOT do: decide when to compact or which position is safe (the
//! caller does), several partitions, or replication.

mod compact;
mod compact_plan;
mod follow;
mod format;
mod marker;
mod recovery;
mod retain;
mod sealed;
mod segment;
mod shared;
mod writer;

pub use format::end_last_batch;
pub use segment::read_exact_at;

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deltapilot_proto::Event;
use futures::stream::BoxStream;

pub use compact::{CompactReport, HORIZON_FILE};
pub use compact_plan::{Admit, CompactPolicy};
pub use recovery::Recovery;
pub use retain::{DeletePolicy, DeleteReport, START_FILE};

use self::follow::blocking;
use self::format::MAX_RECORD_BYTES;
use self::shared::Shared;
use self::writer::Writer;
use super::{EventLog, FollowItem, Position, Record, RecordPos, encode_event};
use crate::health::{AppendFailure, LogHealth};
use crate::{Error, Result};

/// Name of the writer's lock file in the log directory.
pub const LOCK_FILE: &str = "LOCK";

/// When appended records are fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// After every append, before it is acknowledged.
    Always,
    /// At most this long after an append.
    Interval(Duration),
    /// Never explicitly; the OS decides.
    Never,
}

impl FsyncPolicy {
    /// Default interval for [`FsyncPolicy::Interval`].
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(10);

    /// The interval if this is `Interval`, else the default.
    pub fn interval_or_default(&self) -> Duration {
        match self {
            FsyncPolicy::Interval(d) => *d,
            _ => Self::DEFAULT_INTERVAL,
        }
    }
}

/// Options of the embedded log.
#[derive(Debug, Clone)]
pub struct FileLogOptions {
    /// When to fsync.
    pub fsync: FsyncPolicy,
    /// Compaction and retention (`compact=`, `retention=` in the URI). The log
    /// only carries them: the process that knows a safe position acts on them.
    pub retention: RetentionPolicy,
    /// A segment rolls before a record that would take it past this many bytes
    /// (a single larger record gets a segment of its own).
    pub segment_bytes: u64,
}

impl Default for FileLogOptions {
    fn default() -> Self {
        Self {
            fsync: FsyncPolicy::Interval(FsyncPolicy::DEFAULT_INTERVAL),
            retention: RetentionPolicy::default(),
            segment_bytes: 64 * 1024 * 1024,
        }
    }
}

/// When and how the history of the embedded log is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Compact sealed segments below the safe position (`compact=true`).
    pub compact: bool,
    /// Delete whole sealed segments below the safe position once they are outside
    /// the retention window (`delete=true`).
    pub delete: bool,
    /// The retention window in time (`retention=`): how long a tombstone (a
    /// delete that is its entity's last write) outlives compaction, so that
    /// readers resuming inside a compacted range within this window still see the
    /// delete; and, with `delete`, the age past which a sealed segment may go.
    pub tombstone_retention: Duration,
    /// The retention window in bytes (`retention_bytes=`), with `delete`: a
    /// sealed segment may also go once the segments after it hold this many.
    pub retention_bytes: Option<u64>,
}

impl RetentionPolicy {
    /// Default tombstone retention: a day, long enough for a replica or backup
    /// restored from yesterday's checkpoint to see today's deletes.
    pub const DEFAULT_TOMBSTONE_RETENTION: Duration = Duration::from_secs(24 * 3600);
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self {
            compact: false,
            delete: false,
            tombstone_retention: Self::DEFAULT_TOMBSTONE_RETENTION,
            retention_bytes: None,
        }
    }
}

/// What [`FileLog::disk_usage`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Segment files.
    pub segments: usize,
    /// Their verified bytes (header and records).
    pub bytes: u64,
    /// The first offset of the oldest segment: nothing below it can be read.
    pub oldest_offset: u64,
}

/// The embedded segmented file log. See the module documentation for the format
/// and the recovery rule.
///
/// Dropping it ends its followers (they yield [`Error::Closed`]) and, once any
/// in-flight append has finished, syncs per the policy and releases the lock.
pub struct FileLog {
    shared: Arc<Shared>,
    /// `None` for a read-only handle.
    writer: Option<Arc<Mutex<Writer>>>,
    recovery: Option<Recovery>,
    /// Append outcomes and reads (a local log is always reachable).
    pub(crate) health: Arc<LogHealth>,
    /// The options it was opened with (defaults for a read-only handle).
    opts: FileLogOptions,
    /// Serialises compactions and deletions.
    compacting: Arc<Mutex<()>>,
}

impl std::fmt::Debug for FileLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileLog")
            .field("dir", &self.shared.dir())
            .field("read_only", &self.shared.read_only())
            .field("head", &self.shared.head())
            .field("recovery", &self.recovery)
            .finish()
    }
}

impl FileLog {
    /// Opens (creating if needed) the log in `dir` for writing: takes the lock,
    /// verifies every segment and truncates a torn tail (see [`FileLog::recovery`]).
    ///
    /// Fails with [`Error::InvalidLogDir`] if another writer holds the lock, and
    /// with [`Error::Corrupt`] on corruption in the middle of the log.
    pub fn open(dir: &Path, opts: FileLogOptions) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            op: "create log directory",
            path: dir.to_owned(),
            source,
        })?;
        let lock = take_lock(dir)?;
        let durable = opts.fsync != FsyncPolicy::Never;
        compact::remove_leftovers(dir)?;
        let (segments, recovery, start) = recovery::open_for_write(dir, durable)?;
        let shared = Arc::new(Shared::new(dir.to_owned(), false, segments));
        shared.set_start(start);
        shared.load_horizon()?;
        let writer = Writer::new(shared.clone(), opts.fsync, opts.segment_bytes, lock)?;
        Ok(Self {
            health: Arc::new(LogHealth::new()),
            shared,
            writer: Some(Arc::new(Mutex::new(writer))),
            recovery,
            opts,
            compacting: Arc::default(),
        })
    }

    /// Opens the log in `dir` for reading only, e.g. while another process writes
    /// it. Takes no lock and writes nothing; a torn tail is treated as not yet
    /// written. Scans only the newest segment (sealed ones get a cheap check and are
    /// verified by the reads that reach them; see the module documentation), so
    /// damage inside a sealed segment is reported by those reads, not here.
    /// Its followers poll the files for new records; `head` looks at the files
    /// again, and so does `read` when it has nothing newer to return. `append`
    /// fails.
    pub fn open_read_only(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::InvalidLogDir {
                path: dir.to_owned(),
                reason: "no such directory; start the writer first or check the path".into(),
            });
        }
        let shared = Arc::new(Shared::new(dir.to_owned(), true, Default::default()));
        recovery::refresh(&shared)?;
        shared.load_horizon()?;
        Ok(Self {
            health: Arc::new(LogHealth::new()),
            shared,
            writer: None,
            recovery: None,
            opts: FileLogOptions::default(),
            compacting: Arc::default(),
        })
    }

    /// What opening found at the tail and truncated, if anything (always `None`
    /// for a read-only handle).
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        self.shared.dir()
    }

    /// Whether this handle was opened with [`FileLog::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only()
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &FileLogOptions {
        &self.opts
    }

    /// The compaction horizon: the end of the compacted range (0 if nothing was
    /// compacted). Folding from the start gives exactly the original state at any
    /// position at or after it; positions below it lie inside the compacted range,
    /// where superseded records are gone.
    pub fn horizon_offset(&self) -> u64 {
        self.shared.horizon()
    }

    /// The first offset the log still holds: 0 until retention deleted segments
    /// (see [`FileLog::delete_segments`]).
    pub fn start_offset(&self) -> u64 {
        self.shared.start()
    }

    /// What the log holds on disk now: its segments, their verified bytes, and
    /// the oldest offset still stored. Cheap (a read lock over the segment list),
    /// so `/metrics` reads it on every scrape.
    pub fn disk_usage(&self) -> DiskUsage {
        let segs = self.shared.segments();
        DiskUsage {
            segments: segs.list.len(),
            bytes: segs.list.iter().map(|s| s.end_byte).sum(),
            oldest_offset: segs.list.first().map_or(segs.head, |s| s.base),
        }
    }

    /// Compacts the sealed segments whose records all lie below `below` (see
    /// `compact.rs`): the caller vouches that every reader it cares about resumes
    /// at or after `below`. `admit` is the fold's payload validation. Writer
    /// handles only; appends go on meanwhile.
    pub async fn compact(
        &self,
        below: u64,
        admit: Arc<Admit>,
        policy: CompactPolicy,
    ) -> Result<CompactReport> {
        self.maintain(
            "compaction needs the writer (stop `deltapilot run`, or let it compact by policy)",
            move |shared, durable| compact::compact(shared, below, &*admit, policy, durable),
        )
        .await
    }

    /// Deletes the sealed segments at the front whose records all lie below
    /// `below` and that are outside `policy`'s window (see `retain.rs`): the caller
    /// vouches that every reader it cares about resumes at or after `below`.
    /// Writer handles only; appends go on meanwhile, compactions wait.
    pub async fn delete_segments(&self, below: u64, policy: DeletePolicy) -> Result<DeleteReport> {
        self.maintain(
            "deleting segments needs the writer",
            move |shared, durable| retain::delete(shared, below, policy, durable),
        )
        .await
    }

    /// Runs a compaction or a deletion (`work`, given the shared state and
    /// whether to fsync) on the blocking pool, one at a time; refused, saying
    /// `needs`, on a read-only handle.
    async fn maintain<T: Send + 'static>(
        &self,
        needs: &str,
        work: impl FnOnce(&Shared, bool) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.writer.is_none() {
            return Err(Error::Compact {
                path: self.dir().to_owned(),
                reason: format!("the log was opened read-only; {needs}"),
            });
        }
        let (shared, lock) = (self.shared.clone(), self.compacting.clone());
        let durable = self.opts.fsync != FsyncPolicy::Never;
        blocking(move || {
            let _one = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            work(&shared, durable)
        })
        .await
    }

    /// Brings a read-only handle up to date with the files (no-op for a writer).
    async fn refresh(&self) -> Result<()> {
        if !self.shared.read_only() {
            return Ok(());
        }
        let shared = self.shared.clone();
        blocking(move || recovery::refresh(&shared)).await
    }
}

impl Drop for FileLog {
    fn drop(&mut self) {
        self.shared.close();
    }
}

/// Takes the writer lock, or explains who holds it.
fn take_lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let io = |op| {
        let path = path.clone();
        move |source| Error::Io { op, path, source }
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("open lock file"))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            // Best effort: the pid is only for the message.
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() {
                "another writer".to_owned()
            } else {
                format!("another writer (pid {holder})")
            };
            return Err(Error::InvalidLogDir {
                path: dir.to_owned(),
                reason: format!(
                    "{who} holds {}; only one process may write the log \
                     (readers use FileLog::open_read_only / `deltapilot log tail`)",
                    path.display()
                ),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io("lock")(e)),
    }
    file.set_len(0).map_err(io("write lock file"))?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())
        .map_err(io("write lock file"))?;
    Ok(file)
}

impl FileLog {
    /// This handle's health (see [`LogHealth`]): append outcomes and reads.
    pub fn health(&self) -> Arc<LogHealth> {
        self.health.clone()
    }

    async fn append_unrecorded(&self, events: &[Event]) -> Result<Vec<RecordPos>> {
        let Some(writer) = self.writer.clone() else {
            return Err(Error::Io {
                op: "append",
                path: self.dir().to_owned(),
                source: io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the log was opened read-only",
                ),
            });
        };
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut payloads = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            let bytes = encode_event(e);
            if bytes.len() > MAX_RECORD_BYTES {
                return Err(Error::InvalidEvent(format!(
                    "event {i} of the batch encodes to {} bytes, above the embedded log's \
                     limit of {MAX_RECORD_BYTES}; nothing was appended",
                    bytes.len()
                )));
            }
            payloads.push(bytes);
        }
        let dir = self.dir().to_owned();
        blocking(move || {
            let mut w = writer.lock().map_err(|_| Error::Io {
                op: "append",
                path: dir,
                source: io::Error::other("an earlier append panicked; reopen the log"),
            })?;
            w.append(&payloads)
        })
        .await
    }
}

impl EventLog for FileLog {
    async fn append(&self, events: &[Event]) -> Result<Vec<RecordPos>> {
        let outcome = self.append_unrecorded(events).await;
        match &outcome {
            Ok(_) => self.health.append_ok(),
            Err(e) => self.health.append_failed(AppendFailure::of(e)),
        }
        outcome
    }

    async fn read(&self, from: &Position, limit: usize) -> Result<Vec<Record>> {
        if self.shared.read_only() && from.offset(0) >= self.shared.head() {
            self.refresh().await?;
        }
        let off = self.shared.check_position(from)?;
        if limit == 0 || off == self.shared.head() {
            return Ok(Vec::new());
        }
        let shared = self.shared.clone();
        let records = blocking(move || shared.read(off, limit, usize::MAX)).await?;
        self.health.read_ok();
        Ok(records)
    }

    fn follow(&self, from: Position) -> BoxStream<'static, Result<FollowItem>> {
        follow::follow(self.shared.clone(), from)
    }

    async fn head(&self) -> Result<Position> {
        self.refresh().await?;
        Ok(Position::single(self.shared.head()))
    }

    fn start(&self) -> Position {
        Position::single(self.shared.start())
    }

    /// The compaction horizon, or the start once retention deleted past it:
    /// below the start nothing can be resumed at all.
    fn horizon(&self) -> Position {
        Position::single(self.shared.horizon().max(self.shared.start()))
    }

    fn max_event_bytes(&self) -> usize {
        MAX_RECORD_BYTES
    }
}
