//! Planning: resync brackets, batching, admission order, minimal diffs.

use super::*;

fn mk_svc(host: &str, port: u32) -> Arc<Entity> {
    Arc::new(Entity::Service(pb::Service {
        hostname: host.into(),
        namespace: "ns".into(),
        ports: vec![pb::Port {
            name: "http".into(),
            number: port,
            protocol: pb::Protocol::Http as i32,
        }],
        ..Default::default()
    }))
}

fn mk_ep(addr: &str) -> Arc<Entity> {
    Arc::new(Entity::Endpoint(pb::Endpoint {
        address: addr.into(),
        ..Default::default()
    }))
}

fn mk_cfg(name: &str) -> Arc<Entity> {
    Arc::new(Entity::Config(pb::ConfigObject {
        kind: pb::ConfigKind::VirtualService as i32,
        namespace: "ns".into(),
        name: name.into(),
        spec_json: "{}".into(),
        ..Default::default()
    }))
}

fn mk_view(items: &[(&str, Arc<Entity>)]) -> EntityMap {
    items
        .iter()
        .map(|(k, e)| ((*k).to_owned(), e.clone()))
        .collect()
}

fn names(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.payload {
            Some(Payload::Resync(m)) => format!("resync:{}", m.phase().as_str_name()),
            _ => format!("{}:{}", e.kind_name(), e.key().unwrap_or_default()),
        })
        .collect()
}

/// Plans and commits until the plan is empty; returns every batch.
fn run(em: &mut Emitter, desired: &EntityMap, batch: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for _ in 0..100 {
        let plan = em.plan(desired, batch, 1);
        if plan.is_empty() {
            return out;
        }
        assert!(plan.len() <= batch.max(3), "{:?}", names(&plan));
        em.commit(&plan, desired);
        out.push(names(&plan));
    }
    panic!("planning did not converge");
}

#[test]
fn resync_brackets_entities_services_first_and_completes_alone_at_the_end() {
    let desired = mk_view(&[
        ("ep/k8s/c/ns/p/10.0.0.1", mk_ep("10.0.0.1")),
        ("ep/k8s/c/ns/q/10.0.0.2", mk_ep("10.0.0.2")),
        ("svc/ns/a.ns", mk_svc("a.ns", 80)),
    ]);
    let mut em = Emitter::new("k8s:c".into(), 7, &desired);
    let first = em.plan(&desired, 3, 1);
    assert!(
        first.iter().all(|e| e.generation == 7
            && e.source == "k8s:c"
            && e.schema_version == SCHEMA_VERSION)
    );
    assert_eq!(
        run(&mut em, &desired, 3),
        vec![
            vec![
                "resync:STARTED",
                "service_upsert:svc/ns/a.ns",
                "endpoint_upsert:ep/k8s/c/ns/p/10.0.0.1"
            ],
            vec!["endpoint_upsert:ep/k8s/c/ns/q/10.0.0.2"],
            vec!["resync:COMPLETED"],
        ]
    );
    assert_eq!(em.phase(), ResyncPhase::Completed);
    assert_eq!(em.len(), 3);
    // An empty registry: both markers at once.
    let mut empty = Emitter::new("k8s:c".into(), 8, &EntityMap::new());
    assert_eq!(
        names(&empty.plan(&EntityMap::new(), 3, 1)),
        vec!["resync:STARTED", "resync:COMPLETED"]
    );
}

#[test]
fn a_large_resync_is_cut_into_batches_and_completes_last() {
    let desired: EntityMap = (0..10)
        .map(|i| (format!("svc/ns/h{i}"), mk_svc(&format!("h{i}"), 80)))
        .collect();
    let mut em = Emitter::new("s".into(), 1, &desired);
    let all: Vec<String> = run(&mut em, &desired, 4).into_iter().flatten().collect();
    assert_eq!(all.first().map(String::as_str), Some("resync:STARTED"));
    assert_eq!(all.last().map(String::as_str), Some("resync:COMPLETED"));
    assert_eq!(all.len(), 12, "{all:?}");
}

#[test]
fn unchanged_keys_emit_nothing_and_deletes_go_endpoints_first() {
    let mut desired = mk_view(&[
        ("svc/ns/a.ns", mk_svc("a.ns", 80)),
        ("cfg/virtual_service/ns/v", mk_cfg("v")),
        ("ep/x", mk_ep("10.0.0.1")),
    ]);
    let mut em = Emitter::new("k8s:c".into(), 1, &desired);
    run(&mut em, &desired, 100);
    // A relist that marks everything but changes nothing.
    em.mark(desired.keys().cloned());
    assert!(run(&mut em, &desired, 100).is_empty());
    em.mark_all(&desired);
    assert!(run(&mut em, &desired, 100).is_empty());
    // A change, then removal of everything.
    desired.insert("svc/ns/a.ns".into(), mk_svc("a.ns", 81));
    em.mark(["svc/ns/a.ns".to_owned()]);
    assert_eq!(
        run(&mut em, &desired, 100),
        vec![vec!["service_upsert:svc/ns/a.ns"]]
    );
    desired.clear();
    em.mark_all(&desired);
    assert_eq!(
        run(&mut em, &desired, 100),
        vec![vec![
            "endpoint_delete:ep/x",
            "config_delete:cfg/virtual_service/ns/v",
            "service_delete:svc/ns/a.ns"
        ]]
    );
    assert_eq!(em.len(), 0);
}

#[test]
fn a_rebuilt_view_gives_upserts_before_deletes() {
    let desired = mk_view(&[
        ("ep/file/se/ns/s/10.0.0.1", mk_ep("10.0.0.1")),
        ("svc/ns/a.b", mk_svc("a.b", 80)),
    ]);
    let mut em = Emitter::new("s".into(), 1, &desired);
    run(&mut em, &desired, 100);
    let mut next = desired.clone();
    next.remove("ep/file/se/ns/s/10.0.0.1");
    next.insert("ep/file/se/ns/s/10.0.0.2".into(), mk_ep("10.0.0.2"));
    next.insert("svc/ns/c.d".into(), mk_svc("c.d", 80));
    em.mark_all(&next);
    assert_eq!(
        run(&mut em, &next, 100),
        vec![vec![
            "service_upsert:svc/ns/c.d",
            "endpoint_upsert:ep/file/se/ns/s/10.0.0.2",
            "endpoint_delete:ep/file/se/ns/s/10.0.0.1"
        ]]
    );
    assert_eq!(em.len(), 3);
}

#[test]
fn a_failed_append_is_simply_planned_again() {
    let desired = mk_view(&[("svc/ns/a.b", mk_svc("a.b", 80))]);
    let mut em = Emitter::new("s".into(), 1, &desired);
    let a = em.plan(&desired, 100, 5);
    let b = em.plan(&desired, 100, 5);
    assert_eq!(a, b, "without a commit, the same plan comes back");
}

#[test]
fn a_change_between_plan_and_commit_still_goes_out() {
    let v1 = mk_view(&[("svc/ns/a.b", mk_svc("a.b", 80))]);
    let mut em = Emitter::new("s".into(), 1, &v1);
    let plan = em.plan(&v1, 100, 1);
    // The desired view moved on while the append was in flight.
    let v2 = mk_view(&[("svc/ns/a.b", mk_svc("a.b", 81))]);
    em.commit(&plan, &v2);
    em.mark(["svc/ns/a.b".to_owned()]);
    assert_eq!(
        run(&mut em, &v2, 100),
        vec![vec!["service_upsert:svc/ns/a.b"], vec!["resync:COMPLETED"]]
    );
}

#[test]
fn backlog_counts_what_is_not_in_the_log_yet() {
    let desired = mk_view(&[("svc/ns/a", mk_svc("a", 80)), ("svc/ns/b", mk_svc("b", 80))]);
    let mut em = Emitter::new("src".into(), 1, &desired);
    // Two entities and both resync markers.
    assert_eq!(em.backlog(), 4);
    // A plan that is not committed (the append failed) leaves it as it was.
    let plan = em.plan(&desired, 100, 1);
    assert!(!plan.is_empty());
    assert_eq!(em.backlog(), 4);
    run(&mut em, &desired, 100);
    assert_eq!(em.backlog(), 0);
    // A change waits until it is committed.
    let changed = mk_view(&[("svc/ns/a", mk_svc("a", 81)), ("svc/ns/b", mk_svc("b", 80))]);
    em.mark(["svc/ns/a".to_owned()]);
    assert_eq!(em.backlog(), 1);
    run(&mut em, &changed, 100);
    assert_eq!(em.backlog(), 0);
}
