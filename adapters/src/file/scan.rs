//! Reading the watched directories, and each file's last good state.
//!
//! A scan of a directory lists it, reads every candidate file (capped at
//! `max_file_bytes`), and re-parses only the files whose bytes changed since the last
//! read. Comparing bytes rather than trusting events or timestamps is what makes the
//! adapter safe against atomic renames, symlink swaps (Kubernetes ConfigMap mounts)
//! and editors that write a temp file first: whatever the events were, the scan sees
//! the directory as it is.
//!
//! Each file keeps its **effective objects**: the objects of its last good parse,
//! where a malformed document contributes its previous version (matched by kind,
//! namespace and name, else by position). A file that is not valid YAML, cannot be
//! read, or is too large keeps its previous effective objects entirely. A file that
//! disappears loses them (its entities get deleted). A directory that cannot be
//! listed keeps all its files: an unmounted volume must not empty the mesh.
//!
//! Candidates: regular files (symlinks followed) directly in a watched directory
//! (not in subdirectories), named `*.yaml`, `*.yml` or `*.json`, not starting with
//! `.` (editor swap files, Kubernetes' `..data`).
//!
//! What it does NOT do: decide what to append (see `view`) or watch for events (see
//! `watch`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::offline::Origin;
use super::parse::{DocOutcome, IstioObject, ObjectId, document_start_lines_upto, parse_file};
use super::status::{FileProblem, ProblemKind};

/// File name extensions the adapter reads (compared case-insensitively).
pub(crate) const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// One watched file.
#[derive(Debug, Default)]
pub(crate) struct FileState {
    /// The bytes last read; `None` when the state was restored from disk and the
    /// file has not been read yet.
    content: Option<Vec<u8>>,
    /// What the file contributes now, in document order.
    objects: Vec<Arc<IstioObject>>,
    /// Identity of each document of the last parse, to keep the previous state of a
    /// document that became malformed and lost its name.
    doc_ids: Vec<Option<ObjectId>>,
    /// Problems of the latest content.
    problems: Vec<FileProblem>,
    /// Whether the latest content was unusable as a whole.
    bad: bool,
    /// First line of each document of the last content that parsed, for
    /// [`Scanner::origins`]; found once per read of a changed file, so that
    /// rebuilding the origins never parses unchanged files again.
    starts: Vec<Option<usize>>,
}

impl FileState {
    /// A file restored from the persisted state: its objects are in force until the
    /// file is read.
    pub(crate) fn restored(objects: Vec<Arc<IstioObject>>) -> Self {
        let doc_ids = Vec::new();
        Self {
            content: None,
            objects,
            doc_ids,
            problems: Vec::new(),
            bad: false,
            starts: Vec::new(),
        }
    }

    /// The objects in force.
    pub(crate) fn objects(&self) -> &[Arc<IstioObject>] {
        &self.objects
    }
}

/// Totals a scan adds to the status counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScanCounts {
    /// Whether any file's effective objects changed (so the desired view must be
    /// rebuilt and the state persisted).
    pub(crate) changed: bool,
    /// Malformed documents found in files parsed by this scan.
    pub(crate) malformed_documents: u64,
    /// Files found unusable by this scan.
    pub(crate) invalid_files: u64,
}

impl ScanCounts {
    pub(crate) fn add(&mut self, o: ScanCounts) {
        self.changed |= o.changed;
        self.malformed_documents += o.malformed_documents;
        self.invalid_files += o.invalid_files;
    }
}

/// The watched directories and every file's state.
#[derive(Debug)]
pub(crate) struct Scanner {
    dirs: Vec<PathBuf>,
    max_file_bytes: u64,
    files: BTreeMap<PathBuf, FileState>,
    dir_problems: BTreeMap<usize, FileProblem>,
}

impl Scanner {
    /// A scanner over `dirs` (absolute, deduplicated) that has read nothing yet.
    pub(crate) fn new(dirs: Vec<PathBuf>, max_file_bytes: u64) -> Self {
        Self {
            dirs,
            max_file_bytes,
            files: BTreeMap::new(),
            dir_problems: BTreeMap::new(),
        }
    }

    /// The watched directories.
    pub(crate) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Installs file states restored from disk (before the first scan). Files that
    /// are not directly in a watched directory are dropped: no scan would ever
    /// remove them, so they would outlive their directory's removal from the list.
    pub(crate) fn restore(&mut self, files: BTreeMap<PathBuf, FileState>) {
        self.files = files
            .into_iter()
            .filter(|(p, _)| p.parent().is_some_and(|d| self.dirs.iter().any(|w| w == d)))
            .collect();
    }

    /// Every file's objects in force, in path order.
    pub(crate) fn effective(&self) -> impl Iterator<Item = (&Path, &[Arc<IstioObject>])> {
        self.files.iter().map(|(p, f)| (p.as_path(), f.objects()))
    }

    /// Where each object in force was written, by config key: its file, its
    /// document and the document's first line as of the last content that
    /// parsed (unknown for a file restored from the state file and not read
    /// since). The first definition wins, as in the desired view.
    pub(crate) fn origins(&self) -> BTreeMap<String, Origin> {
        let mut out = BTreeMap::new();
        for (path, f) in &self.files {
            if f.objects.is_empty() {
                continue;
            }
            let starts = &f.starts;
            for o in &f.objects {
                let key = deltapilot_proto::config_key(o.id.kind, &o.id.namespace, &o.id.name);
                out.entry(key).or_insert_with(|| Origin {
                    path: path.clone(),
                    document: o.document,
                    line: starts.get(o.document).copied().flatten(),
                });
            }
        }
        out
    }

    /// Current problems of files and directories.
    pub(crate) fn problems(&self) -> impl Iterator<Item = &FileProblem> {
        self.dir_problems
            .values()
            .chain(self.files.values().flat_map(|f| f.problems.iter()))
    }

    /// `(ok, bad)` file counts.
    pub(crate) fn file_counts(&self) -> (usize, usize) {
        let bad = self.files.values().filter(|f| f.bad).count();
        (self.files.len() - bad, bad)
    }

    /// Scans every directory.
    pub(crate) fn scan_all(&mut self) -> ScanCounts {
        let mut total = ScanCounts::default();
        for i in 0..self.dirs.len() {
            total.add(self.scan_dir(i));
        }
        total
    }

    /// Scans directory `index` (an index into [`Scanner::dirs`]).
    pub(crate) fn scan_dir(&mut self, index: usize) -> ScanCounts {
        let mut counts = ScanCounts::default();
        let Some(dir) = self.dirs.get(index).cloned() else {
            return counts;
        };
        let names = match list(&dir) {
            Ok(names) => {
                self.dir_problems.remove(&index);
                names
            }
            Err(e) => {
                let problem = FileProblem {
                    path: dir.clone(),
                    line: None,
                    column: None,
                    document: None,
                    kind: ProblemKind::InvalidDirectory,
                    reason: format!("cannot list the directory: {e}"),
                    kept_last_good: true,
                };
                if self.dir_problems.get(&index) != Some(&problem) {
                    tracing::warn!(dir = %dir.display(), error = %e, "file adapter: cannot list watched directory; keeping the last good state of its files");
                }
                self.dir_problems.insert(index, problem);
                return counts;
            }
        };
        let mut seen = BTreeSet::new();
        for name in names {
            let path = dir.join(&name);
            match read_capped(&path, self.max_file_bytes) {
                Read::Absent => continue,
                Read::Failed(reason) => {
                    seen.insert(path.clone());
                    counts.add(self.file_failed(path, reason));
                }
                Read::Bytes(bytes) => {
                    seen.insert(path.clone());
                    counts.add(self.file_read(path, bytes));
                }
            }
        }
        let gone: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir.as_path()) && !seen.contains(*p))
            .cloned()
            .collect();
        for path in gone {
            if let Some(f) = self.files.remove(&path) {
                tracing::info!(path = %path.display(), objects = f.objects.len(), "file adapter: file removed; its entities will be deleted");
                counts.changed |= !f.objects.is_empty();
            }
        }
        counts
    }

    pub(crate) fn file_failed(&mut self, path: PathBuf, reason: String) -> ScanCounts {
        let state = self.files.entry(path.clone()).or_default();
        let problem = FileProblem {
            path,
            line: None,
            column: None,
            document: None,
            kind: ProblemKind::InvalidFile,
            reason,
            kept_last_good: !state.objects.is_empty(),
        };
        let new = state.problems.first() != Some(&problem) || !state.bad;
        if new {
            tracing::warn!(problem = %problem, "file adapter: cannot use file");
        }
        state.content = None;
        state.problems = vec![problem];
        state.bad = true;
        ScanCounts {
            changed: false,
            malformed_documents: 0,
            invalid_files: u64::from(new),
        }
    }

    pub(crate) fn file_read(&mut self, path: PathBuf, bytes: Vec<u8>) -> ScanCounts {
        let state = self.files.entry(path.clone()).or_default();
        if state.content.as_deref() == Some(&bytes[..]) {
            return ScanCounts::default();
        }
        let parsed = match std::str::from_utf8(&bytes) {
            Err(e) => Err(FileProblem {
                path: path.clone(),
                line: None,
                column: None,
                document: None,
                kind: ProblemKind::InvalidFile,
                reason: format!("not UTF-8 text: {e}"),
                kept_last_good: false,
            }),
            Ok(text) => parse_file(&path, text),
        };
        state.content = Some(bytes);
        let mut parsed = match parsed {
            Err(mut problem) => {
                problem.kept_last_good = !state.objects.is_empty();
                tracing::warn!(problem = %problem, "file adapter: invalid file");
                state.problems = vec![problem];
                state.bad = true;
                return ScanCounts {
                    changed: false,
                    malformed_documents: 0,
                    invalid_files: 1,
                };
            }
            Ok(p) => {
                if let Some(text) = state
                    .content
                    .as_deref()
                    .and_then(|b| std::str::from_utf8(b).ok())
                {
                    state.starts = document_start_lines_upto(text, p.docs.len());
                }
                p
            }
        };

        let previous: BTreeMap<&ObjectId, &Arc<IstioObject>> =
            state.objects.iter().map(|o| (&o.id, o)).collect();
        let mut objects = Vec::new();
        let mut kept = Vec::new();
        let mut doc_ids = Vec::with_capacity(parsed.docs.len());
        let mut malformed = 0u64;
        for (i, doc) in parsed.docs.iter().enumerate() {
            match doc {
                DocOutcome::Object(o) => {
                    doc_ids.push(Some(o.id.clone()));
                    objects.push(o.clone());
                }
                DocOutcome::Malformed { id } => {
                    malformed += 1;
                    let id = id
                        .clone()
                        .or_else(|| state.doc_ids.get(i).cloned().flatten());
                    if let Some(prev) = id.as_ref().and_then(|id| previous.get(id)) {
                        kept.push(((*prev).clone(), i));
                    }
                    doc_ids.push(id);
                }
                DocOutcome::Empty | DocOutcome::Ignored => doc_ids.push(None),
            }
        }
        for (prev, doc) in kept {
            if objects.iter().any(|o| o.id == prev.id) {
                continue;
            }
            for p in parsed.problems.iter_mut() {
                if p.document == Some(doc) && p.kind == ProblemKind::MalformedDocument {
                    p.kept_last_good = true;
                }
            }
            objects.push(prev);
        }
        for p in &parsed.problems {
            tracing::warn!(problem = %p, "file adapter: document skipped");
        }
        let changed = objects != state.objects;
        if changed {
            tracing::debug!(path = %path.display(), objects = objects.len(), "file adapter: file changed");
        }
        state.objects = objects;
        state.doc_ids = doc_ids;
        state.problems = parsed.problems;
        state.bad = false;
        ScanCounts {
            changed,
            malformed_documents: malformed,
            invalid_files: 0,
        }
    }
}

/// Candidate file names in `dir`, sorted.
pub(crate) fn list(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if is_candidate(Path::new(&name)) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Whether a file name is one the adapter reads.
pub(crate) fn is_candidate(name: &Path) -> bool {
    let Some(s) = name.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if s.starts_with('.') {
        return false;
    }
    name.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

pub(crate) enum Read {
    /// Not there (raced with a delete, dangling symlink) or not a regular file.
    Absent,
    Failed(String),
    Bytes(Vec<u8>),
}

pub(crate) fn read_capped(path: &Path, max: u64) -> Read {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Read::Absent,
        Err(e) => return Read::Failed(format!("cannot open: {e}")),
    };
    match file.metadata() {
        Ok(m) if !m.is_file() => return Read::Absent,
        Ok(m) if m.len() > max => {
            return Read::Failed(format!("{} bytes is over the {max}-byte limit", m.len()));
        }
        Ok(_) => {}
        Err(e) => return Read::Failed(format!("cannot stat: {e}")),
    }
    let mut bytes = Vec::new();
    // The cap holds even if the file grows between the stat and the read.
    match file.take(max.saturating_add(1)).read_to_end(&mut bytes) {
        Ok(n) if n as u64 > max => Read::Failed(format!("over the {max}-byte limit")),
        Ok(_) => Read::Bytes(bytes),
        Err(e) => Read::Failed(format!("cannot read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_visible_yaml_or_json_files() {
        for ok in ["a.yaml", "b.YML", "c.json", "with.dots.yaml"] {
            assert!(is_candidate(Path::new(ok)), "{ok}");
        }
        for no in [
            ".a.yaml",
            "..data",
            "a.yaml.swp",
            "a.yaml~",
            "README.md",
            "noext",
            ".a.yaml.tmp123",
        ] {
            assert!(!is_candidate(Path::new(no)), "{no}");
        }
    }
}
