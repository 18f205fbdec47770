//! An ordered JSON value: objects keep their keys in the order they were added (a
//! message's fields in field-number order, as Envoy's `config_dump` prints them),
//! which `serde_json::Value` does not without a feature this workspace does not
//! enable. It implements `Serialize`, so it nests inside any serde output (JSON
//! lines, YAML) and keeps its order there.
//!
//! It also deserializes (keeping the input's key order), so JSON produced by
//! another serializer can be embedded without its keys being re-sorted.
//!
//! What it does NOT do: anything beyond holding and (de)serializing values.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects are ordered.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A signed integer.
    I64(i64),
    /// An unsigned integer.
    U64(u64),
    /// A floating-point number (non-finite values are written as strings, as
    /// proto3 JSON does).
    F64(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object, in insertion order.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// An empty object.
    pub fn obj() -> Json {
        Json::Obj(Vec::new())
    }

    /// Appends `key: value` to an object (no-op on other values).
    pub fn push(&mut self, key: impl Into<String>, value: Json) {
        if let Json::Obj(fields) = self {
            fields.push((key.into(), value));
        }
    }

    /// The value of `key`, if this is an object that has it.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sorts every object's keys, at every depth (for values whose objects are
    /// all maps, such as a `google.protobuf.Struct`).
    pub fn sort_objects(&mut self) {
        match self {
            Json::Obj(fields) => {
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                fields.iter_mut().for_each(|(_, v)| v.sort_objects());
            }
            Json::Arr(items) => items.iter_mut().for_each(Json::sort_objects),
            _ => {}
        }
    }

    /// Pretty JSON text (two-space indent), with a trailing newline.
    pub fn to_pretty(&self) -> String {
        let mut s =
            serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("\"unrenderable: {e}\""));
        s.push('\n');
        s
    }

    /// YAML text.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).unwrap_or_else(|e| format!("unrenderable: {e}\n"))
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Self {
        Json::Str(s.to_owned())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Self {
        Json::Str(s)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::I64(n) => s.serialize_i64(*n),
            Json::U64(n) => s.serialize_u64(*n),
            Json::F64(f) if f.is_nan() => s.serialize_str("NaN"),
            Json::F64(f) if f.is_infinite() => {
                s.serialize_str(if *f > 0.0 { "Infinity" } else { "-Infinity" })
            }
            Json::F64(f) => s.serialize_f64(*f),
            Json::Str(v) => s.serialize_str(v),
            Json::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            Json::Obj(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::I64(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::U64(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::F64(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Json::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut fields = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            fields.push((k, v));
        }
        Ok(Json::Obj(fields))
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_keep_insertion_order_in_json_and_yaml() {
        let mut o = Json::obj();
        o.push("zeta", Json::U64(1));
        o.push("alpha", Json::Arr(vec![Json::Bool(true), Json::Null]));
        o.push("inf", Json::F64(f64::INFINITY));
        assert_eq!(
            serde_json::to_string(&o).expect("json"),
            r#"{"zeta":1,"alpha":[true,null],"inf":"Infinity"}"#
        );
        let y = o.to_yaml();
        assert!(
            y.find("zeta").expect("zeta") < y.find("alpha").expect("alpha"),
            "{y}"
        );
        let back: Json =
            serde_json::from_str(r#"{"z":1,"a":{"y":[1,"x"],"b":null}}"#).expect("parse");
        assert_eq!(
            serde_json::to_string(&back).expect("json"),
            r#"{"z":1,"a":{"y":[1,"x"],"b":null}}"#
        );
    }
}
