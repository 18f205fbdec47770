//! What the chart tests check on a rendered pod (probes, scrape annotations,
//! the non-root user, the environment) and the small process and HTTP helpers
//! that start the rendered server and ask its admin port.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A container's literal environment, by name.
pub fn env_of(c: &Container) -> BTreeMap<String, String> {
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

/// A container's probes (the server's and the separate adapter's): readiness
/// on /readyz, liveness and startup on /healthz, all on the admin port.
pub fn check_probes(what: &str, c: &Container) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    for (probe, path) in [
        (&c.readiness_probe, "/readyz"),
        (&c.liveness_probe, "/healthz"),
        (&c.startup_probe, "/healthz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{what}: a probe on {path} is missing"));
        assert_eq!(get.path.as_deref(), Some(path), "{what}");
        assert_eq!(get.port, IntOrString::String("admin".into()), "{what}");
    }
}

/// The pod is scraped the way Prometheus finds every deltapilot pod: the
/// `prometheus.io/*` annotations, on the container's admin port.
pub fn check_scrape(what: &str, meta: Option<&ObjectMeta>, c: &Container) {
    let a = meta
        .and_then(|m| m.annotations.as_ref())
        .unwrap_or_else(|| panic!("{what}: no pod annotations"));
    let admin = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("admin"))
        .unwrap_or_else(|| panic!("{what}: no admin port"));
    assert_eq!(
        a.get("prometheus.io/scrape").map(String::as_str),
        Some("true"),
        "{what}"
    );
    assert_eq!(
        a.get("prometheus.io/path").map(String::as_str),
        Some("/metrics"),
        "{what}"
    );
    assert_eq!(
        a.get("prometheus.io/port"),
        Some(&admin.container_port.to_string()),
        "{what}: scraped on the admin port"
    );
}

/// The pod runs as the image's non-root user.
pub fn pod_non_root(what: &str, spec: &PodSpec) {
    let sc = spec.security_context.as_ref().expect("pod securityContext");
    assert_eq!(sc.run_as_non_root, Some(true), "{what}");
    assert_eq!(
        sc.run_as_user,
        Some(65532),
        "{what}: the image's nonroot user"
    );
}

/// Starts the binary with a rendered server container `c`: addresses moved to free loopback ports, data in `dir`,
/// and files under `/etc/deltapilot/` looked up under `dir/etc/deltapilot/`.
/// Returns once `/readyz` and `/healthz` answer 200: the child, the admin
/// address and the xDS port.
pub fn start_rendered(dir: &Path, c: &Container) -> (ChildGuard, SocketAddr, u16) {
    let xds = free_port();
    let admin = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deltapilot"));
    cmd.args(c.args.iter().flatten());
    for (k, v) in env_of(c) {
        let v = match k.as_str() {
            "DELTAPILOT_XDS_ADDR" => format!("127.0.0.1:{xds}"),
            "DELTAPILOT_ADMIN_ADDR" => format!("127.0.0.1:{admin}"),
            "DELTAPILOT_DATA_DIR" => dir.join("data").display().to_string(),
            _ => match v.strip_prefix("/etc/deltapilot/") {
                Some(rest) => dir.join("etc/deltapilot").join(rest).display().to_string(),
                None => v,
            },
        };
        cmd.env(k, v);
    }
    cmd.env("RUST_LOG", "info");
    let log = dir.join("deltapilot.log");
    let mut child = ChildGuard(
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&log).expect("log"))
            .stderr(std::fs::File::create(dir.join("stderr.log")).expect("log"))
            .spawn()
            .expect("spawn deltapilot"),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], admin));
    for path in ["/readyz", "/healthz"] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = child.0.try_wait() {
                panic!(
                    "deltapilot exited ({status}) with the rendered environment:\n{}",
                    std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
                );
            }
            match get_status(addr, path) {
                Some(200) => break,
                other => assert!(
                    std::time::Instant::now() < deadline,
                    "{path} never answered 200 (last {other:?})"
                ),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    (child, addr, xds)
}

/// Kills and reaps the child when dropped, so a failed test leaves no process.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The HTTP status of `GET path` on `addr`, or `None` when nothing answers.
pub fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

/// The connection age (and its grace, when given) reach the binary as its
/// variables; with the age off, neither is set.
pub fn check_conn_age(what: &str, values: &serde_yaml::Value, env: &BTreeMap<String, String>) {
    let age = values["xds"]["maxConnectionAgeSecs"]
        .as_u64()
        .filter(|a| *a > 0);
    let grace = values["xds"]["maxConnectionAgeGraceSecs"].as_u64();
    assert_eq!(
        (
            env.get("DELTAPILOT_XDS_MAX_CONNECTION_AGE_SECS").cloned(),
            env.get("DELTAPILOT_XDS_MAX_CONNECTION_AGE_GRACE_SECS")
                .cloned()
        ),
        (
            age.map(|a| a.to_string()),
            age.and(grace).map(|g| g.to_string())
        ),
        "{what}: xds.maxConnectionAge*"
    );
}
