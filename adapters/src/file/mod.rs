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
//! make the engine recompute every resource). A `ServiceEntry` also becomes:
//! - one service per host (`svc/<namespace>/<host>`, host lower-cased; namespace
//!   `metadata.namespace` or `default`); ports with Istio's protocols (from the
//!   port name's `<protocol>-` prefix when none is given); resolution `STATIC` →
//!   static endpoints, `DNS`/`DNS_ROUND_ROBIN` → DNS, `NONE` or absent (Istio's
//!   default) → passthrough; the entry's labels as service labels;
//! - one endpoint per inline endpoint, belonging to every host of the entry, keyed
//!   `ep/file/se/<namespace>/<entry>/<address>`, with `/<port>=<n>,...` appended
//!   when several endpoints of the entry share an address (see
//!   `istio::endpoint_key`). A port's `targetPort` fills the endpoint's port map
//!   where the endpoint names none. Locality `region/zone/subzone`; weight 0 or
//!   absent stays 0 (the engine reads it as 1). Endpoints whose address is not an
//!   IP (hostnames of DNS entries, Unix sockets) are left out with a reported
//!   problem: the engine carries IP endpoints only.
//!
//! `WorkloadEntry` objects are carried as config only: resolving a ServiceEntry's
//! `workloadSelector` against them is left to the full adapter (the desired view is
//! rebuilt from all objects, so that join fits in `view::desired`).
//!
//! # Changes, resync, generations
//!
//! The adapter keeps its last-known view (key → entity) and appends only changed
//! entities: upserts for new or changed ones, deletes for vanished ones; a rescan of
//! unchanged files appends nothing. Each start resyncs under a new generation `G`:
//! `resync STARTED`, every current entity, `resync COMPLETED`, all at `G`, so the
//! engine sweeps whatever vanished while the adapter was down. `G` is
//! `max(now in Unix µs, last persisted G + 1)` (see `state`).
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
mod options;
mod parse;
mod scan;
mod state;
mod status;
mod view;
mod watch;

pub use adapter::FileAdapter;
pub use options::FileAdapterOptions;
pub use status::{FileAdapterStatus, FileProblem, ProblemKind};
pub use watch::SIGNAL_CHANNEL_CAPACITY;
