//! The generator regenerates from what the fold touched by key (the fold's own
//! touch rules are tested in `deltapilot-model`).

use deltapilot_model::Hostname;
use deltapilot_model::fold::{SkipReason, fold};
use deltapilot_model::keys::HKey;
use deltapilot_model::state::ModelState;
use deltapilot_model::state::mk::*;

use super::{GenOptions, Generator};
use crate::ResourceType;

fn h(s: &str) -> Hostname {
    Hostname::new(s)
}

fn base() -> ModelState {
    let out = fold(
        &ModelState::default(),
        &at(
            0,
            vec![
                svc("a", 1, "ns", "h", &[80]),
                svc("a", 1, "ns", "h2", &[80]),
                svc("a", 1, "ns", "g", &[80]),
                ep("a", 1, "ep/1", "10.0.0.1", &["h"]),
                ep("a", 1, "ep/two", "10.0.0.2", &["h", "h2"]),
                ep("a", 1, "ep/g", "10.0.0.3", &["g"]),
                ep("a", 1, "ep/held", "10.0.0.4", &["nosvc"]),
            ],
        ),
    );
    let reasons: Vec<SkipReason> = out.skipped.iter().map(|s| s.reason).collect();
    assert_eq!(reasons, [SkipReason::UnknownService]);
    out.state
}

/// The generator names what the fold touched by key from its own index: a
/// batch of rewrites (of an endpoint of a served hostname and of a held one,
/// both touched by key) regenerates incrementally to exactly what a generator
/// built from the folded state holds, reports the served hostname's
/// assignment as changed, and skips the hostname without a service.
#[test]
fn the_generator_regenerates_what_was_touched_by_key() {
    let st = base();
    let (mut g, set, _) = Generator::build(&st, GenOptions::default());
    let out = fold(
        &st,
        &at(
            10,
            vec![
                ep("a", 1, "ep/g", "10.9.0.3", &["g"]),
                ep("a", 1, "ep/held", "10.9.0.4", &["nosvc"]),
            ],
        ),
    );
    let mut keys = vec![HKey::of("g"), HKey::of("nosvc")];
    keys.sort();
    assert_eq!(out.touched.endpoint_keys, keys, "{:?}", out.touched);
    assert!(out.touched.endpoints.is_empty(), "{:?}", out.touched);
    assert_eq!(
        out.touched.endpoint_names(&out.state),
        [h("g"), h("nosvc")].into()
    );
    let (next, changes, errors) = g.regenerate(&set, &out.state, &out.touched);
    assert!(errors.is_empty(), "{errors:?}");
    let (_, rebuilt, _) = Generator::build(&out.state, GenOptions::default());
    assert_eq!(next, rebuilt);
    let eds = changes.of(ResourceType::Endpoint);
    let upserted: Vec<&str> = eds.upserted.iter().map(|n| &**n).collect();
    assert_eq!(upserted, ["outbound|80||g"], "{eds:?}");
}
