//! WorkloadEntries joined into ServiceEntries through `workloadSelector`, by the
//! file adapter over real files, one scan at a time: which endpoint entities each
//! change produces (exactly the affected ones, nothing on a rescan), and that the
//! real engine folds them into the ClusterLoadAssignment of the entry's host.
//! (The log and fold helpers are the Kubernetes tests' harness; no fake API
//! server runs here.)

mod support_k8s;

use std::path::Path;

use deltapilot_adapters::file::{FileAdapter, FileAdapterOptions, ProblemKind};
use deltapilot_model::state::ModelState;
use deltapilot_proto::Event;
use deltapilot_xds::generate::{GenOptions, build_all};
use support_k8s::harness::{fold_all, summary};

const HOST: &str = "pay.shop.internal";
const CLUSTER: &str = "outbound|8080||pay.shop.internal";

fn mk_se(selector: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: pay, namespace: shop}}
spec:
  hosts: [{HOST}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {{number: 8080, name: http, protocol: HTTP, targetPort: 18080}}
  workloadSelector:
    labels: {{app: {selector}}}
"
    )
}

fn mk_we(name: &str, app: &str, address: &str, extra: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: {name}
  namespace: shop
  labels: {{app: {app}}}
spec:
  address: {address}
{extra}"
    )
}

fn workloads(vm1_app: &str) -> String {
    [
        mk_we(
            "vm-1",
            vm1_app,
            "10.2.0.1",
            "  locality: eu/eu-1a\n  serviceAccount: pay-sa\n",
        ),
        mk_we(
            "vm-2",
            "pay",
            "10.2.0.2",
            "  ports: {http: 9000}\n  weight: 3\n",
        ),
        mk_we("vm-3", "cart", "10.2.0.3", ""),
        mk_we("vm-dns", "pay", "vm.example.com", ""),
    ]
    .join("---\n")
}

fn mk_adapter(dir: &Path) -> FileAdapter {
    FileAdapter::new(vec![dir.to_owned()], FileAdapterOptions::default()).expect("adapter")
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write file");
}

/// Folds every event so far with the real engine and builds its xDS resources.
fn engine_view(events: &[Event]) -> (ModelState, Vec<u8>) {
    let state = fold_all(events);
    let (resources, errors) = build_all(&state, &GenOptions::default());
    assert!(errors.is_empty(), "{errors:?}");
    let cla = resources
        .endpoints
        .get(CLUSTER)
        .map(|r| r.bytes.to_vec())
        .unwrap_or_default();
    (state, cla)
}

fn has(cla: &[u8], ip: &str) -> bool {
    cla.windows(ip.len()).any(|w| w == ip.as_bytes())
}

/// (key, address, target port of `http`) of the host's endpoints in the engine.
fn engine_endpoints(state: &ModelState) -> Vec<(String, String, u16)> {
    let mut out: Vec<(String, String, u16)> = state
        .endpoints_of(HOST)
        .map(|e| {
            let port = e.ports.get("http").copied().unwrap_or(0);
            (e.key.to_string(), e.address.to_string(), port)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn selected_workload_entries_become_endpoints_and_reach_eds() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(&dir.path().join("pay.yaml"), &mk_se("pay"));
    write(&dir.path().join("vms.yaml"), &workloads("pay"));
    let mut ad = mk_adapter(dir.path());
    let events = ad.scan_once();
    let s = summary(&events);
    for key in [
        "endpoint_upsert:ep/file/we/shop/pay/vm-1",
        "endpoint_upsert:ep/file/we/shop/pay/vm-2",
        "service_upsert:svc/shop/pay.shop.internal",
        "config_upsert:cfg/workload_entry/shop/vm-3",
    ] {
        assert!(s.iter().any(|e| e == key), "{key} missing from {s:#?}");
    }
    assert!(
        !s.iter()
            .any(|e| e.contains("/vm-3") && e.starts_with("endpoint")),
        "vm-3 is not selected: {s:#?}"
    );
    assert!(
        !s.iter()
            .any(|e| e.contains("vm-dns") && e.starts_with("endpoint")),
        "a hostname address is no endpoint: {s:#?}"
    );
    let status = ad.status().borrow().clone();
    let dns: Vec<_> = status
        .problems
        .iter()
        .filter(|p| p.reason.contains("vm.example.com"))
        .collect();
    assert_eq!(dns.len(), 1, "{:#?}", status.problems);
    assert_eq!(dns[0].kind, ProblemKind::SkippedPart);
    assert!(dns[0].path.ends_with("vms.yaml"), "{}", dns[0]);

    let (state, cla) = engine_view(&events);
    assert_eq!(
        engine_endpoints(&state),
        [
            ("ep/file/we/shop/pay/vm-1".into(), "10.2.0.1".into(), 18080),
            ("ep/file/we/shop/pay/vm-2".into(), "10.2.0.2".into(), 9000),
        ],
        "workload port, else the entry port's targetPort"
    );
    assert!(
        has(&cla, "10.2.0.1") && has(&cla, "10.2.0.2"),
        "CLA of {CLUSTER}"
    );
    assert!(!has(&cla, "10.2.0.3"));
    let vm1 = state
        .endpoints_of(HOST)
        .find(|e| e.address.to_string() == "10.2.0.1")
        .expect("vm-1");
    assert_eq!(&*vm1.locality.region, "eu");
    assert_eq!(&*vm1.service_account, "pay-sa");

    assert!(
        ad.scan_once().is_empty(),
        "a rescan of unchanged files appends nothing"
    );
}

#[test]
fn label_and_selector_changes_touch_exactly_the_affected_endpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let se = dir.path().join("pay.yaml");
    let vms = dir.path().join("vms.yaml");
    write(&se, &mk_se("pay"));
    write(&vms, &workloads("pay"));
    let mut ad = mk_adapter(dir.path());
    let mut log = ad.scan_once();

    // vm-1 stops matching: its config changes and exactly its endpoint goes.
    write(&vms, &workloads("billing"));
    let change = ad.scan_once();
    assert_eq!(
        summary(&change),
        [
            "config_upsert:cfg/workload_entry/shop/vm-1",
            "endpoint_delete:ep/file/we/shop/pay/vm-1",
        ]
    );
    log.extend(change);
    let (state, cla) = engine_view(&log);
    assert_eq!(engine_endpoints(&state).len(), 1);
    assert!(!has(&cla, "10.2.0.1") && has(&cla, "10.2.0.2"));

    // It matches again: exactly its endpoint comes back.
    write(&vms, &workloads("pay"));
    assert_eq!(
        summary(&ad.scan_once()),
        [
            "config_upsert:cfg/workload_entry/shop/vm-1",
            "endpoint_upsert:ep/file/we/shop/pay/vm-1",
        ]
    );

    // The selector moves to `cart`: vm-3 in, vm-1 and vm-2 out.
    write(&se, &mk_se("cart"));
    assert_eq!(
        summary(&ad.scan_once()),
        [
            "config_upsert:cfg/service_entry/shop/pay",
            "endpoint_upsert:ep/file/we/shop/pay/vm-3",
            "endpoint_delete:ep/file/we/shop/pay/vm-1",
            "endpoint_delete:ep/file/we/shop/pay/vm-2",
        ]
    );
    assert!(ad.scan_once().is_empty(), "no churn on a rescan");

    // The WorkloadEntries' file goes: their configs and the joined endpoint go.
    std::fs::remove_file(&vms).expect("remove");
    let gone = summary(&ad.scan_once());
    assert!(
        gone.iter()
            .any(|e| e == "endpoint_delete:ep/file/we/shop/pay/vm-3"),
        "{gone:#?}"
    );
    assert_eq!(gone.iter().filter(|e| e.starts_with("endpoint")).count(), 1);
    assert_eq!(
        gone.iter()
            .filter(|e| e.starts_with("config_delete:cfg/workload_entry/"))
            .count(),
        4
    );
}

#[test]
fn a_selector_with_inline_endpoints_is_malformed_and_keeps_its_last_good_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let se = dir.path().join("pay.yaml");
    write(&se, &mk_se("pay"));
    write(&dir.path().join("vms.yaml"), &workloads("pay"));
    let mut ad = mk_adapter(dir.path());
    ad.scan_once();
    let both = format!("{}  endpoints:\n  - address: 10.9.9.9\n", mk_se("cart"));
    write(&se, &both);
    assert!(
        ad.scan_once().is_empty(),
        "the malformed entry keeps its last good state"
    );
    let status = ad.status().borrow().clone();
    let p = status
        .problems
        .iter()
        .find(|p| p.path.ends_with("pay.yaml"))
        .expect("a problem for pay.yaml");
    assert_eq!(p.kind, ProblemKind::MalformedDocument);
    assert!(p.reason.contains("workloadSelector"), "{p}");
}

#[test]
fn the_demo_mesh_routes_its_workload_entries() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mesh");
    let mut ad = mk_adapter(&dir);
    let s = summary(&ad.scan_once());
    for key in [
        "service_upsert:svc/demo/orders.demo.local",
        "endpoint_upsert:ep/file/we/demo/orders/orders-vm-1",
        "endpoint_upsert:ep/file/we/demo/orders/orders-vm-2",
    ] {
        assert!(s.iter().any(|e| e == key), "{key} missing from {s:#?}");
    }
    let problems = ad.status().borrow().problems.clone();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The README's rules demo: the shipped mesh plus `examples/rules/` folds into
/// an applied VirtualService for `hello` whose routes translate without a
/// problem, so a newcomer who copies the file sees it work.
#[test]
fn the_demo_rule_applies_to_hello_without_problems() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for f in ["mesh/hello.yaml", "rules/hello-shift.yaml"] {
        let from = root.join(f);
        let name = from.file_name().expect("file name").to_owned();
        std::fs::copy(&from, tmp.path().join(name)).expect("copy example");
    }
    let mut ad = mk_adapter(tmp.path());
    let events = ad.scan_once();
    let problems = ad.status().borrow().problems.clone();
    assert!(problems.is_empty(), "{problems:#?}");
    let state = fold_all(&events);
    let hello = deltapilot_model::Hostname::new("hello.demo.local");
    let vs = state
        .rules()
        .virtual_service_for(&hello)
        .expect("the demo VirtualService binds hello");
    assert_eq!(
        state.rules().status(&vs.rule.key),
        Some(deltapilot_model::rules::RuleStatus::Applied)
    );
    let route_problems = deltapilot_xds::generate::route_problems(&state, &hello, 8080, false);
    assert!(route_problems.is_empty(), "{route_problems:#?}");
}
