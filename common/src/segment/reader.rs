//! Readers' side of the segment: attach, check, read counters and names.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::{Mmap, MmapOptions};

use super::layout::*;
use crate::counters::{Format, Kind, Level};
use crate::instance;
use crate::log::ring::RawRing;

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
    pub(super) slots: usize,
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
        super::sigbus::exit_on_sigbus(dir);
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
