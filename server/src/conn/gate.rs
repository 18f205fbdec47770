//! The connection gate: counts the open connections of one listener, in total and
//! per source address, and refuses one above either cap. Each admitted
//! connection holds a [`Permit`]; dropping it (the connection closed) frees the
//! slot.
//!
//! What it does NOT do: accept or close sockets (see `accept`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::metrics::ListenerMetrics;

/// Why the gate refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The listener holds its maximum of connections.
    Total,
    /// The connection's source address holds its maximum.
    PerSource,
}

/// Open connections, under one lock: admitting checks both counts at once.
#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Only filled when a per-source cap is set; an address leaves the map when
    /// its last connection closes, so the map holds at most `total` entries.
    by_source: HashMap<IpAddr, usize>,
}

/// The gate of one listener (cheap to clone; clones share the counts).
#[derive(Debug, Clone)]
pub(crate) struct ConnGate {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    max_total: usize,
    /// 0: no per-source cap.
    max_per_source: usize,
    counts: Mutex<Counts>,
    metrics: ListenerMetrics,
}

impl ConnGate {
    /// A gate admitting at most `max_total` connections, and at most
    /// `max_per_source` from one address (0: no per-source cap).
    pub(crate) fn new(max_total: usize, max_per_source: usize, metrics: ListenerMetrics) -> Self {
        ConnGate {
            inner: Arc::new(Inner {
                max_total,
                max_per_source,
                counts: Mutex::new(Counts::default()),
                metrics,
            }),
        }
    }

    /// Admits a connection from `source`, or says which cap refuses it (and
    /// counts the refusal).
    pub(crate) fn admit(&self, source: IpAddr) -> Result<Permit, Refused> {
        // One address however it arrives: an IPv4 client on a dual-stack socket
        // shows up as `::ffff:a.b.c.d`.
        let source = source.to_canonical();
        let i = &self.inner;
        let refused = {
            let mut c = i.counts.lock().unwrap_or_else(|p| p.into_inner());
            if c.total >= i.max_total {
                Some(Refused::Total)
            } else if i.max_per_source > 0 {
                let n = c.by_source.entry(source).or_insert(0);
                if *n >= i.max_per_source {
                    Some(Refused::PerSource)
                } else {
                    *n += 1;
                    c.total += 1;
                    None
                }
            } else {
                c.total += 1;
                None
            }
        };
        match refused {
            Some(r) => {
                match r {
                    Refused::Total => i.metrics.refused_total.inc(),
                    Refused::PerSource => i.metrics.refused_per_source.inc(),
                };
                Err(r)
            }
            None => {
                i.metrics.accepted.inc();
                i.metrics.open.inc();
                Ok(Permit {
                    gate: self.clone(),
                    source,
                })
            }
        }
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .total
    }

    /// The listener's metrics, for what the connections themselves count.
    pub(crate) fn metrics(&self) -> &ListenerMetrics {
        &self.inner.metrics
    }

    fn release(&self, source: IpAddr) {
        let i = &self.inner;
        {
            let mut c = i.counts.lock().unwrap_or_else(|p| p.into_inner());
            c.total = c.total.saturating_sub(1);
            if i.max_per_source > 0
                && let Some(n) = c.by_source.get_mut(&source)
            {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    c.by_source.remove(&source);
                }
            }
        }
        i.metrics.open.dec();
    }
}

/// One admitted connection's slot, freed on drop.
#[derive(Debug)]
pub(crate) struct Permit {
    gate: ConnGate,
    source: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.release(self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::ListenerKind;
    use crate::conn::metrics::ConnMetrics;

    fn gate(total: usize, per_source: usize) -> (ConnGate, ConnMetrics) {
        let m = ConnMetrics::default();
        (ConnGate::new(total, per_source, m.of(ListenerKind::Xds)), m)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn caps_total_and_per_source_and_frees_on_drop() {
        let (g, m) = gate(3, 2);
        let a1 = g.admit(ip("10.0.0.1")).expect("first");
        let a2 = g.admit(ip("::ffff:10.0.0.1")).expect("second, same host");
        assert_eq!(g.admit(ip("10.0.0.1")).err(), Some(Refused::PerSource));
        let b1 = g.admit(ip("10.0.0.2")).expect("another host");
        assert_eq!(g.admit(ip("10.0.0.3")).err(), Some(Refused::Total));
        assert_eq!(g.open(), 3);
        drop(a1);
        let a3 = g.admit(ip("10.0.0.1")).expect("a slot freed");
        drop((a2, a3, b1));
        assert_eq!(g.open(), 0);
        assert!(g.inner.counts.lock().expect("lock").by_source.is_empty());
        let l = m.of(ListenerKind::Xds);
        assert_eq!(l.accepted.get(), 4);
        assert_eq!(l.open.get(), 0);
        assert_eq!((l.refused_total.get(), l.refused_per_source.get()), (1, 1));
    }

    #[test]
    fn no_per_source_cap_when_zero() {
        let (g, _m) = gate(2, 0);
        let _a = g.admit(ip("10.0.0.1")).expect("first");
        let _b = g.admit(ip("10.0.0.1")).expect("second");
        assert_eq!(g.admit(ip("10.0.0.2")).err(), Some(Refused::Total));
        assert!(g.inner.counts.lock().expect("lock").by_source.is_empty());
    }
}
