//! Reading documents: located errors and key segments.

use super::*;
use crate::common::istio::ServiceEntrySpec;

#[test]
fn out_of_range_port_fails_while_reading_with_a_location() {
    let err = serde_yaml::from_str::<Doc<ServiceEntrySpec>>(
        "spec:\n  hosts: [a.b]\n  ports:\n  - number: 70000\n",
    )
    .expect_err("port out of range");
    assert!(err.to_string().contains("70000"), "{err}");
    assert_eq!(err.location().map(|l| l.line()), Some(4), "{err}");
}

#[test]
fn key_segments_reject_slashes_and_upper_case() {
    assert!(check_key_segment("metadata.name", "ok-name.v1").is_ok());
    for bad in ["", "a/b", "Upper", "sp ace"] {
        assert!(check_key_segment("metadata.name", bad).is_err(), "{bad:?}");
    }
}
