//! Envoy's `config_dump` JSON for a proxy's view: what `deltapilot replay --dump`
//! prints and `/debug/config_dump?proxy=ID` serves, shaped like a live Envoy's
//! `/config_dump?include_eds` so the two can be compared (e.g. with `jq -S` on
//! both sides):
//!
//! ```text
//! {"configs": [
//!   {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
//!    "dynamic_active_clusters": [{"version_info": V, "cluster": {"@type": …, …}}]},
//!   {"@type": "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
//!    "dynamic_listeners": [{"name": N, "active_state": {"version_info": V, "listener": {…}}}]},
//!   {"@type": "type.googleapis.com/envoy.admin.v3.RoutesConfigDump",
//!    "dynamic_route_configs": [{"version_info": V, "route_config": {…}}]},
//!   {"@type": "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump",
//!    "dynamic_endpoint_configs": [{"version_info": V, "endpoint_config": {…}}]}
//! ]}
//! ```
//!
//! `version_info` is the resource's content version (what deltapilot sends as the
//! delta resource version). Fields only a live Envoy knows (`last_updated`, static
//! resources from its bootstrap, warming state) are absent.
//!
//! What it does NOT do: decide what a proxy subscribed to; callers pass a filter.

use deltapilot_xds::{ResourceMap, ResourceType};

use super::render::{Json, renderer};

/// The order of sections, as the issue lists them (Envoy's own dump orders
/// clusters, listeners, routes, then endpoints too).
pub const SECTIONS: [ResourceType; 4] = [
    ResourceType::Cluster,
    ResourceType::Listener,
    ResourceType::Route,
    ResourceType::Endpoint,
];

/// The config dump of a proxy's view (`view` gives its map of each type, e.g.
/// `|t| snap.view(&key, t)`), for the `types` asked (all four in Envoy's order
/// if empty), keeping only the names `keep` accepts (e.g. a live proxy's
/// subscriptions).
pub fn config_dump<'a>(
    view: impl Fn(ResourceType) -> &'a ResourceMap,
    types: &[ResourceType],
    keep: &dyn Fn(ResourceType, &str) -> bool,
) -> Json {
    let r = renderer();
    let mut configs = Vec::new();
    for t in SECTIONS {
        if !types.is_empty() && !types.contains(&t) {
            continue;
        }
        let (dump_type, list_key) = match t {
            ResourceType::Cluster => ("ClustersConfigDump", "dynamic_active_clusters"),
            ResourceType::Listener => ("ListenersConfigDump", "dynamic_listeners"),
            ResourceType::Route => ("RoutesConfigDump", "dynamic_route_configs"),
            ResourceType::Endpoint => ("EndpointsConfigDump", "dynamic_endpoint_configs"),
            // Never dumped: key material stays out of every debug view.
            ResourceType::Secret => continue,
            // Not a section: the route configurations shown inline are what
            // a VHDS proxy's virtual hosts add up to.
            ResourceType::VirtualHost => continue,
        };
        let mut items = Vec::new();
        // By name, as people read it (the map iterates in hash order).
        let mut chosen: Vec<_> = view(t).iter().filter(|(name, _)| keep(t, name)).collect();
        chosen.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (name, res) in chosen {
            let body = r.resource(t, &res.bytes);
            let version = Json::from(&*res.version);
            let mut item = Json::obj();
            match t {
                ResourceType::Cluster => {
                    item.push("version_info", version);
                    item.push("cluster", body);
                }
                ResourceType::Listener => {
                    let mut state = Json::obj();
                    state.push("version_info", version);
                    state.push("listener", body);
                    item.push("name", Json::from(&**name));
                    item.push("active_state", state);
                }
                ResourceType::Route => {
                    item.push("version_info", version);
                    item.push("route_config", body);
                }
                ResourceType::Endpoint => {
                    item.push("version_info", version);
                    item.push("endpoint_config", body);
                }
                ResourceType::VirtualHost | ResourceType::Secret => continue,
            }
            items.push(item);
        }
        let mut section = Json::obj();
        section.push(
            "@type",
            Json::from(format!("type.googleapis.com/envoy.admin.v3.{dump_type}")),
        );
        section.push(list_key, Json::Arr(items));
        configs.push(section);
    }
    let mut out = Json::obj();
    out.push("configs", Json::Arr(configs));
    out
}
