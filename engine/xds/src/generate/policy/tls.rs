//! `tls` → the cluster's upstream transport socket.
//!
//! - `DISABLE` (or no mode): no transport socket, plaintext.
//! - `SIMPLE`: an `UpstreamTlsContext` with `sni`, and when `caCertificates`
//!   is set a validation context trusting that file and matching
//!   `subjectAltNames` (a `spiffe://` name as a URI SAN, anything else as a
//!   DNS SAN). Without `caCertificates` Envoy does not verify the server; the
//!   model reports that unless `insecureSkipVerify` says so (`DP2111`).
//! - `MUTUAL`: as `SIMPLE`, plus the client certificate and key files.
//! - `ISTIO_MUTUAL`: reported by the model (`DP1042`) and left out here.
//!
//! Certificate paths are read by Envoy on the proxy's machine.
//!
//! What it does NOT do: SDS (`credentialName`) or CRLs: reported by the model.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{
    DataSource, TransportSocket, data_source::Specifier, transport_socket::ConfigType,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, CommonTlsContext, SubjectAltNameMatcher, TlsCertificate,
    UpstreamTlsContext, common_tls_context::ValidationContextType,
    subject_alt_name_matcher::SanType,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher::MatchPattern};

use super::super::common::to_any;
use deltapilot_model::rules::ClientTls;

/// The name Envoy knows the TLS transport socket by.
const TLS_SOCKET: &str = "envoy.transport_sockets.tls";

fn file(path: &str) -> DataSource {
    DataSource {
        specifier: Some(Specifier::Filename(path.to_string())),
        ..Default::default()
    }
}

/// Sets the cluster's transport socket from `tls` (see the module doc).
pub(super) fn apply(c: &mut Cluster, tls: &ClientTls) {
    let mutual = match tls.mode.as_deref() {
        Some("SIMPLE") => false,
        Some("MUTUAL") => true,
        _ => return,
    };
    let mut common = CommonTlsContext::default();
    if mutual && let (Some(cert), Some(key)) = (&tls.client_certificate, &tls.private_key) {
        common.tls_certificates.push(TlsCertificate {
            certificate_chain: Some(file(cert)),
            private_key: Some(file(key)),
            ..Default::default()
        });
    }
    if let Some(ca) = tls.ca_certificates.as_deref().filter(|c| !c.is_empty()) {
        let sans = tls
            .subject_alt_names
            .iter()
            .flatten()
            .map(|san| SubjectAltNameMatcher {
                san_type: if san.starts_with("spiffe://") {
                    SanType::Uri as i32
                } else {
                    SanType::Dns as i32
                },
                matcher: Some(StringMatcher {
                    match_pattern: Some(MatchPattern::Exact(san.clone())),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        common.validation_context_type = Some(ValidationContextType::ValidationContext(
            CertificateValidationContext {
                trusted_ca: Some(file(ca)),
                match_typed_subject_alt_names: sans,
                ..Default::default()
            },
        ));
    }
    let ctx = UpstreamTlsContext {
        common_tls_context: Some(common),
        sni: tls.sni.clone().unwrap_or_default(),
        ..Default::default()
    };
    c.transport_socket = Some(TransportSocket {
        name: TLS_SOCKET.to_string(),
        config_type: Some(ConfigType::TypedConfig(to_any(&ctx))),
    });
}
