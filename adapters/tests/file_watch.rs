//! The running file adapter (`FileAdapter::run`): real files, a real notify watcher,
//! the real embedded log, and the real fold reading what the adapter wrote. Every
//! wait is bounded.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use deltapilot_adapters::file::{FileAdapter, FileAdapterOptions, FileAdapterStatus, ProblemKind};
use deltapilot_log::file::FileLog;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use deltapilot_testkit::log as support_log;
use support_log::{WAIT, all_events, fold_all, summary, wait_log};

fn mk_se(name: &str, host: &str, addrs: &[&str]) -> String {
    let mut s = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: mesh\n\
         spec:\n  hosts: [{host}]\n  resolution: STATIC\n  ports:\n  - {{number: 8080, name: http, protocol: HTTP}}\n"
    );
    if !addrs.is_empty() {
        s.push_str("  endpoints:\n");
        for a in addrs {
            s.push_str(&format!("  - address: {a}\n"));
        }
    }
    s
}

fn write_atomic(path: &Path, text: &str) {
    let tmp: PathBuf = path.with_file_name(".incoming.tmp");
    std::fs::write(&tmp, text).expect("write temp");
    std::fs::rename(&tmp, path).expect("rename");
}

async fn wait_status(
    rx: &mut watch::Receiver<FileAdapterStatus>,
    what: &str,
    done: impl Fn(&FileAdapterStatus) -> bool,
) {
    let ok = matches!(
        tokio::time::timeout(WAIT, rx.wait_for(|s| done(s))).await,
        Ok(Ok(_))
    );
    assert!(
        ok,
        "timed out waiting for {what}; status: {:#?}",
        *rx.borrow()
    );
}

struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<deltapilot_adapters::Result<()>>,
    status: watch::Receiver<FileAdapterStatus>,
}

fn start(dir: &Path, log: &Arc<FileLog>, opts: FileAdapterOptions) -> Running {
    let adapter = FileAdapter::new(vec![dir.to_owned()], opts).expect("adapter");
    let status = adapter.status();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(adapter.run(log.clone(), stop_rx));
    Running { stop, task, status }
}

impl Running {
    async fn stop(self) {
        self.stop.send_replace(true);
        let r = tokio::time::timeout(WAIT, self.task).await;
        assert!(
            matches!(r, Ok(Ok(Ok(())))),
            "adapter did not stop cleanly: {r:?}"
        );
    }
}

/// Only the watcher can find changes in these tests: the periodic rescan is far off.
fn watch_only() -> FileAdapterOptions {
    FileAdapterOptions {
        rescan_interval: Duration::from_secs(3600),
        ..Default::default()
    }
}

/// Folds the whole log with the engine and checks it accepted every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_changes_reach_the_log_as_entity_events() {
    let dir = tempfile::tempdir().expect("watch dir");
    let data = tempfile::tempdir().expect("log dir");
    let log = Arc::new(FileLog::open(data.path(), Default::default()).expect("log"));
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    std::fs::write(&a, mk_se("a", "a.example.com", &["10.0.0.1"])).expect("write a");
    std::fs::write(&b, mk_se("b", "b.example.com", &["10.0.1.1"])).expect("write b");

    let mut run = start(dir.path(), &log, watch_only());
    let events = wait_log(&log, "the start-up resync", |s| {
        s.last().is_some_and(|l| l == "resync:COMPLETED")
    })
    .await;
    assert_eq!(summary(&events).len(), 8, "{:#?}", summary(&events));
    let resync_len = events.len();
    wait_status(&mut run.status, "resync completed", |s| {
        s.resync_completed && s.entities_in_view == 6
    })
    .await;
    // Readiness waits for a reader to fold up to here: just past the marker.
    assert_eq!(
        run.status.borrow().resync_completed_at,
        Some(deltapilot_log::Position::single(resync_len as u64)),
        "the resync's end is the log position just past its COMPLETED marker"
    );

    // A plain write that adds an endpoint.
    std::fs::write(&a, mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.2"])).expect("edit a");
    wait_log(&log, "the added endpoint", |s| s.len() > resync_len).await;

    // An atomic replace (temp file + rename) that adds another.
    write_atomic(
        &a,
        &mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
    );
    wait_log(&log, "the renamed-in endpoint", |s| {
        s.len() > resync_len + 1
    })
    .await;

    // b.yaml breaks: reported with path and line, nothing appended for it.
    std::fs::write(
        &b,
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: b\n",
    )
    .expect("break b");
    wait_status(&mut run.status, "b.yaml reported", |s| {
        s.problems.iter().any(|p| p.path == b)
    })
    .await;
    let problem = run
        .status
        .borrow()
        .problems
        .iter()
        .find(|p| p.path == b)
        .cloned()
        .expect("problem");
    assert_eq!(problem.kind, ProblemKind::InvalidFile);
    assert!(
        problem.line.is_some() && problem.kept_last_good,
        "{problem}"
    );

    // a.yaml still changes while b.yaml is broken.
    std::fs::write(&a, mk_se("a", "a.example.com", &["10.0.0.2", "10.0.0.3"]))
        .expect("edit a again");
    wait_log(&log, "the removed endpoint", |s| s.len() > resync_len + 2).await;

    // Deleting the broken file deletes its last good entities.
    std::fs::remove_file(&b).expect("rm b");
    wait_log(&log, "b's deletes", |s| {
        s.iter()
            .any(|x| x == "service_delete:svc/mesh/b.example.com")
    })
    .await;
    run.stop().await;

    let events = all_events(&log).await;
    assert_eq!(
        summary(&events[resync_len..]),
        [
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.2",
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.3",
            "endpoint_delete:ep/file/se/mesh/a/10.0.0.1",
            "endpoint_delete:ep/file/se/mesh/b/10.0.1.1",
            "config_delete:cfg/service_entry/mesh/b",
            "service_delete:svc/mesh/b.example.com",
        ],
        "exactly the entity changes, nothing spurious"
    );
    let state = fold_all(&events);
    let mut addrs: Vec<String> = state
        .endpoints_of("a.example.com")
        .map(|e| e.address.to_string())
        .collect();
    addrs.sort();
    assert_eq!(addrs, ["10.0.0.2", "10.0.0.3"]);
    assert!(state.get_service("b.example.com").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resyncs_and_the_engine_sweeps_what_vanished_while_down() {
    let dir = tempfile::tempdir().expect("watch dir");
    let data = tempfile::tempdir().expect("log dir");
    let state_dir = tempfile::tempdir().expect("state dir");
    let log = Arc::new(FileLog::open(data.path(), Default::default()).expect("log"));
    std::fs::write(
        dir.path().join("a.yaml"),
        mk_se("a", "a.example.com", &["10.0.0.1"]),
    )
    .expect("write a");
    std::fs::write(
        dir.path().join("b.yaml"),
        mk_se("b", "b.example.com", &["10.0.1.1"]),
    )
    .expect("write b");
    let opts = FileAdapterOptions {
        state_dir: Some(state_dir.path().to_owned()),
        ..watch_only()
    };

    let run = start(dir.path(), &log, opts.clone());
    let first = wait_log(&log, "the first resync", |s| {
        s.iter().filter(|x| *x == "resync:COMPLETED").count() == 1
    })
    .await;
    run.stop().await;
    let g1 = first[0].generation;
    assert!(fold_all(&first).get_service("b.example.com").is_some());

    std::fs::remove_file(dir.path().join("b.yaml")).expect("rm b while down");
    let run = start(dir.path(), &log, opts);
    let all = wait_log(&log, "the second resync", |s| {
        s.iter().filter(|x| *x == "resync:COMPLETED").count() == 2
    })
    .await;
    run.stop().await;

    let second = &all[first.len()..];
    let g2 = second[0].generation;
    assert!(g2 > g1, "{g2} > {g1}");
    assert!(second.iter().all(|e| e.generation == g2));
    assert_eq!(
        summary(second),
        [
            "resync:STARTED",
            "service_upsert:svc/mesh/a.example.com",
            "config_upsert:cfg/service_entry/mesh/a",
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.1",
            "resync:COMPLETED",
        ]
    );
    let state = fold_all(&all);
    assert!(
        state.get_service("b.example.com").is_none(),
        "swept on COMPLETED"
    );
    assert_eq!(state.endpoint_count("a.example.com"), 1);
    assert_eq!(
        state.raw_endpoints().count(),
        1,
        "b's endpoint is swept too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_directory_keeps_its_state_and_a_recreated_one_is_watched_again() {
    let root = tempfile::tempdir().expect("root");
    let data = tempfile::tempdir().expect("log dir");
    let log = Arc::new(FileLog::open(data.path(), Default::default()).expect("log"));
    let dir = root.path().join("mesh");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(
        dir.join("a.yaml"),
        mk_se("a", "a.example.com", &["10.0.0.1"]),
    )
    .expect("write a");
    // The periodic rescan is what re-establishes the watch on a re-created directory.
    let opts = FileAdapterOptions {
        rescan_interval: Duration::from_millis(200),
        ..Default::default()
    };
    let mut run = start(&dir, &log, opts);
    let first = wait_log(&log, "the resync", |s| {
        s.last().is_some_and(|l| l == "resync:COMPLETED")
    })
    .await;

    std::fs::remove_dir_all(&dir).expect("rm dir");
    wait_status(&mut run.status, "the directory problem", |s| {
        s.problems
            .iter()
            .any(|p| p.kind == ProblemKind::InvalidDirectory && p.kept_last_good)
    })
    .await;
    assert_eq!(
        all_events(&log).await.len(),
        first.len(),
        "an unlistable directory deletes nothing"
    );

    std::fs::create_dir(&dir).expect("mkdir again");
    std::fs::write(
        dir.join("a.yaml"),
        mk_se("a", "a.example.com", &["10.0.0.1", "10.0.0.5"]),
    )
    .expect("write a");
    wait_log(&log, "the re-created directory's change", |s| {
        s.len() > first.len()
    })
    .await;
    wait_status(&mut run.status, "the problem to clear", |s| {
        s.problems.is_empty()
    })
    .await;

    // Later changes keep arriving (by the re-added watch or the periodic rescan).
    std::fs::write(dir.join("b.yaml"), mk_se("b", "b.example.com", &[])).expect("write b");
    wait_log(&log, "b", |s| {
        s.iter()
            .any(|x| x == "service_upsert:svc/mesh/b.example.com")
    })
    .await;
    run.stop().await;
    let events = all_events(&log).await;
    assert_eq!(
        summary(&events[first.len()..]),
        [
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.5",
            "service_upsert:svc/mesh/b.example.com",
            "config_upsert:cfg/service_entry/mesh/b",
        ]
    );
    fold_all(&events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_refuses_appends_is_retried_and_reported() {
    let dir = tempfile::tempdir().expect("watch dir");
    let data = tempfile::tempdir().expect("log dir");
    std::fs::write(
        dir.path().join("a.yaml"),
        mk_se("a", "a.example.com", &["10.0.0.1"]),
    )
    .expect("write a");
    // A writer creates the log; the adapter gets a read-only handle, whose appends fail.
    let writer = FileLog::open(data.path(), Default::default()).expect("log");
    let read_only = Arc::new(FileLog::open_read_only(data.path()).expect("read-only log"));
    let opts = FileAdapterOptions {
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(50),
        ..watch_only()
    };
    let mut run = start(dir.path(), &read_only, opts);
    wait_status(&mut run.status, "three failed appends", |s| {
        s.append_failures_total >= 3
    })
    .await;
    let st = run.status.borrow().clone();
    assert!(!st.resync_completed);
    assert_eq!(st.resync_completed_at, None);
    assert_eq!(
        st.entities_in_view, 0,
        "nothing counts as emitted until the log takes it"
    );
    assert!(
        st.last_append_error
            .as_deref()
            .is_some_and(|e| e.contains("read-only")),
        "{st:?}"
    );
    run.stop().await;
    assert!(all_events(&writer).await.is_empty());
}

/// Kubernetes mounts a ConfigMap as `name -> ..data/name`, `..data -> ..<timestamp>`,
/// and updates it by creating a new timestamped directory and renaming a new
/// `..data` symlink over the old one. Nothing named `*.yaml` changes in the watched
/// directory itself.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_style_symlink_swap_is_picked_up() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().expect("watch dir");
    let data = tempfile::tempdir().expect("log dir");
    let log = Arc::new(FileLog::open(data.path(), Default::default()).expect("log"));
    let d = dir.path();
    std::fs::create_dir(d.join("..2024_01")).expect("mkdir v1");
    std::fs::write(
        d.join("..2024_01/mesh.yaml"),
        mk_se("a", "a.example.com", &["10.0.0.1"]),
    )
    .expect("v1");
    symlink("..2024_01", d.join("..data")).expect("..data");
    symlink("..data/mesh.yaml", d.join("mesh.yaml")).expect("mesh.yaml");

    let run = start(d, &log, watch_only());
    let first = wait_log(&log, "the resync", |s| {
        s.last().is_some_and(|l| l == "resync:COMPLETED")
    })
    .await;
    assert_eq!(summary(&first).len(), 5, "{:#?}", summary(&first));

    std::fs::create_dir(d.join("..2024_02")).expect("mkdir v2");
    std::fs::write(
        d.join("..2024_02/mesh.yaml"),
        mk_se("a", "a.example.com", &["10.0.0.2"]),
    )
    .expect("v2");
    symlink("..2024_02", d.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).expect("swap");
    std::fs::remove_dir_all(d.join("..2024_01")).expect("rm v1");

    wait_log(&log, "the swapped content", |s| s.len() >= first.len() + 2).await;
    run.stop().await;
    let events = all_events(&log).await;
    assert_eq!(
        summary(&events[first.len()..]),
        [
            "endpoint_upsert:ep/file/se/mesh/a/10.0.0.2",
            "endpoint_delete:ep/file/se/mesh/a/10.0.0.1"
        ]
    );
}
