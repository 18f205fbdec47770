//! Who a client certificate says the client is, and whether that may connect
//! and speak for the node it names.
//!
//! A client's identities are its certificate's SAN DNS names and URIs.
//! `--xds-tls-allow ID` entries are compared with them exactly; with any entry
//! given, a client none of whose identities is listed gets `PERMISSION_DENIED`.
//!
//! The node a stream claims must agree with the certificate, following Istio's
//! rule (pilot's `checkConnectionIdentity`): when the certificate carries SPIFFE
//! URIs (`spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT`), one of them
//! must name the node's namespace (from the node id
//! `TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN` or its `NAMESPACE` metadata),
//! and, when the node's metadata gives `SERVICE_ACCOUNT`, that service account.
//! A certificate with no SPIFFE URI (DNS names only) names no namespace, so it
//! binds no node (list it in `--xds-tls-allow` to limit who connects). A client
//! with SPIFFE identities must name its node in its first request. Without
//! this, one proxy could ask for another namespace's view.

use deltapilot_model::Proxy;
use rustls::pki_types::CertificateDer;

/// A SPIFFE workload identity in Kubernetes form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpiffeId {
    /// The trust domain.
    pub trust_domain: String,
    /// The namespace (`ns/…`).
    pub namespace: String,
    /// The service account (`sa/…`).
    pub service_account: String,
}

impl SpiffeId {
    /// Parses `spiffe://TD/ns/NS/sa/SA`; `None` for anything else.
    pub fn parse(uri: &str) -> Option<SpiffeId> {
        let rest = uri.strip_prefix("spiffe://")?;
        let mut parts = rest.split('/');
        let td = parts.next().filter(|s| !s.is_empty())?;
        let (ns_key, ns, sa_key, sa) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if ns_key != "ns"
            || sa_key != "sa"
            || ns.is_empty()
            || sa.is_empty()
            || parts.next().is_some()
        {
            return None;
        }
        Some(SpiffeId {
            trust_domain: td.to_owned(),
            namespace: ns.to_owned(),
            service_account: sa.to_owned(),
        })
    }
}

/// A verified client certificate's identities, as its connection learned them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// SAN DNS names.
    pub dns: Vec<String>,
    /// SAN URIs (SPIFFE ones among them).
    pub uris: Vec<String>,
    /// The certificate's serial number, hex, for logs.
    pub serial: String,
    /// Whether `--xds-tls-allow` admits it (see [`PeerIdentity::allowed_by`]).
    pub allowed: bool,
}

impl PeerIdentity {
    /// The identities of the leaf certificate `der`; `None` if it cannot be
    /// parsed (it was verified already, so that does not happen in practice).
    pub fn of(der: &CertificateDer<'_>) -> Option<PeerIdentity> {
        let cert = webpki::EndEntityCert::try_from(der).ok()?;
        Some(PeerIdentity {
            dns: cert.valid_dns_names().map(str::to_owned).collect(),
            uris: cert.valid_uri_names().map(str::to_owned).collect(),
            serial: cert.serial().iter().map(|b| format!("{b:02x}")).collect(),
            allowed: true,
        })
    }

    /// Every identity, DNS names then URIs.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.dns.iter().chain(&self.uris).map(String::as_str)
    }

    /// The SPIFFE identities among the URIs.
    pub fn spiffe(&self) -> impl Iterator<Item = SpiffeId> + '_ {
        self.uris.iter().filter_map(|u| SpiffeId::parse(u))
    }

    /// Whether `allow` (the `--xds-tls-allow` list) lets this client connect:
    /// an empty list allows every verified client.
    pub fn allowed_by(&self, allow: &[String]) -> bool {
        allow.is_empty() || self.names().any(|n| allow.iter().any(|a| a == n))
    }

    /// Checks a stream whose first request named no node: refused when the
    /// certificate carries SPIFFE identities, which only a named node can be
    /// checked against (otherwise leaving the node out would skip the check).
    pub fn check_no_node(&self) -> Result<(), String> {
        if self.spiffe().next().is_none() {
            return Ok(());
        }
        Err(format!(
            "the stream's first request names no node; a client whose certificate carries \
             SPIFFE identities ({:?}) must send its node there, to be checked against them",
            self.uris
        ))
    }

    /// Checks that `proxy` (the node a stream claims) agrees with this
    /// certificate (see the module docs); the error says what did not match.
    pub fn check_node(&self, proxy: &Proxy) -> Result<(), String> {
        let ids: Vec<SpiffeId> = self.spiffe().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let sa = proxy.metadata.get("SERVICE_ACCOUNT").map(|s| &**s);
        let fits = |id: &SpiffeId| {
            (proxy.namespace.is_empty() || id.namespace == *proxy.namespace)
                && sa.is_none_or(|sa| id.service_account == sa)
        };
        if ids.iter().any(fits) {
            return Ok(());
        }
        let want = match sa {
            Some(sa) => format!("namespace {:?} and service account {sa:?}", proxy.namespace),
            None => format!("namespace {:?}", proxy.namespace),
        };
        Err(format!(
            "node {:?} claims {want}, but its client certificate's SPIFFE identities are {:?}",
            proxy.id, self.uris
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn peer(uris: &[&str]) -> PeerIdentity {
        PeerIdentity {
            dns: vec!["envoy.test".into()],
            uris: uris.iter().map(|s| s.to_string()).collect(),
            serial: String::new(),
            allowed: true,
        }
    }

    fn proxy(ns: &str, sa: Option<&str>) -> Proxy {
        let mut p = Proxy {
            id: Arc::from("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local"),
            namespace: Arc::from(ns),
            ..Proxy::default()
        };
        if let Some(sa) = sa {
            p.metadata
                .insert(Arc::from("SERVICE_ACCOUNT"), Arc::from(sa));
        }
        p
    }

    #[test]
    fn spiffe_ids_parse_only_in_kubernetes_form() {
        let id = SpiffeId::parse("spiffe://cluster.local/ns/shop/sa/web").expect("parses");
        assert_eq!(
            (
                id.trust_domain.as_str(),
                id.namespace.as_str(),
                id.service_account.as_str()
            ),
            ("cluster.local", "shop", "web")
        );
        for bad in [
            "spiffe://cluster.local/ns/shop",
            "spiffe:///ns/shop/sa/web",
            "spiffe://td/ns/shop/sa/web/extra",
            "spiffe://td/sa/web/ns/shop",
            "https://td/ns/shop/sa/web",
            "spiffe://td/ns//sa/web",
        ] {
            assert_eq!(SpiffeId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_allow_list_matches_dns_names_and_uris_exactly() {
        let p = peer(&["spiffe://td/ns/shop/sa/web"]);
        assert!(p.allowed_by(&[]));
        assert!(p.allowed_by(&["envoy.test".into()]));
        assert!(p.allowed_by(&["spiffe://td/ns/shop/sa/web".into()]));
        assert!(!p.allowed_by(&["spiffe://td/ns/shop/sa/other".into(), "envoy".into()]));
    }

    #[test]
    fn the_node_must_agree_with_a_spiffe_identity() {
        let p = peer(&["spiffe://td/ns/shop/sa/web"]);
        assert_eq!(p.check_node(&proxy("shop", None)), Ok(()));
        assert_eq!(p.check_node(&proxy("shop", Some("web"))), Ok(()));
        let e = p
            .check_node(&proxy("bank", None))
            .expect_err("other namespace");
        assert!(
            e.contains("\"bank\"") && e.contains("spiffe://td/ns/shop/sa/web"),
            "{e}"
        );
        assert!(p.check_node(&proxy("shop", Some("admin"))).is_err());
        // No namespace claimed: nothing to disagree with.
        assert_eq!(p.check_node(&proxy("", None)), Ok(()));
        // A DNS-only certificate binds no namespace.
        assert_eq!(peer(&[]).check_node(&proxy("bank", None)), Ok(()));
        // One fitting identity among several is enough.
        let two = peer(&["spiffe://td/ns/a/sa/x", "spiffe://td/ns/bank/sa/y"]);
        assert_eq!(two.check_node(&proxy("bank", Some("y"))), Ok(()));
        // Leaving the node out does not skip the check.
        assert!(p.check_no_node().is_err());
        assert_eq!(peer(&[]).check_no_node(), Ok(()));
    }
}
