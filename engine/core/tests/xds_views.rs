//! Sidecar-scoped views updated incrementally equal the views derived from
//! scratch, byte for byte, for random histories folded by the real fold:
//! services moving between namespaces, endpoints, VirtualServices (one with a
//! fault, so listeners change), DestinationRules with subsets, and Sidecars
//! added, edited (hosts, outbound mode, selector), broken and deleted. Also:
//! each view's change log names exactly what changed in it, its clusters and
//! assignments are the global resources themselves, and the step reports a
//! change whenever some view changed. Gateway views likewise: Gateways with
//! nested, empty and unrelated selectors added, edited and deleted, and
//! VirtualServices bound to them; each set's view equals its rebuild, its log
//! is exact, its clusters and assignments are the global maps, and a router's
//! key names the view of exactly the Gateways selecting it. VirtualServices
//! carry random `exportTo` (`.`, other namespaces, `*`, `~`), competing for
//! one host, so sidecars move between visibility classes, alone and combined
//! with Sidecars; ServiceEntry objects with random `exportTo` hide their
//! hosts from the other namespaces; VirtualServices with `sourceLabels`
//! match blocks key sidecars by the selectors their labels satisfy.
//! DestinationRules of every namespace carry random `exportTo` too: a view
//! whose restricted DestinationRule wins for a host builds that host's
//! clusters and assignments itself, and only those.

mod xds_support;
mod xds_views_check;

use std::sync::Arc;

use deltapilot_model::state::ModelState;
use deltapilot_model::{Proxy, ProxyType};
use deltapilot_proto::ConfigKind;
use deltapilot_proto::Event;
use deltapilot_xds::generate::{GenOptions, Generator, changes_between};
use deltapilot_xds::view::{ViewKey, Views};
use deltapilot_xds::{ResourceSet, ResourceType};
use proptest::prelude::*;
use xds_support::*;
use xds_views_check::{check_views, map_changes};

const NAMESPACES: [&str; 3] = ["ns1", "ns2", "istio-system"];
const HOSTS: [&str; 4] = [
    "a.ns1.svc.cluster.local",
    "a.ns2.svc.cluster.local",
    "b.ns1.svc.cluster.local",
    "api.example.com",
];
const PORTS: [u32; 3] = [80, 9090, 3306];
const PROTOCOLS: [Protocol; 3] = [Protocol::Http, Protocol::Grpc, Protocol::Tcp];
const EGRESS: [&str; 9] = [
    "./*",
    "ns1/*",
    "*/api.example.com",
    "ns2/a.ns2.svc.cluster.local",
    "*/*",
    "*/*.example.com",
    "~/*",
    "istio-system/*",
    "bad-no-namespace",
];
const MODES: [&str; 3] = [
    "",
    r#","outboundTrafficPolicy":{"mode":"REGISTRY_ONLY"}"#,
    r#","outboundTrafficPolicy":{"mode":"ALLOW_ANY"}"#,
];
const SIDECARS: [&str; 2] = ["s0", "s1"];
/// Match blocks of a VirtualService's route (first: none).
const SOURCES: [&str; 5] = [
    "",
    r#""match":[{"sourceLabels":{"app":"x"}}],"#,
    r#""match":[{"sourceLabels":{"app":"x","v":"1"}},{"uri":{"prefix":"/b"},"gateways":["mesh"]}],"#,
    r#""match":[{"sourceLabels":{"v":"1"}},{"sourceLabels":{"app":"y"}}],"#,
    r#""match":[{"sourceNamespace":"ns2"},{"sourceNamespace":"ns1","sourceLabels":{"app":"x"}}],"#,
];
/// `exportTo` of a VirtualService (first: none, public).
const EXPORTS: [&str; 6] = [
    "",
    r#","exportTo":["."]"#,
    r#","exportTo":["ns2"]"#,
    r#","exportTo":["ns1","ns2"]"#,
    r#","exportTo":["*"]"#,
    r#","exportTo":["~"]"#,
];
const GATEWAYS: [&str; 2] = ["g0", "g1"];
/// Gateway selectors: empty (every router), a family, a narrower member of
/// it, and an unrelated one.
const GW_SELECTORS: [&str; 4] = [
    "{}",
    r#"{"istio":"ingressgateway"}"#,
    r#"{"istio":"ingressgateway","zone":"a"}"#,
    r#"{"app":"other"}"#,
];

#[derive(Debug, Clone)]
enum Op {
    Svc {
        ns: usize,
        host: usize,
        ports: Vec<(usize, usize)>,
    },
    SvcDel {
        ns: usize,
        host: usize,
    },
    Ep {
        key: usize,
        host: usize,
        ns: usize,
    },
    Vs {
        host: usize,
        dest: usize,
        fault: bool,
        name: usize,
        export: usize,
        source: usize,
    },
    Dr {
        host: usize,
        subsets: bool,
        ns: usize,
        export: usize,
    },
    Sidecar {
        ns: usize,
        name: usize,
        hosts: Vec<usize>,
        mode: usize,
        selector: bool,
    },
    SidecarDel {
        ns: usize,
        name: usize,
    },
    Gateway {
        ns: usize,
        name: usize,
        selector: usize,
        port: usize,
        https_redirect: bool,
    },
    GatewayDel {
        ns: usize,
        name: usize,
    },
    GwVs {
        host: usize,
        dest: usize,
        prefix: bool,
        export: usize,
    },
    /// A ServiceEntry object naming a host (its service comes from `Svc`):
    /// only its `exportTo` matters to the views.
    Se {
        ns: usize,
        host: usize,
        export: usize,
    },
    SeDel {
        ns: usize,
        host: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let ns = 0..NAMESPACES.len();
    let host = 0..HOSTS.len();
    prop_oneof![
        5 => (ns.clone(), host.clone(), prop::collection::vec((0..PORTS.len(), 0..PROTOCOLS.len()), 0..3))
            .prop_map(|(ns, host, ports)| Op::Svc { ns, host, ports }),
        1 => (ns.clone(), host.clone()).prop_map(|(ns, host)| Op::SvcDel { ns, host }),
        4 => (0..5usize, host.clone(), ns.clone()).prop_map(|(key, host, ns)| Op::Ep { key, host, ns }),
        3 => (host.clone(), host.clone(), any::<bool>(), 0..2usize, 0..EXPORTS.len(), 0..SOURCES.len())
            .prop_map(|(host, dest, fault, name, export, source)| Op::Vs { host, dest, fault, name, export, source }),
        2 => (host, any::<bool>(), ns.clone(), 0..EXPORTS.len())
            .prop_map(|(host, subsets, ns, export)| Op::Dr { host, subsets, ns, export }),
        4 => (ns.clone(), 0..SIDECARS.len(), prop::collection::vec(0..EGRESS.len(), 0..3), 0..MODES.len(), prop::bool::weighted(0.3))
            .prop_map(|(ns, name, hosts, mode, selector)| Op::Sidecar { ns, name, hosts, mode, selector }),
        1 => (ns.clone(), 0..SIDECARS.len()).prop_map(|(ns, name)| Op::SidecarDel { ns, name }),
        3 => (ns.clone(), 0..GATEWAYS.len(), 0..GW_SELECTORS.len(), 0..PORTS.len(), any::<bool>())
            .prop_map(|(ns, name, selector, port, https_redirect)| Op::Gateway { ns, name, selector, port, https_redirect }),
        1 => (ns, 0..GATEWAYS.len()).prop_map(|(ns, name)| Op::GatewayDel { ns, name }),
        2 => (0..HOSTS.len(), 0..HOSTS.len(), any::<bool>(), 0..EXPORTS.len())
            .prop_map(|(host, dest, prefix, export)| Op::GwVs { host, dest, prefix, export }),
        2 => (0..NAMESPACES.len(), 0..HOSTS.len(), 0..EXPORTS.len())
            .prop_map(|(ns, host, export)| Op::Se { ns, host, export }),
        1 => (0..NAMESPACES.len(), 0..HOSTS.len()).prop_map(|(ns, host)| Op::SeDel { ns, host }),
    ]
}

fn event_of(op: &Op) -> Event {
    match op {
        Op::Svc { ns, host, ports } => svc(
            "src",
            0,
            NAMESPACES[*ns],
            HOSTS[*host],
            ports
                .iter()
                .map(|(p, pr)| port(&format!("p{}", PORTS[*p]), PORTS[*p], PROTOCOLS[*pr]))
                .collect(),
            Resolution::StaticEndpoints,
        ),
        Op::SvcDel { ns, host } => svc_del("src", 0, NAMESPACES[*ns], HOSTS[*host]),
        Op::Ep { key, host, ns } => {
            Ep::new(&format!("10.0.0.{key}"), NAMESPACES[*ns], HOSTS[*host])
                .label("v", "v1")
                .upsert("src", 0, &format!("ep/{key}"))
        }
        Op::Vs {
            host,
            dest,
            fault,
            name,
            export,
            source,
        } => {
            let fault = if *fault {
                r#","fault":{"abort":{"httpStatus":503,"percentage":{"value":50}}}"#
            } else {
                ""
            };
            rule(
                "src",
                0,
                ConfigKind::VirtualService,
                "ns1",
                &format!("vs{name}-{host}"),
                &format!(
                    r#"{{"hosts":["{}"],"http":[{{{}"route":[{{"destination":{{"host":"{}"}}}}]{fault}}}]{}}}"#,
                    HOSTS[*host], SOURCES[*source], HOSTS[*dest], EXPORTS[*export]
                ),
            )
        }
        Op::Dr {
            host,
            subsets,
            ns,
            export,
        } => {
            let subsets = if *subsets {
                r#","subsets":[{"name":"v1","labels":{"v":"v1"}}]"#
            } else {
                r#","trafficPolicy":{"loadBalancer":{"simple":"LEAST_REQUEST"}}"#
            };
            rule(
                "src",
                0,
                ConfigKind::DestinationRule,
                NAMESPACES[*ns],
                &format!("dr{host}"),
                &format!(
                    r#"{{"host":"{}"{subsets}{}}}"#,
                    HOSTS[*host], EXPORTS[*export]
                ),
            )
        }
        Op::Sidecar {
            ns,
            name,
            hosts,
            mode,
            selector,
        } => {
            let hosts: Vec<String> = hosts.iter().map(|h| format!("{:?}", EGRESS[*h])).collect();
            let selector = if *selector {
                r#","workloadSelector":{"labels":{"app":"x"}}"#
            } else {
                ""
            };
            rule(
                "src",
                0,
                ConfigKind::Sidecar,
                NAMESPACES[*ns],
                SIDECARS[*name],
                // No hosts: half the time an egress listener without hosts
                // (rejected), else no egress at all (every host visible).
                &if hosts.is_empty() && *mode > 0 {
                    format!(r#"{{"egress":[]{}{selector}}}"#, MODES[*mode])
                } else {
                    format!(
                        r#"{{"egress":[{{"hosts":[{}]}}]{}{selector}}}"#,
                        hosts.join(","),
                        MODES[*mode]
                    )
                },
            )
        }
        Op::Gateway {
            ns,
            name,
            selector,
            port,
            https_redirect,
        } => rule(
            "src",
            0,
            ConfigKind::Gateway,
            NAMESPACES[*ns],
            GATEWAYS[*name],
            &format!(
                r#"{{"selector":{},"servers":[{{"port":{{"number":{},"name":"http","protocol":"HTTP"}},"hosts":["*/*"]{}}}]}}"#,
                GW_SELECTORS[*selector],
                PORTS[*port],
                if *https_redirect {
                    r#","tls":{"httpsRedirect":true}"#
                } else {
                    ""
                }
            ),
        ),
        Op::GatewayDel { ns, name } => rule_del(
            "src",
            0,
            ConfigKind::Gateway,
            NAMESPACES[*ns],
            GATEWAYS[*name],
        ),
        Op::GwVs {
            host,
            dest,
            prefix,
            export,
        } => rule(
            "src",
            0,
            ConfigKind::VirtualService,
            "ns2",
            &format!("gwvs{host}"),
            &format!(
                r#"{{"hosts":["{}"],"gateways":["ns1/g0","ns2/g1","istio-system/g0"],"http":[{{"match":[{{"uri":{{"prefix":"/{}"}}}}],"route":[{{"destination":{{"host":"{}","port":{{"number":80}}}}}}]}}]{}}}"#,
                HOSTS[*host],
                if *prefix { "api" } else { "" },
                HOSTS[*dest],
                EXPORTS[*export]
            ),
        ),
        Op::Se { ns, host, export } => rule(
            "src",
            0,
            ConfigKind::ServiceEntry,
            NAMESPACES[*ns],
            &format!("se{host}"),
            &format!(r#"{{"hosts":["{}"]{}}}"#, HOSTS[*host], EXPORTS[*export]),
        ),
        Op::SeDel { ns, host } => rule_del(
            "src",
            0,
            ConfigKind::ServiceEntry,
            NAMESPACES[*ns],
            &format!("se{host}"),
        ),
        Op::SidecarDel { ns, name } => rule_del(
            "src",
            0,
            ConfigKind::Sidecar,
            NAMESPACES[*ns],
            SIDECARS[*name],
        ),
    }
}

fn check(ops: &[Op], batch: usize) -> Result<(), TestCaseError> {
    let evs: Vec<Event> = ops.iter().map(event_of).collect();
    let opts = GenOptions {
        bind_outbound: true,
        ..Default::default()
    };
    let mut generator = Generator::new(opts.clone());
    let mut state = ModelState::default();
    let mut set = ResourceSet::default();
    let mut views = Views::default();
    let mut seq = 0u64;
    for chunk in evs.chunks(batch.max(1)) {
        let (next_state, touched, _) = fold_batch(&state, chunk);
        let (next, changes, _) = generator.regenerate(&set, &next_state, &touched);
        let (next_views, changed) =
            views.update(&next_state, &next, &changes, &touched, &opts, seq + 1);
        if !changes.is_empty() || changed {
            seq += 1;
        }
        check_views(&next_views, &next_state, &next, &opts)?;
        let mut any = views.len() != next_views.len();
        for (k, v) in next_views.iter() {
            match views.get(&k.0, &k.1, &k.2) {
                Some(old) if old.rule == v.rule => {
                    let log = v.changes_since(seq.saturating_sub(1), seq);
                    let want = changes_between(&old.resources, &v.resources);
                    any |= !want.is_empty();
                    if changed {
                        prop_assert_eq!(
                            log,
                            Some(want),
                            "view {:?} change log after {:?}",
                            k,
                            chunk
                        );
                    } else {
                        prop_assert!(want.is_empty(), "view {:?} changed unreported", k);
                    }
                }
                _ => any = true,
            }
        }
        let mut gw_any = views.gateways().count() != next_views.gateways().count();
        for (k, v) in next_views.gateways() {
            match views.gateway(&k.0, &k.1) {
                Some(old) => {
                    let mut want = deltapilot_xds::ChangeSet::default();
                    for t in ResourceType::ALL {
                        *want.of_mut(t) = map_changes(old.map(t), v.map(t));
                    }
                    gw_any |= !want.is_empty();
                    if changed {
                        let log = v.changes_since(seq.saturating_sub(1), seq);
                        prop_assert_eq!(
                            log,
                            Some(want),
                            "gateway view {:?} change log after {:?}",
                            k,
                            chunk
                        );
                    } else {
                        prop_assert!(want.is_empty(), "gateway view {:?} changed unreported", k);
                    }
                }
                None => gw_any = true,
            }
        }
        any |= gw_any;
        prop_assert!(!any || changed, "a view changed but the step says none did");
        // A router's key names a gateway view exactly when Gateways select it,
        // and that view carries no sidecar outbound listener.
        for labels in [
            &[][..],
            &[("istio", "ingressgateway")][..],
            &[("istio", "ingressgateway"), ("zone", "a")][..],
            // Unrelated selectors combined: a set no single selector yields.
            &[("istio", "ingressgateway"), ("zone", "a"), ("app", "other")][..],
            &[("istio", "ingressgateway"), ("app", "other")][..],
        ] {
            let mut p = Proxy {
                namespace: Arc::from("istio-system"),
                proxy_type: ProxyType::Router,
                ..Default::default()
            };
            for (k, v) in labels {
                p.labels.insert(Arc::from(*k), Arc::from(*v));
            }
            let selecting = next_state
                .rules()
                .gateways_selecting("istio-system", &p.labels, false);
            match next_views.key_for(&p, &next_state) {
                ViewKey::Gateway { gateways, visible } => {
                    prop_assert_eq!(&*gateways, &selecting[..]);
                    let v = next_views
                        .gateway(&gateways, &visible)
                        .expect("the key's view exists");
                    for (n, r) in v.listeners.iter() {
                        prop_assert!(
                            !set_has_same(&next.sidecar_listeners, n, r),
                            "gateway view {:?} carries sidecar listener {}",
                            gateways,
                            n
                        );
                    }
                }
                ViewKey::Default(ProxyType::Router) => prop_assert!(
                    selecting.is_empty(),
                    "selected by {:?} but no view",
                    selecting
                ),
                k => prop_assert!(false, "router key {:?}", k),
            }
        }
        // Every proxy's key names a view that exists.
        for (ns, labels) in NAMESPACES.iter().flat_map(|ns| {
            [
                &[("app", "x")][..],
                &[("app", "x"), ("v", "1")][..],
                &[("v", "1")][..],
                &[][..],
            ]
            .map(|l| (*ns, l))
        }) {
            let mut p = Proxy {
                namespace: Arc::from(ns),
                proxy_type: ProxyType::Sidecar,
                ..Default::default()
            };
            for (k, v) in labels {
                p.labels.insert(Arc::from(*k), Arc::from(*v));
            }
            let want = next_state.rules().visible_from(ns);
            let mut with_ns = p.labels.clone();
            with_ns.insert(Arc::from(":namespace"), Arc::from(ns));
            let want_sources = next_state.rules().sources_matching(&with_ns);
            match next_views.key_for(&p, &next_state) {
                ViewKey::Sidecar {
                    sidecar,
                    visible,
                    sources,
                } => {
                    prop_assert!(next_views.get(&sidecar, &visible, &sources).is_some());
                    prop_assert_eq!(&*visible, &want[..], "the key carries its class");
                    prop_assert_eq!(&*sources, &want_sources[..], "and its selectors");
                }
                ViewKey::Default(ProxyType::Sidecar) => prop_assert!(
                    want.is_empty()
                        && want_sources.is_empty()
                        && !next_state.rules().has_restricted_entries(),
                    "{} sees {:?} but has the default view",
                    ns,
                    want
                ),
                k => prop_assert!(false, "sidecar key {:?}", k),
            }
        }
        state = next_state;
        set = next;
        views = next_views;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn scoped_views_updated_incrementally_equal_rebuilt_ones(
        ops in prop::collection::vec(op(), 1..40),
        batch in 1usize..4,
    ) {
        check(&ops, batch)?;
    }
}
