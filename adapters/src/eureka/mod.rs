//! The Eureka adapter (stub: being built).
