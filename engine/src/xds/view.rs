//! Per-proxy views and diffs (stub: being built).
