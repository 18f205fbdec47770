//! Tests of `settings`: flags, variables and the config file, and their checks.

use super::*;

#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

fn settings(args: &[&str]) -> anyhow::Result<Settings> {
    use clap::Parser as _;
    Cli::try_parse_from(std::iter::once("run").chain(args.iter().copied()))?
        .run
        .settings()
}

#[test]
fn credentials_dir_must_be_a_directory_and_is_rebased_from_the_config_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let e = format!(
        "{:#}",
        settings(&[
            "--data-dir",
            data,
            "--credentials-dir",
            "/nonexistent/creds"
        ])
        .expect_err("missing")
    );
    assert!(e.contains("--credentials-dir /nonexistent/creds"), "{e}");
    std::fs::create_dir(dir.path().join("creds")).expect("mkdir");
    let cfg = dir.path().join("run.yaml");
    std::fs::write(&cfg, "credentials-dir: creds\n").expect("write");
    let s =
        settings(&["--data-dir", data, "--config", cfg.to_str().expect("utf-8")]).expect("valid");
    assert_eq!(s.credentials_dir, Some(dir.path().join("creds")));
}

#[test]
fn registries_come_from_flags_or_the_config_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let e = format!(
        "{:#}",
        settings(&["--data-dir", data, "--kubeconfig", "/nonexistent/kc"]).expect_err("missing")
    );
    assert!(e.contains("--kubeconfig /nonexistent/kc"), "{e}");
    std::fs::write(dir.path().join("kc.yaml"), "apiVersion: v1\nkind: Config\n").expect("kc");
    let c = dir.path().join("c.yaml");
    std::fs::write(
        &c,
        "kubeconfig: kc.yaml\neureka-url: http://127.0.0.1:8761/eureka\neureka-refresh-secs: 2\n",
    )
    .expect("config");
    let s = settings(&["--data-dir", data, "--config", c.to_str().expect("utf-8")]).expect("valid");
    assert_eq!(s.kubeconfig, Some(dir.path().join("kc.yaml")));
    let eureka = s.eureka.expect("eureka");
    assert_eq!(eureka.base_url, "http://127.0.0.1:8761/eureka");
    assert_eq!(eureka.refresh_interval, Duration::from_secs(2));
}

#[test]
fn eureka_settings_are_checked_before_anything_runs() {
    let data = Path::new("/var/lib/dp");
    assert!(eureka_options(None, None, data).expect("none").is_none());
    let o = eureka_options(
        Some("http://127.0.0.1:8761/eureka".into()),
        Some(0.25),
        data,
    )
    .expect("valid")
    .expect("some");
    assert_eq!(o.refresh_interval, Duration::from_millis(250));
    assert_eq!(
        o.state_dir.as_deref(),
        Some(data.join("eureka-adapter").as_path())
    );
    let e = |url: Option<&str>, secs: Option<f64>| {
        format!(
            "{:#}",
            eureka_options(url.map(str::to_owned), secs, data).expect_err("invalid")
        )
    };
    assert!(e(None, Some(1.0)).contains("needs --eureka-url"));
    assert!(e(Some("ftp://x/eureka"), None).contains("scheme"));
    assert!(e(Some("http://x/eureka"), Some(0.0)).contains("above 0"));
}

#[test]
fn config_file_yaml_and_json_with_relative_paths() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(dir.path().join("mesh")).expect("mesh");
    let y = dir.path().join("c.yaml");
    std::fs::write(
        &y,
        "xds-addr: 127.0.0.1:1\nbind-outbound: true\nwatch:\n  - mesh\nmax-streams: 5\n",
    )
    .expect("write");
    let c = read_config(&y).expect("yaml");
    assert_eq!(c.xds_addr, Some("127.0.0.1:1".parse().expect("addr")));
    assert_eq!((c.bind_outbound, c.max_streams), (Some(true), Some(5)));
    assert_eq!(c.watch, [dir.path().join("mesh")]);
    let j = dir.path().join("c.json");
    std::fs::write(&j, r#"{"admin-addr": "127.0.0.1:2"}"#).expect("write");
    assert!(read_config(&j).expect("json").admin_addr.is_some());
    std::fs::write(&j, "colour: blue").expect("write");
    let e = format!("{:#}", read_config(&j).expect_err("unknown key"));
    assert!(e.contains("colour"), "{e}");
}

#[test]
fn connection_limits_have_safe_defaults_and_are_checked() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("d");
    let data = data.to_str().expect("utf-8");
    let s = settings(&["--data-dir", data]).expect("defaults");
    assert_eq!(s.xds_conn, XdsConnOptions::default());
    assert_eq!(s.admin_conn, ConnLimits::ADMIN);
    let c = dir.path().join("c.yaml");
    std::fs::write(
        &c,
        "xds-max-connections-per-source: 50\nadmin-idle-timeout-secs: 5\n",
    )
    .expect("write");
    let s = settings(&[
        "--data-dir",
        data,
        "--config",
        c.to_str().expect("utf-8"),
        "--xds-max-connections",
        "7",
        "--xds-handshake-timeout-secs",
        "3",
        "--xds-keepalive-interval-secs",
        "4",
        "--xds-keepalive-timeout-secs",
        "9",
        "--xds-max-connection-age-secs",
        "1800",
        "--admin-max-connections-per-source",
        "0",
    ])
    .expect("valid");
    assert_eq!(
        s.xds_conn,
        XdsConnOptions {
            limits: ConnLimits {
                max_connections: 7,
                max_per_source: 50,
                request_timeout: Duration::from_secs(3),
            },
            keepalive_interval: Duration::from_secs(4),
            keepalive_timeout: Duration::from_secs(9),
            max_connection_age: Some(Duration::from_secs(1800)),
            max_connection_age_grace: Duration::from_secs(10),
        }
    );
    assert_eq!(s.admin_conn.max_per_source, 0);
    assert_eq!(s.admin_conn.request_timeout, Duration::from_secs(5));
    for flag in [
        "--xds-max-connections",
        "--xds-handshake-timeout-secs",
        "--xds-keepalive-interval-secs",
        "--xds-keepalive-timeout-secs",
        "--xds-max-connection-age-secs",
        "--admin-max-connections",
        "--admin-idle-timeout-secs",
    ] {
        let e = format!(
            "{:#}",
            settings(&["--data-dir", data, flag, "0"]).expect_err("zero")
        );
        assert!(e.contains(&format!("{flag} must be at least 1")), "{e}");
    }
}

#[test]
fn debug_endpoints_on_a_non_loopback_admin_address_carry_a_warning() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("d");
    let data = data.to_str().expect("utf-8");
    let warn = |args: &[&str]| {
        let mut all = vec!["--data-dir", data];
        all.extend_from_slice(args);
        settings(&all).expect("valid").debug_exposure_warning()
    };
    let w = warn(&[
        "--admin-addr",
        "0.0.0.0:15014",
        "--debug-endpoints",
        "on",
        "--admin-insecure",
    ])
    .expect("warned");
    assert!(
        w.contains("0.0.0.0:15014") && w.contains("/debug/config_dump"),
        "{w}"
    );
    // Without --admin-insecure (or a token) the start is refused.
    let e = format!(
        "{:#}",
        settings(&[
            "--data-dir",
            data,
            "--admin-addr",
            "0.0.0.0:15014",
            "--debug-endpoints",
            "on"
        ])
        .expect_err("refused")
    );
    assert!(
        e.contains("--admin-token-file") && e.contains("--admin-insecure"),
        "{e}"
    );
    // With a token, auto mounts /debug/* behind it, with no warning.
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let token = token.to_str().expect("utf-8");
    let s = settings(&[
        "--data-dir",
        data,
        "--admin-addr",
        "0.0.0.0:15014",
        "--admin-token-file",
        token,
    ])
    .expect("valid");
    assert!(s.debug_endpoints && s.debug_exposure_warning().is_none());
    assert_eq!(
        warn(&["--admin-addr", "0.0.0.0:15014"]),
        None,
        "auto: not mounted"
    );
    assert_eq!(warn(&["--debug-endpoints", "on"]), None, "loopback");
}

#[test]
fn flags_override_the_config_file_which_overrides_defaults() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = dir.path().join("c.yaml");
    std::fs::write(&c, "max-streams: 5\ndrain-grace-secs: 7\ndata-dir: d\n").expect("write");
    let c = c.to_str().expect("utf-8");
    let s = settings(&["--config", c, "--max-streams", "9"]).expect("valid");
    assert_eq!(s.limits.max_streams, 9);
    assert_eq!(s.drain_grace, Duration::from_secs(7));
    assert_eq!(s.data_dir, dir.path().join("d"));
    assert_eq!(s.limits.stall_timeout, Limits::default().stall_timeout);
    let e = format!(
        "{:#}",
        settings(&["--config", c, "--max-streams", "0"]).expect_err("zero")
    );
    assert!(e.contains("--max-streams must be at least 1"), "{e}");
}

#[test]
fn route_delivery_is_inline_unless_vhds_is_asked_for() {
    use deltapilot_xds::view::RouteDelivery;
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().to_str().expect("utf-8");
    let s = settings(&["--data-dir", data]).expect("valid");
    assert_eq!(s.limits.route_delivery, RouteDelivery::Inline);
    let s = settings(&["--data-dir", data, "--route-delivery", "vhds"]).expect("valid");
    assert_eq!(s.limits.route_delivery, RouteDelivery::Vhds);
    let c = dir.path().join("c.yaml");
    std::fs::write(&c, "route-delivery: vhds\n").expect("write");
    let s = settings(&["--data-dir", data, "--config", c.to_str().expect("utf-8")]);
    assert_eq!(s.expect("valid").limits.route_delivery, RouteDelivery::Vhds);
    assert!(settings(&["--data-dir", data, "--route-delivery", "sideways"]).is_err());
}
