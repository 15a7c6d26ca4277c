//! The request log, as Varnish's VSL: the ring in the shared segment the
//! daemon appends to and readers poll (`ring`), log tags and the record
//! encoding in Varnish 7.0–7.2's layout (`vsl`), log files for `-w`/`-r`
//! (`vslfile`), following an instance's log across overruns and restarts
//! (`follow`), records grouped into transactions (`group`), and the `-q`
//! query language of vsl-query(7) (`query`, reading records as
//! libvarnishapi does: `field`).

pub mod field;
pub mod follow;
pub mod group;
pub mod query;
pub mod ring;
pub mod vsl;
pub mod vslfile;
