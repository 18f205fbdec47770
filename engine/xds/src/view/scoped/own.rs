//! A scoped view's cluster and assignment names: shared with the global set
//! ([`ScopedView::rejudge`]), or built by the view itself for a host whose
//! DestinationRule in the view is a restricted one other than the global
//! winner ([`ScopedView::refresh_host`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{ScopedView, build, host_of};
use crate::generate::{GenOptions, WithRules};
use crate::{ChangeSet, ResourceSet, ResourceType};
use deltapilot_model::Hostname;
use deltapilot_model::rules::Rule;

impl ScopedView {
    /// Re-judges one global cluster or assignment name: shared if its host is
    /// visible and the global set has it, else absent.
    pub(super) fn rejudge(
        &mut self,
        global: &ResourceSet,
        t: ResourceType,
        name: &Arc<str>,
        log: &mut ChangeSet,
    ) {
        let from = match t {
            ResourceType::Cluster => &global.clusters,
            _ => &global.endpoints,
        };
        let visible = host_of(name).is_some_and(|h| self.hosts.contains_key(h));
        let Some(map) = self.map_mut(t) else {
            return;
        };
        match from.get(name).filter(|_| visible) {
            Some(r) => {
                if !map.get(name).is_some_and(|m| Arc::ptr_eq(m, r)) {
                    map.insert(r.clone());
                    log.of_mut(t).upserted.insert(name.clone());
                }
            }
            None => {
                if map.remove(name).is_some() {
                    log.of_mut(t).removed.insert(name.clone());
                }
            }
        }
    }

    /// Re-decides whether the view builds `h`'s clusters and assignments
    /// itself: when `h` is visible and the view's DestinationRule for it (a
    /// restricted one it sees, see `RuleIndex::with_visible`) is not the
    /// global one. Then they are built over the view's rules (sharing a
    /// global resource whose bytes are equal) and every other name of `h` is
    /// dropped; otherwise `h`'s names are the global resources again.
    pub(super) fn refresh_host(
        &mut self,
        vm: &WithRules<'_>,
        global: &ResourceSet,
        (h, extra): (&Hostname, &[(ResourceType, Arc<str>)]),
        opts: &GenOptions,
        log: &mut ChangeSet,
    ) {
        let key = |r: Option<&Arc<Rule>>| r.map(|r| r.key.clone());
        let differs = key(vm.rules.destination_rule_entry_for(h))
            != key(vm.model.rules().destination_rule_entry_for(h));
        let svc = (differs && self.hosts.contains_key(h))
            .then(|| vm.model.get_service(h))
            .flatten();
        let mut stale: BTreeSet<(ResourceType, Arc<str>)> = (self.own.remove(h).iter())
            .flat_map(|a| a.iter().cloned())
            .chain(extra.iter().cloned())
            .collect();
        let global_svc = svc.clone().or_else(|| vm.model.get_service(h));
        for n in global_svc
            .iter()
            .flat_map(|s| build::host_resource_names(vm.model, s))
        {
            stale.insert((ResourceType::Cluster, n.clone()));
            stale.insert((ResourceType::Endpoint, n));
        }
        let Some(svc) = svc else {
            for (t, n) in &stale {
                self.rejudge(global, *t, n, log);
            }
            return;
        };
        let built = build::host_resources(vm, &svc, opts);
        let mut names = Vec::with_capacity(built.len());
        for (t, n, b) in built {
            stale.remove(&(t, n.clone()));
            let g = match t {
                ResourceType::Cluster => global.clusters.get(&n),
                _ => global.endpoints.get(&n),
            }
            .cloned();
            self.put(t, n.clone(), Some(b), g.as_ref(), log);
            names.push((t, n));
        }
        for (t, n) in stale {
            self.put(t, n, None, None, log);
        }
        self.own.insert(h.clone(), names.into());
    }
}
