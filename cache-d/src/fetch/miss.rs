//! Fetching an object for the cache (a miss or a background refresh): a
//! task of its own, so the fetch completes for every waiter even if the
//! client that started it goes away. The caller gets the object as soon as
//! its headers are in; the body keeps streaming into it.

use std::sync::Arc;

use bytes::Bytes;
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use tokio::sync::oneshot;

use crate::cache::body::{Blocks, Body, ObjBody};
use crate::cache::ttl::{cc_value, Lifetime};
use crate::cache::{vary_value, BusyGuard, Kind, ObjHeaders, ObjRef, Object};
use crate::error::{Error, Side};
use crate::fetch::steps::{self, BeTxn, Fetched};
use crate::fetch::stream::{copy_blocks, esi_page, refused, store_room, stream_body, Dest};
use crate::fetch::txn::{Fetch, Response};
use crate::gzip::fetch::{Coder, Plan, Sinks};
use crate::gzip::Coding;
use crate::http1::head::Framing;
use crate::req::contain::contain;
use crate::req::transport::{CachedBody, NoBody};
use crate::shared::Shared;
use crate::util::now;
use crate::vcl::model::{Action, Bereq, Beresp, Ends, Req};
use crate::vcl::policy::Policy;

/// Client conditionals and ranges a cache fetch must not forward.
const FETCH_FILTERED: [&str; 12] = [
    "range",
    "if-range",
    "if-modified-since",
    "if-none-match",
    "if-match",
    "if-unmodified-since",
    "cache-control",
    "content-range",
    "accept-ranges",
    "proxy-authenticate",
    "proxy-authorization",
    "http2-settings",
];

/// Everything a cache fetch needs.
pub struct MissSpec {
    pub req: Req,
    pub guard: BusyGuard,
    /// Stale object whose validators make the fetch conditional.
    pub stale: Option<ObjRef>,
    /// Its body as the lookup held it (a disk object's, which the memory
    /// tier may let go during the fetch): what a 304 keeps.
    pub stale_body: Option<ObjBody>,
    pub bxid: u32,
    pub rxid: u32,
    /// "fetch" or "bgfetch".
    pub reason: &'static str,
    /// The client's and our address (client.ip, server.ip).
    pub addrs: Ends,
    /// The policy of the request that started the fetch.
    pub policy: Arc<dyn Policy>,
    /// The request's body, if std.cache_req_body() read it: sent unless
    /// vcl_backend_fetch unsets bereq.body (the built-in does for GET).
    pub body: Option<Bytes>,
    /// Where the backend's interim responses go (the client that started
    /// the fetch forwards them); None: read past.
    pub interim: Option<tokio::sync::mpsc::UnboundedSender<Bytes>>,
}

/// Start a cache fetch; resolves when the object's headers are in.
pub async fn start(sh: Arc<Shared>, spec: MissSpec) -> Result<FetchedObj, Error> {
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
    inline: Option<Bytes>,
    /// Gzip and Brotli: what the stored body is.
    coding: Option<Box<Coding>>,
    /// The filters a streaming body still goes through.
    coder: Option<Coder>,
    /// The `Gzip` record of filters that already ran (a body that came
    /// with the head), logged after FetchBody as Varnish orders them.
    record: Option<String>,
    /// A 304 on a large disk object: its blocks, to copy into `body`.
    copy: Option<Arc<dyn Blocks>>,
}

/// Bodies of a known length up to this size are read whole before the
/// object is made and stored in its allocation, instead of streaming in.
const INLINE_MAX: u64 = 64 * 1024;

/// Take in what has already arrived of a small body of known length (up
/// to [`INLINE_MAX`]), so that one that is there whole is stored with the
/// head: one allocation and one piece to send instead of a streaming
/// body, its lock and its chunks. Never waits: a body still on its way
/// streams in, so that its clients get its bytes (a range of them, a
/// 206) as they come, as in Varnish, and not once the backend has sent
/// the last byte, which it may hold back. A read that fails stops here;
/// the streaming path meets the failure and reports it.
fn read_small_body(fetched: &mut Fetched) {
    let Fetched::Resp { resp, beresp, .. } = fetched else { return };
    let Framing::Length(n) = resp.framing else { return };
    if beresp.was_304 || n > INLINE_MAX {
        return;
    }
    while (resp.conn.buf.len() as u64) < n {
        match resp.conn.fill_ready(n - resp.conn.buf.len() as u64) {
            Some(Ok(k)) if k > 0 => {}
            _ => return,
        }
    }
}

/// The fetched object, and a disk object's body as the fetching request
/// delivers it.
pub type FetchedObj = (ObjRef, Option<ObjBody>);

async fn run(sh: Arc<Shared>, spec: MissSpec, tx: oneshot::Sender<Result<FetchedObj, Error>>) {
    let MissSpec { req, guard, stale, stale_body, bxid, rxid, reason, addrs, policy, body, interim } = spec;
    let mut f = Fetch::new(&sh, bxid, rxid, reason);
    f.interim = interim;
    sh.seg.add(if reason == "bgfetch" { C::SBgfetch } else { C::SFetch }, 1);
    let revalidate = stale.as_ref().filter(|s| ims_candidate(s));
    let mut bereq = cache_bereq(&req, bxid, reason, revalidate, sh.params().http_gzip_support);
    let body = body.map(|b| (b, req.cache_body.is_some()));
    let fetched = backend_steps(&sh, &*policy, (&mut f, &mut bereq), addrs.clone(), revalidate, body.clone(), false).await;
    let mut fetched = whole_unstreamed(&sh, &*policy, (&mut f, &mut bereq), (addrs, revalidate, body), fetched).await;
    read_small_body(&mut fetched);
    // stale-if-error: a refresh that failed (or answered 5xx) leaves the
    // stale object to deliver, rather than an error, unless its response
    // forbids serving it stale.
    let rfc = sh.params().rfc9111();
    let stand_in = |s: &&ObjRef| failed(&fetched) && sh.params().stale_if_error && !s.is_dead() && may_serve_stale(s, rfc);
    if let Some(s) = stale.as_ref().filter(stand_in) {
        stale_instead(f, fetched);
        drop(guard);
        let _ = tx.send(Ok((s.clone(), stale_body)));
        return;
    }
    let (fetched, stale_body) = match kept_body(&sh, &mut f, fetched, stale.as_ref(), stale_body).await {
        Ok(x) => x,
        Err(e) => return give_up(f, guard, tx, e),
    };
    let mut got = match got(&sh, &mut f, fetched, stale.as_ref().map(|s| (s, stale_body)), &bereq.url) {
        Ok(g) => g,
        Err((e, logged)) => {
            if !logged {
                f.note(&e);
            }
            return give_up(f, guard, tx, e);
        }
    };
    illegal_vary(&mut f, &mut got.beresp);
    let (coder, copy, record) = (got.coder.take(), got.copy.take(), got.record.take());
    let obj = object(bxid, &mut got, &bereq.headers);
    // A hit-for-miss or hit-for-pass marker for a body not streamed goes
    // in (waking the waiters, who fetch on their own) once the body is in
    // and the backend connection back in the pool, as Varnish unbusies
    // such an object only then.
    let defer = !got.beresp.do_stream && got.resp.is_some();
    // A disk object's body as this request delivers it, taken before the
    // object goes in: its copy in memory may go once it is written, or at
    // once if another fetch evicts the object before that (its body read
    // from the object then would be a failed, empty one).
    let body = obj.body.clone();
    let (oc, mut later) = store(&sh, &mut f, guard, obj, &got, defer);
    let mine = oc.disk().map(|_| body);
    sh.cache.persist(&oc);
    let (was_304, stream) = (got.beresp.was_304, got.beresp.do_stream);
    let body = match (got.inline, got.body) {
        (Some(b), _) => Err(b.len() as u64),
        (None, ObjBody::Live(b)) => Ok(b),
        (None, whole) => Err(whole.known_len().unwrap_or(0)),
    };
    match (got.resp, body) {
        (None, body) => {
            let _ = tx.send(Ok((oc.clone(), mine)));
            f.done(Some(body.err().unwrap_or(0)), None);
        }
        // The connection is back in the pool before the request is
        // answered (its client's next request may fetch at once).
        (Some(resp), body) if was_304 => {
            let reusable = !crate::http1::head::backend_closes(&resp.head);
            f.done(Some(0), Some((resp.conn, reusable)));
            let _ = tx.send(Ok((oc.clone(), mine)));
            if let (Some(src), Ok(body)) = (copy, body) {
                copy_blocks(&sh, src, &body, &oc).await;
            }
        }
        // The body came whole with the head.
        (Some(resp), Err(len)) => {
            f.log.rec(Tag::FetchBody, LogSide::Backend, f.vxid, b"3 length stream");
            if let Some(r) = record {
                f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
            }
            let reusable = !crate::http1::head::backend_closes(&resp.head);
            f.done(Some(len), Some((resp.conn, reusable)));
            let _ = tx.send(Ok((oc.clone(), mine)));
        }
        (Some(resp), Ok(body)) if stream => {
            let _ = tx.send(Ok((oc.clone(), mine)));
            stream_body(&sh, f, resp, Dest { body: &body, oc: &oc, stream: true }, coder, &bereq.url).await;
        }
        // beresp.do_stream = false: the request is answered once the
        // whole body is in; a body that fails is a failed fetch (503).
        (Some(resp), Ok(body)) => {
            let whole = stream_body(&sh, f, resp, Dest { body: &body, oc: &oc, stream: false }, coder, &bereq.url).await;
            if let Some(m) = later.take() {
                m.insert(&sh);
            }
            let _ = tx.send(if whole { Ok((oc, mine)) } else { Err(Error::new(Side::Backend, "backend body ended early or failed")) });
        }
    }
    if let Some(m) = later {
        m.insert(&sh);
    }
}

/// A fetch that produced nothing: its waiters learn that it failed (the
/// busy guard goes), and so does the request.
fn give_up(f: Fetch, guard: BusyGuard, tx: oneshot::Sender<Result<FetchedObj, Error>>, e: Error) {
    f.done(None, None);
    drop(guard);
    let _ = tx.send(Err(e));
}

/// A 304 keeps the stale object's body: the one the lookup held, or read
/// back now. One still streaming in is waited for, and fails the fetch
/// if it fails (Varnish's "Template object failed").
async fn kept_body(
    sh: &Shared,
    f: &mut Fetch,
    fetched: Fetched,
    stale: Option<&ObjRef>,
    held: Option<ObjBody>,
) -> Result<(Fetched, Option<ObjBody>), Error> {
    let body = match (&fetched, stale) {
        (Fetched::Resp { beresp, .. }, Some(s)) if beresp.was_304 => match held {
            Some(b) => Some(b),
            None => sh.cache.held_body(s).await.ok(),
        },
        _ => return Ok((fetched, None)),
    };
    if let Some(b) = body.as_ref().filter(|b| matches!(b, ObjBody::Live(_))) {
        if b.pieces().await.is_none() {
            if let Fetched::Resp { resp, .. } = fetched {
                f.release(resp);
            }
            let e = Error::new(Side::Backend, "Template object failed");
            f.error(&e);
            return Err(e);
        }
    }
    Ok((fetched, body))
}

/// A marker to put in the cache later (see `defer` in [`run`]).
struct Later {
    guard: BusyGuard,
    marker: Object,
    stv: u8,
}

impl Later {
    fn insert(self, sh: &Shared) {
        sh.cache.insert_in(self.guard, self.marker, self.stv);
    }
}

/// The backend steps of a cache fetch, sending the request's body if it
/// has one (read whole before: it can be sent again on a retry; `kept`
/// when std.cache_req_body() kept it); from vcl_backend_error when
/// `after_error` (a body that failed).
async fn backend_steps(
    sh: &Shared,
    policy: &dyn Policy,
    (f, bereq): (&mut Fetch, &mut Bereq),
    addrs: Ends,
    stale: Option<&ObjRef>,
    body: Option<(Bytes, bool)>,
    after_error: bool,
) -> Fetched {
    async fn go<B: crate::req::transport::ReqBody>(t: &mut BeTxn<'_, B>, after_error: bool) -> Fetched {
        if after_error {
            steps::run_after_body_error(t).await
        } else {
            steps::run(t).await
        }
    }
    match body {
        Some((b, kept)) => {
            let mut body = CachedBody(b);
            f.replayable = true;
            let mut t = BeTxn::new(sh, policy, f, bereq, addrs);
            (t.stale, t.framing, t.client, t.kept) = (stale, Framing::Length(body.0.len() as u64), Some(&mut body), kept);
            go(&mut t, after_error).await
        }
        None => {
            let mut t = BeTxn::<NoBody>::new(sh, policy, f, bereq, addrs);
            t.stale = stale;
            go(&mut t, after_error).await
        }
    }
}

/// beresp.do_stream = false: the body is read whole before the object is
/// made, at most the size of the store it would go to, so a body that
/// fails (or cannot be stored) goes through vcl_backend_error, which may
/// retry or give a page to cache, as Varnish's F_STP_ERROR.
async fn whole_unstreamed(
    sh: &Shared,
    policy: &dyn Policy,
    (f, bereq): (&mut Fetch, &mut Bereq),
    (addrs, stale, body): (Ends, Option<&ObjRef>, Option<(Bytes, bool)>),
    mut fetched: Fetched,
) -> Fetched {
    loop {
        match fetched {
            Fetched::Resp { mut resp, beresp, life, action } if !beresp.do_stream && !beresp.was_304 => {
                let cap = store_room(sh, &beresp.storage);
                match resp.read_whole(f.timeout(2), cap).await {
                    Ok(()) => return Fetched::Resp { resp, beresp, life, action },
                    Err(e) => {
                        f.error(&e);
                        drop(resp);
                        fetched = backend_steps(sh, policy, (&mut *f, &mut *bereq), addrs.clone(), stale, body.clone(), true).await;
                    }
                }
            }
            other => return other,
        }
    }
}

/// The backend request for the cache: a GET (a HEAD miss fetches the
/// whole object), without the client's conditionals and ranges, made
/// conditional on the validators of `stale` (one [`ims_candidate`]).
fn cache_bereq(req: &Req, bxid: u32, reason: &str, stale: Option<&ObjRef>, gzip: bool) -> Bereq {
    let mut bereq = Bereq::from_req(req, bxid);
    bereq.is_bgfetch = reason == "bgfetch";
    bereq.method = Bytes::from_static(b"GET");
    for h in FETCH_FILTERED {
        bereq.headers.unset(h);
    }
    // Objects are asked for gzip, stored gzip, gunzipped for the clients
    // that cannot take it (Varnish's http_gzip_support).
    if gzip && !bereq.headers.get("accept-encoding").is_some_and(|v| v.eq_ignore_ascii_case(b"gzip")) {
        bereq.headers.unset("accept-encoding");
        bereq.headers.set("Accept-Encoding", Bytes::from_static(b"gzip"));
    }
    if let Some(s) = stale {
        if let Some(lm) = s.header("last-modified") {
            bereq.headers.set("If-Modified-Since", lm);
        }
        if let Some(et) = s.header("etag") {
            bereq.headers.set("If-None-Match", et);
        }
    }
    bereq
}

/// Can a stale object be revalidated (Varnish's OF_IMSCAND): a 200 with
/// Last-Modified or ETag, and a body (or one still coming). Only then is
/// the fetch made conditional, and only then does a 304 refresh it.
fn ims_candidate(s: &ObjRef) -> bool {
    s.obj.status == 200 && (s.header("last-modified").is_some() || s.header("etag").is_some()) && s.body().known_len() != Some(0)
}

/// End a fetch whose failure stale-if-error covers (its connection closed).
fn stale_instead(mut f: Fetch, fetched: Fetched) {
    f.note(&Error::new(Side::Internal, "stale_if_error: delivering the stale object"));
    let conn = match fetched {
        Fetched::Resp { resp, .. } => Some((resp.conn, false)),
        _ => None,
    };
    f.done(None, conn);
}

/// May stale_if_error deliver this stale object? Not when its response
/// says a stale copy must not be served without revalidation: RFC 9111's
/// must-revalidate (§5.2.2.2), proxy-revalidate (§5.2.2.8), s-maxage
/// (§5.2.2.10) and no-cache (§5.2.2.4, qualified or not), which RFC 5861
/// §4's stale-if-error does not override. varnishd never serves stale
/// here; this only narrows cachekit's own default (c0623, c1092). In RFC
/// mode only the response's stale-if-error=N allows it (RFC 9111 §4.2.4;
/// `cache::rfc::stale_on_error`, c1104).
fn may_serve_stale(s: &ObjRef, rfc: bool) -> bool {
    let h = s.headers();
    if rfc {
        return crate::cache::rfc::stale_on_error(h.iter(), s.obj.life(), now());
    }
    !["must-revalidate", "proxy-revalidate", "s-maxage", "no-cache"].iter().any(|d| cc_value(h.iter(), d).is_some())
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
/// page; the error when there is nothing. The gzip and Brotli filters
/// are chosen here; a body that came whole with the head goes through
/// them at once (and fails the fetch if it is bad gzip).
/// Err carries whether the failure is already logged.
fn got(sh: &Shared, f: &mut Fetch, fetched: Fetched, stale: Option<(&ObjRef, Option<ObjBody>)>, url: &[u8]) -> Result<Got, (Error, bool)> {
    match fetched {
        Fetched::Resp { mut resp, mut beresp, life, action } => {
            let expected = match resp.framing {
                Framing::Length(n) => Some(n),
                Framing::None => Some(0),
                _ => None,
            };
            if let (Some((s, body)), true) = (stale, beresp.was_304) {
                let (body, coding, copy) = refreshed(s, body)?;
                return Ok(Got { resp: Some(resp), beresp, life, action, body, inline: None, coding, coder: None, record: None, copy });
            }
            let (plan, coder, mut coding) = filters(sh, &mut beresp, expected);
            match expected {
                Some(n) if n <= INLINE_MAX && resp.conn.buf.len() as u64 >= n => {
                    let raw = resp.conn.buf.split_to(n as usize).freeze();
                    let mut record = None;
                    let inline = match coder {
                        None => raw,
                        Some(mut c) => {
                            let (mut body, mut br) = (Vec::new(), Vec::new());
                            let r = {
                                let mut out = Sinks { body: &mut |b| body.push(b), br: &mut |b| br.push(b) };
                                c.feed(raw, &mut out).and_then(|()| c.finish(&mut out))
                            };
                            if let Err(e) = r {
                                refused(f, &c, &e);
                                return Err((Error::new(Side::Backend, e.fetch_error), true));
                            }
                            record = c.record();
                            if let Some(k) = coding.as_mut() {
                                if let Some(info) = c.info() {
                                    let _ = k.info.set(info);
                                }
                                if plan.brotli {
                                    k.br = Some(ObjBody::Whole(crate::gzip::code::join(&br)));
                                }
                            }
                            crate::gzip::code::join(&body)
                        }
                    };
                    let mut inline = inline;
                    if let Some(k) = coding.as_mut().filter(|k| k.esi) {
                        let pieces = vec![inline.clone()];
                        inline = crate::gzip::code::join(&esi_page(sh, f, url, k, pieces).map_err(|e| (e, false))?);
                    }
                    Ok(Got {
                        resp: Some(resp),
                        beresp,
                        life,
                        action,
                        body: ObjBody::Whole(Bytes::new()),
                        inline: Some(inline),
                        coding,
                        coder: None,
                        record,
                        copy: None,
                    })
                }
                _ => {
                    let expected = if plan.changes_length() { None } else { expected };
                    if let Some(k) = coding.as_mut().filter(|_| plan.brotli) {
                        k.br = Some(ObjBody::Live(Arc::new(Body::new(None))));
                    }
                    let body = ObjBody::Live(Arc::new(Body::new(expected)));
                    Ok(Got { resp: Some(resp), beresp, life, action, body, inline: None, coding, coder, record: None, copy: None })
                }
            }
        }
        Fetched::Synthetic { mut beresp, body, life } => {
            // An error object is kept only if the policy gave it a ttl.
            if beresp.ttl <= 0.0 {
                beresp.uncacheable = true;
            }
            let body = ObjBody::Whole(Bytes::from(body));
            Ok(Got {
                resp: None,
                beresp,
                life,
                action: Action::Deliver,
                body,
                inline: None,
                coding: None,
                coder: None,
                record: None,
                copy: None,
            })
        }
        Fetched::Abandoned(e) | Fetched::Client(e) => Err((e, false)),
    }
}

/// What a 304 keeps of the stale object `s`: its body (a large disk
/// object's to be copied block by block into the new object, as a
/// fetched body streams in) and its coding.
#[allow(clippy::type_complexity)]
fn refreshed(s: &ObjRef, body: Option<ObjBody>) -> Result<(ObjBody, Option<Box<Coding>>, Option<Arc<dyn Blocks>>), (Error, bool)> {
    let coding = s.obj.coding().map(|c| Box::new(c.clone()));
    match body {
        Some(ObjBody::Blocks(b)) => Ok((ObjBody::Live(Arc::new(Body::new(Some(b.body_len())))), coding, Some(b))),
        Some(b) => Ok((b, coding, None)),
        None => Err((Error::new(Side::Internal, "the stale object's body cannot be read back for the 304"), false)),
    }
}

/// The filters a fetched body goes through (gzip, Brotli, ESI, as
/// [`crate::gzip::fetch::plan`] and Varnish's esi filters choose them),
/// with the header changes they make, and what the object will be.
fn filters(sh: &Shared, beresp: &mut Beresp, expected: Option<u64>) -> (Plan, Option<Coder>, Option<Box<Coding>>) {
    let params = sh.params();
    let esi = beresp.do_esi && expected != Some(0) && !beresp.partial();
    // An ESI page is kept gzip when it came gzip (and do_gunzip is
    // not set) or do_gzip asks for it, as Varnish's esi_gzip.
    let (is_gzip, is_plain) = crate::gzip::fetch::body_coding(&beresp.headers);
    // Without gzip support do_gzip and do_gunzip do nothing, but a gzip
    // page stays gzip (Varnish's filter list).
    let support = params.http_gzip_support;
    let gz_esi = esi && ((is_gzip && !(beresp.do_gunzip && support)) || (is_plain && beresp.do_gzip && support));
    if esi {
        // Parsed whole and plain (gunzipped if it came gzip), then
        // compressed again segment by segment if kept gzip; no
        // Brotli copy of the markup; no streaming (as Varnish).
        (beresp.do_gunzip, beresp.do_gzip, beresp.do_brotli, beresp.do_stream) = (true, false, false, false);
    }
    let plan = crate::gzip::fetch::plan(beresp, expected != Some(0), params.http_gzip_support || esi, params.http_brotli_support);
    // A filter that changes the body takes its length away (Varnish's
    // gzip, gunzip and ESI fetch filters unset Content-Length).
    if plan.changes_length() || esi {
        beresp.headers.unset("content-length");
    }
    if gz_esi {
        let h = &mut beresp.headers;
        crate::gzip::weaken_etag(h);
        h.unset("content-length");
        h.set("Content-Encoding", Bytes::from_static(b"gzip"));
        crate::gzip::vary_ae(h);
    }
    let coder = plan.any().then(|| Coder::new(plan, &params.coding(), &|c| sh.seg.add(c, 1)));
    (plan, coder, coding_for(plan, esi, gz_esi))
}

/// What an object filtered by `plan` (and parsed for ESI, kept gzip if
/// `gz_esi`) will be, before its body is in.
fn coding_for(plan: Plan, esi: bool, gz_esi: bool) -> Option<Box<Coding>> {
    let gzip = plan.gzipped() || gz_esi;
    let chgce = plan.changes_length() || gz_esi;
    (gzip || plan.brotli || esi || chgce).then(|| Box::new(Coding { gzip, esi, chgce, ..Coding::default() }))
}

/// Why a Vary header cannot be used, if it cannot: Varnish's VRY_Create
/// rules (names up to 127 bytes, separated by commas, spaces around them).
fn vary_fault(v: &[u8]) -> Option<&'static str> {
    let sp = |c: u8| c == b' ' || c == b'\t';
    let mut p = 0;
    while p < v.len() {
        if sp(v[p]) {
            p += 1;
            continue;
        }
        let mut q = p;
        while q < v.len() && !sp(v[q]) && v[q] != b',' {
            q += 1;
        }
        if q - p > 127 {
            return Some("Vary header name length exceeded");
        }
        while q < v.len() && sp(v[q]) {
            q += 1;
        }
        if q == v.len() {
            return None;
        }
        if v[q] != b',' {
            return Some("Malformed Vary header");
        }
        p = q + 1;
    }
    None
}

/// A Vary header Varnish cannot parse makes the object a pass, not one
/// cached under the wrong variants.
fn illegal_vary(f: &mut Fetch, beresp: &mut Beresp) {
    let Some(why) = beresp.headers.get("vary").and_then(|v| vary_fault(v)) else { return };
    f.log.rec(Tag::Error, LogSide::Backend, f.vxid, why.as_bytes());
    f.log.rec(Tag::Error, LogSide::Backend, f.vxid, b"Illegal 'Vary' header from backend, making this a pass.");
    beresp.uncacheable = true;
}

/// The object for `beresp`, with the Vary values of the request that
/// fetched it (none for a Vary it cannot use).
/// The object from the response; its Vary values are read from the
/// backend request as vcl_backend_fetch left it, as Varnish's VRY_Create.
fn object(bxid: u32, got: &mut Got, bereq: &crate::vcl::model::Headers) -> Object {
    let beresp = &got.beresp;
    let headers = &beresp.headers;
    let vary = headers.get("vary").filter(|v| vary_fault(v).is_none()).map(|list| {
        let names: Vec<String> = list
            .split(|&c| c == b',')
            .map(|n| String::from_utf8_lossy(n.trim_ascii()).to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        Box::new(names.into_iter().map(|n| (n.clone(), vary_value(bereq.iter(), &n))).collect::<Vec<_>>())
    });
    let drop = if beresp.uncacheable { super::steps::not_passed } else { super::steps::not_stored };
    let pairs = headers.iter().filter(|(n, _)| !drop(n));
    let (headers, body) = match &got.inline {
        Some(b) => {
            let (h, b) = ObjHeaders::with_body(&beresp.reason, pairs, b);
            (h, ObjBody::Whole(b))
        }
        None => (ObjHeaders::from_pairs(&beresp.reason, pairs), got.body.clone()),
    };
    Object { vxid: bxid, status: beresp.status, headers, body, life: got.life.life(), kind: Kind::Normal, vary, coding: got.coding.take() }
}

/// Put the object in the cache (or hand it to this request alone, with a
/// hit-for-pass or hit-for-miss marker in the cache instead).
fn store(sh: &Shared, f: &mut Fetch, guard: BusyGuard, obj: Object, got: &Got, defer: bool) -> (ObjRef, Option<Later>) {
    let (t, v, side) = (now(), f.vxid, LogSide::Backend);
    let (beresp, life) = (&got.beresp, got.life);
    let marker = match got.action {
        Action::PassFor(ttl) => Some((Kind::HitForPass, ttl)),
        _ if beresp.uncacheable && got.resp.is_some() => Some((Kind::HitForMiss, beresp.ttl)),
        _ => None,
    };
    let stores = sh.cache.stores();
    let transient = stores.transient;
    match marker {
        None if !beresp.uncacheable => {
            // As Varnish's vbf_allocobj: short-lived objects go to
            // Transient, the rest where VCL said (or the round robin).
            let stv = if life.ttl + life.grace + life.keep < sh.params().shortlived {
                sh.seg.add(C::BerespShortlived, 1);
                transient
            } else {
                stores.find(&beresp.storage).unwrap_or_else(|| stores.next())
            };
            let (oc, stored) = sh.cache.insert_in(guard, obj, stv);
            let s = stores.get(if stored { oc.stv } else { transient });
            f.log.recf(Tag::Storage, side, v, format_args!("{} {}", s.kind.name(), s.name));
            (oc, None)
        }
        None => {
            // An uncacheable error object: delivered to this request only.
            sh.seg.add(C::BerespUncacheable, 1);
            drop(guard);
            f.log.rec(Tag::Storage, side, v, b"malloc Transient");
            (sh.cache.private(obj), None)
        }
        Some((kind, ttl)) => {
            let mut obj = obj;
            sh.seg.add(C::BerespUncacheable, 1);
            // A hit-for-miss keeps its grace and keep (Varnish's "grace
            // HFM": expired, it still makes misses private); a
            // hit-for-pass has none.
            let (grace, keep) = if kind == Kind::HitForMiss { (life.grace, life.keep) } else { (0.0, 0.0) };
            let marker_life = crate::cache::ttl::Life { t_origin: t, ttl, grace, keep };
            if kind == Kind::HitForPass {
                f.log.recf(Tag::Ttl, side, v, format_args!("HFP {ttl:.0} 0 0 {t:.0} uncacheable"));
                // The object this request gets has none either (obj.grace
                // and obj.keep read 0 in vcl_deliver, as in Varnish).
                (obj.life.grace, obj.life.keep) = (0.0, 0.0);
            } else {
                f.log.recf(Tag::Ttl, side, v, format_args!("VCL {ttl:.0} {grace:.0} {keep:.0} {t:.0} uncacheable"));
            }
            // The marker keeps the response's headers (a copy: not the
            // body that may share their buffer), so xkey indexes it and a
            // ban can match it, as Varnish's marker is the object itself.
            let marker = Object {
                vxid: v,
                status: obj.status,
                headers: ObjHeaders::from_pairs(&obj.reason(), obj.headers.iter()),
                body: ObjBody::Whole(Bytes::new()),
                life: marker_life,
                kind,
                vary: obj.vary.clone(),
                coding: None,
            };
            f.log.rec(Tag::Storage, side, v, b"malloc Transient");
            let later = Later { guard, marker, stv: transient };
            if !defer {
                later.insert(sh);
                return (sh.cache.private(obj), None);
            }
            (sh.cache.private(obj), Some(later))
        }
    }
}
