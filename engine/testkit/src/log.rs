//! Reading what an adapter wrote, shared by every adapter test that runs one
//! against a real embedded log: the log's events, a one-line summary of each, a
//! bounded wait on the log's contents, and folding the events with the real engine.
//!
//! What it does NOT do: start adapters or fake registries (see `support_k8s`,
//! `support_eureka` and the file tests).

use std::time::Duration;

use deltapilot_log::file::FileLog;
use deltapilot_log::{EventLog, RecordPos};
use deltapilot_model::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;

/// Upper bound of every wait: generous for a loaded 2-core machine, while the
/// adapters normally react within milliseconds (a debounce or refresh at most).
pub const WAIT: Duration = Duration::from_secs(30);

/// How often bounded waits look again.
pub const POLL: Duration = Duration::from_millis(20);

/// `"<kind>:<key>"` per event, `"resync:<PHASE>"` for markers.
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

/// Polls the log until `done` holds for its summary, bounded by [`WAIT`].
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

/// The state the engine folds `events` into; fails the test if the engine skips
/// any of them (an adapter must only write events the engine accepts).
pub fn fold_all(events: &[Event]) -> ModelState {
    let positioned: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: i as u64,
            };
            (pos, e.clone())
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
