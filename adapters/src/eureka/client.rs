//! HTTP to the Eureka server: `GET {base}/apps` and `GET {base}/apps/delta` with
//! `Accept: application/json`, each bounded in time and size, each failure turned
//! into an [`Error::Eureka`] with a [`FetchErrorKind`] and a message an operator can
//! act on.
//!
//! Every request carries a total timeout (connect, headers and body); the body is
//! read chunk by chunk and abandoned as soon as it passes the size cap (a declared
//! `Content-Length` above the cap fails before reading anything). A `Content-Type`
//! that is not JSON fails before parsing, so an XML answer (Eureka's default when
//! the `Accept` header is lost by a proxy) or an HTML error page is named as such.
//!
//! TLS: `https://` URLs are verified against the operating system's root
//! certificates, with the rustls `ring` provider that kube already brings in (this
//! crate builds reqwest without a provider of its own; the TLS configuration comes
//! from kube's `ConfigExt::rustls_client_config`, so no process-wide provider is
//! installed by this module). Client certificates are not supported.
//!
//! What it does NOT do: keep state (see `registry`) or retry (the adapter's loop
//! does, with backoff).

use std::time::Duration;

use kube::client::ConfigExt as _;
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};

use super::json::{self, Applications};
use super::options::EurekaOptions;
use super::status::FetchErrorKind;
use crate::{Error, Result};

/// Which document to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fetch {
    /// `GET {base}/apps`.
    Full,
    /// `GET {base}/apps/delta`.
    Delta,
}

/// A bounded HTTP client for one Eureka server.
#[derive(Debug)]
pub(crate) struct Fetcher {
    http: reqwest::Client,
    apps: Url,
    delta: Url,
    timeout: Duration,
    max_bytes: u64,
}

impl Fetcher {
    /// Builds the client; fails on an unusable URL or TLS setup.
    pub(crate) fn new(opts: &EurekaOptions) -> Result<Self> {
        let apps = opts.apps_url()?;
        let delta = opts.delta_url()?;
        let builder = reqwest::Client::builder()
            .timeout(opts.request_timeout)
            .connect_timeout(opts.request_timeout)
            .user_agent(concat!("deltapilot/", env!("CARGO_PKG_VERSION")))
            // Redirects are followed by Eureka's own client only for its cluster
            // resolution, which this adapter does not do.
            .redirect(reqwest::redirect::Policy::none());
        let builder = match tls_config() {
            Ok(tls) => builder.tls_backend_preconfigured(tls),
            Err(reason) => {
                if apps.scheme() == "https" {
                    return Err(Error::InvalidConfig(format!(
                        "eureka URL {}: cannot set up TLS: {reason}",
                        opts.base_url
                    )));
                }
                // Plain http needs no verifier; building one only failed because
                // the system has no root certificates. An empty trust store keeps
                // every https connection refused, which is what we want here.
                tracing::debug!(%reason, "eureka: no TLS verifier; plain http only");
                builder.tls_certs_only(Vec::new())
            }
        };
        let http = builder
            .build()
            .map_err(|e| Error::InvalidConfig(format!("eureka HTTP client: {}", chain(&e))))?;
        Ok(Self {
            http,
            apps,
            delta,
            timeout: opts.request_timeout,
            max_bytes: opts.max_response_bytes,
        })
    }

    /// The URL a fetch of `which` requests.
    pub(crate) fn url(&self, which: Fetch) -> &Url {
        match which {
            Fetch::Full => &self.apps,
            Fetch::Delta => &self.delta,
        }
    }

    /// Fetches and parses one document. Never takes longer than the request timeout
    /// (plus parsing, which runs on a blocking thread).
    pub(crate) async fn fetch(&self, which: Fetch) -> Result<Applications> {
        let url = self.url(which).clone();
        let fail = |kind: FetchErrorKind, reason: String| Error::Eureka {
            url: url.to_string(),
            kind,
            reason,
        };
        // reqwest's own timeout covers the body too; this outer bound also covers
        // anything reqwest might not (and reads the body under the same deadline).
        let body = match tokio::time::timeout(self.timeout, self.get(&url)).await {
            Ok(r) => r.map_err(|(k, m)| fail(k, m))?,
            Err(_) => {
                return Err(fail(
                    FetchErrorKind::Timeout,
                    format!("no complete answer within {:?}", self.timeout),
                ));
            }
        };
        let parsed = tokio::task::spawn_blocking(move || json::parse(&body))
            .await
            .map_err(|e| Error::Task(format!("parsing a eureka response: {e}")))?;
        parsed.map_err(|(k, m)| fail(k, m))
    }

    async fn get(&self, url: &Url) -> Result<Vec<u8>, (FetchErrorKind, String)> {
        let mut resp = self
            .http
            .get(url.clone())
            .header(ACCEPT, HeaderValue::from_static("application/json"))
            .send()
            .await
            .map_err(|e| transport(&e, self.timeout))?;
        let status = resp.status();
        if !status.is_success() {
            return Err((
                FetchErrorKind::HttpStatus,
                format!("the server answered HTTP {status}"),
            ));
        }
        let ctype = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !ctype.as_deref().is_some_and(is_json) {
            return Err((
                FetchErrorKind::ContentType,
                format!(
                    "the answer is {}, not application/json (is this a Eureka server? a proxy dropping the Accept header makes Eureka answer XML, which this adapter does not read)",
                    ctype.map_or_else(|| "without a Content-Type".to_owned(), |c| format!("{c:?}"))
                ),
            ));
        }
        let too_large = |n: String| {
            (
                FetchErrorKind::TooLarge,
                format!(
                    "the answer is {n} bytes, over the {}-byte limit (raise max_response_bytes if the registry is really that large)",
                    self.max_bytes
                ),
            )
        };
        if let Some(len) = resp.content_length().filter(|l| *l > self.max_bytes) {
            return Err(too_large(len.to_string()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| transport(&e, self.timeout))?
        {
            if (body.len() + chunk.len()) as u64 > self.max_bytes {
                return Err(too_large(format!("more than {}", self.max_bytes)));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// `application/json`, `application/json; charset=UTF-8`, `application/vnd.x+json`.
fn is_json(ctype: &str) -> bool {
    let mime = ctype
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

fn transport(e: &reqwest::Error, timeout: Duration) -> (FetchErrorKind, String) {
    if e.is_timeout() {
        (
            FetchErrorKind::Timeout,
            format!("no complete answer within {timeout:?}"),
        )
    } else if e.is_connect() {
        (
            FetchErrorKind::Connect,
            format!("cannot connect: {}", chain(e)),
        )
    } else {
        (FetchErrorKind::Transport, chain(e))
    }
}

/// An error and its causes on one line (reqwest's own message is only the outer
/// layer, e.g. "error sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// A rustls client configuration verifying servers against the OS roots, with the
/// `ring` provider, built by kube (the one TLS stack this crate already carries).
fn tls_config() -> Result<impl std::any::Any, String> {
    let placeholder = "https://eureka.invalid"
        .parse()
        .map_err(|e| format!("{e}"))?;
    kube::Config::new(placeholder)
        .rustls_client_config()
        .map_err(|e| chain(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=UTF-8"));
        assert!(is_json("application/vnd.eureka+json"));
        assert!(!is_json("application/xml"));
        assert!(!is_json("text/html; charset=utf-8"));
        assert!(!is_json(""));
    }

    #[test]
    fn a_client_builds_for_http_and_https() {
        for url in ["http://127.0.0.1:1/eureka/v2", "https://127.0.0.1:1/eureka"] {
            Fetcher::new(&EurekaOptions::new(url)).expect(url);
        }
    }
}
