//! Peers side by side (`--peer go-control-plane`, `--peer istiod`): the same
//! scenario run first
//! against a spawned deltapilot, then against a spawned peer control plane, one
//! after the other on the same machine, and the figures of both in one table.
//!
//! Both runs get the same plan: the same scenario and seed (so the same mesh,
//! the same simulated Envoys with the same node ids and behaviours, the same
//! churn operations at the same rate), the same ServiceEntry files in a watched
//! directory, and the same convergence tracker, which judges a change converged
//! at a proxy when that proxy ACKs a response showing it. The only figure that
//! differs in method is where convergence starts: deltapilot's log gives the
//! moment its file adapter appended the change, the peer has no log. So the
//! comparison uses the write of the file for both (`write_to_ack_*`), and the
//! ratio to raw fan-out is computed from that same figure; each run's raw
//! fan-out replays the responses that run's proxy 0 received.
//!
//! The peer is found through `--peer-bin`, else its environment variable:
//! `DELTAPILOT_GCP_PEER` for go-control-plane (`load-tests/peers/go-control-plane`,
//! built by `load-tests/peers/build.sh`), `DELTAPILOT_ISTIOD_PEER` for Istio's
//! `pilot-discovery` (built by `load-tests/peers/istiod/build.sh`, by hand: it
//! is too heavy for the test command).
//!
//! What it does NOT do: build the peer, or run the two servers at once (they
//! would share the two cores and measure each other).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::report::Report;
use crate::stats::{Percentiles, ratio};

/// A peer control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// go-control-plane v0.14 (`load-tests/peers/go-control-plane`).
    GoControlPlane,
    /// Istio's istiod (`pilot-discovery`) in file-config mode
    /// (`load-tests/peers/istiod`, see [`crate::istiod`]).
    Istiod,
}

impl Peer {
    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Peer::GoControlPlane => "go-control-plane",
            Peer::Istiod => "istiod",
        }
    }

    /// The environment variable naming its binary.
    pub fn env(self) -> &'static str {
        match self {
            Peer::GoControlPlane => GCP_PEER_ENV,
            Peer::Istiod => ISTIOD_PEER_ENV,
        }
    }

    /// The cache it serves from, as reports name it: only go-control-plane's
    /// is chosen (`--peer-cache`); istiod has its own.
    pub fn cache(self, cache: PeerCache) -> Option<&'static str> {
        match self {
            Peer::GoControlPlane => Some(cache.as_str()),
            Peer::Istiod => None,
        }
    }

    fn build_script(self) -> &'static str {
        match self {
            Peer::GoControlPlane => "load-tests/peers/build.sh",
            Peer::Istiod => "load-tests/peers/istiod/build.sh",
        }
    }
}

/// Which go-control-plane cache the peer serves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PeerCache {
    /// One `LinearCache` per type behind a `MuxCache`: resources shared by all
    /// nodes, each updated on its own.
    Linear,
    /// `SnapshotCache` with a snapshot per node (`IDHash`).
    Snapshot,
}

impl PeerCache {
    /// The peer's `--cache` value.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerCache::Linear => "linear",
            PeerCache::Snapshot => "snapshot",
        }
    }
}

/// The environment variable naming the go-control-plane peer's binary.
pub const GCP_PEER_ENV: &str = "DELTAPILOT_GCP_PEER";

/// The environment variable naming istiod's `pilot-discovery` binary.
pub const ISTIOD_PEER_ENV: &str = "DELTAPILOT_ISTIOD_PEER";

/// The peer's binary: `explicit` (`--peer-bin`), else the peer's own
/// environment variable ([`Peer::env`]); it must exist.
pub fn find_binary(peer: Peer, explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let env = peer.env();
    let (path, from) = match explicit {
        Some(p) => (p.to_owned(), "--peer-bin".to_string()),
        None => match std::env::var_os(env) {
            Some(p) => (PathBuf::from(p), env.to_string()),
            None => bail!(
                "--peer {} needs its binary: build it with {} and set {env} (or pass \
                 --peer-bin PATH)",
                peer.as_str(),
                peer.build_script()
            ),
        },
    };
    if path.is_file() {
        return Ok(path);
    }
    bail!(
        "{from} {}: no such file; build the {} peer with {}",
        path.display(),
        peer.as_str(),
        peer.build_script()
    )
}

/// One figure of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What it is.
    pub figure: String,
    /// deltapilot's value.
    pub deltapilot: Option<f64>,
    /// The peer's value.
    pub peer: Option<f64>,
    /// peer ÷ deltapilot.
    pub peer_over_deltapilot: Option<f64>,
}

/// Both runs and their comparison: the `--report` document under `--peer`.
#[derive(Debug, Clone, Serialize)]
pub struct SideBySide {
    /// The peer's name.
    pub peer: String,
    /// The peer's cache (`own` for istiod, whose cache is not chosen).
    pub peer_cache: String,
    /// The figures, side by side.
    pub comparison: Vec<Row>,
    /// The deltapilot run's full report.
    pub deltapilot_report: Report,
    /// The peer run's full report.
    pub peer_report: Report,
}

/// Convergence from the write, endpoint changes when there are any (like for
/// like with EDS pushes), else every change.
fn from_write(r: &Report) -> Option<&Percentiles> {
    r.write_to_ack_endpoint_ms
        .as_ref()
        .or(r.write_to_ack_ms.as_ref())
}

/// Raw fan-out of the pushes matching [`from_write`]'s changes.
fn raw(r: &Report) -> Option<&Percentiles> {
    let b = r.baseline.as_ref()?;
    if r.write_to_ack_endpoint_ms.is_some() {
        b.raw_fanout_eds_ms.as_ref().or(b.raw_fanout_ms.as_ref())
    } else {
        b.raw_fanout_ms.as_ref()
    }
}

fn rows(a: &Report, b: &Report) -> Vec<Row> {
    type Get = fn(&Report) -> Option<f64>;
    let table: [(&str, Get); 17] = [
        ("initial sync, ms (last proxy)", |r| r.initial_sync_ms),
        ("initial sync server CPU, s", |r| {
            r.initial_sync_server_cpu_seconds
        }),
        ("convergence from write p50, ms", |r| {
            from_write(r).map(|p| p.p50)
        }),
        ("convergence from write p99, ms", |r| {
            from_write(r).map(|p| p.p99)
        }),
        ("convergence from write max, ms", |r| {
            from_write(r).map(|p| p.max)
        }),
        ("raw fan-out p50, ms", |r| raw(r).map(|p| p.p50)),
        ("raw fan-out p99, ms", |r| raw(r).map(|p| p.p99)),
        ("convergence ÷ raw fan-out, p50", |r| {
            ratio(from_write(r).map(|p| p.p50), raw(r).map(|p| p.p50))
        }),
        ("convergence ÷ raw fan-out, p99", |r| {
            ratio(from_write(r).map(|p| p.p99), raw(r).map(|p| p.p99))
        }),
        ("server CPU per response, µs", |r| {
            r.server_cpu_us_per_response
        }),
        ("server CPU during churn, s", |r| r.churn_server_cpu_seconds),
        ("server RSS per proxy, KiB", |r| {
            r.server_rss_bytes_per_proxy.map(|b| b / 1024.0)
        }),
        ("server peak RSS, MiB", |r| {
            r.server_peak_rss_bytes
                .map(|b| b as f64 / (1024.0 * 1024.0))
        }),
        ("bytes per proxy per change", |r| {
            r.bytes_per_proxy_per_event
        }),
        ("EDS bytes ÷ changed bytes", |r| r.bytes_per_change_ratio),
        ("changes converged / written", |r| {
            ratio(Some(r.events_converged as f64), Some(r.events as f64))
        }),
        ("NACKs + errors", |r| Some((r.nacks + r.errors) as f64)),
    ];
    table
        .into_iter()
        .map(|(figure, get)| {
            let (d, p) = (get(a), get(b));
            Row {
                figure: figure.into(),
                deltapilot: d,
                peer: p,
                peer_over_deltapilot: ratio(p, d),
            }
        })
        .collect()
}

fn num(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
        None => "—".into(),
    }
}

impl SideBySide {
    /// Puts the two runs side by side.
    pub fn new(peer: Peer, cache: PeerCache, deltapilot: Report, other: Report) -> Self {
        SideBySide {
            peer: peer.as_str().into(),
            peer_cache: peer.cache(cache).unwrap_or("own").into(),
            comparison: rows(&deltapilot, &other),
            deltapilot_report: deltapilot,
            peer_report: other,
        }
    }

    /// The comparison as a terminal table.
    pub fn table(&self) -> String {
        let head = [
            "figure".to_string(),
            "deltapilot".into(),
            format!("{} ({})", self.peer, self.peer_cache),
            "peer ÷ deltapilot".into(),
        ];
        let body: Vec<[String; 4]> = self
            .comparison
            .iter()
            .map(|r| {
                [
                    r.figure.clone(),
                    num(r.deltapilot),
                    num(r.peer),
                    num(r.peer_over_deltapilot),
                ]
            })
            .collect();
        let mut w = [0usize; 4];
        for row in std::iter::once(&head).chain(&body) {
            for (i, c) in row.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&head).chain(&body) {
            let _ = writeln!(
                out,
                "{:<a$}  {:>b$}  {:>c$}  {:>d$}",
                row[0],
                row[1],
                row[2],
                row[3],
                a = w[0],
                b = w[1],
                c = w[2],
                d = w[3]
            );
        }
        out
    }

    /// Writes the JSON document.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing --report {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_compare_from_write_and_divide_peer_by_deltapilot() {
        let p = |v: f64| Percentiles {
            count: 1,
            p50: v,
            p90: v,
            p99: v,
            max: v,
            mean: v,
        };
        let a = Report {
            write_to_ack_endpoint_ms: Some(p(100.0)),
            // The append-based figure is not what is compared.
            convergence_endpoint_ms: Some(p(1.0)),
            ..Default::default()
        };
        let b = Report {
            write_to_ack_endpoint_ms: Some(p(300.0)),
            ..Default::default()
        };
        let s = SideBySide::new(Peer::GoControlPlane, PeerCache::Linear, a, b);
        let r = &s.comparison[3];
        assert_eq!(r.figure, "convergence from write p99, ms");
        assert_eq!(
            (r.deltapilot, r.peer, r.peer_over_deltapilot),
            (Some(100.0), Some(300.0), Some(3.0))
        );
        assert!(s.table().contains("go-control-plane (linear)"));
        let s = SideBySide::new(
            Peer::Istiod,
            PeerCache::Linear,
            Report::default(),
            Report::default(),
        );
        assert_eq!(s.peer_cache, "own", "istiod's cache is not chosen");
        assert!(s.table().contains("istiod (own)"));
    }

    #[test]
    fn a_missing_peer_binary_names_the_build_script() {
        let e = find_binary(
            Peer::Istiod,
            Some(Path::new("/nonexistent/pilot-discovery")),
        )
        .expect_err("no such file");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("/nonexistent/pilot-discovery")
                && msg.contains("load-tests/peers/istiod/build.sh"),
            "{msg}"
        );
    }
}
