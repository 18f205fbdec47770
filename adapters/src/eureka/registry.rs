//! The adapter's local copy of the Eureka registry, kept the way Eureka's own
//! client keeps it: replaced by a full fetch, patched by deltas (`ADDED` and
//! `MODIFIED` upsert an instance, `DELETED` removes it), and checked against the
//! server's `apps__hashcode` after every delta.
//!
//! Malformed instances stay in the copy (with their status), because the server
//! counts them in its hashcode: leaving them out would make every delta look like a
//! mismatch and turn the adapter into a full-fetch poller. They contribute no
//! entity; one that was valid before keeps its last good version.
//!
//! The hashcode is Eureka's `getReconcileHashCode`: per status, `STATUS_COUNT_`,
//! statuses sorted (`DOWN_1_UP_3_`). It is compared as a multiset of
//! `(status, count)`, so a server that does not sort still matches.
//!
//! What it does NOT do: HTTP (see `client`) or decide entities (see `mapping`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::json::{Applications, Entry, Instance};
use super::status::InstanceProblem;

/// One instance of the local copy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    /// Eureka's status name, counted for the hashcode.
    status: &'static str,
    /// The version in force: the latest valid one (possibly older than the latest
    /// entry, when that was malformed).
    instance: Option<Arc<Instance>>,
    /// Why the latest entry was malformed, if it was.
    problem: Option<String>,
}

/// What applying a response did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Whether any instance in force changed (the desired view must be rebuilt).
    pub(crate) changed: bool,
    /// Malformed entries met in this response.
    pub(crate) malformed: u64,
}

/// The local copy: application → instance id → record.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    apps: BTreeMap<String, BTreeMap<String, Record>>,
    /// Entries of the last full fetch that have no application or id: they cannot
    /// be stored or patched, but the server counts them in its hashcode.
    anonymous: Vec<(&'static str, InstanceProblem)>,
    /// Problems of the last response that concern no stored instance (an
    /// unreadable application, a delta entry that cannot be applied).
    transient: Vec<InstanceProblem>,
    loaded: bool,
}

impl Registry {
    /// Whether a full fetch has been applied (deltas need one first).
    pub(crate) fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// Replaces the copy with a full fetch. An instance malformed now but valid
    /// before keeps its previous version.
    pub(crate) fn replace(&mut self, doc: Applications) -> Applied {
        let old = std::mem::take(&mut self.apps);
        self.anonymous.clear();
        self.transient = app_problems(&doc);
        let mut malformed = doc.app_problems.len() as u64;
        for e in doc.entries {
            malformed += u64::from(e.instance.is_err());
            match (&e.app, &e.id) {
                (Some(app), Some(id)) => {
                    let prev = old.get(app).and_then(|m| m.get(id));
                    let rec = record(prev, e.status, e.instance);
                    let (app, id) = (app.clone(), id.clone());
                    self.apps.entry(app).or_default().insert(id, rec);
                }
                _ => {
                    let p = problem(&e, e.instance.as_ref().err().cloned(), false);
                    self.anonymous.push((e.status, p));
                }
            }
        }
        self.loaded = true;
        Applied {
            changed: !same_instances(&old, &self.apps),
            malformed,
        }
    }

    /// Applies a delta: `ADDED`/`MODIFIED` upsert, `DELETED` removes (an unknown
    /// instance is a no-op: deltas repeat for minutes on a real server). Entries
    /// that cannot be applied are reported and skipped; the hashcode check then
    /// catches what they would have changed.
    pub(crate) fn apply_delta(&mut self, doc: Applications) -> Applied {
        self.transient = app_problems(&doc);
        let mut out = Applied {
            changed: false,
            malformed: doc.app_problems.len() as u64,
        };
        for e in doc.entries {
            let action = e.action.as_deref().map(str::to_ascii_uppercase);
            let (Some(app), Some(id)) = (e.app.clone(), e.id.clone()) else {
                out.malformed += 1;
                let reason = e.instance.as_ref().err().cloned();
                self.transient.push(problem(&e, reason, false));
                continue;
            };
            match action.as_deref() {
                Some("ADDED" | "MODIFIED") => {
                    out.malformed += u64::from(e.instance.is_err());
                    let instances = self.apps.entry(app).or_default();
                    let rec = record(instances.get(&id), e.status, e.instance);
                    let before = instances.insert(id, rec.clone());
                    out.changed |= before.and_then(|b| b.instance) != rec.instance;
                }
                Some("DELETED") => {
                    if let Some(instances) = self.apps.get_mut(&app) {
                        if let Some(gone) = instances.remove(&id) {
                            out.changed |= gone.instance.is_some();
                        }
                        if instances.is_empty() {
                            self.apps.remove(&app);
                        }
                    }
                }
                other => {
                    out.malformed += 1;
                    let reason = match other {
                        None => "a delta entry without \"actionType\"".to_owned(),
                        Some(a) => format!("unknown actionType {a:?}"),
                    };
                    self.transient.push(problem(&e, Some(reason), false));
                }
            }
        }
        out
    }

    /// Whether the copy matches the server's `apps__hashcode` (absent or
    /// unreadable never matches, as in Eureka's client).
    pub(crate) fn matches_hashcode(&self, server: Option<&str>) -> bool {
        server
            .and_then(parse_hashcode)
            .is_some_and(|s| s == self.status_counts())
    }

    /// The copy's hashcode in Eureka's format.
    pub(crate) fn hashcode(&self) -> String {
        self.status_counts()
            .iter()
            .map(|(s, n)| format!("{s}_{n}_"))
            .collect()
    }

    fn status_counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        let statuses = self
            .apps
            .values()
            .flat_map(|m| m.values().map(|r| r.status))
            .chain(self.anonymous.iter().map(|(s, _)| *s));
        for s in statuses {
            *counts.entry(s.to_owned()).or_insert(0) += 1;
        }
        counts
    }

    /// The instances in force, by application then id.
    pub(crate) fn instances(&self) -> impl Iterator<Item = &Instance> + '_ {
        self.apps
            .values()
            .flat_map(|m| m.values().filter_map(|r| r.instance.as_deref()))
    }

    /// `(applications, instances)` in the copy, malformed ones included.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let instances = self.apps.values().map(BTreeMap::len).sum::<usize>() + self.anonymous.len();
        (self.apps.len(), instances)
    }

    /// Current problems: malformed instances of the copy, then those of the last
    /// response that concern no stored instance; sorted.
    pub(crate) fn problems(&self) -> Vec<InstanceProblem> {
        let mut out: Vec<InstanceProblem> = self
            .apps
            .iter()
            .flat_map(|(app, m)| {
                m.iter().filter_map(move |(id, r)| {
                    r.problem.as_ref().map(|reason| InstanceProblem {
                        app: Some(app.clone()),
                        instance_id: Some(id.clone()),
                        reason: reason.clone(),
                        kept_last_good: r.instance.is_some(),
                    })
                })
            })
            .chain(self.anonymous.iter().map(|(_, p)| p.clone()))
            .chain(self.transient.iter().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn record(prev: Option<&Record>, status: &'static str, parsed: Result<Instance, String>) -> Record {
    match parsed {
        Ok(i) => Record {
            status,
            // Reuse the previous allocation when nothing changed, so comparisons
            // of unchanged instances stay cheap.
            instance: Some(match prev.and_then(|p| p.instance.as_ref()) {
                Some(p) if **p == i => p.clone(),
                _ => Arc::new(i),
            }),
            problem: None,
        },
        Err(reason) => Record {
            status,
            instance: prev.and_then(|p| p.instance.clone()),
            problem: Some(reason),
        },
    }
}

fn problem(e: &Entry, reason: Option<String>, kept_last_good: bool) -> InstanceProblem {
    InstanceProblem {
        app: e.app.clone(),
        instance_id: e.id.clone(),
        reason: reason.unwrap_or_else(|| "malformed instance".to_owned()),
        kept_last_good,
    }
}

fn app_problems(doc: &Applications) -> Vec<InstanceProblem> {
    doc.app_problems
        .iter()
        .map(|reason| InstanceProblem {
            app: None,
            instance_id: None,
            reason: reason.clone(),
            kept_last_good: false,
        })
        .collect()
}

fn same_instances(
    a: &BTreeMap<String, BTreeMap<String, Record>>,
    b: &BTreeMap<String, BTreeMap<String, Record>>,
) -> bool {
    let flat =
        |m: &BTreeMap<String, BTreeMap<String, Record>>| -> Vec<(String, String, Arc<Instance>)> {
            m.iter()
                .flat_map(|(app, ids)| {
                    ids.iter().filter_map(move |(id, r)| {
                        r.instance.clone().map(|i| (app.clone(), id.clone(), i))
                    })
                })
                .collect()
        };
    flat(a) == flat(b)
}

/// Reads `UP_3_DOWN_1_` (any order; `OUT_OF_SERVICE` has underscores of its own)
/// into status → count; `None` when it is not in that format.
pub(crate) fn parse_hashcode(s: &str) -> Option<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    let mut name: Vec<&str> = Vec::new();
    for tok in s.trim().split('_') {
        if tok.is_empty() {
            continue;
        }
        match tok.parse::<u64>() {
            Ok(n) => {
                if name.is_empty() {
                    return None;
                }
                *out.entry(name.join("_")).or_insert(0) += n;
                name.clear();
            }
            Err(_) => name.push(tok),
        }
    }
    if !name.is_empty() {
        return None;
    }
    out.retain(|_, n| *n > 0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eureka::json::parse;

    fn doc(instances: &[(&str, &str, &str, Option<&str>)]) -> Applications {
        let list: Vec<String> = instances
            .iter()
            .map(|(app, id, status, action)| {
                let action = action.map_or(String::new(), |a| format!(",\"actionType\":\"{a}\""));
                format!(
                    r#"{{"instanceId":"{id}","app":"{app}","ipAddr":"10.0.0.1","status":"{status}","vipAddress":"{}"{action}}}"#,
                    app.to_lowercase()
                )
            })
            .collect();
        let body = format!(
            r#"{{"applications":{{"apps__hashcode":"","application":[{{"name":"X","instance":[{}]}}]}}}}"#,
            list.join(",")
        );
        parse(body.as_bytes()).expect("parse")
    }

    #[test]
    fn hashcodes_parse_in_any_order_and_reject_garbage() {
        let m = parse_hashcode("UP_3_DOWN_1_OUT_OF_SERVICE_2_").expect("valid");
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            [
                ("DOWN".to_owned(), 1),
                ("OUT_OF_SERVICE".to_owned(), 2),
                ("UP".to_owned(), 3)
            ]
        );
        assert_eq!(parse_hashcode("").expect("empty registry").len(), 0);
        assert!(parse_hashcode("UP_").is_none());
        assert!(parse_hashcode("3_").is_none());
    }

    #[test]
    fn deltas_patch_the_copy_and_the_hashcode_follows() {
        let mut r = Registry::default();
        let a = r.replace(doc(&[("A", "a1", "UP", None), ("A", "a2", "DOWN", None)]));
        assert!(a.changed);
        assert_eq!(r.hashcode(), "DOWN_1_UP_1_");
        assert!(r.matches_hashcode(Some("UP_1_DOWN_1_")));
        assert!(!r.matches_hashcode(None));

        let d = r.apply_delta(doc(&[
            ("A", "a2", "UP", Some("MODIFIED")),
            ("B", "b1", "STARTING", Some("ADDED")),
            ("A", "a1", "UP", Some("DELETED")),
            ("A", "gone", "UP", Some("DELETED")),
        ]));
        assert!(d.changed);
        assert_eq!(r.hashcode(), "STARTING_1_UP_1_");
        assert_eq!(r.sizes(), (2, 2));

        // The same delta again (a real server repeats deltas for minutes): no change.
        let again = r.apply_delta(doc(&[("A", "a2", "UP", Some("MODIFIED"))]));
        assert!(!again.changed);
        let refetch = r.replace(doc(&[
            ("A", "a2", "UP", None),
            ("B", "b1", "STARTING", None),
        ]));
        assert!(
            !refetch.changed,
            "a full fetch of the same registry changes nothing"
        );
    }

    #[test]
    fn malformed_instances_count_in_the_hashcode_and_keep_their_last_good_version() {
        let mut r = Registry::default();
        r.replace(doc(&[("A", "a1", "UP", None)]));
        let body = r#"{"applications":{"application":{"name":"A","instance":[
            {"instanceId":"a1","app":"A","ipAddr":"nope","status":"DOWN"},
            {"app":"A","status":"UP"}]}}}"#;
        let applied = r.replace(parse(body.as_bytes()).expect("parse"));
        assert_eq!(applied.malformed, 2);
        assert!(!applied.changed, "a1 keeps its last good version");
        assert!(r.matches_hashcode(Some("DOWN_1_UP_1_")));
        let p = r.problems();
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p.iter()
                .any(|p| p.kept_last_good && p.reason.contains("nope"))
        );
        assert_eq!(r.instances().count(), 1);

        let d = r.apply_delta(doc(&[("A", "a9", "UP", Some("RENAMED"))]));
        assert_eq!(d.malformed, 1);
        assert!(r.problems().iter().any(|p| p.reason.contains("RENAMED")));
    }
}
