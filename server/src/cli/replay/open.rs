//! Opening the log for a replay, read-only, and what to do when the embedded log
//! is corrupt in the middle.
//!
//! A read-only open of the embedded log checks the newest segment in full and each
//! older one cheaply (its last record); damage deeper inside an older segment is
//! reported by the read that reaches it, and the replay stops there (see
//! `replay::drive`). Damage the open itself finds makes it refuse (it never
//! guesses past damage). A replay still wants everything *before* the
//! damage, and to say where it stops. So on [`Error::Corrupt`] at open, the valid
//! prefix is exposed as a log of its own: a temporary directory next to the log
//! with hard links to the segments before the damaged one (copies where links are
//! not possible) and a copy of the damaged segment cut at the bad record. That
//! directory opens cleanly and holds exactly the records before the damage; the
//! replay runs over it and then reports the damage with its log offset. The
//! original log is never written.
//!
//! What it does NOT do: repair anything, or look inside segment files (the cut is
//! at the byte offset the log's own error names, and the log crate marks the
//! copy's last record as ending its batch).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use deltapilot_log::Error;
use deltapilot_log::file::FileLog;
use deltapilot_log::{Log, LogOptions, LogUri};

/// An opened log, possibly only the part before a corrupt record.
pub(crate) struct Opened {
    /// The log to replay.
    pub(crate) log: Log,
    /// Set when only a prefix could be opened: where the damage is and why.
    pub(crate) corrupt: Option<Corruption>,
    /// The temporary directory holding the prefix (removed on drop).
    _prefix: Option<TempDir>,
}

/// A directory removed (with its contents) when dropped.
struct TempDir(PathBuf);

impl TempDir {
    /// Creates `parent/.replay-prefix-<pid>-<n>`, trying the next `n` if it exists.
    fn new_in(parent: &Path) -> std::io::Result<Self> {
        let mut last = None;
        for n in 0..100u32 {
            let p = parent.join(format!(".replay-prefix-{}-{n}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary directory name")))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a log is damaged.
#[derive(Debug, Clone)]
pub(crate) struct Corruption {
    /// The log offset of the first bad record.
    pub(crate) offset: u64,
    /// The log's description of the damage.
    pub(crate) reason: String,
}

/// Opens `uri` for reading (the embedded log without its writer lock, so a
/// running server keeps writing).
pub(crate) async fn open(uri: &LogUri, opts: &LogOptions, text: &str) -> anyhow::Result<Opened> {
    let dir = match uri {
        LogUri::File { dir } => dir.clone(),
        _ => {
            let log = Log::open(uri, opts)
                .await
                .with_context(|| format!("opening the log {text}"))?;
            return Ok(Opened {
                log,
                corrupt: None,
                _prefix: None,
            });
        }
    };
    let first = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || FileLog::open_read_only(&dir))
            .await
            .context("opening the log")?
    };
    match first {
        Ok(log) => Ok(Opened {
            log: Log::File(log),
            corrupt: None,
            _prefix: None,
        }),
        Err(Error::Corrupt {
            segment,
            byte_offset,
            offset,
            reason,
        }) => {
            let full = format!(
                "corrupt record in segment {} at byte {byte_offset} (log offset {offset}): {reason}",
                segment.display()
            );
            let tmp = tokio::task::spawn_blocking(move || prefix_dir(&dir, &segment, byte_offset))
                .await
                .context("preparing the readable part of the log")??;
            let path = tmp.path().to_owned();
            let log = tokio::task::spawn_blocking(move || FileLog::open_read_only(&path))
                .await
                .context("opening the readable part of the log")?
                .with_context(|| format!("opening the records before the damage ({full})"))?;
            Ok(Opened {
                log: Log::File(log),
                corrupt: Some(Corruption {
                    offset,
                    reason: full,
                }),
                _prefix: Some(tmp),
            })
        }
        Err(e) => Err(e).with_context(|| format!("opening the log {text}")),
    }
}

/// Builds the prefix directory: every segment file sorting before `bad`, and `bad`
/// cut at `cut` bytes.
fn prefix_dir(dir: &Path, bad: &Path, cut: u64) -> anyhow::Result<TempDir> {
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // Next to the log so hard links work (same filesystem); the system temp dir if
    // the log's parent is not writable.
    let tmp = TempDir::new_in(parent)
        .or_else(|_| TempDir::new_in(&std::env::temp_dir()))
        .context("creating a temporary directory")?;
    let bad_name = bad.file_name().map(|n| n.to_owned()).unwrap_or_default();
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    for seg in segments {
        let Some(name) = seg.file_name() else {
            continue;
        };
        let target = tmp.path().join(name);
        if name == bad_name {
            let bytes =
                std::fs::read(&seg).with_context(|| format!("reading {}", seg.display()))?;
            let end = usize::try_from(cut).unwrap_or(usize::MAX).min(bytes.len());
            // The damaged record may sit inside a batch: the records before it
            // are shown, so the copy's last record is made the end of its batch.
            let mut prefix = bytes[..end].to_vec();
            deltapilot_log::file::end_last_batch(&mut prefix);
            std::fs::write(&target, &prefix)
                .with_context(|| format!("writing {}", target.display()))?;
            break;
        }
        if std::fs::hard_link(&seg, &target).is_err() {
            std::fs::copy(&seg, &target).with_context(|| format!("copying {}", seg.display()))?;
        }
    }
    Ok(tmp)
}
