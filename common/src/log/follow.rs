//! Following the log of an instance: attach (waiting for the daemon if it is
//! not there yet), poll the ring, report overruns, and notice a daemon that
//! stopped, died or restarted, then re-attach to its successor. Shared by
//! cache-log and cache-ncsa.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::log::group::{Group, Grouper};
use crate::log::ring::{Poll, Reader};
use crate::log::vsl::Records;
use crate::segment::{Health, Segment, SegmentError};

/// How to follow.
#[derive(Clone, Debug)]
pub struct Options {
    /// Start at the oldest record and stop when caught up (`-d`).
    pub dump: bool,
    /// Give up if no daemon appears within this time (None: wait forever).
    pub wait: Option<Duration>,
}

/// What the follower reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// Validated, whole records.
    Records(&'a [u8]),
    /// A line for stderr: overruns, attach, restart, stop.
    Notice(String),
    /// Pending transactions should be flushed (overrun, daemon gone).
    Flush,
    /// Nothing new right now (a chance to expire pending work).
    Idle,
}

/// Should the follower go on?
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Set by a reader's signal handler (SIGTERM, SIGINT) to end
/// [`follow_groups`] cleanly: pending output is flushed, the run returns Ok.
pub static STOP_REQUESTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

const POLL_SLEEP: Duration = Duration::from_millis(10);
const HEALTH_EVERY: Duration = Duration::from_millis(200);

/// Follow the log of instance `dir`, calling `f` with what happens, until
/// `f` says stop, a dump is complete, or attaching fails for good.
pub fn follow(dir: &Path, opts: &Options, mut f: impl FnMut(Event<'_>) -> Flow) -> Result<(), SegmentError> {
    let started = Instant::now();
    let mut said_waiting = false;
    let mut announce = false;
    let mut first = true;
    loop {
        // A dump also reads the log a stopped or dead daemon left behind.
        crate::segment::exit_on_sigbus(dir);
        let opened = if opts.dump { Segment::open_any(dir) } else { Segment::open(dir) };
        let seg = match opened {
            Ok(s) => {
                if opts.dump && (s.state() == crate::segment::STATE_STOPPED || !s.daemon_alive()) {
                    let msg = format!("reading the log cache-d (pid {}) left in {} (it is not running)", s.pid(), dir.display());
                    if f(Event::Notice(msg)) == Flow::Stop {
                        return Ok(());
                    }
                }
                s
            }
            Err(e) if e.is_transient() && !opts.dump => {
                if opts.wait.is_some_and(|w| started.elapsed() >= w) {
                    return Err(e);
                }
                if !said_waiting {
                    if f(Event::Notice(format!("{e}; waiting for it"))) == Flow::Stop {
                        return Ok(());
                    }
                    said_waiting = true;
                }
                announce = true;
                first = false;
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e),
        };
        if announce {
            let msg = format!("attached to cache-d (pid {}, generation {}) in {}", seg.pid(), seg.generation(), dir.display());
            if f(Event::Notice(msg)) == Flow::Stop {
                return Ok(());
            }
        }
        // On the first attach, start where asked; after a (re)start, read
        // the new daemon's log from its beginning.
        let mut reader = if opts.dump || !first { Reader::at_oldest(seg.ring()) } else { Reader::at_tail(seg.ring()) };
        first = false;
        match follow_segment(&seg, &mut reader, opts, &mut f) {
            Gone::Stop => return Ok(()),
            Gone::Health(h) => {
                let dirs = dir.display();
                let msg = match h {
                    Health::Stopped => format!("cache-d in {dirs} stopped; waiting for it to start again"),
                    Health::Replaced => format!("cache-d in {dirs} restarted (was generation {}); re-attaching", seg.generation()),
                    Health::Dead => format!("cache-d (pid {}) in {dirs} died; waiting for it to start again", seg.pid()),
                    Health::Running => String::new(),
                };
                if f(Event::Flush) == Flow::Stop || f(Event::Notice(msg)) == Flow::Stop {
                    return Ok(());
                }
                // The message above already says we wait.
                said_waiting = true;
                announce = true;
            }
        }
    }
}

enum Gone {
    Stop,
    Health(Health),
}

fn follow_segment(seg: &Segment, reader: &mut Reader, opts: &Options, f: &mut impl FnMut(Event<'_>) -> Flow) -> Gone {
    let mut last_check = Instant::now();
    loop {
        let flow = match reader.poll() {
            Poll::Records(buf) => f(Event::Records(buf)),
            Poll::Overrun { lost } => {
                if f(Event::Flush) == Flow::Stop {
                    return Gone::Stop;
                }
                f(Event::Notice(format!("Log overrun: the reader fell {lost} bytes behind and skipped them; Log reacquired at the tail")))
            }
            Poll::Idle => {
                if opts.dump {
                    let _ = f(Event::Flush);
                    return Gone::Stop;
                }
                if f(Event::Idle) == Flow::Stop {
                    return Gone::Stop;
                }
                if last_check.elapsed() >= HEALTH_EVERY {
                    last_check = Instant::now();
                    let h = seg.health();
                    if h != Health::Running {
                        // Drain what the daemon wrote before it went.
                        if let Poll::Records(buf) = reader.poll() {
                            if f(Event::Records(buf)) == Flow::Stop {
                                return Gone::Stop;
                            }
                            continue;
                        }
                        return Gone::Health(h);
                    }
                }
                std::thread::sleep(POLL_SLEEP);
                Flow::Continue
            }
        };
        if flow == Flow::Stop {
            return Gone::Stop;
        }
    }
}

/// Parse a reader's `-t`: seconds, or "off" (None: wait forever).
pub fn parse_wait(v: Option<&str>) -> Result<Option<Duration>, String> {
    match v {
        None | Some("off") => Ok(None),
        Some(s) => {
            seconds(s, 0.0, 1e9).map(|f| Some(Duration::from_secs_f64(f))).map_err(|_| format!("-t {s}: expected seconds or \"off\""))
        }
    }
}

/// A number of seconds from the command line within `min..=max` (finite:
/// "inf" and "nan" parse as numbers, but no deadline can hold them).
pub fn seconds(s: &str, min: f64, max: f64) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (min..=max).contains(&v) => Ok(v),
        _ => Err(format!("\"{s}\" is not a number of seconds from {min} to {max}")),
    }
}

/// clap value parser: seconds from 0 to a day.
pub fn seconds_upto_a_day(s: &str) -> Result<f64, String> {
    seconds(s, 0.0, 86400.0)
}

/// Follow the log as transaction groups: notices go to stderr prefixed with
/// `tool`, each finished group to `emit`, which writes to `out`. A closed
/// output pipe ends the run quietly; other errors become messages.
pub fn follow_groups<W: Write + ?Sized>(
    tool: &str,
    dir: &Path,
    opts: &Options,
    mut grouper: Grouper,
    timeout: Duration,
    out: &mut W,
    mut emit: impl FnMut(&mut W, &Group) -> std::io::Result<()>,
) -> Result<(), String> {
    let mut groups = Vec::new();
    let mut io_err: Option<std::io::Error> = None;
    let res = follow(dir, opts, |ev| {
        match ev {
            Event::Records(buf) => {
                let now = Instant::now();
                for r in Records::new(buf) {
                    grouper.feed(&r, now, &mut groups);
                }
            }
            Event::Notice(n) => {
                let _ = out.flush();
                eprintln!("{tool}: {n}");
            }
            Event::Flush => grouper.flush(&mut groups),
            Event::Idle => grouper.expire(Instant::now(), timeout, &mut groups),
        }
        for g in groups.drain(..) {
            if let Err(e) = emit(out, &g) {
                io_err = Some(e);
                return Flow::Stop;
            }
        }
        if let Err(e) = out.flush() {
            io_err = Some(e);
            return Flow::Stop;
        }
        if STOP_REQUESTED.load(std::sync::atomic::Ordering::SeqCst) {
            return Flow::Stop;
        }
        Flow::Continue
    });
    match io_err {
        // A closed pipe (`| head`) is not an error.
        Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Some(e) => return Err(format!("writing output: {e}")),
        None => {}
    }
    res.map_err(|e| e.to_string())
}
