//! The folded registry state (stub: being built by the fold work).

/// The merged registry state a snapshot holds.
#[derive(Debug, Clone, Default)]
pub struct ModelState {}
