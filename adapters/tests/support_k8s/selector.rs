//! Label and field selectors as the API server evaluates them, for the fake's lists
//! and watches. Written independently of the adapter's own selector check, so a
//! bug in one is not mirrored by the other.
//!
//! What it does NOT do: support field selectors beyond `metadata.name` and
//! `metadata.namespace` (the only ones the adapter could use).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Exists(String),
    NotExists(String),
    Eq(String, String),
    NotEq(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
}

/// A parsed label selector; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Req>);

impl LabelSelector {
    /// Parses `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
    /// comma-separated.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        let mut depth = 0usize;
        let mut cur = String::new();
        let mut parts = Vec::new();
        for c in s.chars() {
            match c {
                '(' => {
                    depth += 1;
                    cur.push(c);
                }
                ')' => {
                    depth = depth.checked_sub(1).ok_or("unbalanced )")?;
                    cur.push(c);
                }
                ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        parts.push(cur);
        for p in parts {
            let p = p.trim();
            if p.is_empty() {
                continue;
            }
            reqs.push(parse_req(p)?);
        }
        Ok(Self(reqs))
    }

    /// Whether labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Req::NotIn(k, set) => labels.get(k).is_none_or(|v| !set.contains(v)),
        })
    }
}

fn parse_req(p: &str) -> Result<Req, String> {
    let set = |s: &str| -> Result<BTreeSet<String>, String> {
        let inner = s
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| format!("bad set in {p:?}"))?;
        Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
    };
    if let Some((k, s)) = p.split_once(" notin ") {
        return Ok(Req::NotIn(k.trim().to_owned(), set(s)?));
    }
    if let Some((k, s)) = p.split_once(" in ") {
        return Ok(Req::In(k.trim().to_owned(), set(s)?));
    }
    if let Some((k, v)) = p.split_once("!=") {
        return Ok(Req::NotEq(k.trim().to_owned(), v.trim().to_owned()));
    }
    if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
        return Ok(Req::Eq(k.trim().to_owned(), v.trim().to_owned()));
    }
    if let Some(k) = p.strip_prefix('!') {
        return Ok(Req::NotExists(k.trim().to_owned()));
    }
    if p.contains(char::is_whitespace) {
        return Err(format!("bad requirement {p:?}"));
    }
    Ok(Req::Exists(p.to_owned()))
}

/// A field selector over `metadata.name` / `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `field=value`, `field==value` and `field!=value`, comma-separated.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = p.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("bad field requirement {p:?}"));
            };
            if !matches!(field, "metadata.name" | "metadata.namespace") {
                return Err(format!("field label not supported: {field}"));
            }
            out.push((field.to_owned(), eq, value.to_owned()));
        }
        Ok(Self(out))
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, value)| {
            let key = field.trim_start_matches("metadata.");
            let actual = obj["metadata"][key].as_str().unwrap_or_default();
            (actual == value) == *eq
        })
    }
}

/// An object's labels.
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}
