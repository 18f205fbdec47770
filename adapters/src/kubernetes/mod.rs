//! The Kubernetes adapter (stub: being built).
