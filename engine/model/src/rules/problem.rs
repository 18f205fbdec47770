//! What is wrong with a rule, with a stable code, and what became of it.
//!
//! ## Codes (stable: tools and alerts match on them)
//! | code | severity | meaning | what happens |
//! | --- | --- | --- | --- |
//! | `DP1001` | error | the spec does not fit the schema (wrong type, bad JSON) | object rejected |
//! | `DP1002` | warning | a field this build does not know | field ignored |
//! | `DP1003` | error | a required field is missing or empty (`hosts`, `host`) | object rejected |
//! | `DP1004` | error | a host that cannot be bound (`a.*.com`, `ns/host`, empty label) | object rejected |
//! | `DP1010` | — | retired (named gateways now bind, see `DP1013`) | — |
//! | `DP1011` | warning | a DestinationRule's `exportTo` other than `*`: honoured for sidecars and gateways (by the router's namespace), but proxyless gRPC clients read only public DestinationRules | not applied by those |
//! | `DP1012` | error | `exportTo: ["~"]`: exported to no namespace | applies to nothing |
//! | `DP1013` | error | a `gateways` entry that is neither `name` nor `ns/name` | entry ignored |
//! | `DP1020` | warning | a field deltapilot does not implement yet | field ignored |
//! | `DP1030` | warning | another rule for the same host takes precedence | this rule is shadowed for that host |
//! | `DP1040` | error | two subsets share a name | object rejected |
//! | `DP1041` | error | a subset without a name | object rejected |
//! | `DP1042` | warning | `tls.mode: ISTIO_MUTUAL` needs Istio's CA and SDS | the `tls` setting is ignored |
//! | `DP1101` | warning | `loadBalancer.simple: PASSTHROUGH` cannot apply to an EDS cluster | round robin kept |
//! | `DP1102` | warning | `localityLbSetting` needs per-proxy views | not applied (priority 0 for all) |
//! | `DP1103` | warning | a connection pool field deltapilot does not implement | field ignored |
//! | `DP1104` | warning | a duration that does not parse | field ignored |
//! | `DP1105` | warning | an unknown `loadBalancer.simple` | round robin kept |
//! | `DP1106` | warning | several consistent hash keys | the first is used |
//! | `DP1110` | warning | `MUTUAL` without client certificate and key | no client certificate sent |
//! | `DP1111` | warning | `SIMPLE`/`MUTUAL` without `caCertificates` | server not verified |
//! | `DP1120` | warning | a setting proxyless gRPC would reject | left out for proxyless gRPC clients only, on the host's `GRPC` ports |
//! | `DP1200` | error | Gateway server port number missing or out of range | server dropped |
//! | `DP1201` | error | Gateway server without a valid host | server dropped |
//! | `DP1202` | error | Gateway server host that cannot be bound (`ns/` empty, `~/`, `a.*.com`) | host dropped |
//! | `DP1203` | error | HTTPS server without `tls.mode` | server dropped |
//! | `DP1204` | error | `tls.mode` `ISTIO_MUTUAL`, `OPTIONAL_MUTUAL` or `AUTO_PASSTHROUGH` | server dropped |
//! | `DP1205` | error | `SIMPLE`/`MUTUAL` without a usable `credentialName` | server dropped |
//! | `DP1206` | error | a protocol / TLS mode combination deltapilot does not serve (MONGO, TLS termination, …) | server dropped |
//! | `DP1208` | warning | a Gateway without servers | selects proxies, gives them nothing |
//! | `DP1209` | warning | `httpsRedirect` on a server that is not plain HTTP | ignored |
//! | `DP1301` | error | a Sidecar egress host that is not `namespace/dnsName` | object rejected |
//! | `DP1302` | error | an unknown Sidecar `outboundTrafficPolicy.mode` | object rejected |
//! | `DP1303` | warning | another Sidecar takes precedence for the same workloads | this Sidecar selects nothing there |
//!
//! Route-level problems found when the rule is translated to Envoy config are
//! reported by the xDS crate with codes from `DP2000` up; references the
//! registry cannot satisfy by the server's `/debug/rules` from `DP3000` up;
//! file parse problems by `deltapilot analyze` as `DP0xxx`.

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Applied, but part of the object is ignored or differs from Istio.
    Warning,
    /// The object (or the part named by the path) is not applied.
    Error,
}

impl Severity {
    /// Lower-case name, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One problem with a rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// Stable code (see the table in this module).
    pub code: &'static str,
    /// Where in the spec, e.g. `http[0].route[1].weight` (empty: the whole object).
    pub path: String,
    /// What is wrong and what deltapilot does about it.
    pub message: String,
    /// How bad it is.
    pub severity: Severity,
}

impl Problem {
    /// An error-level problem.
    pub fn error(code: &'static str, path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            code,
            path: path.into(),
            message: message.into(),
            severity: Severity::Error,
        }
    }

    /// A warning-level problem.
    pub fn warning(
        code: &'static str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Problem {
            code,
            path: path.into(),
            message: message.into(),
            severity: Severity::Warning,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(
                f,
                "{} {}: {}",
                self.code,
                self.severity.as_str(),
                self.message
            )
        } else {
            write!(
                f,
                "{} {} at {}: {}",
                self.code,
                self.severity.as_str(),
                self.path,
                self.message
            )
        }
    }
}

/// What became of a rule object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleStatus {
    /// Applied as written.
    Applied,
    /// Applied, with the problems listed (parts ignored or not honoured).
    AppliedWithWarnings(Vec<Problem>),
    /// Not applied at all, for the reasons listed.
    Rejected(Vec<Problem>),
}

impl RuleStatus {
    /// Short name, for reports and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            RuleStatus::Applied => "applied",
            RuleStatus::AppliedWithWarnings(_) => "applied_with_warnings",
            RuleStatus::Rejected(_) => "rejected",
        }
    }

    /// The problems, if any.
    pub fn problems(&self) -> &[Problem] {
        match self {
            RuleStatus::Applied => &[],
            RuleStatus::AppliedWithWarnings(p) | RuleStatus::Rejected(p) => p,
        }
    }
}
