//! Fetching an object for the cache (a miss or a background refresh): a
//! task of its own, so the fetch completes for every waiter even if the
//! client that started it goes away. The caller gets the object as soon as
//! its headers are in; the body keeps streaming into it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;

use crate::cache::body::{Blocks, Body, ObjBody, Room};
use crate::cache::ttl::Lifetime;
use crate::cache::{vary_value, BusyGuard, Cache, Kind, ObjHeaders, ObjRef, Object};
use crate::error::{Error, Side};
use crate::fetch::steps::{self, BeTxn, Fetched};
use crate::fetch::txn::{Fetch, Response};
use crate::gzip::fetch::{Coder, Plan, Sinks};
use crate::gzip::Coding;
use crate::http1::body::{self as http_body, Transfer};
use crate::http1::head::Framing;
use crate::req::contain::contain;
use crate::req::transport::NoBody;
use crate::shared::Shared;
use crate::util::now;
use crate::vcl::model::{Action, Bereq, Beresp, Ends, Req};
use crate::vcl::policy::Policy;

/// Client conditionals and ranges a cache fetch must not forward.
const FETCH_FILTERED: [&str; 6] = ["range", "if-range", "if-modified-since", "if-none-match", "if-match", "if-unmodified-since"];

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

/// Read the rest of a small body of known length (up to [`INLINE_MAX`])
/// so that it is stored whole with the head: one allocation and one
/// piece to send instead of a streaming body, its lock and its chunks.
/// Its first client waits for it whole, a matter of microseconds from a
/// backend on the same network. A read that fails or times out stops
/// here; the streaming path meets the failure and reports it.
async fn read_small_body(f: &Fetch, fetched: &mut Fetched) {
    let Fetched::Resp { resp, beresp, .. } = fetched else { return };
    let Framing::Length(n) = resp.framing else { return };
    if beresp.was_304 || n > INLINE_MAX {
        return;
    }
    let timeout = f.timeout(2);
    while (resp.conn.buf.len() as u64) < n {
        match resp.conn.fill_for(timeout, n - resp.conn.buf.len() as u64).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The fetched object, and a disk object's body as the fetching request
/// delivers it.
pub type FetchedObj = (ObjRef, Option<ObjBody>);

async fn run(sh: Arc<Shared>, spec: MissSpec, tx: oneshot::Sender<Result<FetchedObj, Error>>) {
    let MissSpec { req, guard, stale, stale_body, bxid, rxid, reason, addrs, policy } = spec;
    let mut f = Fetch::new(&sh, bxid, rxid, reason);
    sh.seg.add(if reason == "bgfetch" { C::SBgfetch } else { C::SFetch }, 1);
    let mut bereq = cache_bereq(&req, bxid, reason, stale.as_ref(), sh.params().http_gzip_support);
    let mut fetched = {
        let mut t = BeTxn::<NoBody>::new(&sh, &*policy, &mut f, &mut bereq, addrs);
        t.stale = stale.as_ref();
        steps::run(&mut t).await
    };
    read_small_body(&f, &mut fetched).await;
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
            let _ = tx.send(Ok((s.clone(), stale_body)));
            return;
        }
    }
    // A 304 keeps the stale object's body: the one the lookup held, or
    // read back now.
    let stale_body = match (&fetched, &stale) {
        (Fetched::Resp { beresp, .. }, Some(s)) if beresp.was_304 => match stale_body {
            Some(b) => Some(b),
            None => sh.cache.held_body(s).await.ok(),
        },
        _ => None,
    };
    let got = match got(&sh, &mut f, fetched, stale.as_ref().map(|s| (s, stale_body)), &bereq.url) {
        Ok(g) => g,
        Err((e, logged)) => {
            if !logged {
                f.note(&e);
            }
            f.done(None, None);
            drop(guard); // Waiters learn that the fetch failed.
            let _ = tx.send(Err(e));
            return;
        }
    };
    let mut got = got;
    let (coder, copy) = (got.coder.take(), got.copy.take());
    let record = got.record.take();
    let obj = object(bxid, &mut got, &req);
    let oc = store(&sh, &mut f, guard, obj, &got);
    // A disk object's body as this request delivers it (its copy in
    // memory may go once it is written), then written if it is whole.
    let mine = oc.disk().map(|_| oc.body());
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
        (Some(resp), body) if was_304 => {
            let _ = tx.send(Ok((oc.clone(), mine)));
            let reusable = !resp.head.has_token("connection", "close");
            f.done(Some(0), Some((resp.conn, reusable)));
            if let (Some(src), Ok(body)) = (copy, body) {
                copy_blocks(&sh, src, &body, &oc).await;
            }
        }
        // The body came whole with the head.
        (Some(resp), Err(len)) => {
            let _ = tx.send(Ok((oc.clone(), mine)));
            f.log.rec(Tag::FetchBody, LogSide::Backend, f.vxid, b"3 length stream");
            if let Some(r) = record {
                f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
            }
            let reusable = !(resp.head.minor == 0 || resp.head.has_token("connection", "close"));
            f.done(Some(len), Some((resp.conn, reusable)));
        }
        (Some(resp), Ok(body)) if stream => {
            let _ = tx.send(Ok((oc.clone(), mine)));
            stream_body(&sh, f, resp, Dest { body: &body, oc: &oc, stream: true }, coder, &bereq.url).await;
        }
        // beresp.do_stream = false: the request is answered once the
        // whole body is in; a body that fails is a failed fetch (503).
        (Some(resp), Ok(body)) => {
            let whole = stream_body(&sh, f, resp, Dest { body: &body, oc: &oc, stream: false }, coder, &bereq.url).await;
            let _ = tx.send(if whole { Ok((oc, mine)) } else { Err(Error::new(Side::Backend, "backend body ended early or failed")) });
        }
    }
}

/// The backend request for the cache: a GET (a HEAD miss fetches the
/// whole object), without the client's conditionals and ranges, made
/// conditional on a stale object's validators.
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
                let coding = s.obj.coding().map(|c| Box::new(c.clone()));
                // A large disk object's body is copied block by block
                // into the new object as a fetched body streams in.
                let (body, copy) = match body {
                    Some(ObjBody::Blocks(b)) => (ObjBody::Live(Arc::new(Body::new(Some(b.body_len())))), Some(b)),
                    Some(b) => (b, None),
                    None => return Err((Error::new(Side::Internal, "the stale object's body cannot be read back for the 304"), false)),
                };
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
                        match esi_page(sh, f, url, k, pieces) {
                            Ok(stored) => inline = crate::gzip::code::join(&stored),
                            Err(e) => return Err((e, false)),
                        }
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

/// The filters a fetched body goes through (gzip, Brotli, ESI, as
/// [`crate::gzip::fetch::plan`] and Varnish's esi filters choose them),
/// with the header changes they make, and what the object will be.
fn filters(sh: &Shared, beresp: &mut Beresp, expected: Option<u64>) -> (Plan, Option<Coder>, Option<Box<Coding>>) {
    let params = sh.params();
    let esi = beresp.do_esi && expected != Some(0) && beresp.status != 206;
    // An ESI page is kept gzip when it came gzip (and do_gunzip is
    // not set) or do_gzip asks for it, as Varnish's esi_gzip.
    let (is_gzip, is_plain) = crate::gzip::fetch::body_coding(&beresp.headers);
    let gz_esi = esi && params.http_gzip_support && ((is_gzip && !beresp.do_gunzip) || (is_plain && beresp.do_gzip));
    if esi {
        // Parsed whole and plain (gunzipped if it came gzip), then
        // compressed again segment by segment if kept gzip; no
        // Brotli copy of the markup; no streaming (as Varnish).
        (beresp.do_gunzip, beresp.do_gzip, beresp.do_brotli, beresp.do_stream) = (true, false, false, false);
    }
    let plan = crate::gzip::fetch::plan(beresp, expected != Some(0), params.http_gzip_support || esi, params.http_brotli_support);
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
    (gzip || plan.brotli || esi).then(|| Box::new(Coding { gzip, esi, ..Coding::default() }))
}

/// An ESI page whole and plain: parsed once, its instructions set; kept
/// gzip, compressed segment by segment (or whole, with no ESI in it).
/// Returns the pieces to store.
fn esi_page(sh: &Shared, f: &mut Fetch, url: &[u8], k: &Coding, plain: Vec<Bytes>) -> Result<Vec<Bytes>, Error> {
    let total: u64 = plain.iter().map(|b| b.len() as u64).sum();
    if total > crate::esi::MAX_PAGE {
        return Err(Error::new(Side::Backend, format!("ESI page larger than {} bytes", crate::esi::MAX_PAGE)));
    }
    let data = crate::esi::parse_page(
        url,
        sh.params().esi_features(),
        plain.iter().map(|b| &b[..]),
        &sh.seg,
        &mut f.log,
        LogSide::Backend,
        f.vxid,
    );
    if data.as_ref().is_some_and(|d| d.includes() > crate::esi::MAX_PAGE_INCLUDES) {
        return Err(Error::new(Side::Backend, format!("ESI page with more than {} includes", crate::esi::MAX_PAGE_INCLUDES)));
    }
    if !k.gzip {
        if let Some(d) = data {
            let _ = k.esi_data.set(Arc::new(d));
        }
        return Ok(plain);
    }
    let instrs = data.as_ref().map_or_else(|| vec![crate::esi::Instr::Verbatim(total)], |d| d.instrs.clone());
    let (body, gz) = crate::esi::gz::gzip_page(&plain, &instrs, &sh.params().coding());
    sh.seg.add(C::NGzip, 1);
    let bits = crate::gzip::bits::scan(body.iter().map(|b| &b[..])).unwrap_or_default();
    let _ = k.info.set(crate::gzip::GzipInfo { bits, plain_len: total });
    let out: u64 = body.iter().map(|b| b.len() as u64).sum();
    let rec = crate::gzip::record("G F E", total, out, bits);
    f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, rec.as_bytes());
    if data.is_some() {
        let _ = k.esi_data.set(Arc::new(gz));
    }
    Ok(body)
}

/// The log records of filters that failed: Varnish's zlib error record,
/// the FetchError, then the filter's `Gzip` record with what it got to.
fn refused(f: &mut Fetch, c: &Coder, e: &crate::gzip::code::CodeError) {
    if let Some(r) = &e.record {
        f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
    }
    f.error(&Error::new(Side::Backend, e.fetch_error.clone()));
    if let Some(r) = c.record() {
        f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
    }
}

/// The object for `beresp`, with the Vary values of the request that
/// fetched it.
fn object(bxid: u32, got: &mut Got, req: &Req) -> Object {
    let beresp = &got.beresp;
    let headers = &beresp.headers;
    let vary = headers.get("vary").map(|list| {
        let names: Vec<String> = list
            .split(|&c| c == b',')
            .map(|n| String::from_utf8_lossy(n.trim_ascii()).to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        Box::new(names.into_iter().map(|n| (n.clone(), vary_value(req.headers.iter(), &n))).collect::<Vec<_>>())
    });
    let pairs = headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(b"content-length"));
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
fn store(sh: &Shared, f: &mut Fetch, guard: BusyGuard, obj: Object, got: &Got) -> ObjRef {
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
            let marker_life = crate::cache::ttl::Life { t_origin: t, ttl, grace: 0.0, keep: 0.0 };
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
                coding: None,
            };
            sh.cache.insert_in(guard, marker, transient);
            f.log.rec(Tag::Storage, side, v, b"malloc Transient");
            sh.cache.private(obj)
        }
    }
}

/// Where a fetched body goes: the object and its body, and whether its
/// readers take it as it comes (do_stream) or wait for it whole.
struct Dest<'a> {
    body: &'a Arc<Body>,
    oc: &'a ObjRef,
    stream: bool,
}

/// Stream the body into the object as it arrives (through the gzip and
/// Brotli filters, if any), charging the cache; a body that fails, ends
/// early or is bad gzip kills the object. True if it came whole.
async fn stream_body(sh: &Shared, mut f: Fetch, resp: Response, to: Dest<'_>, mut coder: Option<Coder>, url: &[u8]) -> bool {
    let Dest { body, oc, stream } = to;
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
    let coding = oc.obj.coding();
    let br = match coding.and_then(|c| c.br.as_ref()) {
        Some(ObjBody::Live(b)) => Some(b.clone()),
        _ => None,
    };
    // A page kept gzip is gathered plain on the side, compressed at the end.
    let scratch = coding.filter(|k| k.esi && k.gzip).map(|_| Body::new(None));
    let (window, wait) = {
        let p = sh.params();
        (p.transit_buffer, p.send_timeout)
    };
    let window = (stream && !coding.is_some_and(|k| k.esi)).then_some(window);
    let store = Store {
        body: scratch.as_ref().unwrap_or(body),
        br: br.as_deref(),
        cache: &sh.cache,
        oc,
        charge: scratch.is_none(),
        window,
        esi: coding.is_some_and(|k| k.esi),
    };
    // An object that is not kept (uncacheable) is in transit from the start.
    if let (false, Some(w)) = (oc.stored(), window) {
        body.set_transit(w);
    }
    let mut sink = BodySink { store: &store, coder: coder.as_mut(), failed: None, stall: None, wait, stopped: None };
    let moved = http_body::transfer(&mut be, &mut sink, &tr, &mut Vec::new()).await;
    let mut bad = sink.failed.take();
    let stopped = sink.stopped.take();
    let whole = match moved {
        Ok(m) if !matches!(resp.framing, Framing::Length(n) if n != m.payload) => match coder.as_mut() {
            Some(c) => match store.sinks(|o| c.finish(o)) {
                Ok(()) => Some(m),
                Err(e) => {
                    bad = Some(e);
                    None
                }
            },
            None => Some(m),
        },
        _ => None,
    };
    match whole {
        Some(m) => {
            if let (Some(c), Some(k)) = (coder.as_ref(), coding) {
                if let Some(info) = c.info() {
                    let _ = k.info.set(info);
                }
            }
            if let Some(k) = coding.filter(|k| k.esi) {
                // Parsed (and compressed, kept gzip) before the body is
                // marked complete: a delivery waiting for it finds the
                // instructions there.
                let plain = scratch.as_ref().map_or_else(|| body.chunks_now(), |s| s.chunks_now());
                let stored = match esi_page(sh, &mut f, url, k, plain) {
                    Ok(stored) => stored,
                    Err(e) => {
                        if let Some(b) = &br {
                            b.fail();
                        }
                        body.fail();
                        sh.cache.kill(oc);
                        f.error(&e);
                        f.done(None, None);
                        return false;
                    }
                };
                if scratch.is_some() {
                    for piece in stored {
                        store.keep(body, piece);
                    }
                }
                // Its instructions are charged with it.
                let esi_bytes = k.esi_data.get().map_or(0, |d| d.bytes());
                sh.cache.grow(oc, esi_bytes, body.progress().len);
            }
            if let Some(b) = &br {
                b.finish();
            }
            body.finish();
            sh.cache.persist(oc);
            f.log.rec(Tag::FetchBody, LogSide::Backend, f.vxid, b"3 length stream");
            if let Some(r) = coder.as_ref().and_then(|c| c.record()) {
                f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
            }
            let reusable = !backend_close && resp.framing != Framing::Eof;
            f.done(Some(m.payload), Some((be, reusable)));
            true
        }
        None => {
            if let Some(b) = &br {
                b.fail();
            }
            body.fail();
            sh.cache.kill(oc);
            match (bad, coder.as_ref()) {
                (Some(e), Some(c)) => refused(&mut f, c, &e),
                _ => {
                    f.error(&Error::new(
                        if stopped.is_some() { Side::Client } else { Side::Backend },
                        stopped.unwrap_or("backend body ended early or failed"),
                    ));
                    if let Some(r) = coder.as_ref().and_then(|c| c.record()) {
                        f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
                    }
                }
            }
            f.done(None, None);
            false
        }
    }
}

/// A 304 refreshed a large disk object: its body is copied block by
/// block (each checked as it is read) into the new object, charged as a
/// fetched body is, then written; a block that cannot be read fails the
/// body (its readers get a cut response, never a wrong one).
async fn copy_blocks(sh: &Shared, src: Arc<dyn Blocks>, body: &Body, oc: &ObjRef) {
    for i in 0..src.count() {
        let s = src.clone();
        match tokio::task::spawn_blocking(move || s.read(i)).await {
            Ok(Some(block)) => {
                let so_far = body.progress().len + block.len() as u64;
                if !sh.cache.grow(oc, block.len() as u64 + crate::cache::object::CHUNK_OVERHEAD, so_far) {
                    body.set_transit(sh.params().transit_buffer);
                }
                body.push(block);
                // In transit: at the pace of the slowest reader.
                if !matches!(room(body, sh.params().send_timeout).await, Room::Yes) {
                    body.fail();
                    return;
                }
            }
            _ => {
                body.fail();
                sh.cache.kill(oc);
                return;
            }
        }
    }
    body.finish();
    sh.cache.persist(oc);
}

/// Wait (at most `wait`) until a body in transit may take more.
async fn room(body: &Body, wait: std::time::Duration) -> Room {
    let r = std::future::poll_fn(|cx| match body.room(cx.waker()) {
        Room::Wait => Poll::Pending,
        r => Poll::Ready(r),
    });
    tokio::time::timeout(wait, r).await.unwrap_or(Room::Abandoned)
}

/// Where a streaming body's pieces are kept (and its Brotli copy's),
/// charged to the cache as they come.
struct Store<'a> {
    body: &'a Body,
    br: Option<&'a Body>,
    cache: &'a Cache,
    oc: &'a ObjRef,
    /// Pieces kept in `body` are charged to storage (not those of a page
    /// gathered plain before it is compressed).
    charge: bool,
    /// An ESI page (gathered whole, up to esi::MAX_PAGE).
    esi: bool,
    /// transit_buffer, for a body that turns out not to be kept (None
    /// when its readers wait for it whole: do_stream off, an ESI page).
    window: Option<u64>,
}

impl Store<'_> {
    fn keep(&self, to: &Body, b: Bytes) {
        if self.charge || !std::ptr::eq(to, self.body) {
            let so_far = to.progress().len + b.len() as u64;
            if !self.cache.grow(self.oc, b.len() as u64 + crate::cache::object::CHUNK_OVERHEAD, so_far) {
                // Not kept (uncacheable, or too large for its store):
                // what its readers have been sent goes.
                if let Some(w) = self.window {
                    self.body.set_transit(w);
                }
            }
        }
        to.push(b);
    }

    /// Run `f` with this store as a coder's two outputs.
    fn sinks<R>(&self, f: impl FnOnce(&mut Sinks<'_>) -> R) -> R {
        let mut body = |b| self.keep(self.body, b);
        let mut br = |b| {
            if let Some(to) = self.br {
                self.keep(to, b)
            }
        };
        f(&mut Sinks { body: &mut body, br: &mut br })
    }
}

/// How often a fetch held by a body in transit looks whether its client
/// is still there.
const TRANSIT_TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// Storage for a body as it streams in, through the filters if any.
struct BodySink<'a> {
    store: &'a Store<'a>,
    coder: Option<&'a mut Coder>,
    /// Why the filters refused the body.
    failed: Option<crate::gzip::code::CodeError>,
    /// A body in transit whose readers are behind: how long the fetch
    /// waits for them (send_timeout, from when it started waiting).
    stall: Option<(Instant, Pin<Box<tokio::time::Sleep>>)>,
    wait: std::time::Duration,
    /// Why the fetch stopped for its readers (all gone, or too slow).
    stopped: Option<&'static str>,
}

impl AsyncWrite for BodySink<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let store = this.store;
        // A body in transit goes at the pace of its slowest reader.
        match store.body.room(cx.waker()) {
            Room::Yes => this.stall = None,
            Room::Wait => {
                // Looked at every half second: the request it was for
                // may have let go of an object nobody else can read.
                loop {
                    let (since, stall) = this.stall.get_or_insert_with(|| (Instant::now(), Box::pin(tokio::time::sleep(TRANSIT_TICK))));
                    if std::future::Future::poll(stall.as_mut(), cx).is_pending() {
                        return Poll::Pending;
                    }
                    if !store.oc.stored() && store.oc.refs() == 1 {
                        this.stopped = Some("the client of the body in transit left");
                        return Poll::Ready(Err(std::io::Error::other("transit abandoned")));
                    }
                    if since.elapsed() >= this.wait {
                        this.stopped = Some("no client took the body in transit within send_timeout");
                        return Poll::Ready(Err(std::io::Error::other("transit stalled")));
                    }
                    stall.as_mut().reset(tokio::time::Instant::now() + TRANSIT_TICK);
                }
            }
            Room::Abandoned => {
                this.stopped = Some("every client of the body in transit left");
                return Poll::Ready(Err(std::io::Error::other("transit abandoned")));
            }
        }
        // An ESI page is gathered whole to be parsed: up to a bound.
        if store.esi && store.body.progress().len > crate::esi::MAX_PAGE {
            this.stopped = Some("ESI page larger than 16 MiB");
            return Poll::Ready(Err(std::io::Error::other("ESI page too large")));
        }
        match this.coder.as_deref_mut() {
            None => store.keep(store.body, Bytes::copy_from_slice(buf)),
            Some(c) => {
                let r = store.sinks(|o| c.feed(Bytes::copy_from_slice(buf), o));
                if let Err(e) = r {
                    this.failed = Some(e);
                    return Poll::Ready(Err(std::io::Error::other("bad gzip from the backend")));
                }
            }
        }
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
