//! Istio's ServiceEntry and WorkloadEntry mapped to the service model, shared by
//! the file and Kubernetes adapters so both map them the same way (one copy).
//!
//! - **ServiceEntry** → one service per host (`svc/<namespace>/<host>`, host
//!   lower-cased), with Istio's port protocols (from the port name's
//!   `<protocol>-` prefix when none is given) and resolution (`STATIC` → static
//!   endpoints, `DNS`/`DNS_ROUND_ROBIN` → DNS, `NONE` or absent → passthrough), the
//!   entry's labels as service labels; plus one endpoint per inline endpoint
//!   ([`KeyScheme::inline_key`]), belonging to every host.
//! - **ServiceEntry `workloadSelector`** → one endpoint per selected WorkloadEntry
//!   of the same namespace ([`KeyScheme::workload_key`]), belonging to every host;
//!   see `workload` for Istio's rules on labels, ports, locality, network and
//!   health. An entry with both a selector and inline endpoints is malformed, as
//!   Istio's validation rejects it.
//! - Endpoints whose address is not an IP are left out with a reported problem.
//!
//! What it does NOT do: read files or watch the API server, decide precedence
//! between objects that claim the same host (each adapter's view does), or carry
//! the objects as config (the adapters do, with the spec as canonical JSON).

mod service_entry;
mod spec;
mod workload;

pub(crate) use service_entry::{
    KeyScheme, Selector, ServiceEntryFacts, map_service_entry, named_protocol,
};
pub(crate) use spec::{ServiceEntrySpec, WorkloadSpec, WorkloadStatus, null_default};
pub(crate) use workload::{WorkloadFacts, joined_endpoints, map_workload_entry};

#[cfg(test)]
mod tests;
