//! The desired view: what the files say now, as entities by key, rebuilt from
//! every file's objects whenever one changes. The shared emitter
//! (`common::emit`) diffs it against what was appended, so a rescan of unchanged
//! files appends nothing and nothing is ever deleted and re-created.
//!
//! Here too the ServiceEntry–WorkloadEntry join happens: every winning
//! ServiceEntry with a `workloadSelector` gets one endpoint per selected
//! WorkloadEntry of its namespace (`common::istio`), wherever in the watched
//! files either is defined. A label or selector change therefore adds or removes
//! exactly the affected `ep/file/we/...` entities.
//!
//! What it does NOT do: read files (see `scan`), plan events (see
//! `common::emit`) or talk to the log (see `adapter`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deltapilot_proto as pb;

use super::parse::{IstioObject, ObjectId};
use super::status::{FileProblem, ProblemKind};
pub(crate) use crate::common::emit::{Entity, EntityMap};
use crate::common::istio::{KeyScheme, Selector, WorkloadFacts, joined_endpoints};

/// Builds the desired view from every file's effective objects, given in path
/// order. Conflicts are decided by that order (then document order) so the result
/// never depends on which file changed last: the first definition of an object, and
/// the first service for a `(namespace, host)`, win; the rest are reported, as are
/// selected WorkloadEntries that cannot be endpoints.
pub(crate) fn desired<'a>(
    files: impl IntoIterator<Item = (&'a Path, &'a [Arc<IstioObject>])>,
) -> (EntityMap, Vec<FileProblem>) {
    let mut view = EntityMap::new();
    let mut problems = Vec::new();
    let mut owners: BTreeMap<&ObjectId, (&Path, usize)> = BTreeMap::new();
    let mut service_owners: BTreeMap<String, (&Path, ObjectId)> = BTreeMap::new();
    let mut mesh: BTreeMap<&str, Namespace<'a>> = BTreeMap::new();
    for (path, objects) in files {
        for obj in objects {
            if let Some((first, doc)) = owners.get(&obj.id) {
                problems.push(conflict(
                    path,
                    obj.document,
                    format!(
                        "{} is also defined in {} (document {}); that one wins",
                        obj.id,
                        first.display(),
                        doc + 1
                    ),
                ));
                continue;
            }
            owners.insert(&obj.id, (path, obj.document));
            let key = pb::config_key(obj.id.kind, &obj.id.namespace, &obj.id.name);
            view.insert(key, Arc::new(Entity::Config(obj.config.clone())));
            if let Some(sel) = &obj.selector {
                let ns = mesh.entry(&obj.id.namespace).or_default();
                ns.entries.push((&obj.id.name, sel));
            }
            if let Some(w) = &obj.workload {
                let ns = mesh.entry(&obj.id.namespace).or_default();
                ns.workloads.push((&obj.id.name, w));
                ns.places.insert(&obj.id.name, (path, obj.document));
            }
            for s in &obj.services {
                let key = pb::service_key(&s.namespace, &s.hostname);
                if let Some((first, by)) = service_owners.get(&key) {
                    problems.push(conflict(
                        path,
                        obj.document,
                        format!(
                            "{}: host {} in namespace {} is already defined by {by} in {}; that definition wins",
                            obj.id,
                            s.hostname,
                            s.namespace,
                            first.display()
                        ),
                    ));
                    continue;
                }
                service_owners.insert(key.clone(), (path, obj.id.clone()));
                view.insert(key, Arc::new(Entity::Service(s.clone())));
            }
            for (key, e) in &obj.endpoints {
                view.insert(key.clone(), Arc::new(Entity::Endpoint(e.clone())));
            }
        }
    }
    let keys = KeyScheme::file();
    for (namespace, ns) in &mut mesh {
        ns.workloads.sort_by(|a, b| a.0.cmp(b.0));
        let workloads: Vec<(&str, &WorkloadFacts)> =
            ns.workloads.iter().map(|(n, w)| (*n, w.as_ref())).collect();
        let (endpoints, skipped) =
            joined_endpoints(namespace, ns.entries.iter().copied(), &workloads, &keys);
        for (key, e) in endpoints {
            view.insert(key, Arc::new(Entity::Endpoint(e)));
        }
        for p in skipped {
            let Some((path, document)) = ns.places.get(p.workload.as_str()) else {
                continue;
            };
            problems.push(FileProblem {
                path: PathBuf::from(path),
                line: None,
                column: None,
                document: Some(*document),
                kind: ProblemKind::SkippedPart,
                reason: format!(
                    "WORKLOAD_ENTRY {namespace}/{} selected by SERVICE_ENTRY {namespace}/{}: {}",
                    p.workload, p.entry, p.reason
                ),
                kept_last_good: false,
            });
        }
    }
    (view, problems)
}

/// One namespace's side of the ServiceEntry–WorkloadEntry join.
#[derive(Default)]
struct Namespace<'a> {
    /// Winning ServiceEntries with a selector.
    entries: Vec<(&'a str, &'a Selector)>,
    /// Winning WorkloadEntries.
    workloads: Vec<(&'a str, &'a Arc<WorkloadFacts>)>,
    /// Where each WorkloadEntry is defined, for reports.
    places: BTreeMap<&'a str, (&'a Path, usize)>,
}

fn conflict(path: &Path, document: usize, reason: String) -> FileProblem {
    FileProblem {
        path: PathBuf::from(path),
        line: None,
        column: None,
        document: Some(document),
        kind: ProblemKind::Conflict,
        reason,
        kept_last_good: false,
    }
}

#[cfg(test)]
mod tests;
