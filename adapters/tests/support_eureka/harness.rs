//! Test harness for the Eureka adapter: run it against a real embedded log, read
//! the log back, wait (bounded) for log contents or status, fold with the engine.

use std::sync::Arc;
use std::time::Duration;

use deltapilot_adapters::eureka::{EurekaAdapter, EurekaAdapterStatus, EurekaOptions};
use deltapilot_engine::fold;
use deltapilot_engine::log::file::FileLog;
use deltapilot_engine::log::{EventLog, RecordPos};
use deltapilot_engine::state::ModelState;
use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Upper bound of every wait: generous for a loaded 2-core machine, while the
/// adapter normally reacts within one 50 ms refresh.
pub const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

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

/// `kind:key` per event (`resync:STARTED` for markers).
pub fn summary(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match &e.payload {
            Some(Payload::Resync(m)) => format!("resync:{}", m.phase().as_str_name()),
            _ => format!("{}:{}", e.kind_name(), e.key().unwrap_or_default()),
        })
        .collect()
}

/// Every event in the log, each decoded (a corrupt record fails the test).
pub async fn all_events(log: &FileLog) -> Vec<Event> {
    let mut pos = log.start();
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let recs = log.read(&pos, 1000).await.expect("read log");
        if recs.is_empty() {
            return out;
        }
        for r in recs {
            pos.advance(r.pos);
            out.push(r.decode().expect("every record decodes"));
        }
    }
    panic!("log read did not end");
}

/// Polls the log until `done` holds on its summary, bounded by [`WAIT`].
pub async fn wait_log(log: &FileLog, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let events = all_events(log).await;
        if done(&summary(&events)) {
            return events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; log: {:#?}",
            summary(&events)
        );
        tokio::time::sleep(POLL).await;
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

/// Folds the events with the engine and checks it accepted every one.
pub fn fold_all(events: &[Event]) -> ModelState {
    let positioned: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            (
                RecordPos {
                    partition: 0,
                    offset: i as u64,
                },
                e.clone(),
            )
        })
        .collect();
    let out = fold::fold(&ModelState::default(), &positioned);
    assert!(
        out.skipped.is_empty(),
        "the engine refused events the adapter wrote: {:#?}",
        out.skipped
    );
    out.state
}

/// The endpoint upserted by `event`, if it is an endpoint upsert.
pub fn endpoint(event: &Event) -> Option<&deltapilot_proto::Endpoint> {
    match &event.payload {
        Some(Payload::EndpointUpsert(u)) => u.endpoint.as_ref(),
        _ => None,
    }
}
