//! Canonical JSON of a `serde_json::Value`: the form an Istio `spec` travels in
//! (`ConfigObject.spec_json`), for every adapter.
//!
//! Canonical means: object keys in byte-wise sorted order at every level, no
//! insignificant whitespace, numbers and string escapes as `serde_json` writes
//! them. So the same spec read from a file or from the API server gives the same
//! bytes, and an object whose spec did not change never looks changed. Keys are
//! sorted here explicitly: `serde_json::Map` keeps insertion order as soon as any
//! crate in the build enables `serde_json/preserve_order`. (The file adapter turns
//! its YAML values into JSON values first; see `file::json`.)
//!
//! What it does NOT do: validate the spec against Istio's schema.

use std::fmt::Write as _;

use serde_json::Value;

/// Writes `value` as canonical JSON.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(value, &mut out);
    out
}

fn write_value(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_value(v, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    // serde_json's escaping is the canonical one; serialising a &str cannot fail.
    match serde_json::to_string(s) {
        Ok(quoted) => out.push_str(&quoted),
        Err(_) => out.push_str("\"\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_at_every_level_and_output_is_compact() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"z": [1, {"y": 2, "x": null}], "y": "s"}}"#)
                .expect("json");
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"y":"s","z":[1,{"x":null,"y":2}]},"b":1}"#
        );
    }

    #[test]
    fn scalars_keep_their_types_and_escapes() {
        let v: Value = serde_json::from_str(
            r#"{"f": 1.5, "i": -3, "t": true, "s": "x\"y\n", "u": 18446744073709551615}"#,
        )
        .expect("json");
        assert_eq!(
            canonical_json(&v),
            r#"{"f":1.5,"i":-3,"s":"x\"y\n","t":true,"u":18446744073709551615}"#
        );
    }
}
