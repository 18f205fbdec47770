//! What the file adapter reports about itself: per-file problems and counters,
//! published through a `tokio::sync::watch` channel so the server can render
//! metrics and `/readyz` detail by borrowing the latest value, never by asking the
//! adapter task.
//!
//! What it does NOT do: register metrics or serve HTTP (the server does that from
//! these numbers).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::offline::Origin;

/// What kind of problem a [`FileProblem`] is, so dashboards can tell "a file is
/// broken" from "one object was left out".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// The file as a whole could not be used: not valid YAML, unreadable, or too
    /// large. Every object it held keeps its last good state.
    InvalidFile,
    /// The watched directory itself could not be listed or watched. Every file in it
    /// keeps its last good state.
    InvalidDirectory,
    /// One document is malformed (missing name, wrong type, invalid port, ...). It is
    /// skipped; its last good state is kept when the adapter can tell which object it
    /// was (by kind, namespace and name, else by its position in the file).
    MalformedDocument,
    /// One document is of a kind or API group the adapter does not carry; it is
    /// ignored.
    IgnoredDocument,
    /// A part of an otherwise good object was left out (an endpoint whose address is
    /// not an IP address).
    SkippedPart,
    /// Two documents define the same object, or two entries the same service; the
    /// first in path order (then document order) wins, the other is ignored.
    Conflict,
}

impl ProblemKind {
    /// A stable snake-case name, for metric labels and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemKind::InvalidFile => "invalid_file",
            ProblemKind::InvalidDirectory => "invalid_directory",
            ProblemKind::MalformedDocument => "malformed_document",
            ProblemKind::IgnoredDocument => "ignored_document",
            ProblemKind::SkippedPart => "skipped_part",
            ProblemKind::Conflict => "conflict",
        }
    }
}

/// One problem with one watched file (or directory), as an operator needs it to fix
/// the input: where, what, and whether the previous state is still in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    /// The file (or, for [`ProblemKind::InvalidDirectory`], the directory).
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// 0-based index of the YAML document within the file, when the problem concerns
    /// one document.
    pub document: Option<usize>,
    /// What kind of problem this is.
    pub kind: ProblemKind,
    /// Why, in words.
    pub reason: String,
    /// Whether the entities this file (or document) produced before are still in
    /// force because of this problem.
    pub kept_last_good: bool,
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if let Some(doc) = self.document {
            write!(f, " (document {})", doc + 1)?;
        }
        write!(f, ": {}", self.reason)?;
        if self.kept_last_good {
            f.write_str(" [last good state kept]")?;
        }
        Ok(())
    }
}

/// The adapter's state as the server exports it. Cloning copies the problem list;
/// readers normally `borrow()` the watch channel instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileAdapterStatus {
    /// The source id stamped on every event.
    pub source: String,
    /// The resync generation in force (0 before the first resync is chosen).
    pub generation: u64,
    /// Whether the start-up resync has been fully appended (`resync COMPLETED`). The
    /// adapter's contribution to readiness.
    pub resync_completed: bool,
    /// The log position just past that marker and everything the adapter
    /// appended before it: a reader that covers it has folded the start-up view.
    pub resync_completed_at: Option<deltapilot_log::Position>,
    /// Watched files whose latest content was usable (possibly with skipped
    /// documents).
    pub files_ok: usize,
    /// Watched files whose latest content was unusable as a whole.
    pub files_bad: usize,
    /// Entities the adapter has appended and believes current (its view size).
    pub entities_in_view: usize,
    /// Events appended since start, resync markers included.
    pub events_emitted_total: u64,
    /// Directory scans done since start (watch-triggered and periodic).
    pub scans_total: u64,
    /// Documents found malformed, counted each time a changed file is parsed.
    pub malformed_documents_total: u64,
    /// Files found unusable as a whole, counted each time a changed file is read.
    pub invalid_files_total: u64,
    /// Appends the log refused (each is retried with backoff).
    pub append_failures_total: u64,
    /// Objects left out because their event is larger than the log accepts (each
    /// version counted once, when it is planned); the log keeps the last version
    /// that fit.
    pub oversized_objects_total: u64,
    /// Events planned but not yet durably appended: entities whose change is
    /// still to go out (an upper bound) and resync markers still to write.
    /// Grows while the log refuses appends; 0 once the log matches the view.
    pub append_backlog: usize,
    /// The last object left out for its size, and why.
    pub last_oversized_object: Option<String>,
    /// The last append error, cleared by the next successful append.
    pub last_append_error: Option<String>,
    /// Current problems, sorted by path, then line.
    pub problems: Vec<FileProblem>,
    /// Where each object in force was written, by config key, for reports such
    /// as `/debug/rules` (file and line live here, not in the log; see
    /// [`Loaded::origins`](super::Loaded::origins)). Rebuilt with the desired
    /// view, shared between statuses.
    pub origins: Arc<BTreeMap<String, Origin>>,
}
