//! The server's admin endpoints over plain HTTP/1.0: `/readyz` and `/metrics`
//! (Prometheus text), for readiness, server-side counters and — for a server that
//! is not local — CPU and memory.
//!
//! HTTP/1.0 with `Connection: close` keeps the client to a dozen lines: the
//! response has no chunked encoding and ends when the connection does.
//!
//! What it does NOT do: read `/proc` (see `procstat`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest admin response read: `/metrics` of a busy server is tens of kilobytes.
const MAX_BODY: u64 = 16 * 1024 * 1024;

/// `GET path` on `addr`; returns the status code and body.
pub async fn get(addr: SocketAddr, path: &str, timeout: Duration) -> anyhow::Result<(u16, String)> {
    let work = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to the admin server at {addr}"))?;
        s.write_all(
            format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut buf = Vec::new();
        s.take(MAX_BODY).read_to_end(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .context("malformed HTTP response (no header end)")?;
        let code: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("malformed HTTP status line")?;
        Ok::<_, anyhow::Error>((code, body.to_owned()))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => bail!("GET http://{addr}{path} took longer than {timeout:?}"),
    }
}

/// A `/metrics` page.
#[derive(Debug, Clone, Default)]
pub struct Scrape(String);

impl Scrape {
    /// Fetches `/metrics` from `admin`.
    pub async fn fetch(admin: SocketAddr) -> anyhow::Result<Self> {
        let (code, body) = get(admin, "/metrics", Duration::from_secs(10)).await?;
        if code != 200 {
            bail!("GET /metrics on {admin} returned {code}");
        }
        Ok(Scrape(body))
    }

    /// From text (tests).
    pub fn from_text(text: &str) -> Self {
        Scrape(text.to_owned())
    }

    /// The sum of every sample of `name` over all label sets, if any exists.
    pub fn sum(&self, name: &str) -> Option<f64> {
        let mut total = None;
        for line in self.0.lines() {
            if line.starts_with('#') {
                continue;
            }
            let (metric, value) = match line.rsplit_once(' ') {
                Some(p) => p,
                None => continue,
            };
            let bare = metric.split('{').next().unwrap_or(metric).trim();
            if bare == name
                && let Ok(v) = value.trim().parse::<f64>()
            {
                total = Some(total.unwrap_or(0.0) + v);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_over_labels_and_ignores_lookalikes() {
        let s = Scrape::from_text(
            "# HELP x\n\
             deltapilot_xds_nacks_total{api=\"delta\",type=\"eds\"} 3\n\
             deltapilot_xds_nacks_total{api=\"delta\",type=\"cds\"} 2\n\
             deltapilot_xds_nacks_total_other 100\n\
             process_resident_memory_bytes 1.5e6\n",
        );
        assert_eq!(s.sum("deltapilot_xds_nacks_total"), Some(5.0));
        assert_eq!(s.sum("process_resident_memory_bytes"), Some(1.5e6));
        assert_eq!(s.sum("absent"), None);
    }
}
