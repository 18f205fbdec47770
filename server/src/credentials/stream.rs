//! The SDS side of one ADS stream, delta and SotW: which secrets the proxy
//! subscribed to, what it holds, the one response in flight. No I/O: the
//! stream loop feeds it requests and secret sets and sends what it returns.
//!
//! - Only explicit subscriptions are served (Envoy subscribes to a secret by
//!   name when a listener references it); a wildcard asks for nothing.
//! - Unsubscribing forgets what was sent, so a later subscription is answered
//!   again.
//! - A subscribed secret that does not exist is not answered (the proxy keeps
//!   waiting for it) and is reported as missing by the store. One that
//!   disappears from the directory is not removed from proxies that hold it
//!   (their listeners keep working with it); it is reported missing.
//! - The stream's node is read by the snapshot types' state machine: a stream
//!   whose only requests are for secrets is served, but not identified.
//! - Nonces start with `s`, so they never collide with the snapshot types'
//!   (hexadecimal) ones on the same stream.
//!
//! What it does NOT do: read files (see the store) or touch snapshot types.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use deltapilot_xds::{Resource, ResourceType};
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;

use super::{CredentialStore, SecretSet};
use crate::Error;
use crate::xds::encode::{DeltaOut, SotwOut};
use crate::xds::request::{DeltaRequest, text};
use crate::xds::{Acked, RequestOutcome};

/// Most secret names one stream may subscribe to (a gateway needs two per
/// TLS server).
pub const MAX_SECRETS_PER_STREAM: usize = 1024;

/// The SDS state of one stream, generic over the protocol flavour.
pub trait SecretSide: Send + 'static {
    /// The request type of the stream.
    type Req;
    /// The response type of the stream.
    type Out;
    /// A fresh state that reports its subscriptions to `store`.
    fn new(store: Arc<CredentialStore>) -> Self;
    /// Whether `req` is about secrets (and so for this state).
    fn is_secret(req: &Self::Req) -> bool;
    /// Takes one secret request.
    fn on_request(&mut self, req: &Self::Req) -> Result<RequestOutcome, Error>;
    /// The next response, if one is due and none is in flight, with how many
    /// secrets it carries.
    fn next(&mut self, set: &SecretSet) -> Option<(Self::Out, usize)>;
    /// Whether a response waits for its ACK.
    fn in_flight(&self) -> bool;
}

/// What both flavours share: subscriptions, the store registration, nonces.
struct Subs {
    store: Arc<CredentialStore>,
    names: BTreeSet<Arc<str>>,
    /// Name → the version the proxy holds (sent, or reported on reconnect).
    held: BTreeMap<Arc<str>, Arc<str>>,
    in_flight: Option<String>,
    next_nonce: u64,
}

impl Subs {
    fn new(store: Arc<CredentialStore>) -> Self {
        Subs {
            store,
            names: BTreeSet::new(),
            held: BTreeMap::new(),
            in_flight: None,
            next_nonce: 0,
        }
    }

    fn subscribe(&mut self, name: &str) -> Result<(), Error> {
        if name == "*" || name.is_empty() || self.names.contains(name) {
            return Ok(());
        }
        if self.names.len() >= MAX_SECRETS_PER_STREAM {
            return Err(Error::TooManyNames {
                limit: MAX_SECRETS_PER_STREAM,
                requested: self.names.len() + 1,
            });
        }
        let n: Arc<str> = Arc::from(name);
        self.store.request(&n);
        self.names.insert(n);
        Ok(())
    }

    fn unsubscribe(&mut self, name: &str) {
        if self.names.remove(name) {
            self.store.release(name);
        }
        self.held.remove(name);
    }

    fn nonce(&mut self) -> String {
        self.next_nonce += 1;
        format!("s{:x}", self.next_nonce)
    }

    /// ACK or NACK of the response in flight, by nonce.
    fn answer(&mut self, nonce: &str, error: Option<String>, out: &mut RequestOutcome) {
        if nonce.is_empty() {
            return;
        }
        if self.in_flight.as_deref() != Some(nonce) {
            out.stale_nonce = true;
            return;
        }
        self.in_flight = None;
        match error {
            Some(msg) => out.nack = Some(msg),
            None => {
                out.ack = Some(Acked {
                    seq: 0,
                    push: false,
                })
            }
        }
    }

    /// Subscribed secrets whose version differs from what the proxy holds.
    fn changed(&self, set: &SecretSet) -> Vec<Arc<Resource>> {
        self.names
            .iter()
            .filter_map(|n| set.secrets.get(n))
            .filter(|r| self.held.get(&r.name) != Some(&r.version))
            .cloned()
            .collect()
    }
}

impl Drop for Subs {
    fn drop(&mut self) {
        for n in &self.names {
            self.store.release(n);
        }
    }
}

fn outcome() -> RequestOutcome {
    RequestOutcome {
        t: Some(ResourceType::Secret),
        ..Default::default()
    }
}

/// SDS over delta ADS.
pub struct DeltaSecrets(Subs);

impl SecretSide for DeltaSecrets {
    type Req = DeltaRequest;
    type Out = DeltaOut;

    fn new(store: Arc<CredentialStore>) -> Self {
        DeltaSecrets(Subs::new(store))
    }

    fn is_secret(req: &DeltaRequest) -> bool {
        ResourceType::is_secret_url(&req.type_url)
    }

    fn on_request(&mut self, req: &DeltaRequest) -> Result<RequestOutcome, Error> {
        let s = &mut self.0;
        let mut out = outcome();
        let error = req.error_detail.as_ref().map(|e| e.message.clone());
        s.answer(text(&req.response_nonce)?, error, &mut out);
        for v in &req.initial_resource_versions {
            s.held
                .insert(Arc::from(text(&v.name)?), Arc::from(text(&v.version)?));
        }
        out.initial_versions = req.initial_resource_versions.len();
        for n in &req.subscribe {
            s.subscribe(text(n)?)?;
        }
        for n in &req.unsubscribe {
            s.unsubscribe(text(n)?);
        }
        Ok(out)
    }

    fn next(&mut self, set: &SecretSet) -> Option<(DeltaOut, usize)> {
        let s = &mut self.0;
        if s.in_flight.is_some() {
            return None;
        }
        let resources = s.changed(set);
        if resources.is_empty() {
            return None;
        }
        for r in &resources {
            s.held.insert(r.name.clone(), r.version.clone());
        }
        let nonce = s.nonce();
        s.in_flight = Some(nonce.clone());
        let n = resources.len();
        Some((
            DeltaOut {
                type_url: Some(ResourceType::Secret),
                nonce,
                resources,
                removed: Vec::new(),
            },
            n,
        ))
    }

    fn in_flight(&self) -> bool {
        self.0.in_flight.is_some()
    }
}

/// SDS over state-of-the-world ADS: every response holds every subscribed
/// secret that exists.
pub struct SotwSecrets {
    subs: Subs,
    /// The version of the last response's whole state.
    sent_version: Option<String>,
}

impl SecretSide for SotwSecrets {
    type Req = DiscoveryRequest;
    type Out = SotwOut;

    fn new(store: Arc<CredentialStore>) -> Self {
        SotwSecrets {
            subs: Subs::new(store),
            sent_version: None,
        }
    }

    fn is_secret(req: &DiscoveryRequest) -> bool {
        ResourceType::is_secret_url(req.type_url.as_bytes())
    }

    fn on_request(&mut self, req: &DiscoveryRequest) -> Result<RequestOutcome, Error> {
        let s = &mut self.subs;
        let mut out = outcome();
        let error = req.error_detail.as_ref().map(|e| e.message.clone());
        s.answer(&req.response_nonce, error, &mut out);
        let want: BTreeSet<&str> = req.resource_names.iter().map(String::as_str).collect();
        let gone: Vec<Arc<str>> = s
            .names
            .iter()
            .filter(|n| !want.contains(&***n))
            .cloned()
            .collect();
        for n in gone {
            s.unsubscribe(&n);
        }
        for n in want {
            s.subscribe(n)?;
        }
        if req.response_nonce.is_empty() && !req.version_info.is_empty() {
            // A reconnect: the proxy holds the state of that version.
            self.sent_version = Some(req.version_info.clone());
        }
        Ok(out)
    }

    fn next(&mut self, set: &SecretSet) -> Option<(SotwOut, usize)> {
        if self.subs.in_flight.is_some() {
            return None;
        }
        let resources: Vec<Arc<Resource>> = self
            .subs
            .names
            .iter()
            .filter_map(|n| set.secrets.get(n).cloned())
            .collect();
        let version = state_version(&resources);
        if self.sent_version.as_deref() == Some(version.as_str()) || resources.is_empty() {
            return None;
        }
        self.sent_version = Some(version.clone());
        let nonce = self.subs.nonce();
        self.subs.in_flight = Some(nonce.clone());
        let n = resources.len();
        Some((
            SotwOut {
                type_url: Some(ResourceType::Secret),
                version_info: version,
                nonce,
                resources,
            },
            n,
        ))
    }

    fn in_flight(&self) -> bool {
        self.subs.in_flight.is_some()
    }
}

/// The version of a SotW state: a hash of its names and versions.
fn state_version(resources: &[Arc<Resource>]) -> String {
    let mut buf = Vec::new();
    for r in resources {
        buf.extend_from_slice(r.name.as_bytes());
        buf.push(0);
        buf.extend_from_slice(r.version.as_bytes());
        buf.push(0);
    }
    deltapilot_xds::content_version(&buf).to_string()
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
