//! The file adapter (stub: being built).
