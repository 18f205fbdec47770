//! A traffic-rule edit against an endpoint change, in one mesh and one run.
//!
//! - `rule_edit/vs_weight_shift`: the fold and `Generator::regenerate` of one
//!   VirtualService whose weighted split between two services moves (80/20 and
//!   back), in a mesh of 10k services and 1k VirtualServices.
//! - `rule_edit/one_endpoint`: the same for one endpoint's weight, in the same
//!   mesh: the baseline the issue asks the rule edit to be stated against.
//!
//! Before timing, it prints what each change re-encodes and sends: the names
//! and bytes upserted per type, and the size of the route configuration that
//! holds the edited virtual host. Route configurations are per port, so a rule
//! edit resends every virtual host of its port. Beside it, the same change as
//! VHDS would deliver it (`generate::vhds::split` of the route configurations
//! before and after): the port route configurations then carry only `vhds` and
//! do not change, and what is sent is the virtual hosts whose bytes changed;
//! the printed ratio is inline bytes ÷ VHDS bytes. (A proxyless gRPC route
//! configuration, `<host>:<port>`, stays inline: gRPC has no VHDS.)
//!
//! Run with
//! `cargo bench -p deltapilot-benches --bench rules -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use deltapilot_benches::workload::{endpoint, event, host, service};
use deltapilot_log::RecordPos;
use deltapilot_model::ProxyType;
use deltapilot_model::fold::fold;
use deltapilot_model::state::ModelState;
use deltapilot_proto::{self as pb, Event, event::Payload};
use deltapilot_xds::generate::{GenOptions, Generator, vhds};
use deltapilot_xds::view::resources_for;
use deltapilot_xds::{ChangeSet, ResourceSet, ResourceType};

/// Services in the mesh (one HTTP and one gRPC port each).
const SERVICES: usize = 10_000;
/// VirtualServices: rule `r` splits `svc-r`'s traffic between it and `svc-(r+1)`.
const RULES: usize = 1_000;
/// The rule the timed edit moves.
const EDITED: usize = RULES / 2;

/// VirtualService `r` with `first`% to its own host and the rest to the next one.
fn virtual_service(r: usize, first: u32) -> Event {
    let spec = serde_json::json!({
        "hosts": [host(r)],
        "http": [{
            "route": [
                {"destination": {"host": host(r), "port": {"number": 8080}}, "weight": first},
                {"destination": {"host": host(r + 1), "port": {"number": 8080}}, "weight": 100 - first},
            ],
        }],
    });
    event(Payload::ConfigUpsert(pb::ConfigUpsert {
        config: Some(pb::ConfigObject {
            kind: pb::ConfigKind::VirtualService as i32,
            namespace: format!("ns-{}", r % 50),
            name: format!("split-{r}"),
            spec_json: spec.to_string(),
            ..Default::default()
        }),
    }))
}

fn positioned(events: &[Event]) -> Vec<(RecordPos, Event)> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let pos = RecordPos {
                partition: 0,
                offset: i as u64,
            };
            (pos, e.clone())
        })
        .collect()
}

/// The mesh: services, one endpoint each, then the rules.
fn mesh() -> ModelState {
    let mut events: Vec<Event> = (0..SERVICES).map(|s| service(s, 0)).collect();
    events.extend((0..SERVICES).map(|p| endpoint(SERVICES, p, true, 1)));
    events.extend((0..RULES).map(|r| virtual_service(r, 80)));
    let out = fold(&ModelState::default(), &positioned(&events));
    assert!(out.skipped.is_empty(), "bench events all apply");
    out.state
}

/// Names and bytes upserted by `changes` in `set`, per type.
fn sent(set: &ResourceSet, changes: &ChangeSet) -> Vec<(ResourceType, usize, usize)> {
    ResourceType::ALL
        .iter()
        .filter_map(|&t| {
            let names = &changes.of(t).upserted;
            if names.is_empty() {
                return None;
            }
            let bytes = names
                .iter()
                .filter_map(|n| resources_for(set, ProxyType::Sidecar, t).get(n))
                .map(|r| r.bytes.len())
                .sum();
            Some((t, names.len(), bytes))
        })
        .collect()
}

/// One edit flipped back and forth: `there` and `back` are the two batches.
struct Flip {
    name: &'static str,
    there: Vec<(RecordPos, Event)>,
    back: Vec<(RecordPos, Event)>,
}

fn report(name: &str, set: &ResourceSet, changes: &ChangeSet) {
    let per_type = sent(set, changes);
    let total: usize = per_type.iter().map(|(_, _, b)| b).sum();
    let parts: Vec<String> = per_type
        .iter()
        .map(|(t, n, b)| format!("{t:?} {n} ({b} B)"))
        .collect();
    println!("rule_edit {name}: upserts {} = {total} B", parts.join(", "));
}

/// Bytes and names `changes` sends under VHDS: per upserted port route
/// configuration, the split virtual hosts whose version moved (and the
/// configuration itself only if its `vhds` shell did); other routes as inline.
/// Prints the comparison with `inline` bytes and returns the VHDS bytes.
fn report_vhds(name: &str, before: &ResourceSet, after: &ResourceSet, changes: &ChangeSet) {
    let inline: usize = sent(after, changes).iter().map(|(_, _, b)| b).sum();
    let (mut shells, mut vhosts, mut other) = ((0, 0), (0, 0), (0, 0));
    for n in &changes.of(ResourceType::Route).upserted {
        let Some(new) = after.routes.get(n) else {
            continue;
        };
        if !n.bytes().all(|b| b.is_ascii_digit()) {
            other = (other.0 + 1, other.1 + new.bytes.len());
            continue;
        }
        let new = vhds::split(new).expect("bench routes split");
        let old = before
            .routes
            .get(n)
            .map(|r| vhds::split(r).expect("bench routes split"));
        let held = |vname: &str| {
            old.as_ref()
                .and_then(|o| o.virtual_hosts.iter().find(|v| &*v.name == vname))
                .map(|v| v.version.clone())
        };
        if old.as_ref().map(|o| &o.route.version) != Some(&new.route.version) {
            shells = (shells.0 + 1, shells.1 + new.route.bytes.len());
        }
        for v in &new.virtual_hosts {
            if held(&v.name).as_ref() != Some(&v.version) {
                vhosts = (vhosts.0 + 1, vhosts.1 + v.bytes.len());
            }
        }
    }
    // The other types are sent alike either way.
    let rest: usize = sent(after, changes)
        .iter()
        .filter(|(t, _, _)| *t != ResourceType::Route)
        .map(|(_, _, b)| b)
        .sum();
    let total = rest + shells.1 + vhosts.1 + other.1;
    // What one delta sidecar is sent: the gRPC route configurations go to
    // proxyless clients only.
    let (sidecar_inline, sidecar_vhds) = (inline - other.1, total - other.1);
    println!(
        "rule_edit {name} under VHDS: route configurations {} ({} B), virtual hosts {} ({} B), \
         gRPC route configurations (inline) {} ({} B), other types {rest} B = {total} B; \
         per delta sidecar inline {sidecar_inline} B, VHDS {sidecar_vhds} B = {:.0}x",
        shells.0,
        shells.1,
        vhosts.0,
        vhosts.1,
        other.0,
        other.1,
        sidecar_inline as f64 / sidecar_vhds.max(1) as f64
    );
}

fn rule_edit(c: &mut Criterion) {
    let base = mesh();
    let (mut generator, mut set, errors) = Generator::build(&base, GenOptions::default());
    assert!(
        errors.is_empty(),
        "the bench mesh generates cleanly: {errors:?}"
    );
    let route = set.routes.get("8080").map_or(0, |r| r.bytes.len());
    println!(
        "rule_edit mesh: {SERVICES} services, {RULES} VirtualServices; route `8080` {route} B \
         ({} B per virtual host on average)",
        route / SERVICES.max(1)
    );
    let flips = [
        Flip {
            name: "vs_weight_shift",
            there: positioned(&[virtual_service(EDITED, 70)]),
            back: positioned(&[virtual_service(EDITED, 80)]),
        },
        Flip {
            name: "one_endpoint",
            there: positioned(&[endpoint(SERVICES, EDITED, true, 2)]),
            back: positioned(&[endpoint(SERVICES, EDITED, true, 1)]),
        },
    ];
    let mut state = base;
    let mut g = c.benchmark_group("rule_edit");
    g.throughput(Throughput::Elements(1));
    for flip in &flips {
        // One round trip outside the clock: check each direction is a real
        // change and print what it sends.
        for (dir, batch) in [("", &flip.there), (" (back)", &flip.back)] {
            let out = fold(&state, batch);
            assert!(out.skipped.is_empty(), "{} applies", flip.name);
            let (next, changes, errors) = generator.regenerate(&set, &out.state, &out.touched);
            assert!(errors.is_empty(), "{errors:?}");
            assert!(!changes.is_empty(), "{}{dir} changes something", flip.name);
            if dir.is_empty() {
                report(flip.name, &next, &changes);
                report_vhds(flip.name, &set, &next, &changes);
            }
            set = next;
            state = out.state;
        }
        let mut k = 0usize;
        g.bench_function(BenchmarkId::new("fold_and_regenerate", flip.name), |b| {
            b.iter(|| {
                let batch = if k == 0 { &flip.there } else { &flip.back };
                let out = fold(&state, batch);
                let (next, changes, _) = generator.regenerate(&set, &out.state, &out.touched);
                set = next;
                state = out.state;
                k ^= 1;
                black_box(changes)
            })
        });
        // Leave the mesh as it started for the next flip.
        if k == 1 {
            let out = fold(&state, &flip.back);
            let (next, _, _) = generator.regenerate(&set, &out.state, &out.touched);
            set = next;
            state = out.state;
        }
    }
    g.finish();
}

/// The rule benchmarks as one criterion group (written out rather than with
/// `criterion_group!`, whose generated function has no doc comment).
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    rule_edit(&mut c);
}

criterion_main!(benches);
