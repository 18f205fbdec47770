//! What the generator reads from the folded model, as a small trait.
//!
//! The generator only needs three questions answered: "which services exist", "what
//! is the merged service for this hostname", and "which endpoints belong to this
//! hostname". Keeping them behind [`ModelRead`] lets the builders be unit-tested on
//! a tiny in-memory model and keeps the generator independent of how the fold stores
//! its maps.
//!
//! What it does NOT do: merge sources or decide precedence. The model answers with
//! the already-merged view (the fold's job).

use std::sync::Arc;

use deltapilot_model::rules::RuleIndex;
use deltapilot_model::state::ModelState;
use deltapilot_model::{EndpointRef, Hostname, Service};

/// Read access to the merged registry model, as the xDS generator needs it.
///
/// Implementations must be deterministic: the same model state answers the same
/// way. Order of iteration does not matter; the generator sorts what it emits.
/// `Sync`, because a large regeneration reads the model from several threads.
pub trait ModelRead: Sync {
    /// The merged service for `host`, if any source defines it.
    fn service(&self, host: &Hostname) -> Option<Arc<Service>>;

    /// Calls `f` once for every service (any order).
    fn for_each_service(&self, f: &mut dyn FnMut(&Service));

    /// Every endpoint that belongs to `host` (the union over sources, any
    /// order), borrowed from the model. An endpoint serving several services is
    /// listed for each of them.
    fn host_endpoints<'a>(&'a self, host: &Hostname) -> Vec<EndpointRef<'a>>;

    /// The traffic rules, if the model has any (a model without rules, such as
    /// a small test model, answers `None`: every host gets its default routes).
    fn rules(&self) -> Option<&RuleIndex> {
        None
    }

    /// Whether the proxies this is generated for satisfy the `sourceLabels`
    /// selector `id` (`rules::selector_id`). The snapshot's own resources are
    /// for proxies that satisfy none.
    fn source_matches(&self, _id: &str) -> bool {
        false
    }
}

/// The folded state, as the generator reads it: its merged view (one service per
/// hostname; endpoints as the union over sources).
impl ModelRead for ModelState {
    fn service(&self, host: &Hostname) -> Option<Arc<Service>> {
        self.get_service(host)
    }

    fn for_each_service(&self, f: &mut dyn FnMut(&Service)) {
        for s in self.services() {
            f(s);
        }
    }

    fn host_endpoints<'a>(&'a self, host: &Hostname) -> Vec<EndpointRef<'a>> {
        self.endpoint_refs_of(host)
    }

    fn rules(&self) -> Option<&RuleIndex> {
        Some(ModelState::rules(self))
    }
}

/// The folded state read through another rule index: a sidecar view's, where
/// the restricted VirtualServices its namespace sees are bound too (see
/// `RuleIndex::with_visible`). Services and endpoints are the model's own.
pub struct WithRules<'a> {
    /// The folded state.
    pub model: &'a ModelState,
    /// The rules the generator reads instead of the model's.
    pub rules: RuleIndex,
    /// The `sourceLabels` selectors the view's proxies satisfy, sorted.
    pub sources: Arc<[Arc<str>]>,
}

impl ModelRead for WithRules<'_> {
    fn service(&self, host: &Hostname) -> Option<Arc<Service>> {
        self.model.get_service(host)
    }

    fn for_each_service(&self, f: &mut dyn FnMut(&Service)) {
        self.model.for_each_service(f)
    }

    fn host_endpoints<'a>(&'a self, host: &Hostname) -> Vec<EndpointRef<'a>> {
        self.model.endpoint_refs_of(host)
    }

    fn rules(&self) -> Option<&RuleIndex> {
        Some(&self.rules)
    }

    fn source_matches(&self, id: &str) -> bool {
        self.sources.binary_search_by(|s| (**s).cmp(id)).is_ok()
    }
}
