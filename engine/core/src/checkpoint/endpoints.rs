//! The endpoints section of a checkpoint: every distinct [`EndpointShape`] once,
//! then each endpoint as its key, source, generation, address, weight, health and
//! the number of its shape.
//!
//! Why: endpoints are nine in ten entities of a mesh, and the pods of one
//! deployment in one zone have equal ports, labels, locality, identity and
//! services. Storing each endpoint as a whole event payload made a restore decode
//! and validate those fields 100k times (two thirds of a restore); stored once
//! per shape, they are converted once, and the endpoints that share a shape share
//! it in memory too. The fixed fields need no protobuf decoding at all.
//!
//! A shape is stored as the `deltapilot.events.v1.Endpoint` payload it converts
//! from, with only the shape's fields set, so it goes through the same validation
//! as an event ([`shape_from_payload_sharing`]). Shapes are stored (and
//! numbered) in the order of their bytes, so equal states encode to equal bytes,
//! and the shapes of one deployment in several zones, which differ only in their
//! locality, come one after the other: a restore shares their common strings and
//! maps instead of allocating them once per shape.
//!
//! What it does NOT do: framing of the other sections, checksums, or inserting
//! into a state (see `format` and `entities`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use deltapilot_proto as pb;
use prost::Message;

use super::entities::labels;
use super::format::{Reader, put_bytes, put_u32, put_u64};
use deltapilot_model::canon::health_code;
use deltapilot_model::state::{EndpointBatch, HKey, ModelState, ShapeFacts, source_key};
use deltapilot_model::{Endpoint, EndpointShape, Health, shape_from_payload_sharing};

/// The payload a shape converts from: an `Endpoint` message with the shape's
/// fields only (lossless: converting it back yields an equal shape).
fn shape_to_proto(s: &EndpointShape) -> pb::Endpoint {
    pb::Endpoint {
        ports: s
            .ports
            .iter()
            .map(|(k, v)| (k.to_string(), u32::from(*v)))
            .collect(),
        labels: labels(&s.labels),
        locality: Some(pb::Locality {
            region: s.locality.region.to_string(),
            zone: s.locality.zone.to_string(),
            subzone: s.locality.subzone.to_string(),
        }),
        service_account: s.service_account.to_string(),
        services: s
            .services
            .iter()
            .map(|(ns, h)| pb::ServiceRef {
                namespace: ns.to_string(),
                hostname: h.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The inverse of [`health_code`].
fn health_from_code(c: u8) -> Option<Health> {
    Some(match c {
        1 => Health::Healthy,
        2 => Health::Unhealthy,
        3 => Health::Draining,
        4 => Health::NotReady,
        _ => return None,
    })
}

/// Appends the section for every raw endpoint of `model`:
///
/// ```text
/// u32 n, then n × bytes (shape payload)
/// u64 m, then m × (str key, str source, u64 generation, u32 shape number,
///                  u8 family (4 or 6), 4 or 16 address bytes, u32 weight, u8 health)
/// ```
pub(super) fn encode(model: &ModelState, body: &mut Vec<u8>) {
    // Shapes the fold shares are found by pointer without encoding them again;
    // equal shapes it did not share, by their bytes. Numbers are provisional
    // (first use) until the shapes are ordered below.
    let mut by_ptr: HashMap<*const EndpointShape, u32> = HashMap::new();
    let mut by_bytes: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut distinct: Vec<Vec<u8>> = Vec::new();
    let mut numbers: Vec<u32> = Vec::new();
    let mut scratch = Vec::new();
    for (_, _, shape, _) in model.endpoint_records() {
        let n = match by_ptr.get(&Arc::as_ptr(shape)) {
            Some(n) => *n,
            None => {
                scratch.clear();
                shape_to_proto(shape).encode_raw(&mut scratch);
                let next = u32::try_from(distinct.len()).unwrap_or(u32::MAX);
                let n = *by_bytes.entry(scratch.clone()).or_insert_with(|| {
                    distinct.push(scratch.clone());
                    next
                });
                by_ptr.insert(Arc::as_ptr(shape), n);
                n
            }
        };
        numbers.push(n);
    }
    // Stored in the order of their bytes (ports, then labels, then locality, …):
    // the shapes of one deployment in several zones sit side by side, so a
    // restore converting them in order shares what they have in common.
    let mut order: Vec<u32> = (0..u32::try_from(distinct.len()).unwrap_or(u32::MAX)).collect();
    order.sort_unstable_by(|a, b| distinct[*a as usize].cmp(&distinct[*b as usize]));
    let mut rank = vec![0u32; distinct.len()];
    put_u32(body, u32::try_from(distinct.len()).unwrap_or(u32::MAX));
    for (r, n) in order.iter().enumerate() {
        rank[*n as usize] = u32::try_from(r).unwrap_or(u32::MAX);
        put_bytes(body, &distinct[*n as usize]);
    }
    for n in &mut numbers {
        *n = rank[*n as usize];
    }

    put_u64(body, numbers.len() as u64);
    for ((key, source, _, ep), n) in model.endpoint_records().zip(numbers) {
        put_bytes(body, key.as_bytes());
        put_bytes(body, source.as_bytes());
        put_u64(body, ep.generation);
        put_u32(body, n);
        match ep.address {
            IpAddr::V4(a) => {
                body.push(4);
                body.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                body.push(6);
                body.extend_from_slice(&a.octets());
            }
        }
        put_u32(body, ep.weight);
        body.push(health_code(ep.health));
    }
}

/// One endpoint as it sits in the section, its fixed fields already checked.
struct Record<'a> {
    key: &'a str,
    /// Its source, as a number in [`Framed::sources`].
    source: u32,
    generation: u64,
    shape: u32,
    address: IpAddr,
    weight: u32,
    health: Health,
}

/// The section, framed: shape payloads not yet converted, and the records.
pub(super) struct Framed<'a> {
    shapes: Vec<&'a [u8]>,
    /// The distinct sources of the records, in order of first use: a restore
    /// turns each into a shared name once per thread, not once per endpoint.
    sources: Vec<&'a str>,
    records: Vec<Record<'a>>,
}

/// Reads the section from `r`; an out-of-range shape number, an unknown address
/// family or health, an empty key or a zero weight is an error naming the
/// endpoint.
pub(super) fn frame<'a>(r: &mut Reader<'a>) -> Result<Framed<'a>, String> {
    let n = r.u32("shape count")?;
    let mut shapes = Vec::with_capacity((n as usize).min(r.remaining() / 4));
    for _ in 0..n {
        shapes.push(r.bytes("endpoint shape")?);
    }
    let m = r.u64("endpoint count")?;
    let mut records = Vec::with_capacity(usize::try_from(m).unwrap_or(0).min(r.remaining() / 32));
    let mut sources = Sources::default();
    for i in 0..m {
        let key = r.str("endpoint key")?;
        let source = sources.number(r.str("endpoint source")?);
        let generation = r.u64("endpoint generation")?;
        let shape = r.u32("endpoint shape number")?;
        let address = match r.u8("endpoint address")? {
            4 => {
                let b = r.take(4, "endpoint address")?;
                IpAddr::from([b[0], b[1], b[2], b[3]])
            }
            6 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(r.take(16, "endpoint address")?);
                IpAddr::from(a)
            }
            f => return Err(format!("endpoint {i} ({key}): address family {f}")),
        };
        let weight = r.u32("endpoint weight")?;
        let health = r.u8("endpoint health")?;
        let health = health_from_code(health)
            .ok_or_else(|| format!("endpoint {i} ({key}): health {health}"))?;
        if key.is_empty() || weight == 0 || shape >= n {
            return Err(format!(
                "endpoint {i} ({key:?}): empty key, zero weight or shape {shape} of {n}"
            ));
        }
        records.push(Record {
            key,
            source,
            generation,
            shape,
            address,
            weight,
            health,
        });
    }
    Ok(Framed {
        shapes,
        sources: sources.names,
        records,
    })
}

/// Numbers distinct source names in order of first use. A mesh has a few
/// sources and most endpoints come from one, so the last name used answers
/// most lookups without hashing.
#[derive(Default)]
struct Sources<'a> {
    names: Vec<&'a str>,
    numbers: HashMap<&'a str, u32>,
    last: Option<(&'a str, u32)>,
}

impl<'a> Sources<'a> {
    fn number(&mut self, name: &'a str) -> u32 {
        if let Some((last, n)) = self.last
            && last == name
        {
            return n;
        }
        let next = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        let n = *self.numbers.entry(name).or_insert(next);
        if n == next {
            self.names.push(name);
        }
        self.last = Some((name, n));
        n
    }
}

/// Below this many shapes a restore converts them on the calling thread only.
const PARALLEL_MIN: usize = 2048;

/// Most threads shapes are converted on.
const MAX_THREADS: usize = 4;

/// Converts every shape, builds every endpoint and prepares it for the bulk
/// load (both steps on several threads), in record order.
///
/// Why in one pass: preparing an endpoint for the load (digests, key hashes,
/// index entries) read it back from memory that another thread had just
/// written, a few cache misses per endpoint; here it is still in this core's
/// cache. Each shape's hostname keys are computed once with it.
pub(super) fn convert(framed: &Framed<'_>) -> Result<EndpointBatch, String> {
    let shapes = deltapilot_model::par::map_chunks(
        &framed.shapes,
        PARALLEL_MIN,
        MAX_THREADS,
        |chunk: &[&[u8]]| {
            let mut prev: Option<Arc<EndpointShape>> = None;
            let mut scratch = pb::Endpoint::default();
            chunk
                .iter()
                .map(|b| {
                    let converted = convert_shape(b, prev.as_deref(), &mut scratch);
                    if let Ok(k) = &converted {
                        prev = Some(k.shape.clone());
                    }
                    converted
                })
                .collect()
        },
        |len, _| {
            (0..len)
                .map(|_| Err("endpoint shape conversion panicked".to_string()))
                .collect()
        },
    );
    let shapes = shapes
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.map_err(|e| format!("endpoint shape {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let shapes = &shapes;
    let mut batch = EndpointBatch::default();
    for part in deltapilot_model::par::map_chunks_at(
        &framed.records,
        PARALLEL_MIN,
        2,
        |start, chunk: &[Record<'_>]| {
            // Each chunk holds its own copy of the source names: every endpoint
            // takes a reference to its source, and two cores counting references
            // on one shared name pass its cache line back and forth.
            let sources: Vec<(Arc<str>, u64)> = framed
                .sources
                .iter()
                .map(|s| (Arc::from(*s), source_key(s)))
                .collect();
            // The first part has room for every endpoint, so that appending the
            // others copies only theirs (room it never fills is never touched).
            let room = if start == 0 {
                framed.records.len()
            } else {
                chunk.len()
            };
            let mut part = EndpointBatch::with_capacity(room);
            for (i, r) in chunk.iter().enumerate() {
                // `frame` checked the shape number and numbered the source.
                let shape = &shapes[r.shape as usize];
                let ep = Endpoint {
                    key: Arc::from(r.key),
                    address: r.address,
                    weight: r.weight,
                    health: r.health,
                    shape: shape.shape.clone(),
                };
                let (source, source_key) = &sources[r.source as usize];
                part.push(
                    start + i,
                    (source, *source_key),
                    r.generation,
                    ep,
                    shape.facts,
                    shape.hosts(),
                );
            }
            part.sort_indexes();
            vec![part]
        },
        |_, panic| std::panic::resume_unwind(panic),
    ) {
        batch.append(part);
    }
    Ok(batch)
}

/// A converted shape, with what each of its endpoints needs from it kept in the
/// entry itself: its content digest and the keys of the hostnames it lists, in
/// order. Why: endpoints come in key-hash order and refer to shapes at random,
/// and reading these through the shape and the heap cost two cache misses per
/// endpoint.
struct ShapeKeys {
    shape: Arc<EndpointShape>,
    /// What an endpoint's stored record copies from the shape.
    facts: ShapeFacts,
    /// The first hostname's key (every shape lists at least one).
    first: HKey,
    /// The others' keys.
    rest: Vec<HKey>,
}

impl ShapeKeys {
    fn hosts(&self) -> impl Iterator<Item = HKey> + '_ {
        std::iter::once(self.first).chain(self.rest.iter().copied())
    }
}

/// Converts one stored shape, sharing what it has in common with `prev` (the
/// shape stored before it). `scratch` is the message decoded into, reused from
/// shape to shape so its strings keep their buffers.
fn convert_shape(
    payload: &[u8],
    prev: Option<&EndpointShape>,
    scratch: &mut pb::Endpoint,
) -> Result<ShapeKeys, String> {
    scratch.clear();
    scratch.merge(payload).map_err(|e| e.to_string())?;
    let shape =
        shape_from_payload_sharing("stored shape", scratch, prev).map_err(|e| e.to_string())?;
    // The shape computed its first hostname's key when it was built; conversion
    // refuses a shape with no service.
    let first = shape
        .first_host()
        .ok_or_else(|| "a shape that lists no service".to_string())?;
    let rest = shape.services[1..]
        .iter()
        .map(|(_, h)| HKey::of(h.as_str()))
        .collect();
    Ok(ShapeKeys {
        facts: ShapeFacts::of(&shape),
        shape: Arc::new(shape),
        first,
        rest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltapilot_model::state::mk::*;

    /// Two endpoints of one shape and one of another, one on IPv6.
    fn state() -> ModelState {
        ModelState::from_events(&[
            svc("a", 0, "ns", "h1", &[80]),
            ep("a", 0, "ep/1", "10.0.0.1", &["h1"]),
            ep("a", 0, "ep/2", "fd00::2", &["h1"]),
            ep_labeled("a", 0, "ep/3", "10.0.0.3", &["h1"], &[("app", "x")]),
        ])
    }

    fn section(st: &ModelState) -> Vec<u8> {
        let mut body = Vec::new();
        encode(st, &mut body);
        body
    }

    fn restored(body: &[u8]) -> Result<Vec<Endpoint>, String> {
        let mut r = Reader::new(body);
        let framed = frame(&mut r)?;
        assert_eq!(r.remaining(), 0, "the section is read to its end");
        Ok(convert(&framed)?.endpoints())
    }

    #[test]
    fn equal_shapes_are_stored_once_and_shared_when_restored() {
        let st = state();
        let body = section(&st);
        assert_eq!(u32::from_le_bytes([body[0], body[1], body[2], body[3]]), 2);
        let eps = restored(&body).expect("restores");
        let original: Vec<_> = st
            .raw_endpoints()
            .map(|(_, w)| (*w.value).clone())
            .collect();
        assert_eq!(eps, original, "equal endpoints, in stored order");
        let by_key = |k: &str| eps.iter().find(|e| &*e.key == k).expect(k);
        assert!(Arc::ptr_eq(&by_key("ep/1").shape, &by_key("ep/2").shape));
        assert!(!Arc::ptr_eq(&by_key("ep/1").shape, &by_key("ep/3").shape));
        assert_eq!(
            by_key("ep/3").shape.source_digest(),
            deltapilot_model::source_digest(&shape_to_proto(&by_key("ep/3").shape)),
            "a restored shape is recognised by the fold's reuse check"
        );
    }

    /// Shapes are stored in the order of their bytes, and the shapes of one
    /// deployment in three zones, stored side by side, share their labels'
    /// strings, identity and hostname once restored; they stay distinct shapes
    /// and equal to the originals.
    #[test]
    fn shapes_of_one_deployment_in_several_zones_share_what_they_have_in_common() {
        use deltapilot_proto::event::Payload;
        let mut events = vec![
            svc("a", 0, "ns", "h1", &[80]),
            svc("a", 0, "ns", "h0", &[80]),
        ];
        for (i, zone) in ["z-c", "z-a", "z-b"].iter().enumerate() {
            for host in ["h1", "h0"] {
                let addr = format!("10.0.{}.{i}", host.len() + i);
                let key = format!("ep/{host}/{i}");
                let mut e = ep_labeled("a", 0, &key, &addr, &[host], &[("app", host)]);
                if let Some(Payload::EndpointUpsert(u)) = &mut e.payload
                    && let Some(p) = &mut u.endpoint
                {
                    p.locality = Some(pb::Locality {
                        region: "r".into(),
                        zone: (*zone).into(),
                        subzone: String::new(),
                    });
                    p.service_account = format!("sa/{host}");
                }
                events.push(e);
            }
        }
        let st = ModelState::from_events(&events);
        let body = section(&st);
        let mut r = Reader::new(&body);
        let framed = frame(&mut r).expect("frames");
        assert_eq!(framed.shapes.len(), 6);
        assert!(
            framed.shapes.windows(2).all(|w| w[0] < w[1]),
            "stored in the order of their bytes"
        );
        let eps = restored(&body).expect("restores");
        let original: Vec<_> = st
            .raw_endpoints()
            .map(|(_, w)| (*w.value).clone())
            .collect();
        assert_eq!(eps, original, "equal endpoints, in stored order");
        for host in ["h1", "h0"] {
            let shapes: Vec<_> = eps
                .iter()
                .filter(|e| e.key.starts_with(&format!("ep/{host}/")))
                .map(|e| e.shape.clone())
                .collect();
            assert_eq!(shapes.len(), 3);
            let first = &shapes[0];
            for other in &shapes[1..] {
                assert!(!Arc::ptr_eq(first, other), "{host}: one shape per zone");
                assert!(
                    Arc::ptr_eq(&first.service_account, &other.service_account),
                    "{host}: one identity string"
                );
                let (k0, v0) = first.labels.iter().next().expect("a label");
                let (k1, v1) = other.labels.iter().next().expect("a label");
                assert!(Arc::ptr_eq(k0, k1) && Arc::ptr_eq(v0, v1), "{host}: labels");
            }
        }
    }

    /// Each fixed field of the last record, damaged past what a checksum would
    /// catch, is refused with the endpoint named.
    #[test]
    fn a_bad_record_is_named() {
        let st = ModelState::from_events(&[
            svc("a", 0, "ns", "h1", &[80]),
            ep("a", 0, "ep/1", "10.0.0.1", &["h1"]),
            ep_labeled("a", 0, "ep/3", "10.0.0.3", &["h1"], &[("app", "x")]),
        ]);
        let (last, _) = st.raw_endpoints().last().expect("two endpoints");
        let body = section(&st);
        let end = body.len();
        let cases: Vec<(&str, usize, Vec<u8>, &str)> = vec![
            (
                "shape number",
                end - 14,
                7u32.to_le_bytes().into(),
                "shape 7 of 2",
            ),
            ("family", end - 10, vec![5], "address family 5"),
            ("weight", end - 5, 0u32.to_le_bytes().into(), "zero weight"),
            ("health", end - 1, vec![9], "health 9"),
        ];
        for (what, at, bytes, needle) in cases {
            let mut b = body.clone();
            b[at..at + bytes.len()].copy_from_slice(&bytes);
            let e = restored(&b).expect_err(what);
            assert!(e.contains(&*last) && e.contains(needle), "{what}: {e}");
        }
        let e = restored(&body[..end - 3]).expect_err("truncated");
        assert!(e.contains("ends inside endpoint weight"), "{e}");
    }

    #[test]
    fn an_invalid_shape_is_refused_with_its_number() {
        let mut body = Vec::new();
        put_u32(&mut body, 1);
        let bad = pb::Endpoint {
            ports: [("http".to_string(), 70_000)].into(),
            services: vec![pb::ServiceRef {
                namespace: "ns".into(),
                hostname: "h1".into(),
            }],
            ..Default::default()
        };
        put_bytes(&mut body, &bad.encode_to_vec());
        put_u64(&mut body, 0);
        let e = restored(&body).expect_err("port out of range");
        assert!(
            e.starts_with("endpoint shape 0:") && e.contains("70000"),
            "{e}"
        );
    }
}
