//! Fetching an object for the cache (vcl_backend_fetch and
//! vcl_backend_response): a task of its own, so the fetch completes for
//! every waiter even if the client that started it goes away. The caller
//! gets the object as soon as its headers are in; the body keeps streaming
//! into it.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use common::counters::C;
use common::vsl::{Side as LogSide, Tag};
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;

use crate::cache::body::Body;
use crate::cache::ttl::{self, Lifetime};
use crate::cache::{vary_value, BusyGuard, Cache, Kind, ObjCore, ObjHeaders, Object};
use crate::error::{Error, Side};
use crate::fetch::Fetch;
use crate::http::{self, Framing, Transfer};
use crate::policy::{Beresp, BerespAction, Headers, Req};
use crate::server::Shared;
use crate::util::now;

/// Client conditionals and ranges a cache fetch must not forward.
const FETCH_FILTERED: [&str; 6] = ["range", "if-range", "if-modified-since", "if-none-match", "if-match", "if-unmodified-since"];

/// Everything a cache fetch needs.
pub struct MissSpec {
    pub req: Req,
    pub guard: BusyGuard,
    /// Stale object whose validators make the fetch conditional.
    pub stale: Option<Arc<ObjCore>>,
    pub bxid: u32,
    pub rxid: u32,
    /// "fetch" or "bgfetch".
    pub reason: &'static str,
    pub client_ip: IpAddr,
}

/// Start a cache fetch; resolves when the object's headers are in.
pub async fn start(sh: Arc<Shared>, spec: MissSpec) -> Result<Arc<ObjCore>, Error> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(run(sh, spec, tx));
    rx.await.unwrap_or_else(|_| Err(Error::new(Side::Internal, "fetch task ended without an answer")))
}

/// Storage for a body as it streams in, charging the cache as it grows.
struct BodySink<'a> {
    body: &'a Body,
    cache: &'a Cache,
    oc: &'a Arc<ObjCore>,
}

impl AsyncWrite for BodySink<'_> {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.body.push(Bytes::copy_from_slice(buf));
        self.cache.grow(self.oc, buf.len() as u64);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The response headers an object keeps (hop-by-hop ones dropped), as
/// slices of the response head; [`ObjHeaders`] packs them when stored.
fn stored_headers(h: &http::Head) -> Vec<(Bytes, Bytes)> {
    h.headers
        .iter()
        .filter(|(n, _)| !http::is_hop_by_hop(&h.raw[n.clone()]))
        .map(|(n, v)| (h.raw.slice(n.clone()), h.raw.slice(v.clone())))
        .collect()
}

/// A 304 refreshes the stale object: its headers, updated by the 304's.
fn merge_304(stale: &Object, fresh: &[(Bytes, Bytes)]) -> Vec<(Bytes, Bytes)> {
    let mut h = stale.headers.to_headers();
    for (n, v) in fresh {
        if let Ok(name) = std::str::from_utf8(n) {
            h.set(name, v.clone());
        }
    }
    h.0
}

async fn run(sh: Arc<Shared>, spec: MissSpec, tx: oneshot::Sender<Result<Arc<ObjCore>, Error>>) {
    let MissSpec { req, guard, stale, bxid, rxid, reason, client_ip } = spec;
    let (v, side) = (bxid, LogSide::Backend);
    let mut f = Fetch::new(&sh, bxid, rxid, reason);
    sh.seg.add(if reason == "bgfetch" { C::SBgfetch } else { C::SFetch }, 1);
    let mut bereq = req.clone();
    for h in FETCH_FILTERED {
        bereq.headers.unset(h);
    }
    if let Some(s) = &stale {
        if let Some(lm) = s.obj.header("last-modified") {
            bereq.headers.set("If-Modified-Since", lm);
        }
        if let Some(et) = s.obj.header("etag") {
            bereq.headers.set("If-None-Match", et);
        }
    }
    f.log.rec(Tag::VclCall, side, v, b"BACKEND_FETCH");
    f.log.rec(Tag::VclReturn, side, v, b"fetch");
    let mut wire = Vec::with_capacity(1024);
    // A HEAD miss fetches the whole object with GET.
    f.build_request(&sh, b"GET", &bereq, Framing::None, client_ip, &mut wire);
    let resp = match f.send(&sh, Framing::None, None, &mut wire).await {
        Ok(r) => r,
        Err(e) => {
            f.error(&sh, &e);
            f.finish(&sh, None, None);
            f.end(&sh);
            drop(guard); // Waiters learn that the fetch failed.
            let _ = tx.send(Err(e));
            return;
        }
    };
    let t = now();
    let fresh_headers = stored_headers(&resp.head);
    let revalidated = resp.head.status == 304 && stale.is_some();
    let (status, reason_phrase, headers, body) = match (&stale, revalidated) {
        (Some(s), true) => {
            sh.seg.add(C::Fetch304, 1);
            (s.obj.status, s.obj.reason.clone(), merge_304(&s.obj, &fresh_headers), s.obj.body.clone())
        }
        _ => {
            let expected = match resp.framing {
                Framing::Length(n) => Some(n),
                Framing::None => Some(0),
                _ => None,
            };
            (resp.head.status, Bytes::copy_from_slice(resp.head.reason()), fresh_headers, Arc::new(Body::new(expected)))
        }
    };
    let h = Headers(headers);
    let p = sh.params();
    let defaults = ttl::Defaults { ttl: p.default_ttl, grace: p.default_grace, keep: p.default_keep, clock_skew: 10.0 };
    let mut life = ttl::compute(status, h.iter(), t, &defaults);
    let cacheable_word = if life.ttl > 0.0 { "cacheable" } else { "uncacheable" };
    f.log.recf(
        Tag::Ttl,
        side,
        v,
        format_args!(
            "RFC {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {cacheable_word}",
            life.ttl, life.grace, life.keep, t, life.t_origin, life.date, life.expires, life.max_age
        ),
    );
    f.log.rec(Tag::VclCall, side, v, b"BACKEND_RESPONSE");
    let mut b = Beresp { status, headers: &h, ttl: life.ttl, grace: life.grace, keep: life.keep, bereq_uncacheable: false };
    let action = sh.policy().policy.backend_response(&mut b);
    life.ttl = b.ttl;
    life.grace = b.grace;
    life.keep = b.keep;
    f.log.rec(Tag::VclReturn, side, v, if matches!(action, BerespAction::HitForPass(_)) { b"pass" } else { b"deliver" });
    let vary = h.get("vary").map(|list| {
        let names: Vec<String> = list
            .split(|&c| c == b',')
            .map(|n| String::from_utf8_lossy(n.trim_ascii()).to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        names.into_iter().map(|n| (n.clone(), vary_value(req.headers.iter(), &n))).collect::<Vec<_>>()
    });
    let obj = Object {
        vxid: bxid,
        status,
        reason: reason_phrase,
        headers: ObjHeaders::from_pairs(h.iter()),
        body: body.clone(),
        life,
        kind: Kind::Normal,
        vary,
    };
    let oc = match action {
        BerespAction::Deliver => {
            if life.ttl + life.grace + life.keep < p.shortlived {
                sh.seg.add(C::BerespShortlived, 1);
            }
            let (oc, stored) = sh.cache.insert(guard, obj, t);
            f.log.rec(Tag::Storage, side, v, if stored { b"malloc s0" } else { b"malloc Transient" });
            oc
        }
        BerespAction::HitForMiss(ttl) | BerespAction::HitForPass(ttl) => {
            sh.seg.add(C::BerespUncacheable, 1);
            let kind = if matches!(action, BerespAction::HitForMiss(_)) { Kind::HitForMiss } else { Kind::HitForPass };
            let marker_life = Lifetime { t_origin: t, ttl, grace: 0.0, keep: 0.0, ..life };
            if kind == Kind::HitForPass {
                f.log.recf(Tag::Ttl, side, v, format_args!("HFP {ttl:.0} 0 0 {t:.0} uncacheable"));
            } else {
                f.log.recf(Tag::Ttl, side, v, format_args!("VCL {ttl:.0} 0 0 {t:.0} uncacheable"));
            }
            let marker = Object {
                vxid: bxid,
                status,
                reason: obj.reason.clone(),
                headers: ObjHeaders::default(),
                body: Arc::new(Body::whole(Bytes::new())),
                life: marker_life,
                kind,
                vary: obj.vary.clone(),
            };
            sh.cache.insert(guard, marker, t);
            f.log.rec(Tag::Storage, side, v, b"malloc Transient");
            sh.cache.private(obj)
        }
    };
    let _ = tx.send(Ok(oc.clone()));
    if revalidated {
        f.finish(&sh, Some(0), Some((resp.conn, !resp.head.has_token("connection", "close"))));
        f.end(&sh);
        return;
    }
    let mut be = resp.conn;
    let backend_close = resp.head.minor == 0 || resp.head.has_token("connection", "close");
    let tr = Transfer {
        framing: resp.framing,
        chunk_out: false,
        src_side: Side::Backend,
        dst_side: Side::Internal,
        read_timeout: p.between_bytes_timeout,
    };
    let mut sink = BodySink { body: &body, cache: &sh.cache, oc: &oc };
    match http::transfer(&mut be, &mut sink, &tr, &mut Vec::new()).await {
        Ok(m) if body.expected.is_none_or(|n| n == m.payload) => {
            body.finish();
            f.log.rec(Tag::FetchBody, side, v, b"3 length stream");
            let reusable = !backend_close && resp.framing != Framing::Eof;
            f.finish(&sh, Some(m.payload), Some((be, reusable)));
        }
        Ok(_) | Err(_) => {
            body.fail();
            sh.cache.kill(&oc);
            f.error(&sh, &Error::new(Side::Backend, "backend body ended early or failed"));
            f.finish(&sh, None, None);
        }
    }
    f.end(&sh);
}
