//! Test harness for the Eureka adapter: run it against a real embedded log, read
//! the log back, wait (bounded) for log contents or status, fold with the engine.

use std::sync::Arc;
use std::time::Duration;

use deltapilot_adapters::eureka::{EurekaAdapter, EurekaAdapterStatus, EurekaOptions};
use deltapilot_log::file::FileLog;
use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[allow(unused_imports)] // each test binary uses its own subset
pub use deltapilot_testkit::log::{POLL, WAIT, all_events, fold_all, summary, wait_log};

/// Options for tests: fast polling, short timeouts and retries, a small cap.
pub fn fast(url: &str) -> EurekaOptions {
    EurekaOptions {
        refresh_interval: Duration::from_millis(50),
        request_timeout: Duration::from_millis(1500),
        max_response_bytes: 256 * 1024,
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(200),
        ..EurekaOptions::new(url)
    }
}

/// Waits (bounded) until the status satisfies `done`; returns that status.
pub async fn wait_status(
    rx: &mut watch::Receiver<EurekaAdapterStatus>,
    what: &str,
    done: impl Fn(&EurekaAdapterStatus) -> bool,
) -> EurekaAdapterStatus {
    let r = tokio::time::timeout(WAIT, rx.wait_for(|s| done(s)))
        .await
        .map(|r| r.map(|s| s.clone()));
    match r {
        Ok(Ok(s)) => s,
        _ => panic!("timed out waiting for {what}; status: {:#?}", *rx.borrow()),
    }
}

/// A running adapter.
pub struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<deltapilot_adapters::Result<()>>,
    /// Its status.
    pub status: watch::Receiver<EurekaAdapterStatus>,
}

/// Starts an adapter with `opts` appending to `log`.
pub fn start(opts: EurekaOptions, log: &Arc<FileLog>) -> Running {
    let adapter = EurekaAdapter::new(opts).expect("adapter");
    let status = adapter.status();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(adapter.run(log.clone(), stop_rx));
    Running { stop, task, status }
}

impl Running {
    /// Waits until the adapter has completed `n` more successful polls (full or
    /// delta) than it had when called: everything the fake served by then has been
    /// applied.
    pub async fn polls(&mut self, n: u64) -> EurekaAdapterStatus {
        let total = |s: &EurekaAdapterStatus| s.full_fetches_total + s.delta_fetches_total;
        let from = total(&self.status.borrow());
        wait_status(&mut self.status, &format!("{n} more polls"), |s| {
            total(s) >= from + n
        })
        .await
    }

    /// Stops the adapter and checks it ended cleanly.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let r = tokio::time::timeout(WAIT, self.task).await;
        assert!(
            matches!(r, Ok(Ok(Ok(())))),
            "adapter did not stop cleanly: {r:?}"
        );
    }
}

/// The endpoint upserted by `event`, if it is an endpoint upsert.
pub fn endpoint(event: &Event) -> Option<&deltapilot_proto::Endpoint> {
    match &event.payload {
        Some(Payload::EndpointUpsert(u)) => u.endpoint.as_ref(),
        _ => None,
    }
}
