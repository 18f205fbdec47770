//! Certificates for TLS tests, made by the real openssl CLI (a test
//! requirement, as Envoy is): nothing is checked in, every run makes its own.

use std::path::Path;
use std::process::Command;

/// Writes a fresh self-signed P-256 certificate for `host` (its CN and its one
/// DNS SAN) into `dir` as `tls.crt` and `tls.key`, the layout of a mounted
/// Kubernetes TLS Secret. Panics with openssl's output if it fails.
pub fn make_cert(dir: &Path, host: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", &format!("/CN={host}")])
        .args(["-addext", &format!("subjectAltName=DNS:{host}")])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .output()
        .expect("openssl runs (it is a test requirement)");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
