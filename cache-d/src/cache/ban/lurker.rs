//! The ban lurker, as Varnish's: woken by a new obj ban, by `ban.list` or
//! by a lookup that freed the oldest ban (else it sleeps until the next
//! ban is old enough), it tests the objects behind each ban against the
//! newer request-free bans, kills matches, moves the others up the list,
//! deletes the oldest bans no object points at, and marks the bans it
//! applied completed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::counters::C;

use super::expr;
use super::list::Ban;
use crate::cache::object::ObjRef;
use crate::cache::Cache;

/// How long the lurker sleeps when no ban waits to be old enough
/// (Varnish's "random, non-magic" 49.62 s).
const IDLE: f64 = 49.62;

/// Run the lurker for the cache's life. `params` gives ban_lurker_sleep
/// (0: the lurker only deletes unreferenced bans) and ban_lurker_age.
pub async fn run(cache: Cache, params: impl Fn() -> (f64, f64)) {
    let kick = cache.bans().kick.clone();
    loop {
        let (sleep, age) = params();
        let c = cache.clone();
        // A pass is CPU work over the whole index: off the async workers.
        let pass = tokio::task::spawn_blocking(move || {
            if sleep > 0.0 {
                c.lurk_pass(crate::util::now(), age).1
            } else {
                c.clean_tail();
                IDLE
            }
        });
        let dt = pass.await.unwrap_or(IDLE);
        // A kick during the pass (a stored permit) means go again at once.
        let _ = tokio::time::timeout(Duration::from_secs_f64(dt.clamp(sleep.max(0.01), IDLE)), kick.notified()).await;
    }
}

impl Cache {
    /// Wake the lurker (a new obj ban, ban.list, a freed oldest ban).
    pub(super) fn kick_lurker(&self) {
        self.bans().kick.notify_one();
    }

    /// One pass: (objects killed, seconds until a ban becomes old enough).
    pub fn lurk_pass(&self, now: f64, age: f64) -> (usize, f64) {
        let c = &self.inner;
        // Oldest first, as kept.
        let bans: Vec<Arc<Ban>> = self.bans().list.clone();
        let mut dt = IDLE;
        let eligible = |b: &Ban| !b.completed() && !b.req && now - b.time >= age;
        for b in bans.iter().filter(|b| !b.completed() && !b.req) {
            let left = b.time + age - now;
            if left > 0.0 {
                dt = dt.min(left);
            }
        }
        // The objects behind each ban (pointing at it, not at a newer one).
        let mut behind: Vec<Vec<ObjRef>> = vec![Vec::new(); bans.len()];
        if bans.iter().any(|b| eligible(b)) {
            for shard in &c.shards {
                let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
                for oc in shard.values().flat_map(|h| h.variants()) {
                    let id = oc.ban_id.load(Ordering::Acquire);
                    let at = bans.partition_point(|b| b.id <= id);
                    if at > 0 {
                        behind[at - 1].push(oc.clone());
                    }
                }
            }
        }
        // Newest to oldest: the bans to apply so far (`todo`, newest
        // first) and where a surviving object moves to (`dest`): the
        // newest of them, or below the newest request ban after it (a
        // request must still test the object against that one).
        let mut todo: Vec<&Arc<Ban>> = Vec::new();
        let mut dest: Option<u64> = None;
        let mut killed = 0;
        for (i, b) in bans.iter().enumerate().rev() {
            if let Some(to) = dest {
                killed += self.lurk_ban(b.id, std::mem::take(&mut behind[i]), &todo, to);
            }
            if b.completed() {
                continue;
            }
            if b.req {
                if dest.is_some() {
                    dest = bans.get(i.wrapping_sub(1)).map(|x| x.id);
                }
                continue;
            }
            if eligible(b) {
                todo.push(b);
                dest.get_or_insert(b.id);
            }
        }
        // Applied bans left after the tail is cut are completed.
        let gone = self.clean_tail();
        for b in todo.iter().filter(|b| !gone.contains(&b.id)) {
            if !b.completed.swap(true, Ordering::AcqRel) {
                c.count(C::BansCompleted, 1);
            }
        }
        (killed, dt)
    }

    /// Test the objects behind ban `at` against `todo` (oldest first);
    /// kill matches, move the others to ban `to`. Objects a lookup has
    /// moved meanwhile are left alone. Returns objects killed.
    fn lurk_ban(&self, at: u64, objs: Vec<ObjRef>, todo: &[&Arc<Ban>], to: u64) -> usize {
        let c = &self.inner;
        let mut killed = 0;
        for oc in objs {
            let mut tested: i64 = 0;
            let mut hit = false;
            for b in todo.iter().rev() {
                if oc.ban_id.load(Ordering::Acquire) > at || b.completed() {
                    continue;
                }
                tested += 1;
                if expr::matches(&b.conds, &oc, None, b.time) {
                    hit = true;
                    break;
                }
            }
            c.count(C::BansLurkerTested, tested);
            if hit {
                if c.remove(&oc) {
                    killed += 1;
                    c.count(C::BansLurkerObjKilled, 1);
                }
            } else if to > at {
                self.tested_up_to(&oc, to);
            }
        }
        killed
    }

    /// Delete the oldest bans while no object points at them (never the
    /// newest); the ids deleted.
    pub(super) fn clean_tail(&self) -> Vec<u64> {
        let c = &self.inner;
        let min_seen = self.oldest_needed();
        let mut b = self.bans();
        // The oldest ban no object points at is the one whose successor is
        // not newer than every object's ban.
        let n = b.list.iter().skip(1).take_while(|x| x.id <= min_seen).count();
        let mut gone = Vec::with_capacity(n);
        for x in b.list.drain(..n) {
            gone.push(x.id);
            c.count(C::BansDeleted, 1);
            c.count(C::Bans, -1);
            if x.completed() {
                c.count(C::BansCompleted, -1);
            }
            if !x.spec.is_empty() {
                c.count(if x.req { C::BansReq } else { C::BansObj }, -1);
            }
        }
        gone
    }
}
