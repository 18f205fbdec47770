//! Two texts of one 128-bit key are never merged (issue 25 point 4): unit
//! builds force every text that begins with `same-hash-` onto one key (see
//! `keys::HKey::of`), and the second text of a key is refused, by value, on
//! every path that could write it (create, the rewrite fast path, delete).

use super::tests::{h, reasons};
use super::*;
use crate::state::mk::*;

fn address(st: &ModelState, key: &str) -> Option<String> {
    st.raw_endpoint(key).map(|w| w.value.address.to_string())
}

#[test]
fn a_second_endpoint_key_of_one_hash_is_refused_on_every_path() {
    let st = ModelState::from_events(&[
        svc("a", 1, "ns", "h", &[80]),
        ep("a", 1, "same-hash-one", "10.0.0.1", &["h"]),
    ]);
    // Create, then a rewrite of the same shape (the fast path), then a delete,
    // each of the other text, in one batch.
    let out = fold(
        &st,
        &at(
            10,
            vec![
                ep("a", 1, "same-hash-two", "10.0.0.2", &["h"]),
                ep("a", 2, "same-hash-two", "10.0.0.3", &["h"]),
                ep_del("a", 2, "same-hash-two"),
            ],
        ),
    );
    assert_eq!(
        reasons(&out),
        [SkipReason::HashCollision, SkipReason::HashCollision],
        "the delete of a key that is not stored is a no-op: {:?}",
        out.skipped
    );
    let skip = &out.skipped[0];
    assert_eq!(skip.key.as_deref(), Some("same-hash-two"));
    assert!(
        skip.detail.contains("same-hash-one") && skip.detail.contains("128-bit"),
        "names both texts and why: {}",
        skip.detail
    );
    assert_eq!(
        address(&out.state, "same-hash-one").as_deref(),
        Some("10.0.0.1")
    );
    assert_eq!(address(&out.state, "same-hash-two"), None);
    assert_eq!(out.state.hash(), st.hash(), "nothing was written");
    assert_eq!(out.state.endpoints_of("h").count(), 1);

    // The stored key's own rewrites still take the fast path.
    let out = fold(
        &out.state,
        &at(20, vec![ep("a", 3, "same-hash-one", "10.0.0.9", &["h"])]),
    );
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    assert_eq!(
        address(&out.state, "same-hash-one").as_deref(),
        Some("10.0.0.9")
    );

    // Once the first is deleted, the other text may take the key.
    let out = fold(
        &out.state,
        &at(
            30,
            vec![
                ep_del("a", 3, "same-hash-one"),
                ep("a", 3, "same-hash-two", "10.0.0.2", &["h"]),
            ],
        ),
    );
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    assert_eq!(address(&out.state, "same-hash-one"), None);
    assert_eq!(
        address(&out.state, "same-hash-two").as_deref(),
        Some("10.0.0.2")
    );
    let from_scratch = ModelState::from_events(&[
        svc("a", 1, "ns", "h", &[80]),
        ep("a", 3, "same-hash-two", "10.0.0.2", &["h"]),
    ]);
    assert_eq!(out.state.hash(), from_scratch.hash());
}

#[test]
fn a_second_hostname_of_one_hash_is_refused_for_services_and_endpoints() {
    let st = ModelState::from_events(&[
        svc("a", 1, "ns", "same-hash-x.example", &[80]),
        ep("a", 1, "ep/1", "10.0.0.1", &["same-hash-x.example"]),
    ]);
    let out = fold(
        &st,
        &at(
            10,
            vec![
                svc("a", 1, "ns", "same-hash-y.example", &[81]),
                ep("a", 1, "ep/2", "10.0.0.2", &["same-hash-y.example"]),
                ep(
                    "a",
                    1,
                    "ep/3",
                    "10.0.0.3",
                    &["other", "same-hash-y.example"],
                ),
            ],
        ),
    );
    assert_eq!(
        reasons(&out),
        [SkipReason::HashCollision; 3],
        "{:?}",
        out.skipped
    );
    assert!(out.skipped[1].detail.contains("same-hash-x.example"));
    assert_eq!(out.state.hash(), st.hash());
    assert!(out.state.get_service("same-hash-y.example").is_none());
    assert_eq!(out.state.endpoints_of("same-hash-y.example").count(), 0);
    assert_eq!(out.state.endpoint_count("same-hash-y.example"), 0);
    assert!(
        out.state
            .service_definitions("same-hash-y.example")
            .is_empty()
    );
    assert_eq!(out.state.endpoints_of("same-hash-x.example").count(), 1);
    assert_eq!(
        out.state
            .get_service(&h("same-hash-x.example"))
            .expect("x")
            .ports[0]
            .number,
        80
    );
}

#[test]
fn one_endpoint_listing_two_hostnames_of_one_hash_is_refused() {
    let st = ModelState::default();
    let out = fold(
        &st,
        &at(
            0,
            vec![ep(
                "a",
                1,
                "ep/1",
                "10.0.0.1",
                &["same-hash-p.example", "same-hash-q.example"],
            )],
        ),
    );
    assert_eq!(reasons(&out), [SkipReason::HashCollision]);
    assert_eq!(out.state.hash(), st.hash());
}

#[test]
fn a_held_endpoints_hostname_is_the_one_a_service_must_match() {
    // No service yet: the endpoint is held under its hostname, and a service
    // of another text of that hash is refused.
    let st = ModelState::from_events(&[ep("a", 1, "ep/1", "10.0.0.1", &["same-hash-x.example"])]);
    let out = fold(
        &st,
        &at(10, vec![svc("a", 1, "ns", "same-hash-y.example", &[80])]),
    );
    assert_eq!(reasons(&out), [SkipReason::HashCollision]);
    let out = fold(
        &st,
        &at(10, vec![svc("a", 1, "ns", "same-hash-x.example", &[80])]),
    );
    assert!(out.skipped.is_empty(), "{:?}", out.skipped);
    assert_eq!(out.state.endpoints_of("same-hash-x.example").count(), 1);
}
