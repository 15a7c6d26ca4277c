//! End-to-end tests: real cache-d, test origin and reader processes on
//! loopback. One test binary, as ripgrep does.

mod backends;
mod bench;
mod caching;
mod cli;
mod hooks;
mod hostile;
mod lifecycle;
mod logfiles;
mod mgt;
mod proxy;
mod readers;
mod stat;
mod util;
mod vcl;
