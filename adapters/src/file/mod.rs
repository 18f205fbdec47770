//! The file adapter: directories of Istio networking YAML turned into entity-level
//! events in the log.
//!
//! # Input
//!
//! Files named `*.yaml`, `*.yml` or `*.json` directly in each watched directory
//! (not in subdirectories; hidden files skipped), each holding one or more YAML
//! documents separated by `---`. Kinds of `networking.istio.io` `v1`, `v1beta1` or
//! `v1alpha3`: `ServiceEntry`, `WorkloadEntry`, `VirtualService`,
//! `DestinationRule`, `Gateway`, `Sidecar`. Other kinds are ignored with a reported
//! problem.
//!
//! # Output
//!
//! Every object becomes a config entity (`cfg/<kind>/<namespace>/<name>`, its `spec`
//! as canonical JSON; a ServiceEntry's without `endpoints`, which travel as endpoint
//! entities, so that an endpoint change is never also a config change, which would
//! make the engine recompute every resource; a WorkloadEntry's `status` is not
//! carried). ServiceEntries and WorkloadEntries are also mapped to the service
//! model, by the mapping the Kubernetes adapter shares (`common::istio`):
//! - one service per ServiceEntry host (`svc/<namespace>/<host>`, host lower-cased;
//!   namespace `metadata.namespace` or `default`); ports with Istio's protocols
//!   (from the port name's `<protocol>-` prefix when none is given); resolution
//!   `STATIC` → static endpoints, `DNS`/`DNS_ROUND_ROBIN` → DNS, `NONE` or absent
//!   (Istio's default) → passthrough; the entry's labels as service labels;
//! - one endpoint per inline endpoint, belonging to every host of the entry, keyed
//!   `ep/file/se/<namespace>/<entry>/<address>`, with `/<port>=<n>,...` appended
//!   when several endpoints of the entry share an address. A port's `targetPort`
//!   fills the endpoint's port map where the endpoint names none. Locality
//!   `region/zone/subzone`; weight 0 or absent stays 0 (the engine reads it as 1);
//! - for a ServiceEntry with `spec.workloadSelector`, one endpoint per selected
//!   WorkloadEntry, keyed `ep/file/we/<namespace>/<entry>/<workload entry>`,
//!   belonging to every host of the entry. As in Istio: only WorkloadEntries of the
//!   entry's namespace are selected, those whose labels (`spec.labels` overlaid
//!   with `metadata.labels`) contain every selector label; each entry port maps to
//!   the WorkloadEntry's port of that name, else the port's `targetPort`, else its
//!   number; locality, weight and service account as given, `network` as the
//!   `topology.istio.io/network` label; health HEALTHY unless the
//!   `proxy.istio.io/health-checks-enabled` annotation is true, then the
//!   `Healthy` status condition (absent or not `"True"`: UNHEALTHY). The join spans
//!   all watched files and is rebuilt with the desired view, so relabelling a
//!   WorkloadEntry or changing a selector adds or removes exactly the affected
//!   endpoints. An entry with both a selector and inline endpoints is a malformed
//!   document (Istio rejects it).
//!
//! Endpoints whose address is not an IP (hostnames of DNS entries, Unix sockets)
//! are left out with a reported problem: the engine carries IP endpoints only.
//!
//! # Changes, resync, generations
//!
//! The adapter keeps its last-known view (key → entity) and appends only changed
//! entities: upserts for new or changed ones, deletes for vanished ones; a rescan of
//! unchanged files appends nothing. Each start resyncs under a new generation `G`:
//! `resync STARTED`, every current entity, `resync COMPLETED`, all at `G`, so the
//! engine sweeps whatever vanished while the adapter was down. `G` is
//! `max(now in Unix µs, last persisted G + 1)` (see `state`). The planning and
//! appending are every adapter's (`common::emit`, `common::append`); the state
//! file also keeps each WorkloadEntry's health, which its carried config lacks.
//!
//! # Bad input
//!
//! A file that is not valid YAML, unreadable, not UTF-8 or too large is reported
//! with its path, line and reason, and keeps its last good state; other files are
//! unaffected. Inside a valid file, a malformed document is skipped with its path,
//! document index, line and reason, and keeps its last good state (matched by kind,
//! namespace and name, else by position); the other documents apply. A deleted file
//! loses its entities. Problems are logged (`tracing::warn!`) and kept in
//! [`FileAdapterStatus`].
//!
//! # Watching
//!
//! notify watches each directory non-recursively; events, debounced (100 ms quiet,
//! 1 s at most), only say which directory to rescan, and a rescan compares bytes, so
//! atomic renames and symlink swaps are safe. Every directory is also rescanned
//! every 30 s. All intervals are in [`FileAdapterOptions`].
//!
//! What it does NOT do: talk to the engine (it appends to the log, the log is the
//! truth), or validate traffic rules beyond what the keys and service model need
//! (the engine parses the specs it implements).

mod adapter;
mod istio;
mod json;
mod offline;
mod options;
mod parse;
mod scan;
mod state;
mod status;
mod view;
mod watch;

pub use adapter::FileAdapter;
pub use offline::{Loaded, Origin, load_paths};
pub use options::FileAdapterOptions;
pub use status::{FileAdapterStatus, FileProblem, ProblemKind};
pub use watch::SIGNAL_CHANNEL_CAPACITY;
