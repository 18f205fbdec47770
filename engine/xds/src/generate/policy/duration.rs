//! Istio's duration strings (`1s`, `500ms`, `1m30s`, `1.5s`, `2h`) as
//! protobuf durations.
//!
//! What it does NOT do: report (the model's check reports a bad duration and
//! the field is then left out here).

use envoy_types::pb::google::protobuf::Duration;

/// `s` as a duration: one or more `<number><unit>` with units `h`, `m`, `s`,
/// `ms`, `us`, `ns`; `None` when it does not parse or is negative.
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale: f64 = match unit {
            "h" => 3.6e12,
            "m" => 6e10,
            "s" => 1e9,
            "ms" => 1e6,
            "us" | "µs" => 1e3,
            "ns" => 1.0,
            _ => return None,
        };
        let value: f64 = num.parse().ok()?;
        if !value.is_finite() || value < 0.0 {
            return None;
        }
        nanos = nanos.checked_add((value * scale).round() as u128)?;
        rest = tail;
    }
    let seconds = i64::try_from(nanos / 1_000_000_000).ok()?;
    let nanos = (nanos % 1_000_000_000) as i32;
    Some(Duration { seconds, nanos })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_durations_parse() {
        let d = |s| parse_duration(s).map(|d| (d.seconds, d.nanos));
        assert_eq!(d("1s"), Some((1, 0)));
        assert_eq!(d("500ms"), Some((0, 500_000_000)));
        assert_eq!(d("1m30s"), Some((90, 0)));
        assert_eq!(d("1.5s"), Some((1, 500_000_000)));
        assert_eq!(d("2h"), Some((7200, 0)));
        for bad in ["", "5", "1x", "-1s", "s", "1s2"] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
    }
}
