//! The real Kafka brokers the Kafka tests run against: where they are (a missing
//! broker fails the test with how to start one; it never skips), topic names no
//! other test or earlier run uses, and a private Apache Kafka a test may kill.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `DELTAPILOT_KAFKA_BROKERS` (Apache Kafka), or a panic saying how to start a
/// broker for `test`.
pub fn brokers(test: &str) -> String {
    match std::env::var("DELTAPILOT_KAFKA_BROKERS") {
        Ok(b) if !b.trim().is_empty() => b,
        _ => panic!(
            "DELTAPILOT_KAFKA_BROKERS is not set. This test needs a real Apache Kafka \
             broker; start one and point the test at it:\n  \
             scripts/install-test-deps.sh\n  \
             scripts/kafka.sh start 19092\n  \
             DELTAPILOT_KAFKA_BROKERS=127.0.0.1:19092 cargo test -p deltapilot-engine --test {test}\n\
             (scripts/test.sh does all of this.)"
        ),
    }
}

/// `DELTAPILOT_TANSU_BROKERS` (the Tansu smoke test only), or a panic saying how to
/// start one.
pub fn tansu_brokers(test: &str) -> String {
    match std::env::var("DELTAPILOT_TANSU_BROKERS") {
        Ok(b) if !b.trim().is_empty() => b,
        _ => panic!(
            "DELTAPILOT_TANSU_BROKERS is not set. This test needs a Tansu broker:\n  \
             scripts/install-test-deps.sh\n  \
             scripts/tansu.sh start 19093\n  \
             DELTAPILOT_TANSU_BROKERS=127.0.0.1:19093 cargo test -p deltapilot-engine --test {test}\n\
             (scripts/test.sh does all of this.)"
        ),
    }
}

/// A topic name no other test (or earlier run against the same broker) uses.
pub fn unique_topic(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "dp-test-{name}-{}-{}-{:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// A loopback port nothing listens on (at the moment of asking).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port
}

/// An Apache Kafka (or Tansu) only this test uses, so it can be killed: started by
/// `scripts/kafka.sh` (`scripts/tansu.sh`) in a private run dir (jars from the same places that script
/// looks). SIGKILLed (a crash, not a shutdown) by [`PrivateKafka::kill`] and on drop.
pub struct PrivateKafka {
    run_dir: PathBuf,
    pid: Option<u32>,
    /// The port the broker listens on.
    pub port: u16,
    /// `127.0.0.1:<advertised port>`: what clients bootstrap from and Metadata names.
    pub addr: String,
}

impl PrivateKafka {
    /// Starts a broker on a free port that advertises itself at `advertised` (a TCP
    /// proxy's port), or at its own port. Blocks until it answers Metadata (the
    /// script's own bound is 90 s).
    pub fn start(advertised: Option<u16>) -> Self {
        Self::start_on(free_port(), advertised)
    }

    /// As [`PrivateKafka::start`], listening on `port`.
    pub fn start_on(port: u16, advertised: Option<u16>) -> Self {
        Self::start_script("kafka", port, advertised)
    }

    /// A private Tansu (`scripts/tansu.sh`, memory storage) on `port`, advertising
    /// itself at `advertised` (or its own port); otherwise as [`PrivateKafka`].
    pub fn start_tansu_on(port: u16, advertised: Option<u16>) -> Self {
        Self::start_script("tansu", port, advertised)
    }

    /// Runs `scripts/<broker>.sh start` in a private run dir; `broker` is also
    /// the stem of its pidfile and of its advertised-port knob.
    fn start_script(broker: &str, port: u16, advertised: Option<u16>) -> Self {
        let adv = advertised.unwrap_or(port);
        let run_dir = std::env::temp_dir().join(format!(
            "deltapilot-private-{broker}-{}-{}",
            std::process::id(),
            unique_topic("k")
        ));
        std::fs::create_dir_all(&run_dir).expect("private run dir");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../scripts/{broker}.sh"));
        let out = Command::new("bash")
            .arg(&script)
            .args(["start", &port.to_string()])
            .env("DELTAPILOT_RUN_DIR", &run_dir)
            .env(
                format!("DELTAPILOT_{}_ADVERTISED_PORT", broker.to_uppercase()),
                adv.to_string(),
            )
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} start {port} failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = std::fs::read_to_string(run_dir.join(format!("{broker}.pid")))
            .ok()
            .and_then(|p| p.trim().parse().ok());
        assert!(pid.is_some(), "no pid in {}", run_dir.display());
        Self {
            run_dir,
            pid,
            port,
            addr: format!("127.0.0.1:{adv}"),
        }
    }

    /// Kills the broker at once (SIGKILL) and waits for it to be gone (bounded).
    pub fn kill(&mut self) {
        let Some(pid) = self.pid.take() else { return };
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        for _ in 0..100 {
            if !proc_dir.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}
