//! The well-known types whose proto3 JSON form is not their fields: `Any`
//! (`@type` plus the packed message), `Duration` (`"1.5s"`), `Timestamp`
//! (RFC 3339), the wrappers (their bare value), `Struct`/`Value`/`ListValue`
//! (plain JSON) and `Empty` (`{}`).
//!
//! What it does NOT do: `FieldMask` (rendered as its fields; Envoy resources
//! deltapilot builds never carry one).

use super::wire::{Raw, Reader, base64};
use super::{Json, Renderer};

/// Field 1 and 2 of a small message, as raw values (the last occurrence wins).
fn two_fields<'a>(bytes: &'a [u8]) -> Result<(Option<Raw<'a>>, Option<Raw<'a>>), String> {
    let (mut a, mut b) = (None, None);
    let mut r = Reader::new(bytes);
    while !r.done() {
        match r.field()? {
            (1, v) => a = Some(v),
            (2, v) => b = Some(v),
            _ => {}
        }
    }
    Ok((a, b))
}

fn varint(r: Option<Raw<'_>>) -> u64 {
    match r {
        Some(Raw::Varint(v)) => v,
        _ => 0,
    }
}

/// `seconds` and `nanos` as proto3 JSON: `"5s"`, `"0.250s"`, `"-1.000000001s"`.
fn duration(seconds: i64, nanos: i32) -> String {
    let negative = seconds < 0 || nanos < 0;
    let (s, n) = (seconds.unsigned_abs(), nanos.unsigned_abs());
    let sign = if negative { "-" } else { "" };
    if n == 0 {
        format!("{sign}{s}s")
    } else if n % 1_000_000 == 0 {
        format!("{sign}{s}.{:03}s", n / 1_000_000)
    } else if n % 1_000 == 0 {
        format!("{sign}{s}.{:06}s", n / 1_000)
    } else {
        format!("{sign}{s}.{n:09}s")
    }
}

/// Seconds since the Unix epoch as RFC 3339 UTC (days-from-civil, inverted).
fn timestamp(seconds: i64, nanos: i32) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let frac = match nanos {
        0 => String::new(),
        n if n % 1_000_000 == 0 => format!(".{:03}", n / 1_000_000),
        n if n % 1_000 == 0 => format!(".{:06}", n / 1_000),
        n => format!(".{n:09}"),
    };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{frac}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

impl Renderer {
    /// The proto3 JSON of a well-known type, or `None` for any other message.
    pub(super) fn well_known(
        &self,
        name: &str,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Option<Json>, String> {
        let Some(short) = name.strip_prefix(".google.protobuf.") else {
            return Ok(None);
        };
        let (a, b) = match short {
            "Any" | "Duration" | "Timestamp" | "DoubleValue" | "FloatValue" | "Int64Value"
            | "UInt64Value" | "Int32Value" | "UInt32Value" | "BoolValue" | "StringValue"
            | "BytesValue" => two_fields(bytes)?,
            _ => (None, None),
        };
        let text = |r: Option<Raw<'_>>| match r {
            Some(Raw::Len(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        Ok(Some(match short {
            "Any" => return self.any(&text(a), b, depth).map(Some),
            "Duration" => Json::Str(duration(varint(a) as i64, varint(b) as i32)),
            "Timestamp" => Json::Str(timestamp(varint(a) as i64, varint(b) as i32)),
            "DoubleValue" => Json::F64(match a {
                Some(Raw::Fixed64(v)) => f64::from_bits(v),
                _ => 0.0,
            }),
            "FloatValue" => {
                let x = match a {
                    Some(Raw::Fixed32(v)) => f32::from_bits(v),
                    _ => 0.0,
                };
                Json::F64(x.to_string().parse().unwrap_or(f64::from(x)))
            }
            "Int64Value" => Json::Str((varint(a) as i64).to_string()),
            "UInt64Value" => Json::Str(varint(a).to_string()),
            "Int32Value" => Json::I64(i64::from(varint(a) as i32)),
            "UInt32Value" => Json::U64(u64::from(varint(a) as u32)),
            "BoolValue" => Json::Bool(varint(a) != 0),
            "StringValue" => Json::Str(text(a)),
            "BytesValue" => Json::Str(match a {
                Some(Raw::Len(b)) => base64(b),
                _ => String::new(),
            }),
            "Struct" => self.structure(bytes, depth)?,
            "Value" => self.value(bytes, depth)?,
            "ListValue" => self.list(bytes, depth)?,
            "Empty" => Json::obj(),
            _ => return Ok(None),
        }))
    }

    fn any(&self, type_url: &str, value: Option<Raw<'_>>, depth: usize) -> Result<Json, String> {
        let bytes = match value {
            Some(Raw::Len(b)) => b,
            _ => &[],
        };
        let mut out = Json::obj();
        out.push("@type", Json::from(type_url));
        let name = format!(".{}", type_url.rsplit('/').next().unwrap_or(type_url));
        if !self.knows(&name) {
            out.push("value", Json::Str(base64(bytes)));
            return Ok(out);
        }
        match self.message(&name, bytes, depth + 1)? {
            Json::Obj(fields) if !name.starts_with(".google.protobuf.") => {
                if let Json::Obj(o) = &mut out {
                    o.extend(fields);
                }
            }
            other => out.push("value", other),
        }
        Ok(out)
    }

    fn structure(&self, bytes: &[u8], depth: usize) -> Result<Json, String> {
        let mut out = Json::obj();
        let mut r = Reader::new(bytes);
        while !r.done() {
            let (n, raw) = r.field()?;
            let (1, Raw::Len(entry)) = (n, raw) else {
                continue;
            };
            let (k, v) = two_fields(entry)?;
            let key = match k {
                Some(Raw::Len(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            let value = match v {
                Some(Raw::Len(b)) => self.value(b, depth + 1)?,
                _ => Json::Null,
            };
            out.push(key, value);
        }
        Ok(out)
    }

    fn list(&self, bytes: &[u8], depth: usize) -> Result<Json, String> {
        let mut items = Vec::new();
        let mut r = Reader::new(bytes);
        while !r.done() {
            if let (1, Raw::Len(b)) = r.field()? {
                items.push(self.value(b, depth + 1)?);
            }
        }
        Ok(Json::Arr(items))
    }

    fn value(&self, bytes: &[u8], depth: usize) -> Result<Json, String> {
        if depth > 100 {
            return Err("Value nested too deeply".into());
        }
        let mut out = Json::Null;
        let mut r = Reader::new(bytes);
        while !r.done() {
            out = match r.field()? {
                (1, _) => Json::Null,
                (2, Raw::Fixed64(v)) => Json::F64(f64::from_bits(v)),
                (3, Raw::Len(b)) => Json::Str(String::from_utf8_lossy(b).into_owned()),
                (4, Raw::Varint(v)) => Json::Bool(v != 0),
                (5, Raw::Len(b)) => self.structure(b, depth + 1)?,
                (6, Raw::Len(b)) => self.list(b, depth + 1)?,
                (n, raw) => return Err(format!("google.protobuf.Value field {n} = {raw:?}")),
            };
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_timestamps_follow_proto3_json() {
        assert_eq!(duration(5, 0), "5s");
        assert_eq!(duration(0, 250_000_000), "0.250s");
        assert_eq!(duration(1, 1), "1.000000001s");
        assert_eq!(duration(-1, -500_000), "-1.000500s");
        assert_eq!(timestamp(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            timestamp(1_700_000_000, 5_000_000),
            "2023-11-14T22:13:20.005Z"
        );
        assert_eq!(timestamp(951_782_400, 0), "2000-02-29T00:00:00Z");
    }
}
