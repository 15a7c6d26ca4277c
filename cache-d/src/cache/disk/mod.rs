//! A disk store: one file of fixed size cut into segments, written as a
//! log. Each segment fills from both ends: object records (what the
//! index needs: key, life, Vary, head, the body's place and checksum)
//! from its start, bodies from its end. When the log reaches the last
//! free segment, the oldest is taken back whole and its objects leave
//! the cache (segment-wise, FIFO eviction: no fragmentation, no free
//! list, and writes are sequential).
//!
//! Writes go through one writer thread per store (the request threads
//! only queue them). Reads are `pread`s: on the request's thread when
//! the page cache holds the body whole (`preadv2` with `RWF_NOWAIT`,
//! which answers EAGAIN rather than wait for the disk), else on tokio's
//! blocking pool. Not mmap: copying out of a mapping is faster per read
//! (`cargo bench -p cache-d --bench disk`: 402k against 216k reads/s of
//! 16 KiB, 2.5 against 4.6 µs, small beside a hit's ~25 µs), but a disk
//! error there is SIGBUS, the child's death, where pread returns EIO and
//! the object is dropped. A `persistent` store is scanned at start
//! (records only: reading 1,000,000 objects' records is reading their
//! heads, not their bodies) and its bans are kept in a journal beside it;
//! a `file` store starts empty every time, as Varnish's does.

mod file;
pub mod journal;

pub(crate) use file::open_file;
pub mod loc;
pub mod record;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

pub use self::loc::Loc;
use self::record::{FileHeader, Found, Rec, HEADER, SEG_HEADER};
use crate::cache::object::ObjRef;

/// What the writer thread does, in order.
pub enum Job {
    /// A new segment's header, then nothing else until the next job.
    Segment { off: u64, bytes: Vec<u8> },
    /// An object: its body first, then its record (so a record on disk
    /// always has its body before it), then `done(ok)`.
    Write { body_off: u64, body: Vec<Bytes>, rec_off: u64, rec: Vec<u8>, done: Box<dyn FnOnce(bool) + Send> },
    /// Mark a record dead (its object was removed).
    Kill { rec_off: u64 },
    /// A soft purge's new life.
    Life { rec_off: u64, block: Vec<u8> },
    /// Reply once everything before is written (and synced).
    Flush(mpsc::Sender<()>),
}

/// The log's write position and which objects each segment holds.
struct Log {
    cur: u32,
    seq: u64,
    /// Next record's offset and where the lowest body starts, within the
    /// current segment.
    rec_end: u64,
    body_start: u64,
    segs: Vec<Vec<ObjRef>>,
    /// How many of each segment's objects went since it was last tidied.
    dead: Vec<usize>,
}

/// A record found at start, with where it is.
pub struct Recovered {
    pub rec: Box<Rec>,
    pub loc: Loc,
}

pub struct Disk {
    pub path: PathBuf,
    file: Arc<File>,
    pub seg_size: u64,
    nseg: u32,
    pub persistent: bool,
    log: Mutex<Log>,
    /// The writer's queue (None once closed) and thread.
    writer: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The bans journal (persistent stores).
    pub journal: Option<journal::Journal>,
    /// A slow disk for the tests (`CACHEKIT_TEST_DISK_DELAY_MS`): every
    /// read waits this long first.
    delay: Option<std::time::Duration>,
    /// Reads from the page cache without waiting work here.
    nowait: std::sync::atomic::AtomicBool,
}

/// The longest record (an object's head and Vary values; heads are
/// bounded far below this by http_resp_hdr_len).
pub const MAX_REC: u64 = 1 << 20;

/// A store's segment size: a 32nd of it, between 64 KiB and 1 GiB, in
/// whole 4 KiB pages. An object takes at most one segment.
fn seg_size(size: u64) -> u64 {
    debug_assert!(size >= HEADER + 16 * (64 << 10));
    ((size - HEADER) / 32).clamp(64 << 10, 1 << 30) / 4096 * 4096
}

/// The store's file: PATH itself, or `<PATH>/<name>.store` when PATH is
/// a directory.
pub fn file_of(path: &Path, name: &str) -> PathBuf {
    if path.is_dir() {
        path.join(format!("{name}.store"))
    } else {
        path.to_path_buf()
    }
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> String {
    format!("storage {}: {what}: {e}", path.display())
}

/// Make `path` an empty store of `size` bytes (space reserved up front,
/// where the file system can).
fn create(path: &Path, size: u64, persistent: bool) -> Result<File, String> {
    let f = open_file(path, OpenOptions::new().read(true).write(true).create(true).truncate(false))?;
    lock(&f, path)?;
    f.set_len(0).map_err(|e| io_err(path, "cannot empty", e))?;
    f.set_len(size).map_err(|e| io_err(path, "cannot size", e))?;
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on our own descriptor. Where it is not
        // supported (tmpfs on old kernels), the file stays sparse.
        let _ = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, size as libc::off_t) };
    }
    let h = header(size, persistent);
    f.write_all_at(&h.encode(), 0).map_err(|e| io_err(path, "cannot write", e))?;
    // Every segment header cleared: none is in use.
    let zero = [0u8; SEG_HEADER as usize];
    for i in 0..(size - HEADER) / h.seg_size {
        f.write_all_at(&zero, HEADER + i * h.seg_size).map_err(|e| io_err(path, "cannot write", e))?;
    }
    f.sync_all().map_err(|e| io_err(path, "cannot sync", e))?;
    Ok(f)
}

/// A new store's header (with the process's hash key).
fn header(size: u64, persistent: bool) -> FileHeader {
    FileHeader { version: record::VERSION, persistent, size, seg_size: seg_size(size), secret: crate::cache::key::Key::secret() }
}

/// The hash key an existing persistent store was made with, if it is one
/// this version reads (the cache adopts the first such, so that the
/// objects' keys are found again).
pub fn secret_of(path: &Path, name: &str, size: u64) -> Option<(u64, u64)> {
    open_existing(&file_of(path, name), size).ok().map(|(_, h)| h.secret)
}

/// Hold the store's file for this process alone (flock; released when
/// the file is closed, a crash too): two daemons on one store would
/// write over each other.
fn lock(f: &File, path: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on our own descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!("storage {}: in use by another cache-d", path.display()));
    }
    Ok(())
}

/// Open an existing persistent store: the file and its header, or why
/// this cache-d cannot use it.
fn open_existing(path: &Path, size: u64) -> Result<(File, FileHeader), String> {
    let f = open_file(path, OpenOptions::new().read(true).write(true))?;
    lock(&f, path)?;
    let mut b = vec![0u8; HEADER as usize];
    f.read_exact_at(&mut b, 0).map_err(|_| format!("storage {}: not a cachekit store (too short)", path.display()))?;
    let h = FileHeader::decode(&b).map_err(|e| format!("storage {}: {e}", path.display()))?;
    if !h.persistent {
        return Err(format!("storage {}: a file store, not a persistent one", path.display()));
    }
    if h.size != size {
        return Err(format!("storage {}: made with size {}, asked for {size}", path.display(), h.size));
    }
    // Cut short while stopped (or grown): its segments are not all there,
    // and reading them back would fail in the child at every start.
    let len = f.metadata().map_err(|e| io_err(path, "cannot stat", e))?.len();
    if len != h.size {
        return Err(format!("storage {}: the file is {len} bytes, its header says {} (truncated or damaged)", path.display(), h.size));
    }
    Ok((f, h))
}

/// What the manager checks before it starts a child: that the store's
/// file can be made, and a persistent one's existing file used (or
/// `wipe` given), so cache-d refuses to start with a clear message
/// rather than a child failing over and over.
///
/// The file and its directory must pass the instance directory's rules
/// ([`open_file`]); so must a persistent store's bans journal. A
/// persistent store's file must be as long as its header says.
pub fn check(name: &str, path: &Path, size: u64, persistent: bool, wipe: bool) -> Result<(), String> {
    let file = file_of(path, name);
    match file.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => {
            return Err(format!("storage {}: no directory {}", file.display(), d.display()));
        }
        _ => {}
    }
    common::instance::check_file_dir(&file).map_err(|e| format!("storage {e}"))?;
    // (symlink_metadata: a dangling symlink is there too, and refused.)
    if std::fs::symlink_metadata(&file).is_ok() {
        let f = open_file(&file, OpenOptions::new().read(true).write(true))?;
        lock(&f, &file)?;
    }
    let bans = journal::path_of(&file);
    if persistent && std::fs::symlink_metadata(&bans).is_ok() {
        open_file(&bans, OpenOptions::new().read(true))?;
    }
    if persistent && !wipe && file.exists() {
        open_existing(&file, size).map_err(|e| refused(&e, name, path, size))?;
    }
    Ok(())
}

/// Why a persistent store is refused, and how to empty it instead.
fn refused(why: &str, name: &str, path: &Path, size: u64) -> String {
    format!("{why}; start with ,wipe (-s {name}=persistent,{},{size},wipe) to empty it", path.display())
}

impl Disk {
    /// Open (persistent, existing) or make the store, start its writer,
    /// and (persistent) read back its records, oldest segment first.
    pub fn open(name: &str, path: &Path, size: u64, persistent: bool, wipe: bool) -> Result<(Disk, Vec<Recovered>), String> {
        let path = file_of(path, name);
        let existing = persistent && path.exists();
        let (file, h) = match existing.then(|| open_existing(&path, size)) {
            Some(Ok((f, h))) if crate::cache::key::Key::adopt(h.secret) => (f, h),
            Some(Ok(_)) => {
                // Another store gave the process its hash key first:
                // this one's keys cannot be found again.
                eprintln!("cache-d: storage {}: made with another hash key than the first persistent store; emptied", path.display());
                (create(&path, size, persistent)?, header(size, persistent))
            }
            Some(Err(e)) if !wipe => return Err(refused(&e, name, &path, size)),
            _ => (create(&path, size, persistent)?, header(size, persistent)),
        };
        let nseg = ((size - HEADER) / h.seg_size) as u32;
        let file = Arc::new(file);
        let (found, log) = if existing {
            scan(&file, &h, nseg).map_err(|e| io_err(&path, "cannot read", e))?
        } else {
            (Vec::new(), Log::empty(nseg, h.seg_size))
        };
        let journal = persistent.then(|| journal::Journal::open(&journal::path_of(&path))).transpose()?;
        let (tx, rx) = mpsc::channel();
        let wf = file.clone();
        let thread = std::thread::Builder::new()
            .name(format!("cache-disk-{name}"))
            .spawn(move || writer(&wf, rx))
            .map_err(|e| io_err(&path, "cannot start its writer", e))?;
        let delay = std::env::var("CACHEKIT_TEST_DISK_DELAY_MS").ok().and_then(|v| v.parse().ok()).map(std::time::Duration::from_millis);
        let disk = Disk {
            path,
            file,
            seg_size: h.seg_size,
            nseg,
            persistent,
            log: Mutex::new(log),
            writer: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            journal,
            delay,
            nowait: std::sync::atomic::AtomicBool::new(true),
        };
        Ok((disk, found))
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn send(&self, job: Job) {
        if let Some(tx) = &*self.writer.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = tx.send(job);
        }
    }

    /// Room for a record of `rec_len` bytes and a body of `body_len`,
    /// and the objects of the segment taken back for it (they must leave
    /// the cache). None when it cannot fit in a segment at all.
    pub fn reserve(&self, rec_len: u64, body_len: u64) -> Option<(Loc, Vec<ObjRef>)> {
        let body_len8 = record::space(body_len).next_multiple_of(8);
        if rec_len > MAX_REC || SEG_HEADER + rec_len + body_len8 > self.seg_size {
            return None;
        }
        let mut log = self.log();
        let mut gone = Vec::new();
        if log.rec_end + rec_len + body_len8 > log.body_start {
            log.cur = (log.cur + 1) % self.nseg;
            log.seq += 1;
            log.rec_end = SEG_HEADER;
            log.body_start = self.seg_size;
            let cur = log.cur as usize;
            gone = std::mem::take(&mut log.segs[cur]);
            log.dead[cur] = 0;
            self.send(Job::Segment { off: self.seg_off(log.cur), bytes: record::seg_header(log.seq) });
        }
        let base = self.seg_off(log.cur);
        log.body_start -= body_len8;
        let loc = Loc {
            seg: log.cur,
            seq: log.seq,
            rec_off: base + log.rec_end,
            body_off: base + log.body_start,
            body_len,
            body_crc: 0,
            bytes: rec_len + body_len8,
        };
        log.rec_end += rec_len;
        Some((loc, gone))
    }

    /// Count `oc` among its segment's objects (it leaves when the segment
    /// is taken back), unless that segment was taken back meanwhile.
    pub fn track(&self, loc: &Loc, oc: ObjRef) -> bool {
        let mut log = self.log();
        if !self.current(&log, loc) {
            return false;
        }
        log.segs[loc.seg as usize].push(oc);
        true
    }

    /// Is `loc`'s segment still of its generation (not taken back)? A
    /// segment's generation is its place behind the current one.
    fn current(&self, log: &Log, loc: &Loc) -> bool {
        let behind = (log.cur + self.nseg - loc.seg) % self.nseg;
        log.seq.checked_sub(loc.seq) == Some(behind as u64)
    }

    /// Queue a write to `loc`'s record (a kill, a new life) unless its
    /// segment was taken back: decided under the log's lock, which also
    /// orders it after the new segment's header.
    pub fn update(&self, loc: &Loc, job: Job) {
        let log = self.log();
        if self.current(&log, loc) {
            self.send(job);
        }
    }

    /// Drop the dead among a segment's objects now and then, so purges
    /// and replacements do not pile up there.
    pub fn tidy(&self, seg: u32) {
        let mut log = self.log();
        let s = seg as usize;
        log.dead[s] += 1;
        if log.dead[s] >= 64 && log.dead[s] * 2 > log.segs[s].len() {
            log.segs[s].retain(|o| !o.is_dead());
            log.dead[s] = 0;
        }
    }

    fn seg_off(&self, seg: u32) -> u64 {
        HEADER + seg as u64 * self.seg_size
    }

    /// Read a body and check it against its checksum (blocking: call it
    /// from a blocking pool). Err(None): checksum mismatch.
    pub fn read(&self, loc: &Loc) -> Result<Bytes, Option<std::io::Error>> {
        self.read_checked(loc.body_off, loc.body_len as usize, loc.body_crc)
    }

    /// `len` bytes at `off` that must have checksum `crc` (blocking).
    fn read_checked(&self, off: u64, len: usize, crc: u32) -> Result<Bytes, Option<std::io::Error>> {
        if let Some(d) = self.delay {
            std::thread::sleep(d);
        }
        let b = read_fresh(&self.file, len, off).map_err(Some)?;
        if record::checksum(&b) != crc {
            return Err(None);
        }
        Ok(Bytes::from(b))
    }

    /// A large body's block checksums, checked against the record's
    /// (blocking). Err(None): damaged.
    pub fn read_table(&self, loc: &Loc) -> Result<Vec<u32>, Option<std::io::Error>> {
        let b = self.read_checked(loc.body_off + loc.body_len, record::table_len(loc.body_len) as usize, loc.body_crc)?;
        Ok(b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// Block `i` of a large body, checked against `crc` (blocking).
    pub fn read_block(&self, loc: &Loc, i: usize, crc: u32) -> Result<Bytes, Option<std::io::Error>> {
        let at = i as u64 * record::BLOCK;
        self.read_checked(loc.body_off + at, record::BLOCK.min(loc.body_len.saturating_sub(at)) as usize, crc)
    }

    /// A body the page cache holds whole, read without waiting for the
    /// disk (preadv2 with RWF_NOWAIT: EAGAIN rather than I/O) and
    /// checked: what most hits of a warm store are, on the request's own
    /// thread. None when the disk must be read (on the blocking pool).
    pub fn read_cached(&self, loc: &Loc) -> Option<Result<Bytes, Option<std::io::Error>>> {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::Ordering;
        if self.delay.is_some() || !self.nowait.load(Ordering::Relaxed) {
            return None;
        }
        let len = loc.body_len as usize;
        let mut b: Vec<u8> = Vec::with_capacity(len);
        let iov = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: len };
        // SAFETY: one iovec over the buffer's spare capacity of `len`
        // bytes; only a read of all of them is counted as initialized.
        let n = unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, loc.body_off as libc::off_t, libc::RWF_NOWAIT) };
        if n < 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            if e == Some(libc::EOPNOTSUPP) || e == Some(libc::EINVAL) || e == Some(libc::ENOSYS) {
                // Not on this kernel or file system: always the pool.
                self.nowait.store(false, Ordering::Relaxed);
            }
            return None;
        }
        if n as usize != len {
            return None;
        }
        // SAFETY: preadv2 initialized all `len` bytes.
        unsafe { b.set_len(len) };
        Some(if record::checksum(&b) == loc.body_crc { Ok(Bytes::from(b)) } else { Err(None) })
    }

    /// Wait until every queued write is on disk (at most `wait`).
    pub fn flush(&self, wait: std::time::Duration) {
        let (tx, rx) = mpsc::channel();
        self.send(Job::Flush(tx));
        let _ = rx.recv_timeout(wait);
    }
}

/// `len` bytes at `off`, read into a buffer that is not zeroed first
/// (zeroing it cost as much as the read: pread was 0.59x an mmap copy
/// with it, see the disk bench).
fn read_fresh(f: &File, len: usize, off: u64) -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut b: Vec<u8> = Vec::with_capacity(len);
    while b.len() < len {
        let at = b.len();
        // SAFETY: pread writes at most len - at bytes into the spare
        // capacity; only what it wrote is then counted as initialized.
        let n = unsafe { libc::pread(f.as_raw_fd(), b.as_mut_ptr().add(at).cast(), len - at, (off + at as u64) as libc::off_t) };
        match n {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n if n < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            // SAFETY: pread initialized these n bytes.
            n => unsafe { b.set_len(at + n as usize) },
        }
    }
    Ok(b)
}

impl Drop for Disk {
    /// Finish what is queued and close the file (its lock with it).
    fn drop(&mut self) {
        drop(self.writer.lock().unwrap_or_else(|e| e.into_inner()).take());
        // (Not when the writer itself lets the cache go, in a callback.)
        if let Some(t) =
            self.thread.lock().unwrap_or_else(|e| e.into_inner()).take().filter(|t| t.thread().id() != std::thread::current().id())
        {
            let _ = t.join();
        }
    }
}

impl Log {
    fn empty(nseg: u32, seg_size: u64) -> Log {
        // The first write moves to segment 0 with generation 1.
        let segs = (0..nseg).map(|_| Vec::new()).collect();
        Log { cur: nseg - 1, seq: 0, rec_end: seg_size, body_start: seg_size, segs, dead: vec![0; nseg as usize] }
    }
}

/// The writer thread: jobs in order until every sender is gone.
fn writer(f: &File, rx: mpsc::Receiver<Job>) {
    for job in rx {
        match job {
            Job::Segment { off, bytes } => {
                let _ = f.write_all_at(&bytes, off);
            }
            Job::Write { body_off, body, rec_off, rec, done } => {
                let mut ok = true;
                let mut at = body_off;
                for c in &body {
                    ok &= f.write_all_at(c, at).is_ok();
                    at += c.len() as u64;
                }
                ok = ok && f.write_all_at(&rec, rec_off).is_ok();
                done(ok);
            }
            Job::Kill { rec_off } => {
                let _ = f.write_all_at(&record::DEAD_MAGIC.to_le_bytes(), rec_off);
            }
            Job::Life { rec_off, block } => {
                let _ = f.write_all_at(&block, rec_off + record::LIFE_AT as u64);
            }
            Job::Flush(tx) => {
                let _ = f.sync_data();
                let _ = tx.send(());
            }
        }
    }
}

/// Read back every segment in use, oldest first: the records found, and
/// the log positioned after the newest.
fn scan(f: &File, h: &FileHeader, nseg: u32) -> std::io::Result<(Vec<Recovered>, Log)> {
    let mut used = Vec::new();
    let mut hb = [0u8; SEG_HEADER as usize];
    for i in 0..nseg {
        f.read_exact_at(&mut hb, HEADER + i as u64 * h.seg_size)?;
        if let Some(seq) = record::seg_seq(&hb) {
            used.push((seq, i));
        }
    }
    used.sort_unstable();
    let mut log = Log::empty(nseg, h.seg_size);
    let mut found = Vec::new();
    for &(seq, seg) in &used {
        let (end, low) = scan_segment(f, h, seg, seq, &mut found)?;
        (log.cur, log.seq, log.rec_end, log.body_start) = (seg, seq, end, low);
    }
    // Generations must follow the ring from the newest back; one that
    // does not (a damaged header) is left out, its objects with it.
    if let Some(&(newest, _)) = used.last() {
        found.retain(|r| (newest - r.loc.seq) == ((log.cur + nseg - r.loc.seg) % nseg) as u64);
    }
    Ok((found, log))
}

/// One segment's records: where they end, and where its lowest body
/// starts (relative to the segment).
fn scan_segment(f: &File, h: &FileHeader, seg: u32, seq: u64, out: &mut Vec<Recovered>) -> std::io::Result<(u64, u64)> {
    let base = HEADER + seg as u64 * h.seg_size;
    let (mut at, mut low) = (SEG_HEADER, h.seg_size);
    let (mut buf, mut buf_at) = (Vec::new(), at);
    loop {
        // A whole record (at most MAX_REC) in memory, or all there is.
        if buf_at + (buf.len() as u64) < (at + MAX_REC).min(low) {
            let until = (at + 4 * MAX_REC).min(low);
            buf = vec![0u8; (until - at) as usize];
            f.read_exact_at(&mut buf, base + at)?;
            buf_at = at;
        }
        let rel = (at - buf_at) as usize;
        match record::decode(&buf[rel..], seq) {
            Found::Obj(rec, len) => {
                let body_rel = rec.body_off.wrapping_sub(base);
                if rec.body_off < base || body_rel < at + len as u64 || body_rel + record::space(rec.body_len) > h.seg_size {
                    break;
                }
                low = low.min(body_rel / 8 * 8);
                let loc = Loc {
                    seg,
                    seq,
                    rec_off: base + at,
                    body_off: rec.body_off,
                    body_len: rec.body_len,
                    body_crc: rec.body_crc,
                    bytes: len as u64 + record::space(rec.body_len).next_multiple_of(8),
                };
                out.push(Recovered { rec, loc });
                at += len as u64;
            }
            Found::Dead(len) => at += len as u64,
            Found::End => break,
        }
    }
    Ok((at, low))
}

#[cfg(test)]
mod tests;
