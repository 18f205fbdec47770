//! xDS resource generation (stub: being built).
