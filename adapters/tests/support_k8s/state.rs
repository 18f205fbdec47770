//! The fake API server's storage: objects with resourceVersions from one global
//! counter (as etcd's revision), the history of changes a watch replays from a
//! resourceVersion, compaction (a watch from before it gets 410 Gone), and the
//! broadcast that feeds open watches.
//!
//! What it does NOT do: HTTP (see `http`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::broadcast;

use super::selector::{FieldSelector, LabelSelector, labels_of};

/// Capacity of the broadcast to open watches. A watch that falls this far behind
/// is closed (as the API server closes a slow watcher) and resumes from its last
/// resourceVersion through the history.
const WATCH_BROADCAST_CAPACITY: usize = 1024;
/// Changes kept for watches to replay; older ones are compacted away.
const HISTORY_MAX: usize = 10_000;

/// A resource the fake serves.
#[derive(Debug, PartialEq, Eq)]
pub struct ResDef {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Served only while the Istio CRDs are "installed".
    pub istio: bool,
}

impl ResDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

const fn core(plural: &'static str, kind: &'static str, namespaced: bool) -> ResDef {
    ResDef {
        group: "",
        version: "v1",
        plural,
        kind,
        namespaced,
        istio: false,
    }
}

const fn istio(plural: &'static str, kind: &'static str) -> ResDef {
    ResDef {
        group: "networking.istio.io",
        version: "v1",
        plural,
        kind,
        namespaced: true,
        istio: true,
    }
}

/// Everything the fake serves.
pub static RESOURCES: [ResDef; 12] = [
    core("services", "Service", true),
    core("pods", "Pod", true),
    core("nodes", "Node", false),
    core("namespaces", "Namespace", false),
    ResDef {
        group: "discovery.k8s.io",
        version: "v1",
        plural: "endpointslices",
        kind: "EndpointSlice",
        namespaced: true,
        istio: false,
    },
    istio("virtualservices", "VirtualService"),
    istio("destinationrules", "DestinationRule"),
    istio("gateways", "Gateway"),
    istio("serviceentries", "ServiceEntry"),
    istio("workloadentries", "WorkloadEntry"),
    istio("sidecars", "Sidecar"),
    ResDef {
        group: "",
        version: "v1",
        plural: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        istio: false,
    },
];

/// The definition of `(group, version, plural)`, if served at all.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResDef> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The definition of a kind by name.
pub fn by_kind(kind: &str) -> Option<&'static ResDef> {
    RESOURCES.iter().find(|r| r.kind == kind)
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One change, as stored in the history.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub res: &'static ResDef,
    pub ty: ChangeType,
    /// The object after the change (for a delete: its last state, stamped with the
    /// deletion's resourceVersion).
    pub object: Value,
    /// The object before (modifications and deletes), for selector transitions.
    pub old: Option<Value>,
}

/// What open watches receive.
#[derive(Debug, Clone)]
pub enum Wire {
    Change(Arc<Change>),
    /// Send a BOOKMARK at this resourceVersion (to watches that allow them).
    Bookmark(u64),
    /// Send this line verbatim (garbage injection).
    Raw(String),
    /// Close every watch; `abrupt` cuts the connection instead of ending the body.
    Close {
        abrupt: bool,
    },
    /// Open watches stop delivering changes (they are lost to those streams, as
    /// to a watcher that fell behind) until they end.
    Pause,
    /// Open watches send an `ERROR` event with a `410 Expired` Status and end, as
    /// the API server does to a watcher whose resourceVersion fell out of its
    /// window.
    Expire,
}

/// Which objects a list or watch selects.
#[derive(Debug, Clone)]
pub struct Scope {
    pub res: &'static ResDef,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Scope {
    pub fn matches(&self, obj: &Value) -> bool {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        self.namespace.as_deref().is_none_or(|want| want == ns)
            && self.labels.matches(&labels_of(obj))
            && self.fields.matches(obj)
    }
}

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    objects: BTreeMap<(&'static str, &'static str, String, String), Value>,
    history: Vec<Arc<Change>>,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted: u64,
}

/// The store, shared by the HTTP handlers and the test's control handle.
#[derive(Debug)]
pub struct Storage {
    inner: Mutex<Inner>,
    wire: broadcast::Sender<Wire>,
}

fn key(res: &'static ResDef, ns: &str, name: &str) -> (&'static str, &'static str, String, String) {
    (res.group, res.plural, ns.to_owned(), name.to_owned())
}

impl Default for Storage {
    fn default() -> Self {
        let (wire, _) = broadcast::channel(WATCH_BROADCAST_CAPACITY);
        Self {
            inner: Mutex::new(Inner {
                rv: 100,
                ..Default::default()
            }),
            wire,
        }
    }
}

impl Storage {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current resourceVersion.
    pub fn rv(&self) -> u64 {
        self.lock().rv
    }

    /// Creates or replaces an object (its `metadata.resourceVersion` is assigned),
    /// returning the stored object. `create_only` refuses an existing one.
    pub fn put(
        &self,
        res: &'static ResDef,
        mut obj: Value,
        create_only: bool,
    ) -> Result<Value, u16> {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if name.is_empty() {
            return Err(422);
        }
        let mut inner = self.lock();
        let k = key(res, &ns, &name);
        let old = inner.objects.get(&k).cloned();
        if create_only && old.is_some() {
            return Err(409);
        }
        inner.rv += 1;
        let rv = inner.rv;
        obj["apiVersion"] = Value::String(res.api_version());
        obj["kind"] = Value::String(res.kind.to_owned());
        obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = Value::String(format!("uid-{rv}"));
        }
        inner.objects.insert(k, obj.clone());
        let ty = if old.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.record(&mut inner, res, ty, obj.clone(), old);
        Ok(obj)
    }

    /// Deletes an object; `false` if it did not exist.
    pub fn delete(&self, res: &'static ResDef, ns: &str, name: &str) -> Option<Value> {
        let mut inner = self.lock();
        let mut old = inner.objects.remove(&key(res, ns, name))?;
        inner.rv += 1;
        let rv = inner.rv;
        let prior = old.clone();
        old["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        self.record(
            &mut inner,
            res,
            ChangeType::Deleted,
            old.clone(),
            Some(prior),
        );
        Some(old)
    }

    fn record(
        &self,
        inner: &mut Inner,
        res: &'static ResDef,
        ty: ChangeType,
        object: Value,
        old: Option<Value>,
    ) {
        let change = Arc::new(Change {
            rv: inner.rv,
            res,
            ty,
            object,
            old,
        });
        inner.history.push(change.clone());
        if inner.history.len() > HISTORY_MAX {
            let cut = inner.history.len() - HISTORY_MAX;
            inner.compacted = inner.history[cut - 1].rv;
            inner.history.drain(..cut);
        }
        // Sent under the lock, so a watch subscribing under the lock sees every
        // change exactly once (from the history or from the broadcast).
        let _ = self.wire.send(Wire::Change(change));
    }

    /// One object.
    pub fn get(&self, res: &'static ResDef, ns: &str, name: &str) -> Option<Value> {
        self.lock().objects.get(&key(res, ns, name)).cloned()
    }

    /// The objects of a scope, sorted by namespace and name, and the current
    /// resourceVersion.
    pub fn list(&self, scope: &Scope) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|((g, p, _, _), _)| *g == scope.res.group && *p == scope.res.plural)
            .map(|(_, v)| v)
            .filter(|v| scope.matches(v))
            .cloned()
            .collect();
        (items, inner.rv)
    }

    /// Starts a watch from `from`: the changes after it, and a receiver of what
    /// follows. `Err(compacted)` when `from` is older than the history.
    pub fn watch_from(
        &self,
        from: u64,
    ) -> Result<(Vec<Arc<Change>>, broadcast::Receiver<Wire>), u64> {
        let inner = self.lock();
        if from < inner.compacted {
            return Err(inner.compacted);
        }
        let backlog = inner
            .history
            .iter()
            .filter(|c| c.rv > from)
            .cloned()
            .collect();
        Ok((backlog, self.wire.subscribe()))
    }

    /// Forgets the history up to now: a watch from any earlier resourceVersion gets
    /// 410 Gone (as after etcd compaction).
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.compacted = inner.rv;
        inner.history.clear();
    }

    /// Sends a wire message to every open watch.
    pub fn broadcast(&self, w: Wire) {
        let _ = self.wire.send(w);
    }

    /// A BOOKMARK to every open watch at a resourceVersion advanced past every
    /// change so far (as the API server's progress notifications do).
    pub fn bookmark(&self) -> u64 {
        let mut inner = self.lock();
        inner.rv += 1;
        let rv = inner.rv;
        let _ = self.wire.send(Wire::Bookmark(rv));
        rv
    }
}
