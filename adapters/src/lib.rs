//! deltapilot's registry adapters. Each adapter turns one platform registry's state
//! into entity-level events appended to the event log; adapters never talk to the
//! engine directly (invariant 1: the log is the truth).
pub mod file;
