//! Canonical JSON of a YAML value: the form an Istio `spec` travels in
//! (`ConfigObject.spec_json`).
//!
//! The YAML value is turned into a JSON value the way Kubernetes' YAML-to-JSON
//! conversion does (scalar mapping keys written as strings, tags dropped), then
//! written by the shared canonical writer (`common::json`), so a spec read from a
//! file and the same spec read from the API server give identical bytes.
//!
//! What it does NOT do: validate the spec against Istio's schema (the engine parses
//! the subset it implements), or accept what JSON cannot say (NaN, infinities,
//! mapping keys that are themselves mappings or sequences, two keys that become
//! the same string).

use serde_yaml::Value;

use crate::common::json as canonical;

/// Writes `value` as canonical JSON. The error says which part cannot be JSON.
pub(crate) fn canonical_json(value: &Value) -> Result<String, String> {
    Ok(canonical::canonical_json(&to_json(value, "spec")?))
}

/// The JSON value of a YAML value; `path` names the part for errors.
pub(crate) fn to_json(value: &Value, path: &str) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    Ok(match value {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Number(n) => J::Number(number(n, path)?),
        Value::String(s) => J::String(s.clone()),
        // A tag (`!foo value`) has no JSON form; Kubernetes' YAML-to-JSON conversion
        // keeps the tagged value, and so do we.
        Value::Tagged(t) => to_json(&t.value, path)?,
        Value::Sequence(items) => J::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| to_json(item, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Mapping(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                let key = key_text(k, path)?;
                let item = to_json(v, &format!("{path}.{key}"))?;
                if out.insert(key.clone(), item).is_some() {
                    return Err(format!(
                        "{path}: key {key:?} appears twice once written as JSON"
                    ));
                }
            }
            J::Object(out)
        }
    })
}

fn number(n: &serde_yaml::Number, path: &str) -> Result<serde_json::Number, String> {
    if let Some(i) = n.as_i64() {
        Ok(i.into())
    } else if let Some(u) = n.as_u64() {
        Ok(u.into())
    } else {
        serde_json::Number::from_f64(n.as_f64().unwrap_or(f64::NAN))
            .ok_or_else(|| format!("{path}: {n} has no JSON form (NaN or infinite)"))
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
