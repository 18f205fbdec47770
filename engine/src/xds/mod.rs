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
//! What it does NOT do: talk to proxies (that is `server`), or decide what a given
//! proxy sees (that is `view`).

mod change;
pub mod generate;
mod kind;
mod resource;
mod resource_map;
pub mod view;

pub use change::{ChangeSet, TypeChanges};
pub use kind::ResourceKind;
pub(crate) use resource::entry_hash;
pub use resource::{Resource, ResourceSet, ResourceType, content_version};
pub use resource_map::ResourceMap;
