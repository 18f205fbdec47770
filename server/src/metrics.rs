//! The server's Prometheus metrics, in one registry that `/metrics` encodes.
//!
//! `deltapilot adapter …` exports a part of them under the same names (see
//! [`Metrics::for_adapter`]): the `adapter_*` ones, `log_connected`,
//! `log_last_append_success_timestamp_seconds`, `log_append_failures_total`,
//! `log_producer_rebuilds_total` and the admin listener's `connections_*`.
//!
//! Names (all prefixed `deltapilot_`; counters get `_total`):
//! - `xds_connected_proxies{api,proxy_type}` — open streams that sent a node.
//! - `xds_streams_total{api}` — streams accepted.
//! - `xds_pushes_total{api,type}` — responses sent.
//! - `xds_resources_sent_total{api,type}` — resources in those responses.
//! - `xds_removals_sent_total{type}` — names in delta `removed_resources`.
//! - `xds_acks_total{api,type}`, `xds_nacks_total{api,type}`.
//! - `xds_convergence_seconds{type}` — histogram: from the observed-at time of the
//!   newest event folded into the snapshot a push was built from, to the ACK of that
//!   push. Only pushes (responses caused by a new snapshot after the type was first
//!   requested) are measured, not a proxy's initial fetch.
//! - `xds_reconnect_known_resources_total{type}` — names delta clients reported in
//!   `initial_resource_versions`.
//! - `xds_reconnect_resent_resources_total{type}` — resources sent at exactly the
//!   version the client reported it already had; a correct server keeps it at 0.
//! - `xds_rejected_requests_total{reason}` — requests refused or ignored
//!   (`unknown_type`, `too_many_names`, `wrong_service`, `too_many_streams`, `stalled`,
//!   `bad_message`: oversized or undecodable; `identity_not_allowed`: a client
//!   certificate outside `--xds-tls-allow`; `identity_mismatch`: a node id that
//!   disagrees with its client certificate).
//! - `xds_tls_handshake_failures_total{reason}` — TLS handshakes the xDS listener
//!   refused (`no_client_certificate`, `bad_client_certificate`, `no_h2_alpn`,
//!   `alert_received`: the client refused the server certificate, `not_tls`,
//!   `incompatible`, `timeout`: no handshake within the handshake timeout, `io`,
//!   `unreadable_client_certificate`, `other`).
//! - `xds_tls_reloads_total{result}` — changes of the TLS files seen (`ok`: new
//!   connections use them; `failed`: they did not load, the old ones serve).
//! - `xds_stale_nonces_total` — ACK/NACKs whose nonce matched nothing (ignored).
//! - `connections_*{listener}` — open, accepted, refused and timed-out TCP
//!   connections of the xDS and admin listeners (see [`crate::conn::metrics`]).
//! - `log_compaction*`, `log_segments`, `log_disk_bytes`, `log_oldest_offset` —
//!   the embedded log's compaction and size on disk (see [`crate::log_metrics`]).
//! - `snapshot_seq` — newest snapshot sequence the server has seen.
//! - `resyncs_pending` — sources whose `COMPLETED` resync marker was written to
//!   several partitions and still waits for some copies (its sweep is deferred
//!   until they arrive). Above 0 for long: a writer died while writing the
//!   copies; the source's next resync completes it.
//! - `endpoints_held` — stored endpoints none of whose services exists yet: they
//!   are kept and served once one does. Brief on a multi-partition log (a service
//!   and its endpoints arrive from different partitions); steadily above 0, a
//!   registry writes endpoints for services it never defines.
//! - `ready` — 1 while `/readyz` answers 200 (caught up once since start, also
//!   while serving the last good state).
//! - `serving_state{state}` — 1 for the current state, 0 for the others:
//!   `catching_up`, `caught_up`, `serving_last_good_state` (the log is
//!   unreachable or ahead of the engine, or an adapter cannot append; see
//!   `readiness`). Alert on `serving_last_good_state` lasting.
//! - `log_connected` — 1 while the log answers (its last append, read, follower
//!   progress or probe succeeded), 0 during an outage.
//! - `log_last_append_success_timestamp_seconds`,
//!   `log_last_read_success_timestamp_seconds` — Unix time of the last append
//!   and read that succeeded (0: none yet). An idle follower at the end of the
//!   log does not move the read time; `log_connected` covers that case.
//! - `log_append_failures_total{reason}` — appends this process made that failed:
//!   `timeout`, `broker`, `fatal` (the Kafka producer was rebuilt),
//!   `invalid_event`, `io`, `other`.
//! - `log_producer_rebuilds_total` — Kafka producers replaced after a fatal error.
//! - `adapter_append_backlog{adapter}` — events an in-process adapter has planned
//!   but not yet durably appended (an upper bound); grows while the log refuses
//!   appends.
//! - `rules{status}`, `rule_problems{code}` — traffic rules by status and their
//!   problems by stable code, as `/debug/rules` reports them (refreshed at most
//!   second while rules exist, and on every rule change).
//! - `credentials{state}`, `credential_problems{name,state}` — gateway
//!   credentials served over SDS: how many are `loaded`, failing (`error`, the
//!   last good one stays served) or `missing` (a proxy asks for a name the
//!   directory lacks); the second names each one not loaded.
//! - `views` — distinct views served: the scoped views (one per valid Sidecar),
//!   the gateway views (one per set of Gateways), plus the three default ones;
//!   server memory for views grows with this, not with the number of proxies.
//! - `gateway_sets_truncated` — 1 while the Gateways' selectors combine into
//!   more sets than `MAX_GATEWAY_SETS`: routers of a set left out get the
//!   default router view (each is also logged when it connects).
//! - `engine_events_applied_total` — events folded into the state (held
//!   endpoint events are counted apart, below).
//! - `engine_events_skipped_total{reason}` — log records the fold could not
//!   apply and left out (`decode`, `schema_too_new`, `empty_payload`, `invalid`,
//!   `key_conflict`, `stale_generation`, `hash_collision`); each is also logged
//!   with its position.
//! - `engine_endpoint_events_held_total` — endpoint events stored although none
//!   of their services exists yet (the `unknown_service` report: held, not
//!   dropped, so counted apart from the skips).
//! - `engine_resource_errors_total` — xDS resources that failed to build or
//!   encode and were not published (each is logged; one still failing is
//!   counted again whenever a batch rebuilds it).
//! - `engine_batches_total` — batches folded.
//! - `engine_fold_seconds`, `engine_regenerate_seconds` — histograms, per batch:
//!   folding its events into the state, and regenerating the xDS resources the
//!   fold touched (measured by the runner around each phase; a slow fold shows
//!   as convergence latency and as log lag).
//! - `log_lag_records` — records in the log the engine has not folded: the
//!   log probe's settled head (measured at least one probe interval ago, see
//!   `log_health`) minus the engine's position, summed over partitions. 0 before
//!   the first two probes succeed. Steadily above 0: the fold cannot keep up
//!   (or is stuck; `serving_state` says which).
//! - `checkpoint_failures_total{reason}` — checkpoints not written (`write_io`,
//!   `write_log`: reading the log's fingerprints, `write_task`) or passed over at
//!   start (`restore_rejected`: damaged or not matching the log or this build;
//!   `restore_unreadable`: the directory could not be read). Every reason is
//!   present from the start at 0.
//! - `xds_stale_proxies` — streams that identified a proxy and have stayed out
//!   of date for longer than [`crate::stale_proxies::STALE_AFTER`]: for one of the
//!   types they requested (and did not NACK last), a response waits for its ACK
//!   or changes wait to be sent, or the stream has not yet taken the current
//!   snapshot into account (`/debug/syncz`'s `STALE`, without its per-name view
//!   check). Recomputed every [`crate::stale_proxies::CHECK_EVERY`] from the
//!   stream registry, not per scrape. NACKing proxies are counted by
//!   `xds_nacks_total` instead.
//! - `adapter_events_emitted_total{adapter}` — events an in-process adapter appended
//!   (`rate()` of it is events per second).
//! - `adapter_view_entities{adapter}` — entities in the adapter's last-known view.
//! - `adapter_registry_up{adapter}` — 1 while the registry answers (files: none broken).
//! - `adapter_resync_completed{adapter}` — 1 once its start-up resync is in the log.
//! - `adapter_malformed_objects_total{adapter}` — registry objects skipped as malformed.
//! - `adapter_oversized_objects_total{adapter}` — registry objects left out because
//!   their event is larger than the log accepts.
//!
//! What it does NOT do: serve HTTP (see `admin`).

use deltapilot_engine::checkpoint::{CheckpointFailure, CheckpointStats};
use deltapilot_engine::runner::{EngineStats, StepTimes};
use deltapilot_log::Position;
use deltapilot_model::fold::SkipReason;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// A gauge holding a float (Unix timestamps in seconds).
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Moves a counter that mirrors a count kept elsewhere up to `value` (the
/// source only grows; hooks run one at a time, under the hooks' lock).
fn raise(counter: &Counter, value: u64) {
    counter.inc_by(value.saturating_sub(counter.get()));
}

/// Labels: `[(name, value); N]`.
pub type Labels<const N: usize> = [(&'static str, &'static str); N];

/// A histogram family built with the convergence buckets.
pub type HistogramFamily = Family<Labels<1>, Histogram, fn() -> Histogram>;

fn convergence_histogram() -> Histogram {
    // 1 ms … ~65 s: covers a local push (milliseconds) up to a badly stuck proxy.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn step_histogram() -> Histogram {
    // 10 µs … ~40 s: a one-event batch up to a cold fold of a large log.
    Histogram::new(exponential_buckets(0.000_01, 4.0, 12))
}

/// Sets gauges from current state when `/metrics` is scraped (see
/// [`Metrics::on_scrape`]).
type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

/// Every metric the server updates.
pub struct Metrics {
    registry: Registry,
    /// Run before each encode, in registration order.
    scrape_hooks: std::sync::Mutex<Vec<ScrapeHook>>,
    /// See the module docs.
    pub connected: Family<Labels<2>, Gauge>,
    /// See the module docs.
    pub streams: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub pushes: Family<Labels<2>, Counter>,
    /// See the module docs.
    pub resources_sent: Family<Labels<2>, Counter>,
    /// See the module docs.
    pub removals_sent: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub acks: Family<Labels<2>, Counter>,
    /// See the module docs.
    pub nacks: Family<Labels<2>, Counter>,
    /// See the module docs.
    pub convergence: HistogramFamily,
    /// See the module docs.
    pub reconnect_known: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub reconnect_resent: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub rejected: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub stale_nonces: Counter,
    /// See the module docs.
    pub xds_tls_handshake_failures: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub xds_tls_reloads: Family<Labels<1>, Counter>,
    /// Connections of both listeners (see [`crate::conn::metrics`]).
    pub connections: crate::conn::ConnMetrics,
    /// See the module docs.
    pub snapshot_seq: Gauge,
    /// See the module docs.
    pub views: Gauge,
    /// See the module docs.
    pub gateway_sets_truncated: Gauge,
    /// See the module docs.
    pub resyncs_pending: Gauge,
    /// Endpoints held for a service that does not exist (yet).
    pub endpoints_held: Gauge,
    /// See the module docs.
    pub ready: Gauge,
    /// Traffic rules by status.
    pub rules: Family<Labels<1>, Gauge>,
    /// Traffic-rule problems by code.
    pub rule_problems: Family<Labels<1>, Gauge>,
    /// Gateway credentials by state (`loaded`, `error`, `missing`).
    pub credentials: Family<Labels<1>, Gauge>,
    /// 1 for each credential that is not loaded, by name and state.
    pub credential_problems: Family<[(&'static str, String); 2], Gauge>,
    /// See the module docs.
    pub engine_applied: Counter,
    /// See the module docs.
    pub engine_skipped: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub engine_held: Counter,
    /// See the module docs.
    pub engine_resource_errors: Counter,
    /// See the module docs.
    pub engine_batches: Counter,
    /// See the module docs.
    pub adapter_events_emitted: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub adapter_view_entities: Family<Labels<1>, Gauge>,
    /// See the module docs.
    pub adapter_registry_up: Family<Labels<1>, Gauge>,
    /// See the module docs.
    pub adapter_resync_completed: Family<Labels<1>, Gauge>,
    /// See the module docs.
    pub adapter_malformed: Family<Labels<1>, Counter>,
    /// Registry objects left out for their size, per adapter.
    pub adapter_oversized: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub adapter_append_backlog: Family<Labels<1>, Gauge>,
    /// See the module docs.
    pub serving_state: Family<Labels<1>, Gauge>,
    /// See the module docs.
    pub log_connected: Gauge,
    /// See the module docs.
    pub log_last_append_success: FloatGauge,
    /// See the module docs.
    pub log_last_read_success: FloatGauge,
    /// See the module docs.
    pub log_append_failures: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub log_producer_rebuilds: Counter,
    /// See the module docs.
    pub engine_fold_seconds: Histogram,
    /// See the module docs.
    pub engine_regenerate_seconds: Histogram,
    /// See the module docs.
    pub log_lag: Gauge,
    /// See the module docs.
    pub checkpoint_failures: Family<Labels<1>, Counter>,
    /// See the module docs.
    pub stale_proxies: Gauge,
    /// The embedded log's compaction and disk metrics.
    pub log_store: crate::log_metrics::LogStoreMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("deltapilot");
        let m = Metrics {
            registry: Registry::default(),
            scrape_hooks: std::sync::Mutex::new(Vec::new()),
            connected: Family::default(),
            streams: Family::default(),
            pushes: Family::default(),
            resources_sent: Family::default(),
            removals_sent: Family::default(),
            acks: Family::default(),
            nacks: Family::default(),
            convergence: Family::new_with_constructor(convergence_histogram),
            reconnect_known: Family::default(),
            reconnect_resent: Family::default(),
            rejected: Family::default(),
            stale_nonces: Counter::default(),
            xds_tls_handshake_failures: Family::default(),
            xds_tls_reloads: Family::default(),
            connections: crate::conn::ConnMetrics::default(),
            snapshot_seq: Gauge::default(),
            views: Gauge::default(),
            gateway_sets_truncated: Gauge::default(),
            resyncs_pending: Gauge::default(),
            endpoints_held: Gauge::default(),
            ready: Gauge::default(),
            rules: Family::default(),
            rule_problems: Family::default(),
            credentials: Family::default(),
            credential_problems: Family::default(),
            engine_applied: Counter::default(),
            engine_skipped: Family::default(),
            engine_held: Counter::default(),
            engine_resource_errors: Counter::default(),
            engine_batches: Counter::default(),
            adapter_events_emitted: Family::default(),
            adapter_view_entities: Family::default(),
            adapter_registry_up: Family::default(),
            adapter_resync_completed: Family::default(),
            adapter_malformed: Family::default(),
            adapter_oversized: Family::default(),
            adapter_append_backlog: Family::default(),
            serving_state: Family::default(),
            log_connected: Gauge::default(),
            log_last_append_success: FloatGauge::default(),
            log_last_read_success: FloatGauge::default(),
            log_append_failures: Family::default(),
            log_producer_rebuilds: Counter::default(),
            engine_fold_seconds: step_histogram(),
            engine_regenerate_seconds: step_histogram(),
            log_lag: Gauge::default(),
            checkpoint_failures: Family::default(),
            stale_proxies: Gauge::default(),
            log_store: crate::log_metrics::LogStoreMetrics::default(),
        };
        registry.register(
            "xds_connected_proxies",
            "Open xDS streams that identified a proxy",
            m.connected.clone(),
        );
        registry.register("xds_streams", "xDS streams accepted", m.streams.clone());
        registry.register("xds_pushes", "xDS responses sent", m.pushes.clone());
        registry.register(
            "xds_resources_sent",
            "Resources sent in xDS responses",
            m.resources_sent.clone(),
        );
        registry.register(
            "xds_removals_sent",
            "Names sent in delta removed_resources",
            m.removals_sent.clone(),
        );
        registry.register("xds_acks", "ACKs received", m.acks.clone());
        registry.register(
            "xds_nacks",
            "NACKs received (error_detail set)",
            m.nacks.clone(),
        );
        registry.register(
            "xds_convergence_seconds",
            "From the observed-at time of the newest event in a pushed snapshot to the ACK of the push",
            m.convergence.clone(),
        );
        registry.register(
            "xds_reconnect_known_resources",
            "Names delta clients reported in initial_resource_versions",
            m.reconnect_known.clone(),
        );
        registry.register(
            "xds_reconnect_resent_resources",
            "Resources sent at the version the client reported it already had (should stay 0)",
            m.reconnect_resent.clone(),
        );
        registry.register(
            "xds_rejected_requests",
            "xDS requests refused or ignored, by reason",
            m.rejected.clone(),
        );
        registry.register(
            "xds_stale_nonces",
            "ACK/NACKs whose nonce matched no response (ignored)",
            m.stale_nonces.clone(),
        );
        registry.register(
            "xds_tls_handshake_failures",
            "TLS handshakes the xDS listener refused, by reason",
            m.xds_tls_handshake_failures.clone(),
        );
        registry.register(
            "xds_tls_reloads",
            "Changes of the xDS TLS files seen, by result (ok, failed)",
            m.xds_tls_reloads.clone(),
        );
        m.connections.register(&mut registry);
        m.log_store.register(&mut registry);
        registry.register(
            "snapshot_seq",
            "Newest snapshot sequence seen by the server",
            m.snapshot_seq.clone(),
        );
        registry.register(
            "resyncs_pending",
            "Sources whose multi-partition COMPLETED resync marker still waits for copies",
            m.resyncs_pending.clone(),
        );
        registry.register(
            "endpoints_held",
            "Stored endpoints none of whose services exists yet (served once one does)",
            m.endpoints_held.clone(),
        );
        registry.register(
            "ready",
            "1 once the engine has caught up with the log head",
            m.ready.clone(),
        );
        registry.register(
            "views",
            "Distinct views served (one per scope: a valid Sidecar and/or a namespace visibility class of restricted VirtualServices; one per set of Gateways; plus the default view of each proxy type)",
            m.views.clone(),
        );
        registry.register(
            "gateway_sets_truncated",
            "1 while the Gateway selectors combine into more sets than get a gateway view (MAX_GATEWAY_SETS): some routers then get the default router view",
            m.gateway_sets_truncated.clone(),
        );
        registry.register(
            "rules",
            "VirtualServices and DestinationRules by status (applied, applied_with_warnings, rejected)",
            m.rules.clone(),
        );
        registry.register(
            "rule_problems",
            "Problems found in traffic rules, by stable code (see /debug/rules)",
            m.rule_problems.clone(),
        );
        registry.register(
            "credentials",
            "Gateway credentials of --credentials-dir by state (see /debug/credentials)",
            m.credentials.clone(),
        );
        registry.register(
            "credential_problems",
            "1 for each credential not loaded (error: unreadable or mismatched; missing: \
             asked for by a proxy, not in the directory), by name",
            m.credential_problems.clone(),
        );
        registry.register(
            "engine_events_applied",
            "Events folded into the engine's state",
            m.engine_applied.clone(),
        );
        registry.register(
            "engine_events_skipped",
            "Log records the fold could not apply and left out, by reason",
            m.engine_skipped.clone(),
        );
        registry.register(
            "engine_endpoint_events_held",
            "Endpoint events stored although none of their services exists yet",
            m.engine_held.clone(),
        );
        registry.register(
            "engine_resource_errors",
            "xDS resources that failed to build or encode and were not published",
            m.engine_resource_errors.clone(),
        );
        registry.register(
            "engine_batches",
            "Batches folded by the engine",
            m.engine_batches.clone(),
        );
        register_adapter(&m, &mut registry);
        registry.register(
            "serving_state",
            "1 for the replica's current state: catching_up, caught_up or serving_last_good_state",
            m.serving_state.clone(),
        );
        register_log_writer(&m, &mut registry);
        registry.register(
            "log_last_read_success_timestamp_seconds",
            "Unix time of the last read of the log that succeeded",
            m.log_last_read_success.clone(),
        );
        registry.register(
            "engine_fold_seconds",
            "Time to fold one batch of events into the state",
            m.engine_fold_seconds.clone(),
        );
        registry.register(
            "engine_regenerate_seconds",
            "Time to regenerate the xDS resources one batch touched",
            m.engine_regenerate_seconds.clone(),
        );
        registry.register(
            "log_lag_records",
            "Records between the log head (measured at least one probe interval ago) and the engine's position",
            m.log_lag.clone(),
        );
        registry.register(
            "checkpoint_failures",
            "Checkpoints not written, or passed over at start, by reason",
            m.checkpoint_failures.clone(),
        );
        registry.register(
            "xds_stale_proxies",
            "Proxies out of date (waiting for an ACK or a push) for longer than the stale threshold",
            m.stale_proxies.clone(),
        );
        // Every reason from the start, so a rate() over them has a baseline.
        for reason in CheckpointFailure::ALL {
            let _ = m
                .checkpoint_failures
                .get_or_create(&[("reason", reason.as_str())]);
        }
        Metrics { registry, ..m }
    }

    /// A registry for `deltapilot adapter …`: only what one adapter process
    /// updates (the `adapter_*` and log-writer metrics and the admin listener's
    /// connections), under the names `run` uses. Nothing an xDS replica alone
    /// has (`ready`, `serving_state`, `xds_*`) is exported, so the replica
    /// alerts do not fire on an adapter.
    pub fn for_adapter() -> Self {
        let all = Metrics::new();
        let mut registry = Registry::with_prefix("deltapilot");
        all.connections.register(&mut registry);
        register_adapter(&all, &mut registry);
        register_log_writer(&all, &mut registry);
        Metrics { registry, ..all }
    }

    /// Sets `serving_state` to `state` (1 for it, 0 for the others) and `ready`.
    pub fn set_serving_state(&self, state: crate::readiness::ServingState) {
        for s in crate::readiness::ServingState::ALL {
            self.serving_state
                .get_or_create(&[("state", s.as_str())])
                .set(i64::from(s == state));
        }
        self.ready.set(i64::from(
            state != crate::readiness::ServingState::CatchingUp,
        ));
    }

    /// Runs `hook` before every encode: for gauges read from state that changes
    /// without an event the server would otherwise notice (a snapshot published
    /// with no xDS change, for one).
    pub fn on_scrape(&self, hook: impl Fn(&Metrics) + Send + Sync + 'static) {
        if let Ok(mut hooks) = self.scrape_hooks.lock() {
            hooks.push(Box::new(hook));
        }
    }

    /// Brings the engine's counters up to `stats`. The engine counts in atomics of
    /// its own (it knows nothing of Prometheus), so a scrape hook copies them here.
    pub fn follow_engine(&self, stats: &EngineStats) {
        raise(&self.engine_applied, stats.events_applied());
        for reason in SkipReason::ALL {
            if reason == SkipReason::UnknownService {
                raise(&self.engine_held, stats.skipped(reason));
            } else {
                raise(
                    &self
                        .engine_skipped
                        .get_or_create(&[("reason", reason.as_str())]),
                    stats.skipped(reason),
                );
            }
        }
        raise(&self.engine_resource_errors, stats.gen_errors());
        raise(&self.engine_batches, stats.batches());
    }

    /// Brings `checkpoint_failures_total` up to `stats` (a scrape hook).
    pub fn follow_checkpoints(&self, stats: &CheckpointStats) {
        for reason in CheckpointFailure::ALL {
            let counter = self
                .checkpoint_failures
                .get_or_create(&[("reason", reason.as_str())]);
            raise(&counter, stats.failures(reason));
        }
    }

    /// Records one batch's fold and regenerate times.
    pub fn observe_step(&self, times: StepTimes) {
        self.engine_fold_seconds.observe(times.fold.as_secs_f64());
        self.engine_regenerate_seconds
            .observe(times.regenerate.as_secs_f64());
    }

    /// Sets `log_lag_records` from the settled head and the engine's position.
    pub fn set_log_lag(&self, head: &Position, engine: &Position) {
        let lag: u64 = (0..head.partitions() as u32)
            .map(|p| head.offset(p).saturating_sub(engine.offset(p)))
            .sum();
        self.log_lag.set(i64::try_from(lag).unwrap_or(i64::MAX));
    }

    /// The registry in Prometheus/OpenMetrics text format, after the scrape hooks.
    pub fn encode(&self) -> String {
        if let Ok(hooks) = self.scrape_hooks.lock() {
            for hook in hooks.iter() {
                hook(self);
            }
        }
        let mut out = String::new();
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }
}

/// Registers the `adapter_*` metrics: shared by `deltapilot run` (in-process
/// adapters) and `deltapilot adapter …` (one adapter), so both export the same
/// names.
fn register_adapter(m: &Metrics, registry: &mut Registry) {
    registry.register(
        "adapter_events_emitted",
        "Events appended by an adapter",
        m.adapter_events_emitted.clone(),
    );
    registry.register(
        "adapter_view_entities",
        "Entities in an adapter's last-known registry view",
        m.adapter_view_entities.clone(),
    );
    registry.register(
        "adapter_registry_up",
        "1 while the adapter's registry answers",
        m.adapter_registry_up.clone(),
    );
    registry.register(
        "adapter_resync_completed",
        "1 once the adapter's start-up resync is in the log",
        m.adapter_resync_completed.clone(),
    );
    registry.register(
        "adapter_malformed_objects",
        "Registry objects an adapter skipped as malformed",
        m.adapter_malformed.clone(),
    );
    registry.register(
        "adapter_oversized_objects",
        "Registry objects an adapter left out because their event is larger than the log accepts",
        m.adapter_oversized.clone(),
    );
    registry.register(
        "adapter_append_backlog",
        "Events an adapter planned but has not durably appended yet",
        m.adapter_append_backlog.clone(),
    );
}

/// Registers the metrics of a process that appends to the log: its health and
/// append failures (every reason from the start, so a rate() over them has a
/// baseline). Shared by `run` and `adapter …`.
fn register_log_writer(m: &Metrics, registry: &mut Registry) {
    registry.register(
        "log_connected",
        "1 while the event log (broker) answers",
        m.log_connected.clone(),
    );
    registry.register(
        "log_last_append_success_timestamp_seconds",
        "Unix time of the last append to the log that succeeded",
        m.log_last_append_success.clone(),
    );
    registry.register(
        "log_append_failures",
        "Appends to the log that failed, by reason",
        m.log_append_failures.clone(),
    );
    registry.register(
        "log_producer_rebuilds",
        "Kafka producers rebuilt after a fatal error",
        m.log_producer_rebuilds.clone(),
    );
    for reason in deltapilot_log::AppendFailure::ALL {
        let _ = m
            .log_append_failures
            .get_or_create(&[("reason", reason.as_str())]);
    }
}
