//! The shared end-to-end harness (the workspace's `e2e` crate).

pub use e2e::harness::*;
