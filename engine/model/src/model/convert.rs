//! Validated conversion from event payloads (`deltapilot.events.v1`) to the model.
//!
//! This is where bad input stops: an invalid port, address or hostname becomes a
//! [`ConvertError`] that says what and why, and the fold skips that one event (with a
//! metric and its log position) instead of poisoning state.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use deltapilot_proto as pb;

use super::{
    Endpoint, EndpointShape, Health, Hostname, Locality, Port, Protocol, Resolution, Service,
    SortedMap, WorkloadLabels, source_digest,
};

/// Why an event payload is not a valid model object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConvertError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, ConvertError> {
    Err(ConvertError(msg.into()))
}

/// Checks a DNS-style hostname (letters, digits, `-`, `.`, `*` for wildcards).
fn hostname(h: &str) -> Result<Hostname, ConvertError> {
    if h.is_empty() || h.len() > 253 {
        return err(format!("hostname {h:?} must be 1-253 characters"));
    }
    if !h
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '*' | '_'))
    {
        return err(format!(
            "hostname {h:?} has characters outside [A-Za-z0-9-._*]"
        ));
    }
    Ok(Hostname::new(&h.to_ascii_lowercase()))
}

fn labels<M: FromIterator<(Arc<str>, Arc<str>)>>(
    m: &std::collections::BTreeMap<String, String>,
) -> M {
    m.iter()
        .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
        .collect()
}

fn protocol(p: i32) -> Protocol {
    match pb::Protocol::try_from(p).unwrap_or(pb::Protocol::Unspecified) {
        pb::Protocol::Http => Protocol::Http,
        pb::Protocol::Http2 => Protocol::Http2,
        pb::Protocol::Grpc => Protocol::Grpc,
        pb::Protocol::Tls => Protocol::Tls,
        pb::Protocol::Https => Protocol::Https,
        pb::Protocol::Mongo => Protocol::Mongo,
        pb::Protocol::Redis => Protocol::Redis,
        pb::Protocol::Mysql => Protocol::Mysql,
        pb::Protocol::Udp => Protocol::Udp,
        pb::Protocol::Tcp | pb::Protocol::Unspecified => Protocol::Tcp,
    }
}

/// `n` as a port; `what` names it in the error, and is only called then (building
/// that text for every valid port was a few percent of a checkpoint restore).
fn port_number(n: u32, what: impl FnOnce() -> String) -> Result<u16, ConvertError> {
    match u16::try_from(n) {
        Ok(p) if p > 0 => Ok(p),
        _ => err(format!("{} {n} is not a valid port (1-65535)", what())),
    }
}

/// Converts and validates a service.
pub fn service_from_proto(s: &pb::Service) -> Result<Service, ConvertError> {
    let host = hostname(&s.hostname)?;
    if s.namespace.is_empty() {
        return err(format!("service {host}: namespace is empty"));
    }
    let mut ports = Vec::with_capacity(s.ports.len());
    let mut names = BTreeSet::new();
    let mut numbers = BTreeSet::new();
    for p in &s.ports {
        let number = port_number(p.number, || format!("service {host}: port {:?}", p.name))?;
        if !numbers.insert(number) {
            return err(format!(
                "service {host}: port number {number} appears twice"
            ));
        }
        if !p.name.is_empty() && !names.insert(p.name.clone()) {
            return err(format!(
                "service {host}: port name {:?} appears twice",
                p.name
            ));
        }
        let name = if p.name.is_empty() {
            number.to_string()
        } else {
            p.name.clone()
        };
        ports.push(Port {
            name: Arc::from(name.as_str()),
            number,
            protocol: protocol(p.protocol),
        });
    }
    ports.sort_by_key(|p| p.number);
    let resolution =
        match pb::Resolution::try_from(s.resolution).unwrap_or(pb::Resolution::Unspecified) {
            pb::Resolution::Dns => Resolution::Dns,
            pb::Resolution::Passthrough => Resolution::Passthrough,
            pb::Resolution::StaticEndpoints | pb::Resolution::Unspecified => {
                Resolution::StaticEndpoints
            }
        };
    Ok(Service {
        hostname: host,
        namespace: Arc::from(s.namespace.as_str()),
        ports,
        labels: labels(&s.labels),
        resolution,
    })
}

/// Converts and validates a workload instance written under `key`.
pub fn endpoint_from_proto(key: &str, e: &pb::Endpoint) -> Result<Endpoint, ConvertError> {
    endpoint_from_proto_reusing(key, e, None)
}

/// The shared string of `prev` when it holds exactly `text`, else a new one.
fn reuse(text: &str, prev: Option<&Arc<str>>) -> Arc<str> {
    match prev {
        Some(p) if **p == *text => p.clone(),
        _ => Arc::from(text),
    }
}

/// [`endpoint_from_proto`], sharing what is unchanged from `prev`, the value
/// stored under the same key.
///
/// Why: an endpoint rewrite usually changes health or weight only. When the
/// payload's ports, labels, locality, identity and services are exactly those
/// `prev`'s shape was converted from (same [`source_digest`]), the shape is shared
/// as is (one pointer copy, no validation: it was validated when stored).
/// Otherwise a new shape is built that still shares each string and map equal to
/// `prev`'s. The result is equal to what [`endpoint_from_proto`] returns; only
/// the allocations differ.
pub fn endpoint_from_proto_reusing(
    key: &str,
    e: &pb::Endpoint,
    prev: Option<&Endpoint>,
) -> Result<Endpoint, ConvertError> {
    endpoint_from_digested(key, e, source_digest(e), None, prev, || None)
}

/// [`endpoint_from_proto_reusing`] given `raw`, the payload's [`source_digest`],
/// and optionally its address already parsed, both computed earlier (a replay
/// computes them on its decoding thread). `prev` must be the value stored under
/// `key` (its key string is shared without comparing it: the fold found `prev`
/// by `key`). When `prev`'s shape is not the payload's, `like` is asked for a
/// shape stored for another endpoint, which is shared as is when it was
/// converted from an equal payload (same [`source_digest`]): a new pod of a
/// deployment takes its sibling's shape instead of a copy of its own.
pub fn endpoint_from_digested(
    key: &str,
    e: &pb::Endpoint,
    raw: u128,
    address: Option<IpAddr>,
    prev: Option<&Endpoint>,
    like: impl FnOnce() -> Option<Arc<EndpointShape>>,
) -> Result<Endpoint, ConvertError> {
    if key.is_empty() {
        return err("endpoint key is empty");
    }
    let address = match address {
        Some(a) => a,
        None => e.address.parse().map_err(|_| {
            ConvertError(format!(
                "endpoint {key}: address {:?} is not an IP address",
                e.address
            ))
        })?,
    };
    let shape = match prev {
        Some(p) if p.shape.source_digest() == raw => p.shape.clone(),
        _ => match like().filter(|s| s.source_digest() == raw) {
            Some(s) => s,
            None => Arc::new(shape_from_proto(key, e, prev.map(|p| &*p.shape), raw)?),
        },
    };
    let health = health_from_proto(e.health);
    debug_assert!(
        prev.is_none_or(|p| *p.key == *key),
        "prev is stored under key"
    );
    Ok(Endpoint {
        // Reading the stored key's bytes to compare them was a cache miss per event.
        key: prev.map_or_else(|| Arc::from(key), |p| p.key.clone()),
        address,
        weight: e.weight.max(1),
        health,
        shape,
    })
}

/// The model health of a payload's health code; unset and unknown codes are
/// healthy (a registry that does not report health serves its endpoints).
pub fn health_from_proto(code: i32) -> Health {
    match pb::Health::try_from(code).unwrap_or(pb::Health::Unspecified) {
        pb::Health::Unhealthy => Health::Unhealthy,
        pb::Health::Draining => Health::Draining,
        pb::Health::NotReady => Health::NotReady,
        pb::Health::Healthy | pb::Health::Unspecified => Health::Healthy,
    }
}

/// The shape of `e` alone (its ports, labels, locality, identity and services;
/// address, weight and health are ignored), validated as [`endpoint_from_proto`]
/// validates them. `what` names it in errors. Every string and map equal to
/// `prev`'s is shared: a restore converting the shapes of one deployment in
/// several zones one after the other allocates their ports, labels, identity
/// and services once.
///
/// Why: a checkpoint stores each distinct shape once and its endpoints by
/// reference, so a restore converts a shape once for all the endpoints that share
/// it (typically a deployment's pods in one zone).
pub fn shape_from_payload_sharing(
    what: &str,
    e: &pb::Endpoint,
    prev: Option<&EndpointShape>,
) -> Result<EndpointShape, ConvertError> {
    shape_from_proto(what, e, prev, source_digest(e))
}

/// Validates and converts an endpoint's shape, sharing each string and map equal
/// to `prev`'s.
fn shape_from_proto(
    key: &str,
    e: &pb::Endpoint,
    prev: Option<&EndpointShape>,
    raw: u128,
) -> Result<EndpointShape, ConvertError> {
    let ports = match prev {
        Some(p) if same_ports(&p.ports, &e.ports) => p.ports.clone(),
        _ => e
            .ports
            .iter()
            .map(|(name, n)| {
                let port = port_number(*n, || format!("endpoint {key}: port {name:?}"))?;
                Ok((Arc::from(name.as_str()), port))
            })
            .collect::<Result<SortedMap<_, _>, ConvertError>>()?,
    };
    if e.services.is_empty() {
        return err(format!("endpoint {key}: belongs to no service"));
    }
    let mut services = Vec::with_capacity(e.services.len());
    for s in &e.services {
        let known = prev.and_then(|p| {
            p.services
                .iter()
                .find(|(ns, h)| **ns == *s.namespace && h.as_str() == s.hostname)
        });
        services.push(match known {
            Some(pair) => pair.clone(),
            None => (Arc::from(s.namespace.as_str()), hostname(&s.hostname)?),
        });
    }
    if services.len() > 1 {
        services.sort();
        services.dedup();
    }
    let locality = e.locality.as_ref().map_or_else(Locality::default, |l| {
        let old = prev.map(|p| &p.locality);
        Locality {
            region: reuse(&l.region, old.map(|o| &o.region)),
            zone: reuse(&l.zone, old.map(|o| &o.zone)),
            subzone: reuse(&l.subzone, old.map(|o| &o.subzone)),
        }
    });
    let labels = match prev {
        Some(p) if same_labels(&p.labels, &e.labels) => p.labels.clone(),
        _ => labels(&e.labels),
    };
    Ok(EndpointShape::new(
        ports,
        labels,
        locality,
        reuse(&e.service_account, prev.map(|p| &p.service_account)),
        services,
        raw,
    ))
}

/// Whether a stored port map equals the payload's (both sorted by name).
fn same_ports(
    stored: &SortedMap<Arc<str>, u16>,
    given: &std::collections::BTreeMap<String, u32>,
) -> bool {
    stored.len() == given.len()
        && stored
            .iter()
            .zip(given)
            .all(|((a, p), (b, n))| **a == **b && u32::from(*p) == *n)
}

/// Whether stored labels equal the payload's (both sorted by key).
fn same_labels(
    stored: &WorkloadLabels,
    given: &std::collections::BTreeMap<String, String>,
) -> bool {
    stored.len() == given.len()
        && stored
            .iter()
            .zip(given)
            .all(|((k, v), (gk, gv))| **k == **gk && **v == **gv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ports: Vec<pb::Port>) -> pb::Service {
        pb::Service {
            hostname: "a.ns.svc".into(),
            namespace: "ns".into(),
            ports,
            ..Default::default()
        }
    }

    #[test]
    fn invalid_ports_are_rejected_with_reason() {
        let bad = svc(vec![pb::Port {
            name: "http".into(),
            number: 70000,
            protocol: 1,
        }]);
        let e = service_from_proto(&bad).expect_err("port out of range");
        assert!(e.0.contains("70000"), "{e}");

        let dup = svc(vec![
            pb::Port {
                name: "a".into(),
                number: 80,
                protocol: 1,
            },
            pb::Port {
                name: "b".into(),
                number: 80,
                protocol: 1,
            },
        ]);
        assert!(
            service_from_proto(&dup)
                .expect_err("dup")
                .0
                .contains("twice")
        );
    }

    #[test]
    fn endpoint_weight_zero_becomes_one_and_bad_ip_is_rejected() {
        let mut e = pb::Endpoint {
            address: "10.0.0.1".into(),
            services: vec![pb::ServiceRef {
                namespace: "ns".into(),
                hostname: "a.ns.svc".into(),
            }],
            ..Default::default()
        };
        assert_eq!(endpoint_from_proto("ep/1", &e).expect("valid").weight, 1);
        e.address = "not-an-ip".into();
        assert!(
            endpoint_from_proto("ep/1", &e)
                .expect_err("bad ip")
                .0
                .contains("not-an-ip")
        );
    }
}

#[cfg(test)]
mod reuse_tests {
    use super::*;

    fn payload(weight: u32, version: &str) -> pb::Endpoint {
        pb::Endpoint {
            address: "10.0.0.1".into(),
            ports: [("http".to_string(), 8080)].into(),
            labels: [("version".to_string(), version.to_string())].into(),
            weight,
            services: vec![pb::ServiceRef {
                namespace: "ns".into(),
                hostname: "a.ns.svc".into(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn an_unchanged_shape_is_shared_and_a_changed_one_is_rebuilt() {
        let first = endpoint_from_proto("ep/1", &payload(1, "v1")).expect("valid");
        let reweighted = payload(5, "v1");
        let shared = endpoint_from_proto_reusing("ep/1", &reweighted, Some(&first)).expect("valid");
        assert!(
            Arc::ptr_eq(&shared.shape, &first.shape),
            "weight only: shape shared"
        );
        assert_eq!(
            shared,
            endpoint_from_proto("ep/1", &reweighted).expect("valid")
        );

        let relabelled = payload(1, "v2");
        let rebuilt =
            endpoint_from_proto_reusing("ep/1", &relabelled, Some(&first)).expect("valid");
        assert!(!Arc::ptr_eq(&rebuilt.shape, &first.shape));
        assert_eq!(rebuilt.labels.get("version").map(|v| &**v), Some("v2"));
        assert_eq!(
            rebuilt,
            endpoint_from_proto("ep/1", &relabelled).expect("valid")
        );
        // Unchanged parts of a rebuilt shape still share the stored strings.
        assert!(Arc::ptr_eq(
            &rebuilt.services[0].1.0,
            &first.services[0].1.0
        ));
    }

    #[test]
    fn a_bad_payload_is_refused_even_with_a_stored_value() {
        let first = endpoint_from_proto("ep/1", &payload(1, "v1")).expect("valid");
        let mut bad = payload(1, "v1");
        bad.ports.insert("http".into(), 70_000);
        let e = endpoint_from_proto_reusing("ep/1", &bad, Some(&first)).expect_err("bad port");
        assert!(e.0.contains("70000"), "{e}");
    }
}
