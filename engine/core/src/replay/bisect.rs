//! `replay bisect`: the first event after which a resource matched a predicate.
//!
//! A predicate is not monotonic (an endpoint can appear, go and come back), so the
//! search is a scan, not a halving: each event is folded on its own and the
//! predicate is checked again only when the event changed the resource. That is
//! exact (a match that lasted a single event is found) and cheap (the generator
//! regenerates only what each event touched).
//!
//! "Matched" means a transition: the first event before which the resource did
//! not match and after which it does. If it already matches where the search
//! starts, no event made it match; the outcome says so
//! ([`Outcome::MatchedAtStart`]) rather than pointing at an event that did not
//! cause it.
//!
//! What it does NOT do: render resources; "contains" searches the text a caller's
//! renderer produces (the CLI passes its JSON rendering).

use std::ops::ControlFlow;
use std::str::FromStr;
use std::sync::Arc;

use deltapilot_proto::Event;

use super::drive::each_event;
use super::{Replayer, ResourceKind, StoppedAt};
use crate::Result;
use deltapilot_log::{EventLog, Position, RecordPos};
use deltapilot_xds::{Resource, ResourceType};

/// What the resource must look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Predicate {
    /// It exists and its rendering contains this text.
    Contains(String),
    /// It exists and its content version starts with this (16 hex digits in full).
    Version(String),
    /// It does not exist.
    Absent,
    /// It exists.
    Present,
    /// A route configuration that sends traffic to a cluster whose name contains
    /// `cluster`: a route's single cluster, or a weighted cluster with a weight
    /// above 0 (a weight of 0, should a configuration carry one, names the
    /// cluster but sends it nothing). Mirrors are not traffic sent. With `host`,
    /// only the virtual hosts that serve that domain count (a port's route
    /// configuration holds every host of the port, and each host's own default
    /// route names its own cluster). Only for RDS.
    RoutesTo {
        /// Text the cluster's name contains (`|v2|reviews.`).
        cluster: String,
        /// A domain the virtual host serves (`reviews.default.svc.cluster.local`).
        host: Option<String>,
    },
}

impl FromStr for Predicate {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let t = s.trim();
        let (word, rest) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
        let rest = rest.trim();
        let arg = |what: &str| {
            if rest.is_empty() {
                Err(format!(
                    "`{word}` needs {what}, e.g. `{word} {}`",
                    match word {
                        "version" => "1f2e3d4c",
                        "routes-to" => "|v2|reviews.",
                        _ => "10.0.0.7",
                    }
                ))
            } else {
                Ok(rest.to_owned())
            }
        };
        match word {
            "contains" => Ok(Predicate::Contains(arg("a text")?)),
            "version" => Ok(Predicate::Version(arg("a version")?)),
            "routes-to" => {
                let a = arg("a cluster name or part of one")?;
                let (cluster, host) = match a.split_once(" for ") {
                    Some((c, h)) => (c.trim().to_owned(), Some(h.trim().to_owned())),
                    None => (a, None),
                };
                Ok(Predicate::RoutesTo { cluster, host })
            }
            "absent" if rest.is_empty() => Ok(Predicate::Absent),
            "present" if rest.is_empty() => Ok(Predicate::Present),
            _ => Err(format!(
                "unknown predicate {t:?}; expected `contains TEXT`, `routes-to CLUSTER`, `version V`, `absent` or `present`"
            )),
        }
    }
}

impl Predicate {
    /// Whether `r` (the resource, or `None` when it does not exist) matches;
    /// `text` renders a resource for `Contains`.
    pub fn matches(&self, r: Option<&Resource>, text: &dyn Fn(&Resource) -> String) -> bool {
        match (self, r) {
            (Predicate::Absent, r) => r.is_none(),
            (_, None) => false,
            (Predicate::Present, Some(_)) => true,
            (Predicate::Version(v), Some(r)) => r.version.starts_with(v.as_str()),
            (Predicate::Contains(needle), Some(r)) => text(r).contains(needle.as_str()),
            (Predicate::RoutesTo { cluster, host }, Some(r)) => {
                routed_clusters(&r.bytes, host.as_deref())
                    .iter()
                    .any(|c| c.contains(cluster.as_str()))
            }
        }
    }
}

/// The clusters an encoded `RouteConfiguration` sends traffic to, from the
/// virtual hosts serving domain `host` (all when `None`; see
/// [`Predicate::RoutesTo`]); empty when the bytes are not one.
pub fn routed_clusters(bytes: &[u8], host: Option<&str>) -> Vec<String> {
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use envoy_types::pb::envoy::config::route::v3::route::Action;
    use envoy_types::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
    use prost::Message as _;
    let Ok(rc) = RouteConfiguration::decode(bytes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let serves = |vh: &&envoy_types::pb::envoy::config::route::v3::VirtualHost| {
        host.is_none_or(|h| vh.domains.iter().any(|d| d == h))
    };
    for route in rc
        .virtual_hosts
        .iter()
        .filter(serves)
        .flat_map(|vh| &vh.routes)
    {
        let Some(Action::Route(ra)) = &route.action else {
            continue;
        };
        match &ra.cluster_specifier {
            Some(ClusterSpecifier::Cluster(c)) => out.push(c.clone()),
            Some(ClusterSpecifier::WeightedClusters(w)) => out.extend(
                w.clusters
                    .iter()
                    .filter(|c| c.weight.is_none_or(|w| w.value > 0))
                    .map(|c| c.name.clone()),
            ),
            _ => {}
        }
    }
    out
}

/// Parses a resource type as the CLI accepts it: `cds`/`eds`/`lds`/`rds`, the
/// type's name (`cluster`, `clusters`, `endpoint`, `listener`, `route`, …) or its
/// type URL.
pub fn parse_type(s: &str) -> std::result::Result<ResourceType, String> {
    let t = s.trim().to_ascii_lowercase();
    let found = match t.as_str() {
        "cds" | "cluster" | "clusters" => Some(ResourceType::Cluster),
        "eds" | "endpoint" | "endpoints" | "cla" | "clusterloadassignment" => {
            Some(ResourceType::Endpoint)
        }
        "lds" | "listener" | "listeners" => Some(ResourceType::Listener),
        "rds" | "route" | "routes" | "routeconfiguration" => Some(ResourceType::Route),
        _ => ResourceType::from_type_url(s.trim()),
    };
    found.ok_or_else(|| format!("unknown resource type {s:?}; expected cds, eds, lds or rds"))
}

/// A resource named by type and name: `TYPE/NAME` (`eds/outbound|9080||reviews.ns.svc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Its type.
    pub resource_type: ResourceType,
    /// Its name.
    pub name: String,
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (t, name) = s
            .split_once('/')
            .filter(|(_, n)| !n.is_empty())
            .ok_or_else(|| format!("{s:?}: expected TYPE/NAME, e.g. eds/outbound|9080||reviews.default.svc.cluster.local"))?;
        Ok(Target {
            resource_type: parse_type(t)?,
            name: name.to_owned(),
        })
    }
}

/// The event that made the resource match.
#[derive(Debug, Clone)]
pub struct Found {
    /// Where it sits in the log.
    pub pos: RecordPos,
    /// The event.
    pub event: Event,
    /// The resource before it (`None`: absent).
    pub before: Option<Arc<Resource>>,
    /// The resource after it (`None`: absent).
    pub after: Option<Arc<Resource>>,
}

/// How a search ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// This event made it match.
    Found(Box<Found>),
    /// It already matched at the start of the search, and no event in the range
    /// made it match again after it stopped matching. `matches_at_end` tells
    /// whether it still matches at the end of the range.
    MatchedAtStart {
        /// Whether it matches at the end.
        matches_at_end: bool,
    },
    /// No event in the range made it match.
    Never,
    /// A record that cannot be read ended the search first.
    Stopped(StoppedAt),
}

/// Scans from `r`'s position up to `to` for the first event after which `target`
/// matches `predicate` having not matched before it.
pub async fn bisect<L: EventLog + ?Sized>(
    log: &L,
    r: &mut Replayer,
    to: &Position,
    target: &Target,
    predicate: &Predicate,
    text: &dyn Fn(&Resource) -> String,
    progress: &mut dyn FnMut(u64),
) -> Result<Outcome> {
    let at_start = predicate.matches(
        ResourceKind::find(r.resources(), target.resource_type, &target.name)
            .map(|(_, res)| res)
            .as_deref(),
        text,
    );
    let mut matched = at_start;
    let mut found: Option<Found> = None;
    let mut seen = 0u64;
    let stop =
        each_event(log, r, to, &mut |pos, event, report, _| {
            seen += 1;
            if seen.is_multiple_of(4096) {
                progress(seen);
            }
            // A record that did not decode changed nothing.
            let Some(event) = event else {
                return ControlFlow::Continue(());
            };
            let Some(change) = report.changes.iter().find(|c| {
                c.kind.resource_type() == target.resource_type && *c.name == *target.name
            }) else {
                return ControlFlow::Continue(());
            };
            let now = predicate.matches(change.new.as_deref(), text);
            if now && !matched {
                found = Some(Found {
                    pos,
                    event: event.clone(),
                    before: change.old.clone(),
                    after: change.new.clone(),
                });
                return ControlFlow::Break(());
            }
            matched = now;
            ControlFlow::Continue(())
        })
        .await?;
    progress(seen);
    if let Some(f) = found {
        return Ok(Outcome::Found(Box::new(f)));
    }
    if let Some(s) = stop {
        return Ok(Outcome::Stopped(s));
    }
    Ok(if at_start {
        Outcome::MatchedAtStart {
            matches_at_end: matched,
        }
    } else {
        Outcome::Never
    })
}
