//! One file's text to Istio objects, document by document.
//!
//! Two levels of failure, handled differently:
//!
//! - **The file is not valid YAML** (syntax, unknown anchor, duplicate key, nesting
//!   too deep): [`parse_file`] returns `Err` with the line and column serde_yaml
//!   reports, and the caller keeps the file's last good state as a whole.
//! - **One document is malformed** (not a mapping, no name, a field of the wrong
//!   type, an invalid port): that document becomes [`DocOutcome::Malformed`] with a
//!   problem, and the other documents apply. When the typed read fails, the document
//!   is read once more straight from the text so the error carries serde_yaml's
//!   line and column; checks done after reading report the document's first line.
//!
//! What it does NOT do: read files, or decide what a malformed document's previous
//! state was (the scanner keeps per-file history).

use std::path::Path;
use std::sync::Arc;

use deltapilot_proto as pb;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Deserializer};
use serde_yaml::Value;

use super::istio::{self, API_GROUP, API_VERSIONS, Doc, Header, Metadata};
use super::json::canonical_json;
use super::status::{FileProblem, ProblemKind};
use crate::common::istio::{
    KeyScheme, Selector, ServiceEntrySpec, WorkloadFacts, WorkloadSpec, WorkloadStatus,
    map_service_entry, map_workload_entry, null_default,
};

/// Largest object (spec as JSON plus labels and annotations) the adapter carries.
/// One object is one log record, and a record must fit the smallest log's limit
/// (Kafka's default of 1 MB per message) with room to spare; a larger object would
/// make every append fail, so it is refused here as a malformed document instead.
pub(crate) const MAX_OBJECT_BYTES: usize = 512 * 1024;

/// Identity of an Istio object: what its config key is made of, and what a later
/// version of the same document is matched by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectId {
    /// The config kind.
    pub(crate) kind: pb::ConfigKind,
    /// Namespace (defaulted).
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}/{}",
            self.kind.as_str_name(),
            self.namespace,
            self.name
        )
    }
}

/// One document that mapped cleanly, with the entities it yields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IstioObject {
    /// Kind, namespace and name.
    pub(crate) id: ObjectId,
    /// 0-based index of the document in its file (for conflict reports).
    pub(crate) document: usize,
    /// The object itself, as a config entity.
    pub(crate) config: pb::ConfigObject,
    /// Services (ServiceEntry hosts).
    pub(crate) services: Vec<pb::Service>,
    /// Endpoints (ServiceEntry inline endpoints) with their keys.
    pub(crate) endpoints: Vec<(String, pb::Endpoint)>,
    /// A ServiceEntry's workload selector, joined in the desired view.
    pub(crate) selector: Option<Selector>,
    /// A WorkloadEntry, as the join needs it.
    pub(crate) workload: Option<Arc<WorkloadFacts>>,
}

/// A WorkloadEntry document's `status` (its health conditions).
#[derive(Debug, Default, Deserialize)]
struct StatusDoc {
    #[serde(default, deserialize_with = "null_default")]
    status: WorkloadStatus,
}

/// The join facts of an object restored from the state file: a ServiceEntry's
/// selector or a WorkloadEntry's facts, read again from the carried spec (both
/// were valid when first read), with the WorkloadEntry health persisted beside it
/// (its `status` is not part of the spec).
pub(crate) fn restored_join(
    config: &pb::ConfigObject,
    health: Option<pb::Health>,
) -> Result<(Option<Selector>, Option<Arc<WorkloadFacts>>), String> {
    let bad = |e: String| {
        format!(
            "{} {}/{}: {e}",
            config.kind().as_str_name(),
            config.namespace,
            config.name
        )
    };
    match config.kind() {
        pb::ConfigKind::ServiceEntry => {
            let spec: ServiceEntrySpec =
                serde_json::from_str(&config.spec_json).map_err(|e| bad(e.to_string()))?;
            let facts = map_service_entry(
                &config.namespace,
                &config.name,
                &config.labels,
                &spec,
                &KeyScheme::file(),
            )
            .map_err(bad)?;
            Ok((facts.selector, None))
        }
        pb::ConfigKind::WorkloadEntry => {
            let spec: WorkloadSpec =
                serde_json::from_str(&config.spec_json).map_err(|e| bad(e.to_string()))?;
            let mut facts = map_workload_entry(
                &config.labels,
                &config.annotations,
                &spec,
                &WorkloadStatus::default(),
            )
            .map_err(bad)?;
            if let Some(h) = health {
                facts.health = h;
            }
            Ok((None, Some(Arc::new(facts))))
        }
        _ => Ok((None, None)),
    }
}

/// What one document became.
#[derive(Debug, Clone)]
pub(crate) enum DocOutcome {
    /// An empty document (`---` with nothing, or a comment-only file).
    Empty,
    /// A good object.
    Object(Arc<IstioObject>),
    /// Malformed; `id` is what could still be read of its identity, so the scanner
    /// can keep that object's previous state.
    Malformed {
        /// Identity, when kind, namespace and name were still readable.
        id: Option<ObjectId>,
    },
    /// A kind (or API group) this adapter does not carry.
    Ignored,
}

/// A parsed file: one outcome per document, plus the problems found.
#[derive(Debug, Clone)]
pub(crate) struct ParsedFile {
    /// Outcome per document, in file order.
    pub(crate) docs: Vec<DocOutcome>,
    /// Document-level problems (the file as a whole was usable).
    pub(crate) problems: Vec<FileProblem>,
}

/// Parses one file. `Err` is a file-level problem: the text is not valid YAML.
pub(crate) fn parse_file(path: &Path, text: &str) -> Result<ParsedFile, FileProblem> {
    let mut values = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        match Value::deserialize(doc) {
            Ok(v) => values.push(v),
            Err(e) => {
                let (line, column, reason) = located_parts(&e);
                return Err(FileProblem {
                    path: path.to_owned(),
                    line,
                    column,
                    document: Some(values.len()),
                    kind: ProblemKind::InvalidFile,
                    reason: format!("not valid YAML: {reason}"),
                    kept_last_good: false,
                });
            }
        }
    }
    let mut cx = Cx {
        path,
        text,
        starts: None,
        problems: Vec::new(),
    };
    let docs = values
        .iter()
        .enumerate()
        .map(|(i, v)| cx.document(i, v))
        .collect();
    Ok(ParsedFile {
        docs,
        problems: cx.problems,
    })
}

struct Cx<'a> {
    path: &'a Path,
    text: &'a str,
    /// First line of each document, computed on the first problem that needs it.
    starts: Option<Vec<Option<usize>>>,
    problems: Vec<FileProblem>,
}

impl Cx<'_> {
    fn document(&mut self, index: usize, value: &Value) -> DocOutcome {
        if value.is_null() {
            return DocOutcome::Empty;
        }
        if !value.is_mapping() {
            self.problem(
                index,
                None,
                ProblemKind::MalformedDocument,
                "a document must be a mapping (an object)".into(),
            );
            return DocOutcome::Malformed { id: None };
        }
        let header: Header = match self.typed(index, value) {
            Ok(h) => h,
            Err(e) => {
                self.problem(index, Some(e.0), ProblemKind::MalformedDocument, e.1);
                return DocOutcome::Malformed { id: None };
            }
        };
        let (group, version) = header
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &header.api_version));
        let Some(kind) = istio::config_kind(&header.kind).filter(|_| group == API_GROUP) else {
            let what = if header.kind.is_empty() {
                "no kind".to_owned()
            } else {
                format!("kind {:?}", header.kind)
            };
            self.problem(
                index,
                None,
                ProblemKind::IgnoredDocument,
                format!(
                    "{what} of API version {:?} is not carried (supported: ServiceEntry, WorkloadEntry, \
                     VirtualService, DestinationRule, Gateway, Sidecar of {API_GROUP}); ignored",
                    header.api_version
                ),
            );
            return DocOutcome::Ignored;
        };
        let loose_id = loose_id(kind, value);
        if !API_VERSIONS.contains(&version) {
            let reason = format!(
                "apiVersion {:?} is not supported (use {API_GROUP}/v1, v1beta1 or v1alpha3)",
                header.api_version
            );
            self.problem(index, None, ProblemKind::MalformedDocument, reason);
            return DocOutcome::Malformed { id: loose_id };
        }
        match self.object(index, kind, value) {
            Ok(obj) => DocOutcome::Object(Arc::new(obj)),
            Err((loc, reason)) => {
                self.problem(index, loc, ProblemKind::MalformedDocument, reason);
                DocOutcome::Malformed { id: loose_id }
            }
        }
    }

    fn object(
        &mut self,
        index: usize,
        kind: pb::ConfigKind,
        value: &Value,
    ) -> Result<IstioObject, Malformed> {
        let (meta, typed) = self.typed_object(index, kind, value)?;
        istio::check_key_segment("metadata.name", &meta.name).map_err(|r| (None, r))?;
        istio::check_key_segment("metadata.namespace", meta.namespace()).map_err(|r| (None, r))?;
        let spec_json = match value.get("spec") {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(spec) if kind == pb::ConfigKind::ServiceEntry => {
                // Inline endpoints travel as endpoint entities. Left in the carried
                // spec, every endpoint change would also be a config change, which
                // the engine answers by recomputing every resource.
                let mut spec = spec.clone();
                if let Value::Mapping(m) = &mut spec {
                    m.remove("endpoints");
                }
                canonical_json(&spec).map_err(|r| (None, r))?
            }
            Some(spec) => canonical_json(spec).map_err(|r| (None, r))?,
        };
        let size = spec_json.len()
            + meta
                .labels
                .iter()
                .chain(&meta.annotations)
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        if size > MAX_OBJECT_BYTES {
            return Err((
                None,
                format!(
                    "the object is {size} bytes as JSON, above the {MAX_OBJECT_BYTES}-byte limit of one event"
                ),
            ));
        }
        let id = ObjectId {
            kind,
            namespace: meta.namespace().to_owned(),
            name: meta.name.clone(),
        };
        let (mut services, mut endpoints, mut selector, mut workload) =
            (Vec::new(), Vec::new(), None, None);
        match typed {
            Typed::ServiceEntry(spec) => {
                let mapped = map_service_entry(
                    &id.namespace,
                    &id.name,
                    &meta.labels,
                    &spec,
                    &KeyScheme::file(),
                )
                .map_err(|r| (None, r))?;
                for s in mapped.skipped {
                    self.problem(index, None, ProblemKind::SkippedPart, format!("{id}: {s}"));
                }
                (services, endpoints, selector) =
                    (mapped.services, mapped.endpoints, mapped.selector);
            }
            Typed::WorkloadEntry(spec, status) => {
                let facts = map_workload_entry(&meta.labels, &meta.annotations, &spec, &status)
                    .map_err(|r| (None, r))?;
                workload = Some(Arc::new(facts));
            }
            Typed::Other => {}
        }
        let config = pb::ConfigObject {
            kind: kind as i32,
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            spec_json,
        };
        Ok(IstioObject {
            id,
            document: index,
            config,
            services,
            endpoints,
            selector,
            workload,
        })
    }

    /// Reads the metadata and, for the kinds the adapter maps, the typed spec.
    fn typed_object(
        &self,
        index: usize,
        kind: pb::ConfigKind,
        value: &Value,
    ) -> Result<(Metadata, Typed), Malformed> {
        let located = |(l, r): (Loc, String)| (Some(l), r);
        Ok(match kind {
            pb::ConfigKind::ServiceEntry => {
                let d: Doc<ServiceEntrySpec> = self.typed(index, value).map_err(located)?;
                (d.metadata, Typed::ServiceEntry(d.spec))
            }
            pb::ConfigKind::WorkloadEntry => {
                let d: Doc<WorkloadSpec> = self.typed(index, value).map_err(located)?;
                let s: StatusDoc = self.typed(index, value).map_err(located)?;
                (d.metadata, Typed::WorkloadEntry(d.spec, s.status))
            }
            _ => {
                let d: Doc<IgnoredAny> = self.typed(index, value).map_err(located)?;
                (d.metadata, Typed::Other)
            }
        })
    }

    /// Reads a typed view of document `index`. On failure the document is read once
    /// more from the text, which is what gives serde_yaml's error its location.
    fn typed<T: DeserializeOwned>(&self, index: usize, value: &Value) -> Result<T, (Loc, String)> {
        match T::deserialize(value) {
            Ok(t) => Ok(t),
            Err(plain) => {
                let located = serde_yaml::Deserializer::from_str(self.text)
                    .nth(index)
                    .and_then(|doc| T::deserialize(doc).err());
                match located {
                    Some(e) => {
                        let (line, column, reason) = located_parts(&e);
                        Err(((line, column), reason))
                    }
                    None => Err(((None, None), plain.to_string())),
                }
            }
        }
    }

    fn problem(&mut self, index: usize, loc: Option<Loc>, kind: ProblemKind, reason: String) {
        let (line, column) = match loc {
            Some((Some(l), c)) => (Some(l), c),
            _ => (self.start_line(index), None),
        };
        self.problems.push(FileProblem {
            path: self.path.to_owned(),
            line,
            column,
            document: Some(index),
            kind,
            reason,
            kept_last_good: false,
        });
    }

    fn start_line(&mut self, index: usize) -> Option<usize> {
        let text = self.text;
        let starts = self
            .starts
            .get_or_insert_with(|| document_start_lines(text));
        starts.get(index).copied().flatten()
    }
}

/// A document's spec, typed for the kinds the adapter maps.
enum Typed {
    ServiceEntry(ServiceEntrySpec),
    WorkloadEntry(WorkloadSpec, WorkloadStatus),
    Other,
}

/// Line and column, each when known.
type Loc = (Option<usize>, Option<usize>);
/// Why a document is malformed, with a location when one is known.
type Malformed = (Option<Loc>, String);

/// Kind, namespace and name read as loosely as possible from a document whose typed
/// read failed, so its previous state can still be kept.
fn loose_id(kind: pb::ConfigKind, value: &Value) -> Option<ObjectId> {
    let meta = value.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    let namespace = match meta.get("namespace").and_then(Value::as_str) {
        None | Some("") => istio::DEFAULT_NAMESPACE,
        Some(ns) => ns,
    };
    (!name.is_empty()).then(|| ObjectId {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// serde_yaml's message without the " at line L column C" of its own location,
/// which the problem carries in its own fields (other positions, such as the start
/// of the enclosing flow mapping, stay in the text).
fn located_parts(e: &serde_yaml::Error) -> (Option<usize>, Option<usize>, String) {
    let reason = e.to_string();
    match e.location() {
        Some(l) => {
            let needle = format!(" at line {} column {}", l.line(), l.column());
            (
                Some(l.line()),
                Some(l.column()),
                reason.replacen(&needle, "", 1),
            )
        }
        None => (None, None, reason),
    }
}

/// The first line of each document's content. Each document is deserialised into a
/// probe that fails on the first node it sees; serde_yaml marks that failure with
/// the node's position. Used only for reports.
fn document_start_lines(text: &str) -> Vec<Option<usize>> {
    document_start_lines_upto(text, usize::MAX)
}

/// [`document_start_lines`] of the first `n` documents only. Past a syntax
/// error serde_yaml's document iterator may not end, so callers that cannot
/// know the text parses bound it by the documents they need.
pub(crate) fn document_start_lines_upto(text: &str, n: usize) -> Vec<Option<usize>> {
    serde_yaml::Deserializer::from_str(text)
        .take(n)
        .map(|doc| match Probe::deserialize(doc) {
            Err(e) => e.location().map(|l| l.line()),
            Ok(Probe) => None,
        })
        .collect()
}

struct Probe;

impl<'de> Deserialize<'de> for Probe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Probe;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("anything")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Probe, A::Error> {
                Err(serde::de::Error::custom("probe"))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Probe, A::Error> {
                Err(serde::de::Error::custom("probe"))
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Probe, E> {
                Err(E::custom("probe"))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Probe, E> {
                Ok(Probe)
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Probe, E> {
                Ok(Probe)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
