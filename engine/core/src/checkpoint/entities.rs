//! The entity set of a checkpoint: every raw service and config object of a
//! [`ModelState`] written as its event payload (`deltapilot.events.v1` `Service`,
//! `ConfigObject`) with the key, source and generation it is stored under, plus
//! each source's resync bookkeeping; and the way back, endpoints included
//! (their section is `endpoints`).
//!
//! Restoring inserts each entity exactly as stored, through the same primitives
//! [`ModelState::rebuild`] uses, not through the fold: the fold's admission rules
//! (an endpoint needs an existing service, keys have one owner, stale generations
//! are refused) decided *whether* an entity entered the state when its event was
//! folded, and an entity already stored is kept even when they would now refuse
//! it (an endpoint whose service was deleted later). Re-folding would drop it.
//! The merged view, indexes and hash are derived from the raw layer, so the
//! restored state equals the original (`PartialEq`, and the same hash).
//!
//! What it does NOT do: framing, checksums or files (see `format` and `store`).

use std::collections::BTreeMap;
use std::sync::Arc;

use deltapilot_proto as pb;
use prost::Message;

use deltapilot_model::state::{EndpointBatch, ModelState, ServiceSlot, SourceGen, Touched};
use deltapilot_model::{Config, ConfigKind, Protocol, Resolution, Service, service_from_proto};

/// Kind tag of one stored entity in a checkpoint body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum EntityKind {
    Service = 1,
    // 2 was a whole endpoint payload before format version 4 (see `endpoints`).
    Config = 3,
}

impl EntityKind {
    pub(super) fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(EntityKind::Service),
            3 => Some(EntityKind::Config),
            _ => None,
        }
    }
}

/// One raw entity as a checkpoint stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StoredEntity {
    pub(super) kind: EntityKind,
    /// The key it is stored under (for services, the slot key, which keeps the
    /// hostname exactly as the event spelled it).
    pub(super) key: String,
    pub(super) source: String,
    pub(super) generation: u64,
    /// The encoded payload message (`Service` or `ConfigObject`).
    pub(super) payload: Vec<u8>,
}

/// Model labels (or annotations) as a payload's map.
pub(super) fn labels<'a>(
    l: impl IntoIterator<Item = (&'a Arc<str>, &'a Arc<str>)>,
) -> BTreeMap<String, String> {
    l.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn protocol(p: Protocol) -> pb::Protocol {
    match p {
        Protocol::Http => pb::Protocol::Http,
        Protocol::Http2 => pb::Protocol::Http2,
        Protocol::Grpc => pb::Protocol::Grpc,
        Protocol::Tcp => pb::Protocol::Tcp,
        Protocol::Tls => pb::Protocol::Tls,
        Protocol::Https => pb::Protocol::Https,
        Protocol::Mongo => pb::Protocol::Mongo,
        Protocol::Redis => pb::Protocol::Redis,
        Protocol::Mysql => pb::Protocol::Mysql,
        Protocol::Udp => pb::Protocol::Udp,
    }
}

/// The payload a service came from (lossless: converting it back yields an equal
/// [`Service`]).
pub(super) fn service_to_proto(s: &Service) -> pb::Service {
    pb::Service {
        hostname: s.hostname.to_string(),
        namespace: s.namespace.to_string(),
        ports: s
            .ports
            .iter()
            .map(|p| pb::Port {
                name: p.name.to_string(),
                number: u32::from(p.number),
                protocol: protocol(p.protocol) as i32,
            })
            .collect(),
        labels: labels(&s.labels),
        resolution: match s.resolution {
            Resolution::StaticEndpoints => pb::Resolution::StaticEndpoints,
            Resolution::Dns => pb::Resolution::Dns,
            Resolution::Passthrough => pb::Resolution::Passthrough,
        } as i32,
    }
}

/// The payload a config object came from (lossless).
pub(super) fn config_to_proto(c: &Config) -> pb::ConfigObject {
    pb::ConfigObject {
        kind: c.kind as i32,
        namespace: c.namespace.to_string(),
        name: c.name.to_string(),
        labels: labels(&c.labels),
        annotations: labels(&c.annotations),
        spec_json: c.spec_json.to_string(),
    }
}

/// A stored config object back as a [`Config`]. It was validated when its event
/// was folded, so only what makes it addressable is checked again: a known kind,
/// and the key its kind, namespace and name give.
fn config_from_stored(key: &str, c: &pb::ConfigObject) -> Result<Config, String> {
    let kind = ConfigKind::try_from(c.kind)
        .ok()
        .filter(|k| *k != ConfigKind::Unspecified)
        .ok_or_else(|| format!("config {key}: unknown kind {}", c.kind))?;
    if pb::config_key(kind, &c.namespace, &c.name) != key {
        return Err(format!(
            "config stored under {key} is {}/{}/{}",
            pb::kind_slug(kind),
            c.namespace,
            c.name
        ));
    }
    let arc_map = |m: &BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
            .collect()
    };
    Ok(Config {
        key: Arc::from(key),
        kind,
        namespace: Arc::from(c.namespace.as_str()),
        name: Arc::from(c.name.as_str()),
        labels: arc_map(&c.labels),
        annotations: arc_map(&c.annotations),
        spec_json: Arc::from(c.spec_json.as_str()),
    })
}

/// Every raw entity of `model`, in a deterministic order (services, then
/// configs; each sorted by key), calling `f` for each so a caller can stream them
/// into a buffer.
pub(super) fn for_each_entity(model: &ModelState, f: &mut dyn FnMut(&StoredEntity)) {
    let mut buf = StoredEntity {
        kind: EntityKind::Service,
        key: String::new(),
        source: String::new(),
        generation: 0,
        payload: Vec::new(),
    };
    let mut emit =
        |kind: EntityKind, key: &str, source: &str, generation: u64, msg: &dyn Fn(&mut Vec<u8>)| {
            buf.kind = kind;
            buf.key.clear();
            buf.key.push_str(key);
            buf.source.clear();
            buf.source.push_str(source);
            buf.generation = generation;
            buf.payload.clear();
            msg(&mut buf.payload);
            f(&buf);
        };
    for (slot, w) in model.raw_services() {
        emit(
            EntityKind::Service,
            &slot.key,
            &w.source,
            w.generation,
            &|out| service_to_proto(&w.value).encode_raw(out),
        );
    }
    for (key, w) in model.raw_configs() {
        emit(EntityKind::Config, key, &w.source, w.generation, &|out| {
            config_to_proto(&w.value).encode_raw(out)
        });
    }
}

/// One stored entity decoded and converted to its model value, ready to insert.
/// Converting is pure, so a restore converts on several threads and inserts in
/// file order on one.
pub(super) enum Converted {
    /// A service definition and the slot key it is stored under.
    Service(String, Service),
    /// A config object.
    Config(Config),
}

/// Decodes and converts one stored entity; the error says which and why.
pub(super) fn convert(kind: EntityKind, key: &str, payload: &[u8]) -> Result<Converted, String> {
    Ok(match kind {
        EntityKind::Service => {
            let p = pb::Service::decode(payload).map_err(|e| format!("service {key}: {e}"))?;
            let svc = service_from_proto(&p).map_err(|e| format!("service {key}: {e}"))?;
            Converted::Service(key.to_owned(), svc)
        }
        EntityKind::Config => {
            let p = pb::ConfigObject::decode(payload).map_err(|e| format!("config {key}: {e}"))?;
            Converted::Config(config_from_stored(key, &p)?)
        }
    })
}

/// Builds a state out of stored entities and source bookkeeping. Fails (with the
/// reason) on an entity that does not decode or convert: a checkpoint whose
/// checksum held but whose content does not is treated as corrupt.
pub(super) struct Restorer {
    model: ModelState,
    sink: Touched,
    sources: BTreeMap<String, Arc<str>>,
    /// The source of the last call to `source`.
    last_source: Option<Arc<str>>,
    /// Endpoints wait until every service is in, so that the order of the file
    /// never matters (the primitives do not check admission, but keeping the
    /// rebuild order keeps this equal to `ModelState::rebuild`).
    endpoints: EndpointBatch,
    /// Services, loaded in bulk at the end like the endpoints.
    services: Vec<deltapilot_model::state::ServiceEntry>,
}

impl Restorer {
    pub(super) fn new() -> Self {
        Restorer {
            model: ModelState::default(),
            sink: Touched::default(),
            sources: BTreeMap::new(),
            last_source: None,
            endpoints: EndpointBatch::default(),
            services: Vec::new(),
        }
    }

    fn source(&mut self, name: &str) -> Arc<str> {
        // Entities come grouped by source: the last one answers almost every call
        // without a map lookup.
        if let Some(s) = &self.last_source
            && **s == *name
        {
            return s.clone();
        }
        let s = self.source_uncached(name);
        self.last_source = Some(s.clone());
        s
    }

    fn source_uncached(&mut self, name: &str) -> Arc<str> {
        if let Some(s) = self.sources.get(name) {
            return s.clone();
        }
        let s: Arc<str> = Arc::from(name);
        self.sources.insert(name.to_owned(), s.clone());
        s
    }

    pub(super) fn source_gen(&mut self, source: &str, g: SourceGen) {
        let s = self.source(source);
        self.model.set_source_gen(s, g);
    }

    /// Inserts one converted entity (see [`convert`]).
    pub(super) fn insert(&mut self, source: &str, generation: u64, entity: Converted) {
        let source = self.source(source);
        match entity {
            Converted::Service(key, svc) => {
                let slot = ServiceSlot {
                    key: Arc::from(key.as_str()),
                    source,
                };
                self.services.push((slot, generation, Arc::new(svc)));
            }
            Converted::Config(cfg) => {
                self.model
                    .put_config(source, generation, Arc::new(cfg), &mut self.sink);
            }
        }
    }

    /// Adds the endpoints (see `endpoints`), after any added before.
    pub(super) fn endpoints(&mut self, batch: EndpointBatch) {
        self.endpoints.append(batch);
    }

    /// Loads the services inserted so far (in bulk), so that a caller can do it
    /// on another thread while the endpoints are still being converted.
    pub(super) fn load_services(&mut self) {
        if !self.services.is_empty() {
            self.model.load_services(std::mem::take(&mut self.services));
        }
    }

    pub(super) fn finish(mut self) -> ModelState {
        self.load_services();
        self.model
            .load_endpoint_batch(std::mem::take(&mut self.endpoints));
        self.model
    }
}
