//! The generator: `threads` OS threads, each a single-threaded tokio
//! runtime driving its share of the connections with our own minimal
//! HTTP/1.1 client (one prebuilt request per URL, httparse for the head,
//! bodies skipped by Content-Length, chunks or close), so the generator
//! costs little more than the syscalls — the same shape as wrk.
//!
//! Closed loop: each connection sends its next request when the previous
//! answer is complete; latency runs from the send. Open loop (`-r`,
//! `--stages`): the requests of a schedule are due at fixed times; any
//! free connection of the thread takes the next one, waits for its time
//! and sends it; latency runs from the time it was due, not from when it
//! could leave (coordinated-omission correction, as wrk2), so a stalled
//! server shows in the percentiles instead of silently slowing the load.
//! How late requests left is recorded (schedule lag), and requests still
//! unsent when the run ends are counted as dropped.
//!
//! The parts: what a thread's connections share and how requests are
//! picked, timed and recorded (`ctx`), the connection (`conn`), the
//! HTTP/1.1 client (`http1`) and, with `--h2`, the HTTP/2 one (`h2`),
//! with `--h3` the HTTP/3 one (`h3`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

mod conn;
mod ctx;
mod h2;
mod h3;
mod http1;
mod streams;

use self::ctx::Ctx;
pub use self::ctx::Live;
use crate::plan::{Pick, Plan, Schedule, Target};
use crate::stats::Recorder;

/// A second's view of the run, for progress lines and agents' reports.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    pub elapsed: f64,
    pub requests: u64,
    pub errors: u64,
    /// Requests per second over the last tick.
    pub rps: f64,
}

/// Run `plan`, starting at `start` (or now), calling `on_tick` about once
/// a second until the workers are done. Returns everything measured, with
/// the series cut to the run's length.
pub fn run(plan: &Plan, start: Option<Instant>, live: Arc<Live>, on_tick: &mut dyn FnMut(Tick)) -> Result<Recorder> {
    let target = Arc::new(plan.target()?);
    let start = start.unwrap_or_else(|| Instant::now() + Duration::from_millis(20));
    let budget = Arc::new(AtomicU64::new(plan.count.unwrap_or(u64::MAX)));
    let threads = plan.threads.min(plan.conns).max(1);
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let conns = plan.conns / threads + usize::from(t < plan.conns % threads);
        let first_conn = (0..t).map(|u| plan.conns / threads + usize::from(u < plan.conns % threads)).sum::<usize>();
        let mut share = plan.clone();
        share.rate = plan.rate.map(|r| r * conns as f64 / plan.conns as f64);
        share.stages =
            plan.stages.iter().map(|s| crate::plan::Stage { secs: s.secs, rate: s.rate * conns as f64 / plan.conns as f64 }).collect();
        let (target, live, budget) = (target.clone(), live.clone(), budget.clone());
        let h = std::thread::Builder::new().name(format!("bench-{t}")).spawn(move || -> Result<Recorder> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            Ok(rt.block_on(worker(share, target, live, budget, start, first_conn, conns)))
        })?;
        handles.push(h);
    }
    // Watch: a tick a second until every worker is done.
    let mut last = (0u64, start);
    let mut next = start + Duration::from_secs(1);
    while handles.iter().any(|h| !h.is_finished()) {
        let now = Instant::now();
        if now >= next {
            let requests = live.requests.load(Ordering::Relaxed);
            let dt = now.saturating_duration_since(last.1).as_secs_f64().max(1e-9);
            on_tick(Tick {
                elapsed: now.saturating_duration_since(start).as_secs_f64(),
                requests,
                errors: live.errors.load(Ordering::Relaxed),
                rps: (requests - last.0) as f64 / dt,
            });
            last = (requests, now);
            next += Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(10).min(next.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)));
    }
    let mut total = Recorder::default();
    for h in handles {
        let r = h.join().map_err(|_| anyhow!("a generator thread panicked"))??;
        total.merge(&r);
    }
    // One row per second of the run: what finished after the end (in
    // flight when it ended) goes in the last one.
    let elapsed = Instant::now().saturating_duration_since(start).as_secs_f64();
    let len = match plan.length_s() {
        Some(l) if !live.stop.load(Ordering::Relaxed) => l,
        Some(l) => l.min(elapsed),
        None => elapsed,
    };
    let rows = (len.ceil() as usize).max(1);
    total.fold_after(rows - 1);
    Ok(total)
}

async fn worker(
    plan: Plan,
    target: Arc<Target>,
    live: Arc<Live>,
    budget: Arc<AtomicU64>,
    start: Instant,
    first: usize,
    conns: usize,
) -> Recorder {
    let zipf = match plan.pick {
        Pick::Zipf(s) => Some(zipf_cdf(target.requests.len(), s)),
        _ => None,
    };
    let ctx = Rc::new(Ctx {
        deadline: plan.length_s().map(|l| start + Duration::from_secs_f64(l)),
        schedule: plan.open_loop().then(|| Schedule::new(&plan)),
        plan,
        target,
        live,
        budget,
        start,
        next_slot: Cell::new(0),
        zipf,
        rec: RefCell::new(Recorder::default()),
    });
    tokio::time::sleep_until(start.into()).await;
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::with_capacity(conns);
    for i in 0..conns {
        let ctx = ctx.clone();
        if ctx.plan.h3 {
            tasks.push(local.spawn_local(h3::connection(ctx, first + i)));
        } else if ctx.plan.h2 {
            tasks.push(local.spawn_local(h2::connection(ctx, first + i)));
        } else {
            tasks.push(local.spawn_local(http1::connection(ctx, first + i)));
        }
    }
    local
        .run_until(async {
            for t in tasks {
                let _ = t.await;
            }
        })
        .await;
    let mut rec = ctx.rec.borrow().clone();
    if let Some(s) = &ctx.schedule {
        let end = ctx.plan.length_s().unwrap_or(0.0).min(Instant::now().saturating_duration_since(start).as_secs_f64());
        let due = s.due_by(end).floor() as u64;
        rec.dropped = due.saturating_sub(ctx.next_slot.get().min(due));
    }
    rec
}

/// Cumulative probabilities of ranks 1..=n under Zipf(s).
pub fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let w: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = w.iter().sum();
    let mut acc = 0.0;
    w.iter()
        .map(|x| {
            acc += x / total;
            acc
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ctx::Rng;
    use super::*;

    #[test]
    fn zipf_is_skewed_and_sums_to_one() {
        let cdf = zipf_cdf(1000, 1.0);
        assert!((cdf[999] - 1.0).abs() < 1e-9);
        // With s = 1 the top 10 of 1000 take about 39% of the requests.
        assert!((0.35..0.43).contains(&cdf[9]), "{}", cdf[9]);
        let mut rng = Rng::new(3);
        let n = 100_000;
        let top = (0..n)
            .filter(|_| {
                let u = rng.unit();
                cdf.partition_point(|p| *p < u) < 10
            })
            .count();
        assert!((top as f64 / n as f64 - cdf[9]).abs() < 0.01);
    }
}
