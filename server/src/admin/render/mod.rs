//! Encoded xDS resources rendered as proto3 JSON (and YAML), the way Envoy's
//! `/config_dump` prints them: field names as in the `.proto` (snake_case, as
//! Envoy's `preserve_proto_field_names`), fields in field-number order (as
//! protobuf's C++ JSON printer guarantees), only fields that are set, 64-bit
//! integers as strings, enums by name, `Any` expanded with its `@type`,
//! durations as `"5s"`, wrappers as their bare value.
//!
//! envoy-types' messages do not implement serde, and their `Debug` output is
//! neither JSON nor comparable with Envoy's. So this decodes the wire bytes into
//! a [`prost_reflect::DynamicMessage`], driven by **descriptors**: `envoy.fds` is
//! a `FileDescriptorSet` of every message a deltapilot resource can contain (the
//! four resource types and each typed config the generator packs into an `Any`:
//! HCM, router, tcp_proxy, upstream HTTP protocol options), compiled with
//! `protox` from the `.proto` files that ship inside the `envoy-types` crate this
//! build uses, stripped of comments and options (except `map_entry`). Regenerate
//! it when upgrading `envoy-types` or when the generator starts packing a new
//! `Any` type:
//! `DELTAPILOT_REGENERATE_FDS=1 cargo test -p deltapilot-server --test debug_render_fds`
//! rewrites it, and without the variable that test fails whenever the committed
//! file differs from what the protos give (the test lists the roots, include
//! paths and stripping).
//!
//! prost-reflect does the decoding, resolves `Any` through the descriptor pool
//! and writes the well-known types' JSON forms (its `serde` feature). This module
//! walks the message tree itself, for three things prost-reflect's serializer
//! does not do:
//! - **Maps in key order.** prost-reflect holds a map in a `HashMap`, so its
//!   serializer writes entries in an order that changes from one run to the
//!   next; `replay --diff` and the live-equals-replayed checks need the same
//!   text every time. (Envoy's own order is its map's; the tests compare
//!   parsed JSON, where order does not count.)
//! - **Unknown fields are shown**, as `"[N]"` with their raw value (a number, or
//!   base64 of a length-delimited value), after the known ones.
//! - **An `Any` of an unknown type** shows its `@type` and base64 `value`
//!   instead of failing the whole resource.
//!
//! Bytes that do not parse are reported as such (`"unrenderable"`), never
//! dropped. Tests check that every resource the generator builds renders with
//! no unknown field.
//!
//! What it does NOT do: encode (JSON to protobuf) or validate constraints.

mod json;

use std::sync::OnceLock;

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use deltapilot_xds::ResourceType;
use prost::bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint};
use prost_reflect::{
    DescriptorPool, DynamicMessage, Kind, MapKey, ReflectMessage, SerializeOptions, UnknownField,
    Value,
};

pub use json::Json;

/// The encoded descriptor set (see the module doc).
const DESCRIPTORS: &[u8] = include_bytes!("../envoy.fds");

/// Deepest message nesting rendered; Envoy configs nest a few dozen levels at
/// most (prost's decoder stops at 100 too).
const MAX_DEPTH: usize = 100;

/// The descriptor pool the renderer decodes with.
pub struct Renderer {
    pool: DescriptorPool,
}

/// The renderer over the embedded descriptors, built on first use.
pub fn renderer() -> &'static Renderer {
    static R: OnceLock<Renderer> = OnceLock::new();
    R.get_or_init(|| Renderer::new(DESCRIPTORS))
}

/// The fully qualified message name of a resource type.
pub fn message_name(t: ResourceType) -> &'static str {
    match t {
        ResourceType::Cluster => "envoy.config.cluster.v3.Cluster",
        ResourceType::Endpoint => "envoy.config.endpoint.v3.ClusterLoadAssignment",
        ResourceType::Listener => "envoy.config.listener.v3.Listener",
        ResourceType::Route => "envoy.config.route.v3.RouteConfiguration",
        ResourceType::VirtualHost => "envoy.config.route.v3.VirtualHost",
        ResourceType::Secret => "envoy.extensions.transport_sockets.tls.v3.Secret",
    }
}

impl Renderer {
    fn new(fds: &[u8]) -> Self {
        // The set is embedded and tested; an undecodable one leaves the pool
        // empty, and every resource then renders as unrenderable rather than
        // failing.
        Renderer {
            pool: DescriptorPool::decode(fds).unwrap_or_default(),
        }
    }

    /// Whether the descriptors know a message (fully qualified, `pkg.Msg`).
    pub fn knows(&self, message: &str) -> bool {
        self.pool.get_message_by_name(message).is_some()
    }

    /// An encoded resource of type `t` as JSON, with its `@type` first (as inside
    /// an `Any` in a config dump). Bytes that do not parse give
    /// `{"@type": …, "unrenderable": reason, "bytes": base64}`.
    pub fn resource(&self, t: ResourceType, bytes: &[u8]) -> Json {
        let mut out = Json::obj();
        out.push("@type", Json::from(t.type_url()));
        match self.message(message_name(t), bytes, 0) {
            Ok(Json::Obj(fields)) => {
                if let Json::Obj(o) = &mut out {
                    o.extend(fields);
                }
            }
            Ok(other) => out.push("value", other),
            Err(reason) => {
                out.push("unrenderable", Json::Str(reason));
                out.push("bytes", Json::Str(BASE64_STANDARD.encode(bytes)));
            }
        }
        out
    }

    /// Renders an encoded message of type `name` (fully qualified, `pkg.Msg`).
    pub fn message(&self, name: &str, bytes: &[u8], depth: usize) -> Result<Json, String> {
        let desc = self
            .pool
            .get_message_by_name(name)
            .ok_or_else(|| format!("no descriptor for {name}"))?;
        let m = DynamicMessage::decode(desc, bytes).map_err(|e| format!("{name}: {e}"))?;
        self.dynamic(&m, depth)
    }

    fn dynamic(&self, m: &DynamicMessage, depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} messages"));
        }
        let desc = m.descriptor();
        match desc.full_name() {
            "google.protobuf.Any" => return self.any(m, depth),
            name if name.starts_with("google.protobuf.") => return well_known(m),
            _ => {}
        }
        let mut out = Json::obj();
        // `fields` yields the set fields in field-number order.
        for (f, v) in m.fields() {
            let value = self
                .value(v, &f.kind(), depth)
                .map_err(|e| format!("{}: {e}", f.name()))?;
            out.push(f.name(), value);
        }
        for u in m.unknown_fields() {
            out.push(format!("[{}]", u.number()), unknown(u));
        }
        Ok(out)
    }

    fn value(&self, v: &Value, kind: &Kind, depth: usize) -> Result<Json, String> {
        Ok(match v {
            Value::Message(m) => self.dynamic(m, depth + 1)?,
            Value::List(items) => Json::Arr(
                items
                    .iter()
                    .map(|i| self.value(i, kind, depth))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Map(entries) => {
                let Kind::Message(entry) = kind else {
                    return Err(format!("a map whose entry is {kind:?}"));
                };
                let value_kind = entry.map_entry_value_field().kind();
                let mut sorted: Vec<(&MapKey, &Value)> = entries.iter().collect();
                sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut out = Json::obj();
                for (k, v) in sorted {
                    out.push(map_key(k), self.value(v, &value_kind, depth)?);
                }
                out
            }
            Value::Bool(b) => Json::Bool(*b),
            Value::I32(n) => Json::I64(i64::from(*n)),
            Value::U32(n) => Json::U64(u64::from(*n)),
            Value::I64(n) => Json::Str(n.to_string()),
            Value::U64(n) => Json::Str(n.to_string()),
            // The shortest text that reads back as the same f32, as JSON
            // printers write a float.
            Value::F32(x) => Json::F64(x.to_string().parse().unwrap_or(f64::from(*x))),
            Value::F64(x) => Json::F64(*x),
            Value::String(s) => Json::Str(s.clone()),
            Value::Bytes(b) => Json::Str(BASE64_STANDARD.encode(b)),
            Value::EnumNumber(n) => match kind {
                Kind::Enum(e) => match e.get_value(*n) {
                    Some(v) => Json::from(v.name()),
                    None => Json::I64(i64::from(*n)),
                },
                _ => Json::I64(i64::from(*n)),
            },
        })
    }

    fn any(&self, m: &DynamicMessage, depth: usize) -> Result<Json, String> {
        let type_url = m
            .get_field_by_number(1)
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let value = m
            .get_field_by_number(2)
            .and_then(|v| v.as_bytes().cloned())
            .unwrap_or_default();
        let mut out = Json::obj();
        if type_url.is_empty() && value.is_empty() {
            return Ok(out);
        }
        out.push("@type", Json::from(type_url.as_str()));
        let name = type_url.rsplit('/').next().unwrap_or_default();
        if !self.knows(name) {
            out.push("value", Json::Str(BASE64_STANDARD.encode(&value)));
            return Ok(out);
        }
        match self.message(name, &value, depth + 1)? {
            Json::Obj(fields) if !name.starts_with("google.protobuf.") => {
                if let Json::Obj(o) = &mut out {
                    o.extend(fields);
                }
            }
            other => out.push("value", other),
        }
        Ok(out)
    }
}

/// A well-known type other than `Any` (durations, timestamps, wrappers,
/// `Struct`, …) in prost-reflect's proto3 JSON form. Every object in these
/// forms is a `Struct`, whose keys are sorted for a stable text.
fn well_known(m: &DynamicMessage) -> Result<Json, String> {
    let options = SerializeOptions::new().use_proto_field_name(true);
    let mut text = serde_json::Serializer::new(Vec::new());
    m.serialize_with_options(&mut text, &options)
        .map_err(|e| format!("{}: {e}", m.descriptor().full_name()))?;
    let mut j: Json = serde_json::from_slice(&text.into_inner()).map_err(|e| e.to_string())?;
    j.sort_objects();
    Ok(j)
}

/// A map key as a JSON object key (proto3 JSON writes every key as a string).
fn map_key(k: &MapKey) -> String {
    match k {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// An unknown field's raw value: varints and 64-bit values as strings (they
/// may not fit a JSON number), 32-bit values as numbers, length-delimited
/// values (and groups) as base64.
fn unknown(u: &UnknownField) -> Json {
    let mut buf = Vec::with_capacity(u.encoded_len());
    u.encode(&mut buf);
    let mut rest = &buf[..];
    let Ok((_, wire)) = decode_key(&mut rest) else {
        return Json::Str(BASE64_STANDARD.encode(&buf));
    };
    match wire {
        WireType::Varint => match decode_varint(&mut rest) {
            Ok(v) => Json::Str(v.to_string()),
            Err(_) => Json::Str(BASE64_STANDARD.encode(rest)),
        },
        WireType::SixtyFourBit if rest.len() >= 8 => Json::Str(rest.get_u64_le().to_string()),
        WireType::ThirtyTwoBit if rest.len() >= 4 => Json::U64(u64::from(rest.get_u32_le())),
        WireType::LengthDelimited if decode_varint(&mut rest).is_ok() => {
            Json::Str(BASE64_STANDARD.encode(rest))
        }
        _ => Json::Str(BASE64_STANDARD.encode(rest)),
    }
}

#[cfg(test)]
mod tests;
