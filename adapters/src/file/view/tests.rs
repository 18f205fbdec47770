//! The desired view: conflict order across files.

use super::*;

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
        selector: None,
        workload: None,
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
    let Some(Entity::Config(c)) = view.get("cfg/service_entry/ns/one").map(Arc::as_ref) else {
        panic!("config")
    };
    assert_eq!(c.spec_json, "{\"doc\":0}", "a.yaml sorts first and wins");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems.iter().all(|p| p.kind == ProblemKind::Conflict));
    assert_eq!(problems[0].path, Path::new("/d/a.yaml"));
    assert!(problems[0].reason.contains("h.x"), "{}", problems[0]);
    assert_eq!(problems[1].path, Path::new("/d/b.yaml"));
}
