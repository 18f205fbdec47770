//! The fake Eureka server (`deltapilot_testkit::eureka`, shared with the server's
//! tests) and this crate's harness that runs the Eureka adapter against it.

#![allow(dead_code, unreachable_pub)]

pub mod harness;

#[allow(unused_imports)] // each test binary uses its own subset
pub use deltapilot_testkit::eureka::*;
