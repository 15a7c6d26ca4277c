//! `import vsthrottle;`: varnish-modules' vmod_vsthrottle, a rate limiter
//! shared by every task and program of the process. A token bucket is
//! kept per (key, limit, period, block); is_denied() takes a token,
//! return_token() gives one back, remaining() and blocked() read the
//! bucket. Buckets idle for longer than their period are dropped every
//! [`GC_INTERVAL`] calls on a partition, as the vmod does, so memory
//! follows the keys in use.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use super::program::*;
use super::vmodargs::vcc_args;
use crate::vcl::ast::*;
use crate::vcl::diag::{err, VclError};

/// Partitions of the bucket table (each behind its own lock).
const PARTS: usize = 16;
/// Calls on a partition between two sweeps of its idle buckets.
const GC_INTERVAL: u32 = 1000;

/// One key's token bucket (the vmod's `struct tbucket`).
#[derive(Debug, Clone, PartialEq)]
struct Bucket {
    last_used: f64,
    period: f64,
    /// Until when it is blocked (0: not).
    block: f64,
    tokens: i64,
    capacity: i64,
}

/// What identifies a bucket: the key and the three rules (the vmod
/// hashes the same four).
type BucketKey = (String, i64, u64, u64);

/// One partition of the table.
#[derive(Default)]
pub(crate) struct Part {
    buckets: HashMap<BucketKey, Bucket>,
    calls: u32,
}

/// The process's table of buckets.
pub(crate) struct Throttle {
    parts: Vec<Mutex<Part>>,
}

/// Seconds on a monotonic clock (the vmod's VTIM_mono).
fn mono() -> f64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() + 1.0
}

/// `x` as C's `(long)` conversion gives it on x86-64: out of range or not
/// a number is LONG_MIN (a period of 0 makes such a quotient).
fn c_long(x: f64) -> i64 {
    if x.is_finite() && x.abs() < 9.2e18 {
        x as i64
    } else {
        i64::MIN
    }
}

impl Bucket {
    fn new(limit: i64, period: f64, now: f64) -> Bucket {
        Bucket { last_used: now, period, block: 0.0, tokens: limit, capacity: limit }
    }

    /// Tokens earned since the bucket was last used, up to its capacity.
    fn refill(&mut self, now: f64) {
        let delta = now - self.last_used;
        self.tokens = self.tokens.wrapping_add(c_long(delta / self.period * self.capacity as f64));
        if self.tokens > self.capacity {
            self.tokens = self.capacity;
        }
    }

    /// Take a token: is the request denied (the vmod's is_denied)?
    fn take(&mut self, block: f64, now: f64) -> bool {
        self.refill(now);
        let mut denied = true;
        let mut blocked = false;
        if block > 0.0 && now < self.block {
            blocked = true;
            self.last_used = now;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            if !blocked {
                denied = false;
            }
            self.last_used = now;
        } else if block > 0.0 && !blocked {
            self.block = now + block;
        }
        if block > 0.0 && !denied && !blocked {
            self.block = 0.0;
        }
        denied
    }
}

impl Throttle {
    fn new() -> Throttle {
        Throttle { parts: (0..PARTS).map(|_| Mutex::new(Part::default())).collect() }
    }

    /// The process's table.
    fn get() -> &'static Throttle {
        static T: OnceLock<Throttle> = OnceLock::new();
        T.get_or_init(Throttle::new)
    }

    /// Run `f` on the bucket of these rules (made full if there is none),
    /// then sweep the partition if its turn has come.
    fn with<R>(&self, key: &str, limit: i64, period: f64, block: f64, now: f64, f: impl FnOnce(&mut Bucket) -> R) -> R {
        let k: BucketKey = (key.to_string(), limit, period.to_bits(), block.to_bits());
        let part = &self.parts[part_of(key)];
        let mut p = part.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(p.buckets.entry(k).or_insert_with(|| Bucket::new(limit, period, now)));
        p.calls += 1;
        if p.calls >= GC_INTERVAL {
            p.calls = 0;
            p.buckets.retain(|_, b| now - b.last_used <= b.period);
        }
        r
    }

    /// How many buckets are kept (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.parts.iter().map(|p| p.lock().map(|p| p.buckets.len()).unwrap_or(0)).sum()
    }
}

/// A key's partition: FNV-1a of its bytes (stable across calls).
fn part_of(key: &str) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for b in key.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h as usize % PARTS
}

const PARAMS: [&str; 4] = ["key", "limit", "period", "block"];

/// The four arguments, by position or by name (block = 0s when left
/// out, except in blocked(), where it is required).
fn arguments(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Result<Vec<ExprFn>, VclError> {
    let needed = if name == "vsthrottle.blocked" { 4 } else { 3 };
    let mut fns = Vec::with_capacity(4);
    for e in vcc_args(&PARAMS, needed, args, names, pos)?.into_iter().flatten() {
        fns.push(sc.expr(e)?);
    }
    Ok(fns)
}

/// A function of vmod_vsthrottle; None for a name that is not one.
pub(super) fn call(name: &str, args: &[Expr], names: &[Option<String>], pos: Pos, sc: &Scope<'_>) -> Option<Result<ExprFn, VclError>> {
    let f = name.strip_prefix("vsthrottle.")?;
    if !matches!(f, "is_denied" | "return_token" | "remaining" | "blocked") {
        return Some(err(format!("Symbol not found: '{name}'"), pos));
    }
    let a = match arguments(name, args, names, pos, sc) {
        Ok(a) => a,
        Err(e) => return Some(Err(e)),
    };
    let f = f.to_string();
    Some(Ok(Box::new(move |t, c| {
        // An unset key is the vmod's NULL: denied, -1, -1s.
        let key = match a[0](t, c) {
            Val::None => None,
            v => Some(v.text()),
        };
        let limit = c_long(a[1](t, c).num().unwrap_or(0.0));
        let period = a[2](t, c).num().unwrap_or(0.0);
        let block = a.get(3).map_or(0.0, |b| b(t, c).num().unwrap_or(0.0));
        let throttle = Throttle::get();
        let now = mono();
        match (f.as_str(), key) {
            ("is_denied", None) => Val::Bool(true),
            ("return_token", None) => Val::None,
            ("remaining", None) => Val::Int(-1),
            (_, None) => Val::Dur(-1.0),
            ("is_denied", Some(k)) => Val::Bool(throttle.with(&k, limit, period, block, now, |b| b.take(block, now))),
            ("return_token", Some(k)) => {
                throttle.with(&k, limit, period, block, now, |b| b.tokens = b.tokens.wrapping_add(1));
                Val::None
            }
            // The vmod returns the count through an unsigned int.
            ("remaining", Some(k)) => Val::Int(i64::from(throttle.with(&k, limit, period, block, now, |b| {
                b.refill(now);
                b.tokens as u32
            }))),
            (_, Some(k)) => Val::Dur(throttle.with(&k, limit, period, block, now, |b| b.block - now).max(0.0)),
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_denies_past_its_limit_and_refills_with_time() {
        let mut b = Bucket::new(3, 10.0, 100.0);
        assert!(!b.take(0.0, 100.0));
        assert!(!b.take(0.0, 100.0));
        assert!(!b.take(0.0, 100.0));
        assert!(b.take(0.0, 100.0));
        // A third of the period earns one token back.
        assert!(!b.take(0.0, 103.4));
        assert!(b.take(0.0, 103.5));
    }

    #[test]
    fn block_denies_for_its_length_after_the_limit() {
        let mut b = Bucket::new(1, 1.0, 0.0);
        assert!(!b.take(5.0, 0.0));
        assert!(b.take(5.0, 0.1));
        assert_eq!(b.block, 5.1);
        // Tokens come back, but the block holds until it ends.
        assert!(b.take(5.0, 3.0));
        assert!(!b.take(5.0, 5.2));
        assert_eq!(b.block, 0.0);
    }

    #[test]
    fn idle_buckets_are_swept() {
        let t = Throttle::new();
        for i in 0..20_000 {
            let now = f64::from(i) * 0.01;
            t.with(&format!("k{i}"), 10, 1.0, 0.0, now, |b| b.take(0.0, now));
        }
        // Every partition was swept once (at about its 1000th call) of
        // what had been idle for over a second.
        assert!(t.len() < 5000, "{} buckets kept", t.len());
    }

    #[test]
    fn a_zero_period_denies_as_the_vmod_does_on_x86() {
        let mut b = Bucket::new(5, 0.0, 0.0);
        assert!(b.take(0.0, 0.0));
    }
}
