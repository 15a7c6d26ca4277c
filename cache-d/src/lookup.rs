//! The cache path of a request: the lookup and what follows it — a hit
//! through vcl_hit (grace, keep), a miss through vcl_miss (coalesced with
//! other requests for the same object), hit-for-miss, hit-for-pass, or
//! waiting on another request's fetch.

use std::sync::Arc;

use common::counters::C;
use common::vsl::{Batch, Side as LogSide, Tag};

use crate::cache::{BusyGuard, BusyState, Lookup, ObjCore};
use crate::miss::{self, MissSpec};
use crate::policy::{run_sub, Action, Req, Sub};
use crate::session::{obj_view, Client, Clock, ReqCtx, Sess, Step};
use crate::util::now;

impl Sess {
    /// Lookup and what follows: hit (vcl_hit), grace, miss (vcl_miss,
    /// coalesced), hit-for-miss, hit-for-pass, or waiting for another
    /// request's fetch.
    pub(crate) async fn lookup(
        &mut self,
        c: &mut Client,
        req: &mut Req,
        key: Vec<u8>,
        mut log: Batch,
        clock: Clock,
        ctx: &mut ReqCtx,
    ) -> Step {
        let sh = self.sh.clone();
        let (rxid, side) = (ctx.rxid, LogSide::Client);
        let mut slept = false;
        loop {
            let t = now();
            let found = if req.hash_always_miss {
                Lookup::Miss { guard: sh.cache.private_guard(&key), stale: None }
            } else {
                sh.cache.check_bans(&key, &req.url, req.headers.iter());
                sh.cache.lookup(&key, req.headers.iter(), t)
            };
            return match found {
                Lookup::Hit(oc) => self.hit(c, req, &key, oc, None, log, clock, ctx).await,
                Lookup::Grace(oc, guard) => self.hit(c, req, &key, oc, guard, log, clock, ctx).await,
                Lookup::HitForPass(oc) => {
                    sh.seg.add(C::CacheHitpass, 1);
                    log.recf(Tag::HitPass, side, rxid, format_args!("{} {:.6}", oc.obj.vxid, oc.obj.life.ttl_left(t)));
                    req.is_hitpass = true;
                    self.vcl_pass(c, req, log, clock, ctx).await
                }
                Lookup::HitForMiss(oc) => {
                    sh.seg.add(C::CacheHitmiss, 1);
                    log.recf(Tag::HitMiss, side, rxid, format_args!("{} {:.6}", oc.obj.vxid, oc.obj.life.ttl_left(t)));
                    req.is_hitmiss = true;
                    let guard = sh.cache.private_guard(&key);
                    self.vcl_miss(c, req, guard, None, log, clock, ctx).await
                }
                Lookup::Miss { guard, stale } => {
                    sh.seg.add(C::CacheMiss, 1);
                    self.vcl_miss(c, req, guard, stale, log, clock, ctx).await
                }
                Lookup::Busy(_) if req.hash_ignore_busy => {
                    sh.seg.add(C::CacheMiss, 1);
                    let guard = sh.cache.private_guard(&key);
                    self.vcl_miss(c, req, guard, None, log, clock, ctx).await
                }
                Lookup::Busy(mut rx) => {
                    if !slept {
                        sh.seg.add(C::BusySleep, 1);
                        slept = true;
                    }
                    let state = match rx.wait_for(|s| *s != BusyState::Fetching).await {
                        Ok(s) => *s,
                        Err(_) => BusyState::Failed,
                    };
                    sh.seg.add(C::BusyWakeup, 1);
                    if state == BusyState::Failed {
                        sh.seg.add(C::BusyKilled, 1);
                        return self.fetch_failed(c, req, log, clock, ctx).await;
                    }
                    continue;
                }
            };
        }
    }

    /// An object was found: vcl_hit decides (deliver, or miss/pass after
    /// all). `guard` is set when this request should refresh a stale one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn hit(
        &mut self,
        c: &mut Client,
        req: &mut Req,
        key: &[u8],
        oc: Arc<ObjCore>,
        guard: Option<BusyGuard>,
        mut log: Batch,
        clock: Clock,
        ctx: &mut ReqCtx,
    ) -> Step {
        let sh = self.sh.clone();
        let (rxid, side) = (ctx.rxid, LogSide::Client);
        let t = now();
        let life = oc.obj.life;
        log.recf(Tag::Hit, side, rxid, format_args!("{} {:.6} {:.6} {:.6}", oc.obj.vxid, life.ttl_left(t), life.grace, life.keep));
        // req.ttl and req.grace bound what a hit may serve.
        let age = t - life.t_origin;
        let too_old = req.ttl.is_some_and(|m| age > m) || (!life.fresh(t) && req.grace.is_some_and(|g| -life.ttl_left(t) > g));
        let policy = self.policy();
        if !too_old {
            oc.hit();
        }
        let action = if too_old {
            Action::Miss
        } else {
            let view = policy.defines(Sub::Hit).then(|| obj_view(&oc, t, true));
            let mut task = self.task(&mut log, rxid);
            task.req = Some(req);
            task.obj = view.as_ref();
            run_sub(&*policy, Sub::Hit, &mut task)
        };
        let release = |g: Option<BusyGuard>| {
            if let Some(g) = g {
                g.release()
            }
        };
        match action {
            Action::Deliver => {
                sh.seg.add(C::CacheHit, 1);
                if !life.fresh(t) {
                    sh.seg.add(C::CacheHitGrace, 1);
                }
                if let Some(guard) = guard {
                    let bxid = sh.next_vxid();
                    log.recf(Tag::Link, side, rxid, format_args!("bereq {bxid} bgfetch"));
                    let spec = MissSpec {
                        req: req.clone(),
                        guard,
                        stale: Some(oc.clone()),
                        bxid,
                        rxid,
                        reason: "bgfetch",
                        addrs: (self.peer, self.local),
                        policy,
                    };
                    tokio::spawn(crate::contain::contain(miss::start(sh.clone(), spec)));
                }
                self.deliver(c, req, &oc, true, log, clock, ctx).await
            }
            Action::Miss => {
                sh.seg.add(C::CacheMiss, 1);
                let guard = guard.unwrap_or_else(|| sh.cache.private_guard(key));
                self.vcl_miss(c, req, guard, Some(oc), log, clock, ctx).await
            }
            Action::Pass => {
                release(guard);
                self.vcl_pass(c, req, log, clock, ctx).await
            }
            other => {
                release(guard);
                self.divert(c, req, log, clock, ctx, other).await
            }
        }
    }

    /// vcl_miss, then the fetch for the cache on behalf of this request
    /// (and its waiters).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn vcl_miss(
        &mut self,
        c: &mut Client,
        req: &mut Req,
        guard: BusyGuard,
        stale: Option<Arc<ObjCore>>,
        mut log: Batch,
        mut clock: Clock,
        ctx: &mut ReqCtx,
    ) -> Step {
        let sh = self.sh.clone();
        let rxid = ctx.rxid;
        match self.vcl_req(Sub::Miss, req, &mut log, rxid) {
            Action::Fetch => {}
            other => {
                guard.release();
                return match other {
                    Action::Pass => self.vcl_pass(c, req, log, clock, ctx).await,
                    other => self.divert(c, req, log, clock, ctx, other).await,
                };
            }
        }
        let bxid = sh.next_vxid();
        log.recf(Tag::Link, LogSide::Client, rxid, format_args!("bereq {bxid} fetch"));
        let spec =
            MissSpec { req: req.clone(), guard, stale, bxid, rxid, reason: "fetch", addrs: (self.peer, self.local), policy: self.policy() };
        match miss::start(sh, spec).await {
            Ok(oc) => {
                clock.stamp(&mut log, rxid, "Fetch");
                self.deliver(c, req, &oc, false, log, clock, ctx).await
            }
            Err(_) => self.fetch_failed(c, req, log, clock, ctx).await,
        }
    }

    /// The cache fetch was abandoned: 503 through vcl_synth.
    pub(crate) async fn fetch_failed(&mut self, c: &mut Client, req: &mut Req, log: Batch, clock: Clock, ctx: &mut ReqCtx) -> Step {
        self.vcl_synth(c, req, log, clock, ctx, 503, "Backend fetch failed").await
    }
}
