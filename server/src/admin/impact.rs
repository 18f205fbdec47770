//! `POST /debug/impact`: what a proposed set of objects would do to the fleet,
//! answered without applying it.
//!
//! The body is a sequence of length-delimited protobuf `Event`s (upserts and
//! deletes of services, endpoints and config objects: what an adapter would
//! append; `deltapilot analyze --impact` builds them with the file adapter's own
//! parser). They are folded onto a clone of the current snapshot's model, in
//! memory; nothing is written to the log and nothing is published.
//!
//! Why the fold happens here and not in the CLI: the state is here (the
//! snapshot's model is persistent, so the clone is cheap and the fold copies only
//! the paths the proposal touches), the served resources to compare with are
//! here, and so are the connected proxies whose counts the answer gives; the CLI
//! would otherwise pull the whole registry and every subscription. The fold is the
//! engine's own (`fold_iter`), and the resources are rebuilt from the folded model
//! by `build_all`, the generator's from-scratch path, which the proptest holds
//! equal to the incremental one byte for byte: the diff against the served
//! resources is what the engine would publish. A build is O(mesh), so one
//! preview runs at a time ([`IMPACT_CONCURRENCY`]) on a blocking thread, and the
//! body is bounded ([`MAX_IMPACT_BODY`]).
//!
//! Sources: an object already in the registry is replaced, not merged with, so
//! an event for an existing key is folded under the source (and generation)
//! that wrote it; a new key keeps the event's source. Resync markers are refused:
//! previewing one would sweep everything else of its source.
//!
//! The answer (JSON): `position` and `seq` of the snapshot it was computed
//! against; `changes`, one per resource added, changed or removed, with both
//! renderings (proto3 JSON, as `proxy-config` shows them) and the connected
//! proxies that would receive it, by type; `problems_introduced` and
//! `problems_resolved` (in `/debug/rules` terms, flattened); `skipped` (events
//! the fold would skip, with why); `gen_errors`.
//!
//! What it does NOT do: write anything, or render diffs (the CLI does).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_log::RecordPos;
use deltapilot_model::fold::fold_iter;
use deltapilot_model::state::ModelState;
use deltapilot_proto::Event;
use deltapilot_proto::event::Payload;
use deltapilot_xds::generate::{GenOptions, build_all};
use deltapilot_xds::snapshot::Snapshot;
use deltapilot_xds::{ResourceKind, ResourceSet};
use prost::Message as _;
use serde_json::{Value, json};

use super::render::renderer;
use super::rules_view::{problem_list, rules_report};
use crate::xds::registry::StreamStatus;

/// Largest request body: room for dozens of objects at the file adapter's
/// per-object limit (`MAX_OBJECT_BYTES`), far above any hand-written change.
pub const MAX_IMPACT_BODY: usize = 16 * 1024 * 1024;

/// Previews computed at once: each rebuilds every resource, so a second one
/// waits for a permit rather than doubling the admin server's CPU.
pub const IMPACT_CONCURRENCY: usize = 1;

/// Why a request cannot be previewed (a 400): which event, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImpactError {
    /// 0-based index of the event in the body.
    pub index: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for ImpactError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event {} of the body: {}", self.index, self.reason)
    }
}

/// Decodes a body of length-delimited events.
pub fn decode_events(mut body: &[u8]) -> Result<Vec<Event>, ImpactError> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let ev = Event::decode_length_delimited(&mut body).map_err(|e| ImpactError {
            index: out.len(),
            reason: format!("not a length-delimited protobuf Event: {e}"),
        })?;
        out.push(ev);
    }
    Ok(out)
}

/// Encodes events as [`decode_events`] reads them.
pub fn encode_events(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        // Writing to a Vec cannot run out of room.
        let _ = e.encode_length_delimited(&mut out);
    }
    out
}

/// The source and generation that wrote `key`, if anything did.
fn owner(model: &ModelState, ev: &Event, key: &str) -> Option<(Arc<str>, u64)> {
    match ev.payload.as_ref()? {
        Payload::ConfigUpsert(_) | Payload::ConfigDelete(_) => model
            .raw_config(key)
            .map(|w| (w.source.clone(), w.generation)),
        Payload::ServiceUpsert(_) | Payload::ServiceDelete(_) => model
            .raw_services()
            .find(|(slot, _)| &*slot.key == key)
            .map(|(_, w)| (w.source.clone(), w.generation)),
        Payload::EndpointUpsert(_) | Payload::EndpointDelete(_) => model
            .raw_endpoint(key)
            .map(|w| (w.source.clone(), w.generation)),
        _ => None,
    }
}

/// The proposal with each event under the source of the object it replaces.
fn rehome(model: &ModelState, events: Vec<Event>) -> Result<Vec<Event>, ImpactError> {
    events
        .into_iter()
        .enumerate()
        .map(|(index, mut ev)| {
            let key = match &ev.payload {
                None => {
                    return Err(ImpactError {
                        index,
                        reason: "an event without a payload".into(),
                    });
                }
                Some(Payload::Resync(_)) => {
                    return Err(ImpactError {
                        index,
                        reason: "resync markers cannot be previewed (one would sweep every other object of its source); send only upserts and deletes".into(),
                    });
                }
                Some(_) => ev.key().unwrap_or_default(),
            };
            if let Some((source, generation)) = owner(model, &ev, &key) {
                ev.source = source.to_string();
                ev.generation = generation;
            }
            Ok(ev)
        })
        .collect()
}

/// Distinct connected proxies, by type, that would receive resource `name` of
/// `kind`: those whose view holds the kind and whose subscription to its type
/// covers the name (wildcard, or named explicitly).
fn receivers(statuses: &[StreamStatus], kind: ResourceKind, name: &str) -> BTreeMap<String, u64> {
    let t = kind.resource_type();
    let mut seen: BTreeSet<(&'static str, String)> = BTreeSet::new();
    for st in statuses {
        let Some(p) = &st.proxy else { continue };
        if !kind.visible_to(p.proxy_type) {
            continue;
        }
        let subscribed = st.types.iter().any(|ts| {
            ts.resource_type == t
                && ts.requested
                && (ts.wildcard || ts.names.iter().any(|n| &**n == name))
        });
        if subscribed {
            seen.insert((p.proxy_type.as_str(), p.id.to_string()));
        }
    }
    let mut out = BTreeMap::new();
    for (t, _) in seen {
        *out.entry(t.to_owned()).or_default() += 1;
    }
    out
}

fn changes(old: &ResourceSet, new: &ResourceSet, statuses: &[StreamStatus]) -> Vec<Value> {
    let mut out = Vec::new();
    for kind in ResourceKind::ALL {
        let (a, b) = (kind.map(old), kind.map(new));
        let names: BTreeSet<&Arc<str>> = a.keys().chain(b.keys()).collect();
        let t = kind.resource_type();
        for name in names {
            let (o, n) = (a.get(name), b.get(name));
            let action = match (o, n) {
                (Some(o), Some(n)) if o.bytes == n.bytes => continue,
                (Some(_), Some(_)) => "changed",
                (None, Some(_)) => "added",
                (Some(_), None) => "removed",
                (None, None) => continue,
            };
            let render = |r: Option<&Arc<deltapilot_xds::Resource>>| {
                r.map(|r| {
                    serde_json::to_value(renderer().resource(t, &r.bytes)).unwrap_or_default()
                })
            };
            let proxies = receivers(statuses, kind, name);
            out.push(json!({
                "type": t.short_name(),
                "kind": format!("{kind:?}"),
                "name": name.as_ref(),
                "action": action,
                "old_version": o.map(|r| r.version.to_string()),
                "new_version": n.map(|r| r.version.to_string()),
                "old": render(o),
                "new": render(n),
                "proxies_total": proxies.values().sum::<u64>(),
                "proxies": proxies,
            }));
        }
    }
    out
}

/// Problems as comparable keys (the whole flattened problem).
fn problem_set(model: &ModelState, opts: &GenOptions) -> Vec<Value> {
    problem_list(&rules_report(model, opts))
}

fn minus(a: &[Value], b: &[Value]) -> Vec<Value> {
    let keys: BTreeSet<String> = b.iter().map(Value::to_string).collect();
    a.iter()
        .filter(|p| !keys.contains(&p.to_string()))
        .cloned()
        .collect()
}

/// Folds `events` onto a copy of `snap`'s state and reports what would change
/// (see the module docs for the answer's fields). Pure: `snap` is not changed.
pub fn impact(
    snap: &Snapshot,
    events: Vec<Event>,
    opts: &GenOptions,
    statuses: &[StreamStatus],
) -> Result<Value, ImpactError> {
    let events = rehome(&snap.model, events)?;
    let out = fold_iter(
        &snap.model,
        events.iter().enumerate().map(|(i, e)| {
            (
                RecordPos {
                    partition: 0,
                    offset: i as u64,
                },
                e,
            )
        }),
    );
    let (set, errors) = build_all(&out.state, opts);
    let (before, after) = (
        problem_set(&snap.model, opts),
        problem_set(&out.state, opts),
    );
    Ok(json!({
        "position": snap.position.to_string(),
        "seq": snap.seq,
        "events": events.len(),
        "changes": changes(&snap.resources, &set, statuses),
        "problems_introduced": minus(&after, &before),
        "problems_resolved": minus(&before, &after),
        "skipped": out.skipped.iter().map(|s| json!({
            "event": s.pos.offset,
            "key": s.key,
            "reason": s.reason.as_str(),
            "detail": s.detail,
        })).collect::<Vec<_>>(),
        "gen_errors": errors.iter().map(|e| json!({
            "type": e.resource_type.short_name(),
            "name": e.name,
            "reason": e.reason,
        })).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use deltapilot_adapters::file::load_paths;

    use super::*;

    const SERVICES: &str = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: a, namespace: demo}
spec:
  hosts: [a.demo.local]
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 10.0.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: b, namespace: demo}
spec:
  hosts: [b.demo.local]
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  endpoints: [{address: 10.0.0.2}]
";

    fn vs(dest: &str) -> String {
        format!(
            "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: r, namespace: demo}}
spec:
  hosts: [a.demo.local]
  http: [{{route: [{{destination: {{host: {dest}}}}}]}}]
"
        )
    }

    /// Events of `files` (name, text) under `source`, markers included.
    fn events(files: &[(&str, &str)], source: &str) -> Vec<Event> {
        let dir = tempfile::tempdir().expect("tmp");
        let paths: Vec<PathBuf> = files
            .iter()
            .map(|(n, t)| {
                let p = dir.path().join(n);
                std::fs::write(&p, t).expect("write");
                p
            })
            .collect();
        load_paths(&paths, source).expect("loads").events
    }

    fn served(events: &[Event]) -> Snapshot {
        let out = fold_iter(
            &ModelState::default(),
            events.iter().enumerate().map(|(i, e)| {
                (
                    RecordPos {
                        partition: 0,
                        offset: i as u64,
                    },
                    e,
                )
            }),
        );
        let (resources, _) = build_all(&out.state, &GenOptions::default());
        Snapshot {
            model: out.state,
            resources,
            ..Default::default()
        }
    }

    fn without_markers(events: Vec<Event>) -> Vec<Event> {
        events
            .into_iter()
            .filter(|e| !matches!(e.payload, Some(Payload::Resync(_))))
            .collect()
    }

    #[test]
    fn an_edit_replaces_the_served_object_and_shows_only_what_it_changes() {
        let snap = served(&events(
            &[("s.yaml", SERVICES), ("r.yaml", &vs("a.demo.local"))],
            "file:/mesh",
        ));
        // Another source name: folded as is, the config upsert would be a
        // conflict the fold skips; rehomed, it replaces the served object.
        let proposal = without_markers(events(&[("r.yaml", &vs("b.demo.local"))], "analyze"));
        let v = impact(&snap, proposal, &GenOptions::default(), &[]).expect("impact");
        assert_eq!(v["skipped"].as_array().map(Vec::len), Some(0), "{v:#}");
        let changes = v["changes"].as_array().expect("changes");
        assert!(!changes.is_empty(), "{v:#}");
        assert!(changes.iter().all(|c| c["action"] == "changed"), "{v:#}");
        // The sidecars' and the proxyless route configuration, and the one
        // virtual host the edit changes as VHDS delivers it.
        let mut touched: Vec<(&str, &str)> = changes
            .iter()
            .filter_map(|c| Some((c["type"].as_str()?, c["name"].as_str()?)))
            .collect();
        touched.sort_unstable();
        assert_eq!(
            touched,
            [
                ("rds", "8080"),
                ("rds", "a.demo.local:8080"),
                ("vhds", "8080/a.demo.local:8080")
            ],
            "{v:#}"
        );
        let route = changes
            .iter()
            .find(|c| c["name"] == "8080")
            .expect("rds 8080");
        assert!(
            route["new"]
                .to_string()
                .contains("outbound|8080||b.demo.local")
        );
        assert_eq!(route["proxies_total"], 0);
        // The served snapshot is untouched.
        assert!(
            snap.model
                .raw_config("cfg/virtual_service/demo/r")
                .is_some_and(|w| w.value.spec_json.contains("a.demo.local"))
        );
    }

    #[test]
    fn a_broken_edit_reports_the_problem_it_introduces() {
        let snap = served(&events(
            &[("s.yaml", SERVICES), ("r.yaml", &vs("a.demo.local"))],
            "file:/mesh",
        ));
        let proposal = without_markers(events(&[("r.yaml", &vs("ghost.demo.local"))], "analyze"));
        let v = impact(&snap, proposal, &GenOptions::default(), &[]).expect("impact");
        let codes: Vec<&str> = v["problems_introduced"]
            .as_array()
            .expect("introduced")
            .iter()
            .filter_map(|p| p["code"].as_str())
            .collect();
        assert!(codes.contains(&"DP2004"), "{v:#}");
        assert_eq!(v["problems_resolved"].as_array().map(Vec::len), Some(0));
    }

    #[test]
    fn markers_and_garbage_are_refused_with_the_event_named() {
        let with_markers = events(&[("r.yaml", &vs("a.demo.local"))], "analyze");
        let e = impact(
            &Snapshot::default(),
            with_markers,
            &GenOptions::default(),
            &[],
        )
        .expect_err("markers");
        assert_eq!(e.index, 0);
        assert!(e.to_string().contains("resync markers"), "{e}");
        let good = encode_events(&without_markers(events(
            &[("r.yaml", &vs("a.demo.local"))],
            "analyze",
        )));
        assert_eq!(decode_events(&good).expect("decodes").len(), 1);
        let mut bad = good.clone();
        bad.extend_from_slice(&[0x05, 0xff]);
        let e = decode_events(&bad).expect_err("garbage");
        assert_eq!(e.index, 1);
        assert!(e.reason.contains("length-delimited"), "{e}");
    }
}
