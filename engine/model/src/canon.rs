//! Canonical encodings of model entities, and the content digests the state hash is
//! built from.
//!
//! The encoding is written out field by field here (not `#[derive(Hash)]`) so that a
//! digest depends only on the entity's content and on this file: not on the Rust
//! version, the `Hash` impls of std types, or the declaration order of enum variants.
//! Every variable-length field is length-prefixed, so no two different entities share
//! an encoding.
//!
//! What it does NOT do: decide which entities exist (see `apply`) or combine digests
//! into the state hash (see `ModelState::hash`).

use std::net::IpAddr;

use xxhash_rust::xxh3::xxh3_64;

use crate::model::{Config, Endpoint, Health, Labels, Protocol, Resolution, Service};

/// Tag of each entity kind in the state hash, so a service and an endpoint with the
/// same key and bytes never hash alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Service = 1,
    Endpoint = 2,
    Config = 3,
    Source = 4,
    PendingResync = 5,
}

/// A buffer that the canonical encoding is written into. Each digest borrows the
/// thread's reusable buffer (taken out and put back, so nesting is impossible to
/// get wrong: a nested user would just allocate), which saves an allocation per
/// digest on the fold's hot path. No state survives a digest: it stays pure.
pub(crate) struct Canon {
    buf: Vec<u8>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Canon {
    pub(crate) fn new() -> Self {
        let mut buf = SCRATCH.with(|s| s.take());
        buf.clear();
        Canon { buf }
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn str(&mut self, s: &str) {
        // Lengths above u32::MAX cannot occur for event payloads (the log caps record
        // size far below that); saturating keeps this total anyway.
        self.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(s.as_bytes());
    }

    pub(crate) fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }

    fn labels(&mut self, l: &Labels) {
        self.len(l.len());
        for (k, v) in l {
            self.str(k);
            self.str(v);
        }
    }

    fn addr(&mut self, a: &IpAddr) {
        match a {
            IpAddr::V4(v4) => {
                self.u8(4);
                self.buf.extend_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                self.u8(6);
                self.buf.extend_from_slice(&v6.octets());
            }
        }
    }

    pub(crate) fn digest(self) -> u64 {
        let d = xxh3_64(&self.buf);
        self.done();
        d
    }

    /// The 128-bit digest, for identities that must not collide (see `HKey`).
    pub(crate) fn digest128(self) -> u128 {
        let d = xxhash_rust::xxh3::xxh3_128(&self.buf);
        self.done();
        d
    }

    /// Gives the buffer back to the thread (unless a huge input grew it).
    fn done(self) {
        if self.buf.capacity() <= 64 * 1024 {
            SCRATCH.with(|s| s.set(self.buf));
        }
    }
}

fn protocol_code(p: Protocol) -> u8 {
    match p {
        Protocol::Http => 1,
        Protocol::Http2 => 2,
        Protocol::Grpc => 3,
        Protocol::Tcp => 4,
        Protocol::Tls => 5,
        Protocol::Https => 6,
        Protocol::Mongo => 7,
        Protocol::Redis => 8,
        Protocol::Mysql => 9,
        Protocol::Udp => 10,
    }
}

fn resolution_code(r: Resolution) -> u8 {
    match r {
        Resolution::StaticEndpoints => 1,
        Resolution::Dns => 2,
        Resolution::Passthrough => 3,
    }
}

/// The stable number of a health state (in digests and checkpoints).
pub fn health_code(h: Health) -> u8 {
    match h {
        Health::Healthy => 1,
        Health::Unhealthy => 2,
        Health::Draining => 3,
        Health::NotReady => 4,
    }
}

/// Digest of a service's content.
pub(crate) fn service_digest(s: &Service) -> u64 {
    let mut c = Canon::new();
    c.str(s.hostname.as_str());
    c.str(&s.namespace);
    c.len(s.ports.len());
    for p in &s.ports {
        c.str(&p.name);
        c.u32(u32::from(p.number));
        c.u8(protocol_code(p.protocol));
    }
    c.labels(&s.labels);
    c.u8(resolution_code(s.resolution));
    c.digest()
}

/// Digest of an endpoint's content (its key included).
pub(crate) fn endpoint_digest(e: &Endpoint) -> u64 {
    endpoint_fields_digest(&e.key, &e.address, e.weight, e.health, e.shape.digest())
}

/// [`endpoint_digest`] of an endpoint with these fields and a shape of content
/// digest `shape`, without building it.
pub(crate) fn endpoint_fields_digest(
    key: &str,
    address: &IpAddr,
    weight: u32,
    health: Health,
    shape: u64,
) -> u64 {
    let mut c = Canon::new();
    c.str(key);
    c.addr(address);
    c.u32(weight);
    c.u8(health_code(health));
    // The shape's content digest, computed once when it was built: hashing its
    // fields again here would read every one of its strings on each event.
    c.u64(shape);
    c.digest()
}

/// Digest of a config object's content (its key included).
pub(crate) fn config_digest(cfg: &Config) -> u64 {
    let mut c = Canon::new();
    c.str(&cfg.key);
    // The proto enum's numbers are frozen by the schema evolution rules.
    c.u32(cfg.kind as i32 as u32);
    c.str(&cfg.namespace);
    c.str(&cfg.name);
    c.labels(&cfg.labels);
    c.len(cfg.annotations.len());
    for (k, v) in &cfg.annotations {
        c.str(k);
        c.str(v);
    }
    c.str(&cfg.spec_json);
    c.digest()
}

/// The contribution of one stored entity to the state hash: its kind, the key it is
/// stored under, who wrote it at which generation, and its content digest.
pub(crate) fn entity_hash(
    kind: Kind,
    key: &str,
    source: &str,
    generation: u64,
    content: u64,
) -> u64 {
    let mut c = Canon::new();
    c.u8(kind as u8);
    c.str(key);
    c.str(source);
    c.u64(generation);
    c.u64(content);
    c.digest()
}

/// The contribution of one source's resync bookkeeping to the state hash.
pub(crate) fn source_hash(source: &str, started: u64, completed: u64) -> u64 {
    let mut c = Canon::new();
    c.u8(Kind::Source as u8);
    c.str(source);
    c.u64(started);
    c.u64(completed);
    c.digest()
}

/// The contribution of one source's pending multi-copy resync (see
/// `PendingResync`) to the state hash: generation, copies and the partitions
/// delivered so far (in order, length-prefixed).
pub(crate) fn pending_resync_hash(
    source: &str,
    generation: u64,
    copies: u32,
    partitions: &std::collections::BTreeSet<u32>,
) -> u64 {
    let mut c = Canon::new();
    c.u8(Kind::PendingResync as u8);
    c.str(source);
    c.u64(generation);
    c.u32(copies);
    c.len(partitions.len());
    for p in partitions {
        c.u32(*p);
    }
    c.digest()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::model::{EndpointShape, Locality};

    #[test]
    fn length_prefixes_keep_adjacent_fields_apart() {
        // "ab"+"c" and "a"+"bc" would collide without length prefixes.
        let a = entity_hash(Kind::Endpoint, "ab", "c", 1, 0);
        let b = entity_hash(Kind::Endpoint, "a", "bc", 1, 0);
        assert_ne!(a, b);
        assert_ne!(
            entity_hash(Kind::Endpoint, "k", "s", 1, 0),
            entity_hash(Kind::Config, "k", "s", 1, 0)
        );
    }

    fn shape(locality: Locality) -> EndpointShape {
        EndpointShape::new(
            Default::default(),
            Default::default(),
            locality,
            Arc::from(""),
            vec![],
            0,
        )
    }

    #[test]
    fn endpoint_digest_sees_every_field() {
        let base = Endpoint {
            key: Arc::from("ep/1"),
            address: "10.0.0.1".parse().expect("ip"),
            weight: 1,
            health: Health::Healthy,
            shape: Arc::new(shape(Locality::default())),
        };
        let d = endpoint_digest(&base);
        let mut other = base.clone();
        other.weight = 2;
        assert_ne!(d, endpoint_digest(&other));
        let mut other = base.clone();
        other.health = Health::Draining;
        assert_ne!(d, endpoint_digest(&other));
        let mut other = base.clone();
        other.shape = Arc::new(shape(Locality {
            zone: Arc::from("z"),
            ..Locality::default()
        }));
        assert_ne!(d, endpoint_digest(&other));
        assert_eq!(d, endpoint_digest(&base.clone()));
    }
}
