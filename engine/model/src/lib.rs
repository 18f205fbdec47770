//! deltapilot's service model, the folded state and the pure fold.
//!
//! - the model types ([`Service`], [`Endpoint`], [`Config`], [`Proxy`], …): the
//!   registry-neutral language everything downstream of the log speaks;
//! - [`state`]: the folded registry state, in persistent maps consecutive snapshots
//!   share;
//! - [`rules`]: VirtualService and DestinationRule, typed, bound to hosts and
//!   indexed (the fold keeps the index in the state);
//! - [`fold`]: the pure function from (state, batch of events) to the next state and
//!   what it touched;
//! - the ground floor both use: [`keys`] (the hash keys of the large maps),
//!   [`records`] (the map keyed by them) and [`par`] (splitting one large step over
//!   a few threads).
//!
//! What it does NOT do: read a log, build xDS resources, or run anything async. It
//! has no tokio and no Envoy types, so the fold can be tested and benchmarked on its
//! own, and replay reproduces it byte for byte.

pub mod canon;
pub mod fold;
pub mod keys;
mod model;
pub mod par;
pub mod records;
pub mod rules;
pub mod state;

pub use model::*;
