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

/// A test certificate authority: its certificate and key files.
#[derive(Debug, Clone)]
pub struct Ca {
    /// The CA certificate (PEM).
    pub cert: std::path::PathBuf,
    /// Its private key (PEM).
    pub key: std::path::PathBuf,
}

fn openssl(args: &[&std::ffi::OsStr]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl runs (it is a test requirement)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes a fresh P-256 CA named `name` in `dir` (`ca.crt`, `ca.key`).
pub fn make_ca(dir: &Path, name: &str) -> Ca {
    std::fs::create_dir_all(dir).expect("mkdir");
    let ca = Ca {
        cert: dir.join("ca.crt"),
        key: dir.join("ca.key"),
    };
    let subj = format!("/CN={name}");
    openssl(&[
        "req".as_ref(),
        "-x509".as_ref(),
        "-newkey".as_ref(),
        "ec".as_ref(),
        "-pkeyopt".as_ref(),
        "ec_paramgen_curve:P-256".as_ref(),
        "-nodes".as_ref(),
        "-days".as_ref(),
        "2".as_ref(),
        "-subj".as_ref(),
        subj.as_ref(),
        "-addext".as_ref(),
        "basicConstraints=critical,CA:TRUE".as_ref(),
        "-addext".as_ref(),
        "keyUsage=critical,keyCertSign,cRLSign".as_ref(),
        "-keyout".as_ref(),
        ca.key.as_os_str(),
        "-out".as_ref(),
        ca.cert.as_os_str(),
    ]);
    ca
}

/// Writes a fresh P-256 certificate signed by `ca` into `dir` as `tls.crt` and
/// `tls.key`: common name `cn`, serial number `serial`, the SANs `sans` in
/// openssl's form (`DNS:host`, `IP:127.0.0.1`, `URI:spiffe://td/ns/n/sa/s`),
/// usable for both server and client authentication.
pub fn make_signed(ca: &Ca, dir: &Path, cn: &str, sans: &[&str], serial: u64) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let (csr, ext) = (dir.join("tls.csr"), dir.join("tls.ext"));
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let mut text = String::from(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n",
    );
    if !sans.is_empty() {
        text.push_str(&format!("subjectAltName={}\n", sans.join(",")));
    }
    std::fs::write(&ext, text).expect("write extensions");
    let subj = format!("/CN={cn}");
    openssl(&[
        "req".as_ref(),
        "-new".as_ref(),
        "-newkey".as_ref(),
        "ec".as_ref(),
        "-pkeyopt".as_ref(),
        "ec_paramgen_curve:P-256".as_ref(),
        "-nodes".as_ref(),
        "-subj".as_ref(),
        subj.as_ref(),
        "-keyout".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        csr.as_os_str(),
    ]);
    let serial = serial.to_string();
    openssl(&[
        "x509".as_ref(),
        "-req".as_ref(),
        "-in".as_ref(),
        csr.as_os_str(),
        "-CA".as_ref(),
        ca.cert.as_os_str(),
        "-CAkey".as_ref(),
        ca.key.as_os_str(),
        "-set_serial".as_ref(),
        serial.as_ref(),
        "-days".as_ref(),
        "2".as_ref(),
        "-extfile".as_ref(),
        ext.as_os_str(),
        "-out".as_ref(),
        crt.as_os_str(),
    ]);
}
