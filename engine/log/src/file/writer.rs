//! The single writer: frames a batch, writes it, rolls segments and applies the
//! fsync policy.
//!
//! An append frames the whole batch into one reusable buffer and writes it with one
//! `write` call into one segment. A batch that does not fit in the rest of the
//! active segment rolls first, so a batch never spans two segments and a segment
//! exceeds `segment_bytes` only when a single batch does. Every record but the
//! batch's last is framed as "more follow" (see `format`), so recovery keeps a
//! batch whole or not at all: a crash mid-append never leaves half a batch.
//! Rolling fsyncs the old segment and the directory first (except with
//! `FsyncPolicy::Never`), so a crash can only ever tear the last segment.
//!
//! Fsync policies:
//! - `Always`: `fdatasync` before the append returns; readers see the records only
//!   after that, so followers never observe data a crash could take back.
//! - `Interval(d)`: a background thread ([`Flusher`]) syncs the active segment `d`
//!   after the first unsynced write, so every record is on disk at most `d` after
//!   its append returned (plus the fsync's own duration). A plain thread, not a tokio
//!   task: it needs no runtime, and an fsync may block for milliseconds.
//! - `Never`: the OS writes back when it likes.
//!
//! Any failed write or fsync leaves the writer failed: later appends return an error
//! until the log is reopened, whose recovery then settles what reached the disk.
//! Carrying on could write after a half-written record, which would turn a torn
//! tail into corruption in the middle.
//!
//! What it does NOT do: recovery at open (recovery.rs), reads, or waking followers
//! beyond publishing the head.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::FsyncPolicy;
use super::format::{self, SEGMENT_HEADER_LEN};
use super::segment::{Segment, read_exact_at, segment_file_name};
use super::shared::Shared;
use crate::RecordPos;
use crate::{Error, Result};

/// The write buffer is kept between appends to avoid reallocating, but not beyond
/// this capacity: one huge batch must not pin its buffer for the life of the log.
const MAX_RETAINED_BUFFER: usize = 8 * 1024 * 1024;

/// Creates the segment file based at `base` and writes its header. With `durable`,
/// the file and the directory entry are fsynced before returning.
pub(crate) fn create_segment(dir: &Path, base: u64, durable: bool) -> Result<(PathBuf, Arc<File>)> {
    let path = dir.join(segment_file_name(base));
    let io = |op| {
        let path = path.clone();
        move |source| Error::Io { op, path, source }
    };
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create_new(true)
        .open(&path)
        .map_err(io("create segment"))?;
    file.write_all(&format::segment_header(base))
        .map_err(io("write segment header"))?;
    if durable {
        file.sync_all().map_err(io("fsync new segment"))?;
        sync_dir(dir)?;
    }
    Ok((path, Arc::new(file)))
}

/// Makes the directory's entries (a new segment file) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| Error::Io {
                op: "fsync log directory",
                path: dir.to_owned(),
                source,
            })
    }
    #[cfg(not(unix))]
    {
        // Directories cannot be opened for syncing here; NTFS journals metadata.
        let _ = dir;
        Ok(())
    }
}

/// The one writer of an open log.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    fsync: FsyncPolicy,
    segment_bytes: u64,
    active: Arc<File>,
    active_path: Arc<Path>,
    /// Bytes in the active segment, header included.
    active_len: u64,
    /// The active segment has a v01 header (written by an earlier build), which
    /// must not hold "more follow" records: the first append moves to v02.
    active_v1: bool,
    next_offset: u64,
    buf: Vec<u8>,
    /// Why the writer gave up, if it did.
    failed: Option<String>,
    flusher: Option<Flusher>,
    /// The held `LOCK` file. Declared last so it is released only after the flusher's
    /// final sync.
    _lock: File,
}

impl Writer {
    /// A writer appending to the last segment of `shared`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        fsync: FsyncPolicy,
        segment_bytes: u64,
        lock: File,
    ) -> Result<Self> {
        let (active, active_path, active_len, next_offset, active_base) = {
            let segs = shared.segments();
            let last = segs.list.last().ok_or_else(|| Error::InvalidLogDir {
                path: shared.dir().to_owned(),
                reason: "no segment to append to".into(),
            })?;
            (
                last.file.clone(),
                last.path.clone(),
                last.end_byte,
                last.end_offset,
                last.base,
            )
        };
        let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
        read_exact_at(&active, &mut header, 0).map_err(|source| Error::Io {
            op: "read segment header",
            path: active_path.to_path_buf(),
            source,
        })?;
        let active_v1 = format::check_segment_header(&header, active_base).map_err(|reason| {
            Error::InvalidLogDir {
                path: active_path.to_path_buf(),
                reason,
            }
        })? == 1;
        let flusher = match fsync {
            FsyncPolicy::Interval(d) => Some(Flusher::start(d, shared.dir())?),
            FsyncPolicy::Always | FsyncPolicy::Never => None,
        };
        Ok(Self {
            shared,
            fsync,
            segment_bytes,
            active,
            active_path,
            active_len,
            active_v1,
            next_offset,
            buf: Vec::new(),
            failed: None,
            flusher,
            _lock: lock,
        })
    }

    /// Appends already-encoded events (each at most `MAX_RECORD_BYTES`) and
    /// publishes the new head.
    pub(crate) fn append(&mut self, payloads: &[Vec<u8>]) -> Result<Vec<RecordPos>> {
        if let Some(reason) = &self.failed {
            return Err(Error::Io {
                op: "append (the writer failed earlier; reopen the log to recover)",
                path: self.active_path.to_path_buf(),
                source: io::Error::other(reason.clone()),
            });
        }
        let first = self.next_offset;
        let res = self.append_inner(payloads);
        if self.buf.capacity() > MAX_RETAINED_BUFFER {
            self.buf = Vec::new();
        }
        if let Err(e) = &res {
            tracing::error!(error = %e, "embedded log writer failed; appends refused until reopen");
            self.failed = Some(e.to_string());
        }
        res?;
        Ok((first..self.next_offset)
            .map(|offset| RecordPos {
                partition: 0,
                offset,
            })
            .collect())
    }

    fn io_err(&self, op: &'static str) -> impl FnOnce(io::Error) -> Error + use<> {
        let path = self.active_path.to_path_buf();
        move |source| Error::Io { op, path, source }
    }

    fn append_inner(&mut self, payloads: &[Vec<u8>]) -> Result<()> {
        if !payloads.is_empty() {
            if self.active_v1 {
                self.leave_v1()?;
            }
            let total: u64 = payloads
                .iter()
                .map(|p| format::framed_len(p.len()) as u64)
                .sum();
            if self.active_len > SEGMENT_HEADER_LEN && self.active_len + total > self.segment_bytes
            {
                self.roll()?;
            }
            self.buf.clear();
            let last = payloads.len() - 1;
            for (i, p) in payloads.iter().enumerate() {
                format::frame_record(&mut self.buf, self.next_offset + i as u64, p, i < last);
            }
            (&*self.active)
                .write_all(&self.buf)
                .map_err(self.io_err("append to segment"))?;
            let mut byte = self.active_len;
            let mut offset = self.next_offset;
            {
                let mut segs = self.shared.segments_mut();
                let seg = segs.list.last_mut().ok_or(Error::Closed)?;
                for p in payloads {
                    seg.index.note(offset, byte);
                    byte += format::framed_len(p.len()) as u64;
                    offset += 1;
                }
                seg.end_byte = byte;
                seg.end_offset = offset;
            }
            self.active_len = byte;
            self.next_offset = offset;
        }
        match self.fsync {
            FsyncPolicy::Always => self
                .active
                .sync_data()
                .map_err(self.io_err("fsync segment"))?,
            FsyncPolicy::Interval(_) => {
                if let Some(f) = &self.flusher {
                    f.mark(&self.active, &self.active_path)?;
                }
            }
            FsyncPolicy::Never => {}
        }
        self.shared.publish(self.next_offset);
        Ok(())
    }

    /// Moves appends off a v01 active segment: an empty one gets a v02 header in
    /// place, one holding records is closed by a roll.
    fn leave_v1(&mut self) -> Result<()> {
        if self.active_len > SEGMENT_HEADER_LEN {
            self.roll()?;
        } else {
            let header = format::segment_header(self.next_offset);
            std::os::unix::fs::FileExt::write_all_at(&*self.active, &header, 0)
                .map_err(self.io_err("rewrite segment header"))?;
        }
        self.active_v1 = false;
        Ok(())
    }

    /// Closes the active segment and starts a new one at the next offset.
    fn roll(&mut self) -> Result<()> {
        let durable = self.fsync != FsyncPolicy::Never;
        if durable {
            self.active
                .sync_data()
                .map_err(self.io_err("fsync segment before roll"))?;
        }
        let base = self.next_offset;
        let (path, file) = create_segment(self.shared.dir(), base, durable)?;
        let seg = Segment {
            end_byte: SEGMENT_HEADER_LEN,
            ..Segment::new(base, path, file.clone())
        };
        self.active_path = seg.path.clone();
        self.shared.segments_mut().list.push(seg);
        self.active = file;
        self.active_len = SEGMENT_HEADER_LEN;
        tracing::debug!(base, path = %self.active_path.display(), "embedded log rolled to a new segment");
        Ok(())
    }
}

/// The background fsync of [`FsyncPolicy::Interval`].
struct Flusher {
    inner: Arc<FlushInner>,
    thread: Option<JoinHandle<()>>,
}

struct FlushInner {
    state: Mutex<FlushState>,
    wake: Condvar,
    interval: Duration,
}

#[derive(Default)]
struct FlushState {
    /// The file to sync and when it first had unsynced data.
    dirty: Option<(Arc<File>, Arc<Path>, Instant)>,
    shutdown: bool,
    /// A failed fsync, reported to the next append.
    error: Option<(Arc<Path>, String)>,
}

impl FlushInner {
    fn lock(&self) -> MutexGuard<'_, FlushState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Flusher {
    fn start(interval: Duration, dir: &Path) -> Result<Self> {
        let inner = Arc::new(FlushInner {
            state: Mutex::new(FlushState::default()),
            wake: Condvar::new(),
            interval,
        });
        let run_inner = inner.clone();
        let thread = std::thread::Builder::new()
            .name("deltapilot-log-fsync".into())
            .spawn(move || run(&run_inner))
            .map_err(|source| Error::Io {
                op: "start the fsync thread",
                path: dir.to_owned(),
                source,
            })?;
        Ok(Self {
            inner,
            thread: Some(thread),
        })
    }

    /// Notes that `file` has unsynced data; fails if an earlier background fsync did.
    fn mark(&self, file: &Arc<File>, path: &Arc<Path>) -> Result<()> {
        let mut st = self.inner.lock();
        if let Some((path, reason)) = st.error.take() {
            return Err(Error::Io {
                op: "background fsync",
                path: path.to_path_buf(),
                source: io::Error::other(reason),
            });
        }
        match &mut st.dirty {
            // Already due at the earlier time. After a roll the old segment was
            // synced by the roll itself, so only the new file remains to sync.
            Some((f, p, _)) => {
                *f = file.clone();
                *p = path.clone();
            }
            None => {
                st.dirty = Some((file.clone(), path.clone(), Instant::now()));
                self.inner.wake.notify_one();
            }
        }
        Ok(())
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.inner.lock().shutdown = true;
        self.inner.wake.notify_one();
        if let Some(t) = self.thread.take() {
            // The thread only panics if fsync's error formatting does; nothing to do.
            let _ = t.join();
        }
    }
}

/// The flusher thread: waits for dirty data, syncs it once it is `interval` old
/// (or at shutdown), and records failures for the writer.
fn run(inner: &FlushInner) {
    let mut st = inner.lock();
    loop {
        match st.dirty.as_ref().map(|d| d.2) {
            Some(since) => {
                let due = since + inner.interval;
                let now = Instant::now();
                if !st.shutdown && now < due {
                    st = inner
                        .wake
                        .wait_timeout(st, due - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                    continue;
                }
                let Some((file, path, _)) = st.dirty.take() else {
                    continue;
                };
                drop(st);
                let res = file.sync_data();
                st = inner.lock();
                if let Err(e) = res {
                    tracing::error!(segment = %path.display(), error = %e, "background fsync of the embedded log failed");
                    st.error = Some((path, e.to_string()));
                }
            }
            None if st.shutdown => return,
            None => st = inner.wake.wait(st).unwrap_or_else(PoisonError::into_inner),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flusher_syncs_after_the_interval_and_at_shutdown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, file) = create_segment(dir.path(), 0, false).expect("segment");
        let path: Arc<Path> = path.into();
        let flusher = Flusher::start(Duration::from_millis(5), dir.path()).expect("start");
        flusher.mark(&file, &path).expect("mark");
        assert!(flusher.inner.lock().dirty.is_some());
        let deadline = Instant::now() + Duration::from_secs(5);
        while flusher.inner.lock().dirty.is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            flusher.inner.lock().dirty.is_none(),
            "not synced within 5 s"
        );

        // A long interval: dropping the flusher syncs at once instead of waiting.
        let slow = Flusher::start(Duration::from_secs(3600), dir.path()).expect("start");
        slow.mark(&file, &path).expect("mark");
        let inner = slow.inner.clone();
        let started = Instant::now();
        drop(slow);
        assert!(inner.lock().dirty.is_none());
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
