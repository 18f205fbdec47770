//! End to end with a real Envoy (`DELTAPILOT_ENVOY`), delta and SotW: gateway
//! credentials from `--credentials-dir` reach Envoy over SDS on its ADS
//! stream. Envoy's static HTTPS listeners name their certificates by SDS
//! (`sds_config: {ads: {}}`); certificates are made in the test with the
//! openssl CLI. curl over HTTPS succeeds with each one; rotating the files —
//! Kubernetes' atomic swap of the `..data` symlink, and a plain rewrite — is
//! served without a restart; a secret the directory lacks is reported as
//! missing by name; key material appears in no debug view; Envoy never
//! rejects an update.

mod support;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{Deltapilot, Envoy, free_ports, http_get, metric, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const HOST: &str = "gw.test.local";

/// A fresh self-signed certificate for [`HOST`] in `dir` (`tls.crt`, `tls.key`).
fn make_cert(dir: &Path) {
    deltapilot_testkit::tls::make_cert(dir, HOST);
}

/// A mounted Kubernetes Secret: the files live in a timestamped directory,
/// `..data` points at it, and `tls.crt`/`tls.key` point through `..data`.
fn k8s_secret(dir: &Path, stamp: &str) {
    make_cert(&dir.join(stamp));
    symlink(stamp, dir.join("..data")).expect("..data");
    for f in ["tls.crt", "tls.key"] {
        symlink(format!("..data/{f}"), dir.join(f)).expect("file link");
    }
}

/// Kubernetes' update: a new timestamped directory, then `..data` swapped
/// to it atomically by renaming a fresh symlink over it.
fn k8s_rotate(dir: &Path, stamp: &str) {
    make_cert(&dir.join(stamp));
    symlink(stamp, dir.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
}

/// A plain rewrite in place (key first, then the certificate).
fn plain_rotate(dir: &Path, scratch: &Path) {
    make_cert(scratch);
    for f in ["tls.key", "tls.crt"] {
        std::fs::write(dir.join(f), std::fs::read(scratch.join(f)).expect("read")).expect("write");
    }
}

/// An Envoy with one static HTTPS listener per `(port, secret)`, each routing
/// to a direct 200 response naming the secret, over `api` ADS to deltapilot.
fn bootstrap(api: &str, xds_port: u16, admin_port: u16, listeners: &[(u16, &str)]) -> String {
    let mut ls = String::new();
    for (port, secret) in listeners {
        ls.push_str(&format!(
            r#"
    - name: tls_{port}
      address:
        socket_address: {{ address: 127.0.0.1, port_value: {port} }}
      enable_reuse_port: false
      filter_chains:
        - transport_socket:
            name: envoy.transport_sockets.tls
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
              common_tls_context:
                tls_certificate_sds_secret_configs:
                  - name: {secret}
                    sds_config: {{ ads: {{}}, resource_api_version: V3 }}
          filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: tls_{port}
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        - match: {{ prefix: / }}
                          direct_response: {{ status: 200, body: {{ inline_string: "{secret}" }} }}
"#
        ));
    }
    format!(
        r#"node: {{ id: sds-{api}, cluster: sds }}
dynamic_resources:
  ads_config:
    api_type: {api}
    transport_api_version: V3
    grpc_services:
      - envoy_grpc: {{ cluster_name: deltapilot }}
static_resources:
  listeners:{ls}
  clusters:
    - name: deltapilot
      type: STATIC
      connect_timeout: 1s
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {{ http2_protocol_options: {{}} }}
      load_assignment:
        cluster_name: deltapilot
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: {{ address: 127.0.0.1, port_value: {xds_port} }}
admin:
  address:
    socket_address: {{ address: 127.0.0.1, port_value: {admin_port} }}
"#
    )
}

/// HTTPS GET of `/` on `port` trusting only `ca`: the body, or why not.
fn curl(port: u16, ca: &Path) -> Result<String, String> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{HOST}:{port}:127.0.0.1"))
        .arg(format!("https://{HOST}:{port}/"))
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn serves(port: u16, ca: &Path, body: &str) {
    wait_for(
        &format!("https :{port} with {}", ca.display()),
        WAIT,
        || match curl(port, ca) {
            Ok(b) if b == body => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

fn run(api: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let creds = dir.join("creds");
    let k8s = creds.join("k8s-cert");
    let plain = creds.join("plain-cert");
    std::fs::create_dir_all(&k8s).expect("mkdir");
    k8s_secret(&k8s, "..2026_12_02_a");
    make_cert(&plain);
    let watch = dir.join("watch");
    std::fs::create_dir_all(&watch).expect("mkdir");
    let ports = free_ports(6);
    let (xds_port, admin_port) = (ports[0], ports[1]);
    let dp = Deltapilot::start_with(
        dir,
        &dir.join("data"),
        &watch,
        xds_port,
        admin_port,
        &["--credentials-dir", creds.to_str().expect("utf-8 path")],
    );

    let (p_k8s, p_plain, p_absent) = (ports[2], ports[3], ports[4]);
    let envoy_admin = ports[5];
    let boot = dir.join("envoy.yaml");
    std::fs::write(
        &boot,
        bootstrap(
            api,
            xds_port,
            envoy_admin,
            &[
                (p_k8s, "kubernetes://k8s-cert"),
                (p_plain, "kubernetes://plain-cert"),
                (p_absent, "kubernetes://absent"),
            ],
        ),
    )
    .expect("write bootstrap");
    let envoy = Envoy::start_bootstrap(dir, &boot, envoy_admin);

    serves(p_k8s, &k8s.join("tls.crt"), "kubernetes://k8s-cert");
    serves(p_plain, &plain.join("tls.crt"), "kubernetes://plain-cert");

    // Kubernetes' symlink swap: the new certificate is served, the old one
    // no longer verifies.
    let old_k8s = dir.join("old-k8s.crt");
    std::fs::copy(k8s.join("tls.crt"), &old_k8s).expect("keep old");
    k8s_rotate(&k8s, "..2026_12_02_b");
    serves(p_k8s, &k8s.join("tls.crt"), "kubernetes://k8s-cert");
    assert!(
        curl(p_k8s, &old_k8s).is_err(),
        "the old certificate is gone"
    );

    // A plain rewrite of both files.
    let old_plain = dir.join("old-plain.crt");
    std::fs::copy(plain.join("tls.crt"), &old_plain).expect("keep old");
    plain_rotate(&plain, &dir.join("scratch"));
    serves(p_plain, &plain.join("tls.crt"), "kubernetes://plain-cert");
    assert!(
        curl(p_plain, &old_plain).is_err(),
        "the old certificate is gone"
    );

    // The secret the directory lacks is reported by name.
    wait_for("absent reported", WAIT, || {
        let m = dp.metrics();
        let v = metric(
            &m,
            "deltapilot_credential_problems",
            &["name=\"kubernetes://absent\"", "state=\"missing\""],
        );
        if v == 1.0 {
            Ok(())
        } else {
            Err(format!("credential_problems: {v}"))
        }
    });
    let (code, report) =
        http_get(dp.admin(), "/debug/credentials", "localhost").expect("debug credentials");
    assert_eq!(code, 200, "{report}");
    assert!(
        report.contains("\"kubernetes://absent\"") && report.contains("missing"),
        "{report}"
    );
    assert!(
        report.contains("\"kubernetes://k8s-cert\"") && report.contains("loaded"),
        "{report}"
    );
    for (path, what) in [
        ("/debug/credentials", "credentials"),
        ("/debug/config_dump", "config dump"),
        ("/debug/syncz", "syncz"),
    ] {
        let body = http_get(dp.admin(), path, "localhost")
            .map(|(_, b)| b)
            .unwrap_or_default();
        assert!(!body.contains("PRIVATE KEY"), "key material in {what}");
    }
    assert!(
        !dp.proc.output().contains("PRIVATE KEY"),
        "key material in the log"
    );
    assert_eq!(envoy.rejected_updates(), Vec::<String>::new());
    let m = dp.metrics();
    assert!(
        metric(&m, "deltapilot_xds_pushes_total", &["type=\"sds\""]) >= 4.0,
        "initial and rotated secrets pushed"
    );
}

#[test]
fn sds_delta_serves_and_rotates_credentials() {
    run("DELTA_GRPC");
}

#[test]
fn sds_sotw_serves_and_rotates_credentials() {
    run("GRPC");
}
