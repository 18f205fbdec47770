//! What `deltapilot replay` prints per event, and which events and changes it
//! prints (the filters).
//!
//! Text (the default), one block per event:
//!
//! ```text
//! 0:17  endpoint_upsert  ep/reviews-v1-1  source=file:/etc/mesh gen=1
//!   eds       changed outbound|9080||reviews.default.svc.cluster.local  3f2a5c…  ->  9c1b07…  [sidecar router proxyless_grpc]
//!   skipped (unknown_service): endpoint ep/x: none of its services exists yet: y; held, and served once one does
//! 0:18  (not an event this build reads)
//!   skipped (schema_too_new): …
//! ```
//!
//! A record that does not decode is passed over, as the engine passes over
//! it, and always printed whatever the filters.
//!
//! `--output json`: one object per line, `{"position", "event", "skipped",
//! "changes": [{"type", "kind", "name", "action" (`added`, `changed`,
//! `removed`), "old_version", "new_version", "views", "diff"?}]}`, where `event` is the event as `deltapilot log read` prints it
//! (`null` for a record that does not decode).
//!
//! Filters: `--source` and `--key` select events (globs with `*`); `--resource`
//! (`NAME` or `TYPE/NAME`, globs) and `--proxy` (that proxy's view) select
//! changes, and with either of them an event is printed only if a selected change
//! remains. Every event is folded whatever is printed.
//!
//! What it does NOT do: fold (see the engine's `replay`).

use std::io::Write;

use deltapilot_engine::replay::bisect::parse_type;
use deltapilot_engine::replay::{EventReport, ResourceChange, ResourceKind};
use deltapilot_log::RecordPos;
use deltapilot_model::Proxy;
use deltapilot_proto::Event;
use deltapilot_server::admin::events::event_json;
use deltapilot_server::admin::render::renderer;
use deltapilot_xds::{Resource, ResourceType};
use serde::Serialize;

use super::diff::unified;

/// How `--diff` renders resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DiffFormat {
    /// YAML (the default: one field per line diffs best).
    Yaml,
    /// Pretty JSON.
    Json,
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// Human-readable blocks.
    Text,
    /// One JSON object per line.
    Json,
}

/// `*`-glob match (`*` matches any run of characters, including none).
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// One `--resource` value.
#[derive(Debug, Clone)]
pub(crate) struct ResourceFilter {
    t: Option<ResourceType>,
    pattern: String,
}

impl std::str::FromStr for ResourceFilter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        // `TYPE/NAME` only when the part before the first `/` is a type: names
        // themselves may contain `/`.
        if let Some((t, name)) = s.split_once('/')
            && let Ok(t) = parse_type(t)
        {
            return Ok(ResourceFilter {
                t: Some(t),
                pattern: name.to_owned(),
            });
        }
        if s.is_empty() {
            return Err("empty --resource".into());
        }
        Ok(ResourceFilter {
            t: None,
            pattern: s.to_owned(),
        })
    }
}

/// Everything that decides what is printed.
pub(crate) struct Filters {
    pub(crate) resources: Vec<ResourceFilter>,
    pub(crate) sources: Vec<String>,
    pub(crate) keys: Vec<String>,
    pub(crate) proxy: Option<Proxy>,
}

impl Filters {
    fn event_selected(&self, ev: &Event) -> bool {
        let key = ev.key().unwrap_or_default();
        (self.sources.is_empty() || self.sources.iter().any(|p| glob(p, &ev.source)))
            && (self.keys.is_empty() || self.keys.iter().any(|p| glob(p, &key)))
    }

    fn change_selected(&self, c: &ResourceChange) -> bool {
        let t = c.kind.resource_type();
        (self.resources.is_empty()
            || self
                .resources
                .iter()
                .any(|f| f.t.is_none_or(|ft| ft == t) && glob(&f.pattern, &c.name)))
            && self
                .proxy
                .as_ref()
                .is_none_or(|p| c.kind.visible_to(p.proxy_type))
    }

    fn narrows_changes(&self) -> bool {
        !self.resources.is_empty() || self.proxy.is_some()
    }

    /// The changes to print for an event, or `None` if the event is not printed.
    /// A record that did not decode (`ev` is `None`) is always printed: it is
    /// the only trace of a hole the fold passed over.
    pub(crate) fn select<'a>(
        &self,
        ev: Option<&Event>,
        report: &'a EventReport,
    ) -> Option<Vec<&'a ResourceChange>> {
        let Some(ev) = ev else {
            return Some(Vec::new());
        };
        if !self.event_selected(ev) {
            return None;
        }
        // Following a proxy, the replayer reports its own view's changes.
        let changes: Vec<&ResourceChange> = report
            .proxy_changes
            .as_ref()
            .unwrap_or(&report.changes)
            .iter()
            .filter(|c| self.change_selected(c))
            .collect();
        if self.narrows_changes() && changes.is_empty() {
            return None;
        }
        Some(changes)
    }
}

fn views(kind: ResourceKind) -> Vec<&'static str> {
    kind.views().iter().map(|v| v.as_str()).collect()
}

fn kind_label(kind: ResourceKind) -> &'static str {
    match kind {
        ResourceKind::Cluster => "cds",
        ResourceKind::GrpcCluster => "cds(grpc)",
        ResourceKind::Endpoint => "eds",
        ResourceKind::SidecarListener => "lds",
        ResourceKind::GrpcListener => "lds(grpc)",
        ResourceKind::Route => "rds",
        ResourceKind::VhdsRoute => "rds(vhds)",
        ResourceKind::VirtualHost => "vhds",
    }
}

/// A resource rendered for `--diff`.
fn rendering(t: ResourceType, r: Option<&Resource>, format: DiffFormat) -> String {
    let Some(r) = r else { return String::new() };
    let j = renderer().resource(t, &r.bytes);
    match format {
        DiffFormat::Yaml => j.to_yaml(),
        DiffFormat::Json => j.to_pretty(),
    }
}

/// The diff of one change.
pub(crate) fn change_diff(c: &ResourceChange, format: DiffFormat, indent: &str) -> String {
    let t = c.kind.resource_type();
    unified(
        &rendering(t, c.old.as_deref(), format),
        &rendering(t, c.new.as_deref(), format),
        indent,
    )
}

/// `added`, `changed` or `removed`.
fn action(c: &ResourceChange) -> &'static str {
    match (&c.old, &c.new) {
        (None, _) => "added",
        (_, None) => "removed",
        _ => "changed",
    }
}

fn version(r: Option<&std::sync::Arc<Resource>>) -> String {
    r.map_or_else(|| "(absent)".to_owned(), |r| r.version.to_string())
}

/// Writes one event as text (`ev` is `None` for a record that did not decode).
pub(crate) fn text(
    out: &mut impl Write,
    pos: RecordPos,
    ev: Option<&Event>,
    report: &EventReport,
    changes: &[&ResourceChange],
    diff: Option<DiffFormat>,
) -> std::io::Result<()> {
    match ev {
        Some(ev) => writeln!(
            out,
            "{pos}  {}  {}  source={} gen={}",
            ev.kind_name(),
            ev.key().unwrap_or_else(|| "-".into()),
            ev.source,
            ev.generation
        )?,
        None => writeln!(out, "{pos}  (not an event this build reads)")?,
    }
    if let Some(s) = &report.skipped {
        writeln!(out, "  skipped ({}): {}", s.reason.as_str(), s.detail)?;
    } else if changes.is_empty() {
        writeln!(out, "  no xDS change")?;
    }
    for c in changes {
        writeln!(
            out,
            "  {:<9} {:<7} {}  {}  ->  {}  [{}]",
            kind_label(c.kind),
            action(c),
            c.name,
            version(c.old.as_ref()),
            version(c.new.as_ref()),
            views(c.kind).join(" ")
        )?;
        if let Some(f) = diff {
            out.write_all(change_diff(c, f, "      ").as_bytes())?;
        }
    }
    for e in &report.gen_errors {
        writeln!(out, "  not built: {e}")?;
    }
    Ok(())
}

#[derive(Serialize)]
struct JsonChange<'a> {
    #[serde(rename = "type")]
    t: &'static str,
    kind: &'static str,
    name: &'a str,
    action: &'static str,
    old_version: Option<&'a str>,
    new_version: Option<&'a str>,
    views: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<String>,
}

#[derive(Serialize)]
struct JsonSkip<'a> {
    reason: &'static str,
    detail: &'a str,
}

#[derive(Serialize)]
struct JsonEvent<'a> {
    position: String,
    /// `null` for a record that did not decode.
    event: Option<deltapilot_server::admin::render::Json>,
    skipped: Option<JsonSkip<'a>>,
    changes: Vec<JsonChange<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    not_built: Vec<String>,
}

/// Writes one event as a JSON line (`ev` is `None` for a record that did not
/// decode: `"event": null`, and `skipped` says why).
pub(crate) fn json(
    out: &mut impl Write,
    pos: RecordPos,
    ev: Option<&Event>,
    report: &EventReport,
    changes: &[&ResourceChange],
    diff: Option<DiffFormat>,
) -> std::io::Result<()> {
    let line = JsonEvent {
        position: pos.to_string(),
        event: ev.map(|ev| event_json(pos, ev)),
        skipped: report.skipped.as_ref().map(|s| JsonSkip {
            reason: s.reason.as_str(),
            detail: &s.detail,
        }),
        changes: changes
            .iter()
            .map(|c| JsonChange {
                t: c.kind.resource_type().short_name(),
                kind: match c.kind {
                    ResourceKind::Cluster => "cluster",
                    ResourceKind::GrpcCluster => "grpc_cluster",
                    ResourceKind::Endpoint => "endpoint",
                    ResourceKind::SidecarListener => "sidecar_listener",
                    ResourceKind::GrpcListener => "grpc_listener",
                    ResourceKind::Route => "route",
                    ResourceKind::VhdsRoute => "vhds_route",
                    ResourceKind::VirtualHost => "virtual_host",
                },
                name: &c.name,
                action: action(c),
                old_version: c.old.as_ref().map(|r| &*r.version),
                new_version: c.new.as_ref().map(|r| &*r.version),
                views: views(c.kind),
                diff: diff.map(|f| change_diff(c, f, "")),
            })
            .collect(),
        not_built: report.gen_errors.iter().map(|e| e.to_string()).collect(),
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_resource_filters() {
        assert!(glob("ep/*", "ep/a/b"));
        assert!(glob("*reviews*", "outbound|9080||reviews.ns.svc"));
        assert!(glob("a*b*c", "aXbYc") && !glob("a*b*c", "aXc"));
        assert!(!glob("ab*ba", "aba"), "the two ends may not overlap");
        assert!(glob("exact", "exact") && !glob("exact", "exactly"));
        let f: ResourceFilter = "eds/outbound|*".parse().expect("filter");
        assert_eq!(f.t, Some(ResourceType::Endpoint));
        let f: ResourceFilter = "0.0.0.0_80".parse().expect("filter");
        assert_eq!((f.t, f.pattern.as_str()), (None, "0.0.0.0_80"));
    }
}
