//! The xDS server: per-stream protocol state machines (delta and state of the
//! world) with no I/O, the hand-rolled wire encoding that shares resource bytes
//! across streams, and the thin tonic loops around them.
//!
//! - [`delta::DeltaStream`]: delta xDS per Envoy's `xds_protocol` spec.
//! - [`sotw::SotwStream`]: state of the world, for Envoy's `GRPC` mode and
//!   proxyless gRPC clients.
//! - [`service`]: the gRPC services (ADS and the per-type CDS/EDS/LDS/RDS services).
//! - [`frame`] and [`request`]: gRPC framing by hand in both directions, and lean
//!   request decoding, so that no per-stream buffer outlives its message.
//!
//! What it does NOT do: build resources or decide what a proxy type may see (that is
//! the engine's `xds::generate` and `xds::view`).

mod clock;
pub mod delta;
pub mod encode;
pub mod frame;
#[cfg(test)]
mod fuzz_tests;
mod listen;
mod order;
pub mod registry;
pub mod request;
pub mod service;
pub mod sotw;
mod status;
#[cfg(test)]
mod testutil;

use std::time::Duration;

use deltapilot_xds::ResourceType;
use deltapilot_xds::view::RouteDelivery;

use crate::Error;

/// Limits that keep one stream from hurting the others. Every one is a flag of
/// `deltapilot run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most resource names one stream may subscribe to, over all types; beyond it
    /// the stream is closed with `RESOURCE_EXHAUSTED`.
    pub max_names_per_stream: usize,
    /// Largest request message accepted, in bytes (gRPC `max_decoding_message_size`).
    pub max_request_bytes: usize,
    /// Most resources in one delta response; the rest follow after the ACK, which
    /// keeps responses under the client's message size limit.
    pub max_resources_per_response: usize,
    /// A stream with a response in flight that sends nothing for this long is
    /// closed with `DEADLINE_EXCEEDED` (the client stopped reading or acking).
    pub stall_timeout: Duration,
    /// Most concurrent xDS streams; new ones beyond it get `RESOURCE_EXHAUSTED`.
    pub max_streams: usize,
    /// How delta streams of Envoys are sent route configurations
    /// (`--route-delivery`): not a limit, but a per-stream setting that
    /// travels with them to every stream.
    pub route_delivery: RouteDelivery,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_names_per_stream: 100_000,
            max_request_bytes: 4 * 1024 * 1024,
            max_resources_per_response: 10_000,
            stall_timeout: Duration::from_secs(300),
            max_streams: 100_000,
            route_delivery: RouteDelivery::Inline,
        }
    }
}

/// An ACK of a response built from snapshot `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    /// The snapshot the ACKed response reflected.
    pub seq: u64,
    /// Whether it carried changes published after the type was first requested
    /// (a push), as opposed to the initial answer; only pushes measure convergence.
    pub push: bool,
}

/// What one request did, for the loop's metrics and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestOutcome {
    /// The request's type.
    pub t: Option<ResourceType>,
    /// It ACKed the response in flight.
    pub ack: Option<Acked>,
    /// It NACKed the response in flight, with this message.
    pub nack: Option<String>,
    /// Its `response_nonce` matched nothing this stream sent (ignored).
    pub stale_nonce: bool,
    /// How many names it reported in `initial_resource_versions` (delta reconnects).
    pub initial_versions: usize,
}

/// Nonces unique within a stream: a per-stream counter, in hex. The protocol only
/// asks a nonce to tell one response on the stream from another, and it travels in
/// every response and ACK, so it is kept short (the stream id is not repeated in
/// it: the debug views show it next to the nonce).
#[derive(Debug, Clone, Default)]
pub(crate) struct NonceGen {
    next: u64,
}

impl NonceGen {
    pub(crate) fn next(&mut self) -> String {
        self.next += 1;
        format!("{:x}", self.next)
    }
}

/// The type a request is about. Per-type services may leave `type_url` empty.
pub(crate) fn type_of(url: &str, fixed: Option<ResourceType>) -> Result<ResourceType, Error> {
    match (ResourceType::from_type_url(url), fixed) {
        (Some(t), Some(f)) if t != f => Err(Error::WrongService {
            type_url: url.to_owned(),
            service: f.short_name(),
        }),
        (Some(t), _) => Ok(t),
        (None, Some(f)) if url.is_empty() => Ok(f),
        (None, _) => Err(Error::UnknownTypeUrl(url.to_owned())),
    }
}
