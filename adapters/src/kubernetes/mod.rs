//! The Kubernetes adapter: a cluster's Services, EndpointSlices, Pods, Nodes and
//! Istio networking objects turned into entity-level events in the log, with
//! kube-rs.
//!
//! # What it watches
//!
//! One kube-runtime `watcher` per kind and selected namespace (all namespaces when
//! none are given; Nodes always cluster-wide): `v1` Services,
//! `discovery.k8s.io/v1` EndpointSlices, `v1` Pods, `v1` Nodes and, unless
//! [`KubernetesOptions::istio`] is off, the `networking.istio.io/v1` kinds
//! VirtualService, DestinationRule, Gateway, ServiceEntry, WorkloadEntry and
//! Sidecar. The label selector ([`KubernetesOptions::label_selector`]) restricts
//! Services and Istio objects; EndpointSlices follow their Service; Pods and
//! Nodes are only read to describe endpoints. Objects are received untyped and
//! parsed one by one, so one malformed object never fails a list.
//!
//! # Mapping
//!
//! - **Service** `name` in `ns` → service `svc/<ns>/<name>.<ns>.svc.<domain>`
//!   (domain [`KubernetesOptions::cluster_domain`], default `cluster.local`), the
//!   Service's labels, resolution `STATIC` (`PASSTHROUGH` when headless, `DNS` for
//!   `ExternalName`). Ports keep their names (unnamed → the number); protocol:
//!   `UDP` ports are UDP, else `appProtocol` (Istio's names, `kubernetes.io/h2c`
//!   → HTTP2, `kubernetes.io/ws[s]` → HTTP), else Istio's name prefix convention
//!   (`http-…`, `grpc-…`, …), else unspecified (TCP). SCTP ports, and a second port
//!   reusing a number (53/TCP next to 53/UDP), are left out.
//! - **EndpointSlice endpoints** → endpoint entities, one per workload address
//!   and Service, keyed `ep/k8s/<cluster>/<ns>/<service>/<pod>/<ip>` (`-` for the
//!   Pod when the endpoint has no Pod `targetRef`): the first address of each
//!   endpoint (FQDN slices and non-IP addresses are left out). An address listed
//!   by several slices of one Service is one entity whose port map (Service port
//!   name → endpoint port) is the union of those slices' ports. A Pod in two
//!   Services is two entities, because each Service has its own port names and
//!   target ports, which one shared port map could not hold without routing one
//!   Service to the other's port. An endpoint whose Service is not in the view
//!   (not selected, deleted) is not emitted.
//! - **Health** from the endpoint's conditions: `ready` (absent = true) → HEALTHY;
//!   not ready but `serving` (absent = ready) and `terminating` → DRAINING; any
//!   other not-ready endpoint → NOT_READY. Slices that disagree (mid-update): the
//!   best wins.
//! - **Pod** (from `targetRef`) → the endpoint's labels and service account (the
//!   plain `serviceAccountName`, as WorkloadEntries give it).
//! - **Node** (`nodeName` of the slice endpoint, else of the Pod) → locality from
//!   `topology.kubernetes.io/region` and `/zone` (or the legacy
//!   `failure-domain.beta.kubernetes.io/*`) and `topology.istio.io/subzone`; the
//!   slice endpoint's `zone` fills a missing zone.
//! - **Istio objects** → config entities `cfg/<kind>/<ns>/<name>`: labels,
//!   annotations (minus `kubectl.kubernetes.io/last-applied-configuration`), and the
//!   `spec` as canonical JSON (keys sorted; a ServiceEntry's without `endpoints`,
//!   which travel as endpoint entities; a WorkloadEntry's `status` is not carried).
//! - **ServiceEntry** → also services and endpoints, by the mapping the file
//!   adapter uses (`common::istio`; its module docs give the rules): one service
//!   per host (`svc/<ns>/<host>`), one endpoint per inline endpoint, keyed
//!   `ep/k8s/<cluster>/_se/<ns>/<entry>/<address>[/<port>=<n>,...]`, and, with a
//!   `workloadSelector`, one endpoint per selected **WorkloadEntry** of the same
//!   namespace, keyed `ep/k8s/<cluster>/_we/<ns>/<entry>/<workload entry>` (`_`
//!   cannot start a namespace, so these never collide with EndpointSlice keys).
//!   Health of a WorkloadEntry: HEALTHY unless `proxy.istio.io/health-checks-enabled`
//!   is true, then its `Healthy` condition. A host that is also a Kubernetes
//!   Service of the namespace stays the Service's; among ServiceEntries of one
//!   namespace claiming a host, the first by name wins (both logged). An entry
//!   with both a selector and inline endpoints is malformed; non-IP addresses are
//!   left out (logged). A WorkloadEntry or ServiceEntry change recomputes its
//!   namespace's mapping and appends only the entities that changed.
//!
//! # Watch semantics, relists and resync
//!
//! kube-runtime's watcher lists (in pages of [`KubernetesOptions::page_size`], or
//! from the API server's cache with `resourceVersion=0` when that is unset),
//! watches from the list's resourceVersion with bookmarks,
//! resumes from the last resourceVersion when a connection drops or a watch times
//! out, and relists when the API server answers 410 Gone. Every list is buffered
//! and replaces its scope in the adapter's last-known view, which is diffed by
//! value: a relist of an unchanged cluster appends nothing, and nothing is ever
//! deleted and re-created.
//!
//! Each start waits until every watch has listed once (a kind whose CRD is absent
//! counts as listed and empty), then resyncs under a new generation: `resync
//! STARTED`, every entity, `resync COMPLETED`, so the engine sweeps whatever
//! vanished while the adapter was down. The generation is `max(now in Unix µs,
//! persisted + 1)` with [`KubernetesOptions::state_dir`], the clock alone without.
//! Until then, the previous run's entities stay in force.
//!
//! # Failures
//!
//! - API server down, slow or failing: the adapter keeps its last state; each
//!   watch retries with capped exponential backoff and jitter
//!   ([`KubernetesOptions::retry_initial`] … [`KubernetesOptions::retry_max`]) and
//!   shows it in [`KubernetesAdapterStatus`] (per-watch [`SyncState`], last error,
//!   retry delay). A client from [`KubernetesAdapter::from_kubeconfig`] has connect
//!   and idle read timeouts, so a hanging API server fails requests.
//! - A missing CRD (404 on the list) is [`SyncState::Absent`], retried, never fatal.
//! - A malformed object (wrong types, a port out of range, …) is skipped with a
//!   warning and counted (`malformed_objects_total`, listed in `problems`); its last
//!   good state stays in force. A watch line that does not decode is skipped and
//!   counted the same way. Neither stops the watch.
//! - List responses are bounded by the page size ([`KubernetesOptions::page_size`]),
//!   watch events by the API server's object size limit.
//!
//! # Testing, and running the tests against a real cluster
//!
//! The tests (`adapters/tests/k8s_*.rs`) run against an in-process fake API
//! server over real HTTP (`adapters/tests/support_k8s`) that implements list and
//! watch as the API server does: newline-delimited JSON watch events,
//! resourceVersions, `410 Gone` as an `ERROR` event, bookmarks, `timeoutSeconds`,
//! label selectors, dropped connections, with real k8s-openapi objects. The smoke
//! flow in `k8s_real_cluster.rs` runs against the fake by default; with
//! `DELTAPILOT_K8S_REAL=1` and `KUBECONFIG` set, the same flow runs against that
//! cluster instead, creating and deleting its objects in a fresh namespace:
//!
//! ```text
//! DELTAPILOT_K8S_REAL=1 KUBECONFIG=~/.kube/config \
//!     cargo test -p deltapilot-adapters --test k8s_real_cluster
//! ```
//!
//! What it does NOT do: talk to the engine (it appends to the log), write to the
//! cluster, run WorkloadEntry health probes (it reads their result), or read
//! WorkloadGroups and auto-registered workloads.

mod adapter;
mod kinds;
mod options;
mod parse;

mod status;
mod store;
mod watch;

pub use adapter::KubernetesAdapter;
pub use kinds::{ResourceKind, WATCH_VERBS, watched_resources};
pub use options::KubernetesOptions;
pub use status::{KubernetesAdapterStatus, ObjectProblem, SyncState, WatchStatus};
pub use watch::UPDATE_CHANNEL_CAPACITY;
