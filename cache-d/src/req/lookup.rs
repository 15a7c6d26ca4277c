//! The cache path of a request: the lookup and what follows it — a hit
//! through vcl_hit (grace, keep), a miss through vcl_miss (coalesced with
//! other requests for the same object), hit-for-miss, hit-for-pass, or
//! waiting on another request's fetch.

use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};

use crate::cache::body::Done;
use crate::cache::{Bounds, BusyGuard, BusyState, Lookup, ObjRef};
use crate::fetch::miss::{self, MissSpec};
use crate::req::contain::contain;
use crate::req::state::{divert, obj_view, Request, Step, With};
use crate::req::transport::Transport;
use crate::util::{now, Secs};
use crate::vcl::model::{Action, Sub};

/// Look `key` up: a hit (or a stale object to refresh), a miss, a
/// hit-for-miss or hit-for-pass marker, or another request's fetch to
/// wait for (then look again).
pub async fn lookup<T: Transport>(r: &mut Request<'_, T>, key: Vec<u8>) -> Step {
    let sh = r.sh.clone();
    let (rxid, side) = (r.rxid, LogSide::Client);
    let mut slept = false;
    loop {
        // Freshness is judged at the request's start (Varnish's t_req): an
        // object a waiter's fetch brought counts as fresh for it, however
        // short its TTL.
        let t = if r.req.time > 0.0 { r.req.time } else { now() };
        let found = if r.req.hash_always_miss {
            Lookup::Miss { guard: sh.cache.private_guard(&key), stale: None }
        } else {
            let bounds = Bounds { ttl: r.req.ttl, grace: r.req.grace };
            sh.cache.lookup_request(&key, &r.req.url, r.req.headers.iter(), bounds, r.req.hash_ignore_vary, t)
        };
        let found = match readable(r, found).await {
            Some(f) => f,
            // Damaged on disk, and gone: look again.
            None => continue,
        };
        return match found {
            Lookup::Hit(oc) => Step::Hit { oc, guard: None },
            Lookup::Grace(oc, guard) => Step::Hit { oc, guard },
            Lookup::HitForPass(oc) => {
                sh.seg.add(C::CacheHitpass, 1);
                r.log.recf(Tag::HitPass, side, rxid, format_args!("{} {:.6}", oc.obj.vxid, oc.obj.life().ttl_left(t)));
                r.req.is_hitpass = true;
                Step::Pass
            }
            // A hit-for-miss is a miss too, as Varnish counts it.
            Lookup::HitForMiss(oc) => {
                sh.seg.add(C::CacheHitmiss, 1);
                sh.seg.add(C::CacheMiss, 1);
                r.log.recf(Tag::HitMiss, side, rxid, format_args!("{} {:.6}", oc.obj.vxid, oc.obj.life().ttl_left(t)));
                r.req.is_hitmiss = true;
                Step::Miss { guard: sh.cache.private_guard(&key), stale: None }
            }
            Lookup::Miss { guard, stale } => {
                sh.seg.add(C::CacheMiss, 1);
                Step::Miss { guard, stale }
            }
            Lookup::Busy(_) if r.req.hash_ignore_busy => {
                sh.seg.add(C::CacheMiss, 1);
                Step::Miss { guard: sh.cache.private_guard(&key), stale: None }
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
                    return fetch_failed();
                }
                continue;
            }
        };
    }
}

/// A disk object found has its body held for this request (read back,
/// off the request threads, unless it is in memory), so that the memory
/// tier letting its copy go before it is delivered, or while a 304 for
/// it is awaited, cannot leave the response without its body. None when
/// a hit cannot be read (the object is gone: look again); a stale one
/// that cannot be read is no base for a conditional fetch.
async fn readable<T: Transport>(r: &mut Request<'_, T>, found: Lookup) -> Option<Lookup> {
    let sh = r.sh.clone();
    match found {
        Lookup::Hit(oc) if oc.disk().is_some() => {
            let body = sh.cache.held_body(&oc).await.ok()?;
            r.loaded = Some((oc.clone(), body));
            Some(Lookup::Hit(oc))
        }
        Lookup::Grace(oc, guard) if oc.disk().is_some() => match sh.cache.held_body(&oc).await {
            Ok(body) => {
                r.loaded = Some((oc.clone(), body));
                Some(Lookup::Grace(oc, guard))
            }
            Err(()) => {
                // Its waiters look again too.
                if let Some(g) = guard {
                    g.release();
                }
                None
            }
        },
        Lookup::Miss { guard, stale: Some(s) } if s.disk().is_some() => match sh.cache.held_body(&s).await {
            Ok(body) => {
                r.loaded = Some((s.clone(), body));
                Some(Lookup::Miss { guard, stale: Some(s) })
            }
            Err(()) => Some(Lookup::Miss { guard, stale: None }),
        },
        other => Some(other),
    }
}

/// The body held for `oc` (see [`readable`]), if any.
fn held<T: Transport>(r: &Request<'_, T>, oc: &ObjRef) -> Option<crate::cache::body::ObjBody> {
    r.loaded.as_ref().filter(|(o, _)| ObjRef::ptr_eq(o, oc)).map(|(_, b)| b.clone())
}

/// An object was found: vcl_hit decides (deliver, or miss/pass after
/// all). `guard` is set when this request should refresh a stale one.
/// req.ttl and req.grace were applied by the lookup (an object they
/// refuse is a miss, or a wait for the fetch under way, as in Varnish).
pub fn hit<T: Transport>(r: &mut Request<'_, T>, oc: ObjRef, guard: Option<BusyGuard>) -> Step {
    let sh = r.sh.clone();
    let (rxid, side) = (r.rxid, LogSide::Client);
    let t = now();
    let life = oc.obj.life();
    let (ttl, grace, keep) = (Secs(life.ttl_left(t)), Secs(life.grace), Secs(life.keep));
    // An object still streaming in adds the bytes in so far and the
    // length it will have, when known (as Varnish's Req_LogHit).
    let streaming = oc.live().map(|b| (b.progress(), b.expected)).filter(|(p, _)| p.done == Done::Streaming);
    let tail = streaming.map(|(p, n)| (p.len, n));
    r.log.rec_with(Tag::Hit, side, rxid, |o| {
        common::log::vsl::put_u64(o, oc.obj.vxid.into());
        for s in [ttl, grace, keep] {
            o.push(b' ');
            s.put(o);
        }
        for n in tail.iter().flat_map(|&(len, n)| std::iter::once(len).chain(n)) {
            o.push(b' ');
            common::log::vsl::put_u64(o, n);
        }
    });
    oc.hit();
    let view = r.active.policy.defines(Sub::Hit).then(|| obj_view(&oc, t, true));
    let action = r.call(Sub::Hit, With { obj: view.as_ref(), ..With::default() });
    match action {
        Action::Deliver => {
            sh.seg.add(C::CacheHit, 1);
            if !life.fresh(t) {
                sh.seg.add(C::CacheHitGrace, 1);
            }
            if let Some(guard) = guard {
                background_fetch(r, guard, oc.clone());
            }
            Step::Deliver { oc, hit: true, pass: false }
        }
        Action::Miss => {
            sh.seg.add(C::CacheMiss, 1);
            let key = oc.key;
            Step::Miss { guard: guard.unwrap_or_else(|| sh.cache.private_guard_for(key)), stale: Some(oc) }
        }
        other => {
            if let Some(g) = guard {
                g.release();
            }
            match other {
                Action::Pass => {
                    // A pass from vcl_hit still counts as a hit (Varnish 7.1).
                    sh.seg.add(C::CacheHit, 1);
                    r.hit_pass = true;
                    Step::Pass
                }
                other => divert(other),
            }
        }
    }
}

/// Refresh a stale object in the background (grace), while this request
/// is served the stale one.
fn background_fetch<T: Transport>(r: &mut Request<'_, T>, guard: BusyGuard, stale: ObjRef) {
    let bxid = r.sh.next_vxid();
    r.log.recf(Tag::Link, LogSide::Client, r.rxid, format_args!("bereq {bxid} bgfetch"));
    let spec = MissSpec {
        req: r.req.clone(),
        guard,
        stale_body: held(r, &stale),
        stale: Some(stale),
        bxid,
        rxid: r.rxid,
        reason: "bgfetch",
        addrs: r.sess.ends.clone(),
        policy: r.active.policy.clone(),
        body: r.cached_body.clone(),
        interim: None,
    };
    tokio::spawn(contain(miss::start(r.sh.clone(), spec)));
}

/// vcl_miss, then the fetch for the cache on behalf of this request (and
/// its waiters).
pub async fn miss<T: Transport>(r: &mut Request<'_, T>, guard: BusyGuard, stale: Option<ObjRef>) -> Step {
    match r.call(Sub::Miss, With::default()) {
        Action::Fetch => {}
        other => {
            guard.release();
            return match other {
                Action::Pass => Step::Pass,
                other => divert(other),
            };
        }
    }
    let bxid = r.sh.next_vxid();
    r.log.recf(Tag::Link, LogSide::Client, r.rxid, format_args!("bereq {bxid} fetch"));
    let stale_body = stale.as_ref().and_then(|s| held(r, s));
    let interim = r.interim_channel();
    let spec = MissSpec {
        req: r.req.clone(),
        guard,
        stale,
        stale_body,
        bxid,
        rxid: r.rxid,
        reason: "fetch",
        addrs: r.sess.ends.clone(),
        policy: r.active.policy.clone(),
        body: r.cached_body.clone(),
        interim,
    };
    let fetched = miss::start(r.sh.clone(), spec).await;
    if !r.forward_interim().await {
        return Step::Done(Some(crate::req::reason::Reason::TxError));
    }
    match fetched {
        Ok((oc, body)) => {
            r.stamp("Fetch");
            r.loaded = body.map(|b| (oc.clone(), b));
            Step::Deliver { oc, hit: false, pass: false }
        }
        Err(_) => fetch_failed(),
    }
}

/// The cache fetch failed (abandoned, failed in VCL, its body lost): 503
/// through vcl_synth with the standard reason, as Varnish answers for a
/// failed busy object (vcl_backend_error's "Backend fetch failed" page is
/// an object, delivered as one).
fn fetch_failed() -> Step {
    Step::Synth { status: 503, reason: "Service Unavailable".into() }
}
