//! Running a plan on this machine: the progress line, Ctrl-C (the run
//! ends early and still reports), and the local run itself. `run`,
//! `search` and the agents' coordinator all use these.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::engine::{self, Live, Tick};
use crate::plan::Plan;
use crate::stats::Recorder;

/// Set by SIGINT/SIGTERM: end the run early, still report.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// A progress line on a terminal (stderr), nothing otherwise.
pub struct Progress {
    on: bool,
    length: Option<f64>,
}

impl Progress {
    pub fn new(quiet: bool, length: Option<f64>) -> Progress {
        Progress { on: !quiet && std::io::stderr().is_terminal(), length }
    }
    pub fn tick(&self, t: &Tick, extra: &str) {
        if !self.on {
            return;
        }
        let of = self.length.map(|l| format!("/{l:.0}s")).unwrap_or_default();
        let mut e = std::io::stderr();
        let _ = write!(
            e,
            "\r\x1b[K  {:>5.1}s{of}  {:>10.0} req/s  {:>10} requests  {:>6} errors{extra}",
            t.elapsed, t.rps, t.requests, t.errors
        );
        let _ = e.flush();
    }
    pub fn done(&self) {
        if self.on {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

/// Run `plan` here, with progress and Ctrl-C; returns the measurements
/// and the wall time from start to end.
pub fn run_local(plan: &Plan, quiet: bool) -> Result<(Recorder, f64, Instant)> {
    let live = Arc::new(Live::default());
    let progress = Progress::new(quiet, plan.length_s());
    let start = Instant::now() + Duration::from_millis(20);
    let l = live.clone();
    let rec = engine::run(plan, Some(start), live, &mut |t| {
        if interrupted() {
            l.stop.store(true, Ordering::Relaxed);
        }
        progress.tick(&t, "");
    })?;
    progress.done();
    let elapsed = Instant::now().saturating_duration_since(start).as_secs_f64();
    Ok((rec, elapsed, start))
}
