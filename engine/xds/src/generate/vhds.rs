//! VHDS resource shape: a route configuration split into one that carries
//! `vhds` (and no inline virtual hosts) and one `VirtualHost` resource per
//! virtual host, so that a rule edit resends the one virtual host it changes
//! instead of every virtual host of the port (see `docs/vhds.md`).
//!
//! What Envoy requires, and why each choice here:
//! - **Type** `type.googleapis.com/envoy.config.route.v3.VirtualHost`, over
//!   delta xDS only: Envoy refuses a `vhds` config source that is not
//!   `DELTA_GRPC`, or ADS on a stream that is not delta. The `vhds` source is
//!   ADS, so virtual hosts share the ordered stream with everything else.
//! - **Names** `<route configuration name>/<virtual host name>`. Envoy
//!   subscribes to the route configuration's name and matches incoming
//!   virtual hosts by *namespace*, the text before the last `/`; so a virtual
//!   host name holding a `/` would land in another namespace and be ignored
//!   without a NACK. [`split`] refuses one instead.
//! - **The `VirtualHost.name` is the resource name.** Envoy keys the virtual
//!   hosts it got over VHDS by `VirtualHost.name` and removes them by the
//!   names in `removed_resources`: a virtual host whose own name differed
//!   from its resource name could never be removed.
//!
//! The generator builds them from the encoded virtual hosts `rds` caches
//! ([`virtual_host`] renames one in place, no re-encoding), so a rule edit
//! costs the virtual hosts it touches; [`split`] derives the same shape from
//! a whole configuration (the bench `rules` compares both deliveries with it).
//!
//! What it does NOT do: decide who is sent these (see `view::delivered`).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, Vhds};
use prost::Message;

use super::GenError;
use super::common::{ads_config_source, encode};
use crate::{Resource, ResourceType};

/// The VHDS type URL.
pub const VIRTUAL_HOST_TYPE_URL: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";

/// The VHDS resource name of virtual host `vhost` of route configuration
/// `route_config`.
pub fn resource_name(route_config: &str, vhost: &str) -> String {
    format!("{route_config}/{vhost}")
}

/// The VHDS form of route configuration `name`: `vhds` pointing at ADS and
/// no virtual host. It depends on the name only.
pub(crate) fn route_config(name: &str) -> Bytes {
    encode(&RouteConfiguration {
        name: name.to_string(),
        vhds: Some(Vhds {
            config_source: Some(ads_config_source()),
        }),
        ..Default::default()
    })
}

/// The `VirtualHost` resource `name` from `field`, one encoded element of
/// `RouteConfiguration.virtual_hosts` (as `rds` caches it): the element's
/// message with its name (field 1, which prost writes first) replaced by
/// `name` and every other byte kept, so the resource carries exactly the
/// routes of the inline virtual host. `Err` when `name`'s virtual host part
/// holds a `/` (see the module doc) or the bytes are not such a field.
pub(crate) fn virtual_host(field: &[u8], name: &str) -> Result<Bytes, String> {
    use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};
    let vhost = name.split_once('/').map_or(name, |(_, v)| v);
    if vhost.contains('/') {
        return Err(format!(
            "virtual host `{vhost}` has a `/` in its name: Envoy would file it under another \
             route configuration and ignore it"
        ));
    }
    let bad = |what: &str| format!("the encoded virtual host of `{name}` {what}");
    let mut buf = field;
    match decode_key(&mut buf) {
        Ok((2, WireType::LengthDelimited)) => {}
        _ => return Err(bad("is not a `virtual_hosts` field")),
    }
    let len = decode_varint(&mut buf).map_err(|_| bad("has no length"))?;
    if len != buf.len() as u64 {
        return Err(bad("has the wrong length"));
    }
    let mut rest = buf;
    if let Ok((1, WireType::LengthDelimited)) = decode_key(&mut rest) {
        let n = decode_varint(&mut rest).map_err(|_| bad("has a broken name"))?;
        let n = usize::try_from(n).map_err(|_| bad("has a broken name"))?;
        rest = rest.get(n..).ok_or_else(|| bad("has a broken name"))?;
    } else {
        rest = buf;
    }
    let mut out = BytesMut::with_capacity(rest.len() + name.len() + 8);
    encode_key(1, WireType::LengthDelimited, &mut out);
    encode_varint(name.len() as u64, &mut out);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(rest);
    Ok(out.freeze())
}

/// A route configuration as VHDS delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhdsRoutes {
    /// The route configuration with `vhds` (ADS) and no virtual hosts. It
    /// does not change when a virtual host does.
    pub route: Resource,
    /// One resource per virtual host, named by [`resource_name`], in the
    /// route configuration's order.
    pub virtual_hosts: Vec<Resource>,
}

/// Splits encoded route configuration `route` into its VHDS form. `Err` when
/// the bytes do not decode or a virtual host's name holds a `/` (see the
/// module doc).
pub fn split(route: &Resource) -> Result<VhdsRoutes, GenError> {
    let fail = |reason: String| GenError::new(ResourceType::Route, &route.name, reason);
    let mut rc = RouteConfiguration::decode(&route.bytes[..])
        .map_err(|e| fail(format!("does not decode: {e}")))?;
    let vhosts = std::mem::take(&mut rc.virtual_hosts);
    let mut virtual_hosts = Vec::with_capacity(vhosts.len());
    for mut vh in vhosts {
        if vh.name.contains('/') {
            return Err(fail(format!(
                "virtual host `{}` has a `/` in its name: Envoy would file it under another \
                 route configuration and ignore it",
                vh.name
            )));
        }
        vh.name = resource_name(&rc.name, &vh.name);
        virtual_hosts.push(Resource::new(Arc::from(vh.name.as_str()), encode(&vh)));
    }
    rc.vhds = Some(Vhds {
        config_source: Some(ads_config_source()),
    });
    Ok(VhdsRoutes {
        route: Resource::new(route.name.clone(), encode(&rc)),
        virtual_hosts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
    use envoy_types::pb::envoy::config::route::v3::VirtualHost;

    fn route(vhosts: &[(&str, &str)]) -> Resource {
        let rc = RouteConfiguration {
            name: "8080".into(),
            virtual_hosts: vhosts
                .iter()
                .map(|(name, domain)| VirtualHost {
                    name: name.to_string(),
                    domains: vec![domain.to_string()],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        Resource::new(Arc::from("8080"), encode(&rc))
    }

    #[test]
    fn the_route_configuration_points_at_ads_and_keeps_no_virtual_host() {
        let out = split(&route(&[("a:8080", "a"), ("b:8080", "b")])).expect("splits");
        let rc = RouteConfiguration::decode(&out.route.bytes[..]).expect("decodes");
        assert_eq!(rc.name, "8080");
        assert!(rc.virtual_hosts.is_empty());
        let source = rc.vhds.and_then(|v| v.config_source).expect("vhds source");
        assert!(matches!(
            source.config_source_specifier,
            Some(ConfigSourceSpecifier::Ads(_))
        ));
        let names: Vec<&str> = out.virtual_hosts.iter().map(|r| &*r.name).collect();
        assert_eq!(names, ["8080/a:8080", "8080/b:8080"]);
        for r in &out.virtual_hosts {
            let vh = VirtualHost::decode(&r.bytes[..]).expect("decodes");
            assert_eq!(
                vh.name, &*r.name,
                "Envoy removes a virtual host by this name"
            );
        }
    }

    #[test]
    fn a_changed_virtual_host_changes_only_its_own_resource() {
        let before = split(&route(&[("a:8080", "a"), ("b:8080", "b")])).expect("splits");
        let after = split(&route(&[("a:8080", "a"), ("b:8080", "b2")])).expect("splits");
        assert_eq!(before.route.version, after.route.version);
        assert_eq!(
            before.virtual_hosts[0].version,
            after.virtual_hosts[0].version
        );
        assert_ne!(
            before.virtual_hosts[1].version,
            after.virtual_hosts[1].version
        );
    }

    /// The renamed field decodes as the inline virtual host with the VHDS
    /// name, and equals what `split` derives from the whole configuration.
    #[test]
    fn a_cached_field_renamed_equals_the_split_virtual_host() {
        let inline = route(&[("a:8080", "a"), ("b:8080", "b")]);
        let rc = RouteConfiguration::decode(&inline.bytes[..]).expect("decodes");
        let want = split(&inline).expect("splits");
        for (vh, expect) in rc.virtual_hosts.iter().zip(&want.virtual_hosts) {
            let field = encode(&RouteConfiguration {
                virtual_hosts: vec![vh.clone()],
                ..Default::default()
            });
            let got = virtual_host(&field, &expect.name).expect("renames");
            assert_eq!(got, expect.bytes, "{}", expect.name);
        }
        let rc = RouteConfiguration::decode(&route_config("8080")[..]).expect("decodes");
        assert_eq!(
            rc,
            RouteConfiguration::decode(&want.route.bytes[..]).expect("decodes")
        );
        let err = virtual_host(b"\x0a\x00", "8080/a:8080").expect_err("not a vhost field");
        assert!(err.contains("`8080/a:8080`"), "{err}");
        let err = virtual_host(&[0x12, 0x00], "8080/a/b").expect_err("slash");
        assert!(err.contains("`a/b`"), "{err}");
    }

    #[test]
    fn a_slash_in_a_virtual_host_name_is_refused_with_the_reason() {
        let err = split(&route(&[("a/b", "a")])).expect_err("refused");
        assert_eq!(err.resource_type, ResourceType::Route);
        assert_eq!(err.name, "8080");
        assert!(err.reason.contains("`a/b`"), "{}", err.reason);
        let garbage = Resource::new(Arc::from("8080"), bytes::Bytes::from_static(b"\xff\xff"));
        assert!(split(&garbage).is_err());
    }
}
