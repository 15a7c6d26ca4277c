//! The event loops that serve client connections: each a thread running a
//! tokio runtime of one worker, with its own poller and timers. What a
//! connection's requests spawn (background fetches, ESI includes) runs on
//! the connection's loop.
//!
//! Loops are packed, then spread. A new connection goes to the first loop
//! (in order) that was busy less than half of the last second, else to the
//! least busy one; and a loop busy most of the last second, while another
//! is mostly idle, sheds a quarter of its connections: an HTTP/1
//! connection, in the clear or TLS, moves between two requests (see
//! `req::requests` and `listen::movable`), its socket registered anew with
//! the other loop's poller; an HTTP/2 one, over TCP, moves between two
//! polls of its task, streams in progress and all (see `child::roam`). So
//! a light load is served by one thread, which gathers many sockets'
//! readiness per wake-up, and a heavy one by all of them.
//!
//! Measured (scripts/bench-cpu.sh; 1 B hits at 12,000/s over 20
//! connections, 2 cores): one shared tokio runtime of 2 workers, 14.7 µs
//! of CPU per request (its idle worker was woken, a futex each way, to
//! steal what a socket's readiness had made runnable); 2 loops given
//! connections in turn, 15.5 µs (each thread woken for its own sockets);
//! packed into one, 11 µs.
//!
//! A one-worker runtime, not a current-thread one, because bodyaccess
//! blocks its worker for a request body (`block_in_place` hands the loop's
//! other tasks to a stand-in thread meanwhile).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Runtime};

/// Below this share of the last second busy (per mille), a loop takes new
/// connections before the loops after it.
const PACK: u32 = 500;
/// Above this, a loop sheds connections to one below `PACK`.
const SHED: u32 = 850;

/// The loops of a child.
pub struct Loops {
    loops: Vec<Loop>,
    /// The runtimes, until `shutdown` (or the drop) stops them.
    rts: Mutex<Vec<Runtime>>,
    /// When `rebalance` last looked.
    last: Mutex<Instant>,
}

struct Loop {
    rt: Handle,
    state: Arc<State>,
}

/// What the loop's own thread and the balancer share.
#[derive(Default)]
struct State {
    /// Connections open on this loop.
    open: AtomicUsize,
    /// Per mille of the last interval the loop's worker was busy.
    busy: AtomicU32,
    /// The worker's busy time at the last look, in ns.
    busy_ns: AtomicU64,
    /// Connections to move off this loop (taken at request boundaries).
    shed: AtomicUsize,
    /// `shed` was set by `rebalance` (which withdraws only its own asks).
    asked: AtomicBool,
}

thread_local! {
    /// The state of the loop this thread serves (None off the loops).
    static HERE: RefCell<Option<Arc<State>>> = const { RefCell::new(None) };
    /// Its tag (0 off the loops): what a socket registered here remembers.
    static TAG: Cell<usize> = const { Cell::new(0) };
}

/// The tag of the loop this thread serves, 0 off the loops (a thread
/// standing in for a loop's blocked worker has its loop's tag).
pub fn here() -> usize {
    TAG.with(Cell::get)
}

/// Counts a connection open on its loop until dropped.
pub struct Open(Arc<State>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Should the connection being served on this thread move to another
/// loop now? (Yes for as many as the balancer asked this loop to shed.)
pub fn take_move() -> bool {
    HERE.with(|h| {
        h.borrow().as_ref().is_some_and(|s| {
            s.shed.load(Ordering::Relaxed) > 0 && s.shed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
        })
    })
}

impl Loops {
    /// `n` loops (0: one per CPU this process may run on).
    pub fn start(n: usize) -> io::Result<Loops> {
        let n = if n == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { n };
        let mut rts = Vec::new();
        let loops = (0..n)
            .map(|i| {
                let state = Arc::new(State::default());
                let mine = state.clone();
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .thread_name(format!("cache-loop-{i}"))
                    .on_thread_start(move || {
                        TAG.with(|t| t.set(Arc::as_ptr(&mine) as usize));
                        HERE.with(|h| *h.borrow_mut() = Some(mine.clone()));
                    })
                    .build()?;
                let handle = rt.handle().clone();
                rts.push(rt);
                Ok(Loop { rt: handle, state })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Loops { loops, rts: Mutex::new(rts), last: Mutex::new(Instant::now()) })
    }

    /// Connections open on each loop.
    pub fn open(&self) -> Vec<usize> {
        self.loops.iter().map(|l| l.state.open.load(Ordering::Relaxed)).collect()
    }

    /// Run a new connection's task: on the first loop less than half busy,
    /// else the least busy. `task` builds the future inside that loop's
    /// runtime, so what it registers (a socket, a timer) is that loop's.
    pub fn spawn<F, Fut>(&self, task: F)
    where
        F: FnOnce(Open) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let busy = |l: &&Loop| l.state.busy.load(Ordering::Relaxed);
        let Some(l) = self.loops.iter().find(|l| busy(l) < PACK).or_else(|| self.loops.iter().min_by_key(busy)) else { return };
        Self::run_on(l, task);
    }

    /// Where a connection this thread's loop sheds goes: the least busy
    /// other loop (None: there is no other).
    pub fn pick_move(&self) -> Option<usize> {
        let here = HERE.with(|h| h.borrow().clone());
        let away = |(_, l): &(usize, &Loop)| here.as_ref().is_none_or(|h| !Arc::ptr_eq(h, &l.state));
        self.loops.iter().enumerate().filter(away).min_by_key(|(_, l)| l.state.busy.load(Ordering::Relaxed)).map(|(i, _)| i)
    }

    /// Run a connection's task on loop `i` (the first if there is no
    /// such loop).
    pub fn spawn_on<F, Fut>(&self, i: usize, task: F)
    where
        F: FnOnce(Open) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if let Some(l) = self.loops.get(i).or(self.loops.first()) {
            Self::run_on(l, task);
        }
    }

    fn run_on<F, Fut>(l: &Loop, task: F)
    where
        F: FnOnce(Open) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        l.state.open.fetch_add(1, Ordering::Relaxed);
        let open = Open(l.state.clone());
        l.rt.spawn(async move { task(open).await });
    }

    /// Look at how busy each loop was since the last look, and ask a loop
    /// busy most of it, while another was mostly idle, to shed a quarter
    /// of its connections. (Called once a second.)
    pub fn rebalance(&self) {
        let now = Instant::now();
        let span = {
            let Ok(mut last) = self.last.lock() else { return };
            let span = now.duration_since(*last);
            *last = now;
            span
        };
        // Shares of a shorter span say little (the first tick comes at once).
        if span < Duration::from_millis(500) {
            return;
        }
        for l in &self.loops {
            let total = l.rt.metrics().worker_total_busy_duration(0).as_nanos() as u64;
            let was = l.state.busy_ns.swap(total, Ordering::Relaxed);
            let share = total.saturating_sub(was) as f64 / span.as_nanos() as f64;
            l.state.busy.store((share * 1000.0).min(1000.0) as u32, Ordering::Relaxed);
        }
        let idle = self.loops.iter().any(|l| l.state.busy.load(Ordering::Relaxed) < PACK);
        for l in &self.loops {
            if idle && l.state.busy.load(Ordering::Relaxed) > SHED {
                l.state.shed.store(l.state.open.load(Ordering::Relaxed).div_ceil(4), Ordering::Relaxed);
                l.state.asked.store(true, Ordering::Relaxed);
            } else if l.state.asked.swap(false, Ordering::Relaxed) {
                l.state.shed.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Ask loop `i` to move `n` of its connections (as `rebalance` does
    /// for a busy loop; tests ask directly).
    pub fn shed(&self, i: usize, n: usize) {
        if let Some(l) = self.loops.get(i) {
            l.state.shed.store(n, Ordering::Relaxed);
        }
    }

    /// Stop every loop, giving its tasks up to `wait` to end (not from
    /// a loop's own thread). Connections handed over later are dropped.
    pub fn shutdown(&self, wait: Duration) {
        for rt in self.take_runtimes() {
            rt.shutdown_timeout(wait);
        }
    }

    /// The runtimes not stopped yet (none after the first call).
    fn take_runtimes(&self) -> Vec<Runtime> {
        std::mem::take(&mut *self.rts.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Loops {
    /// Not shut down: the loops stop without waiting, which may be done
    /// anywhere, a loop's own thread included.
    fn drop(&mut self) {
        for rt in self.take_runtimes() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where each of `n` tasks spawned with `spawn` ran, the tasks held
    /// open until the returned senders are dropped.
    fn place(loops: &Loops, n: usize) -> (Vec<String>, Vec<tokio::sync::oneshot::Sender<()>>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut gates = Vec::new();
        for _ in 0..n {
            let (gate_tx, gate_rx) = tokio::sync::oneshot::channel::<()>();
            let tx = tx.clone();
            loops.spawn(move |open| async move {
                tx.send(std::thread::current().name().unwrap_or("").to_string()).unwrap();
                let _ = gate_rx.await;
                drop(open);
            });
            gates.push(gate_tx);
        }
        ((0..n).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect(), gates)
    }

    #[test]
    fn packs_idle_loops_then_spreads_and_sheds_from_a_busy_one() {
        let loops = Loops::start(2).unwrap();
        assert_eq!(loops.open().len(), 2);
        // Idle: every connection on the first loop.
        let (on, gates) = place(&loops, 4);
        assert!(on.iter().all(|t| t == "cache-loop-0"), "{on:?}");
        assert_eq!(loops.open(), vec![4, 0]);
        // The first loop busy: new connections go to the second, and the
        // first is asked to shed a quarter of its own.
        loops.loops[0].rt.spawn(async {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(500) {}
        });
        *loops.last.lock().unwrap() = Instant::now();
        std::thread::sleep(Duration::from_millis(550));
        loops.rebalance();
        assert!(loops.loops[0].state.busy.load(Ordering::Relaxed) > SHED);
        assert_eq!(loops.loops[0].state.shed.load(Ordering::Relaxed), 1);
        assert_eq!(loops.loops[1].state.shed.load(Ordering::Relaxed), 0);
        let (on, more) = place(&loops, 2);
        assert!(on.iter().all(|t| t == "cache-loop-1"), "{on:?}");
        // Only a thread of the busy loop is asked to move, and only once.
        let (tx, rx) = std::sync::mpsc::channel();
        loops.loops[0].rt.spawn(async move { tx.send((take_move(), take_move())).unwrap() });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), (true, false));
        assert!(!take_move());
        // Closed connections are counted down.
        drop((gates, more));
        let deadline = Instant::now() + Duration::from_secs(5);
        while loops.open() != vec![0, 0] {
            assert!(Instant::now() < deadline, "open counts stayed {:?}", loops.open());
            std::thread::sleep(Duration::from_millis(5));
        }
        loops.shutdown(Duration::from_secs(1));
    }
}
