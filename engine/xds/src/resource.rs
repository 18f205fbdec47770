//! Resource types, encoded resources and the persistent set of them.

use std::sync::Arc;

use super::ResourceMap;
use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_64;

/// The xDS resource types deltapilot serves, in make-before-break order: a proxy
/// must receive clusters before their endpoints, and both before the listeners and
/// routes that reference them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    Endpoint,
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    Route,
    /// VHDS: `envoy.config.route.v3.VirtualHost`, delta only (see
    /// `docs/vhds.md`). After `Route`: Envoy subscribes to a route
    /// configuration's virtual hosts only once it holds the configuration.
    VirtualHost,
    /// SDS: `envoy.extensions.transport_sockets.tls.v3.Secret`. Not one of
    /// [`ResourceType::ALL`]: secrets never enter a snapshot (key material
    /// stays out of the fold, the log and replay); the server serves them
    /// from its credential store on the same ADS stream, by explicit
    /// subscription only.
    Secret,
}

impl ResourceType {
    /// How many types there are, [`ResourceType::Secret`] included: the size
    /// of arrays indexed by [`ResourceType::index`] for every type.
    pub const COUNT: usize = 6;

    /// The snapshot's types, in push order ([`ResourceType::Secret`] is not
    /// one: see there).
    pub const ALL: [ResourceType; 5] = [
        ResourceType::Cluster,
        ResourceType::Endpoint,
        ResourceType::Listener,
        ResourceType::Route,
        ResourceType::VirtualHost,
    ];

    /// How many types a snapshot holds: the size of arrays indexed by
    /// [`ResourceType::index`] over [`ResourceType::ALL`].
    pub const SNAPSHOT_COUNT: usize = Self::ALL.len();

    /// The v3 type URL.
    pub fn type_url(self) -> &'static str {
        match self {
            ResourceType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ResourceType::Endpoint => {
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
            }
            ResourceType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            ResourceType::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            ResourceType::VirtualHost => "type.googleapis.com/envoy.config.route.v3.VirtualHost",
            ResourceType::Secret => {
                "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
            }
        }
    }

    /// The snapshot type for a v3 type URL, or `None` for one the snapshot
    /// does not hold (secrets included: see [`ResourceType::is_secret_url`]).
    pub fn from_type_url(url: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.type_url() == url)
    }

    /// Whether `url` is the SDS `Secret` type URL.
    pub fn is_secret_url(url: &[u8]) -> bool {
        url == ResourceType::Secret.type_url().as_bytes()
    }

    /// Short name (`cds`, `eds`, `lds`, `rds`, `vhds`) for metrics, CLI flags and debug views.
    pub fn short_name(self) -> &'static str {
        match self {
            ResourceType::Cluster => "cds",
            ResourceType::Endpoint => "eds",
            ResourceType::Listener => "lds",
            ResourceType::Route => "rds",
            ResourceType::VirtualHost => "vhds",
            ResourceType::Secret => "sds",
        }
    }

    /// Index into per-type arrays: `[T; SNAPSHOT_COUNT]` over [`ResourceType::ALL`], or
    /// `[T; ResourceType::COUNT]` (Secret is last).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One encoded xDS resource.
///
/// The bytes are the encoded resource message itself (e.g. a `Cluster`), ready to
/// be wrapped in an `Any` with [`ResourceType::type_url`]. They are encoded exactly
/// once per version and shared by `Bytes` reference counting with every stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    /// Resource name (e.g. `outbound|9080||reviews.default.svc.cluster.local`).
    pub name: Arc<str>,
    /// Content version: [`content_version`] of `bytes`.
    pub version: Arc<str>,
    /// Encoded resource message.
    pub bytes: Bytes,
}

impl Resource {
    /// Wraps encoded bytes, computing the content version.
    pub fn new(name: Arc<str>, bytes: Bytes) -> Self {
        let version = content_version(&bytes);
        Resource {
            name,
            version,
            bytes,
        }
    }

    /// A bodiless resource that only carries a version: what a proxy reported
    /// holding in `initial_resource_versions` when the snapshot has another
    /// version, or none, under that name (see `view::judge`).
    pub fn stand_in(name: Arc<str>, version: Arc<str>) -> Self {
        Resource {
            name,
            version,
            bytes: Bytes::new(),
        }
    }
}

/// The version string of encoded bytes: 16 hex digits of their xxh3-64 hash, so
/// identical content always has the same version and never triggers a push.
pub fn content_version(bytes: &[u8]) -> Arc<str> {
    // Written into a stack buffer: `format!` allocated a `String` per resource
    // only to copy it into the `Arc` (a restore builds 60k of them).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let h = xxh3_64(bytes);
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = HEX[((h >> (60 - 4 * i)) & 0xf) as usize];
    }
    Arc::from(std::str::from_utf8(&out).unwrap_or_default())
}

/// The digest one resource adds to a resources hash (the wrapping sum over a
/// set, [`hash::resources_hash`](crate::hash::resources_hash)): the xxh3 of `tag` (its
/// [`ResourceKind`](super::ResourceKind)'s), the name's length, the name and
/// the version, in that order. Here because the generator adds and takes away
/// digests as it writes each resource. In a stack buffer when they fit (they
/// nearly always do), so no buffer is allocated per resource.
pub fn entry_hash(tag: u8, r: &Resource) -> u64 {
    let len = 9 + r.name.len() + r.version.len();
    let fill = |buf: &mut [u8]| {
        buf[0] = tag;
        buf[1..9].copy_from_slice(&(r.name.len() as u64).to_le_bytes());
        buf[9..9 + r.name.len()].copy_from_slice(r.name.as_bytes());
        buf[9 + r.name.len()..].copy_from_slice(r.version.as_bytes());
    };
    let mut stack = [0u8; 256];
    if len <= stack.len() {
        fill(&mut stack[..len]);
        xxh3_64(&stack[..len])
    } else {
        let mut heap = vec![0u8; len];
        fill(&mut heap);
        xxh3_64(&heap)
    }
}

/// Every resource of a snapshot.
///
/// Listeners come in two flavours because sidecars and proxyless gRPC clients need
/// different listener shapes for the same service port (`0.0.0.0:<port>` with an
/// HCM or tcp_proxy, versus an `api_listener` named `<host>:<port>`); a proxy's view
/// picks one. Clusters come in two flavours too, under the same names: on ports
/// declared `GRPC` proxyless clients take a variant without the policy they
/// would reject (see `generate::policy`). Everything else is shared by all
/// proxy types.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSet {
    /// CDS for Envoys (sidecars, routers): one cluster per service port (and
    /// subset), with the DestinationRule's full policy.
    pub clusters: ResourceMap,
    /// CDS for proxyless gRPC clients: the same names as `clusters`, the same
    /// resource (one `Arc`) wherever the bytes are equal, and the proxyless
    /// variant where they differ (policy on a `GRPC` port).
    pub grpc_clusters: ResourceMap,
    /// EDS: one ClusterLoadAssignment per cluster.
    pub endpoints: ResourceMap,
    /// LDS for sidecars (and routers that no Gateway selects).
    pub sidecar_listeners: ResourceMap,
    /// LDS for proxyless gRPC clients.
    pub grpc_listeners: ResourceMap,
    /// RDS: one RouteConfiguration per HTTP port, virtual hosts inline.
    pub routes: ResourceMap,
    /// RDS for delta Envoys served over VHDS: the same names as the port
    /// configurations of `routes`, each with `vhds` (ADS) and no virtual host,
    /// so a rule edit never changes them (see `generate::vhds`).
    pub vhds_routes: ResourceMap,
    /// VHDS: the virtual hosts of `vhds_routes`, `<port>/<host>:<port>`.
    pub virtual_hosts: ResourceMap,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version is the hash's 16 lower-case hex digits, leading zeros kept.
    #[test]
    fn the_content_version_is_the_hashs_sixteen_hex_digits() {
        let mut leading_zero = false;
        for i in 0..2_000u32 {
            let bytes = i.to_le_bytes();
            let h = xxh3_64(&bytes);
            leading_zero |= h >> 60 == 0;
            assert_eq!(&*content_version(&bytes), format!("{h:016x}"), "{i}");
        }
        assert!(leading_zero, "a hash with a leading zero digit was checked");
    }

    /// The entry hash is the xxh3 of tag, name length, name and version laid end
    /// to end, for names that fit the stack buffer and names that do not.
    #[test]
    fn entry_hash_hashes_the_fields_end_to_end() {
        for n in [0usize, 1, 45, 230, 231, 232, 1_000] {
            let name: Arc<str> = "n".repeat(n).into();
            let r = Resource::new(name.clone(), bytes::Bytes::from_static(b"\x0a\x01x"));
            let mut want = vec![3u8];
            want.extend_from_slice(&(n as u64).to_le_bytes());
            want.extend_from_slice(name.as_bytes());
            want.extend_from_slice(r.version.as_bytes());
            assert_eq!(entry_hash(3, &r), xxh3_64(&want), "name of {n} bytes");
        }
    }
}
