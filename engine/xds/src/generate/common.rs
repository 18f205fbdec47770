//! Names, shared message pieces and encoding used by every resource builder.
//!
//! Naming follows Istio so that operators can read a config dump the way they read
//! Istio's:
//! - cluster (and its ClusterLoadAssignment): `outbound|<port>||<hostname>`
//! - sidecar outbound listener: `0.0.0.0_<port>` (fixed, whatever the bind address)
//! - route configuration shared by a port's HTTP services: `<port>`
//! - proxyless gRPC listener and its dedicated route configuration: `<hostname>:<port>`
//!
//! What it does NOT do: decide which resources exist (see `incremental` and
//! `reference`) or build whole resources (see `cds`, `eds`, `lds`, `rds`).

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{
    AggregatedConfigSource, ApiVersion, ConfigSource, config_source::ConfigSourceSpecifier,
};
use envoy_types::pb::google::protobuf::{Any, Duration};
use prost::{Message, Name};

use deltapilot_model::Hostname;

/// Name of the cluster (and ClusterLoadAssignment) for one service port.
pub(crate) fn cluster_name(port: u16, host: &Hostname) -> Arc<str> {
    let mut digits = [0u8; 5];
    joined(&["outbound|", decimal(port, &mut digits), "||", host.as_str()])
}

/// `parts` end to end in one shared string, built in a stack buffer when it
/// fits. Why not `format!`: that ran the formatting machinery and allocated
/// twice (the `String`, then the `Arc` it is copied into), and deciding a
/// host's resources in an endpoint batch names two per port.
fn joined(parts: &[&str]) -> Arc<str> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut stack = [0u8; 256];
    let Some(buf) = stack.get_mut(..len) else {
        return Arc::from(parts.concat());
    };
    let mut at = 0;
    for p in parts {
        buf[at..at + p.len()].copy_from_slice(p.as_bytes());
        at += p.len();
    }
    // Whole `str`s laid end to end are UTF-8; the default is never taken.
    Arc::from(std::str::from_utf8(buf).unwrap_or_default())
}

/// The decimal digits of `n`, written into `buf`.
fn decimal(mut n: u16, buf: &mut [u8; 5]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

/// Name of the sidecar outbound listener for a port number.
pub(crate) fn sidecar_listener_name(port: u16) -> Arc<str> {
    Arc::from(format!("0.0.0.0_{port}"))
}

/// Name of the route configuration shared by every HTTP service on a port.
pub(crate) fn port_route_name(port: u16) -> Arc<str> {
    Arc::from(port.to_string())
}

/// Name of a proxyless gRPC listener and of its dedicated route configuration.
pub(crate) fn grpc_name(host: &Hostname, port: u16) -> Arc<str> {
    let mut digits = [0u8; 5];
    joined(&[host.as_str(), ":", decimal(port, &mut digits)])
}

/// "Fetch this over the ADS stream you already have", in v3: the only config source
/// proxyless gRPC accepts for RDS and EDS, and what Envoy needs to keep all types on
/// one ordered stream.
pub(crate) fn ads_config_source() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        resource_api_version: ApiVersion::V3 as i32,
        ..Default::default()
    }
}

/// Packs a message into an `Any` with its canonical type URL.
pub(crate) fn to_any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

/// Encodes a resource message once; these bytes are what every stream shares.
pub(crate) fn encode<M: Message>(m: &M) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

/// A protobuf `Duration` from a std one (saturating; xDS durations are small).
pub(crate) fn duration(d: std::time::Duration) -> Duration {
    Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_istio() {
        let h = Hostname::new("reviews.bookinfo.svc.cluster.local");
        assert_eq!(
            &*cluster_name(9080, &h),
            "outbound|9080||reviews.bookinfo.svc.cluster.local"
        );
        assert_eq!(&*sidecar_listener_name(9080), "0.0.0.0_9080");
        assert_eq!(&*port_route_name(9080), "9080");
        assert_eq!(
            &*grpc_name(&h, 9080),
            "reviews.bookinfo.svc.cluster.local:9080"
        );
    }

    /// The hand-built names equal `format!`'s, for every digit count and for
    /// hostnames past the stack buffer.
    #[test]
    fn names_are_built_as_format_would() {
        for len in [1, 30, 240, 247, 248, 249, 300] {
            let h = Hostname::new(&"h".repeat(len));
            for port in [0, 7, 10, 99, 100, 9080, 10_000, 65_535] {
                assert_eq!(&*cluster_name(port, &h), format!("outbound|{port}||{h}"));
                assert_eq!(&*grpc_name(&h, port), format!("{h}:{port}"));
            }
        }
    }

    #[test]
    fn duration_keeps_subsecond_precision() {
        let d = duration(std::time::Duration::from_millis(1500));
        assert_eq!((d.seconds, d.nanos), (1, 500_000_000));
    }
}
