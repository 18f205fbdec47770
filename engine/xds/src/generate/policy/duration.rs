//! Istio's duration strings as protobuf durations, through the model's one
//! parser (`rules::parse_duration`).
//!
//! What it does NOT do: report (the model's check reports a bad duration and
//! the field is then left out here).

use envoy_types::pb::google::protobuf::Duration;

/// `s` as a protobuf duration; `None` when it does not parse or does not fit.
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let d = deltapilot_model::rules::parse_duration(s)?;
    Some(Duration {
        seconds: i64::try_from(d.as_secs()).ok()?,
        nanos: i32::try_from(d.subsec_nanos()).ok()?,
    })
}
