//! Reads the observed-at times of churn back from a server's embedded log, when the
//! server's file adapter (not the load generator) appended it.
//!
//! The log is opened read-only (no lock, so the server keeps writing) and followed
//! from its head; each endpoint upsert, endpoint delete, service delete and rule
//! upsert is matched to the tracked change with the same address, service key
//! or rule marker, whose
//! append time becomes the event's observed-at time. The read-only follower polls
//! the files every 100 ms, which delays only when the times are learnt, not the
//! times themselves.
//!
//! What it does NOT do: write to the log, or fold it.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use deltapilot_log::file::FileLog;
use deltapilot_log::{EventLog, FollowItem, Position};
use deltapilot_proto::{Event, event::Payload};
use futures::StreamExt;
use tokio::sync::watch;

use crate::tracker::Tracker;

/// The tracker key a logged event satisfies, if it is one churn tracks.
pub fn key_of(ev: &Event) -> Option<String> {
    match ev.payload.as_ref()? {
        Payload::EndpointUpsert(u) => Some(format!("+{}", u.endpoint.as_ref()?.address)),
        Payload::EndpointDelete(d) => {
            let addr = d
                .key
                .split('/')
                .rev()
                .find(|s| s.parse::<IpAddr>().is_ok())?;
            Some(format!("-{addr}"))
        }
        Payload::ServiceDelete(d) => Some(d.key.clone()),
        Payload::ConfigUpsert(c) => {
            crate::mesh::marker_in(&c.config.as_ref()?.spec_json).map(str::to_owned)
        }
        _ => None,
    }
}

/// Opens the log in `dir` read-only and returns it with its current head, from
/// where [`follow`] starts (so nothing appended after this call is missed).
pub async fn open(dir: &Path) -> anyhow::Result<(FileLog, Position)> {
    let dir = dir.to_owned();
    let log = tokio::task::spawn_blocking(move || FileLog::open_read_only(&dir))
        .await
        .context("opening the server's log read-only")??;
    let head = log.head().await.context("reading the log head")?;
    Ok((log, head))
}

/// Follows `log` from `from` until `stop` turns true, recording append times in
/// `tracker`. Returns how many tracked events it matched.
pub async fn follow(
    log: FileLog,
    from: Position,
    tracker: Arc<Tracker>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<u64> {
    let mut stream = log.follow(from);
    let mut matched = 0;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return Ok(matched),
            item = stream.next() => match item {
                None => return Ok(matched),
                Some(Err(e)) => return Err(e).context("following the server's log"),
                Some(Ok(FollowItem::CaughtUp(_))) => {}
                Some(Ok(FollowItem::Records(records))) => {
                    for r in records {
                        let Ok(ev) = r.decode() else { continue };
                        let Some(key) = key_of(&ev) else { continue };
                        let at = UNIX_EPOCH
                            + Duration::from_micros(ev.observed_at_unix_micros.max(0) as u64);
                        if tracker.set_appended_by_key(&key, at) {
                            matched += 1;
                        }
                    }
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_proto as pb;

    #[test]
    fn keys_match_what_churn_registers() {
        let del = Event {
            payload: Some(Payload::EndpointDelete(pb::EntityDelete {
                key: "ep/file/se/ns-1/svc-3/10.0.1.7".into(),
            })),
            ..Default::default()
        };
        assert_eq!(key_of(&del).as_deref(), Some("-10.0.1.7"));
        let up = Event {
            payload: Some(Payload::EndpointUpsert(pb::EndpointUpsert {
                key: "x".into(),
                endpoint: Some(pb::Endpoint {
                    address: "10.0.0.9".into(),
                    ..Default::default()
                }),
            })),
            ..Default::default()
        };
        assert_eq!(key_of(&up).as_deref(), Some("+10.0.0.9"));
        let svc = Event {
            payload: Some(Payload::ServiceDelete(pb::EntityDelete {
                key: pb::service_key("ns", "h"),
            })),
            ..Default::default()
        };
        assert_eq!(key_of(&svc), Some(pb::service_key("ns", "h")));
    }
}
