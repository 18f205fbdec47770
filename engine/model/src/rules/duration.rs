//! Istio's duration strings (`1s`, `500ms`, `1m30s`, `1.5s`, `2h`): the one
//! parser the rule checks and the xDS translation share, so a duration the
//! check accepts is exactly one the translation reads.

use std::time::Duration;

/// `s` as a duration: one or more `<number><unit>` runs with units `h`, `m`,
/// `s`, `ms`, `us` (`µs`), `ns`; `None` when it does not parse, is negative or
/// overflows.
pub fn parse_duration(s: &str) -> Option<Duration> {
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
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_durations_parse() {
        let d = |s| parse_duration(s).map(|d| (d.as_secs(), d.subsec_nanos()));
        assert_eq!(d("1s"), Some((1, 0)));
        assert_eq!(d("500ms"), Some((0, 500_000_000)));
        assert_eq!(d("1m30s"), Some((90, 0)));
        assert_eq!(d("1.5s"), Some((1, 500_000_000)));
        assert_eq!(d("2h"), Some((7200, 0)));
        assert_eq!(d(" 250us "), Some((0, 250_000)));
        for bad in ["", "5", "1x", "-1s", "s", "1s2", ".s", "1e9999h"] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
    }
}
