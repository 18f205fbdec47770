//! Worked examples beside the incremental == rebuild proptest
//! (`xds_incremental.rs`): an endpoint-only batch touches only EDS, the last
//! service on a port takes its listener and routes with it, and a large
//! regeneration equals one built in small batches.

mod xds_support;

use std::sync::Arc;

use deltapilot_model::state::ModelState;
use deltapilot_proto::Event;
use deltapilot_xds::ResourceSet;
use deltapilot_xds::ResourceType;
use deltapilot_xds::generate::{GenOptions, Generator};
use xds_support::*;

#[test]
fn endpoint_only_batches_touch_only_eds() {
    let opts = GenOptions::default();
    let mut events: Vec<Event> = (0..50)
        .map(|i| {
            simple_svc(
                "ns",
                &format!("s{i}.ns.svc.cluster.local"),
                80,
                Protocol::Http,
            )
        })
        .collect();
    events.push(Ep::new("10.0.0.1", "ns", "s7.ns.svc.cluster.local").upsert("src", 0, "ep/1"));
    let (state, touched) = fold_all(&ModelState::default(), &events);
    let mut generator = Generator::new(opts.clone());
    let (set, _, errors) = generator.regenerate(&ResourceSet::default(), &state, &touched);
    assert!(errors.is_empty());

    let batch = [
        Ep::new("10.0.0.2", "ns", "s7.ns.svc.cluster.local").upsert("src", 0, "ep/2"),
        Ep::new("10.0.0.1", "ns", "s7.ns.svc.cluster.local")
            .weight(4)
            .upsert("src", 0, "ep/1"),
    ];
    let (state2, touched2) = fold_all(&state, &batch);
    let (next, changes, _) = generator.regenerate(&set, &state2, &touched2);
    let eds: Vec<&str> = changes
        .of(ResourceType::Endpoint)
        .upserted
        .iter()
        .map(|n| &**n)
        .collect();
    assert_eq!(eds, ["outbound|80||s7.ns.svc.cluster.local"]);
    for t in [
        ResourceType::Cluster,
        ResourceType::Listener,
        ResourceType::Route,
    ] {
        assert!(
            changes.of(t).is_empty(),
            "{t:?} untouched by endpoint changes"
        );
    }
    assert!(Arc::ptr_eq(
        next.routes.get("80").expect("route 80"),
        set.routes.get("80").expect("route 80")
    ));

    // Rewriting an unchanged endpoint changes nothing at all.
    let (state3, touched3) = fold_all(&state2, &batch[1..]);
    let (_, none, _) = generator.regenerate(&next, &state3, &touched3);
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn removing_the_last_service_on_a_port_removes_its_listener_and_routes() {
    let opts = GenOptions::default();
    let host = "only.ns.svc.cluster.local";
    let (state, touched) = fold_all(
        &ModelState::default(),
        &[simple_svc("ns", host, 8080, Protocol::Grpc)],
    );
    let mut generator = Generator::new(opts);
    let (set, _, _) = generator.regenerate(&ResourceSet::default(), &state, &touched);
    let (state2, touched2) = fold_all(&state, &[svc_del("src", 0, "ns", host)]);
    let (next, changes, _) = generator.regenerate(&set, &state2, &touched2);
    assert!(flatten(&next).is_empty());
    let removed = |t: ResourceType| {
        changes
            .of(t)
            .removed
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        removed(ResourceType::Cluster),
        [format!("outbound|8080||{host}")]
    );
    assert_eq!(
        removed(ResourceType::Endpoint),
        [format!("outbound|8080||{host}")]
    );
    assert_eq!(
        removed(ResourceType::Listener),
        ["0.0.0.0_8080".to_string(), format!("{host}:8080")]
    );
    assert_eq!(
        removed(ResourceType::Route),
        ["8080".to_string(), format!("{host}:8080")]
    );
}

/// A regeneration of many hosts is built on several threads, and so are its
/// route configurations (one port per thread); its output must be exactly the
/// one built host by host. Here: the same 1,200 services (three protocols, two
/// ports, two endpoints each), regenerated once as a whole (the threaded paths:
/// 1,200 hosts, 1,600 virtual hosts over eight ports) and in batches of 100
/// (each below both thresholds), compared byte for byte, change set included.
#[test]
fn a_large_regeneration_equals_one_built_in_small_batches() {
    let protocols = [Protocol::Http, Protocol::Tcp, Protocol::Grpc];
    let mut events = Vec::new();
    for i in 0..1_200usize {
        let host = format!("svc-{i}.ns{}.svc.cluster.local", i % 3);
        let ns = format!("ns{}", i % 3);
        let p = protocols[i % 3];
        events.push(svc(
            "src",
            0,
            &ns,
            &host,
            vec![port("a", 8000 + (i % 7) as u32, p), port("b", 9090, p)],
            Resolution::StaticEndpoints,
        ));
        for e in 0..2 {
            let addr = format!("10.{}.{}.{}", e, i / 250, i % 250);
            events.push(Ep::new(&addr, &ns, &host).upsert("src", 0, &format!("ep/{i}/{e}")));
        }
    }
    let opts = GenOptions::default();
    let (state, touched) = fold_all(&ModelState::default(), &events);
    let (whole, whole_changes, whole_errors) =
        Generator::new(opts.clone()).regenerate(&ResourceSet::default(), &state, &touched);

    let mut generator = Generator::new(opts);
    let mut set = ResourceSet::default();
    let mut upserted: Vec<Vec<String>> = vec![Vec::new(); ResourceType::ALL.len()];
    let mut model = ModelState::default();
    for chunk in events.chunks(300) {
        let (next, t) = fold_all(&model, chunk);
        let (s, changes, errors) = generator.regenerate(&set, &next, &t);
        assert!(errors.is_empty(), "{errors:?}");
        for (i, ty) in ResourceType::ALL.iter().enumerate() {
            upserted[i].extend(changes.of(*ty).upserted.iter().map(|n| n.to_string()));
        }
        set = s;
        model = next;
    }
    assert!(whole_errors.is_empty(), "{whole_errors:?}");
    assert_eq!(flatten(&whole).len(), flatten(&set).len());
    assert!(flatten(&whole) == flatten(&set), "threaded build differs");
    for (i, ty) in ResourceType::ALL.iter().enumerate() {
        let mut names: Vec<String> = whole_changes
            .of(*ty)
            .upserted
            .iter()
            .map(|n| n.to_string())
            .collect();
        let mut batched = upserted[i].clone();
        names.sort();
        batched.sort();
        batched.dedup();
        assert_eq!(names, batched, "{ty:?} upserts");
    }
}
