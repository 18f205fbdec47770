//! xDS resources as the engine publishes them: encoded once, versioned by a hash of
//! their bytes, shared by every stream (invariants 4 and 5).
//!
//! - [`ResourceType`]: the four types deltapilot serves (CDS, EDS, LDS, RDS), with
//!   their type URLs and the make-before-break order.
//! - [`Resource`]: one named, encoded resource and its content version.
//! - [`ResourceSet`]: every resource of a snapshot, in persistent maps so consecutive
//!   snapshots share structure.
//! - [`ChangeSet`]: what one fold step changed, per type.
//!
//! - [`generate`]: the translation of the model into those resources, incremental
//!   per batch.
//! - [`snapshot`]: the immutable snapshot (model, resources, change set, position)
//!   and its lock-free publication.
//! - [`view`]: which resources one proxy is sent, and the diff against what it holds.
//! - [`hash`]: the resource-set and snapshot hashes a replay reproduces.
//!
//! What it does NOT do: read the log or fold events (see `deltapilot-model` and
//! `deltapilot-engine`), or talk to proxies (that is `server`).

mod change;
pub mod generate;
pub mod hash;
mod kind;
mod node;
mod resource;
mod resource_map;
pub mod snapshot;
pub mod view;

pub use change::{ChangeSet, TypeChanges};
pub use kind::ResourceKind;
pub use node::proxy_from_node;
pub use resource::entry_hash;
pub use resource::{Resource, ResourceSet, ResourceType, content_version};
pub use resource_map::ResourceMap;
