//! The fold (stub: being built).
