//! How the istiod peer (`--peer istiod`) is started: Istio's `pilot-discovery`
//! (built by `load-tests/peers/istiod/build.sh`) in file-config mode, with no
//! Kubernetes, serving plaintext ADS on a loopback port.
//!
//! The smallest setup found that starts and serves (see the peer's README):
//! - a mesh config whose `configSources` is `fs://<the ServiceEntry directory>`,
//!   which istiod watches itself (the same files deltapilot's adapter reads);
//! - `--registries=` (no Kubernetes registry; the ServiceEntry registry is always
//!   on) and no `--kubeconfig`, so istiod builds no Kubernetes client at all;
//! - `ENABLE_CA_SERVER=false` and `PILOT_CERT_PROVIDER=none`: no CA, no DNS
//!   certificates; `--secureGRPCAddr=` turns the TLS xDS port off;
//! - every listening address on 127.0.0.1: `--grpcAddr` (the plaintext xDS
//!   port), `--httpAddr` (debug and `/ready`), `--monitoringAddr`, and ControlZ;
//! - what an upstream Envoy (not Istio's proxy build) can accept:
//!   `PILOT_ENABLE_METADATA_EXCHANGE=false` and `PILOT_ENABLE_ALPN_FILTER=false`
//!   (filters only Istio's proxy has, which Envoy NACKs), and
//!   `enableAutoMtls: false` (no istio-agent here to serve the SDS secrets that
//!   auto-mTLS clusters wait for). `load-tests/peers/istiod/smoke.sh` checks a
//!   real Envoy accepts the result.
//!
//! Its tuning is left at Istio's defaults (debounce, push throttle, request
//! rate limit), as its users run it; the report says so rather than this module
//! retuning it.
//!
//! What it does NOT do: build istiod, or give it the Kubernetes view (pods,
//! services) a real mesh has: every simulated proxy is a sidecar that sees the
//! ServiceEntries only.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use anyhow::Context;

/// The namespace istiod believes it runs in (`POD_NAMESPACE`), Istio's default.
const ISTIOD_NAMESPACE: &str = "istio-system";

/// Writes the mesh config for `watch` into `root`, and returns the command that
/// starts `bin` on it with plaintext xDS on `xds` and its HTTP ports on `http`,
/// `monitoring` and `ctrlz` (all loopback).
pub fn command(
    bin: &Path,
    root: &Path,
    watch: &Path,
    xds: SocketAddr,
    http: SocketAddr,
    monitoring: SocketAddr,
    ctrlz: SocketAddr,
) -> anyhow::Result<Command> {
    let watch = watch
        .canonicalize()
        .with_context(|| format!("resolving the ServiceEntry directory {}", watch.display()))?;
    let watch = watch.to_str().with_context(|| {
        format!(
            "the ServiceEntry directory {} is not UTF-8; istiod takes it as an fs:// URL",
            watch.display()
        )
    })?;
    let mesh = root.join("istiod-mesh.yaml");
    std::fs::write(&mesh, mesh_config(watch, xds))
        .with_context(|| format!("writing istiod's mesh config {}", mesh.display()))?;
    let mut cmd = Command::new(bin);
    cmd.arg("discovery")
        .arg("--registries=")
        .arg(format!("--meshConfig={}", mesh.display()))
        .arg(format!(
            "--networksConfig={}",
            root.join("no-mesh-networks").display()
        ))
        .arg(format!("--grpcAddr={xds}"))
        .arg("--secureGRPCAddr=")
        .arg(format!("--httpAddr={http}"))
        .arg("--httpsAddr=")
        .arg(format!("--monitoringAddr={monitoring}"))
        .arg(format!("--ctrlz_address={}", ctrlz.ip()))
        .arg(format!("--ctrlz_port={}", ctrlz.port()))
        .arg("--log_output_level=default:warn")
        .current_dir(root)
        .env("POD_NAMESPACE", ISTIOD_NAMESPACE)
        .env("ENABLE_CA_SERVER", "false")
        .env("PILOT_CERT_PROVIDER", "none")
        .env("PILOT_ENABLE_METADATA_EXCHANGE", "false")
        .env("PILOT_ENABLE_ALPN_FILTER", "false");
    Ok(cmd)
}

/// The mesh config: config from the watched directory, plaintext clusters (no
/// auto-mTLS), and the discovery address a sidecar would be told (istiod
/// parses it at start).
fn mesh_config(watch: &str, xds: SocketAddr) -> String {
    format!(
        "configSources:\n  - address: fs://{watch}\nenableAutoMtls: false\n\
         defaultConfig:\n  discoveryAddress: {xds}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesh_config_points_istiod_at_the_directory() {
        let m = mesh_config("/tmp/x/mesh", "127.0.0.1:1234".parse().expect("addr"));
        assert!(m.contains("  - address: fs:///tmp/x/mesh\n"), "{m}");
        assert!(m.contains("\nenableAutoMtls: false\n"), "{m}");
        assert!(m.contains("discoveryAddress: 127.0.0.1:1234"), "{m}");
    }

    #[test]
    fn a_missing_directory_is_a_clear_error() {
        let a: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let dir = tempfile::tempdir().expect("tmp");
        let e = command(
            Path::new("pilot-discovery"),
            dir.path(),
            &dir.path().join("absent"),
            a,
            a,
            a,
            a,
        )
        .expect_err("no such directory");
        assert!(
            format!("{e:#}").contains("resolving the ServiceEntry directory"),
            "{e:#}"
        );
    }
}
