//! [`KubernetesOptions`]: every knob of the Kubernetes adapter, with the defaults
//! `deltapilot run` and `deltapilot adapter kubernetes` use, and their validation.
//!
//! What it does NOT do: parse flags (the CLI maps its flags onto this struct) or
//! build the kube client (see `adapter`).

use std::path::PathBuf;
use std::time::Duration;

use crate::{Error, Result};

/// Options of a [`KubernetesAdapter`](super::KubernetesAdapter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesOptions {
    /// The cluster's name inside deltapilot: part of every endpoint key
    /// (`ep/k8s/<cluster>/...`) and of the default source id, so that two clusters
    /// appending to one log never write the same key. Default `kubernetes`.
    pub cluster_id: String,
    /// The source id stamped on every event. Default `k8s:<cluster_id>`. It must
    /// stay the same across restarts (the engine scopes resync sweeps by source).
    pub source_id: Option<String>,
    /// The cluster DNS domain: a Service `name` in `ns` becomes the hostname
    /// `name.ns.svc.<cluster_domain>`. Default `cluster.local`.
    pub cluster_domain: String,
    /// Namespaces to watch; empty means all namespaces. Nodes are always watched
    /// cluster-wide (they have no namespace).
    pub namespaces: Vec<String>,
    /// A Kubernetes label selector (`app=web,tier in (a,b),!canary`) restricting the
    /// Services and Istio objects watched. Endpoints follow their Services. `None`
    /// selects everything.
    pub label_selector: Option<String>,
    /// Whether to watch the Istio `networking.istio.io/v1` kinds (VirtualService,
    /// DestinationRule, Gateway, ServiceEntry, WorkloadEntry, Sidecar). A kind
    /// whose CRD is not installed is reported and retried, never fatal; turn this
    /// off when the adapter may not read them (RBAC), since a forbidden kind holds
    /// back the start-up resync. Default `true`.
    pub istio: bool,
    /// Directory for the adapter's state file (the last resync generation). `None`:
    /// generations come from the clock alone.
    pub state_dir: Option<PathBuf>,
    /// Server-side timeout of each watch request (`timeoutSeconds`). A watch that
    /// ends is resumed from its last resourceVersion (no relist), so this only
    /// bounds how long a silently dead connection can go unnoticed (kube adds 5 s).
    pub watch_timeout: Duration,
    /// Idle read timeout of requests made by a client built with
    /// [`KubernetesAdapter::from_kubeconfig`](super::KubernetesAdapter::from_kubeconfig):
    /// a list or watch that receives nothing for this long fails and is retried.
    /// Must exceed [`Self::watch_timeout`], since a quiet watch legitimately sends
    /// nothing until it ends.
    pub read_timeout: Duration,
    /// Connect timeout of a client built by `from_kubeconfig`.
    pub connect_timeout: Duration,
    /// Objects per page of a list (`limit`), which bounds every list response.
    /// `Some` (the default, client-go's 500) lists in pages, each a consistent
    /// read; `None` lists in one response from the API server's watch cache
    /// (`resourceVersion=0`), cheaper for the API server on large clusters but
    /// unbounded in size (and, like any cache read, possibly a little behind).
    pub page_size: Option<u32>,
    /// Most events appended in one batch (resync markers included); at least 3.
    pub append_batch_max: usize,
    /// First delay before retrying a failed list, watch or append.
    pub retry_initial: Duration,
    /// Cap of the exponential retry delay.
    pub retry_max: Duration,
}

impl KubernetesOptions {
    /// Default [`Self::cluster_id`] (Istio's default cluster name, lower-cased).
    pub const DEFAULT_CLUSTER_ID: &'static str = "kubernetes";
    /// Default [`Self::cluster_domain`].
    pub const DEFAULT_CLUSTER_DOMAIN: &'static str = "cluster.local";
    /// Default [`Self::watch_timeout`]: short enough that a dead connection is
    /// noticed within about a minute, long enough that reconnects are rare.
    pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(60);
    /// Default [`Self::read_timeout`]: the watch timeout plus a margin.
    pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(75);
    /// Default [`Self::connect_timeout`].
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default [`Self::page_size`], client-go's.
    pub const DEFAULT_PAGE_SIZE: u32 = 500;
    /// Default [`Self::append_batch_max`]: amortises an fsync, stays far below
    /// Kafka's default batch limits.
    pub const DEFAULT_APPEND_BATCH_MAX: usize = 1000;
    /// Default [`Self::retry_initial`] (client-go's reflector backoff).
    pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(800);
    /// Default [`Self::retry_max`] (client-go's reflector backoff).
    pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(30);

    /// The source id in force: [`Self::source_id`] or `k8s:<cluster_id>`.
    pub fn source(&self) -> String {
        self.source_id
            .clone()
            .unwrap_or_else(|| format!("k8s:{}", self.cluster_id))
    }

    /// Checks the options; called by `KubernetesAdapter::new`.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if let Err(e) = dns_name("cluster id", &self.cluster_id) {
            return bad(e);
        }
        if self
            .source_id
            .as_ref()
            .is_some_and(|id| id.trim().is_empty())
        {
            return bad("the Kubernetes adapter's source id is empty".into());
        }
        if let Err(e) = dns_name("cluster domain", &self.cluster_domain) {
            return bad(e);
        }
        for (i, ns) in self.namespaces.iter().enumerate() {
            if let Err(e) = dns_name("namespace", ns) {
                return bad(e);
            }
            if self.namespaces[..i].contains(ns) {
                return bad(format!("namespace {ns:?} is listed twice"));
            }
        }
        if let Some(sel) = &self.label_selector
            && let Err(e) = check_label_selector(sel)
        {
            return bad(format!("label selector {sel:?}: {e}"));
        }
        if self.watch_timeout < Duration::from_secs(1) {
            return bad(format!(
                "watch_timeout {:?} is below one second (the API takes whole seconds)",
                self.watch_timeout
            ));
        }
        if self.read_timeout <= self.watch_timeout {
            return bad(format!(
                "read_timeout {:?} must exceed watch_timeout {:?}: a quiet watch sends \
                 nothing until it ends",
                self.read_timeout, self.watch_timeout
            ));
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout must be above zero".into());
        }
        if self.page_size == Some(0) {
            return bad("page_size must be above zero (or unset)".into());
        }
        crate::common::append::check_append_options(
            self.append_batch_max,
            self.retry_initial,
            self.retry_max,
        )
    }

    /// Delay before retry number `attempt` (1-based): exponential from
    /// `retry_initial`, capped at `retry_max`, with jitter in `[50%, 100%)` so that
    /// many adapters that lost the same API server do not retry in lockstep.
    pub fn backoff(&self, attempt: u32) -> Duration {
        crate::common::append::backoff(self.retry_initial, self.retry_max, attempt)
    }

    /// Whole seconds of [`Self::watch_timeout`], as the API takes them.
    pub(crate) fn watch_timeout_secs(&self) -> u32 {
        u32::try_from(self.watch_timeout.as_secs()).unwrap_or(u32::MAX)
    }
}

impl Default for KubernetesOptions {
    fn default() -> Self {
        Self {
            cluster_id: Self::DEFAULT_CLUSTER_ID.to_owned(),
            source_id: None,
            cluster_domain: Self::DEFAULT_CLUSTER_DOMAIN.to_owned(),
            namespaces: Vec::new(),
            label_selector: None,
            istio: true,
            state_dir: None,
            watch_timeout: Self::DEFAULT_WATCH_TIMEOUT,
            read_timeout: Self::DEFAULT_READ_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            page_size: Some(Self::DEFAULT_PAGE_SIZE),
            append_batch_max: Self::DEFAULT_APPEND_BATCH_MAX,
            retry_initial: Self::DEFAULT_RETRY_INITIAL,
            retry_max: Self::DEFAULT_RETRY_MAX,
        }
    }
}

/// A lower-case DNS name (labels of `[a-z0-9-]` separated by dots), as namespaces,
/// cluster ids and domains are; they end up in hostnames and keys.
fn dns_name(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?} is not a lower-case DNS name ([a-z0-9-] labels separated by dots)"
        ))
    }
}

/// Checks the syntax of a label selector the way the API server parses it, so a
/// typo fails at startup instead of as an endless 400 from every list. Accepted
/// requirements, comma-separated: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (v,..)`,
/// `k notin (v,..)`.
pub(crate) fn check_label_selector(sel: &str) -> Result<(), String> {
    if sel.trim().is_empty() {
        return Err("it is empty (leave it unset to select everything)".into());
    }
    let mut depth = 0u32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in sel.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "unbalanced ')'".to_owned())?;
            }
            ',' if depth == 0 => {
                parts.push(&sel[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&sel[start..]);
    for part in parts {
        check_requirement(part.trim())?;
    }
    Ok(())
}

fn check_requirement(req: &str) -> Result<(), String> {
    let key_ok = |k: &str| {
        let k = k.trim();
        !k.is_empty()
            && k.len() <= 317
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
    };
    let value_ok = |v: &str| {
        let v = v.trim();
        v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let fail = || Err(format!("requirement {req:?} is not valid"));
    if let Some(k) = req.strip_prefix('!') {
        return if key_ok(k) { Ok(()) } else { fail() };
    }
    for op in ["!=", "==", "="] {
        if let Some((k, v)) = req.split_once(op) {
            return if key_ok(k) && value_ok(v) {
                Ok(())
            } else {
                fail()
            };
        }
    }
    for op in [" notin ", " in "] {
        if let Some((k, set)) = req.split_once(op) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| format!("requirement {req:?}: the set must be in parentheses"))?;
            return if key_ok(k) && inner.split(',').all(value_ok) {
                Ok(())
            } else {
                fail()
            };
        }
    }
    if key_ok(req) { Ok(()) } else { fail() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_nonsense_is_refused() {
        assert!(KubernetesOptions::default().validate().is_ok());
        assert_eq!(KubernetesOptions::default().source(), "k8s:kubernetes");
        let o = |f: fn(&mut KubernetesOptions)| {
            let mut o = KubernetesOptions::default();
            f(&mut o);
            o.validate()
        };
        assert!(o(|o| o.cluster_domain = "Cluster.Local".into()).is_err());
        assert!(o(|o| o.cluster_id = String::new()).is_err());
        assert!(o(|o| o.namespaces = vec!["a".into(), "a".into()]).is_err());
        assert!(o(|o| o.namespaces = vec!["a/b".into()]).is_err());
        assert!(o(|o| o.read_timeout = o.watch_timeout).is_err());
        assert!(o(|o| o.append_batch_max = 2).is_err());
        assert!(o(|o| o.retry_max = Duration::from_millis(1)).is_err());
        assert!(o(|o| o.label_selector = Some("app in (a".into())).is_err());
        assert!(o(|o| o.source_id = Some(" ".into())).is_err());
    }

    #[test]
    fn label_selectors_are_checked_like_the_api_server_parses_them() {
        for ok in [
            "app",
            "!canary",
            "app=web",
            "app==web",
            "tier!=db",
            "env in (prod, staging)",
            "env notin (dev),app=web,!canary",
            "example.com/team=a",
        ] {
            assert!(check_label_selector(ok).is_ok(), "{ok}");
        }
        for bad in ["", "app=we b", "env in prod", "a,,b", "env in (a", "=x"] {
            assert!(check_label_selector(bad).is_err(), "{bad}");
        }
    }
}
