//! Planning: resync brackets, batching, minimal diffs, conflict order.

use super::*;

fn mk_svc(host: &str) -> Entity {
    Entity::Service(pb::Service {
        hostname: host.into(),
        namespace: "ns".into(),
        ..Default::default()
    })
}

fn mk_ep(addr: &str) -> Entity {
    Entity::Endpoint(pb::Endpoint {
        address: addr.into(),
        ..Default::default()
    })
}

fn mk_view(items: &[(&str, Entity)]) -> EntityMap {
    items
        .iter()
        .map(|(k, e)| ((*k).to_owned(), e.clone()))
        .collect()
}

fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.payload {
            Some(Payload::Resync(m)) => format!("resync:{}", m.phase().as_str_name()),
            _ => format!("{}:{}", e.kind_name(), e.key().unwrap_or_default()),
        })
        .collect()
}

fn desired_small() -> EntityMap {
    mk_view(&[
        ("ep/file/se/ns/s/10.0.0.1", mk_ep("10.0.0.1")),
        ("svc/ns/a.b", mk_svc("a.b")),
    ])
}

#[test]
fn resync_brackets_services_before_endpoints() {
    let mut em = Emitted::new("file:/d".into(), 7);
    let plan = em.plan(&desired_small(), 100, 1);
    assert_eq!(
        kinds(&plan),
        [
            "resync:STARTED",
            "service_upsert:svc/ns/a.b",
            "endpoint_upsert:ep/file/se/ns/s/10.0.0.1",
        ]
    );
    // COMPLETED comes in an append of its own, once the entities are in the log.
    em.commit(&plan);
    assert_eq!(em.phase(), ResyncPhase::Started);
    let completed = em.plan(&desired_small(), 100, 1);
    assert_eq!(kinds(&completed), ["resync:COMPLETED"]);
    assert!(
        plan.iter().chain(&completed).all(|e| e.generation == 7
            && e.source == "file:/d"
            && e.schema_version == SCHEMA_VERSION)
    );
    em.commit(&completed);
    assert_eq!(em.phase(), ResyncPhase::Completed);
    assert!(
        em.plan(&desired_small(), 100, 2).is_empty(),
        "nothing changed, nothing to append"
    );
}

#[test]
fn resync_is_cut_into_batches_and_completes_last() {
    let desired: EntityMap = (0..10)
        .map(|i| (format!("svc/ns/h{i}"), mk_svc(&format!("h{i}"))))
        .collect();
    let mut em = Emitted::new("s".into(), 1);
    let mut all = Vec::new();
    for _ in 0..10 {
        let plan = em.plan(&desired, 4, 0);
        if plan.is_empty() {
            break;
        }
        assert!(plan.len() <= 4);
        em.commit(&plan);
        all.extend(plan);
    }
    let k = kinds(&all);
    assert_eq!(k.first().map(String::as_str), Some("resync:STARTED"));
    assert_eq!(k.last().map(String::as_str), Some("resync:COMPLETED"));
    assert_eq!(k.len(), 12, "{k:?}");
    assert_eq!(k.iter().filter(|s| s.starts_with("resync")).count(), 2);
}

#[test]
fn diffs_are_entity_level_and_deletes_follow_upserts() {
    let mut em = Emitted::new("s".into(), 1);
    let first = em.plan(&desired_small(), 100, 0);
    em.commit(&first);
    let completed = em.plan(&desired_small(), 100, 0);
    assert_eq!(kinds(&completed), ["resync:COMPLETED"]);
    em.commit(&completed);

    let mut next = desired_small();
    next.remove("ep/file/se/ns/s/10.0.0.1");
    next.insert("ep/file/se/ns/s/10.0.0.2".into(), mk_ep("10.0.0.2"));
    next.insert("svc/ns/c.d".into(), mk_svc("c.d"));
    let plan = em.plan(&next, 100, 0);
    assert_eq!(
        kinds(&plan),
        [
            "service_upsert:svc/ns/c.d",
            "endpoint_upsert:ep/file/se/ns/s/10.0.0.2",
            "endpoint_delete:ep/file/se/ns/s/10.0.0.1"
        ]
    );
    em.commit(&plan);
    assert_eq!(em.len(), 3);
    assert!(em.plan(&next, 100, 0).is_empty());
}

#[test]
fn a_failed_append_is_simply_planned_again() {
    let em = Emitted::new("s".into(), 1);
    let a = em.plan(&desired_small(), 100, 5);
    let b = em.plan(&desired_small(), 100, 5);
    assert_eq!(a, b, "without a commit, the same plan comes back");
}

fn mk_obj(kind: pb::ConfigKind, name: &str, doc: usize, hosts: &[&str]) -> Arc<IstioObject> {
    Arc::new(IstioObject {
        id: ObjectId {
            kind,
            namespace: "ns".into(),
            name: name.into(),
        },
        document: doc,
        config: pb::ConfigObject {
            kind: kind as i32,
            namespace: "ns".into(),
            name: name.into(),
            spec_json: format!("{{\"doc\":{doc}}}"),
            ..Default::default()
        },
        services: hosts
            .iter()
            .map(|h| pb::Service {
                hostname: (*h).into(),
                namespace: "ns".into(),
                ..Default::default()
            })
            .collect(),
        endpoints: Vec::new(),
    })
}

#[test]
fn conflicts_are_decided_by_path_order_and_reported() {
    let se = pb::ConfigKind::ServiceEntry;
    let a = [
        mk_obj(se, "one", 0, &["h.x"]),
        mk_obj(se, "two", 1, &["h.x", "k.x"]),
    ];
    let b = [mk_obj(se, "one", 3, &["z.x"])];
    let (view, problems) = desired([
        (Path::new("/d/a.yaml"), &a[..]),
        (Path::new("/d/b.yaml"), &b[..]),
    ]);
    let keys: Vec<&str> = view.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "cfg/service_entry/ns/one",
            "cfg/service_entry/ns/two",
            "svc/ns/h.x",
            "svc/ns/k.x"
        ]
    );
    let Some(Entity::Config(c)) = view.get("cfg/service_entry/ns/one") else {
        panic!("config")
    };
    assert_eq!(c.spec_json, "{\"doc\":0}", "a.yaml sorts first and wins");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems.iter().all(|p| p.kind == ProblemKind::Conflict));
    assert_eq!(problems[0].path, Path::new("/d/a.yaml"));
    assert!(problems[0].reason.contains("h.x"), "{}", problems[0]);
    assert_eq!(problems[1].path, Path::new("/d/b.yaml"));
}
