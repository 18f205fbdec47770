//! One-number files in the log directory, `WORD <offset>`: the compaction
//! horizon (`COMPACTED`, `horizon N`) and the log's start once retention deleted
//! segments (`START`, `start N`). Written atomically (temp file, fsync, rename,
//! directory fsync), so a crash leaves the old value or the new one; a temp file
//! left behind ends in `.compact` and is removed at the next writer open.
//!
//! What it does NOT do: decide the values (`compact.rs`, `retain.rs`).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use super::writer::sync_dir;
use crate::{Error, Result};

/// A marker file: its name and the word before the number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marker {
    /// The file name in the log directory.
    pub(crate) file: &'static str,
    /// The word the number follows.
    pub(crate) word: &'static str,
}

/// The suffix of a marker being written (the one compaction's leftovers use).
pub(crate) const TEMP_SUFFIX: &str = ".compact";

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error + use<> {
    let path = path.to_owned();
    move |source| Error::Io { op, path, source }
}

impl Marker {
    /// The value recorded in `dir` (0 without a file).
    pub(crate) fn read(self, dir: &Path) -> Result<u64> {
        let path = dir.join(self.file);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_err("read log marker", &path)(e)),
        };
        text.trim()
            .strip_prefix(self.word)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Error::InvalidLogDir {
                path: dir.to_owned(),
                reason: format!(
                    "{} holds {:?}, expected \"{} <offset>\"",
                    path.display(),
                    text.trim(),
                    self.word
                ),
            })
    }

    /// Records `value` in `dir`, durably.
    pub(crate) fn write(self, dir: &Path, value: u64) -> Result<()> {
        let path = dir.join(self.file);
        let tmp = dir.join(format!("{}{TEMP_SUFFIX}", self.file));
        let mut f = File::create(&tmp).map_err(io_err("write log marker", &tmp))?;
        f.write_all(format!("{} {value}\n", self.word).as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io_err("write log marker", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err("rename log marker", &path))?;
        sync_dir(dir)
    }
}
