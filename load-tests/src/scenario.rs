//! Scenario files (`load-tests/scenarios/*.yaml`): how many simulated Envoys, which
//! API, how big a mesh, what churn at what rate, how the proxies misbehave, and
//! which phases run. Every key has a default, so a scenario names only what it
//! changes; unknown keys are refused so a typo never silently runs the defaults.
//!
//! What it does NOT do: run anything (see `harness`) or parse the command line
//! (the flags that override a scenario live in `LoadgenArgs`).

use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;

/// Which xDS flavour the simulated Envoys speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// Delta ADS (`DeltaAggregatedResources`), Envoy's `DELTA_GRPC`.
    Delta,
    /// State-of-the-world ADS (`StreamAggregatedResources`), Envoy's `GRPC`.
    Sotw,
}

impl Api {
    /// Lower-case name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Delta => "delta",
            Api::Sotw => "sotw",
        }
    }
}

/// A whole scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Scenario {
    /// Short name, shown in the report.
    pub name: String,
    /// What the scenario is for (free text).
    pub description: String,
    /// Number of simulated Envoys, each with its own connection.
    pub proxies: usize,
    /// Delta (default) or state of the world.
    pub api: Api,
    /// How long churn runs, in seconds (0: no churn phase).
    pub duration_secs: u64,
    /// Seed of every random choice, so a run can be repeated.
    pub seed: u64,
    /// The mesh written before the proxies connect.
    pub mesh: MeshSpec,
    /// Churn written while the proxies are connected.
    pub churn: ChurnSpec,
    /// Fractions of proxies that misbehave.
    pub behaviour: BehaviourSpec,
    /// After the initial sync, every proxy drops its connection and reconnects at
    /// once with `initial_resource_versions` (delta): the reconnect storm.
    pub reconnect_storm: bool,
    /// Replay the captured responses to the same proxies through a plain tonic
    /// server (no control-plane logic) to measure the raw fan-out time.
    pub baseline: bool,
    /// Bounds of each phase.
    pub timeouts: Timeouts,
    /// Most connection attempts in flight at once while connecting the fleet:
    /// a burst of 10,000 SYNs at once overflows the server's listen backlog and
    /// turns into one-second SYN retries.
    pub connect_concurrency: usize,
    /// Options passed to the spawned `deltapilot run` (ignored with `--target`).
    pub server: ServerSpec,
}

/// The mesh: services with endpoints.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct MeshSpec {
    /// Number of services.
    pub services: usize,
    /// Endpoints per service at the start.
    pub endpoints_per_service: usize,
    /// Fraction of services with an HTTP port (the rest are TCP): HTTP services
    /// add a virtual host to the shared port-8080 route, TCP ones their own listener.
    pub http_fraction: f64,
    /// Number of namespaces the services spread over.
    pub namespaces: usize,
    /// VirtualServices written with the mesh: rule `k` splits the traffic of
    /// the `k`-th HTTP service between it and the next HTTP service (needs
    /// `rules + 1` HTTP services). The `rule-shift` churn moves their weights.
    pub rules: usize,
}

/// Kinds of churn, weighted.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChurnMix {
    /// An endpoint goes away and comes back (as a new pod: a new address) after
    /// `flap-down-ms`.
    pub flap: u32,
    /// A service gains 1..=`max-step` endpoints.
    pub scale_up: u32,
    /// A service loses 1..=`max-step` endpoints (keeping at least one).
    pub scale_down: u32,
    /// A new service appears with `endpoints-per-service` endpoints.
    pub service_add: u32,
    /// A service disappears.
    pub service_remove: u32,
    /// A VirtualService's weighted split moves (needs `mesh.rules`).
    pub rule_shift: u32,
}

/// Churn: what changes, how often, and where.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChurnSpec {
    /// Events per second (an endpoint appearing or disappearing, a service
    /// appearing or disappearing: one each).
    pub rate: f64,
    /// Exponent of the Zipf distribution that picks which service changes: 0 is
    /// uniform, 1 makes the most popular service change about as often as the
    /// next two together, as in real fleets where a few services deploy constantly.
    pub zipf_exponent: f64,
    /// Weights of each kind of change.
    pub mix: ChurnMix,
    /// How long a flapping endpoint stays away.
    pub flap_down_ms: u64,
    /// Largest scale-up or scale-down step.
    pub max_step: usize,
}

/// Fractions of proxies that misbehave. Each proxy gets at most one behaviour.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct BehaviourSpec {
    /// Proxies that NACK every response after their initial sync.
    pub nack_fraction: f64,
    /// Proxies that read slowly: they wait `slow-delay-ms` before each response.
    pub slow_fraction: f64,
    /// The slow proxies' delay per response.
    pub slow_delay_ms: u64,
    /// Proxies that stop reading after their initial sync and never come back.
    pub stall_fraction: f64,
}

/// Phase bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Timeouts {
    /// Waiting for the server to be ready and to hold the whole mesh.
    pub server_secs: u64,
    /// Connecting and syncing every proxy.
    pub sync_secs: u64,
    /// After churn stops, waiting for the last events to converge.
    pub drain_secs: u64,
    /// The reconnect storm, from disconnect to every proxy back and answered.
    pub reconnect_secs: u64,
}

/// Settings of a spawned server.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerSpec {
    /// `--stall-timeout-secs` of the spawned server.
    pub stall_timeout_secs: u64,
    /// `RUST_LOG` of the spawned server.
    pub rust_log: String,
    /// Query options of the spawned server's embedded log (e.g.
    /// `compact=true&segment_bytes=262144&retention=30s`); empty: none.
    pub log_options: String,
    /// `--checkpoint-every-secs` of the spawned server (default: the server's).
    pub checkpoint_every_secs: Option<u64>,
    /// `--checkpoint-keep` of the spawned server (default: the server's).
    pub checkpoint_keep: Option<usize>,
    /// `--route-delivery` of the spawned server (`inline` or `vhds`;
    /// default: the server's). With `vhds`, delta proxies subscribe to the
    /// virtual hosts of each route configuration that points at VHDS.
    pub route_delivery: Option<String>,
    /// Sample memory, log and checkpoint sizes every this many seconds during
    /// churn, for the soak figures (0: no soak figures).
    pub soak_sample_secs: u64,
    /// The first fraction of churn is warm-up, left out of the soak slopes.
    pub soak_warmup_fraction: f64,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: "default".into(),
            description: String::new(),
            proxies: 100,
            api: Api::Delta,
            duration_secs: 10,
            seed: 1,
            mesh: MeshSpec::default(),
            churn: ChurnSpec::default(),
            behaviour: BehaviourSpec::default(),
            reconnect_storm: false,
            baseline: true,
            timeouts: Timeouts::default(),
            connect_concurrency: 256,
            server: ServerSpec::default(),
        }
    }
}

impl Default for MeshSpec {
    fn default() -> Self {
        MeshSpec {
            services: 100,
            endpoints_per_service: 10,
            http_fraction: 0.8,
            namespaces: 10,
            rules: 0,
        }
    }
}

impl Default for ChurnMix {
    fn default() -> Self {
        ChurnMix {
            flap: 60,
            scale_up: 10,
            scale_down: 10,
            service_add: 10,
            service_remove: 10,
            rule_shift: 0,
        }
    }
}

impl Default for ChurnSpec {
    fn default() -> Self {
        ChurnSpec {
            rate: 5.0,
            zipf_exponent: 1.0,
            mix: ChurnMix::default(),
            flap_down_ms: 1000,
            max_step: 3,
        }
    }
}

impl Default for BehaviourSpec {
    fn default() -> Self {
        BehaviourSpec {
            nack_fraction: 0.0,
            slow_fraction: 0.0,
            slow_delay_ms: 200,
            stall_fraction: 0.0,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            server_secs: 120,
            sync_secs: 600,
            drain_secs: 30,
            reconnect_secs: 120,
        }
    }
}

impl Default for ServerSpec {
    fn default() -> Self {
        ServerSpec {
            stall_timeout_secs: 300,
            rust_log: "warn".into(),
            log_options: String::new(),
            checkpoint_every_secs: None,
            checkpoint_keep: None,
            route_delivery: None,
            soak_sample_secs: 0,
            soak_warmup_fraction: 0.34,
        }
    }
}

impl Scenario {
    /// Reads a scenario file (YAML; JSON is YAML too).
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --scenario {}", path.display()))?;
        let s: Scenario = serde_yaml::from_str(&text)
            .with_context(|| format!("--scenario {}: invalid scenario", path.display()))?;
        Ok(s)
    }

    /// Checks every value, with a message naming the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.proxies == 0 {
            bail!("proxies must be at least 1");
        }
        if self.mesh.services == 0 || self.mesh.endpoints_per_service == 0 {
            bail!("mesh.services and mesh.endpoints-per-service must be at least 1");
        }
        if self.mesh.namespaces == 0 {
            bail!("mesh.namespaces must be at least 1");
        }
        if let Some(how) = &self.server.route_delivery
            && how != "inline"
            && how != "vhds"
        {
            bail!("server.route-delivery must be `inline` or `vhds`, not `{how}`");
        }
        if self.mesh.services > 1_000_000 || self.mesh.endpoints_per_service > 10_000 {
            bail!("mesh is too large (at most 1,000,000 services of 10,000 endpoints)");
        }
        if self.churn.mix.rule_shift > 0 && self.mesh.rules == 0 {
            bail!("churn.mix.rule-shift needs mesh.rules of at least 1");
        }
        if self.mesh.rules >= self.mesh.services {
            bail!(
                "mesh.rules must be below mesh.services (got {} rules for {} services): \
                 each rule splits traffic between two HTTP services",
                self.mesh.rules,
                self.mesh.services
            );
        }
        for (key, v) in [
            ("mesh.http-fraction", self.mesh.http_fraction),
            ("behaviour.nack-fraction", self.behaviour.nack_fraction),
            ("behaviour.slow-fraction", self.behaviour.slow_fraction),
            ("behaviour.stall-fraction", self.behaviour.stall_fraction),
        ] {
            if !(0.0..=1.0).contains(&v) {
                bail!("{key} must be between 0 and 1 (got {v})");
            }
        }
        let b = &self.behaviour;
        if b.nack_fraction + b.slow_fraction + b.stall_fraction > 1.0 {
            bail!("behaviour fractions add up to more than 1");
        }
        if !(self.churn.rate >= 0.0 && self.churn.rate <= 100_000.0) {
            bail!("churn.rate must be between 0 and 100000 events/s");
        }
        if !(0.0..=5.0).contains(&self.churn.zipf_exponent) {
            bail!("churn.zipf-exponent must be between 0 and 5");
        }
        let m = &self.churn.mix;
        if self.churn.rate > 0.0
            && m.flap + m.scale_up + m.scale_down + m.service_add + m.service_remove + m.rule_shift
                == 0
        {
            bail!("churn.mix: every weight is 0 but churn.rate is above 0");
        }
        if self.churn.max_step == 0 {
            bail!("churn.max-step must be at least 1");
        }
        if self.connect_concurrency == 0 {
            bail!("connect-concurrency must be at least 1");
        }
        let t = &self.timeouts;
        if t.server_secs == 0 || t.sync_secs == 0 || t.reconnect_secs == 0 {
            bail!("timeouts must be at least 1 second");
        }
        if self.server.stall_timeout_secs == 0 {
            bail!("server.stall-timeout-secs must be at least 1");
        }
        Ok(())
    }

    /// Whether a churn phase runs.
    pub fn has_churn(&self) -> bool {
        self.duration_secs > 0 && self.churn.rate > 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_loads_and_validates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).expect("scenarios dir") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "yaml") {
                let s = Scenario::load(&p).unwrap_or_else(|e| panic!("{e:#}"));
                s.validate()
                    .unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                n += 1;
            }
        }
        assert!(n >= 9, "found {n} scenarios");
        let rc = Scenario::load(&dir.join("rule-change.yaml")).expect("rule-change");
        assert!(rc.mesh.rules > 0 && rc.churn.mix.rule_shift > 0 && rc.churn.mix.flap == 0);
        // The A/B pair differs in the route delivery only.
        let vhds = Scenario::load(&dir.join("rule-change-vhds.yaml")).expect("vhds");
        assert_eq!(vhds.server.route_delivery.as_deref(), Some("vhds"));
        assert_eq!(
            (
                vhds.proxies,
                vhds.duration_secs,
                vhds.mesh.rules,
                vhds.churn.rate
            ),
            (rc.proxies, rc.duration_secs, rc.mesh.rules, rc.churn.rate)
        );
        let bad = "server: {route-delivery: sideways}\n";
        let e = serde_yaml::from_str::<Scenario>(bad)
            .expect("parse")
            .validate();
        assert!(format!("{:#}", e.expect_err("refused")).contains("route-delivery"));
    }

    #[test]
    fn rule_shifts_need_rules() {
        let s: Scenario = serde_yaml::from_str("churn:\n  mix: {rule-shift: 1}\n").expect("parse");
        let e = s.validate().expect_err("no rules");
        assert!(e.to_string().contains("mesh.rules"), "{e}");
        let s: Scenario = serde_yaml::from_str("mesh: {services: 5, rules: 5}\n").expect("parse");
        assert!(
            s.validate()
                .expect_err("too many")
                .to_string()
                .contains("mesh.rules")
        );
    }

    #[test]
    fn partial_yaml_keeps_defaults_and_unknown_keys_fail() {
        let s: Scenario =
            serde_yaml::from_str("proxies: 7\napi: sotw\nchurn:\n  rate: 2\n").expect("parse");
        assert_eq!((s.proxies, s.api), (7, Api::Sotw));
        assert_eq!(s.churn.rate, 2.0);
        assert_eq!(s.mesh.services, MeshSpec::default().services);
        s.validate().expect("valid");
        let e = serde_yaml::from_str::<Scenario>("proxys: 7\n").expect_err("typo");
        assert!(e.to_string().contains("proxys"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut s = Scenario::default();
        s.behaviour.nack_fraction = 0.7;
        s.behaviour.stall_fraction = 0.7;
        let e = s.validate().expect_err("over 1").to_string();
        assert!(e.contains("add up"), "{e}");
        let mut s = Scenario::default();
        s.mesh.http_fraction = 2.0;
        let e = s.validate().expect_err("fraction").to_string();
        assert!(e.contains("mesh.http-fraction"), "{e}");
    }
}
