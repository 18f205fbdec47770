//! [`EurekaOptions`]: every knob of the Eureka adapter, with the defaults the
//! `deltapilot` commands use, and their validation.
//!
//! What it does NOT do: parse flags (the server's CLI maps its flags onto this
//! struct) or talk HTTP (see `client`).

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;

use crate::{Error, Result};

/// Options of a [`EurekaAdapter`](super::EurekaAdapter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EurekaOptions {
    /// The Eureka REST base URL: everything before `/apps`, e.g.
    /// `http://eureka:8080/eureka/v2` (Netflix's war) or `http://eureka:8761/eureka`
    /// (Spring Cloud). A trailing `/` is ignored. `http` and `https` are accepted.
    pub base_url: String,
    /// The source id stamped on every event, also the second segment of every
    /// endpoint key (`ep/<source>/<APP>/<instanceId>`). It must stay the same across
    /// restarts (the engine sweeps and owns entities per source) and differ between
    /// adapters appending to one log. Default: `eureka`.
    pub source_id: String,
    /// The namespace of every service the adapter writes (`svc/<namespace>/<vip>`).
    /// Default: `eureka`.
    pub namespace: String,
    /// Directory for the adapter's small state file (the last resync generation), so
    /// generations increase even if the clock steps back across a restart. `None`:
    /// generations come from the clock alone.
    pub state_dir: Option<PathBuf>,
    /// How often `GET {base}/apps/delta` is polled (Eureka's own client: 30 s).
    pub refresh_interval: Duration,
    /// A full `GET {base}/apps` is also made this often, as a safety net for changes
    /// a delta cannot show (a Eureka server keeps deltas for about 3 minutes, and the
    /// hashcode only counts statuses). A full fetch that finds nothing new appends
    /// nothing. `None`: only at start, after a failure and on a hashcode mismatch.
    pub full_fetch_interval: Option<Duration>,
    /// Bound of every request, from connecting to the last body byte. A registry
    /// that accepts the connection and never answers fails after this long.
    pub request_timeout: Duration,
    /// Largest response body accepted; a larger one fails the fetch with a clear
    /// error instead of exhausting memory.
    pub max_response_bytes: u64,
    /// Most events appended in one batch (resync markers included); at least 3.
    pub append_batch_max: usize,
    /// First delay before retrying a failed fetch or append.
    pub retry_initial: Duration,
    /// Cap of the exponential retry delay.
    pub retry_max: Duration,
}

impl EurekaOptions {
    /// Default [`Self::source_id`] and [`Self::namespace`].
    pub const DEFAULT_SOURCE: &'static str = "eureka";
    /// Default [`Self::refresh_interval`]: Eureka's client default.
    pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
    /// Default [`Self::full_fetch_interval`].
    pub const DEFAULT_FULL_FETCH_INTERVAL: Duration = Duration::from_secs(600);
    /// Default [`Self::request_timeout`].
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default [`Self::max_response_bytes`]: a registry of tens of thousands of
    /// instances (about 2 KiB of JSON each) fits; a runaway answer does not.
    pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;
    /// Default [`Self::append_batch_max`]: amortises an fsync, stays far below
    /// Kafka's default batch limits.
    pub const DEFAULT_APPEND_BATCH_MAX: usize = 1000;

    /// Options for the Eureka server at `base_url`, everything else at its default.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            source_id: Self::DEFAULT_SOURCE.to_owned(),
            namespace: Self::DEFAULT_SOURCE.to_owned(),
            state_dir: None,
            refresh_interval: Self::DEFAULT_REFRESH_INTERVAL,
            full_fetch_interval: Some(Self::DEFAULT_FULL_FETCH_INTERVAL),
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            max_response_bytes: Self::DEFAULT_MAX_RESPONSE_BYTES,
            append_batch_max: Self::DEFAULT_APPEND_BATCH_MAX,
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
        }
    }

    /// Checks the options; called by `EurekaAdapter::new`, so a misconfiguration
    /// fails at startup with a clear message.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        self.apps_url()?;
        let id = &self.source_id;
        if id.is_empty() || id.chars().any(|c| c.is_whitespace() || c == '/') {
            return bad(format!(
                "eureka source id {id:?} must be non-empty, without spaces or '/' (it is part of every endpoint key)"
            ));
        }
        let ns = &self.namespace;
        if ns.is_empty()
            || ns.len() > 63
            || !ns
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return bad(format!(
                "eureka namespace {ns:?} must be 1-63 characters of [a-z0-9-]"
            ));
        }
        if self.refresh_interval.is_zero() {
            return bad("the eureka refresh interval must be above zero".into());
        }
        if self.full_fetch_interval.is_some_and(|d| d.is_zero()) {
            return bad("the eureka full fetch interval must be above zero".into());
        }
        if self.request_timeout.is_zero() {
            return bad("the eureka request timeout must be above zero".into());
        }
        if self.max_response_bytes < 1024 {
            return bad(format!(
                "max_response_bytes {} is below 1024 (an empty registry is larger)",
                self.max_response_bytes
            ));
        }
        crate::common::append::check_append_options(
            self.append_batch_max,
            self.retry_initial,
            self.retry_max,
        )
    }

    /// `{base}/apps`: the full registry.
    pub fn apps_url(&self) -> Result<Url> {
        self.endpoint("apps")
    }

    /// `{base}/apps/delta`: the recent changes.
    pub fn delta_url(&self) -> Result<Url> {
        self.endpoint("apps/delta")
    }

    fn endpoint(&self, tail: &str) -> Result<Url> {
        let bad = |reason: String| {
            Error::InvalidConfig(format!("eureka URL {:?}: {reason}", self.base_url))
        };
        let base = Url::parse(self.base_url.trim()).map_err(|e| {
            bad(format!(
                "{e} (expected e.g. http://HOST:PORT/eureka/v2 or http://HOST:PORT/eureka)"
            ))
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad(format!(
                "scheme {:?} is not http or https",
                base.scheme()
            )));
        }
        if base.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host".into()));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(bad(
                "a query or fragment is not allowed; give the base path only".into(),
            ));
        }
        let path = format!("{}/{tail}", base.path().trim_end_matches('/'));
        let mut url = base;
        url.set_path(&path);
        Ok(url)
    }

    /// Delay before retry number `attempt` (1-based): exponential from
    /// `retry_initial`, capped at `retry_max`, with jitter in `[50%, 100%)` so that
    /// many adapters that lost the same registry do not retry in lockstep.
    pub fn backoff(&self, attempt: u32) -> Duration {
        crate::common::append::backoff(self.retry_initial, self.retry_max, attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_base_paths_give_the_apps_urls() {
        for (base, apps) in [
            (
                "http://127.0.0.1:8080/eureka/v2",
                "http://127.0.0.1:8080/eureka/v2/apps",
            ),
            (
                "http://127.0.0.1:8761/eureka/",
                "http://127.0.0.1:8761/eureka/apps",
            ),
            ("https://reg.example", "https://reg.example/apps"),
        ] {
            let o = EurekaOptions::new(base);
            o.validate().expect("valid");
            assert_eq!(o.apps_url().expect("apps").as_str(), apps);
            assert_eq!(
                o.delta_url().expect("delta").as_str(),
                format!("{apps}/delta")
            );
        }
    }

    #[test]
    fn nonsense_is_refused_with_the_reason() {
        let o = |f: fn(&mut EurekaOptions)| {
            let mut o = EurekaOptions::new("http://127.0.0.1:1/eureka");
            f(&mut o);
            o.validate().expect_err("invalid").to_string()
        };
        assert!(o(|o| o.base_url = "ftp://x/eureka".into()).contains("scheme"));
        assert!(o(|o| o.base_url = "not a url".into()).contains("eureka URL"));
        assert!(o(|o| o.base_url = "http://x/eureka?a=b".into()).contains("query"));
        assert!(o(|o| o.source_id = "a b".into()).contains("source id"));
        assert!(o(|o| o.namespace = "Eureka".into()).contains("namespace"));
        assert!(o(|o| o.refresh_interval = Duration::ZERO).contains("refresh"));
        assert!(o(|o| o.request_timeout = Duration::ZERO).contains("timeout"));
        assert!(o(|o| o.max_response_bytes = 10).contains("max_response_bytes"));
        assert!(o(|o| o.append_batch_max = 2).contains("append_batch_max"));
        assert!(o(|o| o.retry_max = Duration::from_millis(1)).contains("retry"));
    }
}
