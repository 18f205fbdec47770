//! Encoded xDS resources rendered as proto3 JSON (and YAML), the way Envoy's
//! `/config_dump` prints them: field names as in the `.proto` (snake_case), in
//! declaration order, 64-bit integers as strings, enums by name, `Any` expanded
//! with its `@type`, durations as `"5s"`, wrappers as their bare value.
//!
//! envoy-types' messages do not implement serde, and their `Debug` output is
//! neither JSON nor comparable with Envoy's. So this renders from the wire bytes,
//! driven by **descriptors**: `envoy.fds` is a `FileDescriptorSet` of every message
//! a deltapilot resource can contain (the four resource types and each typed
//! config the generator packs into an `Any`: HCM, router, tcp_proxy, upstream
//! HTTP protocol options), compiled with `protox` from the `.proto` files that ship
//! inside the `envoy-types` crate this build uses, stripped of comments and
//! options (except `map_entry`). Regenerate it when upgrading `envoy-types` or
//! when the generator starts packing a new `Any` type:
//! `DELTAPILOT_REGENERATE_FDS=1 cargo test -p deltapilot-server --test debug_render_fds`
//! rewrites it, and without the variable that test fails whenever the committed
//! file differs from what the protos give. It runs `protox` (no `protoc`) on the
//! roots `envoy/config/{cluster/v3/cluster,endpoint/v3/endpoint,listener/v3/listener,
//! route/v3/route}.proto`, `envoy/extensions/upstreams/http/v3/http_protocol_options.proto`,
//! `envoy/extensions/filters/http/router/v3/router.proto` and
//! `envoy/extensions/filters/network/{http_connection_manager,tcp_proxy}/v3/*.proto`
//! (with their imports), include paths `data-plane-api`, `xds`, `googleapis`,
//! `protoc-gen-validate`, `opentelemetry-proto`, `cel-spec/proto` and
//! `client_model` under the crate's `proto/` directory (found offline with
//! `cargo metadata`), and clears `source_code_info`, every `options` but
//! `MessageOptions::map_entry`, and services.
//!
//! Honesty rules: a field number the descriptors do not know is still shown, as
//! `"[N]"` with its raw value; an `Any` of an unknown type shows its `@type` and
//! base64 `value`; bytes that do not parse are reported as such
//! (`"unrenderable"`), never dropped. Tests check that every resource the
//! generator builds renders with no unknown field.
//!
//! What it does NOT do: encode (JSON to protobuf) or validate constraints.

mod json;
mod wire;
mod wkt;

use std::collections::HashMap;
use std::sync::OnceLock;

use deltapilot_xds::ResourceType;
use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FileDescriptorSet};

pub use json::Json;
use wire::{Raw, Reader, base64};

/// The encoded descriptor set (see the module doc).
const DESCRIPTORS: &[u8] = include_bytes!("../envoy.fds");

/// Deepest message nesting rendered; Envoy configs nest a few dozen levels at most.
const MAX_DEPTH: usize = 100;

struct Field {
    name: String,
    number: u32,
    repeated: bool,
    kind: Type,
    /// Fully qualified (`.pkg.Msg`) for messages and enums.
    type_name: String,
}

struct MessageInfo {
    fields: Vec<Field>,
    by_number: HashMap<u32, usize>,
    map_entry: bool,
}

/// Descriptors indexed by fully qualified name.
pub struct Renderer {
    messages: HashMap<String, MessageInfo>,
    enums: HashMap<String, HashMap<i32, String>>,
}

/// The renderer over the embedded descriptors, built on first use.
pub fn renderer() -> &'static Renderer {
    static R: OnceLock<Renderer> = OnceLock::new();
    R.get_or_init(|| Renderer::new(DESCRIPTORS))
}

/// The fully qualified message name of a resource type.
pub fn message_name(t: ResourceType) -> &'static str {
    match t {
        ResourceType::Cluster => ".envoy.config.cluster.v3.Cluster",
        ResourceType::Endpoint => ".envoy.config.endpoint.v3.ClusterLoadAssignment",
        ResourceType::Listener => ".envoy.config.listener.v3.Listener",
        ResourceType::Route => ".envoy.config.route.v3.RouteConfiguration",
    }
}

impl Renderer {
    fn new(fds: &[u8]) -> Self {
        let mut r = Renderer {
            messages: HashMap::new(),
            enums: HashMap::new(),
        };
        // The set is embedded and tested; an undecodable one renders everything as
        // unknown fields rather than failing.
        let set = FileDescriptorSet::decode(fds).unwrap_or_default();
        for f in &set.file {
            let pkg = format!(".{}", f.package());
            for e in &f.enum_type {
                r.add_enum(&pkg, e);
            }
            for m in &f.message_type {
                r.add_message(&pkg, m);
            }
        }
        r
    }

    fn add_enum(&mut self, scope: &str, e: &prost_types::EnumDescriptorProto) {
        let values = e
            .value
            .iter()
            .map(|v| (v.number(), v.name().to_owned()))
            .collect();
        self.enums.insert(format!("{scope}.{}", e.name()), values);
    }

    fn add_message(&mut self, scope: &str, m: &DescriptorProto) {
        let full = format!("{scope}.{}", m.name());
        for e in &m.enum_type {
            self.add_enum(&full, e);
        }
        for n in &m.nested_type {
            self.add_message(&full, n);
        }
        let fields: Vec<Field> = m
            .field
            .iter()
            .map(|f| Field {
                name: f.name().to_owned(),
                number: u32::try_from(f.number()).unwrap_or(0),
                repeated: f.label() == Label::Repeated,
                kind: f.r#type(),
                type_name: f.type_name().to_owned(),
            })
            .collect();
        let by_number = fields
            .iter()
            .enumerate()
            .map(|(i, f)| (f.number, i))
            .collect();
        let map_entry = m.options.as_ref().is_some_and(|o| o.map_entry());
        self.messages.insert(
            full,
            MessageInfo {
                fields,
                by_number,
                map_entry,
            },
        );
    }

    /// Whether the descriptors know a message (fully qualified, `.pkg.Msg`).
    pub fn knows(&self, message: &str) -> bool {
        self.messages.contains_key(message)
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
                out.push("bytes", Json::Str(base64(bytes)));
            }
        }
        out
    }

    /// Renders an encoded message of type `name` (fully qualified).
    pub fn message(&self, name: &str, bytes: &[u8], depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} messages"));
        }
        if let Some(special) = self.well_known(name, bytes, depth)? {
            return Ok(special);
        }
        let mut occurrences: Vec<(u32, Raw<'_>)> = Vec::new();
        let mut r = Reader::new(bytes);
        while !r.done() {
            occurrences.push(r.field()?);
        }
        let Some(info) = self.messages.get(name) else {
            return Ok(unknown_fields(&occurrences, |_| true));
        };
        let mut out = Json::obj();
        for f in &info.fields {
            let raws: Vec<Raw<'_>> = occurrences
                .iter()
                .filter(|(n, _)| *n == f.number)
                .map(|(_, r)| *r)
                .collect();
            if raws.is_empty() {
                continue;
            }
            let value = self
                .field(f, &raws, depth)
                .map_err(|e| format!("{}: {e}", f.name))?;
            out.push(f.name.clone(), value);
        }
        if let (Json::Obj(o), Json::Obj(extra)) = (
            &mut out,
            unknown_fields(&occurrences, |n| !info.by_number.contains_key(&n)),
        ) {
            o.extend(extra);
        }
        Ok(out)
    }

    fn field(&self, f: &Field, raws: &[Raw<'_>], depth: usize) -> Result<Json, String> {
        if f.kind == Type::Message {
            let entry = self.messages.get(&f.type_name).filter(|m| m.map_entry);
            if f.repeated && entry.is_some() {
                return self.map(&f.type_name, raws, depth);
            }
            if f.repeated {
                let items = raws
                    .iter()
                    .map(|r| self.message(&f.type_name, len(r)?, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(Json::Arr(items));
            }
            // Several occurrences of a singular message merge: decoding their
            // concatenation is exactly that.
            let mut joined = Vec::new();
            for r in raws {
                joined.extend_from_slice(len(r)?);
            }
            return self.message(&f.type_name, &joined, depth + 1);
        }
        let mut values = Vec::new();
        for r in raws {
            match (r, packable(f.kind)) {
                (Raw::Len(b), true) => {
                    let mut rd = Reader::new(b);
                    while !rd.done() {
                        let raw = match wire_width(f.kind) {
                            8 => Raw::Fixed64(rd.fixed64()?),
                            4 => Raw::Fixed32(rd.fixed32()?),
                            _ => Raw::Varint(rd.varint()?),
                        };
                        values.push(self.scalar(f, &raw)?);
                    }
                }
                _ => values.push(self.scalar(f, r)?),
            }
        }
        if f.repeated {
            Ok(Json::Arr(values))
        } else {
            Ok(values.pop().unwrap_or(Json::Null))
        }
    }

    fn map(&self, entry: &str, raws: &[Raw<'_>], depth: usize) -> Result<Json, String> {
        let Some(info) = self.messages.get(entry) else {
            return Err(format!("map entry {entry} unknown"));
        };
        let mut out = Json::obj();
        for r in raws {
            let mut key = Json::Str(String::new());
            let mut value = Json::Null;
            let mut rd = Reader::new(len(r)?);
            while !rd.done() {
                let (n, raw) = rd.field()?;
                let Some(f) = info.by_number.get(&n).map(|i| &info.fields[*i]) else {
                    continue;
                };
                let v = self.field(f, &[raw], depth + 1)?;
                if n == 1 { key = v } else { value = v }
            }
            let key = match key {
                Json::Str(s) => s,
                other => serde_json::to_string(&other)
                    .unwrap_or_default()
                    .trim_matches('"')
                    .to_owned(),
            };
            out.push(key, value);
        }
        Ok(out)
    }

    fn scalar(&self, f: &Field, r: &Raw<'_>) -> Result<Json, String> {
        let bad = || format!("wire value {r:?} does not fit type {:?}", f.kind);
        Ok(match (f.kind, *r) {
            (Type::Double, Raw::Fixed64(v)) => Json::F64(f64::from_bits(v)),
            (Type::Float, Raw::Fixed32(v)) => {
                let x = f32::from_bits(v);
                Json::F64(x.to_string().parse().unwrap_or(f64::from(x)))
            }
            (Type::Int64, Raw::Varint(v)) => Json::Str((v as i64).to_string()),
            (Type::Uint64, Raw::Varint(v)) => Json::Str(v.to_string()),
            (Type::Int32, Raw::Varint(v)) => Json::I64(i64::from(v as i32)),
            (Type::Fixed64, Raw::Fixed64(v)) => Json::Str(v.to_string()),
            (Type::Fixed32, Raw::Fixed32(v)) => Json::U64(u64::from(v)),
            (Type::Bool, Raw::Varint(v)) => Json::Bool(v != 0),
            (Type::String, Raw::Len(b)) => Json::Str(String::from_utf8_lossy(b).into_owned()),
            (Type::Bytes, Raw::Len(b)) => Json::Str(base64(b)),
            (Type::Uint32, Raw::Varint(v)) => Json::U64(u64::from(v as u32)),
            (Type::Enum, Raw::Varint(v)) => {
                let n = v as i32;
                match self.enums.get(&f.type_name).and_then(|e| e.get(&n)) {
                    Some(name) => Json::Str(name.clone()),
                    None => Json::I64(i64::from(n)),
                }
            }
            (Type::Sfixed32, Raw::Fixed32(v)) => Json::I64(i64::from(v as i32)),
            (Type::Sfixed64, Raw::Fixed64(v)) => Json::Str((v as i64).to_string()),
            (Type::Sint32, Raw::Varint(v)) => {
                Json::I64(i64::from(((v >> 1) as i32) ^ -((v & 1) as i32)))
            }
            (Type::Sint64, Raw::Varint(v)) => {
                Json::Str((((v >> 1) as i64) ^ -((v & 1) as i64)).to_string())
            }
            _ => return Err(bad()),
        })
    }
}

fn len<'a>(r: &Raw<'a>) -> Result<&'a [u8], String> {
    match r {
        Raw::Len(b) => Ok(b),
        other => Err(format!(
            "expected a length-delimited value, found {other:?}"
        )),
    }
}

fn packable(t: Type) -> bool {
    !matches!(t, Type::String | Type::Bytes | Type::Message | Type::Group)
}

fn wire_width(t: Type) -> usize {
    match t {
        Type::Double | Type::Fixed64 | Type::Sfixed64 => 8,
        Type::Float | Type::Fixed32 | Type::Sfixed32 => 4,
        _ => 0,
    }
}

/// Fields the descriptors do not know, as `"[N]": raw` (numbers, or base64 for
/// length-delimited values), in the order they appeared.
fn unknown_fields(occurrences: &[(u32, Raw<'_>)], keep: impl Fn(u32) -> bool) -> Json {
    let mut out = Json::obj();
    for (n, r) in occurrences.iter().filter(|(n, _)| keep(*n)) {
        let v = match r {
            Raw::Varint(v) | Raw::Fixed64(v) => Json::Str(v.to_string()),
            Raw::Fixed32(v) => Json::U64(u64::from(*v)),
            Raw::Len(b) => Json::Str(base64(b)),
        };
        out.push(format!("[{n}]"), v);
    }
    out
}

#[cfg(test)]
mod tests;
