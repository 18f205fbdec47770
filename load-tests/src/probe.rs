//! Waits until a server holds the whole mesh: one extra delta client (not part of
//! the fleet, not measured) subscribes like an Envoy and watches every expected
//! cluster's assignment reach its expected number of endpoints.
//!
//! The server may say ready before its adapters have appended everything (a log
//! written by another process, a file adapter still scanning); proxies connecting
//! then would measure the mesh loading, not the initial sync.
//!
//! What it does NOT do: measure anything.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::proxy::fleet::{endpoint, open_stream};
use crate::proxy::{ClientState, node};
use crate::scenario::Api;

/// Connects to `target` and returns once every cluster of `expected` has its
/// expected endpoint count, or fails after `within`.
pub async fn wait_for_mesh(
    target: SocketAddr,
    expected: &HashMap<Arc<str>, usize>,
    within: Duration,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + within;
    let ep = endpoint(target, within)?;
    // An id no fleet proxy uses.
    let mut state = ClientState::new(Api::Delta, node(usize::MAX >> 1));
    let opening = state.initial_requests(false);
    let (tx, mut inbound) = open_stream(&ep, Api::Delta, within, opening)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))
        .context("the mesh probe could not open a stream")?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let missing = |seen: &HashMap<String, usize>| {
        expected
            .iter()
            .filter(|(c, n)| seen.get(&***c) != Some(*n))
            .count()
    };
    loop {
        if state.synced() && missing(&seen) == 0 {
            return Ok(start.elapsed());
        }
        let msg = tokio::time::timeout_at(deadline, inbound.message()).await;
        let bytes = match msg {
            Err(_) => bail!(
                "the server did not serve the whole mesh within {within:?}: {} of {} clusters \
                 missing or incomplete",
                missing(&seen),
                expected.len()
            ),
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) => bail!("the server ended the probe's stream"),
            Ok(Err(s)) => bail!("the probe's stream failed: {s}"),
        };
        let h = state
            .on_response(&bytes, false)
            .context("the probe got an undecodable response")?;
        for r in h.requests {
            tx.send(r).await.context("the probe's connection closed")?;
        }
        for (c, addrs) in h.cla {
            seen.insert(c, addrs.len());
        }
        for c in h.gone {
            seen.remove(&c);
        }
    }
}
