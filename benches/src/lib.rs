//! Shared fixtures for deltapilot's criterion benchmarks (see `benches/benches/`).
//! It does NOT contain benchmarks itself; each push-path stage has its own bench file.

pub mod workload;
