//! The Eureka adapter: a Eureka server's registry turned into entity-level events
//! in the log, fetched the way Eureka's own client fetches it.
//!
//! # Fetching
//!
//! - At start (and after any failed fetch, and every
//!   [`EurekaOptions::full_fetch_interval`]): `GET {base}/apps`, the whole registry.
//! - Then every [`EurekaOptions::refresh_interval`]: `GET {base}/apps/delta`, whose
//!   instances carry `actionType` `ADDED`, `MODIFIED` (both upsert) or `DELETED`.
//!   After applying it, the local copy's hashcode (Eureka's `STATUS_COUNT_` per
//!   status, e.g. `DOWN_1_UP_3_`) is compared with the server's `apps__hashcode`;
//!   on a mismatch the full registry is fetched at once.
//! - Both requests send `Accept: application/json`; `base` is the URL given (e.g.
//!   `http://HOST:8080/eureka/v2` or Spring Cloud's `http://HOST:8761/eureka`).
//!
//! # Mapping
//!
//! - **Services.** One per VIP: every name in an instance's `vipAddress` (a
//!   comma-separated list in Eureka), lower-cased, is a hostname; an instance
//!   without `vipAddress` uses its app name, lower-cased. Key
//!   `svc/<namespace>/<vip>`, namespace [`EurekaOptions::namespace`] (default
//!   `eureka`), resolution static (EDS). Ports: `http` (protocol HTTP) numbered by
//!   the enabled `port` most of the VIP's instances use, and `https` (protocol
//!   HTTPS) by the enabled `securePort` most use (left out when equal to `http`);
//!   ties go to the lowest number. A VIP's service exists while it has at least one
//!   valid instance. `secureVipAddress` is not read.
//! - **Endpoints.** One per instance, key `ep/<source>/<APP>/<instanceId>` (source
//!   [`EurekaOptions::source_id`], default `eureka`); the id is `instanceId`, else
//!   the AWS `instance-id`, else `hostName`. Address `ipAddr` (or `hostName` when it
//!   is an IP). Ports `http` → `port` and `https` → `securePort`, each only when
//!   `@enabled`. Labels: `metadata`, without `@` type hints, values as text.
//!   Locality: zone from the AWS `dataCenterInfo.metadata.availability-zone`, else
//!   the `zone` metadata (Spring Cloud's convention); region from the `region`
//!   metadata, else the AWS zone without its letter (`eu-west-1b` → `eu-west-1`).
//!   Weight unset.
//! - **Health** from `status`: `UP` → healthy; `DOWN` → unhealthy; `STARTING` and
//!   `UNKNOWN` (and any other value, as Eureka reads it) → not ready;
//!   `OUT_OF_SERVICE` → draining (an operator took the instance out of rotation:
//!   no new traffic, existing connections may finish).
//!
//! # Changes, resync, generations
//!
//! As in every adapter: the last-known view (key → entity) is kept and only
//! entity-level changes are appended, compared by value, so an empty delta or a
//! full refetch of an unchanged registry appends nothing and never deletes and
//! re-creates. Each start resyncs under a new generation (`resync STARTED`, every
//! entity, `resync COMPLETED`), so what vanished while the adapter was down is
//! swept by the engine. The resync waits for the first successful full fetch: while
//! Eureka has never answered, nothing is appended and the log keeps the previous
//! run's view.
//!
//! # Failures and bad input
//!
//! Every request is bounded by [`EurekaOptions::request_timeout`] (a registry that
//! accepts and never answers fails) and [`EurekaOptions::max_response_bytes`].
//! Refused connections, timeouts, HTTP errors, non-JSON content types, oversized
//! bodies, invalid JSON and JSON that is not an `applications` document each fail
//! the fetch with an [`Error::Eureka`](crate::Error::Eureka) naming the
//! [`FetchErrorKind`]; the last state is kept, nothing is appended, and the fetch is
//! retried with capped exponential backoff and jitter, all visible in
//! [`EurekaAdapterStatus`]. A malformed instance (no id, an address that is not an
//! IP, an invalid port or VIP) is skipped with a warning and counted; one that was
//! valid before keeps its last good version. Lists of one serialised as bare
//! objects and numbers written as strings are read as Eureka writes them.
//!
//! TLS (`https://`): see `client`: verified against the OS roots; no client
//! certificates.
//!
//! What it does NOT do: register with Eureka, follow Eureka's peer list (give the
//! URL of a server or a load balancer), read XML, or talk to the engine (it appends
//! to the log, the log is the truth).

mod adapter;
mod client;
mod json;
mod mapping;
mod options;
mod registry;
mod status;

pub use adapter::EurekaAdapter;
pub use options::EurekaOptions;
pub use status::{EurekaAdapterStatus, FetchErrorKind, InstanceProblem};
