//! Direct log churn (`--log URI`): the events the load generator appends fold,
//! in the real engine, into the clusters and assignments it expects — the initial
//! mesh as a resync, then an endpoint change, a service added and one removed,
//! and VirtualService weight shifts whose markers reach the route configuration.

use std::sync::Arc;
use std::time::Instant;

use deltapilot_engine::runner::Engine;
use deltapilot_load_tests::churn::Churn;
use deltapilot_load_tests::mesh::Mesh;
use deltapilot_load_tests::proxy::decode::cla_addresses;
use deltapilot_load_tests::scenario::{ChurnMix, ChurnSpec, MeshSpec};
use deltapilot_load_tests::sink::Sink;
use deltapilot_load_tests::tracker::Tracker;
use deltapilot_log::{EventLog, Log, Position, parse_uri};
use deltapilot_xds::generate::GenOptions;
use rand::SeedableRng;

async fn fold_all(log: &Log) -> Engine {
    let mut engine = Engine::new(GenOptions::default());
    let records = log
        .read(&Position::single(0), 1_000_000)
        .await
        .expect("read");
    engine.apply_records(&records);
    engine
}

#[tokio::test]
async fn appended_churn_folds_into_the_expected_resources() {
    let dir = tempfile::tempdir().expect("tmp");
    let uri = format!("file://{}", dir.path().join("log").display());
    let (u, o) = parse_uri(&uri).expect("uri");
    let sink = Sink::log(Log::open(&u, &o).await.expect("open"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let spec = MeshSpec {
        services: 6,
        endpoints_per_service: 3,
        http_fraction: 0.5,
        namespaces: 2,
        rules: 2,
    };
    let mesh = Mesh::new(&spec, &mut rng);
    sink.write_initial(&mesh).await.expect("initial");

    let tracker = Arc::new(Tracker::new());
    let mix = ChurnMix {
        flap: 1,
        scale_up: 1,
        scale_down: 0,
        service_add: 1,
        service_remove: 1,
        rule_shift: 1,
    };
    let mut churn = Churn::new(
        mesh,
        ChurnSpec {
            mix,
            ..ChurnSpec::default()
        },
        3,
        tracker,
    );
    let mut writes = 0;
    for _ in 0..30 {
        if let Some(w) = churn.next(Instant::now()) {
            sink.write(&w).await.expect("write");
            writes += 1;
        }
    }
    assert!(writes > 0);

    let Sink::Log { log, .. } = &sink else {
        unreachable!("a log sink")
    };
    let engine = fold_all(log).await;
    let snap = engine.current();
    let expected = churn.mesh().expected_clusters();
    assert_eq!(
        snap.resources.clusters.len(),
        expected.len(),
        "one cluster per service"
    );
    for s in &churn.mesh().services {
        let cla = snap
            .resources
            .endpoints
            .get(&s.cluster)
            .unwrap_or_else(|| panic!("no assignment for {}", s.cluster));
        let (_, addrs) = cla_addresses(&cla.bytes).expect("cla");
        let mut want: Vec<String> = s.endpoints.iter().map(|e| e.addr.to_string()).collect();
        want.sort();
        assert_eq!(addrs, want, "{}", s.cluster);
    }
    let route = snap
        .resources
        .routes
        .get("8080")
        .expect("the HTTP port's route");
    for r in &churn.mesh().rules {
        assert!(
            memchr::memmem::find(&route.bytes, r.marker().as_bytes()).is_some(),
            "route 8080 holds {}'s latest shift ({})",
            r.name,
            r.marker()
        );
    }
    assert!(
        churn.mesh().rules.iter().any(|r| r.rev > 0),
        "some rule shifted"
    );
}
