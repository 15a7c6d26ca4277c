//! cachekit's shared library: every byte two cachekit processes share.
//!
//! * [`adm`] is the admin protocol: framing, tokenizing, authentication.
//! * [`instance`] resolves `-n NAME` to an instance directory.
//! * [`counters`] is the one static counter table (names, kinds, descriptions).
//! * [`segment`] lays out the shared-memory segment (header, counter names,
//!   counter values, log ring) and attaches readers to it.
//! * [`ring`] is the log ring: batched appends by the daemon, torn-free
//!   polling by readers.
//! * [`vsl`] holds log tags and the record encoding (Varnish 7.0–7.2 layout).
//! * [`vslfile`] reads and writes log files (`-w`/`-r`, Varnish's format).
//! * [`follow`] follows an instance's log across overruns and restarts.
//! * [`background`] runs a log reader as a service (-D, -P, signals).
//! * [`group`] assembles records into transactions for the log readers.
//! * [`query`] is the `-q` query language (vsl-query(7)).
//! * [`httpdate`] formats HTTP dates.
//! * [`glob`] is the fnmatch-style matcher varnishstat's `-f` uses.

pub mod adm;
pub mod background;
pub mod bounded;
pub mod counters;
pub mod follow;
pub mod glob;
pub mod group;
pub mod httpdate;
pub mod instance;
pub mod query;
pub mod ring;
pub mod segment;
pub mod vsl;
pub mod vslfile;
