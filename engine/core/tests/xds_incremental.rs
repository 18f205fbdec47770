//! Incremental generation equals rebuild-from-scratch, byte for byte, for random
//! event sequences folded by the real fold: service and endpoint upserts and
//! deletes, resyncs that sweep, and two sources (and two namespaces) writing the
//! same hostnames; traffic rules (VirtualService and DestinationRule adds, edits
//! and deletes, naming missing hosts and subsets, exact, short and wildcard
//! hosts, hosts that appear after their rules). Also: `Touched::rule_hosts`
//! names every host whose rules changed, change sets name exactly the resources whose bytes
//! changed, and the O(changed) per-proxy diff equals the full diff.

mod xds_support;

use std::collections::HashMap;
use std::sync::Arc;

use deltapilot_model::rules::{DestinationRule, VirtualService, resolve_host};
use deltapilot_model::state::{ModelState, Touched};
use deltapilot_model::{Hostname, ProxyType};
use deltapilot_proto::ConfigKind;
use deltapilot_proto::Event;
use deltapilot_xds::generate::{GenOptions, Generator, build_all, changes_between};
use deltapilot_xds::hash::resources_hash;
use deltapilot_xds::view::{diff, diff_changed, resources_for};
use deltapilot_xds::{Resource, ResourceMap, ResourceSet, ResourceType};
use proptest::prelude::*;
use xds_support::*;

const SOURCES: [&str; 2] = ["a-k8s", "b-file"];
const NAMESPACES: [&str; 2] = ["ns1", "ns2"];
const HOSTS: [&str; 6] = [
    "a.ns1.svc.cluster.local",
    "a.ns2.svc.cluster.local",
    "b.ns1.svc.cluster.local",
    "a.ns1",
    "api.example.com",
    "*.wild.example.com",
];
const PORTS: [u32; 4] = [80, 443, 9090, 3306];
const PROTOCOLS: [Protocol; 7] = [
    Protocol::Http,
    Protocol::Http2,
    Protocol::Grpc,
    Protocol::Tcp,
    Protocol::Tls,
    Protocol::Udp,
    Protocol::Mysql,
];
const RESOLUTIONS: [Resolution; 4] = [
    Resolution::StaticEndpoints,
    Resolution::StaticEndpoints,
    Resolution::Dns,
    Resolution::Passthrough,
];
const ADDRESSES: [&str; 5] = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "fd00::1"];
const WEIGHTS: [u32; 5] = [0, 1, 2, 5, u32::MAX / 2 + 1];
const HEALTHS: [Health; 5] = [
    Health::Unspecified,
    Health::Healthy,
    Health::Unhealthy,
    Health::Draining,
    Health::NotReady,
];
const LOCALITIES: [(&str, &str); 3] = [("", ""), ("r1", "z1"), ("r2", "z1")];
/// Rule names (per namespace), the hosts rules bind (short names resolve in
/// the rule's namespace: `a` in `ns1` is a pool host, `a` in `ns2` another;
/// `missing` names no service), destinations and subsets.
const RULE_NAMES: [&str; 3] = ["r0", "r1", "r2"];
const RULE_HOSTS: [&str; 8] = [
    "a",
    "b",
    "api.example.com",
    "a.ns1",
    "*.example.com",
    "*.wild.example.com",
    "*",
    "missing",
];
const DESTS: [&str; 4] = ["a", "b", "api.example.com", "missing"];
const SUBSETS: [&str; 3] = ["v1", "v2", "nope"];
/// Endpoint labels: none, or the `v` label the subsets select on.
const LABELS: [Option<&str>; 4] = [None, Some("v1"), Some("v2"), Some("v3")];
/// Top-level traffic policies (`""`: none), with port-level overrides.
const POLICIES: [&str; 5] = [
    "",
    r#","trafficPolicy":{"loadBalancer":{"consistentHash":{"httpHeaderName":"x-user"}}}"#,
    r#","trafficPolicy":{"connectionPool":{"tcp":{"maxConnections":7,"connectTimeout":"2s"},"http":{"http2MaxRequests":9,"idleTimeout":"30s"}},"outlierDetection":{"consecutive5xxErrors":3,"interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":50}}"#,
    r#","trafficPolicy":{"loadBalancer":{"simple":"LEAST_REQUEST"},"portLevelSettings":[{"port":{"number":80},"loadBalancer":{"consistentHash":{"maglev":{"tableSize":65537},"useSourceIp":true}}}]}"#,
    r#","trafficPolicy":{"tls":{"mode":"SIMPLE","caCertificates":"/etc/ca.pem","sni":"api.example.com"}}"#,
];
/// A subset-level override.
const SUBSET_POLICY: &str = r#","trafficPolicy":{"loadBalancer":{"simple":"RANDOM"},"portLevelSettings":[{"port":{"number":9090},"outlierDetection":{"consecutiveGatewayErrors":2}}]}"#;
const GATEWAYS: [&str; 3] = ["", r#","gateways":["mesh"]"#, r#","gateways":["gw"]"#];

/// One step of a random history, in terms of indexes into the pools above.
#[derive(Debug, Clone)]
enum Op {
    Svc {
        src: usize,
        ns: usize,
        host: usize,
        ports: Vec<(usize, usize)>,
        res: usize,
    },
    SvcDel {
        src: usize,
        ns: usize,
        host: usize,
    },
    Ep {
        src: usize,
        key: usize,
        addr: usize,
        refs: Vec<(usize, usize)>,
        weight: usize,
        health: usize,
        loc: usize,
        target: bool,
        /// Index into [`LABELS`].
        label: usize,
    },
    EpDel {
        src: usize,
        key: usize,
    },
    /// The last `Ep` of this key again, same source and shape, with another
    /// address, weight and health: the fold's rewrite path (an endpoint of
    /// one hostname is touched by key), which a random `Ep` rarely takes.
    EpAgain {
        key: usize,
        addr: usize,
        weight: usize,
        health: usize,
        /// Index into [`LABELS`]: the endpoint moves between subsets.
        label: usize,
    },
    ResyncStart {
        src: usize,
    },
    ResyncDone {
        src: usize,
    },
    /// A VirtualService upsert (`broken`: a spec that does not fit the schema).
    Vs {
        src: usize,
        ns: usize,
        name: usize,
        hosts: Vec<usize>,
        routes: Vec<(usize, usize, u32)>,
        gateways: usize,
        broken: bool,
    },
    /// A DestinationRule upsert; repeated subset names make it invalid.
    Dr {
        src: usize,
        ns: usize,
        name: usize,
        host: usize,
        subsets: Vec<usize>,
        /// Index into [`POLICIES`] (top level) and, per subset, whether it
        /// overrides with [`SUBSET_POLICY`].
        policy: usize,
        subset_policy: bool,
    },
    /// A rule delete (`dr`: DestinationRule, else VirtualService).
    RuleDel {
        src: usize,
        ns: usize,
        name: usize,
        dr: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let src = 0..SOURCES.len();
    let ns = 0..NAMESPACES.len();
    let host = 0..HOSTS.len();
    prop_oneof![
        6 => (src.clone(), ns.clone(), host.clone(), prop::collection::vec((0..PORTS.len(), 0..PROTOCOLS.len()), 0..3), 0..RESOLUTIONS.len())
            .prop_map(|(src, ns, host, ports, res)| Op::Svc { src, ns, host, ports, res }),
        2 => (src.clone(), ns.clone(), host.clone()).prop_map(|(src, ns, host)| Op::SvcDel { src, ns, host }),
        8 => (
            src.clone(),
            0..6usize,
            0..ADDRESSES.len(),
            prop::collection::vec((ns.clone(), host.clone()), 1..3),
            0..WEIGHTS.len(),
            0..HEALTHS.len(),
            0..LOCALITIES.len(),
            any::<bool>(),
            0..LABELS.len(),
        )
            .prop_map(|(src, key, addr, refs, weight, health, loc, target, label)| Op::Ep { src, key, addr, refs, weight, health, loc, target, label }),
        2 => (src.clone(), 0..6usize).prop_map(|(src, key)| Op::EpDel { src, key }),
        6 => (0..6usize, 0..ADDRESSES.len(), 0..WEIGHTS.len(), 0..HEALTHS.len(), 0..LABELS.len())
            .prop_map(|(key, addr, weight, health, label)| Op::EpAgain { key, addr, weight, health, label }),
        1 => src.clone().prop_map(|src| Op::ResyncStart { src }),
        1 => src.clone().prop_map(|src| Op::ResyncDone { src }),
        3 => (
            src.clone(),
            ns.clone(),
            0..RULE_NAMES.len(),
            prop::collection::vec(0..RULE_HOSTS.len(), 1..3),
            prop::collection::vec((0..DESTS.len(), 0..SUBSETS.len() + 1, 0u32..3), 0..3),
            0..GATEWAYS.len(),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(src, ns, name, hosts, routes, gateways, broken)| Op::Vs { src, ns, name, hosts, routes, gateways, broken }),
        3 => (src.clone(), ns.clone(), 0..RULE_NAMES.len(), 0..DESTS.len(), prop::collection::vec(0..SUBSETS.len(), 0..3), 0..POLICIES.len(), any::<bool>())
            .prop_map(|(src, ns, name, host, subsets, policy, subset_policy)| Op::Dr { src, ns, name, host, subsets, policy, subset_policy }),
        2 => (src, ns, 0..RULE_NAMES.len(), any::<bool>())
            .prop_map(|(src, ns, name, dr)| Op::RuleDel { src, ns, name, dr }),
    ]
}

/// The spec JSON of a VirtualService op.
fn vs_spec(
    hosts: &[usize],
    routes: &[(usize, usize, u32)],
    gateways: usize,
    broken: bool,
) -> String {
    if broken {
        return r#"{"hosts":"not-a-list"}"#.to_string();
    }
    let hosts: Vec<String> = hosts
        .iter()
        .map(|h| format!("{:?}", RULE_HOSTS[*h]))
        .collect();
    let dests: Vec<String> = routes
        .iter()
        .map(|(d, subset, w)| {
            let subset = SUBSETS
                .get(subset.wrapping_sub(1))
                .filter(|_| *subset > 0)
                .map(|s| format!(r#","subset":"{s}""#))
                .unwrap_or_default();
            format!(
                r#"{{"destination":{{"host":"{}"{subset}}},"weight":{}}}"#,
                DESTS[*d],
                w * 50
            )
        })
        .collect();
    // Two destinations also inject a fault: the sidecar listeners then carry
    // the fault filter, and lose it when no such rule is left.
    let fault = if routes.len() == 2 {
        r#","fault":{"abort":{"httpStatus":503,"percentage":{"value":50}}}"#
    } else {
        ""
    };
    // One host also sets a CORS policy: the CORS filter comes and goes the
    // same way, and a route with both a fault and a CORS policy is encoded by
    // hand with its per-filter configs sorted.
    let cors = if hosts.len() == 1 {
        r#","corsPolicy":{"allowOrigins":[{"exact":"https://a.example"}],"maxAge":"1h"}"#
    } else {
        ""
    };
    format!(
        r#"{{"hosts":[{}]{}, "http":[{{"route":[{}]{fault}{cors}}}]}}"#,
        hosts.join(","),
        GATEWAYS[gateways],
        dests.join(",")
    )
}

/// An endpoint op, over more keys than [`op`] uses, so that a long run holds
/// both repeated and distinct keys.
fn endpoint_op() -> impl Strategy<Value = Op> {
    let src = 0..SOURCES.len();
    let (ns, host) = (0..NAMESPACES.len(), 0..HOSTS.len());
    prop_oneof![
        8 => (
            src.clone(),
            0..40usize,
            0..ADDRESSES.len(),
            prop::collection::vec((ns, host), 1..3),
            0..WEIGHTS.len(),
            0..HEALTHS.len(),
            0..LOCALITIES.len(),
            any::<bool>(),
            0..LABELS.len(),
        )
            .prop_map(|(src, key, addr, refs, weight, health, loc, target, label)| Op::Ep { src, key, addr, refs, weight, health, loc, target, label }),
        2 => (src, 0..40usize).prop_map(|(src, key)| Op::EpDel { src, key }),
        6 => (0..40usize, 0..ADDRESSES.len(), 0..WEIGHTS.len(), 0..HEALTHS.len(), 0..LABELS.len())
            .prop_map(|(key, addr, weight, health, label)| Op::EpAgain { key, addr, weight, health, label }),
    ]
}

/// Turns ops into events, giving each source a current resync generation.
fn events(ops: &[Op]) -> Vec<Event> {
    let mut gens = [0u64; SOURCES.len()];
    let mut out = Vec::with_capacity(ops.len());
    // Per key index, the last `Ep` written for it (for `EpAgain`).
    let mut last: HashMap<usize, Op> = HashMap::new();
    for op in ops {
        let again;
        let op = match op {
            Op::EpAgain {
                key,
                addr,
                weight,
                health,
                label,
            } => match last.get(key) {
                Some(Op::Ep {
                    src,
                    refs,
                    loc,
                    target,
                    ..
                }) => {
                    again = Op::Ep {
                        src: *src,
                        key: *key,
                        addr: *addr,
                        refs: refs.clone(),
                        weight: *weight,
                        health: *health,
                        loc: *loc,
                        target: *target,
                        label: *label,
                    };
                    &again
                }
                _ => continue,
            },
            Op::Ep { key, .. } => {
                last.insert(*key, op.clone());
                op
            }
            _ => op,
        };
        let ev = match op {
            Op::Svc {
                src,
                ns,
                host,
                ports,
                res,
            } => {
                let ports = ports
                    .iter()
                    .map(|(p, proto)| {
                        port(&format!("p{}", PORTS[*p]), PORTS[*p], PROTOCOLS[*proto])
                    })
                    .collect();
                svc(
                    SOURCES[*src],
                    gens[*src],
                    NAMESPACES[*ns],
                    HOSTS[*host],
                    ports,
                    RESOLUTIONS[*res],
                )
            }
            Op::SvcDel { src, ns, host } => {
                svc_del(SOURCES[*src], gens[*src], NAMESPACES[*ns], HOSTS[*host])
            }
            Op::Ep {
                src,
                key,
                addr,
                refs,
                weight,
                health,
                loc,
                target,
                label,
            } => {
                let (ns, host) = refs[0];
                let mut e = Ep::new(ADDRESSES[*addr], NAMESPACES[ns], HOSTS[host])
                    .weight(WEIGHTS[*weight])
                    .health(HEALTHS[*health])
                    .locality(LOCALITIES[*loc].0, LOCALITIES[*loc].1);
                e.services = refs
                    .iter()
                    .map(|(n, h)| (NAMESPACES[*n].to_string(), HOSTS[*h].to_string()))
                    .collect();
                if *target {
                    e = e.target("p80", 8080);
                }
                if let Some(v) = LABELS[*label] {
                    e = e.label("v", v).label("app", "x");
                }
                e.upsert(
                    SOURCES[*src],
                    gens[*src],
                    &format!("ep/{}/{key}", SOURCES[*src]),
                )
            }
            Op::EpDel { src, key } => ep_del(
                SOURCES[*src],
                gens[*src],
                &format!("ep/{}/{key}", SOURCES[*src]),
            ),
            Op::ResyncStart { src } => {
                gens[*src] += 1;
                resync(SOURCES[*src], gens[*src], false)
            }
            Op::ResyncDone { src } => resync(SOURCES[*src], gens[*src], true),
            Op::Vs {
                src,
                ns,
                name,
                hosts,
                routes,
                gateways,
                broken,
            } => rule(
                SOURCES[*src],
                gens[*src],
                ConfigKind::VirtualService,
                NAMESPACES[*ns],
                RULE_NAMES[*name],
                &vs_spec(hosts, routes, *gateways, *broken),
            ),
            Op::Dr {
                src,
                ns,
                name,
                host,
                subsets,
                policy,
                subset_policy,
            } => {
                let subsets: Vec<String> = subsets
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let over = if *subset_policy && i == 0 {
                            SUBSET_POLICY
                        } else {
                            ""
                        };
                        format!(
                            r#"{{"name":"{}","labels":{{"v":"{}"}}{over}}}"#,
                            SUBSETS[*s], SUBSETS[*s]
                        )
                    })
                    .collect();
                rule(
                    SOURCES[*src],
                    gens[*src],
                    ConfigKind::DestinationRule,
                    NAMESPACES[*ns],
                    RULE_NAMES[*name],
                    &format!(
                        r#"{{"host":"{}","subsets":[{}]{}}}"#,
                        DESTS[*host],
                        subsets.join(","),
                        POLICIES[*policy]
                    ),
                )
            }
            Op::RuleDel { src, ns, name, dr } => {
                let kind = if *dr {
                    ConfigKind::DestinationRule
                } else {
                    ConfigKind::VirtualService
                };
                rule_del(
                    SOURCES[*src],
                    gens[*src],
                    kind,
                    NAMESPACES[*ns],
                    RULE_NAMES[*name],
                )
            }
            Op::EpAgain { .. } => unreachable!("replaced by the Ep it repeats"),
        };
        out.push(ev);
    }
    out
}

/// What a proxy holds after reporting `view`'s versions on a reconnect:
/// stand-ins, so that the diffs compare versions, not pointers.
fn known_of(view: &ResourceMap) -> ResourceMap {
    view.iter()
        .map(|(n, r)| Arc::new(Resource::stand_in(n.clone(), r.version.clone())))
        .collect()
}

/// Folds `ops` in batches of the given sizes, checking every step.
fn check(ops: &[Op], batch_sizes: &[usize]) -> Result<(), TestCaseError> {
    let evs = events(ops);
    let opts = GenOptions {
        bind_outbound: true,
        ..Default::default()
    };
    let mut generator = Generator::new(opts.clone());
    let mut state = ModelState::default();
    let mut set = ResourceSet::default();
    let mut rest = &evs[..];
    let mut sizes = batch_sizes.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
        let (batch, tail) = rest.split_at(n);
        rest = tail;
        let (next_state, touched, _) = fold_batch(&state, batch);
        check_rule_hosts(&state, &next_state, &touched)?;
        let (next, changes, errors) = generator.regenerate(&set, &next_state, &touched);
        let (reference, ref_errors) = build_all(&next_state, &opts);
        assert_client_rules(&next);
        prop_assert_eq!(
            flatten(&next),
            flatten(&reference),
            "incremental != from scratch after {:?}",
            batch
        );
        prop_assert_eq!(
            &changes,
            &changes_between(&set, &next),
            "change set must name exactly what changed"
        );
        prop_assert_eq!(
            generator.resources_hash(),
            resources_hash(&next),
            "the generator's running hash must be the set's"
        );
        for e in &errors {
            prop_assert!(
                ref_errors.contains(e),
                "incremental error {e} unknown to the reference {ref_errors:?}"
            );
        }
        for pt in [ProxyType::Sidecar, ProxyType::ProxylessGrpc] {
            for t in ResourceType::ALL {
                let known = known_of(resources_for(&set, pt, t));
                let after = resources_for(&next, pt, t);
                let full = diff(after, &known);
                let quick = diff_changed(after, &known, changes.of(t));
                prop_assert_eq!(full, quick, "{:?} {:?}", pt, t);
            }
        }
        assert_vhds_views(&set, &next, &changes);
        state = next_state;
        set = next;
    }
    // Rebuilding the generator from the final model agrees too (startup path).
    let (rebuilt_generator, rebuilt, _) = Generator::build(&state, opts.clone());
    prop_assert_eq!(flatten(&rebuilt), flatten(&set));
    prop_assert_eq!(rebuilt_generator.resources_hash(), resources_hash(&set));
    Ok(())
}

/// What a host's rules are in a state, compared across a batch: the winning
/// VirtualService (key and spec) and DestinationRule.
type HostRules = (
    Option<(Arc<str>, Arc<VirtualService>)>,
    Option<Arc<DestinationRule>>,
);

/// The [`HostRules`] of `h` in `st`.
fn rules_of(st: &ModelState, h: &Hostname) -> HostRules {
    let vs = st
        .rules()
        .virtual_service_for(h)
        .map(|b| (b.rule.key.clone(), b.spec.clone()));
    (vs, st.rules().destination_rule_for(h))
}

/// `Touched::rule_hosts` (with `services`) names every served host whose
/// winning rules changed, and every host whose VirtualService routes to a host
/// whose service or DestinationRule changed; and the index equals the one a
/// rebuild from the raw configs makes.
fn check_rule_hosts(
    before: &ModelState,
    after: &ModelState,
    touched: &Touched,
) -> Result<(), TestCaseError> {
    let rebuilt = after.rebuild();
    prop_assert_eq!(after.rules(), rebuilt.rules(), "rule index != rebuilt");
    let named = |h: &Hostname| touched.rule_hosts.contains(h) || touched.services.contains(h);
    for svc in after.services() {
        let h = &svc.hostname;
        let (vs0, dr0) = rules_of(before, h);
        let (vs1, dr1) = rules_of(after, h);
        if vs0 != vs1 || dr0 != dr1 {
            prop_assert!(
                named(h),
                "rules of {} changed but it is not touched: {:?}",
                h,
                touched
            );
        }
        if let Some((_, vs)) = &vs1 {
            let ns = &after
                .rules()
                .virtual_service_for(h)
                .map(|b| b.rule.namespace.clone())
                .unwrap_or_default();
            for d in vs
                .http
                .iter()
                .flatten()
                .flat_map(|r| r.route.iter().flatten())
            {
                let Some(dh) = d.destination.as_ref().and_then(|d| d.host.as_deref()) else {
                    continue;
                };
                let dh = resolve_host(dh, ns);
                let dest_changed = touched.services.contains(&dh)
                    || rules_of(before, &dh).1 != rules_of(after, &dh).1;
                if dest_changed {
                    prop_assert!(
                        named(h),
                        "{} routes to {} which changed, but is not touched",
                        h,
                        dh
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn incremental_equals_from_scratch(
        ops in prop::collection::vec(op(), 1..60),
        sizes in prop::collection::vec(1usize..8, 1..6),
    ) {
        check(&ops, &sizes)?;
    }

    /// Batches as live ones are: a run of 64 or more endpoint events (which the
    /// fold applies by key hash) inside one batch, between random histories.
    #[test]
    fn incremental_equals_from_scratch_with_long_endpoint_runs(
        head in prop::collection::vec(op(), 1..30),
        run in prop::collection::vec(endpoint_op(), 64..130),
        tail in prop::collection::vec(op(), 0..20),
        sizes in prop::collection::vec(160usize..256, 1..3),
    ) {
        let ops: Vec<Op> = head.into_iter().chain(run).chain(tail).collect();
        check(&ops, &sizes)?;
    }
}
