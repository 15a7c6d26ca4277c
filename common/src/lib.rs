//! cachekit's shared library: every byte two cachekit processes share.
//!
//! * [`adm`] is the admin protocol: framing, tokenizing, authentication.
//! * [`instance`] resolves `-n NAME` to an instance directory.
//! * [`counters`] is the one static counter table (names, kinds, descriptions).
//! * [`segment`] lays out the shared-memory segment (header, counter names,
//!   counter values, log ring) and attaches readers to it.
//! * [`log`] is the request log: the ring in the segment (`ring`), tags and
//!   records (`vsl`), log files (`vslfile`), following an instance's log
//!   (`follow`), transactions (`group`) and the `-q` query language
//!   (`query`).
//! * [`background`] runs a log reader as a service (-D, -P, signals).
//! * [`bounded`] caps connections and time for the network listeners.
//! * [`httpdate`] formats HTTP dates.
//! * [`glob`] is the fnmatch-style matcher varnishstat's `-f` uses.
//! * `resolve` (feature `dns`) looks names up: getaddrinfo or a DNS stub
//!   resolver pointed at chosen name servers.

pub mod adm;
pub mod args;
pub mod background;
pub mod bounded;
pub mod counters;
pub mod glob;
pub mod httpdate;
pub mod instance;
pub mod log;
#[cfg(feature = "dns")]
pub mod resolve;
pub mod segment;
pub mod tls;
