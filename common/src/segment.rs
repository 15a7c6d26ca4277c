//! The shared-memory segment: a memory-mapped file in the instance directory.
//!
//! Why a file-backed mmap and not the `shared_memory` crate: readers must find
//! the segment from the instance directory alone, tell a segment replaced by a
//! restarted daemon (a new inode) from the one they hold, and keep reading a
//! segment whose daemon died; a plain file with `memmap2` gives all three
//! with the file system's own semantics (as Varnish's `_.vsm_*` files do),
//! while `shared_memory`'s OS ids and owner-unlinks-on-drop model would add a
//! second name to keep in step and give none of them.
//!
//! Layout (native-endian; offsets in bytes):
//!
//! | off | field |
//! |-----|-------|
//! | 0   | magic `CKITSEG\0` |
//! | 8   | layout version (u32) |
//! | 12  | header size (u32) = 128 |
//! | 16  | creator pid (u32) |
//! | 20  | state (u32): 0 starting, 1 running, 2 stopped |
//! | 24  | generation (u64): one more than the segment it replaced |
//! | 32  | creation time, ms since the epoch (u64) |
//! | 40  | heartbeat, ms since the epoch (u64), updated every second |
//! | 48  | counter names offset (u64) |
//! | 56  | counter count (u32) |
//! | 60  | value shards (u32) |
//! | 64  | counter values offset (u64) |
//! | 72  | shard stride in bytes (u64) |
//! | 80  | log section offset (u64) |
//! | 88  | log section length (u64) |
//! | 96  | file length (u64) |
//! | 104 | names generation (u64): odd while a dynamic name changes |
//!
//! Counter names: one 256-byte entry per counter slot: name (128, NUL
//! padded: room for `VBE.<vcl>.<backend>.<field>`), kind, level, format,
//! 0, description (124, NUL padded). The
//! first slots hold [`counters::TABLE`]; the [`DYN_SLOTS`] after them are
//! dynamic (per-backend `VBE.*` counters), free while their name is empty.
//! The child names and frees them under a seqlock: the names generation
//! goes odd, the entry (and its values, zeroed) change, it goes even again;
//! a reader copies the names and keeps the copy only if the generation was
//! even and the same before and after ([`Segment::refresh`]).
//! Counter values: `shards` arrays of u64, each `stride` bytes (a multiple of
//! 64). Each writer thread adds to its own shard, so hot-path increments never
//! share a cache line between cores; readers sum the shards (wrapping).
//! The log section is described in [`crate::ring`].

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::counters::{self, Format, Kind, Level, C};
use crate::instance;
use crate::ring::{self, RawRing};

pub const MAGIC: [u8; 8] = *b"CKITSEG\0";
pub const LAYOUT_VERSION: u32 = 2;
pub const HEADER_SIZE: usize = 128;
pub const NAME_ENTRY: usize = 256;
/// Bytes of a name entry's name, and where its description starts.
const NAME_FIELD: usize = counters::NAME_MAX + 1;
const DESC_AT: usize = NAME_FIELD + 4;
/// Counter slots for counters made at run time (20 per backend: room for
/// 200 backends over all loaded programs).
pub const DYN_SLOTS: usize = 4096;
/// Value shards: shard 0 is shared (set values and threads past the last
/// private shard); shards 1.. are owned by one thread each.
pub const SHARDS: usize = 16;

pub const STATE_STARTING: u32 = 0;
pub const STATE_RUNNING: u32 = 1;
pub const STATE_STOPPED: u32 = 2;

const OFF_VERSION: usize = 8;
const OFF_HDRSIZE: usize = 12;
const OFF_PID: usize = 16;
const OFF_STATE: usize = 20;
const OFF_GENERATION: usize = 24;
const OFF_CREATED: usize = 32;
const OFF_HEARTBEAT: usize = 40;
const OFF_NAMES: usize = 48;
const OFF_NCOUNTERS: usize = 56;
const OFF_NSHARDS: usize = 60;
const OFF_VALUES: usize = 64;
const OFF_STRIDE: usize = 72;
const OFF_LOG: usize = 80;
const OFF_LOGLEN: usize = 88;
const OFF_FILELEN: usize = 96;
const OFF_NAMES_GEN: usize = 104;

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
}

impl SegmentError {
    /// True for conditions a patient reader waits out (no daemon yet).
    pub fn is_transient(&self) -> bool {
        matches!(self, SegmentError::Missing { .. } | SegmentError::Stale { .. } | SegmentError::Stopped { .. })
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SegmentError + '_ {
    move |source| SegmentError::Io { path: path.to_path_buf(), source }
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn pid_alive(pid: u32) -> bool {
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

fn encode_name(def: &counters::CounterDef) -> [u8; NAME_ENTRY] {
    encode_entry(def.name, def)
}

/// A name entry for `name` with `def`'s kind, level, format and description.
fn encode_entry(name: &str, def: &counters::CounterDef) -> [u8; NAME_ENTRY] {
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

fn rd_u32(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn rd_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(a)
}

// ---------------------------------------------------------------- writer

/// The daemon's side: creates the segment and writes counters and the log.
pub struct SegmentWriter {
    map: MmapMut,
    /// The mapping's start, for writing name entries through `&self`.
    base: *mut u8,
    path: PathBuf,
    layout: Layout,
    inode: u64,
    log: ring::Writer,
    /// Serialises changes to the dynamic names.
    names_lock: std::sync::Mutex<()>,
}

// SAFETY: the mapping is only mutated through atomics and the ring writer,
// which serialises its own writes.
unsafe impl Send for SegmentWriter {}
unsafe impl Sync for SegmentWriter {}

impl SegmentWriter {
    /// Create the segment for instance `dir` with a log ring of about
    /// `ring_bytes`, replacing a stale one. Fails if a live daemon owns it.
    pub fn create(dir: &Path, ring_bytes: u64) -> Result<SegmentWriter, SegmentError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let path = instance::segment_path(dir);
        let generation = match Segment::open_any(dir) {
            Ok(old) => {
                let pid = old.pid();
                if old.state() != STATE_STOPPED && pid_alive(pid) && pid != std::process::id() {
                    return Err(SegmentError::InUse { dir: dir.to_path_buf(), pid });
                }
                old.generation() + 1
            }
            Err(_) => 1,
        };
        let ring_size = ring::ring_size_for(ring_bytes);
        let layout = Layout::new(counters::TABLE.len() + DYN_SLOTS, ring_size);
        let tmp = dir.join(format!("{}.{}.tmp", instance::SEGMENT_FILE, std::process::id()));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).mode(0o640).open(&tmp).map_err(io_err(&tmp))?;
        file.set_len(layout.file_len as u64).map_err(io_err(&tmp))?;
        let inode = file.metadata().map_err(io_err(&tmp))?.ino();
        // SAFETY: the file is ours, freshly created, and sized above.
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io_err(&tmp))?;
        map[..HEADER_SIZE].copy_from_slice(&encode_header(&layout, std::process::id(), generation, now_ms()));
        for (i, def) in counters::TABLE.iter().enumerate() {
            let off = layout.names + i * NAME_ENTRY;
            map[off..off + NAME_ENTRY].copy_from_slice(&encode_name(def));
        }
        // SAFETY: the log section lies inside the mapping and is page aligned.
        let raw = unsafe { RawRing::init(map.as_mut_ptr().add(layout.log), layout.log_len, ring_size) }
            .map_err(|what| SegmentError::Corrupt { dir: dir.to_path_buf(), what: what.into() })?;
        let base = map.as_mut_ptr();
        let seg =
            SegmentWriter { map, base, path: path.clone(), layout, inode, log: ring::Writer::new(raw), names_lock: Default::default() };
        seg.state_atomic().store(STATE_RUNNING, Ordering::Release);
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        Ok(seg)
    }

    pub fn generation(&self) -> u64 {
        self.generation_atomic().load(Ordering::Acquire)
    }

    fn generation_atomic(&self) -> &AtomicU64 {
        // SAFETY: aligned header field inside the mapping.
        unsafe { &*(self.map.as_ptr().add(OFF_GENERATION) as *const AtomicU64) }
    }

    /// A new child process starts: count the generation up so readers can
    /// tell, zero the counters the child owns (all but `keep`) and free the
    /// dynamic ones (the child makes its own).
    pub fn new_generation(&self, keep: impl Fn(&str) -> bool) -> u64 {
        for (i, def) in counters::TABLE.iter().enumerate() {
            if !keep(def.name) {
                for shard in 0..SHARDS {
                    self.value(shard, i).store(0, Ordering::Relaxed);
                }
            }
        }
        for slot in counters::TABLE.len()..self.layout.n_counters {
            self.unregister(slot);
        }
        self.generation_atomic().fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Attach to the segment the manager created in `dir`, to write its
    /// counters and log (the child process). The manager never writes the
    /// log, so the child is the ring's only writer.
    pub fn attach(dir: &Path) -> Result<SegmentWriter, SegmentError> {
        let path = instance::segment_path(dir);
        // Validate first, through the reader's checks.
        let check = Segment::open_any(dir)?;
        let d = || dir.to_path_buf();
        if check.slots != counters::TABLE.len() + DYN_SLOTS || check.counters().iter().zip(counters::TABLE).any(|(a, b)| a.name != b.name) {
            return Err(SegmentError::Corrupt { dir: d(), what: "counter table differs from this build's".into() });
        }
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(io_err(&path))?;
        let inode = file.metadata().map_err(io_err(&path))?.ino();
        // SAFETY: the manager created and sized the file; we only change it
        // through atomics and the ring writer.
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io_err(&path))?;
        let layout = Layout {
            names: rd_u64(&map, OFF_NAMES) as usize,
            n_counters: rd_u32(&map, OFF_NCOUNTERS) as usize,
            values: rd_u64(&map, OFF_VALUES) as usize,
            stride: rd_u64(&map, OFF_STRIDE) as usize,
            log: rd_u64(&map, OFF_LOG) as usize,
            log_len: rd_u64(&map, OFF_LOGLEN) as usize,
            file_len: rd_u64(&map, OFF_FILELEN) as usize,
        };
        if layout.log_len + layout.log > map.len() {
            return Err(SegmentError::Truncated { dir: d(), len: map.len() as u64 });
        }
        // SAFETY: bounds checked above.
        let raw = unsafe { RawRing::attach(map.as_mut_ptr().add(layout.log), layout.log_len) }
            .map_err(|what| SegmentError::Corrupt { dir: d(), what: what.into() })?;
        let base = map.as_mut_ptr();
        Ok(SegmentWriter { map, base, path, layout, inode, log: ring::Writer::new(raw), names_lock: Default::default() })
    }

    fn state_atomic(&self) -> &AtomicU32 {
        // SAFETY: aligned field inside the mapping, which lives as long as self.
        unsafe { &*(self.map.as_ptr().add(OFF_STATE) as *const AtomicU32) }
    }

    fn value(&self, shard: usize, c: usize) -> &AtomicU64 {
        let off = self.layout.values + shard * self.layout.stride + c * 8;
        // SAFETY: shard < SHARDS and c < n_counters keep off inside the map.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }
    }

    fn names_gen(&self) -> &AtomicU64 {
        // SAFETY: aligned header field inside the mapping.
        unsafe { &*(self.map.as_ptr().add(OFF_NAMES_GEN) as *const AtomicU64) }
    }

    /// Change slot `slot`'s name entry (and zero its values) inside the
    /// names seqlock.
    fn write_entry(&self, slot: usize, entry: &[u8; NAME_ENTRY]) {
        let gen = self.names_gen();
        gen.fetch_add(1, Ordering::AcqRel);
        for shard in 0..SHARDS {
            self.value(shard, slot).store(0, Ordering::Relaxed);
        }
        std::sync::atomic::fence(Ordering::Release);
        // SAFETY: slot < n_counters keeps the entry inside the names
        // section; only this process writes names, under names_lock.
        unsafe { std::ptr::copy_nonoverlapping(entry.as_ptr(), self.base.add(self.layout.names + slot * NAME_ENTRY), NAME_ENTRY) };
        gen.fetch_add(1, Ordering::AcqRel);
    }

    fn slot_free(&self, slot: usize) -> bool {
        self.map[self.layout.names + slot * NAME_ENTRY] == 0
    }

    /// Make a dynamic counter called `name` with `def`'s kind, level,
    /// format and description, starting at 0; None when every dynamic slot
    /// is taken or the name is longer than [`counters::NAME_MAX`]. Free it
    /// with [`unregister`](Self::unregister).
    pub fn register(&self, name: &str, def: &counters::CounterDef) -> Option<usize> {
        if name.is_empty() || name.len() > counters::NAME_MAX {
            return None;
        }
        let _g = self.names_lock.lock().unwrap_or_else(|e| e.into_inner());
        let slot = (counters::TABLE.len()..self.layout.n_counters).find(|&s| self.slot_free(s))?;
        self.write_entry(slot, &encode_entry(name, def));
        Some(slot)
    }

    /// Free a dynamic counter's slot (its name and value disappear).
    pub fn unregister(&self, slot: usize) {
        if slot < counters::TABLE.len() || slot >= self.layout.n_counters {
            return;
        }
        let _g = self.names_lock.lock().unwrap_or_else(|e| e.into_inner());
        if !self.slot_free(slot) {
            self.write_entry(slot, &[0u8; NAME_ENTRY]);
        }
    }

    /// Add to a dynamic counter (as [`add`](Self::add)).
    #[inline]
    pub fn add_slot(&self, slot: usize, v: u64) {
        if slot < self.layout.n_counters {
            self.value(my_shard(), slot).fetch_add(v, Ordering::Relaxed);
        }
    }

    /// Subtract from a dynamic gauge.
    #[inline]
    pub fn sub_slot(&self, slot: usize, v: u64) {
        if slot < self.layout.n_counters {
            self.value(my_shard(), slot).fetch_sub(v, Ordering::Relaxed);
        }
    }

    /// Set a dynamic counter outright (a bitmap).
    pub fn set_slot(&self, slot: usize, v: u64) {
        if slot < self.layout.n_counters {
            for shard in 1..SHARDS {
                self.value(shard, slot).store(0, Ordering::Relaxed);
            }
            self.value(0, slot).store(v, Ordering::Relaxed);
        }
    }

    /// Add to a counter from the calling thread's own shard.
    #[inline]
    pub fn add(&self, c: C, v: u64) {
        self.value(my_shard(), c as usize).fetch_add(v, Ordering::Relaxed);
    }

    /// Subtract (gauges only).
    #[inline]
    pub fn sub(&self, c: C, v: u64) {
        self.value(my_shard(), c as usize).fetch_sub(v, Ordering::Relaxed);
    }

    /// Set a value outright (only for counters nothing else adds to, such as
    /// uptimes).
    pub fn set(&self, c: C, v: u64) {
        self.value(0, c as usize).store(v, Ordering::Relaxed);
    }

    /// Sum of a counter over all shards (what readers see).
    pub fn get(&self, c: C) -> u64 {
        (0..SHARDS).fold(0u64, |a, s| a.wrapping_add(self.value(s, c as usize).load(Ordering::Relaxed)))
    }

    /// Append a transaction's records in one step and count it.
    pub fn log(&self, batch: &crate::vsl::Batch) {
        if batch.is_empty() {
            return;
        }
        let a = self.log.append(batch.as_bytes());
        self.add(C::ShmRecords, batch.records() as u64);
        self.add(C::ShmWrites, a.writes);
        if a.cycles > 0 {
            self.add(C::ShmCycles, a.cycles);
        }
    }

    /// Position of the log's tail.
    pub fn log_tail(&self) -> u64 {
        self.log.ring().tail()
    }

    /// Record that the daemon is alive (called about once a second).
    pub fn heartbeat(&self) {
        // SAFETY: aligned field inside the mapping.
        let hb = unsafe { &*(self.map.as_ptr().add(OFF_HEARTBEAT) as *const AtomicU64) };
        hb.store(now_ms(), Ordering::Release);
    }

    /// Mark the segment stopped. The file stays: readers holding it see the
    /// state and wait for a successor, new readers are told the daemon has
    /// stopped, and the next daemon continues its generation count. (It is
    /// replaced, never reused, by the next start.)
    pub fn close(&self) {
        self.state_atomic().store(STATE_STOPPED, Ordering::Release);
        let _ = self.map.flush_async();
    }

    /// Is the segment file in the instance dir still this one?
    pub fn is_current(&self) -> bool {
        fs::metadata(&self.path).is_ok_and(|m| m.ino() == self.inode)
    }
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(1);
/// Private shards handed back by threads that ended.
static FREE_SHARDS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// A thread's claim on a private shard, returned when the thread ends.
struct ShardClaim(Cell<usize>);

impl Drop for ShardClaim {
    fn drop(&mut self) {
        let v = self.0.get();
        if v != 0 && v != usize::MAX {
            FREE_SHARDS.lock().unwrap_or_else(|e| e.into_inner()).push(v);
        }
    }
}

thread_local! {
    static SHARD: ShardClaim = const { ShardClaim(Cell::new(usize::MAX)) };
}

/// The calling thread's shard: a private one while they last, else shard 0.
#[inline]
fn my_shard() -> usize {
    SHARD
        .try_with(|s| {
            let v = s.0.get();
            if v != usize::MAX {
                return v;
            }
            let v = FREE_SHARDS.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_else(|| {
                let n = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
                if n < SHARDS {
                    n
                } else {
                    0
                }
            });
            s.0.set(v);
            v
        })
        // During thread teardown: the shared shard.
        .unwrap_or(0)
}

// ---------------------------------------------------------------- reader

/// A counter as the segment describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterInfo {
    pub name: String,
    pub kind: Kind,
    pub level: Level,
    pub format: Format,
    pub description: String,
}

/// What a reader finds when it checks on its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Running,
    /// The daemon marked the segment stopped (clean shutdown).
    Stopped,
    /// A different segment file now sits in the instance dir (restart).
    Replaced,
    /// The daemon's pid is gone but it never marked the segment stopped.
    Dead,
}

/// A reader's attachment to a segment.
pub struct Segment {
    map: Mmap,
    dir: PathBuf,
    inode: u64,
    /// The named counters, and the slot each one is in.
    counters: Vec<CounterInfo>,
    slot_of: Vec<usize>,
    /// Counter slots in the file, and where their names start.
    slots: usize,
    names: usize,
    /// The names generation `counters` was read at.
    names_gen: u64,
    values: usize,
    stride: usize,
    shards: usize,
    ring: RawRing,
}

impl Segment {
    /// Attach to the segment of a running daemon in instance `dir`.
    pub fn open(dir: &Path) -> Result<Segment, SegmentError> {
        let seg = Segment::open_any(dir)?;
        if seg.state() == STATE_STOPPED {
            return Err(SegmentError::Stopped { dir: dir.to_path_buf() });
        }
        if !seg.daemon_alive() {
            return Err(SegmentError::Stale { dir: dir.to_path_buf(), pid: seg.pid() });
        }
        Ok(seg)
    }

    /// Attach to the segment in instance `dir` whether or not its daemon
    /// still runs (post-mortem log dumps), checking everything a damaged or
    /// foreign file could get wrong.
    pub fn open_any(dir: &Path) -> Result<Segment, SegmentError> {
        let path = instance::segment_path(dir);
        let d = || dir.to_path_buf();
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SegmentError::Missing { dir: d() }),
            Err(e) => return Err(SegmentError::Io { path, source: e }),
        };
        let meta = file.metadata().map_err(io_err(&path))?;
        let len = meta.len();
        if len < HEADER_SIZE as u64 {
            return Err(SegmentError::Truncated { dir: d(), len });
        }
        // SAFETY: read-only mapping; the daemon only changes it through
        // atomics and the ring protocol, both of which tolerate this view.
        let map = unsafe { MmapOptions::new().map(&file) }.map_err(io_err(&path))?;
        if map[..8] != MAGIC {
            return Err(SegmentError::BadMagic { dir: d() });
        }
        let version = rd_u32(&map, OFF_VERSION);
        if version != LAYOUT_VERSION {
            return Err(SegmentError::Version { dir: d(), found: version, want: LAYOUT_VERSION });
        }
        let corrupt = |what: &str| SegmentError::Corrupt { dir: d(), what: what.to_string() };
        if rd_u32(&map, OFF_HDRSIZE) as usize != HEADER_SIZE {
            return Err(corrupt("header size field is wrong"));
        }
        let file_len = rd_u64(&map, OFF_FILELEN);
        if file_len != len {
            return Err(SegmentError::Truncated { dir: d(), len });
        }
        let n = rd_u32(&map, OFF_NCOUNTERS) as usize;
        let shards = rd_u32(&map, OFF_NSHARDS) as usize;
        let names = rd_u64(&map, OFF_NAMES) as usize;
        let values = rd_u64(&map, OFF_VALUES) as usize;
        let stride = rd_u64(&map, OFF_STRIDE) as usize;
        let log = rd_u64(&map, OFF_LOG) as usize;
        let log_len = rd_u64(&map, OFF_LOGLEN) as usize;
        let within = |off: usize, size: Option<usize>| size.and_then(|s| off.checked_add(s)).is_some_and(|end| end as u64 <= len);
        if n == 0 || n > 100_000 || names < HEADER_SIZE || !within(names, n.checked_mul(NAME_ENTRY)) {
            return Err(corrupt("counter names lie outside the file"));
        }
        if shards == 0
            || shards > 1024
            || stride < n * 8
            || values % 8 != 0
            || stride % 8 != 0
            || !within(values, stride.checked_mul(shards))
        {
            return Err(corrupt("counter values lie outside the file"));
        }
        if log % 8 != 0 || !within(log, Some(log_len)) {
            return Err(corrupt("log section lies outside the file"));
        }
        // SAFETY: bounds checked above; the ring is only read through
        // atomics and validated copies.
        let ring = unsafe { RawRing::attach(map.as_ptr().add(log) as *mut u8, log_len) }.map_err(corrupt)?;
        let mut seg = Segment {
            map,
            dir: d(),
            inode: meta.ino(),
            counters: Vec::new(),
            slot_of: Vec::new(),
            slots: n,
            names,
            names_gen: u64::MAX,
            values,
            stride,
            shards,
            ring,
        };
        if !matches!(seg.state(), STATE_RUNNING | STATE_STARTING | STATE_STOPPED) {
            return Err(corrupt("unknown state"));
        }
        seg.refresh()?;
        if seg.counters.is_empty() {
            return Err(corrupt("no counter has a name"));
        }
        Ok(seg)
    }

    fn names_gen(&self) -> u64 {
        // SAFETY: aligned header field.
        unsafe { &*(self.map.as_ptr().add(OFF_NAMES_GEN) as *const AtomicU64) }.load(Ordering::Acquire)
    }

    /// Pick up counters made or freed since the last look (a program with
    /// other backends was loaded or discarded). Returns whether they changed.
    /// Cheap when nothing did: one load of the names generation.
    pub fn refresh(&mut self) -> Result<bool, SegmentError> {
        let corrupt = |what: &str| SegmentError::Corrupt { dir: self.dir.clone(), what: what.to_string() };
        for attempt in 0..1000 {
            let g = self.names_gen();
            if g == self.names_gen {
                return Ok(false);
            }
            if g % 2 == 1 {
                if attempt > 10 {
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
                std::hint::spin_loop();
                continue;
            }
            let bytes = self.map[self.names..self.names + self.slots * NAME_ENTRY].to_vec();
            std::sync::atomic::fence(Ordering::Acquire);
            if self.names_gen() != g {
                continue;
            }
            let (mut counters, mut slot_of) = (Vec::new(), Vec::new());
            for (slot, e) in bytes.chunks_exact(NAME_ENTRY).enumerate() {
                if e[0] == 0 {
                    continue;
                }
                let text = |b: &[u8]| {
                    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                    String::from_utf8_lossy(&b[..end]).into_owned()
                };
                counters.push(CounterInfo {
                    name: text(&e[..NAME_FIELD]),
                    kind: Kind::from_code(e[NAME_FIELD]).ok_or_else(|| corrupt("unknown counter kind"))?,
                    level: Level::from_code(e[NAME_FIELD + 1]).ok_or_else(|| corrupt("unknown counter level"))?,
                    format: Format::from_code(e[NAME_FIELD + 2]).ok_or_else(|| corrupt("unknown counter format"))?,
                    description: text(&e[DESC_AT..]),
                });
                slot_of.push(slot);
            }
            (self.counters, self.slot_of, self.names_gen) = (counters, slot_of, g);
            return Ok(true);
        }
        // A writer stuck mid-change (it died there): keep the names we had.
        Ok(false)
    }

    /// Is the creating daemon alive? Its pid exists, or (for a reader in
    /// another pid namespace, where the pid means nothing) its heartbeat is
    /// less than three seconds old.
    pub fn daemon_alive(&self) -> bool {
        pid_alive(self.pid()) || now_ms().saturating_sub(self.heartbeat_ms()) < 3000
    }

    pub fn pid(&self) -> u32 {
        rd_u32(&self.map, OFF_PID)
    }
    pub fn generation(&self) -> u64 {
        // SAFETY: aligned header field.
        unsafe { &*(self.map.as_ptr().add(OFF_GENERATION) as *const AtomicU64) }.load(Ordering::Acquire)
    }
    pub fn state(&self) -> u32 {
        // SAFETY: aligned header field.
        unsafe { &*(self.map.as_ptr().add(OFF_STATE) as *const AtomicU32) }.load(Ordering::Acquire)
    }
    pub fn heartbeat_ms(&self) -> u64 {
        // SAFETY: aligned header field.
        unsafe { &*(self.map.as_ptr().add(OFF_HEARTBEAT) as *const AtomicU64) }.load(Ordering::Acquire)
    }

    /// The counters this segment describes, in segment order.
    pub fn counters(&self) -> &[CounterInfo] {
        &self.counters
    }

    /// Current value of counter `i` (summed over shards).
    pub fn value(&self, i: usize) -> u64 {
        let Some(&slot) = self.slot_of.get(i) else { return 0 };
        (0..self.shards).fold(0u64, |acc, s| {
            let off = self.values + s * self.stride + slot * 8;
            // SAFETY: bounds checked at open; aligned (values, stride % 8 == 0).
            let v = unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU64) }.load(Ordering::Relaxed);
            acc.wrapping_add(v)
        })
    }

    /// Value of the counter called `name`, if the segment has it.
    pub fn value_of(&self, name: &str) -> Option<u64> {
        self.counters.iter().position(|c| c.name == name).map(|i| self.value(i))
    }

    /// The log ring, for [`ring::Reader`].
    pub fn ring(&self) -> RawRing {
        self.ring
    }

    /// Is the daemon behind this segment still there, and still this one?
    pub fn health(&self) -> Health {
        if self.state() == STATE_STOPPED {
            return Health::Stopped;
        }
        match fs::metadata(instance::segment_path(&self.dir)) {
            Ok(m) if m.ino() != self.inode => return Health::Replaced,
            _ => {}
        }
        if !self.daemon_alive() {
            return Health::Dead;
        }
        Health::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_endian = "little")]
    #[test]
    fn golden_header() {
        let layout = Layout::new(3, ring::MIN_RING);
        assert_eq!(layout.names, 128);
        assert_eq!(layout.values, 128 + 3 * 256);
        assert_eq!(layout.stride, 64);
        assert_eq!(layout.log, 4096);
        let h = encode_header(&layout, 0x1234, 7, 0x0102_0304_0506);
        #[rustfmt::skip]
        let want: [u8; 104] = [
            b'C', b'K', b'I', b'T', b'S', b'E', b'G', 0,
            2, 0, 0, 0,  128, 0, 0, 0,          // version, header size
            0x34, 0x12, 0, 0,  0, 0, 0, 0,      // pid, state starting
            7, 0, 0, 0, 0, 0, 0, 0,             // generation
            6, 5, 4, 3, 2, 1, 0, 0,             // created ms
            6, 5, 4, 3, 2, 1, 0, 0,             // heartbeat ms
            128, 0, 0, 0, 0, 0, 0, 0,           // names offset
            3, 0, 0, 0,  16, 0, 0, 0,           // counters, shards
            0x80, 0x03, 0, 0, 0, 0, 0, 0,       // values offset 896
            64, 0, 0, 0, 0, 0, 0, 0,            // stride
            0, 0x10, 0, 0, 0, 0, 0, 0,          // log offset 4096
            0, 0x01, 0x01, 0, 0, 0, 0, 0,       // log length 256 + 65536
            0, 0x11, 0x01, 0, 0, 0, 0, 0,       // file length
        ];
        assert_eq!(&h[..104], &want[..]);
        assert!(h[104..].iter().all(|&b| b == 0));
    }

    #[test]
    fn golden_name_entry() {
        let e = encode_name(C::ClientReq.def());
        assert_eq!(&e[..16], b"MAIN.client_req\0");
        assert_eq!(&e[128..132], &[b'c', 0, b'i', 0]);
        assert_eq!(&e[132..161], b"Good client requests received");
        assert_eq!(e[161], 0);
    }

    #[test]
    fn writer_and_reader_agree() {
        let dir = tempfile::tempdir().unwrap();
        let w = SegmentWriter::create(dir.path(), ring::MIN_RING).unwrap();
        w.add(C::ClientReq, 5);
        std::thread::scope(|s| {
            s.spawn(|| w.add(C::ClientReq, 7));
        });
        w.set(C::MainUptime, 42);
        let r = Segment::open(dir.path()).unwrap();
        assert_eq!(r.value_of("MAIN.client_req"), Some(12));
        assert_eq!(r.value_of("MAIN.uptime"), Some(42));
        assert_eq!(r.counters().len(), counters::TABLE.len());
        assert_eq!(r.health(), Health::Running);
        assert_eq!(r.generation(), 1);
        // A child process attaches, writes; a new generation zeroes what
        // the child owns and keeps the rest.
        let child = SegmentWriter::attach(dir.path()).unwrap();
        child.add(C::ClientReq, 1);
        child.log(&{
            let mut b = crate::vsl::Batch::new();
            b.rec(crate::vsl::Tag::Cli, crate::vsl::Side::None, 0, b"Rd ping");
            b
        });
        assert_eq!(r.value_of("MAIN.client_req"), Some(13));
        assert_eq!(w.new_generation(|n| n.starts_with("MGT.")), 2);
        assert_eq!(r.generation(), 2);
        assert_eq!(r.value_of("MAIN.client_req"), Some(0));
        assert_eq!(r.ring().tail(), child.log_tail());
        assert!(w.is_current());
        w.close();
        assert_eq!(r.health(), Health::Stopped);
        assert!(matches!(Segment::open(dir.path()), Err(SegmentError::Stopped { .. })));
        // The next daemon takes the next generation.
        let w2 = SegmentWriter::create(dir.path(), ring::MIN_RING).unwrap();
        assert_eq!(w2.generation(), 3);
        assert!(!w.is_current());
        assert_eq!(r.health(), Health::Stopped);
    }

    #[test]
    fn dynamic_counters_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let w = SegmentWriter::create(dir.path(), ring::MIN_RING).unwrap();
        let mut r = Segment::open(dir.path()).unwrap();
        let n0 = r.counters().len();
        let def = counters::Vbe::Req.def();
        let a = w.register("VBE.boot.default.req", def).unwrap();
        w.add_slot(a, 3);
        assert!(r.refresh().unwrap());
        assert!(!r.refresh().unwrap(), "nothing changed since");
        assert_eq!(r.value_of("VBE.boot.default.req"), Some(3));
        let info = r.counters().last().unwrap();
        assert_eq!((info.kind, info.description.as_str()), (Kind::Counter, "Backend requests sent"));
        w.unregister(a);
        assert!(r.refresh().unwrap());
        assert_eq!((r.value_of("VBE.boot.default.req"), r.counters().len()), (None, n0));
        // A reused slot starts from 0.
        assert_eq!(w.register("VBE.v2.b.req", def), Some(a));
        r.refresh().unwrap();
        assert_eq!(r.value_of("VBE.v2.b.req"), Some(0));
        // Full: None, not a clobbered slot.
        let mut n = 1;
        while w.register(&format!("VBE.v.b{n}.req"), def).is_some() {
            n += 1;
        }
        assert_eq!(n, DYN_SLOTS);
        // A new child frees them all.
        w.new_generation(|_| false);
        r.refresh().unwrap();
        assert_eq!(r.counters().len(), n0);
        // A reader refreshing while names change never sees a torn one.
        std::thread::scope(|s| {
            let w = &w;
            s.spawn(move || {
                for i in 0..3000 {
                    let slot = w.register(&format!("VBE.t.b{i}.req"), def).unwrap();
                    if i % 3 != 0 {
                        w.unregister(slot);
                    }
                }
            });
            for _ in 0..3000 {
                r.refresh().unwrap();
                for c in &r.counters()[n0..] {
                    let ok = c.name.strip_prefix("VBE.t.b").and_then(|x| x.strip_suffix(".req")).is_some_and(|x| x.parse::<u32>().is_ok());
                    assert!(ok && c.description == def.description, "torn: {c:?}");
                }
            }
        });
    }

    #[test]
    fn garbage_files_are_refused_with_the_dir_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = instance::segment_path(dir.path());
        let name = dir.path().display().to_string();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![], "truncated"),
            (b"CKITSEG\0short".to_vec(), "truncated"),
            (vec![0x5a; 8192], "wrong magic"),
            (
                {
                    let mut v = encode_header(&Layout::new(3, ring::MIN_RING), 1, 1, 1).to_vec();
                    v.resize(4096, 0);
                    v
                },
                "truncated",
            ),
        ];
        for (bytes, want) in cases {
            fs::write(&path, &bytes).unwrap();
            let err = Segment::open(dir.path()).err().expect("garbage must be refused").to_string();
            assert!(err.contains(want) && err.contains(&name), "{err}");
        }
        // Random bytes of a plausible size: refused, whatever they hold.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200 {
            let len = (x % 20000) as usize;
            let mut bytes = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                bytes.push(x as u8);
            }
            if len > 8 {
                bytes[..8].copy_from_slice(&MAGIC);
            }
            fs::write(&path, &bytes).unwrap();
            assert!(Segment::open(dir.path()).is_err());
        }
    }
}
