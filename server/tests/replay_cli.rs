//! `deltapilot replay` as a user runs it: the real binary on a temp dir holding a
//! log built from `examples/events.jsonl` with `deltapilot log append`.

mod replay_support;

use std::path::Path;

use replay_support::*;

const LOG: &str = "file://data/log";
const SIDECAR: &str = "sidecar~10.1.1.99~web.default~default.svc.cluster.local";

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tmp");
    example_log(dir.path());
    dir
}

#[test]
fn each_event_is_printed_with_the_resources_it_changed() {
    let dir = setup();
    let d = dir.path();
    let o = dp(d, &["replay", "--log", LOG]);
    assert!(o.ok(), "{o:?}");
    let line = o
        .stdout
        .lines()
        .position(|l| l.starts_with("0:11  endpoint_upsert  ep/bookinfo/reviews-v1"))
        .expect("the reviews-v1 endpoint event");
    let next: Vec<&str> = o.stdout.lines().skip(line + 1).take(3).collect();
    assert!(
        next.iter().all(|l| l.trim_start().starts_with("eds")
            && l.contains("reviews")
            && l.contains("  ->  ")),
        "{next:#?}"
    );
    assert!(
        o.stdout.contains("skipped (") || o.stdout.contains("no xDS change"),
        "{}",
        o.stdout
    );
    assert!(
        !o.stderr.contains('\r') && !o.stderr.contains("[#"),
        "no progress bar when piped: {:?}",
        o.stderr
    );

    let o = dp(d, &["replay", "--log", LOG, "--output", "json"]);
    assert!(o.ok(), "{o:?}");
    let lines = json_lines(&o.stdout);
    assert_eq!(lines.len(), 32, "31 events and the end line");
    for (i, l) in lines[..31].iter().enumerate() {
        assert_eq!(l["position"], format!("0:{i}"));
        assert_eq!(
            l["event"]["position"],
            format!("0:{i}"),
            "the event as `log read` prints it"
        );
        assert!(l["changes"].is_array());
    }
    let changed: Vec<&serde_json::Value> = lines[11]["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .collect();
    assert!(changed.iter().all(|c| c["type"] == "eds"
        && c["old_version"].is_string()
        && c["new_version"].is_string()));
    let end = &lines[31]["end"];
    assert_eq!(
        (end["position"].as_str(), end["records"].as_u64()),
        (Some("31"), Some(31))
    );
    assert_eq!(end["hash"].as_str().map(str::len), Some(16));
}

#[test]
fn filters_select_events_and_changes() {
    let dir = setup();
    let d = dir.path();
    let lines = |args: &[&str]| {
        let mut all = vec!["replay", "--log", LOG, "--output", "json"];
        all.extend_from_slice(args);
        let o = dp(d, &all);
        assert!(o.ok(), "{o:?}");
        let mut v = json_lines(&o.stdout);
        v.pop();
        v
    };
    let eds = lines(&["--resource", "eds/*reviews*"]);
    assert!(!eds.is_empty());
    for l in &eds {
        for c in l["changes"].as_array().expect("changes") {
            assert_eq!(c["type"], "eds");
            assert!(c["name"].as_str().expect("name").contains("reviews"));
        }
    }
    let keys = lines(&["--key", "ep/*"]);
    assert!(
        keys.iter().all(|l| l["event"]["endpointUpsert"].is_object()
            || l["event"]["endpointDelete"].is_object())
    );
    assert!(keys.len() >= 8, "{}", keys.len());
    assert!(
        lines(&["--source", "k8s:*"]).is_empty(),
        "no event from such a source"
    );
    assert_eq!(lines(&["--source", "file:*"]).len(), 31);

    // A proxyless client's view has no sidecar listeners.
    let grpc = d.join("grpc.json");
    std::fs::write(
        &grpc,
        r#"{"node":{"id":"grpc-client-1","metadata":{"GENERATOR":"grpc"}}}"#,
    )
    .expect("write");
    let mine = lines(&["--proxy", grpc.to_str().expect("utf8")]);
    assert!(!mine.is_empty());
    let kinds: Vec<&str> = mine
        .iter()
        .flat_map(|l| {
            l["changes"]
                .as_array()
                .expect("changes")
                .iter()
                .map(|c| c["kind"].as_str().expect("kind"))
        })
        .collect();
    assert!(
        kinds.contains(&"grpc_listener") && !kinds.contains(&"sidecar_listener"),
        "{kinds:?}"
    );
}

#[test]
fn diff_shows_the_changed_lines() {
    let dir = setup();
    let o = dp(
        dir.path(),
        &[
            "replay",
            "--log",
            LOG,
            "--diff",
            "--resource",
            "eds/outbound|9080||reviews.default.svc.cluster.local",
            "--from",
            "11",
            "--to",
            "12",
        ],
    );
    assert!(o.ok(), "{o:?}");
    assert!(o.stdout.contains("@@ "), "{}", o.stdout);
    assert!(
        o.stdout.contains("+          address: 10.1.1.20"),
        "{}",
        o.stdout
    );
    let o = dp(
        dir.path(),
        &[
            "replay",
            "--log",
            LOG,
            "--diff",
            "--diff-format",
            "json",
            "--from",
            "11",
            "--to",
            "12",
            "--output",
            "json",
        ],
    );
    let first = &json_lines(&o.stdout)[0];
    let diff = first["changes"][0]["diff"].as_str().expect("diff");
    assert!(
        diff.contains("+") && diff.contains("\"address\": \"10.1.1.20\""),
        "{diff}"
    );
}

#[test]
fn positions_outside_the_log_are_refused_with_the_valid_range() {
    let dir = setup();
    let d = dir.path();
    for args in [
        vec!["replay", "--log", LOG, "--from", "99"],
        vec!["replay", "--log", LOG, "--to", "32"],
        vec![
            "replay", "--log", LOG, "--dump", "--proxy", SIDECAR, "--at", "40",
        ],
        vec![
            "replay",
            "bisect",
            "--log",
            LOG,
            "--resource",
            "cds/x",
            "--until",
            "present",
            "--from",
            "1:3",
        ],
    ] {
        let o = dp(d, &args);
        assert!(!o.ok(), "{args:?}");
        assert!(
            o.stderr.contains("valid range 0..=31"),
            "{args:?}: {}",
            o.stderr
        );
    }
    let o = dp(d, &["replay", "--log", LOG, "--from", "20", "--to", "10"]);
    assert!(!o.ok() && o.stderr.contains("after --to"), "{}", o.stderr);
    let o = dp(d, &["replay", "--log", LOG, "--from", "x"]);
    assert!(
        !o.ok() && o.stderr.contains("invalid log position"),
        "{}",
        o.stderr
    );
}

#[test]
fn dump_prints_the_proxys_config_in_envoys_format() {
    let dir = setup();
    let d = dir.path();
    let dump = |extra: &[&str]| {
        let mut args = vec!["replay", "--log", LOG, "--dump"];
        args.extend_from_slice(extra);
        let o = dp(d, &args);
        assert!(o.ok(), "{o:?}");
        serde_json::from_str::<serde_json::Value>(&o.stdout).expect("JSON")
    };
    let head = dump(&["--proxy", SIDECAR]);
    let configs = head["configs"].as_array().expect("configs");
    let types: Vec<&str> = configs
        .iter()
        .map(|c| c["@type"].as_str().expect("@type"))
        .collect();
    assert_eq!(
        types,
        [
            "type.googleapis.com/envoy.admin.v3.ClustersConfigDump",
            "type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
            "type.googleapis.com/envoy.admin.v3.RoutesConfigDump",
            "type.googleapis.com/envoy.admin.v3.EndpointsConfigDump"
        ]
    );
    let clusters = configs[0]["dynamic_active_clusters"]
        .as_array()
        .expect("clusters");
    assert!(clusters.len() > 5);
    for c in clusters {
        assert_eq!(c["version_info"].as_str().map(str::len), Some(16));
        assert_eq!(
            c["cluster"]["@type"],
            "type.googleapis.com/envoy.config.cluster.v3.Cluster"
        );
    }
    let listener = &configs[1]["dynamic_listeners"][0];
    assert_eq!(
        listener["name"],
        listener["active_state"]["listener"]["name"]
    );
    let cla = &configs[3]["dynamic_endpoint_configs"][0]["endpoint_config"];
    assert!(cla["cluster_name"].is_string());

    // Earlier, fewer clusters; a proxyless client gets api_listeners `host:port`.
    let early = dump(&["--proxy", SIDECAR, "--at", "3"]);
    assert!(
        early["configs"][0]["dynamic_active_clusters"]
            .as_array()
            .expect("c")
            .len()
            < clusters.len()
    );
    let grpc = dump(&[
        "--proxy",
        "client-7",
        "--proxy-type",
        "proxyless-grpc",
        "--type",
        "lds",
    ]);
    let names: Vec<&str> = grpc["configs"][0]["dynamic_listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| l["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        grpc["configs"].as_array().expect("c").len(),
        1,
        "--type lds only"
    );
    assert!(
        !names.is_empty() && names.iter().all(|n| n.contains(".svc.cluster.local:")),
        "{names:?}"
    );

    let o = dp(d, &["replay", "--log", LOG, "--dump"]);
    assert!(
        !o.ok() && o.stderr.contains("--dump needs --proxy"),
        "{}",
        o.stderr
    );
}

#[test]
fn bisect_finds_the_event_and_says_when_there_is_none() {
    let dir = setup();
    let d = dir.path();
    let r = "eds/outbound|9080||reviews.default.svc.cluster.local";
    let o = dp(
        d,
        &[
            "replay",
            "bisect",
            "--log",
            LOG,
            "--resource",
            r,
            "--until",
            "contains 10.1.1.21",
        ],
    );
    assert!(o.ok(), "{o:?}");
    let first = o.stdout.lines().next().expect("a line");
    assert!(
        first.contains("after the event at 0:12") && first.contains("source file:bookinfo"),
        "{first}"
    );
    let event: serde_json::Value =
        serde_json::from_str(o.stdout.lines().nth(1).expect("event")).expect("json");
    assert_eq!(event["position"], "0:12");

    let o = dp(
        d,
        &[
            "replay",
            "--log",
            LOG,
            "bisect",
            "--resource",
            r,
            "--until",
            "contains 10.1.1.21",
            "--output",
            "json",
        ],
    );
    let found = &json_lines(&o.stdout)[0]["found"];
    assert_eq!(
        (found["position"].as_str(), found["source"].as_str()),
        (Some("0:12"), Some("file:bookinfo"))
    );

    let o = dp(
        d,
        &[
            "replay",
            "bisect",
            "--log",
            LOG,
            "--resource",
            r,
            "--until",
            "contains 10.99.99.99",
        ],
    );
    assert!(
        !o.ok() && o.stderr.contains("no event from"),
        "{}",
        o.stderr
    );
    let o = dp(
        d,
        &[
            "replay",
            "bisect",
            "--log",
            LOG,
            "--resource",
            r,
            "--until",
            "bigger 3",
        ],
    );
    assert!(
        !o.ok() && o.stderr.contains("unknown predicate"),
        "{}",
        o.stderr
    );
}

/// A record of a newer schema is passed over as the engine passes over it:
/// printed with its reason (in JSON with `"event": null`), and the events after
/// it still replay.
#[test]
fn a_record_this_build_cannot_read_is_shown_and_passed_over() {
    use deltapilot_log::{EventLog, Position, file::FileLog, file::FileLogOptions};

    let dir = setup();
    let d = dir.path();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let log = FileLog::open(&d.join("data/log"), FileLogOptions::default()).expect("open");
        let last = log
            .read(&Position::single(30), 1)
            .await
            .expect("read")
            .remove(0)
            .decode()
            .expect("decode");
        let newer = deltapilot_proto::Event {
            schema_version: deltapilot_proto::SCHEMA_VERSION + 1,
            ..last.clone()
        };
        log.append(&[newer, last]).await.expect("append");
    });

    let o = dp(d, &["replay", "--log", LOG, "--from", "30"]);
    assert!(o.ok(), "{o:?}");
    let lines: Vec<&str> = o.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == "0:31  (not an event this build reads)")
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert!(
        lines[at + 1].starts_with("  skipped (schema_too_new): ")
            && lines[at + 1].contains("schema version"),
        "{}",
        o.stdout
    );
    assert!(lines[at + 2].starts_with("0:32  "), "{}", o.stdout);

    let o = dp(
        d,
        &["replay", "--log", LOG, "--from", "30", "--output", "json"],
    );
    assert!(o.ok(), "{o:?}");
    let lines = json_lines(&o.stdout);
    assert_eq!(lines.len(), 4, "three records and the end line");
    assert!(lines[1]["event"].is_null(), "{}", lines[1]);
    assert_eq!(lines[1]["skipped"]["reason"], "schema_too_new");
    assert_eq!(lines[2]["position"], "0:32");
    assert_eq!(lines[3]["end"]["position"], "33");
}

#[test]
fn a_corrupt_record_mid_log_is_reported_and_the_replay_stops_there() {
    let dir = setup();
    let d = dir.path();
    let seg = segment(d);
    let mut bytes = std::fs::read(&seg).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&seg, &bytes).expect("write");
    let o = dp(d, &["replay", "--log", LOG, "--output", "json"]);
    assert!(!o.ok(), "{o:?}");
    assert!(
        o.stderr.contains("corrupt") && o.stderr.contains("replay stopped at log offset"),
        "{}",
        o.stderr
    );
    let at: u64 = o
        .stderr
        .split("replay stopped at log offset ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("an offset");
    assert!(at > 0 && at < 31, "{at}");
    let lines = json_lines(&o.stdout);
    assert_eq!(
        lines.len() as u64,
        at + 1,
        "the events before it, and the end line"
    );
    assert_eq!(
        lines.last().expect("end")["end"]["position"],
        at.to_string()
    );
    assert!(
        d.read_dir().expect("ls").all(|e| !e
            .expect("e")
            .file_name()
            .to_string_lossy()
            .starts_with(".replay-prefix")),
        "temp dir removed"
    );
    assert_eq!(
        std::fs::read(&seg).expect("read"),
        bytes,
        "the log is not written"
    );
}

fn flip_middle(path: &Path) {
    let mut b = std::fs::read(path).expect("read");
    let i = b.len() / 2;
    b[i] ^= 0x10;
    std::fs::write(path, b).expect("write");
}

#[test]
fn replays_from_a_checkpoint_equal_replays_from_zero() {
    use std::time::Duration;
    let dir = setup();
    let d = dir.path();
    // `deltapilot run` writes a checkpoint at shutdown.
    let (xds, admin) = (free_port_pair(), free_port_pair());
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_deltapilot"))
        .args([
            "run",
            "--data-dir",
            "data",
            "--xds-addr",
            &format!("127.0.0.1:{xds}"),
            "--admin-addr",
            &format!("127.0.0.1:{admin}"),
        ])
        .current_dir(d)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run");
    let cp = d.join("data/checkpoints/checkpoint-00000000000000000031.dpc");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut terminated = false;
    while !cp.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint within 30 s"
        );
        if !terminated && std::net::TcpStream::connect(("127.0.0.1", admin)).is_ok() {
            std::thread::sleep(Duration::from_millis(300));
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(run.id().to_string())
                .status();
            terminated = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = run.wait();
    // More events after the checkpoint.
    let more = d.join("more.jsonl");
    std::fs::write(
        &more,
        r#"{"source":"file:bookinfo","generation":"1","endpointDelete":{"key":"ep/bookinfo/reviews-v1-545db77b95-7m5xd"}}
{"source":"file:bookinfo","generation":"1","serviceDelete":{"key":"svc/default/details.default.svc.cluster.local"}}
"#,
    )
    .expect("write");
    append(d, &more);

    let with = dp(d, &["replay", "--log", LOG, "--dump", "--proxy", SIDECAR]);
    let without = dp(
        d,
        &[
            "replay",
            "--log",
            LOG,
            "--dump",
            "--proxy",
            SIDECAR,
            "--no-checkpoints",
        ],
    );
    assert!(with.ok() && without.ok(), "{with:?} {without:?}");
    assert!(
        with.stderr.contains("starting from checkpoint") && with.stderr.contains("(position 31)"),
        "{}",
        with.stderr
    );
    assert!(
        without.stderr.contains("from the beginning"),
        "{}",
        without.stderr
    );
    assert_eq!(with.stdout, without.stdout, "byte for byte");

    let end = |args: &[&str]| {
        let o = dp(d, args);
        assert!(o.ok(), "{o:?}");
        json_lines(&o.stdout).pop().expect("end")["end"]["hash"]
            .as_str()
            .expect("hash")
            .to_owned()
    };
    let from_cp = end(&["replay", "--log", LOG, "--from", "31", "--output", "json"]);
    let from_zero = end(&[
        "replay",
        "--log",
        LOG,
        "--from",
        "31",
        "--output",
        "json",
        "--no-checkpoints",
    ]);
    assert_eq!(from_cp, from_zero);

    // A damaged checkpoint is skipped, with the reason, for the start of the log.
    flip_middle(&cp);
    let o = dp(d, &["replay", "--log", LOG, "--dump", "--proxy", SIDECAR]);
    assert!(o.ok(), "{o:?}");
    assert!(
        o.stderr.contains("skipping checkpoint") && o.stderr.contains("checksum"),
        "{}",
        o.stderr
    );
    assert_eq!(o.stdout, without.stdout);
}

fn free_port_pair() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}
