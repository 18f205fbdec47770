//! Reading Eureka's JSON: the `applications` document that both `GET /apps` and
//! `GET /apps/delta` answer, into flat [`Entry`]s, one per instance.
//!
//! Eureka's JSON (Jackson or the older XStream codec) has quirks, all handled here:
//! - a list of one is serialised as a bare object: `application` and `instance` may
//!   each be an array, one object, absent or `null`;
//! - numbers are sometimes strings (`"$": "8080"`, `"@enabled": "true"`);
//! - ports come as `{"$": 8080, "@enabled": "true"}`;
//! - an empty metadata map is `{"@class": "java.util.Collections$EmptyMap"}`: keys
//!   starting with `@` are type hints, not metadata.
//!
//! The document is read leniently per instance: one malformed instance becomes an
//! [`Entry`] whose `instance` is `Err(reason)`; it never fails the response. Only a
//! body that is not JSON or not an `applications` document at all is an error.
//!
//! What it does NOT do: HTTP (see `client`), keep state (see `registry`) or decide
//! entities (see `mapping`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use deltapilot_proto as pb;
use serde_json::{Map, Value};

use super::status::FetchErrorKind;

/// One instance, validated: everything the mapping needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Instance {
    /// The application name (`app`, else the enclosing application's `name`).
    pub(crate) app: String,
    /// The instance id (`instanceId`, else AWS `instance-id`, else `hostName`).
    pub(crate) id: String,
    /// The IP address, in canonical text form.
    pub(crate) address: String,
    /// The VIP hostnames (`vipAddress` split on `,`, lower-cased), never empty.
    pub(crate) vips: Vec<String>,
    /// Health from `status`.
    pub(crate) health: pb::Health,
    /// `port` when enabled.
    pub(crate) http_port: Option<u32>,
    /// `securePort` when enabled.
    pub(crate) https_port: Option<u32>,
    /// `metadata`, without `@` type hints, values as text.
    pub(crate) labels: BTreeMap<String, String>,
    /// From the AWS availability zone or the `zone`/`region` metadata.
    pub(crate) locality: Option<pb::Locality>,
}

/// One instance entry of a response, valid or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The application name, when the entry names one.
    pub(crate) app: Option<String>,
    /// The instance id, when the entry has one.
    pub(crate) id: Option<String>,
    /// The status as Eureka itself counts it for `apps__hashcode` (its enum name:
    /// `UP` when absent, `UNKNOWN` when not one of the five).
    pub(crate) status: &'static str,
    /// `actionType` (deltas: `ADDED`, `MODIFIED`, `DELETED`).
    pub(crate) action: Option<String>,
    /// The validated instance, or why it is malformed.
    pub(crate) instance: Result<Instance, String>,
}

/// A parsed `applications` document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Applications {
    /// `apps__hashcode`, when present.
    pub(crate) hashcode: Option<String>,
    /// Every instance entry, in document order.
    pub(crate) entries: Vec<Entry>,
    /// Application entries that could not be read at all (not an object, or an
    /// `instance` field that is neither a list nor an object).
    pub(crate) app_problems: Vec<String>,
}

/// Parses a response body. Errors: not JSON ([`FetchErrorKind::InvalidJson`]), or
/// JSON that is not an `applications` document ([`FetchErrorKind::InvalidShape`]).
pub(crate) fn parse(bytes: &[u8]) -> Result<Applications, (FetchErrorKind, String)> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| {
        (
            FetchErrorKind::InvalidJson,
            format!(
                "the response is not valid JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ),
        )
    })?;
    let shape = |m: String| (FetchErrorKind::InvalidShape, m);
    let apps = root
        .get("applications")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            shape(format!(
                "expected a JSON object with an \"applications\" object, got {}",
                describe(&root)
            ))
        })?;
    let mut out = Applications {
        hashcode: apps.get("apps__hashcode").and_then(text),
        ..Applications::default()
    };
    let list = one_or_many(apps.get("application")).ok_or_else(|| {
        shape(format!(
            "\"applications.application\" is {}, not a list or an object",
            describe(apps.get("application").unwrap_or(&Value::Null))
        ))
    })?;
    for (i, app) in list.into_iter().enumerate() {
        let Some(app) = app.as_object() else {
            out.app_problems.push(format!(
                "application #{} is {}, not an object",
                i + 1,
                describe(app)
            ));
            continue;
        };
        let app_name = app.get("name").and_then(text).filter(|s| !s.is_empty());
        let Some(instances) = one_or_many(app.get("instance")) else {
            out.app_problems.push(format!(
                "application {}: \"instance\" is {}, not a list or an object",
                app_name.as_deref().unwrap_or("(unnamed)"),
                describe(app.get("instance").unwrap_or(&Value::Null))
            ));
            continue;
        };
        for inst in instances {
            out.entries.push(entry(inst, app_name.as_deref()));
        }
    }
    Ok(out)
}

/// `None` and `null` → empty; an array → its items; anything else that is an
/// object → itself alone (Eureka's list-of-one quirk); a scalar → not a list.
fn one_or_many(v: Option<&Value>) -> Option<Vec<&Value>> {
    match v {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(items)) => Some(items.iter().collect()),
        Some(obj @ Value::Object(_)) => Some(vec![obj]),
        Some(_) => None,
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object without the expected fields",
    }
}

/// A scalar as text: strings as-is, numbers and booleans printed.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn field(o: &Map<String, Value>, name: &str) -> Option<String> {
    o.get(name)
        .and_then(text)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Eureka's `InstanceStatus.toEnum`: case-insensitive, unknown → `UNKNOWN`; an
/// absent status deserialises to the builder's default, `UP`.
fn eureka_status(s: Option<&str>) -> &'static str {
    let Some(s) = s else { return "UP" };
    ["UP", "DOWN", "STARTING", "OUT_OF_SERVICE", "UNKNOWN"]
        .into_iter()
        .find(|k| k.eq_ignore_ascii_case(s.trim()))
        .unwrap_or("UNKNOWN")
}

fn health(status: &str) -> pb::Health {
    match status {
        "UP" => pb::Health::Healthy,
        "DOWN" => pb::Health::Unhealthy,
        // Taken out of rotation by an operator: existing connections may finish.
        "OUT_OF_SERVICE" => pb::Health::Draining,
        // STARTING, UNKNOWN
        _ => pb::Health::NotReady,
    }
}

fn entry(v: &Value, app_name: Option<&str>) -> Entry {
    let Some(o) = v.as_object() else {
        return Entry {
            app: app_name.map(str::to_owned),
            id: None,
            status: "UNKNOWN",
            action: None,
            instance: Err(format!("instance entry is {}, not an object", describe(v))),
        };
    };
    let app = field(o, "app").or_else(|| app_name.map(str::to_owned));
    let dci_md = o
        .get("dataCenterInfo")
        .and_then(|d| d.get("metadata"))
        .and_then(Value::as_object);
    let id = field(o, "instanceId")
        .or_else(|| dci_md.and_then(|m| field(m, "instance-id")))
        .or_else(|| field(o, "hostName"));
    let raw_status = field(o, "status");
    let status = eureka_status(raw_status.as_deref());
    let instance = match (&app, &id) {
        (None, _) => Err("the instance names no application (\"app\")".to_owned()),
        (_, None) => Err("the instance has no \"instanceId\" nor \"hostName\"".to_owned()),
        (Some(app), Some(id)) => instance(o, dci_md, app, id, status),
    };
    Entry {
        app,
        id,
        status,
        action: field(o, "actionType"),
        instance,
    }
}

fn instance(
    o: &Map<String, Value>,
    dci_md: Option<&Map<String, Value>>,
    app: &str,
    id: &str,
    status: &'static str,
) -> Result<Instance, String> {
    let address = address(o)?;
    let vips = match field(o, "vipAddress") {
        Some(v) => v
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>(),
        None => Vec::new(),
    };
    let vips = if vips.is_empty() {
        vec![app.to_ascii_lowercase()]
    } else {
        vips
    };
    for v in &vips {
        if v.len() > 253
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!(
                "vipAddress {v:?} is not a hostname (1-253 characters of [a-z0-9-._])"
            ));
        }
    }
    let http_port = port(o.get("port"), true, "port")?;
    let https_port = port(o.get("securePort"), false, "securePort")?;
    let labels: BTreeMap<String, String> = o
        .get("metadata")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.starts_with('@') && !k.is_empty())
                .filter_map(|(k, v)| text(v).map(|t| (k.clone(), t)))
                .collect()
        })
        .unwrap_or_default();
    let zone = dci_md
        .and_then(|m| field(m, "availability-zone"))
        .or_else(|| labels.get("zone").cloned())
        .unwrap_or_default();
    let region = labels
        .get("region")
        .cloned()
        .unwrap_or_else(|| aws_region(&zone));
    let locality = (!zone.is_empty() || !region.is_empty()).then(|| pb::Locality {
        region,
        zone,
        subzone: String::new(),
    });
    Ok(Instance {
        app: app.to_owned(),
        id: id.to_owned(),
        address,
        vips,
        health: health(status),
        http_port,
        https_port,
        labels,
        locality,
    })
}

/// `ipAddr`, else `hostName` when that is an IP address.
fn address(o: &Map<String, Value>) -> Result<String, String> {
    let ip = field(o, "ipAddr");
    if let Some(a) = ip.as_deref().and_then(|s| s.parse::<IpAddr>().ok()) {
        return Ok(a.to_string());
    }
    if let Some(a) = field(o, "hostName").and_then(|s| s.parse::<IpAddr>().ok()) {
        return Ok(a.to_string());
    }
    Err(match ip {
        Some(ip) => format!("ipAddr {ip:?} is not an IP address"),
        None => "the instance has no \"ipAddr\"".to_owned(),
    })
}

/// A port in Eureka's `{"$": 8080, "@enabled": "true"}` form (or a bare number):
/// `Some` when enabled, `None` when disabled or absent.
fn port(v: Option<&Value>, enabled_by_default: bool, what: &str) -> Result<Option<u32>, String> {
    let (number, enabled) = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => {
            let enabled = match o.get("@enabled") {
                None | Some(Value::Null) => enabled_by_default,
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
                Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
                Some(other) => {
                    return Err(format!("{what} \"@enabled\" is {other}, not true or false"));
                }
            };
            (o.get("$"), enabled)
        }
        Some(other) => (Some(other), enabled_by_default),
    };
    if !enabled {
        return Ok(None);
    }
    let n = number
        .and_then(text)
        .and_then(|t| t.trim().parse::<u32>().ok());
    match n {
        Some(n) if (1..=65535).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{what} {} is not a port number (1-65535)",
            number.map_or_else(|| "(missing \"$\")".to_owned(), Value::to_string)
        )),
    }
}

/// The AWS region of an availability zone (`us-east-1a` → `us-east-1`); empty when
/// the zone does not look like one.
fn aws_region(zone: &str) -> String {
    let trimmed = zone.trim_end_matches(|c: char| c.is_ascii_lowercase());
    if trimmed.len() < zone.len() && trimmed.ends_with(|c: char| c.is_ascii_digit()) {
        trimmed.to_owned()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
