//! The log ring: a circular byte buffer of records inside the segment.
//!
//! One process writes (the daemon, from any number of threads, serialised by
//! an in-process lock that is held only for one memcpy of a finished batch);
//! any number of processes read, without ever making the writer wait.
//!
//! Positions are monotonic 64-bit byte counts; the byte at position `p` lives
//! at `p % size`. Two cursors make torn reads detectable (a seqlock over
//! ranges): before copying a batch to `[p, p+len)` the writer publishes
//! `reserve = p+len`, and after copying it publishes `commit = p+len`. A
//! reader copies `[pos, commit)` into its own buffer and only then checks
//! `reserve`: if `reserve > pos + size` the writer may have overwritten part
//! of what was copied, and the copy is thrown away as an overrun. Records are
//! decoded only from a validated copy, so a torn record is never seen.
//!
//! To find a record boundary other than the tail (for `-d`), the ring is split
//! into [`N_SEG`] segments; for each segment the writer records the position
//! of the first batch boundary at or after the segment's start.
//!
//! Section layout (offsets from the section start, native-endian u64):
//! `0` ring size, `8` segment count, `64` reserve, `128` commit,
//! `192..256` segment boundaries, `256..` ring data.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::log::vsl;

/// Number of sync segments the ring is divided into.
pub const N_SEG: u64 = 8;
/// Bytes of the section header before the ring data.
pub const LOG_HEADER: usize = 256;
/// Smallest ring accepted (so that one segment holds any transaction).
pub const MIN_RING: u64 = 64 * 1024;
const OFF_SIZE: usize = 0;
const OFF_NSEG: usize = 8;
const OFF_RESERVE: usize = 64;
const OFF_COMMIT: usize = 128;
const OFF_SEGS: usize = 192;
const NO_BOUNDARY: u64 = u64::MAX;

/// Round a requested ring size to a valid one (multiple of 4·N_SEG, ≥ MIN_RING).
pub fn ring_size_for(requested: u64) -> u64 {
    let unit = 4 * N_SEG;
    (requested.max(MIN_RING) / unit) * unit
}

/// A view of a ring section in memory (a mapping, or a test buffer).
#[derive(Clone, Copy, Debug)]
pub struct RawRing {
    base: *mut u8,
    size: u64,
}

// SAFETY: all shared fields are accessed through atomics; data bytes are
// only read into private copies that are validated before use (see above).
unsafe impl Send for RawRing {}
unsafe impl Sync for RawRing {}

impl RawRing {
    /// Initialise a section of `len` bytes at `base` for a ring of `size` bytes.
    ///
    /// # Safety
    /// `base` must be valid for writes of `len` bytes, 8-byte aligned, and not
    /// yet shared with readers.
    pub unsafe fn init(base: *mut u8, len: usize, size: u64) -> Result<RawRing, &'static str> {
        if size % (4 * N_SEG) != 0 || size < MIN_RING || LOG_HEADER as u64 + size > len as u64 {
            return Err("ring size does not fit the log section");
        }
        std::ptr::write_bytes(base, 0, LOG_HEADER);
        (base.add(OFF_SIZE) as *mut u64).write(size);
        (base.add(OFF_NSEG) as *mut u64).write(N_SEG);
        for i in 0..N_SEG as usize {
            (base.add(OFF_SEGS + 8 * i) as *mut u64).write(NO_BOUNDARY);
        }
        Ok(RawRing { base, size })
    }

    /// Attach to an initialised section of `len` bytes, checking its header.
    ///
    /// # Safety
    /// `base` must be valid for reads of `len` bytes and 8-byte aligned for as
    /// long as the returned value is used.
    pub unsafe fn attach(base: *mut u8, len: usize) -> Result<RawRing, &'static str> {
        if len < LOG_HEADER {
            return Err("log section shorter than its header");
        }
        let size = (base.add(OFF_SIZE) as *const u64).read_volatile();
        let nseg = (base.add(OFF_NSEG) as *const u64).read_volatile();
        if nseg != N_SEG {
            return Err("log section has a foreign segment count");
        }
        if size % (4 * N_SEG) != 0 || size < MIN_RING || size > (len - LOG_HEADER) as u64 {
            return Err("log ring size is out of range");
        }
        Ok(RawRing { base, size })
    }

    pub fn size(&self) -> u64 {
        self.size
    }
    fn atomic(&self, off: usize) -> &AtomicU64 {
        // SAFETY: off is within the header, 8-aligned; lifetime per attach/init.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }
    fn reserve(&self) -> &AtomicU64 {
        self.atomic(OFF_RESERVE)
    }
    fn commit(&self) -> &AtomicU64 {
        self.atomic(OFF_COMMIT)
    }
    fn seg(&self, i: u64) -> &AtomicU64 {
        self.atomic(OFF_SEGS + 8 * (i % N_SEG) as usize)
    }
    fn seg_size(&self) -> u64 {
        self.size / N_SEG
    }
    /// The newest committed position (the tail readers follow).
    pub fn tail(&self) -> u64 {
        self.commit().load(Ordering::Acquire)
    }

    unsafe fn data(&self) -> *mut u8 {
        self.base.add(LOG_HEADER)
    }

    unsafe fn write_at(&self, pos: u64, bytes: &[u8]) {
        let off = (pos % self.size) as usize;
        let first = bytes.len().min(self.size as usize - off);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.data().add(off), first);
        std::ptr::copy_nonoverlapping(bytes[first..].as_ptr(), self.data(), bytes.len() - first);
    }

    unsafe fn read_at(&self, pos: u64, out: &mut [u8]) {
        let off = (pos % self.size) as usize;
        let first = out.len().min(self.size as usize - off);
        std::ptr::copy_nonoverlapping(self.data().add(off), out.as_mut_ptr(), first);
        let rest = out.len() - first;
        std::ptr::copy_nonoverlapping(self.data(), out[first..].as_mut_ptr(), rest);
    }

    /// The oldest position that is a batch boundary and still intact.
    pub fn oldest(&self) -> u64 {
        let reserve = self.reserve().load(Ordering::Acquire);
        let commit = self.commit().load(Ordering::Acquire);
        let low = reserve.saturating_sub(self.size);
        if low == 0 {
            return 0;
        }
        (0..N_SEG)
            .map(|i| self.seg(i).load(Ordering::Acquire))
            .filter(|&b| b != NO_BOUNDARY && b >= low && b <= commit)
            .min()
            .unwrap_or(commit)
    }
}

/// What one append did, for the `MAIN.shm_*` counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    pub writes: u64,
    pub cycles: u64,
}

/// The writing side: appends whole batches.
pub struct Writer {
    ring: RawRing,
    lock: Mutex<()>,
}

impl Writer {
    pub fn new(ring: RawRing) -> Writer {
        Writer { ring, lock: Mutex::new(()) }
    }

    pub fn ring(&self) -> RawRing {
        self.ring
    }

    /// Append a batch of whole records in one step. A batch larger than a
    /// sync segment (1/8 of the ring: 8 KiB for the smallest ring, 10 MiB for
    /// the default) is split at record boundaries into several appends.
    pub fn append(&self, batch: &[u8]) -> Appended {
        let seg = self.ring.seg_size() as usize;
        // Nearly every batch is a transaction's records, far smaller than
        // a segment: one step, without walking its records to find a cut.
        if batch.len() <= seg {
            return if batch.is_empty() { Appended::default() } else { self.append_one(batch) };
        }
        let mut done = Appended::default();
        let mut rest = batch;
        while !rest.is_empty() {
            let mut cut = 0;
            for r in vsl::Records::new(rest) {
                let n = vsl::record_bytes(r.payload.len() + 1);
                if cut + n > seg && cut > 0 {
                    break;
                }
                cut += n;
            }
            if cut == 0 {
                // Not a record stream we can split; refuse rather than tear.
                break;
            }
            let (now, later) = rest.split_at(cut);
            let a = self.append_one(now);
            done.writes += a.writes;
            done.cycles += a.cycles;
            rest = later;
        }
        done
    }

    fn append_one(&self, bytes: &[u8]) -> Appended {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let r = &self.ring;
        let p = r.commit().load(Ordering::Relaxed);
        let end = p + bytes.len() as u64;
        r.reserve().store(end, Ordering::Relaxed);
        // Readers that see any of the new bytes must also see `reserve`.
        fence(Ordering::Release);
        // SAFETY: the ring is ours to write; readers validate their copies.
        unsafe { r.write_at(p, bytes) };
        let s = r.seg_size();
        let mut k = p.div_ceil(s);
        while k * s <= end {
            let boundary = if k * s == p { p } else { end };
            r.seg(k).store(boundary, Ordering::Relaxed);
            k += 1;
        }
        r.commit().store(end, Ordering::Release);
        Appended { writes: 1, cycles: end / r.size - p / r.size }
    }
}

/// What a reader's poll found.
#[derive(Debug, PartialEq, Eq)]
pub enum Poll<'a> {
    /// Nothing new since the last poll.
    Idle,
    /// Whole records, copied out of the ring and validated.
    Records(&'a [u8]),
    /// The writer lapped the reader; `lost` bytes were skipped and the reader
    /// now continues from the tail.
    Overrun { lost: u64 },
}

/// The reading side: never blocks the writer, never yields a torn record.
pub struct Reader {
    ring: RawRing,
    pos: u64,
    buf: Vec<u8>,
    /// Largest copy made per poll, so a reader far behind does not copy the
    /// whole ring at once. Always at least one sync segment.
    chunk: u64,
}

impl Reader {
    /// A reader that starts at the tail: only records appended from now on.
    pub fn at_tail(ring: RawRing) -> Reader {
        Reader::at(ring, ring.tail())
    }

    /// A reader that starts at the oldest intact record (`-d`).
    pub fn at_oldest(ring: RawRing) -> Reader {
        Reader::at(ring, ring.oldest())
    }

    fn at(ring: RawRing, pos: u64) -> Reader {
        Reader { ring, pos, buf: Vec::new(), chunk: ring.size.min(4 << 20).max(ring.seg_size()) }
    }

    /// Current position (bytes since the ring was created).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Copy out what was committed since the last poll.
    pub fn poll(&mut self) -> Poll<'_> {
        let r = self.ring;
        let commit = r.commit().load(Ordering::Acquire);
        if commit == self.pos {
            return Poll::Idle;
        }
        if commit < self.pos || commit - self.pos > r.size {
            return self.overrun(commit);
        }
        let mut want = commit - self.pos;
        if want > self.chunk {
            want = self.chunk;
        }
        self.buf.resize(want as usize, 0);
        // SAFETY: the copy may race with the writer; it is validated below.
        unsafe { r.read_at(self.pos, &mut self.buf) };
        fence(Ordering::Acquire);
        let reserve = r.reserve().load(Ordering::Relaxed);
        if reserve > self.pos + r.size {
            return self.overrun(commit);
        }
        // A chunk may end inside a record: keep only whole records.
        let whole = if want == commit - self.pos {
            want as usize
        } else {
            let mut it = vsl::Records::new(&self.buf);
            for _ in it.by_ref() {}
            it.position()
        };
        if whole == 0 {
            // Cannot happen with records shorter than a chunk; resync.
            return self.overrun(commit);
        }
        self.pos += whole as u64;
        Poll::Records(&self.buf[..whole])
    }

    fn overrun(&mut self, commit: u64) -> Poll<'_> {
        let tail = self.ring.tail().max(commit);
        let lost = tail.saturating_sub(self.pos);
        self.pos = tail;
        Poll::Overrun { lost }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::vsl::{Batch, Records, Side, Tag};

    /// A heap-backed ring for tests.
    pub(crate) struct TestRing {
        _mem: Vec<u64>,
        pub ring: RawRing,
    }

    pub(crate) fn test_ring(size: u64) -> TestRing {
        let len = LOG_HEADER + size as usize;
        let mut mem = vec![0u64; len / 8 + 1];
        let ring = unsafe { RawRing::init(mem.as_mut_ptr() as *mut u8, len, size).unwrap() };
        TestRing { _mem: mem, ring }
    }

    fn batch(vxid: u32, n: usize) -> Batch {
        let mut b = Batch::new();
        b.recf(Tag::Begin, Side::Client, vxid, format_args!("req {} rxreq", vxid));
        for i in 0..n {
            b.recf(Tag::ReqHeader, Side::Client, vxid, format_args!("X-N: {i}"));
        }
        b.rec(Tag::End, Side::Client, vxid, b"");
        b
    }

    #[test]
    fn reader_sees_appended_batches_and_wraps() {
        let t = test_ring(MIN_RING);
        let w = Writer::new(t.ring);
        let mut r = Reader::at_tail(t.ring);
        let mut seen = 0u32;
        let mut cycles = 0;
        for v in 1..=2000u32 {
            cycles += w.append(batch(v, 3).as_bytes()).cycles;
            match r.poll() {
                Poll::Records(buf) => {
                    for rec in Records::new(buf) {
                        if rec.tag == Tag::Begin {
                            seen += 1;
                            assert_eq!(rec.vxid, seen);
                        }
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(seen, 2000);
        assert!(cycles > 0, "the test should wrap the ring");
    }

    #[test]
    fn oldest_is_a_record_boundary_after_wrapping() {
        let t = test_ring(MIN_RING);
        let w = Writer::new(t.ring);
        assert_eq!(t.ring.oldest(), 0);
        for v in 1..=5000u32 {
            w.append(batch(v, 2).as_bytes());
        }
        let mut r = Reader::at_oldest(t.ring);
        let mut first = None;
        let mut last = 0;
        loop {
            match r.poll() {
                Poll::Records(buf) => {
                    let mut it = Records::new(buf);
                    for rec in it.by_ref() {
                        if rec.tag == Tag::Begin {
                            first.get_or_insert(rec.vxid);
                            last = rec.vxid;
                        }
                    }
                    assert!(it.error().is_none());
                }
                Poll::Idle => break,
                Poll::Overrun { .. } => panic!("no writer is running"),
            }
        }
        assert_eq!(last, 5000);
        // At most one sync segment (1/8 of the ring) is given up.
        let per = batch(1, 2).len() as u64;
        let kept = (5000 - first.unwrap() + 1) as u64 * per;
        assert!(kept >= MIN_RING - MIN_RING / N_SEG - per, "kept {kept}");
    }

    #[test]
    fn a_lapped_reader_reports_overrun_and_resumes_at_the_tail() {
        let t = test_ring(MIN_RING);
        let w = Writer::new(t.ring);
        let mut r = Reader::at_tail(t.ring);
        for v in 1..=3000u32 {
            w.append(batch(v, 4).as_bytes());
        }
        assert!(matches!(r.poll(), Poll::Overrun { lost } if lost > MIN_RING));
        w.append(batch(9999, 1).as_bytes());
        match r.poll() {
            Poll::Records(buf) => {
                let recs: Vec<_> = Records::new(buf).collect();
                assert_eq!(recs[0].tag, Tag::Begin);
                assert_eq!(recs[0].vxid, 9999);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn attach_checks_the_header() {
        let t = test_ring(MIN_RING);
        let len = LOG_HEADER + MIN_RING as usize;
        let base = t.ring.base;
        assert!(unsafe { RawRing::attach(base, len) }.is_ok());
        assert!(unsafe { RawRing::attach(base, len - 8) }.is_err());
        assert!(unsafe { RawRing::attach(base, 100) }.is_err());
    }
}
