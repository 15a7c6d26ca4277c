//! Fetching an object for the cache (a miss or a background refresh): a
//! task of its own, so the fetch completes for every waiter even if the
//! client that started it goes away. The caller gets the object as soon as
//! its headers are in; the body keeps streaming into it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;

use crate::cache::body::{Body, ObjBody};
use crate::cache::ttl::Lifetime;
use crate::cache::{vary_value, BusyGuard, Cache, Kind, ObjCore, ObjHeaders, Object};
use crate::error::{Error, Side};
use crate::fetch::steps::{self, BeTxn, Fetched};
use crate::fetch::txn::{Fetch, Response};
use crate::http1::body::{self as http_body, Transfer};
use crate::http1::head::Framing;
use crate::req::contain::contain;
use crate::req::transport::NoBody;
use crate::shared::Shared;
use crate::util::now;
use crate::vcl::model::{Action, Bereq, Beresp, Req};
use crate::vcl::policy::Policy;

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
    /// The client's and our address (client.ip, server.ip).
    pub addrs: (SocketAddr, SocketAddr),
    /// The policy of the request that started the fetch.
    pub policy: Arc<dyn Policy>,
}

/// Start a cache fetch; resolves when the object's headers are in.
pub async fn start(sh: Arc<Shared>, spec: MissSpec) -> Result<Arc<ObjCore>, Error> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(contain(run(sh, spec, tx)));
    rx.await.unwrap_or_else(|_| Err(Error::new(Side::Internal, "fetch task ended without an answer")))
}

/// What the fetch got, ready to become an object.
struct Got {
    resp: Option<Response>,
    beresp: Beresp,
    life: Lifetime,
    action: Action,
    body: ObjBody,
    /// A small body that came in whole with the head: packed with it.
    inline: Option<BytesMut>,
}

/// Bodies up to this size that are already read with the head are stored
/// in the head's allocation, whole, instead of streaming in.
const INLINE_MAX: u64 = 64 * 1024;

async fn run(sh: Arc<Shared>, spec: MissSpec, tx: oneshot::Sender<Result<Arc<ObjCore>, Error>>) {
    let MissSpec { req, guard, stale, bxid, rxid, reason, addrs, policy } = spec;
    let mut f = Fetch::new(&sh, bxid, rxid, reason);
    sh.seg.add(if reason == "bgfetch" { C::SBgfetch } else { C::SFetch }, 1);
    let mut bereq = cache_bereq(&req, bxid, reason, stale.as_deref());
    let fetched = {
        let mut t = BeTxn::<NoBody>::new(&sh, &*policy, &mut f, &mut bereq, addrs);
        t.stale = stale.as_ref().map(|s| &s.obj);
        steps::run(&mut t).await
    };
    // stale-if-error: a refresh that failed (or answered 5xx) leaves the
    // stale object to deliver, rather than an error.
    if let (true, true, Some(s)) = (failed(&fetched), sh.params().stale_if_error, &stale) {
        if !s.is_dead() {
            f.note(&Error::new(Side::Internal, "stale_if_error: delivering the stale object"));
            let conn = match fetched {
                Fetched::Resp { resp, .. } => Some((resp.conn, false)),
                _ => None,
            };
            f.done(None, conn);
            drop(guard);
            let _ = tx.send(Ok(s.clone()));
            return;
        }
    }
    let got = match got(fetched, stale.as_deref()) {
        Ok(g) => g,
        Err(e) => {
            f.note(&e);
            f.done(None, None);
            drop(guard); // Waiters learn that the fetch failed.
            let _ = tx.send(Err(e));
            return;
        }
    };
    let obj = object(bxid, &got, &req);
    let oc = store(&sh, &mut f, guard, obj, &got);
    let (was_304, stream) = (got.beresp.was_304, got.beresp.do_stream);
    let body = match (got.inline, got.body) {
        (Some(b), _) => Err(b.len() as u64),
        (None, ObjBody::Live(b)) => Ok(b),
        (None, whole) => Err(whole.known_len().unwrap_or(0)),
    };
    match (got.resp, body) {
        (None, body) => {
            let _ = tx.send(Ok(oc.clone()));
            f.done(Some(body.err().unwrap_or(0)), None);
        }
        (Some(resp), _) if was_304 => {
            let _ = tx.send(Ok(oc.clone()));
            let reusable = !resp.head.has_token("connection", "close");
            f.done(Some(0), Some((resp.conn, reusable)));
        }
        // The body came whole with the head.
        (Some(resp), Err(len)) => {
            let _ = tx.send(Ok(oc.clone()));
            f.log.rec(Tag::FetchBody, LogSide::Backend, f.vxid, b"3 length stream");
            let reusable = !(resp.head.minor == 0 || resp.head.has_token("connection", "close"));
            f.done(Some(len), Some((resp.conn, reusable)));
        }
        (Some(resp), Ok(body)) if stream => {
            let _ = tx.send(Ok(oc.clone()));
            stream_body(&sh, f, resp, &body, &oc).await;
        }
        // beresp.do_stream = false: the request is answered once the
        // whole body is in; a body that fails is a failed fetch (503).
        (Some(resp), Ok(body)) => {
            let whole = stream_body(&sh, f, resp, &body, &oc).await;
            let _ = tx.send(if whole { Ok(oc) } else { Err(Error::new(Side::Backend, "backend body ended early or failed")) });
        }
    }
}

/// The backend request for the cache: a GET (a HEAD miss fetches the
/// whole object), without the client's conditionals and ranges, made
/// conditional on a stale object's validators.
fn cache_bereq(req: &Req, bxid: u32, reason: &str, stale: Option<&ObjCore>) -> Bereq {
    let mut bereq = Bereq::from_req(req, bxid);
    bereq.is_bgfetch = reason == "bgfetch";
    bereq.method = Bytes::from_static(b"GET");
    for h in FETCH_FILTERED {
        bereq.headers.unset(h);
    }
    if let Some(s) = stale {
        if let Some(lm) = s.obj.header("last-modified") {
            bereq.headers.set("If-Modified-Since", lm);
        }
        if let Some(et) = s.obj.header("etag") {
            bereq.headers.set("If-None-Match", et);
        }
    }
    bereq
}

/// Did the fetch fail, for stale-if-error's purposes?
fn failed(fetched: &Fetched) -> bool {
    match fetched {
        Fetched::Abandoned(_) | Fetched::Client(_) => true,
        // vcl_backend_error's page counts as a failure unless the policy
        // gave it a TTL: then it is the answer, stored and served (Varnish).
        Fetched::Synthetic { beresp, .. } => beresp.status >= 500 && beresp.ttl <= 0.0,
        Fetched::Resp { beresp, .. } => beresp.status >= 500 && !beresp.was_304,
    }
}

/// What the fetch produced, with the body the object will have: the
/// stale one's for a 304, an empty one to stream into, or the synthetic
/// page; the error when there is nothing.
fn got(fetched: Fetched, stale: Option<&ObjCore>) -> Result<Got, Error> {
    match fetched {
        Fetched::Resp { mut resp, beresp, life, action } => {
            let expected = match resp.framing {
                Framing::Length(n) => Some(n),
                Framing::None => Some(0),
                _ => None,
            };
            let (body, inline) = match (stale, beresp.was_304, expected) {
                (Some(s), true, _) => (s.obj.body.clone(), None),
                (_, _, Some(n)) if n <= INLINE_MAX && resp.conn.buf.len() as u64 >= n => {
                    (ObjBody::Whole(Bytes::new()), Some(resp.conn.buf.split_to(n as usize)))
                }
                _ => (ObjBody::Live(Arc::new(Body::new(expected))), None),
            };
            Ok(Got { resp: Some(resp), beresp, life, action, body, inline })
        }
        Fetched::Synthetic { mut beresp, body, life } => {
            // An error object is kept only if the policy gave it a ttl.
            if beresp.ttl <= 0.0 {
                beresp.uncacheable = true;
            }
            Ok(Got { resp: None, beresp, life, action: Action::Deliver, body: ObjBody::Whole(Bytes::from(body)), inline: None })
        }
        Fetched::Abandoned(e) | Fetched::Client(e) => Err(e),
    }
}

/// The object for `beresp`, with the Vary values of the request that
/// fetched it.
fn object(bxid: u32, got: &Got, req: &Req) -> Object {
    let beresp = &got.beresp;
    let headers = &beresp.headers;
    let vary = headers.get("vary").map(|list| {
        let names: Vec<String> = list
            .split(|&c| c == b',')
            .map(|n| String::from_utf8_lossy(n.trim_ascii()).to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        names.into_iter().map(|n| (n.clone(), vary_value(req.headers.iter(), &n))).collect::<Vec<_>>()
    });
    let pairs = headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(b"content-length"));
    let (headers, body) = match &got.inline {
        Some(b) => {
            let (h, b) = ObjHeaders::with_body(&beresp.reason, pairs, b);
            (h, ObjBody::Whole(b))
        }
        None => (ObjHeaders::from_pairs(&beresp.reason, pairs), got.body.clone()),
    };
    Object { vxid: bxid, status: beresp.status, headers, body, life: got.life, kind: Kind::Normal, vary }
}

/// Put the object in the cache (or hand it to this request alone, with a
/// hit-for-pass or hit-for-miss marker in the cache instead).
fn store(sh: &Shared, f: &mut Fetch, guard: BusyGuard, obj: Object, got: &Got) -> Arc<ObjCore> {
    let (t, v, side) = (now(), f.vxid, LogSide::Backend);
    let (beresp, life) = (&got.beresp, got.life);
    let marker = match got.action {
        Action::PassFor(ttl) => Some((Kind::HitForPass, ttl)),
        _ if beresp.uncacheable && got.resp.is_some() => Some((Kind::HitForMiss, beresp.ttl)),
        _ => None,
    };
    match marker {
        None if !beresp.uncacheable => {
            if life.ttl + life.grace + life.keep < sh.params().shortlived {
                sh.seg.add(C::BerespShortlived, 1);
            }
            let (oc, stored) = sh.cache.insert(guard, obj);
            f.log.rec(Tag::Storage, side, v, if stored { b"malloc s0" } else { b"malloc Transient" });
            oc
        }
        None => {
            // An uncacheable error object: delivered to this request only.
            sh.seg.add(C::BerespUncacheable, 1);
            drop(guard);
            f.log.rec(Tag::Storage, side, v, b"malloc Transient");
            sh.cache.private(obj)
        }
        Some((kind, ttl)) => {
            sh.seg.add(C::BerespUncacheable, 1);
            let marker_life = Lifetime { t_origin: t, ttl, grace: 0.0, keep: 0.0, ..life };
            if kind == Kind::HitForPass {
                f.log.recf(Tag::Ttl, side, v, format_args!("HFP {ttl:.0} 0 0 {t:.0} uncacheable"));
            } else {
                f.log.recf(Tag::Ttl, side, v, format_args!("VCL {ttl:.0} 0 0 {t:.0} uncacheable"));
            }
            let marker = Object {
                vxid: v,
                status: obj.status,
                headers: ObjHeaders::from_pairs(&obj.reason(), std::iter::empty()),
                body: ObjBody::Whole(Bytes::new()),
                life: marker_life,
                kind,
                vary: obj.vary.clone(),
            };
            sh.cache.insert(guard, marker);
            f.log.rec(Tag::Storage, side, v, b"malloc Transient");
            sh.cache.private(obj)
        }
    }
}

/// Stream the body into the object as it arrives, charging the cache; a
/// body that fails or ends early kills the object. True if it came whole.
async fn stream_body(sh: &Shared, mut f: Fetch, resp: Response, body: &Arc<Body>, oc: &Arc<ObjCore>) -> bool {
    let mut be = resp.conn;
    let backend_close = resp.head.minor == 0 || resp.head.has_token("connection", "close");
    let tr = Transfer {
        framing: resp.framing,
        chunk_out: false,
        src_side: Side::Backend,
        dst_side: Side::Internal,
        read_timeout: f.timeout(2),
        pace: None,
    };
    let mut sink = BodySink { body, cache: &sh.cache, oc };
    match http_body::transfer(&mut be, &mut sink, &tr, &mut Vec::new()).await {
        Ok(m) if body.expected.is_none_or(|n| n == m.payload) => {
            body.finish();
            f.log.rec(Tag::FetchBody, LogSide::Backend, f.vxid, b"3 length stream");
            let reusable = !backend_close && resp.framing != Framing::Eof;
            f.done(Some(m.payload), Some((be, reusable)));
            true
        }
        Ok(_) | Err(_) => {
            body.fail();
            sh.cache.kill(oc);
            f.error(&Error::new(Side::Backend, "backend body ended early or failed"));
            f.done(None, None);
            false
        }
    }
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
        self.cache.grow(self.oc, buf.len() as u64 + crate::cache::object::CHUNK_OVERHEAD);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
