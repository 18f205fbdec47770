//! `deltapilot run --log kafka://…` against the real Apache Kafka's secured
//! listeners (scripts/kafka.sh with DELTAPILOT_KAFKA_TLS=1): an SSL listener that
//! requires a client certificate, and a SASL_SSL listener with SCRAM-SHA-512 and
//! PLAIN. A replica over each reaches ready and serves a change its in-process
//! file adapter wrote; the effective configuration it logs has every secret
//! redacted. A wrong password, an untrusted CA and a plaintext client on the TLS
//! port each fail the start with the cause named, never ready. A password in the
//! URI is refused. The broker is required: without its variables the tests fail,
//! they never skip.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{Proc, http_get, spawn_replica, wait_for, write_service_entry};

const WAIT: Duration = Duration::from_secs(60);

/// The secured listeners and the files scripts/kafka.sh made for them.
struct Secured {
    ssl: String,
    sasl: String,
    dir: PathBuf,
}

impl Secured {
    fn from_env() -> Self {
        let var = |name: &str| match std::env::var(name) {
            Ok(v) if !v.trim().is_empty() => v,
            _ => panic!(
                "{name} is not set: start the broker with its secured listeners \
                 (DELTAPILOT_KAFKA_TLS=1 scripts/kafka.sh start PORT), then \
                 `eval \"$(scripts/kafka.sh env)\"`; this test never skips"
            ),
        };
        Self {
            ssl: var("DELTAPILOT_KAFKA_SSL_BROKERS"),
            sasl: var("DELTAPILOT_KAFKA_SASL_BROKERS"),
            dir: PathBuf::from(var("DELTAPILOT_KAFKA_TLS_DIR")),
        }
    }

    fn file(&self, name: &str) -> String {
        let p = self.dir.join(name);
        assert!(p.is_file(), "{} is missing", p.display());
        p.to_string_lossy().into_owned()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name))
            .expect("read")
            .trim()
            .to_owned()
    }
}

fn topic(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("tls-{name}-{}-{nanos}", std::process::id())
}

/// A `deltapilot run` on `log` watching `mesh`, with extra environment; not waited for.
fn start(dir: &Path, name: &str, log: &str, mesh: &Path, env: &[(&str, &str)]) -> (Proc, u16) {
    let mesh = mesh.to_string_lossy();
    spawn_replica(dir, name, log, &["--watch", &mesh], env)
}

fn mesh(dir: &Path, name: &str) -> PathBuf {
    let m = dir.join(format!("mesh-{name}"));
    std::fs::create_dir(&m).expect("mesh dir");
    write_service_entry(&m, "alpha.yaml", "alpha.test.local", 8080, "HTTP", &[9001]);
    m
}

fn full_output(p: &Proc) -> String {
    std::fs::read_to_string(&p.log).unwrap_or_default()
}

#[test]
fn ssl_with_a_client_certificate_and_sasl_over_tls_serve_a_change() {
    let k = Secured::from_env();
    let dir = tempfile::tempdir().expect("tempdir");
    let key_password = k.read("client.key.password");
    let sasl_password = k.read("sasl.password");

    // Mutual TLS, the client key encrypted, its password from a file; all in the URI.
    let ssl_log = format!(
        "kafka://{}/{}?security.protocol=SSL&ssl.ca.location={}&ssl.certificate.location={}\
         &ssl.key.location={}&ssl.key.password.file={}&ssl.endpoint.identification.algorithm=https",
        k.ssl,
        topic("ssl"),
        k.file("ca.pem"),
        k.file("client.pem"),
        k.file("client.key"),
        k.file("client.key.password"),
    );
    // SCRAM-SHA-512 from a config file, the password from an environment variable.
    let props = dir.path().join("kafka.properties");
    std::fs::write(
        &props,
        format!(
            "# the SASL_SSL listener\nsecurity.protocol=SASL_SSL\nssl.ca.location={}\n\
             sasl.mechanism=SCRAM-SHA-512\nsasl.username={}\nsasl.password.env=DP_TEST_KAFKA_PASSWORD\n",
            k.file("ca.pem"),
            k.read("sasl.username"),
        ),
    )
    .expect("write properties");
    let scram_log = format!(
        "kafka://{}/{}?config={}",
        k.sasl,
        topic("scram"),
        props.display()
    );
    // PLAIN over TLS, the password from a file.
    let plain_log = format!(
        "kafka://{}/{}?security.protocol=SASL_SSL&ssl.ca.location={}&sasl.mechanism=PLAIN\
         &sasl.username={}&sasl.password.file={}",
        k.sasl,
        topic("plain"),
        k.file("ca.pem"),
        k.read("sasl.username"),
        k.file("sasl.password"),
    );

    let env = [("DP_TEST_KAFKA_PASSWORD", sasl_password.as_str())];
    let mut replicas = Vec::new();
    for (name, log, env) in [
        ("ssl", &ssl_log, &[][..]),
        ("scram", &scram_log, &env[..]),
        ("plain", &plain_log, &[][..]),
    ] {
        let m = mesh(dir.path(), name);
        let (proc, admin) = start(dir.path(), name, log, &m, env);
        replicas.push((name, proc, admin, m));
    }
    for (name, proc, admin, m) in &replicas {
        let admin = std::net::SocketAddr::from(([127, 0, 0, 1], *admin));
        wait_for(&format!("{name} /readyz"), WAIT, || {
            match http_get(admin, "/readyz", "localhost") {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}; output:\n{}", proc.output())),
            }
        });
        // A change written through the secured topic reaches the registry.
        write_service_entry(m, "beta.yaml", "beta.test.local", 9090, "GRPC", &[9002]);
        wait_for(&format!("{name}: beta served"), WAIT, || {
            match http_get(admin, "/debug/registry", "localhost") {
                Ok((200, body))
                    if body.contains("alpha.test.local") && body.contains("beta.test.local") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}; output:\n{}", proc.output())),
            }
        });
    }

    // The effective configuration is logged, secrets redacted with their source.
    let [ssl, scram, plain] = [0, 1, 2].map(|i| full_output(&replicas[i].1));
    for (name, out, needle) in [
        (
            "ssl",
            &ssl,
            format!(
                "ssl.key.password=[redacted] (file {})",
                k.file("client.key.password")
            ),
        ),
        (
            "scram",
            &scram,
            "sasl.password=[redacted] (env DP_TEST_KAFKA_PASSWORD)".to_owned(),
        ),
        (
            "plain",
            &plain,
            format!(
                "sasl.password=[redacted] (file {})",
                k.file("sasl.password")
            ),
        ),
    ] {
        assert!(out.contains("kafka client configuration"), "{name}: {out}");
        assert!(out.contains(&needle), "{name}: no {needle:?} in:\n{out}");
        assert!(
            !out.contains(&sasl_password),
            "{name}: the SASL password leaked:\n{out}"
        );
        assert!(
            !out.contains(&key_password),
            "{name}: the key password leaked:\n{out}"
        );
    }
    assert!(scram.contains("sasl.mechanism=SCRAM-SHA-512"), "{scram}");
    for (_, mut proc, _, _) in replicas {
        assert!(proc.terminate(Duration::from_secs(20)), "drains on SIGTERM");
    }
}

#[test]
fn bad_credentials_an_untrusted_ca_and_plaintext_on_tls_fail_with_the_cause() {
    let k = Secured::from_env();
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("not-the-password.txt");
    std::fs::write(&wrong, "not-the-password\n").expect("write");
    // A short request timeout: each start fails after it, so the test stays short.
    let quick = "request_timeout_ms=3000";
    let cases = [
        (
            "wrong-password",
            format!(
                "kafka://{}/{}?{quick}&security.protocol=SASL_SSL&ssl.ca.location={}\
                 &sasl.mechanism=SCRAM-SHA-512&sasl.username={}&sasl.password.file={}",
                k.sasl,
                topic("wrong"),
                k.file("ca.pem"),
                k.read("sasl.username"),
                wrong.display()
            ),
            "Authentication failed",
        ),
        (
            "untrusted-ca",
            format!(
                "kafka://{}/{}?{quick}&security.protocol=SASL_SSL&ssl.ca.location={}\
                 &sasl.mechanism=SCRAM-SHA-512&sasl.username={}&sasl.password.file={}",
                k.sasl,
                topic("untrusted"),
                k.file("other-ca.pem"),
                k.read("sasl.username"),
                k.file("sasl.password"),
            ),
            "certificate verify failed",
        ),
        (
            "plaintext-on-tls",
            format!("kafka://{}/{}?{quick}", k.ssl, topic("plaintext")),
            "security.protocol",
        ),
    ];
    let mut running = Vec::new();
    for (name, log, cause) in &cases {
        let m = mesh(dir.path(), name);
        let (proc, admin) = start(dir.path(), name, log, &m, &[]);
        running.push((*name, proc, admin, *cause));
    }
    for (name, mut proc, admin, cause) in running {
        let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin));
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = proc.child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: still running after {WAIT:?}:\n{}",
                proc.output()
            );
            if let Ok((200, _)) = http_get(admin, "/readyz", "localhost") {
                panic!("{name}: reported ready:\n{}", proc.output());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let out = full_output(&proc);
        assert!(!status.success(), "{name}: exited {status}:\n{out}");
        let error = out
            .lines()
            .find(|l| l.contains("opening the log"))
            .unwrap_or_else(|| panic!("{name}: no start error in:\n{out}"));
        assert!(
            error.contains(cause),
            "{name}: {cause:?} not in {error:?}; output:\n{out}"
        );
    }
}

#[test]
fn a_password_in_the_uri_is_refused_before_anything_starts() {
    let k = Secured::from_env();
    let dir = tempfile::tempdir().expect("tempdir");
    for log in [
        format!(
            "kafka://{}/t?security.protocol=SASL_SSL&sasl.username=u&sasl.password=hunter2",
            k.sasl
        ),
        format!("kafka://u:hunter2@{}/t", k.sasl),
    ] {
        // `run` checks its settings itself; `log` has clap parse the flag.
        let data = dir.path().to_string_lossy().into_owned();
        for args in [
            vec!["run", "--data-dir", &data, "--log", &log],
            vec!["log", "--log", &log, "head"],
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_deltapilot"))
                .args(&args)
                .output()
                .expect("run deltapilot");
            let err = String::from_utf8_lossy(&out.stderr);
            let what = args[0];
            assert!(!out.status.success(), "{what} {log}: {err}");
            assert!(err.contains("refused"), "{what} {log}: {err}");
            assert!(err.contains("password.file"), "{what} {log}: {err}");
            assert!(
                !err.contains("hunter2"),
                "{what} {log}: the password is echoed: {err}"
            );
        }
    }
}
