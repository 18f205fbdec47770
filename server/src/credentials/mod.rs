//! Gateway credentials served over SDS: `--credentials-dir DIR`, where
//! `DIR/NAME/tls.crt` and `DIR/NAME/tls.key` (and `ca.crt`, for MUTUAL) are the
//! layout of a mounted Kubernetes TLS Secret. A Gateway server's
//! `credentialName: NAME` makes its listener ask for secret `kubernetes://NAME`
//! (and `kubernetes://NAME-cacert` for the CA), as Istio names them, which the
//! proxy fetches on its ADS stream.
//!
//! - [`CredentialStore`]: the secrets read from the directory, published as an
//!   immutable [`SecretSet`] on a watch channel, with what is wrong with each
//!   credential (by name) for `/debug/credentials` and the metrics.
//! - `load`: one directory, read as a matched certificate/key pair.
//! - `watch`: rescans on every change under the directory (Kubernetes swaps
//!   the `..data` symlink atomically, which a watch on `tls.crt` alone never
//!   sees, so the whole tree is watched) and periodically as a fallback.
//! - `stream`: the per-stream SDS protocol state, delta and SotW, beside the
//!   snapshot types' state machines on the same ADS stream.
//!
//! Key material never leaves the secrets themselves: it is not logged, not in
//! any debug view (they show names, states and a version of the certificate
//! only), and never written to the event log, so replay cannot show it.
//! Secrets are not part of snapshots (see `ResourceType::Secret`).
//!
//! A credential that fails to load keeps the last good pair served and is
//! reported; one a proxy asks for that does not exist is reported as missing.
//!
//! What it does NOT do: read Kubernetes Secrets through the API (an adapter may
//! feed the same store later), or decide which secrets a proxy needs (its
//! listeners do, through its subscriptions).

mod load;
pub mod stream;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use deltapilot_model::rules::valid_credential;
use deltapilot_xds::generate::{SECRET_PREFIX, ca_secret_name, secret_name};
use deltapilot_xds::{Resource, ResourceMap, content_version};
use serde::Serialize;
use tokio::sync::watch as channel;

use crate::metrics::Metrics;

pub use load::check_pair;
pub use watch::spawn_watcher;

/// Most credential directories read; beyond it the rest are reported, not
/// read (a mesh has tens of gateway certificates, not thousands).
pub const MAX_CREDENTIALS: usize = 4096;

/// Most distinct secret names tracked as requested by proxies; names beyond it
/// are still served, only not reported as missing.
pub const MAX_REQUESTED_NAMES: usize = 16384;

/// The suffix of the CA secret of a credential.
pub const CA_SUFFIX: &str = "-cacert";

/// Every secret currently served, immutable; a new value on each change.
#[derive(Debug, Clone, Default)]
pub struct SecretSet {
    /// Secrets by name (`kubernetes://NAME`, `kubernetes://NAME-cacert`), encoded.
    pub secrets: ResourceMap,
    /// Increases with every published change.
    pub seq: u64,
}

/// What is known about one credential, for reports (no key material).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialReport {
    /// Secret name.
    pub name: String,
    /// `loaded`, `error` (the last good one, if any, is still served) or
    /// `missing` (asked for by a proxy, not in the directory).
    pub state: &'static str,
    /// Why, for `error` and `missing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Version of the secret served (a hash of its bytes), if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving_version: Option<String>,
    /// Streams subscribed to it.
    pub subscribers: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// Secret name → why its credential directory's last read failed.
    errors: BTreeMap<Arc<str>, String>,
    /// A problem with the directory as a whole.
    scan_error: Option<String>,
    /// Secret name → streams subscribed to it.
    requested: BTreeMap<Arc<str>, usize>,
}

/// The credentials of `--credentials-dir`, read, checked and published.
pub struct CredentialStore {
    dir: Option<PathBuf>,
    tx: channel::Sender<Arc<SecretSet>>,
    inner: Mutex<Inner>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl CredentialStore {
    /// A store reading `dir` (none: nothing is served and every requested
    /// secret is missing), reporting to `metrics`. Reads the directory once
    /// now; see [`spawn_watcher`] for changes.
    pub fn new(dir: Option<PathBuf>, metrics: Option<Arc<Metrics>>) -> Arc<Self> {
        let (tx, _) = channel::channel(Arc::new(SecretSet::default()));
        let store = Arc::new(CredentialStore {
            dir,
            tx,
            inner: Mutex::new(Inner::default()),
            metrics,
        });
        store.rescan();
        store
    }

    /// The directory read, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The secrets served now.
    pub fn current(&self) -> Arc<SecretSet> {
        self.tx.borrow().clone()
    }

    /// A receiver that sees every published change.
    pub fn subscribe(&self) -> channel::Receiver<Arc<SecretSet>> {
        self.tx.subscribe()
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the directory again and publishes what changed. A credential
    /// that fails keeps its last good secrets. Returns whether the served set
    /// changed.
    pub fn rescan(&self) -> bool {
        let prev = self.current();
        let mut next = ResourceMap::new();
        let mut errors = BTreeMap::new();
        let mut scan_error = None;
        if let Some(dir) = &self.dir {
            match list(dir) {
                Ok((names, overflow)) => {
                    if overflow > 0 {
                        scan_error = Some(format!(
                            "{}: {overflow} credential directories beyond the first \
                             {MAX_CREDENTIALS} are not read",
                            dir.display()
                        ));
                    }
                    for dir_name in names {
                        let (name, ca_name) = (secret_name(&dir_name), ca_secret_name(&dir_name));
                        match load::load_dir(&dir.join(&*dir_name)) {
                            Ok(pem) => {
                                put(
                                    &mut next,
                                    &prev,
                                    &name,
                                    load::certificate_secret(&name, &pem),
                                );
                                if let Some(ca) = &pem.ca {
                                    put(&mut next, &prev, &ca_name, load::ca_secret(&ca_name, ca));
                                }
                            }
                            Err(why) => {
                                for n in [&name, &ca_name] {
                                    if let Some(r) = prev.secrets.get(n) {
                                        next.insert(r.clone());
                                    }
                                }
                                errors.insert(name, why);
                            }
                        }
                    }
                }
                Err(why) => {
                    // The directory itself is unreadable: keep serving what was read.
                    next = prev.secrets.clone();
                    scan_error = Some(why);
                }
            }
        }
        let changed = next.len() != prev.secrets.len()
            || next
                .iter()
                .any(|(n, r)| prev.secrets.get(n).is_none_or(|o| o.version != r.version));
        {
            let mut inner = self.inner();
            for (name, why) in &errors {
                if inner.errors.get(name) != Some(why) {
                    tracing::warn!(credential = %name, reason = %why, "credential not loaded; the last good one, if any, stays served");
                }
            }
            inner.errors = errors;
            if scan_error.is_some() && inner.scan_error != scan_error {
                tracing::warn!(reason = ?scan_error, "credentials directory");
            }
            inner.scan_error = scan_error;
        }
        if changed {
            let seq = prev.seq + 1;
            self.tx
                .send_replace(Arc::new(SecretSet { secrets: next, seq }));
            tracing::info!(seq, "credentials changed");
        }
        self.publish_metrics();
        changed
    }

    /// Notes that a stream subscribed to `name`.
    pub fn request(&self, name: &Arc<str>) {
        {
            let mut inner = self.inner();
            let known = inner.requested.contains_key(name);
            if !known && inner.requested.len() >= MAX_REQUESTED_NAMES {
                return;
            }
            *inner.requested.entry(name.clone()).or_default() += 1;
        }
        self.publish_metrics();
    }

    /// Notes that a stream no longer subscribes to `name`.
    pub fn release(&self, name: &str) {
        {
            let mut inner = self.inner();
            if let Some(n) = inner.requested.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    inner.requested.remove(name);
                }
            }
        }
        self.publish_metrics();
    }

    /// Every credential served, failing or asked for, by name.
    pub fn report(&self) -> (Vec<CredentialReport>, Option<String>) {
        let set = self.current();
        let inner = self.inner();
        let mut out: BTreeMap<String, CredentialReport> = BTreeMap::new();
        for (name, r) in set.secrets.iter() {
            out.insert(
                name.to_string(),
                CredentialReport {
                    name: name.to_string(),
                    state: "loaded",
                    reason: None,
                    serving_version: Some(r.version.to_string()),
                    subscribers: 0,
                },
            );
        }
        for (name, why) in &inner.errors {
            let e = out.entry(name.to_string()).or_insert(CredentialReport {
                name: name.to_string(),
                state: "error",
                reason: None,
                serving_version: None,
                subscribers: 0,
            });
            e.state = "error";
            e.reason = Some(why.clone());
        }
        for (name, n) in &inner.requested {
            let e = out
                .entry(name.to_string())
                .or_insert_with(|| CredentialReport {
                    name: name.to_string(),
                    state: "missing",
                    reason: Some(missing_reason(self.dir.as_deref(), name)),
                    serving_version: None,
                    subscribers: 0,
                });
            e.subscribers = *n;
        }
        (out.into_values().collect(), inner.scan_error.clone())
    }

    fn publish_metrics(&self) {
        let Some(m) = &self.metrics else { return };
        let (reports, _) = self.report();
        m.credentials.clear();
        m.credential_problems.clear();
        for r in &reports {
            m.credentials.get_or_create(&[("state", r.state)]).inc();
            if r.state != "loaded" {
                m.credential_problems
                    .get_or_create(&[("name", r.name.clone()), ("state", r.state.to_string())])
                    .set(1);
            }
        }
    }
}

/// Why a requested secret is missing, in words.
fn missing_reason(dir: Option<&Path>, name: &str) -> String {
    let Some(dir) = dir else {
        return "no --credentials-dir is set".to_string();
    };
    let Some(name) = name.strip_prefix(SECRET_PREFIX) else {
        return format!(
            "not a secret deltapilot serves: credentials are named `{SECRET_PREFIX}NAME` \
             (`{SECRET_PREFIX}NAME{CA_SUFFIX}` for a CA), NAME a directory of {}",
            dir.display()
        );
    };
    match name.strip_suffix(CA_SUFFIX) {
        Some(base) => format!(
            "the CA of credential {base:?} is read from {}",
            dir.join(base).join("ca.crt").display()
        ),
        None => format!(
            "no credential directory {} (with tls.crt and tls.key)",
            dir.join(name).display()
        ),
    }
}

/// `r`, or the previous resource when its bytes are the same (so an
/// unchanged secret keeps its shared bytes).
fn put(next: &mut ResourceMap, prev: &SecretSet, name: &Arc<str>, bytes: bytes::Bytes) {
    let version = content_version(&bytes);
    match prev.secrets.get(name) {
        Some(old) if old.version == version => {
            next.insert(old.clone());
        }
        _ => {
            next.insert(Arc::new(Resource::new(name.clone(), bytes)));
        }
    }
}

/// The credential directory names under `dir` (sorted; hidden entries and
/// names that cannot be a credentialName skipped), and how many were left out
/// beyond [`MAX_CREDENTIALS`].
fn list(dir: &Path) -> Result<(Vec<Arc<str>>, usize), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for e in entries.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || !valid_credential(&name) {
            continue;
        }
        if e.path().is_dir() {
            names.push(Arc::from(name.as_str()));
        }
    }
    names.sort();
    let overflow = names.len().saturating_sub(MAX_CREDENTIALS);
    names.truncate(MAX_CREDENTIALS);
    Ok((names, overflow))
}

#[cfg(test)]
mod tests;
