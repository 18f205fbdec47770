//! Test support shared by deltapilot's test suites. A dev-dependency only: no
//! product crate depends on it.
//!
//! - [`cut`]: a TCP proxy a test cuts to simulate a broker outage;
//! - [`events`]: event builders;
//! - [`kafka`]: the real broker the Kafka tests use (a missing one fails the test);
//! - [`log`]: reading back what an adapter appended to a real embedded log;
//! - [`segments`]: a small-segment embedded log, and damage to it;
//! - [`tls`]: certificates made by openssl for TLS tests;
//! - [`eureka`]: a fake Eureka server speaking Eureka's wire protocol over real
//!   HTTP on 127.0.0.1 (no Eureka server can run on these machines).
//!
//! What it does NOT do: mock anything that can run here. Every helper talks to real
//! files, real sockets or a real broker.

pub mod cut;
pub mod eureka;
pub mod events;
pub mod kafka;
pub mod log;
pub mod segments;
pub mod tls;
