//! End-to-end tests of the tools beside cache-d — cache-stat, cache-log,
//! cache-ncsa, cache-bench — and of every program's command line and man
//! page, against real cache-d processes on loopback.

mod bench;
mod cli;
mod grafana;
mod k8s;
mod logfiles;
mod package;
mod readers;
mod stat;

/// The shared harness, under the name the tests use.
mod util {
    pub use e2e::harness::*;
}
