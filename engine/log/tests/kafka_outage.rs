//! Appends recover after a broker outage longer than `append_timeout` (issue 29
//! point 1): a private Apache Kafka advertises itself at a TCP proxy in this test
//! (tokio, 127.0.0.1), the proxy is cut for 3 × `append_timeout` (every connection
//! dropped, new ones closed at once), then restored, and later appends must
//! succeed and read back.
//!
//! Needs the Apache Kafka jars `scripts/kafka.sh` uses (`scripts/install-test-deps.sh`);
//! fails, never skips, without them.

mod suite;
use deltapilot_testkit::kafka as support_kafka;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deltapilot_log::EventLog;
use deltapilot_log::kafka::{KafkaLog, KafkaOptions};
use support_kafka::PrivateKafka;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const APPEND_TIMEOUT: Duration = Duration::from_secs(2);

/// Bound on any single wait that is not itself under test.
const WAIT: Duration = Duration::from_secs(30);

/// Most appends tried after the outage before the test gives up.
const MAX_TRIES_AFTER: usize = 10;

/// A TCP proxy from a loopback port to the broker that can be cut and restored.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens now (so the port is known before the broker starts); forwards to
    /// `127.0.0.1:<target>` once `target` is set.
    async fn listen(target: Arc<Mutex<Option<u16>>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (cut, conns) = (cut.clone(), conns.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        continue;
                    };
                    let to = *target.lock().expect("target");
                    let Some(to) = to.filter(|_| !cut.load(Ordering::SeqCst)) else {
                        drop(client); // cut (or no broker yet): close at once
                        continue;
                    };
                    let task = tokio::spawn(async move {
                        if let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", to)).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                        }
                    });
                    let mut list = conns.lock().expect("conns");
                    list.retain(|t| !t.is_finished());
                    list.push(task);
                }
            })
        };
        Self {
            port,
            cut,
            conns,
            accept,
        }
    }

    /// Drops every open connection and refuses new ones until `restore`.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for t in self.conns.lock().expect("conns").drain(..) {
            t.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_recover_after_an_outage_longer_than_append_timeout() {
    let target = Arc::new(Mutex::new(None));
    let proxy = Proxy::listen(target.clone()).await;
    let adv = proxy.port;
    // The proxy forwards before the broker is up: its readiness probe already
    // goes through the advertised (proxy) address.
    let port = support_kafka::free_port();
    *target.lock().expect("target") = Some(port);
    let broker = tokio::task::spawn_blocking(move || PrivateKafka::start_on(port, Some(adv)))
        .await
        .expect("private kafka");
    let addr = format!("127.0.0.1:{}", proxy.port);
    assert_eq!(broker.addr, addr);

    let opts = KafkaOptions {
        partitions: 2,
        append_timeout: APPEND_TIMEOUT,
        request_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(10),
    };
    let log = tokio::time::timeout(WAIT, KafkaLog::connect(&addr, "dp-test-outage", opts))
        .await
        .expect("connect within 30 s")
        .expect("connect through the proxy");
    let mut acked = Vec::new();
    acked.extend(
        tokio::time::timeout(WAIT, log.append(&suite::batch(0, 10)))
            .await
            .expect("append within 30 s")
            .expect("append before the outage"),
    );

    // The outage: 3 × append_timeout, with appends failing (bounded) throughout.
    proxy.cut();
    let t0 = Instant::now();
    let mut i = 10;
    let mut failed = 0;
    while t0.elapsed() < 3 * APPEND_TIMEOUT {
        match tokio::time::timeout(WAIT, log.append(&suite::batch(i, 3)))
            .await
            .expect("an append during the outage must end within 30 s")
        {
            Ok(at) => panic!("append through a cut proxy succeeded: {at:?}"),
            Err(e) => {
                failed += 1;
                eprintln!("append during the outage ({:?}): {e}", t0.elapsed());
            }
        }
        i += 3;
    }
    assert!(failed >= 1);
    proxy.restore();
    let restored = Instant::now();

    // After it: appends succeed again (a few may still fail while the client
    // reconnects; the bound is MAX_TRIES_AFTER tries and 30 s).
    let mut ok_after = 0;
    for attempt in 0..MAX_TRIES_AFTER {
        assert!(
            restored.elapsed() < WAIT,
            "no append succeeded within 30 s of restore"
        );
        let events = suite::batch(1000 + 10 * attempt as u64, 5);
        match tokio::time::timeout(WAIT, log.append(&events))
            .await
            .expect("append within 30 s")
        {
            Ok(at) => {
                eprintln!(
                    "append {attempt} after restore ok at {:?}",
                    restored.elapsed()
                );
                acked.extend(at);
                ok_after += 1;
                if ok_after == 3 {
                    break;
                }
            }
            Err(e) => eprintln!(
                "append {attempt} after restore failed ({:?}): {e}",
                restored.elapsed()
            ),
        }
    }
    assert_eq!(ok_after, 3, "appends never recovered after the outage");

    // Everything acknowledged is in the log (events of failed appends may be too).
    let head = tokio::time::timeout(WAIT, log.head())
        .await
        .expect("head within 30 s")
        .expect("head");
    for p in &acked {
        assert!(head.contains(*p), "acknowledged {p} beyond head {head}");
    }
    let records = tokio::time::timeout(WAIT, suite::read_to_end(&log, &log.start()))
        .await
        .expect("read within 30 s");
    let have: std::collections::BTreeSet<_> = records.iter().map(|r| r.pos).collect();
    for p in &acked {
        assert!(have.contains(p), "acknowledged {p} not read back");
    }
    drop(broker);
}
