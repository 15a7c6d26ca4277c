//! SIGBUS from the segment's mapping. A file cut shorter under a shared
//! mapping faults on every page past its new end. The segment lives in the
//! instance directory, which only its user (or root) can write; still, an
//! operator's `: > _.segment` or a stray tool must not take the daemon down.
//!
//! - Readers stop with a message naming the instance dir, and exit 2
//!   ([`exit_on_sigbus`]).
//! - The daemon's processes (the manager and the child, through
//!   [`SegmentWriter`](super::SegmentWriter)) go on. Checking the file's size
//!   before each access would cost a syscall per counter increment on the
//!   hot path and still lose the race with a truncation between check and
//!   access; instead the handler maps private, zeroed memory over the lost
//!   pages (from the faulting page, or the file's new end if lower, to the
//!   end of the mapping) and returns, so the faulting access runs again and
//!   succeeds. Counters and the log go on in that private memory, unseen by
//!   readers; the pages still in the file stay shared. The manager says so
//!   once on stderr ([`SegmentWriter::heartbeat`](super::SegmentWriter));
//!   a restart of cache-d makes a new segment.
//!
//! The handler calls only fstat(2), mmap(2) and write(2)/_exit(2): mmap is
//! not on POSIX's list of async-signal-safe functions, but on Linux it is
//! a plain system call (glibc's wrapper takes no lock), and it is only made
//! for a fault in a registered mapping, where the alternative is death.
//! A fault anywhere else gets the action SIGBUS had before (by default,
//! the process dies of it, with a core dump, as without this handler).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::layout::SegmentError;

/// A mapping the handler may patch.
struct Guarded {
    /// Claimed by a writer (set before `start`, cleared after).
    used: AtomicBool,
    /// The mapping's address (0: none) and length.
    start: AtomicUsize,
    len: AtomicUsize,
    /// The file behind it (for its size when a fault comes).
    fd: AtomicI32,
    /// Offset from which the mapping is already private memory (`len`:
    /// none of it is).
    from: AtomicUsize,
}

const SLOTS: usize = 8;
#[allow(clippy::declare_interior_mutable_const)]
const FREE: Guarded = Guarded {
    used: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fd: AtomicI32::new(-1),
    from: AtomicUsize::new(0),
};
static GUARDED: [Guarded; SLOTS] = [FREE; SLOTS];
/// Held while a mapping is patched or let go (a spin lock: the handler
/// cannot block, and holds it for two system calls).
static PATCHING: AtomicBool = AtomicBool::new(false);
static PAGE: AtomicUsize = AtomicUsize::new(4096);

/// The message readers write before they exit, set once per process.
static READER_MSG: OnceLock<Vec<u8>> = OnceLock::new();
/// The terminal's mode before a screen changed it, restored on SIGBUS.
static READER_TERMIOS: OnceLock<libc::termios> = OnceLock::new();
/// SIGBUS's action before ours, for faults that are not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: std::sync::Once = std::sync::Once::new();

fn lock() {
    while PATCHING.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        std::hint::spin_loop();
    }
}

fn unlock() {
    PATCHING.store(false, Ordering::Release);
}

/// Let the handler patch `len` bytes mapped at `start` from the file `fd`
/// (kept open as long as the mapping). The slot to give back with
/// [`release`]; None when all are taken (the mapping is then unguarded, as
/// before this handler).
pub(super) fn guard(start: *mut u8, len: usize, fd: i32) -> Option<usize> {
    install();
    let slot = GUARDED.iter().position(|g| g.used.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
    let g = &GUARDED[slot];
    g.len.store(len, Ordering::Relaxed);
    g.fd.store(fd, Ordering::Relaxed);
    g.from.store(len, Ordering::Relaxed);
    g.start.store(start as usize, Ordering::Release);
    Some(slot)
}

/// The mapping of `slot` goes away: the handler leaves its range alone
/// (waiting for a patch under way to finish).
pub(super) fn release(slot: usize) {
    lock();
    GUARDED[slot].start.store(0, Ordering::Release);
    unlock();
    GUARDED[slot].used.store(false, Ordering::Release);
}

/// Where private memory starts in the mapping of `slot`, if the handler
/// had to put some there (the file was cut).
pub(super) fn patched_from(slot: usize) -> Option<usize> {
    let g = &GUARDED[slot];
    let from = g.from.load(Ordering::Acquire);
    (from < g.len.load(Ordering::Relaxed)).then_some(from)
}

/// Readers map the daemon's segment; if another program truncates that file
/// under them, touching the lost pages raises SIGBUS. Instead of dying from
/// the signal, say what happened, naming the instance dir, and exit 2.
/// (A segment replaced by a restarted daemon is a new file: the old mapping
/// stays valid and readers re-attach by inode.)
pub fn exit_on_sigbus(dir: &Path) {
    let mut first = false;
    READER_MSG.get_or_init(|| {
        first = true;
        let prog = std::env::args().next().map(|a| Path::new(&a).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or(a));
        let e = SegmentError::Shrunk { dir: dir.to_path_buf() };
        format!("{}: {e}; start the reader again\n", prog.unwrap_or_else(|| "reader".into())).into_bytes()
    });
    if !first {
        return;
    }
    // A screen (cache-stat) puts the terminal in raw mode: keep the mode it
    // had now, before that, to give it back on the way out.
    // SAFETY: isatty and tcgetattr on fd 0 with a zeroed termios to fill.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::isatty(0) == 1 && libc::tcgetattr(0, &mut t) == 0 {
            let _ = READER_TERMIOS.set(t);
        }
    }
    install();
}

/// Install the handler (once per process), keeping the action it replaces.
fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: reading the current action into a zeroed struct, then
        // installing a handler that only makes async-signal-safe calls (see
        // the module docs for mmap).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) == 0 {
                let _ = PREVIOUS.set(old);
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    if patch(addr) {
        return;
    }
    if let Some(m) = READER_MSG.get() {
        if let Some(t) = READER_TERMIOS.get() {
            const LEAVE: &[u8] = b"\x1b[?1049l\x1b[?25h";
            // SAFETY: tcsetattr and write(2) are async-signal-safe.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, t);
                if libc::isatty(1) == 1 {
                    libc::write(1, LEAVE.as_ptr().cast(), LEAVE.len());
                }
            }
        }
        // SAFETY: write(2) and _exit(2) are async-signal-safe; the message
        // was set before the handler was installed.
        unsafe {
            libc::write(2, m.as_ptr().cast(), m.len());
            libc::_exit(2);
        }
    }
    // Not ours: give SIGBUS its earlier action back and return; a faulting
    // access faults again and gets it, a signal sent (kill) is sent again.
    // SAFETY: sigaction(2) and raise(3) are async-signal-safe.
    unsafe {
        match PREVIOUS.get() {
            Some(old) => libc::sigaction(libc::SIGBUS, old, std::ptr::null_mut()),
            None => {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut())
            }
        };
        if (*info).si_code <= 0 {
            libc::raise(libc::SIGBUS);
        }
    }
}

/// Put private memory over the lost pages of the guarded mapping `addr`
/// is in. False when `addr` is in none (or the kernel refused).
fn patch(addr: usize) -> bool {
    let Some(g) = GUARDED.iter().find(|g| {
        let start = g.start.load(Ordering::Acquire);
        start != 0 && addr >= start && addr - start < g.len.load(Ordering::Relaxed)
    }) else {
        return false;
    };
    lock();
    let start = g.start.load(Ordering::Acquire);
    let (len, page) = (g.len.load(Ordering::Relaxed), PAGE.load(Ordering::Relaxed));
    let ok = if start == 0 || addr < start || addr - start >= len {
        // Let go meanwhile.
        false
    } else {
        let off = addr - start;
        let from = g.from.load(Ordering::Relaxed);
        if off >= from {
            // Another thread patched it first.
            true
        } else {
            // SAFETY: fstat on the mapping's file into a zeroed struct.
            let size = unsafe {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::fstat(g.fd.load(Ordering::Relaxed), &mut st) == 0 {
                    st.st_size.max(0) as usize
                } else {
                    0
                }
            };
            let lo = (off / page * page).min(size.div_ceil(page) * page);
            // SAFETY: [start + lo, start + from) lies inside a live mapping
            // of ours (released only under the lock we hold); MAP_FIXED puts
            // zeroed private pages in its place.
            let p = unsafe {
                libc::mmap(
                    (start + lo) as *mut libc::c_void,
                    from - lo,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                false
            } else {
                g.from.store(lo, Ordering::Release);
                true
            }
        }
    };
    unlock();
    ok
}
