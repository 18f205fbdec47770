//! Canonical JSON of a YAML value: the form an Istio `spec` travels in
//! (`ConfigObject.spec_json`).
//!
//! Canonical means: object keys in byte-wise sorted order at every level, no
//! insignificant whitespace, numbers written by `serde_json`. Two specs that mean the
//! same thing as YAML therefore give identical bytes, so an unchanged object never
//! looks changed and replay stays deterministic. The sorting is done here explicitly
//! rather than relying on `serde_json::Value`'s map type, which turns into an
//! insertion-ordered map as soon as any crate in the build enables
//! `serde_json/preserve_order`.
//!
//! What it does NOT do: validate the spec against Istio's schema (the engine parses
//! the subset it implements), or accept what JSON cannot say (NaN, infinities,
//! mapping keys that are themselves mappings or sequences).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_yaml::Value;

/// Writes `value` as canonical JSON. The error says which part cannot be JSON.
pub(crate) fn canonical_json(value: &Value) -> Result<String, String> {
    let mut out = String::new();
    write_value(value, &mut out, "spec")?;
    Ok(out)
}

fn write_value(value: &Value, out: &mut String, path: &str) -> Result<(), String> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out, path)?,
        Value::String(s) => write_string(s, out),
        // A tag (`!foo value`) has no JSON form; Kubernetes' YAML-to-JSON conversion
        // keeps the tagged value, and so do we.
        Value::Tagged(t) => write_value(&t.value, out, path)?,
        Value::Sequence(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out, &format!("{path}[{i}]"))?;
            }
            out.push(']');
        }
        Value::Mapping(map) => {
            let mut sorted: BTreeMap<String, &Value> = BTreeMap::new();
            for (k, v) in map {
                let key = key_text(k, path)?;
                if sorted.insert(key.clone(), v).is_some() {
                    return Err(format!(
                        "{path}: key {key:?} appears twice once written as JSON"
                    ));
                }
            }
            out.push('{');
            for (i, (k, v)) in sorted.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_value(v, out, &format!("{path}.{k}"))?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_number(n: &serde_yaml::Number, out: &mut String, path: &str) -> Result<(), String> {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        let f = n.as_f64().unwrap_or(f64::NAN);
        match serde_json::Number::from_f64(f) {
            Some(j) => {
                let _ = write!(out, "{j}");
            }
            None => return Err(format!("{path}: {n} has no JSON form (NaN or infinite)")),
        }
    }
    Ok(())
}

fn write_string(s: &str, out: &mut String) {
    // serde_json's string escaping is the canonical one; writing a &str cannot fail.
    match serde_json::to_string(s) {
        Ok(quoted) => out.push_str(&quoted),
        Err(_) => out.push_str("\"\""),
    }
}

/// JSON object keys are strings. YAML scalars used as keys are written the way
/// Kubernetes' YAML-to-JSON conversion writes them (`80: x` becomes `"80"`).
fn key_text(key: &Value, path: &str) -> Result<String, String> {
    match key {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Null => Ok("null".to_owned()),
        Value::Tagged(t) => key_text(&t.value, path),
        Value::Sequence(_) | Value::Mapping(_) => Err(format!(
            "{path}: a mapping key is a sequence or mapping, which JSON cannot express"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(yaml: &str) -> Result<String, String> {
        let v: Value = serde_yaml::from_str(yaml).expect("valid yaml");
        canonical_json(&v)
    }

    #[test]
    fn keys_are_sorted_at_every_level_and_output_is_compact() {
        let a = json("b: 1\na:\n  z: [1, 2]\n  y: \"s\"\n").expect("json");
        assert_eq!(a, r#"{"a":{"y":"s","z":[1,2]},"b":1}"#);
        let b = json("a: {z: [1, 2], y: s}\nb: 1\n").expect("json");
        assert_eq!(a, b, "same meaning, same bytes");
    }

    #[test]
    fn scalars_keep_their_json_types() {
        assert_eq!(
            json("i: -3\nf: 1.5\nt: true\nn: null\ns: 'x\"y'\nbig: 18446744073709551615\n")
                .expect("json"),
            r#"{"big":18446744073709551615,"f":1.5,"i":-3,"n":null,"s":"x\"y","t":true}"#
        );
    }

    #[test]
    fn numeric_keys_become_strings_and_nan_is_refused() {
        assert_eq!(json("80: http\n").expect("json"), r#"{"80":"http"}"#);
        let err = json("x: .nan\n").expect_err("nan");
        assert!(err.contains("spec.x"), "{err}");
        let dup = json("1: a\n'1': b\n").expect_err("duplicate after stringify");
        assert!(dup.contains("twice"), "{dup}");
    }
}
