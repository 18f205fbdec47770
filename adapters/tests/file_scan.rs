//! The file adapter over real files, one scan at a time (`FileAdapter::scan_once`):
//! which events each change to the files produces. No watcher and no log here; see
//! `file_watch.rs` for the running adapter against the embedded log.

use std::path::{Path, PathBuf};

use deltapilot_adapters::file::{FileAdapter, FileAdapterOptions, ProblemKind};
use deltapilot_proto::event::Payload;

use deltapilot_testkit::log as support_log;
use support_log::summary;

/// A ServiceEntry with one host and the given endpoint addresses.
fn mk_se(name: &str, host: &str, addrs: &[&str]) -> String {
    let mut s = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: mesh\n\
         spec:\n  hosts: [{host}]\n  resolution: STATIC\n  ports:\n  - {{number: 8080, name: http, protocol: HTTP}}\n"
    );
    if !addrs.is_empty() {
        s.push_str("  endpoints:\n");
        for a in addrs {
            s.push_str(&format!("  - address: {a}\n    locality: r1/z1\n"));
        }
    }
    s
}

fn mk_adapter(dir: &Path, state: Option<&Path>) -> FileAdapter {
    let opts = FileAdapterOptions {
        state_dir: state.map(Path::to_owned),
        ..Default::default()
    };
    FileAdapter::new(vec![dir.to_owned()], opts).expect("adapter")
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write file");
}

/// Writes through a temporary file and a rename, as editors and `kubectl cp` do.
fn write_atomic(path: &Path, text: &str) {
    let tmp: PathBuf = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("x")
    ));
    std::fs::write(&tmp, text).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}

#[test]
fn the_first_scan_is_a_resync_at_one_generation() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        &dir.path().join("a.yaml"),
        &mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.2"]),
    );
    let mut ad = mk_adapter(dir.path(), None);
    let events = ad.scan_once();
    assert_eq!(
        summary(&events),
        [
            "resync:STARTED",
            "service_upsert:svc/mesh/a.example.com",
            "config_upsert:cfg/service_entry/mesh/a",
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.1",
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.2",
            "resync:COMPLETED",
        ]
    );
    let g = events[0].generation;
    assert!(g > 0);
    assert!(
        events
            .iter()
            .all(|e| e.generation == g && e.source == ad.source() && e.schema_version >= 1)
    );
    assert!(ad.source().starts_with("file:/"), "{}", ad.source());
    let st = ad.status().borrow().clone();
    assert!(st.resync_completed);
    assert_eq!(
        (
            st.generation,
            st.entities_in_view,
            st.files_ok,
            st.files_bad
        ),
        (g, 4, 1, 0)
    );
    assert!(
        ad.scan_once().is_empty(),
        "an unchanged directory appends nothing"
    );
}

#[test]
fn edits_append_exactly_the_changed_entities() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.yaml");
    write(&file, &mk_se("a", "a.example.com", &["10.0.0.1"]));
    let mut ad = mk_adapter(dir.path(), None);
    let g = ad.scan_once()[0].generation;

    write(
        &file,
        &mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.2"]),
    );
    let added = ad.scan_once();
    assert_eq!(
        summary(&added),
        ["endpoint_upsert:ep/file/se/mesh/a/10.0.0.2"]
    );
    let Some(Payload::EndpointUpsert(u)) = &added[0].payload else {
        panic!("endpoint upsert")
    };
    let ep = u.endpoint.as_ref().expect("endpoint");
    assert_eq!(ep.address, "10.0.0.2");
    assert_eq!(
        ep.locality
            .as_ref()
            .map(|l| (l.region.as_str(), l.zone.as_str())),
        Some(("r1", "z1"))
    );
    assert_eq!(ep.services.len(), 1);
    assert_eq!(ep.services[0].hostname, "a.example.com");

    write(&file, &mk_se("a", "a.example.com", &["10.0.0.2"]));
    let removed = ad.scan_once();
    assert_eq!(
        summary(&removed),
        ["endpoint_delete:ep/file/se/mesh/a/10.0.0.1"]
    );
    assert!(
        removed.iter().all(|e| e.generation == g),
        "changes keep the start-up generation"
    );

    write(&file, &mk_se("a", "a.example.com", &["10.0.0.2"]));
    assert!(
        ad.scan_once().is_empty(),
        "rewriting identical content appends nothing"
    );
    // Same meaning, different key order and flow style: still nothing.
    write(
        &file,
        "kind: ServiceEntry\napiVersion: networking.istio.io/v1\nmetadata: {namespace: mesh, name: a}\n\
         spec:\n  ports: [{protocol: HTTP, name: http, number: 8080}]\n  resolution: STATIC\n  hosts: [a.example.com]\n\
         \x20 endpoints: [{locality: r1/z1, address: 10.0.0.2}]\n",
    );
    assert_eq!(
        summary(&ad.scan_once()),
        Vec::<String>::new(),
        "a reformatted file appends nothing"
    );
    let st = ad.status().borrow().clone();
    assert_eq!(st.entities_in_view, 3);
}

#[test]
fn an_atomic_rename_over_the_file_is_picked_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.yaml");
    write(&file, &mk_se("a", "a.example.com", &["10.0.0.1"]));
    let mut ad = mk_adapter(dir.path(), None);
    ad.scan_once();
    write_atomic(
        &file,
        &mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.9"]),
    );
    assert_eq!(
        summary(&ad.scan_once()),
        ["endpoint_upsert:ep/file/se/mesh/a/10.0.0.9"]
    );
    // Renaming the file keeps every key: the keys do not depend on the path.
    std::fs::rename(&file, dir.path().join("b.yml")).expect("rename");
    assert!(ad.scan_once().is_empty());
}

#[test]
fn a_bad_yaml_file_keeps_its_last_good_state_while_others_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    write(&a, &mk_se("a", "a.example.com", &["10.0.0.1"]));
    write(&b, &mk_se("b", "b.example.com", &["10.0.1.1"]));
    let mut ad = mk_adapter(dir.path(), None);
    ad.scan_once();

    // a.yaml breaks (line 4 opens a flow mapping that never closes); b.yaml changes.
    write(
        &a,
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  labels: {x: y\nspec: {}\n",
    );
    write(&b, &mk_se("b", "b.example.com", &["10.0.1.1", "10.0.1.2"]));
    let events = ad.scan_once();
    assert_eq!(
        summary(&events),
        ["endpoint_upsert:ep/file/se/mesh/b/10.0.1.2"],
        "nothing of a.yaml is deleted"
    );

    let st = ad.status().borrow().clone();
    assert_eq!(
        (st.files_ok, st.files_bad, st.invalid_files_total),
        (1, 1, 1)
    );
    assert_eq!(st.entities_in_view, 7);
    let p = st
        .problems
        .iter()
        .find(|p| p.path == a)
        .expect("a problem for a.yaml");
    assert_eq!(p.kind, ProblemKind::InvalidFile);
    assert!(p.kept_last_good);
    let line = p.line.expect("a line");
    assert!((4..=5).contains(&line), "{p}");
    let shown = p.to_string();
    assert!(
        shown.starts_with(&format!("{}:{line}", a.display())),
        "{shown}"
    );

    // Fixed: only what differs from the last good state goes out.
    write(&a, &mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.3"]));
    assert_eq!(
        summary(&ad.scan_once()),
        ["endpoint_upsert:ep/file/se/mesh/a/10.0.0.3"]
    );
    assert!(ad.status().borrow().problems.is_empty());
}

#[test]
fn multi_document_files_apply_per_document_and_keep_a_malformed_ones_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mesh.yaml");
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs, namespace: mesh}\n\
              spec: {hosts: [a.example.com], http: [{route: [{destination: {host: a.example.com}}]}]}\n";
    let good = format!(
        "{}---\n{}---\n{vs}",
        mk_se("a", "a.example.com", &["10.0.0.1"]),
        mk_se("b", "b.example.com", &["10.0.1.1"])
    );
    write(&file, &good);
    let mut ad = mk_adapter(dir.path(), None);
    let first = summary(&ad.scan_once());
    assert!(
        first.contains(&"config_upsert:cfg/virtual_service/mesh/vs".to_owned()),
        "{first:?}"
    );
    assert_eq!(first.len(), 2 + 3 + 3 + 1, "{first:?}");

    // Document 2 (b) gets a port that is not a number; document 1 changes.
    let broken_b = mk_se("b", "b.example.com", &["10.0.1.1", "10.0.1.2"])
        .replace("number: 8080", "number: http");
    let text = format!(
        "{}---\n{broken_b}---\n{vs}",
        mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.2"])
    );
    write(&file, &text);
    assert_eq!(
        summary(&ad.scan_once()),
        ["endpoint_upsert:ep/file/se/mesh/a/10.0.0.2"],
        "b keeps its last good state"
    );
    let st = ad.status().borrow().clone();
    assert_eq!(st.problems.len(), 1, "{:?}", st.problems);
    let p = &st.problems[0];
    assert_eq!(
        (p.kind, p.document, p.kept_last_good),
        (ProblemKind::MalformedDocument, Some(1), true)
    );
    let b_start = text
        .lines()
        .position(|l| l.contains("name: b"))
        .expect("b's metadata")
        + 1;
    assert!(p.line.is_some_and(|l| l > b_start), "{p}");
    assert_eq!(st.malformed_documents_total, 1);

    // Removing document 3 deletes the VirtualService only.
    let text = format!(
        "{}---\n{}",
        mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.2"]),
        mk_se("b", "b.example.com", &["10.0.1.1"])
    );
    write(&file, &text);
    assert_eq!(
        summary(&ad.scan_once()),
        ["config_delete:cfg/virtual_service/mesh/vs"]
    );
}

#[test]
fn a_deleted_file_deletes_its_entities() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        &dir.path().join("a.yaml"),
        &mk_se("a", "a.example.com", &["10.0.0.1"]),
    );
    write(
        &dir.path().join("b.yaml"),
        &mk_se("b", "b.example.com", &[]),
    );
    let mut ad = mk_adapter(dir.path(), None);
    ad.scan_once();
    std::fs::remove_file(dir.path().join("a.yaml")).expect("rm");
    assert_eq!(
        summary(&ad.scan_once()),
        [
            "endpoint_delete:ep/file/se/mesh/a/10.0.0.1",
            "config_delete:cfg/service_entry/mesh/a",
            "service_delete:svc/mesh/a.example.com",
        ]
    );
}

#[test]
fn a_restart_resyncs_under_a_higher_generation_without_what_vanished() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        &dir.path().join("a.yaml"),
        &mk_se("a", "a.example.com", &["10.0.0.1"]),
    );
    write(
        &dir.path().join("b.yaml"),
        &mk_se("b", "b.example.com", &["10.0.1.1"]),
    );
    let mut first = mk_adapter(dir.path(), None);
    let g1 = first.scan_once()[0].generation;
    let source = first.source().to_owned();
    drop(first);

    std::fs::remove_file(dir.path().join("b.yaml")).expect("rm while down");
    let mut second = mk_adapter(dir.path(), None);
    assert_eq!(
        second.source(),
        source,
        "the same directory is the same source"
    );
    let events = second.scan_once();
    let g2 = events[0].generation;
    assert!(g2 > g1, "{g2} > {g1}");
    assert_eq!(
        summary(&events),
        [
            "resync:STARTED",
            "service_upsert:svc/mesh/a.example.com",
            "config_upsert:cfg/service_entry/mesh/a",
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.1",
            "resync:COMPLETED",
        ],
        "no delete for b: the engine sweeps it on COMPLETED"
    );
    assert!(events.iter().all(|e| e.generation == g2));
}

#[test]
fn with_a_state_dir_a_file_broken_at_restart_keeps_its_last_good_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("state dir");
    let a = dir.path().join("a.yaml");
    write(&a, &mk_se("a", "a.example.com", &["10.0.0.1"]));
    let mut first = mk_adapter(dir.path(), Some(state.path()));
    let g1 = first.scan_once()[0].generation;
    drop(first);

    write(&a, "kind: [broken\n");
    let mut second = mk_adapter(dir.path(), Some(state.path()));
    let events = second.scan_once();
    assert!(events[0].generation > g1);
    assert_eq!(
        summary(&events),
        [
            "resync:STARTED",
            "service_upsert:svc/mesh/a.example.com",
            "config_upsert:cfg/service_entry/mesh/a",
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.1",
            "resync:COMPLETED",
        ]
    );
    let st = second.status().borrow().clone();
    assert_eq!(st.files_bad, 1);
    assert!(
        st.problems.iter().any(|p| p.path == a && p.kept_last_good),
        "{:?}",
        st.problems
    );

    // Without the state directory, the broken file contributes nothing.
    let mut stateless = mk_adapter(dir.path(), None);
    assert_eq!(
        summary(&stateless.scan_once()),
        ["resync:STARTED", "resync:COMPLETED"]
    );
}

#[test]
fn a_missing_directory_is_refused_at_startup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope");
    let err = FileAdapter::new(vec![missing.clone()], FileAdapterOptions::default())
        .expect_err("missing dir");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    let file = dir.path().join("f.yaml");
    write(&file, "");
    assert!(
        FileAdapter::new(vec![file], FileAdapterOptions::default()).is_err(),
        "a file is not a directory"
    );
    assert!(FileAdapter::new(Vec::new(), FileAdapterOptions::default()).is_err());
}
