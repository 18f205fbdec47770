//! Where churn goes: straight into the event log, or into ServiceEntry files that
//! a server's file adapter watches.
//!
//! - [`Sink::Log`] appends entity events under the `loadgen` source with
//!   `Log::open(parse_uri(..))` — for a server whose log the load generator may
//!   also append to (a Kafka topic, or an embedded log no other process writes).
//!   The initial mesh goes in as a resync (started, every entity, completed), so
//!   whatever an earlier run left under the same source is swept by the engine.
//!   Every event's observed-at time is the moment just before its append.
//! - [`Sink::Files`] writes one `lg-svc-<id>.yaml` per service and one
//!   `lg-vs-split-<id>.yaml` per rule, atomically (a hidden
//!   temporary file renamed into place; the adapter skips hidden files). This is
//!   the path for `--spawn`: `deltapilot run` holds its embedded log's writer
//!   lock, so no second process may append; its file adapter does the appending
//!   and stamps observed-at itself.
//!
//! What it does NOT do: decide the changes (see `churn`) or read the log back
//! (see `logwatch`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use deltapilot_log::{EventLog, Log};
use deltapilot_proto::resync_marker::Phase;
use deltapilot_proto::{Event, event::Payload};

use crate::churn::Write;
use crate::mesh::{self, Mesh, Rule, Service};

/// Most events in one append of the initial mesh: a few hundred kilobytes, well
/// under any backend's batch limit.
const INITIAL_BATCH: usize = 1000;

/// Microseconds since the Unix epoch.
pub fn unix_micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Where churn is written.
pub enum Sink {
    /// Direct appends to a log.
    Log {
        /// The log.
        log: Arc<Log>,
        /// The resync generation every event carries.
        generation: u64,
    },
    /// ServiceEntry files in a watched directory.
    Files {
        /// The directory.
        dir: PathBuf,
    },
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Log { generation, .. } => write!(f, "Sink::Log(generation {generation})"),
            Sink::Files { dir } => write!(f, "Sink::Files({})", dir.display()),
        }
    }
}

fn service_events(s: &Service, out: &mut Vec<Payload>) {
    out.push(s.upsert_payload());
    out.extend(s.endpoints.iter().map(|e| s.endpoint_upsert(&e.addr)));
}

impl Sink {
    /// A log sink whose generation is now, in microseconds (newer than any earlier
    /// run's, so its resync sweeps them).
    pub fn log(log: Log) -> Self {
        Sink::Log {
            log: Arc::new(log),
            generation: unix_micros(SystemTime::now()).max(1) as u64,
        }
    }

    /// Whether the server stamps observed-at itself (file adapter) rather than us.
    pub fn stamps_itself(&self) -> bool {
        matches!(self, Sink::Files { .. })
    }

    /// Writes the initial mesh (replacing whatever an earlier run wrote).
    pub async fn write_initial(&self, mesh: &Mesh) -> anyhow::Result<()> {
        match self {
            Sink::Log { log, generation } => {
                let mut payloads = vec![mesh::resync(Phase::Started)];
                for s in &mesh.services {
                    service_events(s, &mut payloads);
                }
                payloads.extend(mesh.rules.iter().map(Rule::upsert_payload));
                payloads.push(mesh::resync(Phase::Completed));
                let at = unix_micros(SystemTime::now());
                let events: Vec<Event> = payloads
                    .into_iter()
                    .map(|p| mesh::event(*generation, at, p))
                    .collect();
                for chunk in events.chunks(INITIAL_BATCH) {
                    log.append(chunk)
                        .await
                        .context("appending the initial mesh to the log")?;
                }
                Ok(())
            }
            Sink::Files { dir } => {
                let keep: std::collections::HashSet<String> = mesh
                    .services
                    .iter()
                    .map(Service::file_name)
                    .chain(mesh.rules.iter().map(Rule::file_name))
                    .collect();
                let mut stale = Vec::new();
                let mut rd = tokio::fs::read_dir(dir)
                    .await
                    .with_context(|| format!("reading {}", dir.display()))?;
                while let Some(e) = rd.next_entry().await? {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with("lg-") && name.ends_with(".yaml") && !keep.contains(&name) {
                        stale.push(e.path());
                    }
                }
                for p in stale {
                    tokio::fs::remove_file(&p)
                        .await
                        .with_context(|| format!("removing stale {}", p.display()))?;
                }
                for s in &mesh.services {
                    write_file(dir, &s.file_name(), &s.service_entry_yaml()).await?;
                }
                for r in &mesh.rules {
                    write_file(dir, &r.file_name(), &r.yaml()).await?;
                }
                Ok(())
            }
        }
    }

    /// Writes one churn operation; returns when it was written (for the log: the
    /// observed-at time its events carry).
    pub async fn write(&self, w: &Write) -> anyhow::Result<SystemTime> {
        match self {
            Sink::Log { log, generation } => {
                let s = &w.service;
                let mut payloads = Vec::new();
                if let Some(rule) = &w.rule {
                    payloads.push(rule.upsert_payload());
                } else if w.new_service {
                    service_events(s, &mut payloads);
                } else if w.removed_service {
                    payloads.extend(w.removed.iter().map(|a| s.endpoint_delete(a)));
                    payloads.push(s.delete_payload());
                } else {
                    payloads.extend(w.added.iter().map(|a| s.endpoint_upsert(a)));
                    payloads.extend(w.removed.iter().map(|a| s.endpoint_delete(a)));
                }
                let now = SystemTime::now();
                let at = unix_micros(now);
                let events: Vec<Event> = payloads
                    .into_iter()
                    .map(|p| mesh::event(*generation, at, p))
                    .collect();
                log.append(&events)
                    .await
                    .context("appending churn to the log")?;
                Ok(now)
            }
            Sink::Files { dir } => {
                let now = SystemTime::now();
                if let Some(rule) = &w.rule {
                    write_file(dir, &rule.file_name(), &rule.yaml()).await?;
                } else if w.removed_service {
                    let p = dir.join(w.service.file_name());
                    tokio::fs::remove_file(&p)
                        .await
                        .with_context(|| format!("removing {}", p.display()))?;
                } else {
                    let s = &w.service;
                    write_file(dir, &s.file_name(), &s.service_entry_yaml()).await?;
                }
                Ok(now)
            }
        }
    }
}

async fn write_file(dir: &std::path::Path, name: &str, body: &str) -> anyhow::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let dst = dir.join(name);
    tokio::fs::write(&tmp, body)
        .await
        .with_context(|| format!("writing {}", tmp.display()))?;
    tokio::fs::rename(&tmp, &dst)
        .await
        .with_context(|| format!("renaming into {}", dst.display()))?;
    Ok(())
}
