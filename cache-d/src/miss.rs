//! Fetching an object for the cache (vcl_backend_fetch and
//! vcl_backend_response): a task of its own, so the fetch completes for
//! every waiter even if the client that started it goes away. The caller
//! gets the object as soon as its headers are in; the body keeps streaming
//! into it.

use std::net::SocketAddr;
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
use crate::fetch::{Fetch, Response};
use crate::http::{self, Framing, Transfer};
use crate::policy::{run_sub, Action, Bereq, Beresp, Headers, Policy, Req, Sub, Task};
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
    /// The client's and our address (client.ip, server.ip).
    pub addrs: (SocketAddr, SocketAddr),
    /// The policy of the request that started the fetch.
    pub policy: Arc<dyn Policy>,
}

/// Start a cache fetch; resolves when the object's headers are in.
pub async fn start(sh: Arc<Shared>, spec: MissSpec) -> Result<Arc<ObjCore>, Error> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(crate::contain::contain(run(sh, spec, tx)));
    rx.await.unwrap_or_else(|_| Err(Error::new(Side::Internal, "fetch task ended without an answer")))
}

/// How the backend side of a transaction ended.
pub(crate) enum Fetched {
    /// A response whose body is still to be read, its head as
    /// vcl_backend_response left it; `action` is deliver or pass(ttl).
    Resp { resp: Response, beresp: Beresp, life: Lifetime, action: Action },
    /// vcl_backend_error's synthetic response.
    Synthetic { beresp: Beresp, body: Vec<u8>, life: Lifetime },
    /// Abandoned (or failed) with nothing to deliver.
    Abandoned(Error),
    /// The client's request body could not be read (a pass).
    Client(Error),
}

/// A task on the backend side: the backend transaction's log, bereq.
fn be_task<'a>(sh: &'a Shared, f: &'a mut Fetch, bereq: &'a mut Bereq, addrs: (SocketAddr, SocketAddr)) -> Task<'a> {
    let mut t = Task::new(sh);
    t.log = Some((&mut f.log, f.vxid, LogSide::Backend));
    t.bereq = Some(bereq);
    t.client = Some(addrs.0);
    t.local = Some(addrs.1);
    t
}

/// The backend side: vcl_backend_fetch, the exchange, then
/// vcl_backend_response (or vcl_backend_error when the backend failed or
/// the policy said error), with retries up to max_retries. `stale` makes a
/// 304 refresh it; `client` streams a pass's request body.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn backend_side(
    sh: &Shared,
    policy: &dyn Policy,
    f: &mut Fetch,
    bereq: &mut Bereq,
    mut client: Option<&mut crate::session::Client>,
    framing: Framing,
    addrs: (SocketAddr, SocketAddr),
    stale: Option<&Object>,
) -> Fetched {
    let p = sh.params();
    let mut wire = Vec::with_capacity(1024);
    // A request whose body was streamed cannot be sent again.
    let can_retry = |b: &Bereq| b.retries < p.max_retries && framing == Framing::None;
    loop {
        let action = run_sub(policy, Sub::BackendFetch, &mut be_task(sh, f, bereq, addrs));
        let mut error = match action {
            Action::Fetch => None,
            Action::Error(s, r) => Some((s, r)),
            a => return Fetched::Abandoned(Error::new(Side::Internal, format!("vcl_backend_fetch returned {}", a.word()))),
        };
        if error.is_none() {
            // The backend vcl_backend_fetch left in bereq.backend.
            f.be =
                policy.backend(bereq.backend.as_deref(), bereq.hash.as_deref().unwrap_or(&bereq.url)).unwrap_or_else(|| sh.backend.clone());
            if let (None, Some(h)) = (bereq.headers.get("host"), f.be.cfg.host_header.clone()) {
                bereq.headers.set("Host", Bytes::from(h));
            }
            f.build_request(sh, &bereq.method.clone(), bereq, framing, addrs.0.ip(), &mut wire);
            match f.send(sh, framing, client.as_deref_mut(), &mut wire).await {
                Ok(resp) => {
                    let (mut beresp, mut life) = beresp_of(sh, f, &resp, stale);
                    let action = {
                        let mut t = be_task(sh, f, bereq, addrs);
                        t.beresp = Some(&mut beresp);
                        run_sub(policy, Sub::BackendResponse, &mut t)
                    };
                    match action {
                        Action::Deliver | Action::PassFor(_) => {
                            life.ttl = beresp.ttl;
                            life.grace = beresp.grace;
                            life.keep = beresp.keep;
                            return Fetched::Resp { resp, beresp, life, action };
                        }
                        Action::Retry if can_retry(bereq) => {
                            f.close(sh);
                            bereq.retries += 1;
                            f.stamp("Retry");
                            continue;
                        }
                        Action::Retry => {
                            f.close(sh);
                            f.error(sh, &Error::new(Side::Internal, "Too many retries, delivering 503"));
                            error = Some((503, "Backend fetch failed".into()));
                        }
                        Action::Error(s, r) => {
                            f.close(sh);
                            error = Some((s, r));
                        }
                        a => {
                            f.close(sh);
                            return Fetched::Abandoned(Error::new(Side::Internal, format!("vcl_backend_response returned {}", a.word())));
                        }
                    }
                }
                Err(e) if e.side == Side::Client => return Fetched::Client(e),
                Err(e) => {
                    f.error(sh, &e);
                    error = Some((503, "Backend fetch failed".into()));
                }
            }
        }
        let (status, reason) = error.unwrap_or((503, "Backend fetch failed".into()));
        let mut beresp = Beresp {
            status,
            reason: Bytes::from(reason),
            headers: Headers(vec![
                (Bytes::from_static(b"Date"), Bytes::from(crate::util::http_date(now()))),
                (Bytes::from_static(b"Server"), Bytes::from_static(b"cachekit")),
            ]),
            backend: f.be.name.clone(),
            ..Beresp::default()
        };
        let mut body = Vec::new();
        let action = {
            let mut t = be_task(sh, f, bereq, addrs);
            t.beresp = Some(&mut beresp);
            t.body = Some(&mut body);
            run_sub(policy, Sub::BackendError, &mut t)
        };
        match action {
            Action::Deliver => {
                let t = now();
                let life = Lifetime {
                    t_origin: t,
                    ttl: beresp.ttl,
                    grace: beresp.grace,
                    keep: beresp.keep,
                    date: t,
                    expires: -1.0,
                    max_age: -1.0,
                };
                return Fetched::Synthetic { beresp, body, life };
            }
            Action::Retry if can_retry(bereq) => {
                bereq.retries += 1;
                f.stamp("Retry");
            }
            a => return Fetched::Abandoned(Error::new(Side::Internal, format!("vcl_backend_error returned {}", a.word()))),
        }
    }
}

/// The backend response as vcl_backend_response sees it, and its
/// lifetime from the headers (RFC 9111 and the default_* parameters).
fn beresp_of(sh: &Shared, f: &mut Fetch, resp: &Response, stale: Option<&Object>) -> (Beresp, Lifetime) {
    let t = now();
    let fresh = stored_headers(&resp.head);
    let was_304 = resp.head.status == 304 && stale.is_some();
    let (status, reason, headers) = match stale.filter(|_| was_304) {
        Some(s) => {
            sh.seg.add(C::Fetch304, 1);
            (s.status, s.reason.clone(), merge_304(s, &fresh))
        }
        None => {
            let mut h = fresh;
            // A response to HEAD (a pass) keeps its Content-Length.
            if resp.framing == Framing::None {
                if let Some((n, v)) = resp.head.iter().find(|(n, _)| n.eq_ignore_ascii_case(b"content-length")) {
                    h.push((Bytes::copy_from_slice(n), Bytes::copy_from_slice(v)));
                }
            }
            (resp.head.status, Bytes::copy_from_slice(resp.head.reason()), h)
        }
    };
    let h = Headers(headers);
    let p = sh.params();
    let defaults = ttl::Defaults { ttl: p.default_ttl, grace: p.default_grace, keep: p.default_keep, clock_skew: 10.0 };
    let life = ttl::compute(status, h.iter(), t, &defaults);
    let word = if life.ttl > 0.0 { "cacheable" } else { "uncacheable" };
    f.log.recf(
        Tag::Ttl,
        LogSide::Backend,
        f.vxid,
        format_args!(
            "RFC {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {:.0} {word}",
            life.ttl, life.grace, life.keep, t, life.t_origin, life.date, life.expires, life.max_age
        ),
    );
    let beresp = Beresp {
        status,
        reason,
        headers: h,
        ttl: life.ttl,
        grace: life.grace,
        keep: life.keep,
        was_304,
        do_stream: true,
        backend: f.be.name.clone(),
        age: (t - life.t_origin).max(0.0),
        uncacheable: false,
    };
    (beresp, life)
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
    let hop = http::connection_tokens(h.iter());
    h.headers
        .iter()
        .filter(|(n, _)| !http::is_hop_by_hop(&h.raw[n.clone()]) && !http::is_listed(&hop, &h.raw[n.clone()]))
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
    let MissSpec { req, guard, stale, bxid, rxid, reason, addrs, policy } = spec;
    let (v, side) = (bxid, LogSide::Backend);
    let mut f = Fetch::new(&sh, bxid, rxid, reason);
    sh.seg.add(if reason == "bgfetch" { C::SBgfetch } else { C::SFetch }, 1);
    let mut bereq = Bereq::from_req(&req, bxid);
    bereq.is_bgfetch = reason == "bgfetch";
    // A HEAD miss fetches the whole object with GET.
    bereq.method = Bytes::from_static(b"GET");
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
    let fetched = backend_side(&sh, &*policy, &mut f, &mut bereq, None, Framing::None, addrs, stale.as_ref().map(|s| &s.obj)).await;
    // stale-if-error: a refresh that failed (or answered 5xx) leaves the
    // stale object to deliver, rather than an error.
    let failed = match &fetched {
        Fetched::Abandoned(_) | Fetched::Client(_) => true,
        Fetched::Synthetic { beresp, .. } => beresp.status >= 500,
        Fetched::Resp { beresp, .. } => beresp.status >= 500 && !beresp.was_304,
    };
    if let (true, true, Some(s)) = (failed, sh.params().stale_if_error, &stale) {
        if !s.is_dead() {
            f.note(&Error::new(Side::Internal, "stale_if_error: delivering the stale object"));
            if let Fetched::Resp { resp, .. } = fetched {
                f.finish(&sh, None, Some((resp.conn, false)));
            } else {
                f.finish(&sh, None, None);
            }
            f.end(&sh);
            drop(guard);
            let _ = tx.send(Ok(s.clone()));
            return;
        }
    }
    let (resp, beresp, life, action, body) = match fetched {
        Fetched::Resp { resp, beresp, life, action } => {
            let body = match (&stale, beresp.was_304) {
                (Some(s), true) => s.obj.body.clone(),
                _ => {
                    let expected = match resp.framing {
                        Framing::Length(n) => Some(n),
                        Framing::None => Some(0),
                        _ => None,
                    };
                    Arc::new(Body::new(expected))
                }
            };
            (Some(resp), beresp, life, action, body)
        }
        Fetched::Synthetic { beresp, body, life } => {
            let mut b = beresp;
            // An error object is kept only if the policy gave it a ttl.
            let action = Action::Deliver;
            if b.ttl <= 0.0 {
                b.uncacheable = true;
            }
            (None, b, life, action, Arc::new(Body::whole(Bytes::from(body))))
        }
        Fetched::Abandoned(e) | Fetched::Client(e) => {
            f.note(&e);
            f.finish(&sh, None, None);
            f.end(&sh);
            drop(guard); // Waiters learn that the fetch failed.
            let _ = tx.send(Err(e));
            return;
        }
    };
    let t = now();
    let p = sh.params();
    let headers = &beresp.headers;
    let vary = headers.get("vary").map(|list| {
        let names: Vec<String> = list
            .split(|&c| c == b',')
            .map(|n| String::from_utf8_lossy(n.trim_ascii()).to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        names.into_iter().map(|n| (n.clone(), vary_value(req.headers.iter(), &n))).collect::<Vec<_>>()
    });
    let obj = Object {
        vxid: bxid,
        status: beresp.status,
        reason: beresp.reason.clone(),
        headers: ObjHeaders::from_pairs(headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(b"content-length"))),
        body: body.clone(),
        life,
        kind: Kind::Normal,
        vary,
    };
    let marker = match action {
        Action::PassFor(ttl) => Some((Kind::HitForPass, ttl)),
        _ if beresp.uncacheable && resp.is_some() => Some((Kind::HitForMiss, beresp.ttl)),
        _ => None,
    };
    let oc = match marker {
        None if !beresp.uncacheable => {
            if life.ttl + life.grace + life.keep < p.shortlived {
                sh.seg.add(C::BerespShortlived, 1);
            }
            let (oc, stored) = sh.cache.insert(guard, obj, t);
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
                vxid: bxid,
                status: obj.status,
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
    let Some(resp) = resp else {
        f.finish(&sh, Some(body.known_len().unwrap_or(0)), None);
        f.end(&sh);
        return;
    };
    if beresp.was_304 {
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
        pace: None,
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
