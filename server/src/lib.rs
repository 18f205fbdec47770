//! deltapilot's server side: the xDS gRPC server (delta and SotW ADS) and the admin
//! HTTP server. The `deltapilot` binary (`src/main.rs`) wires them to the engine and
//! the adapters.
//!
//! What it does NOT do: fold events or build resources (that is the engine), or
//! watch registries (that is the adapters).
