//! The connection metrics of both listeners (xDS and admin), registered into the
//! server's one registry by [`crate::metrics::Metrics::new`].
//!
//! Names (prefixed `deltapilot_`; counters get `_total`), each labelled
//! `listener` = `xds` or `admin`:
//! - `connections_open{listener}` — TCP connections admitted and not yet closed.
//! - `connections_accepted_total{listener}` — connections admitted.
//! - `connections_refused_total{listener,reason}` — connections closed as soon as
//!   they were accepted because a cap was reached (`max_connections`,
//!   `max_connections_per_source`).
//! - `connections_timed_out_total{listener}` — connections closed because they sent
//!   no request in time: on xDS, no first request (HTTP/2 preface and headers)
//!   within `--xds-handshake-timeout-secs`; on admin, no complete request head
//!   within `--admin-idle-timeout-secs`, the first one or the next one on a
//!   kept-alive connection.
//!
//! What it does NOT do: count HTTP/2 keepalive timeouts (hyper closes those
//! connections itself; they show as `connections_open` going down).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::ListenerKind;
use crate::metrics::Labels;

/// The connection metric families (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct ConnMetrics {
    /// See the module docs.
    pub open: Family<Labels<1>, Gauge>,
    /// See the module docs.
    pub accepted: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub refused: Family<Labels<2>, Counter>,
    /// See the module docs.
    pub timed_out: Family<Labels<1>, Counter>,
}

impl ConnMetrics {
    /// Adds the families to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "connections_open",
            "TCP connections admitted and not yet closed, per listener",
            self.open.clone(),
        );
        registry.register(
            "connections_accepted",
            "TCP connections admitted, per listener",
            self.accepted.clone(),
        );
        registry.register(
            "connections_refused",
            "TCP connections closed on accept because a connection cap was reached",
            self.refused.clone(),
        );
        registry.register(
            "connections_timed_out",
            "TCP connections closed because they sent no request in time",
            self.timed_out.clone(),
        );
    }

    /// The handles of one listener, so that the accept loop and each connection
    /// update them without looking the labels up again.
    pub(crate) fn of(&self, kind: ListenerKind) -> ListenerMetrics {
        // One statement per handle: `get_or_create` returns a read guard on the
        // family, and a second call on the same family in one statement (while
        // the first guard lives) would wait for a write lock forever.
        let k = kind.as_str();
        let open = self.open.get_or_create(&[("listener", k)]).clone();
        let accepted = self.accepted.get_or_create(&[("listener", k)]).clone();
        let refused_total = self
            .refused
            .get_or_create(&[("listener", k), ("reason", "max_connections")])
            .clone();
        let refused_per_source = self
            .refused
            .get_or_create(&[("listener", k), ("reason", "max_connections_per_source")])
            .clone();
        let timed_out = self.timed_out.get_or_create(&[("listener", k)]).clone();
        ListenerMetrics {
            open,
            accepted,
            refused_total,
            refused_per_source,
            timed_out,
        }
    }
}

/// One listener's connection metrics (see [`ConnMetrics::of`]).
#[derive(Debug, Clone)]
pub(crate) struct ListenerMetrics {
    pub(crate) open: Gauge,
    pub(crate) accepted: Counter,
    pub(crate) refused_total: Counter,
    pub(crate) refused_per_source: Counter,
    pub(crate) timed_out: Counter,
}
