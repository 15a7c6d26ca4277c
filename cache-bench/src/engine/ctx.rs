//! What a thread's connection tasks share ([`Ctx`]), how each request
//! is picked ([`Picker`]), when it is due ([`next_due`]) and how its
//! outcome is recorded ([`record`]) — for the HTTP/1 and HTTP/2 clients
//! alike.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::plan::{Pick, Plan, Schedule, Target};
use crate::stats::{ErrorKind, Recorder};

/// What the workers share with whoever watches the run.
#[derive(Default)]
pub struct Live {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    /// Set to end the run early (Ctrl-C, a coordinator gone).
    pub stop: AtomicBool,
}

/// Per-thread state the connection tasks share.
pub(super) struct Ctx {
    pub(super) plan: Plan,
    pub(super) target: Arc<Target>,
    pub(super) live: Arc<Live>,
    pub(super) budget: Arc<AtomicU64>,
    pub(super) start: Instant,
    pub(super) deadline: Option<Instant>,
    pub(super) schedule: Option<Schedule>,
    /// Open loop: the next slot of this thread's schedule.
    pub(super) next_slot: Cell<u64>,
    pub(super) zipf: Option<Vec<f64>>,
    pub(super) rec: RefCell<Recorder>,
}

impl Ctx {
    pub(super) fn second(&self, at: Instant) -> usize {
        at.saturating_duration_since(self.start).as_secs() as usize
    }
    pub(super) fn stopped(&self) -> bool {
        self.live.stop.load(Ordering::Relaxed)
    }
    /// Closed loop: may another request go?
    pub(super) fn take(&self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) || self.stopped() {
            return false;
        }
        self.budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1)).is_ok()
    }
}

/// A small fast PRNG (xorshift64*), one per connection.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// When the next request is due, and the time its latency runs from;
/// None when the run is over. In the closed loop it is now. With a rate,
/// it is its slot's time: a request that had to wait for a free
/// connection runs from its due time (the server's slowness delayed it);
/// one whose connection was free early and slept until the due time runs
/// from when it left, so the timer's millisecond grain is not charged to
/// the server.
pub(super) async fn next_due(ctx: &Ctx, pace: &mut Pace) -> Option<Instant> {
    let Some(s) = &ctx.schedule else {
        return ctx.take().then(Instant::now);
    };
    if ctx.stopped() {
        return None;
    }
    let i = ctx.next_slot.get();
    let due = ctx.start + Duration::from_secs_f64(s.time_of(i)?);
    if ctx.deadline.is_some_and(|d| due > d) {
        return None;
    }
    ctx.next_slot.set(i + 1);
    let slept = due > Instant::now();
    if slept {
        pace.sleep_until(due).await;
    }
    let now = Instant::now();
    ctx.rec.borrow_mut().lag(now.saturating_duration_since(due).as_micros() as u64);
    Some(if slept { now } else { due })
}

/// How one connection task waits for its requests' due times: tokio's
/// timer by default, which fires on a millisecond tick (the requests
/// due within one millisecond leave together, as wrk2's do); with
/// `--fine-pace` its own timerfd, which wakes the runtime's poller at
/// the due time itself, so a rate arrives at the server as evenly spaced
/// requests (what the lag percentiles then show).
pub(super) struct Pace(Option<tokio::io::unix::AsyncFd<OwnedFd>>);

impl Pace {
    /// For a task of `ctx`'s thread (inside its runtime).
    pub(super) fn new(ctx: &Ctx) -> Pace {
        Pace(if ctx.plan.fine_pace && ctx.schedule.is_some() { timerfd() } else { None })
    }

    async fn sleep_until(&mut self, due: Instant) {
        if let Some(fd) = &self.0 {
            if arm(fd.as_raw_fd(), due.saturating_duration_since(Instant::now())) {
                loop {
                    let Ok(mut ready) = fd.readable().await else { break };
                    let mut n = [0u8; 8];
                    // SAFETY: reads 8 bytes into a buffer of 8 from the
                    // timerfd this Pace owns.
                    let read = ready.try_io(|f| match unsafe { libc::read(f.as_raw_fd(), n.as_mut_ptr().cast(), n.len()) } {
                        r if r < 0 => Err(std::io::Error::last_os_error()),
                        r => Ok(r),
                    });
                    match read {
                        Ok(Ok(_)) => return,
                        Ok(Err(_)) => break,
                        Err(_would_block) => continue,
                    }
                }
            }
        }
        // No timerfd (or it failed): the runtime's timer.
        tokio::time::sleep_until(due.into()).await;
    }
}

/// A non-blocking monotonic timerfd registered with this thread's runtime.
fn timerfd() -> Option<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: creates a descriptor this process then owns.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just created and is owned by nothing else; the
    // OwnedFd keeps it open for as long as the AsyncFd holds it.
    unsafe { tokio::io::unix::AsyncFd::register(OwnedFd::from_raw_fd(fd)) }.ok()
}

/// Set the timerfd to expire once, `after` from now (at once if zero).
fn arm(fd: i32, after: Duration) -> bool {
    let after = after.max(Duration::from_nanos(1));
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: libc::timespec { tv_sec: after.as_secs() as libc::time_t, tv_nsec: after.subsec_nanos() as libc::c_long },
    };
    // SAFETY: a plain syscall on a descriptor the caller owns, with a
    // valid itimerspec and no old-value pointer.
    unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) == 0 }
}

/// A response the plan expects (status, size), or the error it counts as.
pub(super) fn expected(plan: &Plan, r: Resp) -> Result<Resp, ErrorKind> {
    let status_ok = match plan.expect_status {
        Some(s) => r.status == s,
        None => (200..400).contains(&r.status),
    };
    if !status_ok {
        Err(ErrorKind::Status)
    } else if plan.expect_size.is_some_and(|s| s != r.body) {
        Err(ErrorKind::ShortBody)
    } else {
        Ok(r)
    }
}

/// Which URL each request of one connection (or HTTP/2 stream loop)
/// takes: Zipf, random, or in turn from a start spread over the
/// connections.
pub(super) struct Picker {
    rng: Rng,
    seq: usize,
}

impl Picker {
    /// For loop `index` of `of`.
    pub(super) fn new(ctx: &Ctx, index: usize, of: usize) -> Picker {
        let n_urls = ctx.target.requests.len();
        Picker { rng: Rng::new(ctx.plan.seed ^ (index as u64 + 1)), seq: index * n_urls / of.max(1) }
    }

    pub(super) fn next(&mut self, ctx: &Ctx) -> usize {
        let n_urls = ctx.target.requests.len();
        match (&ctx.zipf, ctx.plan.pick) {
            (Some(cdf), _) => {
                let u = self.rng.unit();
                cdf.partition_point(|p| *p < u).min(n_urls - 1)
            }
            (None, Pick::Random) => (self.rng.next() % n_urls as u64) as usize,
            _ => {
                self.seq = (self.seq + 1) % n_urls;
                self.seq
            }
        }
    }
}

/// Record a request's outcome: its latency from `base`, or its error.
pub(super) fn record(ctx: &Ctx, base: Instant, done: Instant, outcome: Result<Resp, ErrorKind>) {
    let sec = ctx.second(done);
    match outcome {
        Ok(r) => {
            let lat = done.saturating_duration_since(base).as_micros() as u64;
            let ttfb = r.first_byte.saturating_duration_since(base).as_micros() as u64;
            ctx.rec.borrow_mut().ok(sec, lat, ttfb, r.bytes, r.hit);
            ctx.live.requests.fetch_add(1, Ordering::Relaxed);
        }
        Err(k) => {
            ctx.rec.borrow_mut().error(sec, k);
            ctx.live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a response was.
pub(super) struct Resp {
    pub(super) status: u16,
    /// Body bytes, and all bytes read (head + body).
    pub(super) body: u64,
    pub(super) bytes: u64,
    pub(super) hit: bool,
    pub(super) close: bool,
    pub(super) first_byte: Instant,
}
