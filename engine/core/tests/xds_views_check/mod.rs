//! What `xds_views`' property checks of one step: every view equals its
//! rebuild, and its clusters and assignments are the global resources (but
//! for the hosts whose restricted DestinationRule the view applies itself).

use std::sync::Arc;

use deltapilot_model::state::ModelState;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::view::{ScopeKey, Views};
use deltapilot_xds::{ResourceSet, ResourceType};
use proptest::prelude::*;

use crate::xds_support::flatten;

fn flat_map(m: &deltapilot_xds::ResourceMap) -> Vec<(String, Vec<u8>)> {
    m.iter()
        .map(|(n, r)| (n.to_string(), r.bytes.to_vec()))
        .collect()
}

pub(crate) fn map_changes(
    old: &deltapilot_xds::ResourceMap,
    new: &deltapilot_xds::ResourceMap,
) -> deltapilot_xds::TypeChanges {
    let mut tc = deltapilot_xds::TypeChanges::default();
    for (n, r) in new.iter() {
        if old.get(n).is_none_or(|o| o.bytes != r.bytes) {
            tc.upserted.insert(n.clone());
        }
    }
    for (n, _) in old.iter() {
        if new.get(n).is_none() {
            tc.removed.insert(n.clone());
        }
    }
    tc
}

pub(crate) fn check_views(
    inc: &Views,
    state: &ModelState,
    set: &ResourceSet,
    opts: &GenOptions,
) -> Result<(), TestCaseError> {
    let reference = Views::build(state, set, opts);
    let inc_keys: Vec<&ScopeKey> = inc.iter().map(|(k, _)| k).collect();
    let ref_keys: Vec<&ScopeKey> = reference.iter().map(|(k, _)| k).collect();
    prop_assert_eq!(inc_keys, ref_keys, "one view per scope");
    let inc_gw: Vec<_> = inc.gateways().map(|(k, _)| k.clone()).collect();
    let ref_gw: Vec<_> = reference.gateways().map(|(k, _)| k.clone()).collect();
    prop_assert_eq!(inc_gw, ref_gw, "one view per Gateway set");
    for (k, want) in reference.gateways() {
        let got = inc.gateway(&k.0, &k.1).expect("same keys");
        for t in ResourceType::ALL {
            prop_assert_eq!(
                flat_map(got.map(t)),
                flat_map(want.map(t)),
                "gateway view {:?} {:?} incremental != from scratch",
                k,
                t
            );
        }
        if k.1.is_empty() {
            prop_assert!(
                got.clusters.ptr_eq(&set.clusters),
                "gateway clusters are the global map"
            );
            prop_assert!(
                got.endpoints.ptr_eq(&set.endpoints),
                "gateway assignments are the global map"
            );
        }
    }
    for (k, want) in reference.iter() {
        let got = inc.get(&k.0, &k.1, &k.2).expect("same keys");
        prop_assert_eq!(
            flatten(&got.resources),
            flatten(&want.resources),
            "view {:?} incremental != from scratch",
            k
        );
        for (t, map, global) in [
            (
                ResourceType::Cluster,
                &got.resources.clusters,
                &set.clusters,
            ),
            (
                ResourceType::Endpoint,
                &got.resources.endpoints,
                &set.endpoints,
            ),
        ] {
            // A host whose DestinationRule in the view is a restricted one
            // other than the global winner has the view's own resources.
            let view_rules = state.rules().with_visible(&k.1);
            let own = |n: &str| {
                let h = deltapilot_model::Hostname::new(n.rsplit('|').next().unwrap_or(n));
                let key = |r: Option<&Arc<deltapilot_model::rules::Rule>>| r.map(|r| r.key.clone());
                key(view_rules.destination_rule_entry_for(&h))
                    != key(state.rules().destination_rule_entry_for(&h))
            };
            for (n, r) in map.iter() {
                if &**n == "PassthroughCluster" {
                    continue;
                }
                let g = global.get(n);
                let shared = g.is_some_and(|g| Arc::ptr_eq(g, r));
                if own(n) {
                    prop_assert!(
                        shared || g.is_none_or(|g| g.bytes != r.bytes),
                        "{:?} {} equals the global resource but is a copy in view {:?}",
                        t,
                        n,
                        k
                    );
                } else {
                    prop_assert!(shared, "{:?} {} is not the global resource", t, n);
                }
            }
        }
    }
    Ok(())
}
