//! End-to-end tests of cache-d: real daemons, the test origin and real
//! clients on loopback. One test binary, as ripgrep does. The other tools'
//! end-to-end tests are in the workspace's `e2e` crate.

mod answered;
mod backend_tls;
mod backends;
mod caching;
mod cluster;
mod dynamic;
mod esi;
mod files;
mod fleet;
mod gzip;
mod h2;
mod h2_hostile;
mod h3;
mod hooks;
mod hostile;
mod lifecycle;
mod listeners;
mod memory;
mod mgt;
mod params;
mod proxy;
mod storage;
mod tls;
mod util;
mod vcl;
mod vmod_tcp;
mod xkey;
