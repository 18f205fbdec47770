//! Reading files and directories of Istio YAML exactly as the adapter does, but
//! once and without a log: for `deltapilot analyze`, which folds the result in
//! memory, and for `analyze --impact`, which sends it to a server to fold onto a
//! copy of its state.
//!
//! The same parser, the same last-good rules, the same desired view (conflicts
//! and the ServiceEntry–WorkloadEntry join included) and the same event plan
//! (one resync at generation 1) as a running adapter; on top, where each object
//! came from ([`Origin`]), which the adapter does not carry into the log (see
//! [`Loaded::origins`] for why).
//!
//! What it does NOT do: watch, persist state, or append anything.

use std::collections::BTreeMap;
use std::path::PathBuf;

use deltapilot_proto::Event;

use super::options::FileAdapterOptions;
use super::scan::{Read, Scanner, list, read_capped};
use super::status::FileProblem;
use super::view;
use crate::common::emit::Emitter;
use crate::{Error, Result};

/// Where an object was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub path: PathBuf,
    /// 0-based index of the YAML document within the file.
    pub document: usize,
    /// 1-based first line of the document's content, when known.
    pub line: Option<usize>,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        Ok(())
    }
}

/// What a set of files and directories holds, as the adapter would append it.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The events of one resync (`STARTED`, every entity, `COMPLETED`) under the
    /// given source, at generation 1.
    pub events: Vec<Event>,
    /// Every problem the adapter would report (invalid files, malformed, ignored
    /// and conflicting documents, skipped parts), sorted by path, then line.
    pub problems: Vec<FileProblem>,
    /// Where each object came from, by config key (`cfg/<kind>/<ns>/<name>`).
    /// Known to the adapter, never written to the log: carried in the config
    /// entity, a position would make every edit above an object (a comment, a
    /// new document) a change of that object for the whole fleet's engine, and
    /// two identical objects in different files would no longer be the same
    /// entity. A running adapter publishes the same map in its status
    /// ([`FileAdapterStatus::origins`](super::FileAdapterStatus::origins)).
    pub origins: BTreeMap<String, Origin>,
}

/// Reads `paths` (files, and directories whose candidate files are read as the
/// adapter reads a watched directory: `*.yaml`, `*.yml`, `*.json`, not hidden,
/// not recursive) in sorted order, and plans the events under `source`. A path
/// that does not exist, or a directory that cannot be listed, is an error: the
/// caller named it, so leaving it out would report a clean result for input
/// never read.
pub fn load_paths(paths: &[PathBuf], source: &str) -> Result<Loaded> {
    let max = FileAdapterOptions::default().max_file_bytes;
    let mut files: Vec<PathBuf> = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|source| Error::Io {
            op: "open input",
            path: p.clone(),
            source,
        })?;
        if meta.is_dir() {
            let names = list(p).map_err(|source| Error::Io {
                op: "list input directory",
                path: p.clone(),
                source,
            })?;
            files.extend(names.into_iter().map(|n| p.join(n)));
        } else if meta.is_file() {
            files.push(p.clone());
        } else {
            return Err(Error::InvalidConfig(format!(
                "{} is neither a regular file nor a directory",
                p.display()
            )));
        }
    }
    files.sort();
    files.dedup();
    let mut scanner = Scanner::new(Vec::new(), max);
    for path in files {
        match read_capped(&path, max) {
            // Gone since the listing (or a dangling link): as a scan, skipped.
            Read::Absent => {}
            Read::Failed(reason) => {
                scanner.file_failed(path, reason);
            }
            Read::Bytes(bytes) => {
                scanner.file_read(path, bytes);
            }
        }
    }
    let origins = scanner.origins();
    let (desired, conflicts) = view::desired(scanner.effective());
    let mut problems: Vec<FileProblem> = scanner.problems().cloned().collect();
    problems.extend(conflicts);
    problems.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    let mut emitter = Emitter::new(source.to_owned(), 1, &desired);
    let mut events = Vec::new();
    // Three plans at most: `STARTED` with every entity, then `COMPLETED` alone;
    // the bound only guards against a planning bug looping forever.
    for _ in 0..4 {
        let plan = emitter.plan(&desired, usize::MAX, 0);
        if plan.is_empty() {
            break;
        }
        emitter.commit(&plan, &desired);
        events.extend(plan);
    }
    Ok(Loaded {
        events,
        problems,
        origins,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const VS: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: a\n  namespace: demo\nspec:\n  hosts: [a.demo.local]\n";

    #[test]
    fn objects_carry_file_and_line_and_bad_documents_are_problems() {
        let dir = tempfile::tempdir().expect("tmp");
        let text = format!("# comment\n{VS}---\nkind: [oops\n");
        std::fs::write(dir.path().join("a.yaml"), &text).expect("write");
        let second = format!("\n\n{}", VS.replace("name: a", "name: b"));
        std::fs::write(dir.path().join("b.yml"), second).expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not read").expect("write");
        let loaded = load_paths(&[dir.path().to_owned()], "analyze").expect("loads");
        // a.yaml is not valid YAML as a whole: nothing of it applies.
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        assert!(loaded.problems[0].path.ends_with("a.yaml"));
        // The unclosed flow sequence of line 10 ends at the end of the text.
        assert_eq!(loaded.problems[0].line, Some(11));
        let o = &loaded.origins["cfg/virtual_service/demo/b"];
        assert!(o.path.ends_with("b.yml"));
        assert_eq!((o.document, o.line), (0, Some(3)));
        assert!(!loaded.origins.contains_key("cfg/virtual_service/demo/a"));
        let upserts = loaded
            .events
            .iter()
            .filter(|e| e.key().is_some_and(|k| k.starts_with("cfg/")))
            .count();
        assert_eq!(upserts, 1);
        assert!(loaded.events.iter().all(|e| e.source == "analyze"));
    }

    #[test]
    fn a_named_file_is_read_whatever_its_name_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("rule.txt");
        std::fs::write(&f, format!("---\n{VS}")).expect("write");
        let loaded = load_paths(std::slice::from_ref(&f), "analyze").expect("loads");
        assert_eq!(loaded.origins["cfg/virtual_service/demo/a"].line, Some(2));
        let err = load_paths(&[dir.path().join("nope.yaml")], "analyze").expect_err("missing");
        assert!(err.to_string().contains("nope.yaml"), "{err}");
    }
}
