//! Checkpoint files in a directory: atomic writes, retention, and finding the
//! newest usable one.
//!
//! Files are named `checkpoint-<records before it, 20 digits>.dpc`, so a directory
//! listing sorts oldest first. A write goes to `.checkpoint-….tmp`, is fsynced,
//! renamed over its final name and the directory fsynced: a crash leaves either the
//! old set of checkpoints or the new one, plus at most a temp file that the next
//! write removes. After a write, all but the newest `keep` checkpoints are deleted.
//!
//! What it does NOT do: decide when to write (see `task`) or check a checkpoint
//! against a log (see [`super::verify`]).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::format::{self, Failed, HEADER_LEN, Section, TABLE_LEN};
use super::prefetch::Slot;
use super::{Checkpoint, Fingerprint, Rejected};
use crate::{Error, Result};
use deltapilot_log::Position;
use deltapilot_log::file::read_exact_at;
use deltapilot_model::state::ModelState;
use deltapilot_xds::ResourceSet;

/// File name prefix and extension of checkpoint files.
const PREFIX: &str = "checkpoint-";
const EXT: &str = ".dpc";
const TMP_PREFIX: &str = ".checkpoint-";

/// How many bytes of a file [`format::peek_position`] may need: the header and
/// the section table, plus a position of up to 1024 partitions.
const PEEK_LEN: usize = HEADER_LEN + TABLE_LEN + 4 + 8 * 1024;

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// A directory of checkpoints.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    keep: usize,
    /// A checkpoint being read ahead (see `prefetch`).
    ahead: Slot,
}

/// One checkpoint file found in the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFile {
    /// Its path.
    pub path: PathBuf,
    /// Records before its position, from the file name (for ordering).
    pub records: u64,
}

impl CheckpointStore {
    /// The checkpoints in `dir` (created on the first write), keeping the newest
    /// `keep` (at least 1) after each write.
    pub fn new(dir: impl Into<PathBuf>, keep: usize) -> Self {
        CheckpointStore {
            dir: dir.into(),
            keep: keep.max(1),
            ahead: Slot::default(),
        }
    }

    /// Where a prefetch waits for the next load.
    pub(super) fn slot(&self) -> &Slot {
        &self.ahead
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a checkpoint of `model` at `position` atomically (with the resources
    /// built from it and the [`generator_id`](super::generator_id) of the options
    /// that built them, when given), then prunes old ones. Synchronous (it encodes and fsyncs): call it from a blocking thread.
    pub fn write(
        &self,
        position: &Position,
        fingerprints: &[Fingerprint],
        model: &ModelState,
        resources: Option<(&str, &ResourceSet)>,
    ) -> Result<PathBuf> {
        fs::create_dir_all(&self.dir).map_err(io("create checkpoint directory", &self.dir))?;
        let bytes = format::encode(position, fingerprints, model, resources);
        let name = format!("{PREFIX}{:020}{EXT}", position.total());
        let path = self.dir.join(&name);
        let tmp = self
            .dir
            .join(format!("{TMP_PREFIX}{:020}.tmp", position.total()));
        {
            let mut f = File::create(&tmp).map_err(io("create checkpoint", &tmp))?;
            f.write_all(&bytes).map_err(io("write checkpoint", &tmp))?;
            f.sync_all().map_err(io("fsync checkpoint", &tmp))?;
        }
        fs::rename(&tmp, &path).map_err(io("rename checkpoint", &path))?;
        if let Ok(d) = File::open(&self.dir) {
            // Makes the rename durable; some filesystems refuse to sync a directory,
            // and then the rename is as durable as the platform allows.
            let _ = d.sync_all();
        }
        self.prune()?;
        Ok(path)
    }

    /// Checkpoint files, oldest first. A missing directory has none.
    pub fn list(&self) -> Result<Vec<CheckpointFile>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("list checkpoints", &self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io("list checkpoints", &self.dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(digits) = name.strip_prefix(PREFIX).and_then(|n| n.strip_suffix(EXT)) else {
                continue;
            };
            let Ok(records) = digits.parse::<u64>() else {
                continue;
            };
            out.push(CheckpointFile {
                path: entry.path(),
                records,
            });
        }
        out.sort_by(|a, b| (a.records, &a.path).cmp(&(b.records, &b.path)));
        Ok(out)
    }

    /// Deletes all but the newest `keep` checkpoints, and leftover temp files.
    fn prune(&self) -> Result<()> {
        let files = self.list()?;
        let excess = files.len().saturating_sub(self.keep);
        for f in &files[..excess] {
            fs::remove_file(&f.path).map_err(io("remove old checkpoint", &f.path))?;
        }
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(TMP_PREFIX))
                {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(())
    }
}

/// The result of looking for a usable checkpoint.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The checkpoint found, with its file.
    pub checkpoint: Option<(PathBuf, Checkpoint)>,
    /// Newer files passed over (corrupt, unreadable, or not usable here), newest
    /// first, each with the reason.
    pub rejected: Vec<Rejected>,
}

/// Reads and decodes one checkpoint file, first checking (from its header and
/// position alone) that `usable` accepts its position. `Err` is the reason it
/// cannot be used.
pub(super) fn read_checked(
    path: &Path,
    usable: &dyn Fn(&Position) -> std::result::Result<(), String>,
) -> std::result::Result<Checkpoint, String> {
    let mut f = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let mut prefix = Vec::with_capacity(PEEK_LEN);
    (&mut f)
        .take(PEEK_LEN as u64)
        .read_to_end(&mut prefix)
        .map_err(|e| format!("cannot read: {e}"))?;
    let at =
        format::peek_position(&prefix).map_err(|e| match format::foreign_version(&prefix) {
            // Not damage: an upgrade (or a downgrade) changed the format.
            Some(v) => format!(
                "written by another deltapilot build in format version {v}; this build reads \
             version {}",
                format::FORMAT_VERSION
            ),
            None => format!("corrupt: {e}"),
        })?;
    usable(&at)?;
    let layout = format::layout(&prefix).map_err(|e| format!("corrupt: {e}"))?;
    let len = f.metadata().map_err(|e| format!("cannot read: {e}"))?.len();
    layout.check_len(len).map_err(|e| format!("corrupt: {e}"))?;
    // Each section is read into a buffer of its own, sized once, by the thread
    // that checks and decodes it (see `format`).
    let file = &f;
    let read = |s: Section| {
        let len =
            usize::try_from(s.len).map_err(|_| format!("cannot read: a {}-byte section", s.len))?;
        let mut buf = vec![0u8; len];
        read_exact_at(file, &mut buf, s.offset).map_err(|e| format!("cannot read: {e}"))?;
        Ok(bytes::Bytes::from(buf))
    };
    format::decode_sections(&layout, || read(layout.state), || read(layout.resources)).map_err(
        |e| match e {
            Failed::Read(e) => e,
            Failed::Corrupt(e) => format!("corrupt: {e}"),
        },
    )
}
