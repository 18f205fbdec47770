//! The `deltapilot` binary.
fn main() {}
