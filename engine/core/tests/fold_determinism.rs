//! Determinism of the fold: the same log folds to the same snapshot hash, and the
//! incremental fold of random event sequences equals folding them in one batch,
//! equals a from-scratch rebuild of the final entity set, and equals a naive
//! reference model of the documented rules.

mod fold_support;

use std::collections::{BTreeMap, BTreeSet};

use deltapilot_engine::runner::Engine;
use deltapilot_log::{Record, RecordPos, encode_event};
use deltapilot_model::Hostname;
use deltapilot_model::fold::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::Event;
use deltapilot_xds::generate::GenOptions;
use deltapilot_xds::hash::full_snapshot_hash;
use fold_support::*;
use proptest::prelude::*;

const SOURCES: [&str; 3] = ["a", "b", "c"];
const NAMESPACES: [&str; 2] = ["ns1", "ns2"];
const HOSTS: [&str; 4] = ["h0.svc", "h1.svc", "h2.svc", "h3.svc"];
const ADDRS: [&str; 4] = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::4"];
const SPECS: [&str; 2] = ["{}", r#"{"host":"h0.svc"}"#];

fn ep_key(k: usize) -> String {
    format!("ep/{k}")
}

fn cfg_name(n: usize) -> String {
    format!("c{n}")
}

/// One random event, by index into the small universes above so that sources
/// collide on hostnames and keys often.
#[derive(Debug, Clone)]
enum Op {
    Svc {
        src: usize,
        g: u64,
        ns: usize,
        host: usize,
        port: u32,
    },
    SvcDel {
        src: usize,
        g: u64,
        ns: usize,
        host: usize,
    },
    Ep {
        src: usize,
        g: u64,
        key: usize,
        addr: usize,
        hosts: Vec<usize>,
        weight: u32,
    },
    EpDel {
        src: usize,
        g: u64,
        key: usize,
    },
    Cfg {
        src: usize,
        g: u64,
        name: usize,
        spec: usize,
    },
    CfgDel {
        src: usize,
        g: u64,
        name: usize,
    },
    Start {
        src: usize,
        g: u64,
    },
    Complete {
        src: usize,
        g: u64,
    },
    BadPort {
        src: usize,
        g: u64,
        host: usize,
    },
    BadAddr {
        src: usize,
        g: u64,
        key: usize,
    },
    Empty {
        src: usize,
        g: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let src = 0..SOURCES.len();
    let g = 0u64..4;
    prop_oneof![
        6 => (src.clone(), g.clone(), 0..2usize, 0..4usize, 80u32..82)
            .prop_map(|(src, g, ns, host, port)| Op::Svc { src, g, ns, host, port }),
        2 => (src.clone(), g.clone(), 0..2usize, 0..4usize).prop_map(|(src, g, ns, host)| Op::SvcDel { src, g, ns, host }),
        8 => (src.clone(), g.clone(), 0..6usize, 0..4usize, prop::collection::vec(0..4usize, 1..3), 0u32..3)
            .prop_map(|(src, g, key, addr, hosts, weight)| Op::Ep { src, g, key, addr, hosts, weight }),
        3 => (src.clone(), g.clone(), 0..6usize).prop_map(|(src, g, key)| Op::EpDel { src, g, key }),
        2 => (src.clone(), g.clone(), 0..2usize, 0..2usize).prop_map(|(src, g, name, spec)| Op::Cfg { src, g, name, spec }),
        1 => (src.clone(), g.clone(), 0..2usize).prop_map(|(src, g, name)| Op::CfgDel { src, g, name }),
        1 => (src.clone(), g.clone()).prop_map(|(src, g)| Op::Start { src, g }),
        2 => (src.clone(), g.clone()).prop_map(|(src, g)| Op::Complete { src, g }),
        1 => (src.clone(), g.clone(), 0..4usize).prop_map(|(src, g, host)| Op::BadPort { src, g, host }),
        1 => (src.clone(), g.clone(), 0..6usize).prop_map(|(src, g, key)| Op::BadAddr { src, g, key }),
        1 => (src, g).prop_map(|(src, g)| Op::Empty { src, g }),
    ]
}

fn to_event(op: &Op) -> Event {
    match op {
        Op::Svc {
            src,
            g,
            ns,
            host,
            port,
        } => svc(SOURCES[*src], *g, NAMESPACES[*ns], HOSTS[*host], *port),
        Op::SvcDel { src, g, ns, host } => {
            svc_del(SOURCES[*src], *g, NAMESPACES[*ns], HOSTS[*host])
        }
        Op::Ep {
            src,
            g,
            key,
            addr,
            hosts,
            weight,
        } => {
            let hs: Vec<&str> = hosts.iter().map(|h| HOSTS[*h]).collect();
            ep(SOURCES[*src], *g, &ep_key(*key), ADDRS[*addr], &hs, *weight)
        }
        Op::EpDel { src, g, key } => ep_del(SOURCES[*src], *g, &ep_key(*key)),
        Op::Cfg { src, g, name, spec } => cfg(SOURCES[*src], *g, &cfg_name(*name), SPECS[*spec]),
        Op::CfgDel { src, g, name } => cfg_del(SOURCES[*src], *g, &cfg_name(*name)),
        Op::Start { src, g } => resync(SOURCES[*src], *g, false),
        Op::Complete { src, g } => resync(SOURCES[*src], *g, true),
        Op::BadPort { src, g, host } => svc(SOURCES[*src], *g, "ns1", HOSTS[*host], 0),
        Op::BadAddr { src, g, key } => ep(
            SOURCES[*src],
            *g,
            &ep_key(*key),
            "10.0.0.256",
            &[HOSTS[0]],
            1,
        ),
        Op::Empty { src, g } => {
            let mut e = svc(SOURCES[*src], *g, "ns1", HOSTS[0], 80);
            e.payload = None;
            e
        }
    }
}

/// The documented rules, written as plainly as possible.
#[derive(Debug, Default)]
struct Reference {
    /// (key, source) → (generation, namespace, host, port)
    svcs: BTreeMap<(String, String), (u64, String, String, u32)>,
    /// key → (source, generation, address, hosts, weight)
    eps: BTreeMap<String, (String, u64, String, Vec<String>, u32)>,
    /// key → (source, generation, spec)
    cfgs: BTreeMap<String, (String, u64, String)>,
    /// source → (started, completed)
    gens: BTreeMap<String, (u64, u64)>,
}

impl Reference {
    /// The winning definition of a host: lowest (source, namespace, key).
    fn merged(&self, host: &str) -> Option<(String, String, u32)> {
        self.svcs
            .iter()
            .filter(|(_, v)| v.2 == host)
            .map(|((key, src), v)| (src.clone(), v.1.clone(), key.clone(), v.3))
            .min()
            .map(|(src, ns, _, port)| (src, ns, port))
    }

    fn apply(&mut self, op: &Op) {
        let ev = to_event(op);
        let src = ev.source.clone();
        let g = ev.generation;
        let (started, completed) = self.gens.get(&src).copied().unwrap_or((0, 0));
        if g < completed {
            return;
        }
        match op {
            Op::Svc { ns, host, port, .. } => {
                let key = format!("svc/{}/{}", NAMESPACES[*ns], HOSTS[*host]);
                self.svcs.insert(
                    (key, src),
                    (g, NAMESPACES[*ns].into(), HOSTS[*host].into(), *port),
                );
            }
            Op::SvcDel { ns, host, .. } => {
                self.svcs
                    .remove(&(format!("svc/{}/{}", NAMESPACES[*ns], HOSTS[*host]), src));
            }
            Op::Ep {
                key,
                addr,
                hosts,
                weight,
                ..
            } => {
                let key = ep_key(*key);
                if self.eps.get(&key).is_some_and(|e| e.0 != src) {
                    return;
                }
                // Stored even when none of its services exists yet (held).
                let hs: BTreeSet<String> = hosts.iter().map(|h| HOSTS[*h].to_string()).collect();
                let addr = ADDRS[*addr].to_string();
                self.eps.insert(
                    key,
                    (src, g, addr, hs.into_iter().collect(), (*weight).max(1)),
                );
            }
            Op::EpDel { key, .. } => {
                let key = ep_key(*key);
                if self.eps.get(&key).is_some_and(|e| e.0 != src) {
                    return;
                }
                self.eps.remove(&key);
            }
            Op::Cfg { name, spec, .. } => {
                let key = cfg_key(&cfg_name(*name));
                if self.cfgs.get(&key).is_some_and(|c| c.0 != src) {
                    return;
                }
                self.cfgs.insert(key, (src, g, SPECS[*spec].into()));
            }
            Op::CfgDel { name, .. } => {
                let key = cfg_key(&cfg_name(*name));
                if self.cfgs.get(&key).is_some_and(|c| c.0 != src) {
                    return;
                }
                self.cfgs.remove(&key);
            }
            Op::Start { .. } => {
                self.gens.insert(src, (g, completed));
            }
            Op::Complete { .. } => {
                self.gens.insert(src.clone(), (started.max(g), g));
                self.svcs.retain(|(_, s), v| !(s == &src && v.0 < g));
                self.eps.retain(|_, v| !(v.0 == src && v.1 < g));
                self.cfgs.retain(|_, v| !(v.0 == src && v.1 < g));
            }
            Op::BadPort { .. } | Op::BadAddr { .. } | Op::Empty { .. } => {}
        }
    }

    /// The final entity set as a fresh event sequence: resync bookkeeping first,
    /// then services, configs and endpoints. An endpoint whose services are all gone
    /// is kept by the fold, so its admission is replayed under a temporary service
    /// that is deleted again at the end (a history that leaves no trace).
    fn as_events(&self) -> Vec<Event> {
        let mut out = Vec::new();
        for (src, (started, completed)) in &self.gens {
            if *completed > 0 {
                out.push(resync(src, *completed, true));
            }
            if started > completed {
                out.push(resync(src, *started, false));
            }
        }
        for ((key, src), (g, ns, host, port)) in &self.svcs {
            assert_eq!(key, &format!("svc/{ns}/{host}"));
            out.push(svc(src, *g, ns, host, *port));
        }
        for (key, (src, g, spec)) in &self.cfgs {
            let name = key.rsplit('/').next().expect("name");
            out.push(cfg(src, *g, name, spec));
        }
        let mut temp = BTreeSet::new();
        for (_, _, _, hosts, _) in self.eps.values() {
            if !hosts.iter().any(|h| self.merged(h).is_some()) {
                temp.insert(hosts[0].clone());
            }
        }
        for h in &temp {
            out.push(svc("zz-temp", 0, "ns", h, 1));
        }
        for (key, (src, g, addr, hosts, weight)) in &self.eps {
            let hs: Vec<&str> = hosts.iter().map(String::as_str).collect();
            out.push(ep(src, *g, key, addr, &hs, *weight));
        }
        for h in &temp {
            out.push(svc_del("zz-temp", 0, "ns", h));
        }
        out
    }
}

/// Asserts the state holds exactly the reference's entities and merged view.
fn assert_matches_reference(st: &ModelState, r: &Reference) {
    let svcs: BTreeMap<(String, String), (u64, String, String, u32)> = st
        .raw_services()
        .map(|(slot, w)| {
            let v = &w.value;
            (
                (slot.key.to_string(), slot.source.to_string()),
                (
                    w.generation,
                    v.namespace.to_string(),
                    v.hostname.to_string(),
                    u32::from(v.ports[0].number),
                ),
            )
        })
        .collect();
    assert_eq!(svcs, r.svcs, "raw services");
    let eps: BTreeMap<String, (String, u64, String, Vec<String>, u32)> = st
        .raw_endpoints()
        .map(|(k, w)| {
            let v = &w.value;
            let hosts = v.services.iter().map(|(_, h)| h.to_string()).collect();
            (
                k.to_string(),
                (
                    w.source.to_string(),
                    w.generation,
                    v.address.to_string(),
                    hosts,
                    v.weight,
                ),
            )
        })
        .collect();
    let want_eps: BTreeMap<_, _> = r
        .eps
        .iter()
        .map(|(k, v)| {
            let addr: std::net::IpAddr = v.2.parse().expect("ip");
            (
                k.clone(),
                (v.0.clone(), v.1, addr.to_string(), v.3.clone(), v.4),
            )
        })
        .collect();
    assert_eq!(eps, want_eps, "raw endpoints");
    let cfgs: BTreeMap<String, (String, u64, String)> = st
        .raw_configs()
        .map(|(k, w)| {
            (
                k.to_string(),
                (
                    w.source.to_string(),
                    w.generation,
                    w.value.spec_json.to_string(),
                ),
            )
        })
        .collect();
    assert_eq!(cfgs, r.cfgs, "raw configs");
    let gens: BTreeMap<String, (u64, u64)> = st
        .sources()
        .map(|(s, g)| (s.to_string(), (g.started, g.completed)))
        .collect();
    let want_gens: BTreeMap<_, _> = r
        .gens
        .iter()
        .filter(|(_, g)| **g != (0, 0))
        .map(|(s, g)| (s.clone(), *g))
        .collect();
    assert_eq!(gens, want_gens, "source generations");
    for host in HOSTS {
        let got = st.get_service(host).map(|s| {
            let src = st.service_definitions(host)[0].0.to_string();
            (src, s.namespace.to_string(), u32::from(s.ports[0].number))
        });
        assert_eq!(got, r.merged(host), "merged service of {host}");
        let keys: Vec<String> = st
            .endpoints_of_sorted(host)
            .into_iter()
            .map(|e| e.key.to_string())
            .collect();
        let want: Vec<String> = r
            .eps
            .iter()
            .filter(|(_, v)| v.3.iter().any(|h| h == host))
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(keys, want, "endpoints of {host}");
    }
}

fn positioned(events: &[Event], start: u64) -> Vec<(RecordPos, Event)> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: start + i as u64,
            };
            (pos, e.clone())
        })
        .collect()
}

/// Checks that a fold step's `Touched` names every hostname whose merged service or
/// endpoints changed (services exactly), and configs if any config changed.
fn assert_touched_covers(
    before: &ModelState,
    after: &ModelState,
    touched: &deltapilot_model::state::Touched,
) {
    for host in HOSTS {
        let h = Hostname::new(host);
        let svc_changed = before.get_service(host) != after.get_service(host);
        assert_eq!(
            touched.services.contains(&h),
            svc_changed,
            "touched.services for {host}"
        );
        let eps_before: Vec<_> = before.endpoints_of(host).collect();
        let eps_after: Vec<_> = after.endpoints_of(host).collect();
        if eps_before != eps_after {
            assert!(
                touched.endpoint_names(after).contains(&h),
                "endpoints of {host} changed untouched"
            );
        }
    }
    let cfg_before: Vec<_> = before.configs().cloned().collect();
    let cfg_after: Vec<_> = after.configs().cloned().collect();
    if cfg_before != cfg_after {
        assert!(touched.configs, "configs changed untouched");
    }
}

/// Folds `ops` in chunks of the given sizes (log order: each chunk is shorter
/// than a sorted run) and in one batch (where 64 or more endpoint events in a
/// row are applied in key-hash order), and checks both against each other, a
/// from-scratch rebuild of the derived parts, and the written rules.
fn check_history(ops: &[Op], chunks: &[usize]) -> Result<(), TestCaseError> {
    let events: Vec<Event> = ops.iter().map(to_event).collect();

    // Incremental: random batch sizes, checking Touched at every step.
    let mut st = ModelState::default();
    let mut i = 0;
    let mut c = 0;
    while i < events.len() {
        let n = chunks[c % chunks.len()].min(events.len() - i);
        let out = fold(&st, &positioned(&events[i..i + n], i as u64));
        assert_touched_covers(&st, &out.state, &out.touched);
        st = out.state;
        i += n;
        c += 1;
    }

    // One batch, whose touched set must cover its changes too.
    let empty = ModelState::default();
    let out = fold(&empty, &positioned(&events, 0));
    assert_touched_covers(&empty, &out.state, &out.touched);
    let whole = out.state;
    prop_assert_eq!(&st, &whole);
    prop_assert_eq!(st.hash(), whole.hash());

    // The hash is maintained exactly; derived indexes equal a from-scratch build.
    prop_assert_eq!(st.hash(), st.recompute_hash());
    prop_assert_eq!(&st, &st.rebuild());

    // The documented rules.
    let mut reference = Reference::default();
    for op in ops {
        reference.apply(op);
    }
    assert_matches_reference(&st, &reference);

    // A fresh log of just the final entity set folds to the same state and hash.
    let scratch = ModelState::from_events(&reference.as_events());
    prop_assert_eq!(st.hash(), scratch.hash());
    prop_assert_eq!(&st, &scratch);
    Ok(())
}

/// An endpoint event, over more keys than [`op`] uses, so that a long run
/// holds both repeated and distinct keys.
fn endpoint_op() -> impl Strategy<Value = Op> {
    let src = 0..SOURCES.len();
    let g = 0u64..4;
    prop_oneof![
        8 => (src.clone(), g.clone(), 0..40usize, 0..4usize, prop::collection::vec(0..4usize, 1..3), 0u32..3)
            .prop_map(|(src, g, key, addr, hosts, weight)| Op::Ep { src, g, key, addr, hosts, weight }),
        3 => (src.clone(), g.clone(), 0..40usize).prop_map(|(src, g, key)| Op::EpDel { src, g, key }),
        1 => (src, g, 0..40usize).prop_map(|(src, g, key)| Op::BadAddr { src, g, key }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn incremental_fold_equals_one_batch_rebuild_and_reference(
        ops in prop::collection::vec(op(), 0..60),
        chunks in prop::collection::vec(1usize..8, 1..20),
    ) {
        check_history(&ops, &chunks)?;
    }

    /// The path live batches take: a run of at least `SORTED_RUN_MIN` (64)
    /// endpoint events, applied by key hash, between random histories.
    #[test]
    fn a_long_run_of_endpoint_events_folds_as_in_log_order(
        head in prop::collection::vec(op(), 0..30),
        run in prop::collection::vec(endpoint_op(), 64..160),
        tail in prop::collection::vec(op(), 0..20),
        chunks in prop::collection::vec(1usize..8, 1..20),
    ) {
        let ops: Vec<Op> = head.into_iter().chain(run).chain(tail).collect();
        check_history(&ops, &chunks)?;
    }

    #[test]
    fn engine_snapshot_hash_does_not_depend_on_batching(
        ops in prop::collection::vec(op(), 0..40),
        size in 1usize..10,
    ) {
        let batch = positioned(&ops.iter().map(to_event).collect::<Vec<_>>(), 0);
        let mut one = Engine::new(GenOptions::default());
        one.apply_events(&batch);
        let mut many = Engine::new(GenOptions::default());
        for chunk in batch.chunks(size) {
            many.apply_events(chunk);
        }
        let (a, b) = (one.current(), many.current());
        prop_assert_eq!(a.hash, b.hash);
        prop_assert_eq!(a.hash, full_snapshot_hash(&a));
        prop_assert_eq!(b.hash, full_snapshot_hash(&b));
        prop_assert_eq!(&a.resources, &b.resources);
    }
}

/// A log with every kind of event, including bad ones, as records.
fn sample_log() -> Vec<Record> {
    let mut events = Vec::new();
    for s in 0..20 {
        let host = format!("svc{s}.ns.svc.cluster.local");
        events.push(svc("k8s", 1, "ns", &host, 8000 + s));
        if s % 3 == 0 {
            events.push(svc("file", 1, "ns", &host, 9000 + s));
        }
        for e in 0..5 {
            events.push(ep(
                "k8s",
                1,
                &format!("ep/k8s/{s}/{e}"),
                &format!("10.1.{s}.{e}"),
                &[&host],
                e,
            ));
        }
    }
    events.push(ep("k8s", 1, "ep/k8s/orphan", "10.9.9.9", &["nowhere"], 1));
    events.push(cfg("file", 1, "dr", r#"{"host":"svc1"}"#));
    events.push(resync("k8s", 2, false));
    for s in 0..10 {
        let host = format!("svc{s}.ns.svc.cluster.local");
        events.push(svc("k8s", 2, "ns", &host, 8000 + s));
        events.push(ep(
            "k8s",
            2,
            &format!("ep/k8s/{s}/0"),
            &format!("10.1.{s}.0"),
            &[&host],
            2,
        ));
    }
    events.push(resync("k8s", 2, true));
    events.push(svc_del("file", 1, "ns", "svc3.ns.svc.cluster.local"));
    const ZERO: RecordPos = RecordPos {
        partition: 0,
        offset: 0,
    };
    let mut records: Vec<Record> = events
        .iter()
        .map(|e| Record {
            pos: ZERO,
            bytes: encode_event(e).into(),
        })
        .collect();
    records.insert(
        7,
        Record {
            pos: ZERO,
            bytes: vec![0xff, 0x01].into(),
        },
    );
    for (i, r) in records.iter_mut().enumerate() {
        r.pos.offset = i as u64;
    }
    records
}

#[test]
fn same_log_folded_twice_gives_identical_snapshot_hashes() {
    let log = sample_log();
    let mut first = Engine::new(GenOptions::default());
    first.apply_records(&log);
    let mut second = Engine::new(GenOptions::default());
    for chunk in log.chunks(13) {
        second.apply_records(chunk);
    }
    let (a, b) = (first.current(), second.current());
    assert_eq!(a.hash, b.hash);
    assert_eq!(a.model, b.model);
    assert_eq!(a.position, b.position);
    assert_eq!(a.hash, full_snapshot_hash(&a));
    // The sample really exercised the rules: a sweep, a merge, skips.
    let counts = a.model.counts();
    assert_eq!(
        counts.services, 13,
        "k8s's gen-1 services 10..19 were swept; file's 12, 15, 18 remain"
    );
    assert_eq!(counts.endpoints, 10);
    assert_eq!(
        first.stats().skipped_total(),
        2,
        "one orphan endpoint, one garbage record"
    );
}
