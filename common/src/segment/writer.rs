//! The daemon's side of the segment.

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use memmap2::MmapMut;

use super::layout::*;
use super::reader::Segment;
use super::sigbus;
use crate::counters::{self, C};
use crate::instance;
use crate::log::ring::{self, RawRing};

/// The daemon's side: creates the segment and writes counters and the log.
/// A truncation of the file under it does not kill the process (see
/// [`sigbus`]): the lost pages become private memory.
pub struct SegmentWriter {
    map: MmapMut,
    /// The file behind the mapping (its size tells a truncation).
    file: File,
    /// The SIGBUS handler's slot for the mapping.
    guard: Option<usize>,
    /// A truncation was reported.
    told: std::sync::atomic::AtomicBool,
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
        // A fresh file, never one planted in our place (no symlink followed).
        let _ = fs::remove_file(&tmp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o640)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        file.set_len(layout.file_len as u64).map_err(io_err(&tmp))?;
        // Reserve the blocks now: a full tmpfs fails here, with a message,
        // not later with SIGBUS in the middle of serving.
        if let Err(source) = reserve(&file, layout.file_len as u64) {
            let _ = fs::remove_file(&tmp);
            return Err(SegmentError::NoSpace { dir: dir.to_path_buf(), bytes: layout.file_len as u64, source });
        }
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
        let guard = sigbus::guard(base, map.len(), file.as_raw_fd());
        let seg = SegmentWriter {
            map,
            file,
            guard,
            told: Default::default(),
            base,
            path: path.clone(),
            layout,
            inode,
            log: ring::Writer::new(raw),
            names_lock: Default::default(),
        };
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
        let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(&path).map_err(io_err(&path))?;
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
        populate(&mut map);
        // SAFETY: bounds checked above.
        let raw = unsafe { RawRing::attach(map.as_mut_ptr().add(layout.log), layout.log_len) }
            .map_err(|what| SegmentError::Corrupt { dir: d(), what: what.into() })?;
        let base = map.as_mut_ptr();
        let guard = sigbus::guard(base, map.len(), file.as_raw_fd());
        Ok(SegmentWriter {
            map,
            file,
            guard,
            told: Default::default(),
            base,
            path,
            layout,
            inode,
            log: ring::Writer::new(raw),
            names_lock: Default::default(),
        })
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
    pub fn log(&self, batch: &crate::log::vsl::Batch) {
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

    /// Record that the daemon is alive (called about once a second), and
    /// say once on stderr if the segment was cut under it.
    pub fn heartbeat(&self) {
        // SAFETY: aligned field inside the mapping.
        let hb = unsafe { &*(self.map.as_ptr().add(OFF_HEARTBEAT) as *const AtomicU64) };
        hb.store(now_ms(), Ordering::Release);
        if !self.told.load(Ordering::Relaxed) {
            if let Some(len) = self.cut() {
                self.told.store(true, Ordering::Relaxed);
                eprintln!(
                    "cache-d: the segment {} was cut to {len} bytes under the running cache-d (by another program?): counters and the log go on in private memory that readers cannot see; restart cache-d to make a new segment",
                    self.path.display()
                );
            }
        }
    }

    /// The file's length, if it is shorter than the mapping (someone cut
    /// it) or pages of the mapping had to be made private for that.
    pub fn cut(&self) -> Option<u64> {
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        let patched = self.guard.and_then(sigbus::patched_from).is_some();
        (patched || len < self.layout.file_len as u64).then_some(len)
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

impl Drop for SegmentWriter {
    /// The mapping goes (with the fields, after this): the SIGBUS handler
    /// must leave its range alone first.
    fn drop(&mut self) {
        if let Some(slot) = self.guard.take() {
            sigbus::release(slot);
        }
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

/// Fault the whole mapping in, writable, before the child serves: left
/// to the log's first pass, each page of the ring was a fault in a
/// request's path, where the kernel zeroed a new page-cache page and the
/// file system made it writable (an ESI page with its 10 includes at
/// 1,500/s spent 12–18% of its CPU in that `memset` until the ring had
/// wrapped once, and 10% more than with the pages faulted in here). The
/// contents do not change; a kernel without MADV_POPULATE_WRITE (before
/// 5.14) leaves the pages to come on use.
fn populate(map: &mut MmapMut) {
    // SAFETY: the range is exactly the mapping, which outlives the call.
    unsafe { libc::madvise(map.as_mut_ptr().cast(), map.len(), libc::MADV_POPULATE_WRITE) };
}

/// Allocate every block of the file's first `len` bytes.
fn reserve(file: &std::fs::File, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid descriptor; posix_fallocate has no other preconditions.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        // A file system that cannot preallocate: the pages come on use.
        libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}
