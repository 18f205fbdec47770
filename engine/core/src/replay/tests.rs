//! Unit tests of the replayer: one event at a time equals one batch, changes are
//! attributed with old and new versions, and predicates parse and match.

use std::str::FromStr;

use bytes::Bytes;

use super::bisect::{Predicate, Target};
use super::*;
use deltapilot_log::encode_event;
use deltapilot_model::ProxyType;
use deltapilot_model::state::mk::*;

fn records(events: &[Event]) -> Vec<Record> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| Record {
            pos: RecordPos {
                partition: 0,
                offset: i as u64,
            },
            bytes: Bytes::from(encode_event(e)),
        })
        .collect()
}

fn history() -> Vec<Event> {
    vec![
        svc("a", 0, "ns", "h1", &[80]),
        ep("a", 0, "ep/1", "10.0.0.1", &["h1"]),
        ep("a", 0, "ep/orphan", "10.0.0.9", &["nope"]),
        svc("a", 0, "ns", "h2", &[80, 5000]),
        ep("a", 0, "ep/2", "10.0.0.2", &["h2"]),
        ep_del("a", 0, "ep/1"),
        svc_del("a", 0, "ns", "h2"),
    ]
}

#[test]
fn one_event_at_a_time_equals_one_batch() {
    let recs = records(&history());
    let mut batch = Replayer::new(GenOptions::default());
    batch.apply_records(&recs);
    let mut single = Replayer::new(GenOptions::default());
    for r in &recs {
        let ev = r.decode().expect("decode");
        single.apply_event(r.pos, &ev);
    }
    assert_eq!(single.model(), batch.model());
    assert_eq!(single.resources().clone(), batch.resources().clone());
    let (one, all) = (single.snapshot(), batch.snapshot());
    assert_eq!(one.hash, all.hash);
    assert_eq!(
        one.hash,
        deltapilot_xds::hash::full_snapshot_hash(&one),
        "the running hash, event by event"
    );
    assert_eq!(single.position(), &Position::single(7));
    assert_eq!(batch.stats().skipped, 1);
}

#[test]
fn changes_name_old_and_new_versions_and_views() {
    let evs = history();
    let mut r = Replayer::new(GenOptions::default());
    let first = r.apply_event(
        RecordPos {
            partition: 0,
            offset: 0,
        },
        &evs[0],
    );
    let kinds: Vec<ResourceKind> = first.changes.iter().map(|c| c.kind).collect();
    assert!(
        kinds.contains(&ResourceKind::Cluster) && kinds.contains(&ResourceKind::SidecarListener)
    );
    assert!(
        first
            .changes
            .iter()
            .all(|c| c.old.is_none() && c.new.is_some())
    );
    let lis = first
        .changes
        .iter()
        .find(|c| c.kind == ResourceKind::GrpcListener)
        .expect("grpc listener");
    assert_eq!(lis.kind.views(), &[ProxyType::ProxylessGrpc]);

    let second = r.apply_event(
        RecordPos {
            partition: 0,
            offset: 1,
        },
        &evs[1],
    );
    assert_eq!(
        second.changes.len(),
        1,
        "an endpoint changes only its assignment: {second:?}"
    );
    let c = &second.changes[0];
    assert_eq!(
        (c.kind, &*c.name),
        (ResourceKind::Endpoint, "outbound|80||h1")
    );
    let (old, new) = (c.old.as_ref().expect("old"), c.new.as_ref().expect("new"));
    assert_ne!(old.version, new.version);

    let orphan = r.apply_event(
        RecordPos {
            partition: 0,
            offset: 2,
        },
        &evs[2],
    );
    assert!(orphan.changes.is_empty());
    assert_eq!(
        orphan.skipped.expect("skipped").reason,
        deltapilot_model::fold::SkipReason::UnknownService
    );
}

#[test]
fn an_undecodable_record_is_skipped_as_the_engine_skips_it() {
    let mut recs = records(&history());
    // Garbage in the middle: the records after it still fold.
    recs.insert(
        2,
        Record {
            pos: RecordPos {
                partition: 0,
                offset: 2,
            },
            bytes: Bytes::from_static(&[0xff, 0xff, 0xff]),
        },
    );
    for (i, r) in recs.iter_mut().enumerate() {
        r.pos.offset = i as u64;
    }
    let mut batch = Replayer::new(GenOptions::default());
    batch.apply_records(&recs);
    assert_eq!(batch.position(), &Position::single(8));
    assert_eq!(batch.stats().records, 8);
    assert_eq!(
        batch.stats().skipped,
        2,
        "the garbage and the orphan endpoint"
    );

    // One at a time, the garbage comes back as a skip with its reason.
    let mut single = Replayer::new(GenOptions::default());
    let mut reasons = Vec::new();
    for r in &recs {
        let report = match r.decode() {
            Ok(ev) => single.apply_event(r.pos, &ev),
            Err(e) => single.skip_record(crate::runner::undecodable(r.pos, &e)),
        };
        if let Some(s) = report.skipped {
            reasons.push((s.pos.offset, s.reason));
        }
    }
    assert_eq!(
        reasons,
        [
            (2, deltapilot_model::fold::SkipReason::Decode),
            (3, deltapilot_model::fold::SkipReason::UnknownService)
        ]
    );

    // Both equal the engine fed the same records.
    let mut engine = crate::runner::Engine::new(GenOptions::default());
    engine.apply_records(&recs);
    let served = engine.current();
    assert_eq!(served.position, Position::single(8));
    for r in [&mut batch, &mut single] {
        let snap = r.snapshot();
        assert_eq!(snap.hash, served.hash);
        assert_eq!(r.model(), engine.model());
    }
}

#[test]
fn predicates_and_targets_parse_with_clear_errors() {
    assert_eq!(
        Predicate::from_str("contains 10.0.0.7"),
        Ok(Predicate::Contains("10.0.0.7".into()))
    );
    assert_eq!(Predicate::from_str(" absent "), Ok(Predicate::Absent));
    assert!(
        Predicate::from_str("contains")
            .expect_err("no text")
            .contains("needs")
    );
    assert!(
        Predicate::from_str("bigger 3")
            .expect_err("unknown")
            .contains("expected")
    );
    let t = Target::from_str("eds/outbound|80||h1").expect("target");
    assert_eq!(
        (t.resource_type, t.name.as_str()),
        (ResourceType::Endpoint, "outbound|80||h1")
    );
    assert!(
        Target::from_str("xds/a")
            .expect_err("type")
            .contains("cds, eds")
    );
    assert!(
        Target::from_str("eds")
            .expect_err("no name")
            .contains("TYPE/NAME")
    );

    let r = Resource::new(Arc::from("x"), Bytes::from_static(b"hello"));
    let text = |r: &Resource| String::from_utf8_lossy(&r.bytes).into_owned();
    assert!(Predicate::Contains("ell".into()).matches(Some(&r), &text));
    assert!(Predicate::Version(r.version[..6].to_string()).matches(Some(&r), &text));
    assert!(!Predicate::Present.matches(None, &text));
    assert!(Predicate::Absent.matches(None, &text));
}

#[test]
fn routes_to_counts_only_clusters_that_receive_traffic() {
    use envoy_types::pb::envoy::config::route::v3::{
        Route, RouteAction, RouteConfiguration, VirtualHost, WeightedCluster, route::Action,
        route_action::ClusterSpecifier, weighted_cluster::ClusterWeight,
    };
    use envoy_types::pb::google::protobuf::UInt32Value;
    use prost::Message as _;
    let weighted = |v1: u32, v2: u32| {
        let cw = |name: &str, w: u32| ClusterWeight {
            name: name.into(),
            weight: Some(UInt32Value { value: w }),
            ..Default::default()
        };
        let rc = RouteConfiguration {
            name: "9080".into(),
            virtual_hosts: vec![VirtualHost {
                name: "reviews:9080".into(),
                domains: vec!["reviews".into(), "reviews:9080".into()],
                routes: vec![Route {
                    action: Some(Action::Route(RouteAction {
                        cluster_specifier: Some(ClusterSpecifier::WeightedClusters(
                            WeightedCluster {
                                clusters: vec![
                                    cw("outbound|9080|v1|reviews.default.svc.cluster.local", v1),
                                    cw("outbound|9080|v2|reviews.default.svc.cluster.local", v2),
                                ],
                                ..Default::default()
                            },
                        )),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        Resource::new(Arc::from("9080"), Bytes::from(rc.encode_to_vec()))
    };
    let text = |r: &Resource| String::from_utf8_lossy(&r.bytes).into_owned();
    let p = Predicate::from_str("routes-to |v2|reviews.").expect("parses");
    assert_eq!(
        p,
        Predicate::RoutesTo {
            cluster: "|v2|reviews.".into(),
            host: None
        }
    );
    // A weight of 0 names v2 (so `contains` matches) but sends it nothing.
    let zero = weighted(100, 0);
    assert!(Predicate::Contains("|v2|reviews.".into()).matches(Some(&zero), &text));
    assert!(!p.matches(Some(&zero), &text));
    assert!(p.matches(Some(&weighted(90, 10)), &text));
    assert!(!p.matches(None, &text));
    let scoped =
        |h: &str| Predicate::from_str(&format!("routes-to |v2|reviews. for {h}")).expect("parses");
    assert!(scoped("reviews").matches(Some(&weighted(90, 10)), &text));
    assert!(!scoped("ratings").matches(Some(&weighted(90, 10)), &text));
    assert!(
        Predicate::from_str("routes-to")
            .expect_err("no cluster")
            .contains("routes-to |v2|reviews.")
    );
}
