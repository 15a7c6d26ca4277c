//! The segment's layout: header fields and offsets, counter name
//! entries, errors, and the helpers reader and writer share.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::counters;
use crate::log::ring;

pub const MAGIC: [u8; 8] = *b"CKITSEG\0";
pub const LAYOUT_VERSION: u32 = 2;
pub const HEADER_SIZE: usize = 128;
pub const NAME_ENTRY: usize = 256;
/// Bytes of a name entry's name, and where its description starts.
pub(super) const NAME_FIELD: usize = counters::NAME_MAX + 1;
pub(super) const DESC_AT: usize = NAME_FIELD + 4;
/// Counter slots for counters made at run time (20 per backend: room for
/// 200 backends over all loaded programs).
pub const DYN_SLOTS: usize = 4096;
/// Value shards: shard 0 is shared (set values and threads past the last
/// private shard); shards 1.. are owned by one thread each.
pub const SHARDS: usize = 16;

pub const STATE_STARTING: u32 = 0;
pub const STATE_RUNNING: u32 = 1;
pub const STATE_STOPPED: u32 = 2;

pub(super) const OFF_VERSION: usize = 8;
pub(super) const OFF_HDRSIZE: usize = 12;
pub(super) const OFF_PID: usize = 16;
pub(super) const OFF_STATE: usize = 20;
pub(super) const OFF_GENERATION: usize = 24;
pub(super) const OFF_CREATED: usize = 32;
pub(super) const OFF_HEARTBEAT: usize = 40;
pub(super) const OFF_NAMES: usize = 48;
pub(super) const OFF_NCOUNTERS: usize = 56;
pub(super) const OFF_NSHARDS: usize = 60;
pub(super) const OFF_VALUES: usize = 64;
pub(super) const OFF_STRIDE: usize = 72;
pub(super) const OFF_LOG: usize = 80;
pub(super) const OFF_LOGLEN: usize = 88;
pub(super) const OFF_FILELEN: usize = 96;
pub(super) const OFF_NAMES_GEN: usize = 104;

/// Why a segment could not be created or attached. Every message names the
/// instance directory.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error("no cache-d segment in {dir} (is cache-d running with -n {dir}?)")]
    Missing { dir: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("segment in {dir} is truncated ({len} bytes): not a cachekit segment, or corrupt")]
    Truncated { dir: PathBuf, len: u64 },
    #[error("segment in {dir} is not a cachekit segment (wrong magic)")]
    BadMagic { dir: PathBuf },
    #[error("segment in {dir} has layout version {found}, this program reads version {want}: use tools from the same release as cache-d")]
    Version { dir: PathBuf, found: u32, want: u32 },
    #[error("segment in {dir} is corrupt: {what}")]
    Corrupt { dir: PathBuf, what: String },
    #[error("segment in {dir} is stale: cache-d (pid {pid}) is no longer running")]
    Stale { dir: PathBuf, pid: u32 },
    #[error("cache-d in {dir} has stopped")]
    Stopped { dir: PathBuf },
    #[error("another cache-d (pid {pid}) is running with instance dir {dir}")]
    InUse { dir: PathBuf, pid: u32 },
    #[error("cannot reserve {bytes} bytes for the segment in {dir}: {source} (free space there, or lower vsl_space)")]
    NoSpace { dir: PathBuf, bytes: u64, source: std::io::Error },
    #[error("the segment in {dir} shrank under this reader (truncated by another program?)")]
    Shrunk { dir: PathBuf },
}

impl SegmentError {
    /// True for conditions a patient reader waits out (no daemon yet).
    pub fn is_transient(&self) -> bool {
        matches!(self, SegmentError::Missing { .. } | SegmentError::Stale { .. } | SegmentError::Stopped { .. })
    }
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SegmentError + '_ {
    move |source| SegmentError::Io { path: path.to_path_buf(), source }
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

pub(super) fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Section offsets for a segment holding `n` counters and a ring of `ring` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub names: usize,
    pub n_counters: usize,
    pub values: usize,
    pub stride: usize,
    pub log: usize,
    pub log_len: usize,
    pub file_len: usize,
}

impl Layout {
    pub fn new(n_counters: usize, ring: u64) -> Layout {
        let names = HEADER_SIZE;
        let values = (names + n_counters * NAME_ENTRY).next_multiple_of(64);
        let stride = (n_counters * 8).next_multiple_of(64);
        let log = (values + SHARDS * stride).next_multiple_of(4096);
        let log_len = ring::LOG_HEADER + ring as usize;
        Layout { names, n_counters, values, stride, log, log_len, file_len: log + log_len }
    }
}

/// Bytes of the header for `layout`, as the daemon writes them.
pub fn encode_header(layout: &Layout, pid: u32, generation: u64, created_ms: u64) -> [u8; HEADER_SIZE] {
    let mut h = [0u8; HEADER_SIZE];
    h[0..8].copy_from_slice(&MAGIC);
    h[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&LAYOUT_VERSION.to_ne_bytes());
    h[OFF_HDRSIZE..OFF_HDRSIZE + 4].copy_from_slice(&(HEADER_SIZE as u32).to_ne_bytes());
    h[OFF_PID..OFF_PID + 4].copy_from_slice(&pid.to_ne_bytes());
    h[OFF_STATE..OFF_STATE + 4].copy_from_slice(&STATE_STARTING.to_ne_bytes());
    let u64s = [
        (OFF_GENERATION, generation),
        (OFF_CREATED, created_ms),
        (OFF_HEARTBEAT, created_ms),
        (OFF_NAMES, layout.names as u64),
        (OFF_VALUES, layout.values as u64),
        (OFF_STRIDE, layout.stride as u64),
        (OFF_LOG, layout.log as u64),
        (OFF_LOGLEN, layout.log_len as u64),
        (OFF_FILELEN, layout.file_len as u64),
    ];
    for (off, v) in u64s {
        h[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    h[OFF_NCOUNTERS..OFF_NCOUNTERS + 4].copy_from_slice(&(layout.n_counters as u32).to_ne_bytes());
    h[OFF_NSHARDS..OFF_NSHARDS + 4].copy_from_slice(&(SHARDS as u32).to_ne_bytes());
    h
}

pub(super) fn encode_name(def: &counters::CounterDef) -> [u8; NAME_ENTRY] {
    encode_entry(def.name, def)
}

/// A name entry for `name` with `def`'s kind, level, format and description.
pub(super) fn encode_entry(name: &str, def: &counters::CounterDef) -> [u8; NAME_ENTRY] {
    let mut e = [0u8; NAME_ENTRY];
    let name = &name.as_bytes()[..name.len().min(counters::NAME_MAX)];
    e[..name.len()].copy_from_slice(name);
    e[NAME_FIELD] = def.kind.code();
    e[NAME_FIELD + 1] = def.level as u8;
    e[NAME_FIELD + 2] = def.format.code();
    let desc = &def.description.as_bytes()[..def.description.len().min(counters::DESC_MAX)];
    e[DESC_AT..DESC_AT + desc.len()].copy_from_slice(desc);
    e
}

pub(super) fn rd_u32(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
pub(super) fn rd_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}
