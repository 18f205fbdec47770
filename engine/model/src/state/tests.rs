//! Unit tests of the state: merge rule, union index, query API, hash and rebuild.
//! States are built by folding events (see `mk`).

use std::net::IpAddr;
use std::sync::Arc;

use super::mk::*;
use super::*;
use crate::model::{LabelSelector, Proxy, ProxyType};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn keys(it: impl Iterator<Item = Endpoint>) -> Vec<String> {
    it.map(|e| e.key.to_string()).collect()
}

#[test]
fn lowest_source_wins_a_shared_hostname_and_the_next_takes_over() {
    let st = ModelState::from_events(&[
        svc("k8s", 0, "ns", "a.svc", &[80]),
        svc("eureka", 0, "ns", "a.svc", &[8080]),
        svc("k8s", 0, "other", "a.svc", &[90]),
    ]);
    let defs = st.service_definitions("a.svc");
    let order: Vec<(&str, &str)> = defs.iter().map(|(s, d)| (&**s, &*d.namespace)).collect();
    assert_eq!(order, [("eureka", "ns"), ("k8s", "ns"), ("k8s", "other")]);
    let won = st.get_service("a.svc").expect("merged");
    assert_eq!(won.ports[0].number, 8080, "eureka < k8s");

    let after = ModelState::from_events(&[
        svc("k8s", 0, "ns", "a.svc", &[80]),
        svc("eureka", 0, "ns", "a.svc", &[8080]),
        svc("k8s", 0, "other", "a.svc", &[90]),
        svc_del("eureka", 0, "ns", "a.svc"),
    ]);
    assert_eq!(
        after.get_service("a.svc").expect("merged").ports[0].number,
        80
    );
    assert_eq!(after.counts().service_definitions, 2);
}

#[test]
fn merge_outcome_does_not_depend_on_arrival_order() {
    let a =
        ModelState::from_events(&[svc("s2", 0, "ns", "h", &[1]), svc("s1", 0, "ns", "h", &[2])]);
    let b =
        ModelState::from_events(&[svc("s1", 0, "ns", "h", &[2]), svc("s2", 0, "ns", "h", &[1])]);
    assert_eq!(a, b);
    assert_eq!(a.hash(), b.hash());
    assert_eq!(a.get_service("h").expect("h").ports[0].number, 2);
}

#[test]
fn endpoints_are_the_union_over_sources_and_sorted_on_request() {
    let st = ModelState::from_events(&[
        svc("a", 0, "ns", "h", &[80]),
        svc("b", 0, "ns", "h", &[80]),
        ep("b", 0, "ep/b/2", "10.0.0.2", &["h"]),
        ep("a", 0, "ep/a/1", "10.0.0.1", &["h"]),
        ep("a", 0, "ep/a/3", "10.0.0.3", &["h", "other"]),
    ]);
    assert_eq!(
        keys(st.endpoints_of_sorted("h").into_iter()),
        ["ep/a/1", "ep/a/3", "ep/b/2"]
    );
    let mut by_hash = keys(st.endpoints_of("h"));
    by_hash.sort();
    assert_eq!(
        by_hash,
        ["ep/a/1", "ep/a/3", "ep/b/2"],
        "the same, unsorted"
    );
    assert_eq!(
        keys(st.endpoints_of("other")),
        ["ep/a/3"],
        "indexed under every hostname it names"
    );
    assert_eq!(st.endpoint_count("h"), 3);
}

#[test]
fn instances_by_port_filters_by_selector_and_port() {
    let st = ModelState::from_events(&[
        svc("a", 0, "ns", "h", &[80, 90]),
        ep_labeled("a", 0, "ep/1", "10.0.0.1", &["h"], &[("version", "v1")]),
        ep_labeled("a", 0, "ep/2", "10.0.0.2", &["h"], &[("version", "v2")]),
    ]);
    let all = st.instances_by_port("h", 90, &[]);
    assert_eq!(all.len(), 2);
    assert_eq!(
        st.instances_by_port("h", 90, &[LabelSelector::default()])
            .len(),
        2,
        "an empty selector matches every instance"
    );
    assert!(
        all.iter()
            .all(|i| i.service_port.number == 90 && i.target_port == 90)
    );
    let sel = LabelSelector(
        [(Arc::from("version"), Arc::from("v2"))]
            .into_iter()
            .collect(),
    );
    let v2 = st.instances_by_port("h", 80, std::slice::from_ref(&sel));
    assert_eq!(v2.len(), 1);
    assert_eq!(&*v2[0].endpoint.key, "ep/2");
    let v3 = LabelSelector(
        [(Arc::from("version"), Arc::from("v3"))]
            .into_iter()
            .collect(),
    );
    assert!(
        st.instances_by_port("h", 80, std::slice::from_ref(&v3))
            .is_empty()
    );
    let either: Vec<String> = st
        .instances_by_port("h", 80, &[v3, sel.clone()])
        .iter()
        .map(|i| i.endpoint.key.to_string())
        .collect();
    assert_eq!(either, ["ep/2"], "any one selector matching is enough");
    assert!(
        st.instances_by_port("h", 81, std::slice::from_ref(&sel))
            .is_empty(),
        "no such port"
    );
    assert!(st.instances_by_port("nope", 80, &[sel]).is_empty());
}

#[test]
fn proxy_service_instances_match_ips_and_exclude_routers() {
    let st = ModelState::from_events(&[
        svc("a", 0, "ns", "b.svc", &[80]),
        svc("a", 0, "ns", "a.svc", &[9090, 80]),
        ep("a", 0, "ep/1", "10.0.0.1", &["a.svc", "b.svc"]),
        ep("a", 0, "ep/2", "10.0.0.2", &["a.svc"]),
    ]);
    let proxy = Proxy {
        ips: vec![ip("10.0.0.1")],
        ..Default::default()
    };
    let got: Vec<(String, u16)> = st
        .proxy_service_instances(&proxy)
        .iter()
        .map(|i| (i.service.hostname.to_string(), i.service_port.number))
        .collect();
    assert_eq!(
        got,
        [
            ("a.svc".into(), 80),
            ("a.svc".into(), 9090),
            ("b.svc".into(), 80)
        ]
    );
    let router = Proxy {
        proxy_type: ProxyType::Router,
        ..proxy
    };
    assert!(st.proxy_service_instances(&router).is_empty());
}

#[test]
fn management_ports_come_from_the_workload_label() {
    let st = ModelState::from_events(&[
        svc("a", 0, "ns", "h", &[80]),
        ep_labeled(
            "a",
            0,
            "ep/1",
            "10.0.0.1",
            &["h"],
            &[(MANAGEMENT_PORTS_LABEL, "9090_8081_x_0")],
        ),
        ep_labeled(
            "a",
            0,
            "ep/2",
            "10.0.0.1",
            &["h"],
            &[(MANAGEMENT_PORTS_LABEL, "8081")],
        ),
    ]);
    let ports: Vec<(u16, String)> = st
        .management_ports(ip("10.0.0.1"))
        .into_iter()
        .map(|p| (p.number, p.name.to_string()))
        .collect();
    assert_eq!(
        ports,
        [
            (8081, "mgmt-8081-tcp".into()),
            (9090, "mgmt-9090-tcp".into())
        ]
    );
    assert!(st.management_ports(ip("10.0.0.9")).is_empty());
}

#[test]
fn moving_an_endpoint_updates_address_and_host_indexes() {
    let st = ModelState::from_events(&[
        svc("a", 0, "ns", "h1", &[80]),
        svc("a", 0, "ns", "h2", &[80]),
        ep("a", 0, "ep/1", "10.0.0.1", &["h1"]),
        ep("a", 0, "ep/1", "10.0.0.2", &["h2"]),
    ]);
    assert_eq!(st.endpoints_of("h1").count(), 0);
    assert_eq!(keys(st.endpoints_of("h2")), ["ep/1"]);
    assert_eq!(st.endpoints_at(ip("10.0.0.1")).count(), 0);
    assert_eq!(keys(st.endpoints_at(ip("10.0.0.2"))), ["ep/1"]);
    assert_eq!(st, st.rebuild());
}

/// The address index is built when first asked for and never answers for
/// another state: a state queried before a change keeps its answers, the
/// changed state (which shared the built index until the change) answers
/// anew, and so does a state loaded in bulk (a checkpoint restore).
#[test]
fn address_queries_follow_every_change_after_the_index_was_built() {
    let base = ModelState::from_events(&[
        svc("a", 0, "ns", "h1", &[80]),
        ep("a", 0, "ep/1", "10.0.0.1", &["h1"]),
        ep("a", 0, "ep/2", "10.0.0.2", &["h1"]),
    ]);
    assert_eq!(keys(base.endpoints_at(ip("10.0.0.1"))), ["ep/1"]);
    let pos = |offset| deltapilot_types::RecordPos {
        partition: 0,
        offset,
    };
    let changes = [
        (pos(3), ep("a", 0, "ep/1", "10.0.0.3", &["h1"])),
        (pos(4), ep("a", 0, "ep/3", "10.0.0.1", &["h1"])),
        (pos(5), ep_del("a", 0, "ep/2")),
    ];
    let after = crate::fold::fold(&base, &changes).state;
    assert_eq!(keys(base.endpoints_at(ip("10.0.0.1"))), ["ep/1"]);
    assert_eq!(keys(base.endpoints_at(ip("10.0.0.2"))), ["ep/2"]);
    assert_eq!(base.endpoints_at(ip("10.0.0.3")).count(), 0);
    assert_eq!(keys(after.endpoints_at(ip("10.0.0.1"))), ["ep/3"]);
    assert_eq!(after.endpoints_at(ip("10.0.0.2")).count(), 0);
    assert_eq!(keys(after.endpoints_at(ip("10.0.0.3"))), ["ep/1"]);

    // Only a weight changes: the built index stays shared, and right.
    let mut reweighted = ep("a", 0, "ep/3", "10.0.0.1", &["h1"]);
    if let Some(deltapilot_proto::event::Payload::EndpointUpsert(u)) = &mut reweighted.payload
        && let Some(e) = &mut u.endpoint
    {
        e.weight = 9;
    }
    let later = crate::fold::fold(&after, &[(pos(6), reweighted)]).state;
    assert_eq!(keys(later.endpoints_at(ip("10.0.0.1"))), ["ep/3"]);
    assert_eq!(
        later
            .endpoints_at(ip("10.0.0.1"))
            .next()
            .expect("one")
            .weight,
        9
    );

    let mut loaded = ModelState::default();
    loaded.load_endpoints(
        after
            .raw_endpoints()
            .map(|(_, w)| (w.source.clone(), w.generation, (*w.value).clone()))
            .collect(),
    );
    for a in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
        assert_eq!(
            keys(loaded.endpoints_at(ip(a))),
            keys(after.endpoints_at(ip(a))),
            "{a}"
        );
    }
}

#[test]
fn equal_entity_sets_hash_equal_whatever_the_history() {
    let direct = ModelState::from_events(&[
        svc("a", 0, "ns", "h", &[80]),
        ep("a", 0, "ep/1", "10.0.0.1", &["h"]),
    ]);
    let winding = ModelState::from_events(&[
        svc("a", 0, "ns", "h", &[81]),
        ep("a", 0, "ep/2", "10.0.0.2", &["h"]),
        ep("a", 0, "ep/1", "10.0.0.9", &["h"]),
        svc("a", 0, "ns", "h", &[80]),
        ep_del("a", 0, "ep/2"),
        ep("a", 0, "ep/1", "10.0.0.1", &["h"]),
        cfg("a", 0, "vs", "{}"),
        cfg_del("a", 0, "vs"),
    ]);
    assert_eq!(direct, winding);
    assert_eq!(direct.hash(), winding.hash());
    assert_eq!(winding.hash(), winding.recompute_hash());
    assert_ne!(direct.hash(), ModelState::default().hash());
}

#[test]
fn generation_is_part_of_the_state() {
    let g1 = ModelState::from_events(&[svc("a", 1, "ns", "h", &[80])]);
    let g2 = ModelState::from_events(&[svc("a", 2, "ns", "h", &[80])]);
    assert_ne!(g1.hash(), g2.hash());
    assert_eq!(g1.get_service("h"), g2.get_service("h"));
}

#[test]
fn configs_are_listed_by_key() {
    let st = ModelState::from_events(&[cfg("a", 0, "b", "{}"), cfg("a", 0, "a", r#"{"x":1}"#)]);
    let names: Vec<&str> = st.configs().map(|c| &*c.name).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(st.counts().configs, 2);
}

/// The address index's key orders and equates addresses as `IpAddr` does:
/// IPv4 before IPv6, an IPv4-mapped IPv6 address distinct from its IPv4 one.
#[test]
fn address_keys_order_as_addresses_do() {
    let addrs: Vec<IpAddr> = [
        "0.0.0.0",
        "9.255.255.255",
        "10.0.0.1",
        "10.0.0.2",
        "10.0.1.0",
        "255.255.255.255",
        "::",
        "::ffff:10.0.0.1",
        "fd00::1",
        "fd00::1:0",
        "ffff::",
    ]
    .iter()
    .map(|a| a.parse().expect("address"))
    .collect();
    for a in &addrs {
        for b in &addrs {
            assert_eq!(
                AddrKey::of(*a).cmp(&AddrKey::of(*b)),
                a.cmp(b),
                "{a} vs {b}"
            );
        }
    }
}

/// Hash keys order as the 128-bit hashes they split, and a map entry of a key
/// and a pointer stays 24 bytes (the reason they are split); an endpoint
/// record's entry is 104 bytes (a fold copies every leaf it writes into, so
/// a record grown by a field makes every write dearer).
#[test]
fn hash_keys_order_as_their_128_bit_hashes() {
    let texts: Vec<String> = (0..500).map(|i| format!("ep/{i}")).collect();
    let mut by_key: Vec<&String> = texts.iter().collect();
    by_key.sort_by_key(|t| HKey::of(t));
    let mut by_hash: Vec<&String> = texts.iter().collect();
    by_hash.sort_by_key(|t| xxhash_rust::xxh3::xxh3_128(t.as_bytes()));
    assert_eq!(by_key, by_hash);
    assert_eq!(std::mem::size_of::<(HKey, Arc<str>)>(), 32);
    assert_eq!(std::mem::size_of::<(HKey, Arc<Endpoint>)>(), 24);
    assert_eq!(std::mem::size_of::<(HKey, Hot)>(), 96);
}

/// An endpoint is listed under each hostname it names, with its current
/// shape, and found by key through its first hostname: through a shape change
/// that keeps its hostnames, one that drops its first hostname, and a delete.
/// Each step equals a rebuild (which lists it from scratch).
#[test]
fn an_endpoint_of_several_hostnames_is_listed_under_each_with_its_shape() {
    let labels = |st: &ModelState, host: &str| -> Vec<String> {
        st.endpoints_of(host)
            .map(|e| e.labels.get("v").map_or("-".to_string(), |v| v.to_string()))
            .collect()
    };
    let mut st = ModelState::from_events(&[
        svc("a", 0, "ns", "h1", &[80]),
        svc("a", 0, "ns", "h2", &[80]),
        svc("a", 0, "ns", "h3", &[80]),
        ep_labeled("a", 0, "ep/1", "10.0.0.1", &["h1", "h2"], &[("v", "1")]),
    ]);
    let steps: [(deltapilot_proto::Event, [&[&str]; 3]); 3] = [
        (
            ep_labeled("a", 0, "ep/1", "10.0.0.1", &["h1", "h2"], &[("v", "2")]),
            [&["2"], &["2"], &[]],
        ),
        (
            ep_labeled("a", 0, "ep/1", "10.0.0.1", &["h2", "h3"], &[("v", "3")]),
            [&[], &["3"], &["3"]],
        ),
        (ep_del("a", 0, "ep/1"), [&[], &[], &[]]),
    ];
    for (i, (event, want)) in steps.into_iter().enumerate() {
        let deleted = matches!(
            event.payload,
            Some(deltapilot_proto::event::Payload::EndpointDelete(_))
        );
        st = crate::fold::fold(&st, &at(10 + i as u64, vec![event])).state;
        for (host, want) in ["h1", "h2", "h3"].iter().zip(want) {
            assert_eq!(labels(&st, host), want, "step {i}, {host}");
        }
        let stored = st.raw_endpoint("ep/1").map(|w| labels_of(&w.value));
        let want = (!deleted).then(|| format!("{}", i + 2));
        assert_eq!(stored, want, "step {i}: found by key");
        assert_eq!(st, st.rebuild(), "step {i}");
        assert_eq!(st.hash(), st.recompute_hash(), "step {i}");
    }
    assert_eq!(st.counts().hostnames_with_endpoints, 0);
}

fn labels_of(e: &Endpoint) -> String {
    e.labels.get("v").map_or("-".to_string(), |v| v.to_string())
}

/// The sorted keys of the hostnames a service defines (built on first use and
/// shared by clones) follow the claims: after a hostname gains its first claim,
/// gains a second, loses one, loses its last, and after a bulk load into a
/// state whose keys were built, they equal the claims map's keys, while the
/// state they were built on keeps its own.
#[test]
fn service_host_keys_follow_the_claims() {
    let claimed = |st: &ModelState| st.claims.keys().copied().collect::<Vec<HKey>>();
    let check = |st: &ModelState, what: &str| {
        assert_eq!(st.service_host_keys(), claimed(st), "{what}");
    };
    let mut st = ModelState::from_events(&[svc("a", 0, "ns", "x.svc", &[80])]);
    check(&st, "one hostname");
    let before = st.clone();
    let mut sink = Touched::default();
    let add = |st: &mut ModelState, source: &str, host: &str, sink: &mut Touched| {
        let other = ModelState::from_events(&[svc(source, 0, "ns", host, &[80])]);
        let (slot, w) = other.raw_services().next().expect("one");
        st.put_service(slot.clone(), 0, w.value.clone(), sink);
        slot.clone()
    };
    let y = add(&mut st, "a", "y.svc", &mut sink);
    check(&st, "a hostname's first claim");
    assert_eq!(
        before.service_host_keys().len(),
        1,
        "the clone keeps its keys"
    );
    let y2 = add(&mut st, "b", "y.svc", &mut sink);
    check(&st, "a second claim");
    st.remove_service(&y, &mut sink);
    check(&st, "one of two claims gone");
    st.remove_service(&y2, &mut sink);
    check(&st, "a hostname's last claim gone");
    assert_eq!(st.service_host_keys().len(), 1);

    let mut empty = ModelState::default();
    assert!(empty.service_host_keys().is_empty());
    let entries = st
        .raw_services()
        .map(|(slot, w)| (slot.clone(), w.generation, w.value.clone()))
        .collect();
    empty.load_services(entries);
    check(&empty, "bulk load");
    assert_eq!(empty.service_host_keys().len(), 1);
}
