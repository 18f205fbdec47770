//! deltapilot's server side.
