//! Pass: vcl_pass, then a fetch for this request alone — the request body
//! streamed to the backend, the response streamed to the client, nothing
//! stored.

use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use tokio::io::AsyncWriteExt;

use crate::error::{Error, Side};
use crate::fetch::steps::{self, BeTxn, Fetched};
use crate::fetch::txn::{Fetch, Response};
use crate::http1::body::{self, Transfer};
use crate::http1::head::Framing;
use crate::req::reason::{close_reason, Reason};
use crate::req::recv::bad_body;
use crate::req::state::{divert, Framed, Request, RespHead, Step, With};
use crate::req::transport::{CachedBody, Transport};
use crate::vcl::model::{Action, Bereq, Beresp, Headers, ObjView, Resp, Sub};

/// Request body bytes read before a pass takes a backend connection.
const PREFILL: usize = 64 * 1024;

/// A body this small that arrived with the response head goes out in the
/// same write.
const INLINE: u64 = 64 * 1024;

/// vcl_pass.
pub fn vcl_pass<T: Transport>(r: &mut Request<'_, T>) -> Step {
    match r.call(Sub::Pass, With::default()) {
        Action::Fetch => Step::PassFetch,
        other => divert(other),
    }
}

/// The fetch for a pass, and its delivery.
pub async fn fetch<T: Transport>(r: &mut Request<'_, T>) -> Step {
    let sh = r.sh.clone();
    // A body that is still on its way is waited for here, before a backend
    // connection is taken for it.
    if !r.send_continue().await {
        return Step::Done(Some(crate::req::reason::Reason::TxError));
    }
    let timeout_idle = sh.params().timeout_idle;
    if let Err(e) = r.conn.prefill(r.framing, PREFILL, timeout_idle).await {
        return match e.io.is_some() {
            true => body_stopped(r, &e),
            false => bad_body(r, &e).await,
        };
    }
    sh.seg.add(C::SPass, 1);
    let bxid = sh.next_vxid();
    r.log.recf(Tag::Link, LogSide::Client, r.rxid, format_args!("bereq {bxid} pass"));
    let mut fetch = Fetch::new(&sh, bxid, r.rxid, "pass");
    fetch.interim = r.interim_channel();
    let mut bereq = Bereq::from_req(&r.req, bxid);
    bereq.uncacheable = true;
    let framing = r.framing;
    let addrs = r.sess.ends.clone();
    let mut fetched = match r.cached_body.clone() {
        // A body std.cache_req_body() read: sent from memory, retries allowed.
        Some(b) => {
            let mut body = CachedBody(b);
            fetch.replayable = true;
            let mut t = BeTxn::new(&sh, &*r.active.policy, &mut fetch, &mut bereq, addrs);
            t.framing = Framing::Length(body.0.len() as u64);
            (t.client, t.kept) = (Some(&mut body), r.req.cache_body.is_some());
            steps::run(&mut t).await
        }
        None => {
            let mut t = BeTxn::new(&sh, &*r.active.policy, &mut fetch, &mut bereq, addrs);
            (t.client, t.framing) = (Some(&mut *r.conn), framing);
            steps::run(&mut t).await
        }
    };
    if framing != Framing::None && (fetch.req_body_rx > 0 || fetch.body_tx > 0) {
        r.body_rx += fetch.req_body_rx;
        r.framing = Framing::None;
        r.body_consumed = true;
    }
    // A body read whole before delivery (beresp.do_esi: the page parsed
    // and delivered from a private object like any ESI page; do_stream =
    // false: delivered with its length) that fails goes through
    // vcl_backend_error, which may retry, as Varnish.
    let fetched = loop {
        fetched = match fetched {
            Fetched::Resp { mut resp, beresp, life, action } if (beresp.do_esi && !beresp.partial()) || !beresp.do_stream => {
                let esi = beresp.do_esi && !beresp.partial();
                let cap = if esi { crate::esi::MAX_PAGE as usize } else { usize::MAX };
                match resp.read_whole(fetch.timeout(2), cap).await {
                    Ok(()) if esi => return esi_page(r, fetch, resp, beresp, life),
                    Ok(()) => break Fetched::Resp { resp, beresp, life, action },
                    Err(e) => {
                        fetch.error(&e);
                        drop(resp);
                        match again_after_error(r, &mut fetch, &mut bereq).await {
                            Some(f) => f,
                            None => return Step::Synth { status: 503, reason: "Backend fetch failed".into() },
                        }
                    }
                }
            }
            other => break other,
        };
    };
    match fetched {
        Fetched::Resp { resp, beresp, life, .. } => invalidate_and_deliver(r, fetch, resp, beresp, life.t_origin).await,
        Fetched::Synthetic { beresp, body, .. } => {
            fetch.done(Some(body.len() as u64), None);
            r.stamp("Fetch");
            let resp = Resp { status: beresp.status, reason: beresp.reason, headers: beresp.headers, ..Resp::default() };
            Step::DeliverSynthetic { resp, body }
        }
        // As Varnish's failed fetch: vcl_synth's 503 with its own reason.
        Fetched::Abandoned(e) => {
            fetch.note(&e);
            fetch.done(None, None);
            Step::Synth { status: 503, reason: "Service Unavailable".into() }
        }
        // The client's body stopped coming; a malformed one is a 400.
        Fetched::Client(e) if e.io.is_some() => {
            fetch.error(&e);
            fetch.done(None, None);
            body_stopped(r, &e)
        }
        Fetched::Client(e) => {
            fetch.error(&e);
            fetch.done(None, None);
            bad_body(r, &e).await
        }
    }
}

/// RFC mode's invalidation after an unsafe method (req/rfc.rs), the
/// backend's interim responses forwarded, then the delivery.
async fn invalidate_and_deliver<T: Transport>(r: &mut Request<'_, T>, fetch: Fetch, resp: Response, beresp: Beresp, t_origin: f64) -> Step {
    crate::req::rfc::after_response(r, beresp.status, &beresp.headers);
    if !r.forward_interim().await {
        return Step::Done(Some(Reason::TxError));
    }
    deliver(r, fetch, resp, beresp, t_origin).await
}

/// The backend steps from vcl_backend_error after a body that failed
/// before delivery; None when the request's body cannot be sent again
/// (it was streamed from the client, not kept).
async fn again_after_error<T: Transport>(r: &mut Request<'_, T>, fetch: &mut Fetch, bereq: &mut Bereq) -> Option<Fetched> {
    let (sh, addrs) = (r.sh.clone(), r.sess.ends.clone());
    match r.cached_body.clone() {
        Some(b) => {
            let mut body = CachedBody(b);
            let mut t = BeTxn::new(&sh, &*r.active.policy, fetch, bereq, addrs);
            (t.framing, t.client, t.kept) = (Framing::Length(body.0.len() as u64), Some(&mut body), r.req.cache_body.is_some());
            Some(steps::run_after_body_error(&mut t).await)
        }
        None if r.body_consumed => None,
        None => Some(steps::run_after_body_error(&mut BeTxn::<CachedBody>::new(&sh, &*r.active.policy, fetch, bereq, addrs)).await),
    }
}

/// The gzip filters a pass goes through, as a cache fetch does (no
/// Brotli copy: nothing is kept), with their header changes, and whether
/// the client gets it gunzipped (its ETag weakened, as Varnish does).
fn pass_coding<T: Transport>(
    r: &Request<'_, T>,
    beresp: &mut Beresp,
    framing: Framing,
) -> (crate::gzip::fetch::Plan, bool, crate::gzip::code::Settings) {
    let (gz, coding) = (r.p.http_gzip_support, r.p.coding());
    let has_body = !matches!(framing, Framing::None | Framing::Length(0));
    let filters = crate::gzip::fetch::plan(beresp, has_body, gz, false);
    let gunzip_out = gz && filters.gzipped() && !crate::gzip::can_gzip(&r.req.headers);
    if gunzip_out {
        crate::gzip::weaken_etag(&mut beresp.headers);
    }
    (filters, gunzip_out, coding)
}

/// The body through the gzip filters (framed by them, chunked if the
/// transfer asked for it), with their log records and counters: the
/// fetch's `Gzip` record (and FetchError if the body is bad gzip), the
/// client's `U D -` record. The counts are what reached the client.
async fn coded_transfer<T: Transport>(
    r: &mut Request<'_, T>,
    fetch: &mut Fetch,
    be: &mut crate::backend::pool::BeConn,
    mut t: Transfer,
    filters: crate::gzip::fetch::Plan,
    gunzip_out: bool,
    coding: crate::gzip::code::Settings,
) -> Result<body::Moved, Error> {
    let sh = r.sh.clone();
    let coder = filters.any().then(|| crate::gzip::fetch::Coder::new(filters, &coding, &|c| sh.seg.add(c, 1)));
    let gunzip = gunzip_out.then(|| {
        sh.seg.add(C::NGunzip, 1);
        crate::gzip::code::Zstream::new(crate::gzip::code::Dir::Gunzip, &coding)
    });
    let chunked = std::mem::replace(&mut t.chunk_out, false);
    let (rxid, mut scratch) = (r.rxid, std::mem::take(&mut r.sess.scratch));
    let mut w = crate::gzip::stream::Coded::new(r.conn.out(), coder, gunzip, chunked);
    let moved = match body::transfer(be, &mut w, &t, &mut scratch).await {
        Ok(m) => w.finish().await.map(|()| m).map_err(|_| Error::new(Side::Client, "client write failed")),
        Err(e) => Err(e),
    };
    let tx = w.tx;
    if let Some(c) = w.coder() {
        if let Some(e) = &w.failed {
            if let Some(rec) = &e.record {
                fetch.log.rec(Tag::Gzip, LogSide::Backend, fetch.vxid, rec.as_bytes());
            }
            fetch.error(&Error::new(Side::Backend, e.fetch_error.clone()));
        }
        if let Some(rec) = c.record() {
            fetch.log.rec(Tag::Gzip, LogSide::Backend, fetch.vxid, rec.as_bytes());
        }
    }
    let gunzip_record = w.gunzip.as_ref().map(|z| crate::gzip::record("U D -", z.total_in(), z.total_out(), Default::default()));
    let failed = w.failed.is_some();
    drop(w);
    r.sess.scratch = scratch;
    if let Some(rec) = gunzip_record {
        r.log.rec(Tag::Gzip, LogSide::Client, rxid, rec.as_bytes());
    }
    match moved {
        // Bad gzip from the backend: its side, already logged.
        Err(_) if failed => Err(Error::new(Side::Internal, "bad gzip from the backend")),
        Err(e) => Err(e),
        Ok(mut m) => {
            m.tx = tx;
            Ok(m)
        }
    }
}

/// A pass's ESI page, read whole: gunzipped if it came gzip, parsed on
/// the backend side, kept gzip (segment by segment) when it came gzip or
/// do_gzip asks, as a cached page is (Varnish's esi_gzip), as a private
/// object (never in the cache) and delivered as one.
fn esi_page<T: Transport>(
    r: &mut Request<'_, T>,
    mut fetch: Fetch,
    mut resp: Response,
    mut beresp: Beresp,
    life: crate::cache::ttl::Lifetime,
) -> Step {
    use crate::cache::{body::ObjBody, Kind, ObjHeaders, Object};
    let n = match resp.framing {
        Framing::Length(n) => n as usize,
        _ => 0,
    };
    let raw = resp.conn.buf.split_to(n.min(resp.conn.buf.len())).freeze();
    let (bxid, rx) = (fetch.vxid, raw.len() as u64);
    let reusable = !resp.spent && resp.head.minor > 0 && !resp.head.has_token("connection", "close");
    let (gzip, plain) = crate::gzip::fetch::body_coding(&beresp.headers);
    let support = r.p.http_gzip_support;
    let gz_esi = (gzip && !(beresp.do_gunzip && support)) || (plain && beresp.do_gzip && support);
    let plain = if gzip {
        let mut out = Vec::new();
        let mut z = crate::gzip::code::Zstream::new(crate::gzip::code::Dir::Gunzip, &r.p.coding());
        r.sh.seg.add(C::NGunzip, 1);
        if z.feed(&raw, true, &mut |b| out.push(b)).is_err() {
            fetch.error(&Error::new(Side::Backend, "Invalid gzip data"));
            fetch.done(Some(rx), None);
            return Step::Synth { status: 503, reason: "Backend fetch failed".into() };
        }
        beresp.headers.unset("content-encoding");
        crate::gzip::code::join(&out)
    } else {
        raw
    };
    let coding = crate::gzip::Coding { esi: true, gzip: gz_esi, chgce: gz_esi, ..Default::default() };
    let body = match crate::fetch::esi_page(&r.sh, &mut fetch, &r.req.url, &coding, vec![plain]) {
        Ok(pieces) => crate::gzip::code::join(&pieces),
        Err(e) => {
            fetch.error(&e);
            fetch.done(Some(rx), None);
            return Step::Synth { status: 503, reason: "Backend fetch failed".into() };
        }
    };
    fetch.done(Some(rx), Some((resp.conn, reusable)));
    if gzip || gz_esi {
        crate::gzip::weaken_etag(&mut beresp.headers);
    }
    if gz_esi {
        beresp.headers.set("Content-Encoding", bytes::Bytes::from_static(b"gzip"));
        crate::gzip::vary_ae(&mut beresp.headers);
    }
    let pairs = beresp.headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(b"content-length") && !crate::fetch::steps::not_passed(n));
    let obj = Object {
        vxid: bxid,
        status: beresp.status,
        headers: ObjHeaders::from_pairs(&beresp.reason, pairs),
        body: ObjBody::Whole(body),
        life: life.life(),
        kind: Kind::Normal,
        vary: None,
        coding: Some(Box::new(coding)),
    };
    r.stamp("Fetch");
    Step::Deliver { oc: r.sh.cache.private(obj), hit: false, pass: true }
}

/// vcl_deliver on the backend's response, then its body streamed through.
/// Every exit ends the backend transaction (`fetch` is dropped, or done
/// with what was delivered).
async fn deliver<T: Transport>(r: &mut Request<'_, T>, mut fetch: Fetch, resp: Response, mut beresp: Beresp, t_origin: f64) -> Step {
    let mut keep = r.keep && r.framing == Framing::None;
    r.stamp("Fetch");
    let backend_close = crate::http1::head::backend_closes(&resp.head);
    let (filters, gunzip_out, coding) = pass_coding(r, &mut beresp, resp.framing);
    let coded = filters.any() || gunzip_out;
    let reframed = filters.changes_length() || gunzip_out;
    let streamed = reframed || matches!(resp.framing, Framing::Chunked | Framing::Eof);
    // An include's body goes into its page as it is.
    let chunk_out = streamed && r.req.minor >= 1 && r.req.esi_level == 0;
    // An HTTP/1.0 client's body ends at the close.
    keep &= !streamed || chunk_out;
    let view = r.active.policy.defines(Sub::Deliver).then(|| private_view(&beresp));
    let mut out = pass_resp(r, beresp, fetch.vxid, t_origin);
    let action = r.call(Sub::Deliver, With { resp: Some(&mut out), obj: view.as_ref(), ..With::default() });
    if action != Action::Deliver {
        end_unread(fetch, resp);
        return divert(action);
    }
    after_deliver(&mut out.headers, gunzip_out, resp.framing);
    // The client's copy is current (If-None-Match, If-Modified-Since on
    // the response as vcl_deliver left it): 304, and the backend's body
    // is not read, as Varnish does on a pass. A 1xx, 204 or 304 (the
    // backend's, or one VCL set) goes out without body or length as well.
    let current = r.req.esi_level == 0 && crate::req::deliver::not_modified(&r.req, &out, false);
    if current || crate::http1::head::bodyless(out.status) {
        if current {
            (out.status, out.reason) = (304, bytes::Bytes::from_static(b"Not Modified"));
        }
        let keep = r.keep && r.framing == Framing::None;
        return no_body(r, fetch, resp, &mut out, keep).await;
    }
    let span = if coded { None } else { span(r, &mut out, resp.framing) };
    let mut wire = std::mem::take(&mut r.sess.wire);
    let framing = match (span, resp.framing) {
        (Some((a, b)), _) => Some(Framed::length(b - a + 1)),
        _ if reframed && chunk_out => Some(Framed::Chunked),
        (_, Framing::Length(n)) if !reframed => Some(Framed::length(n)),
        (_, Framing::Chunked | Framing::Eof) if chunk_out => Some(Framed::Chunked),
        _ => None,
    };
    let head = RespHead { status: out.status, reason: &out.reason, headers: &out.headers, framing, keep };
    r.write_head(&mut wire, &head);
    r.stamp("Process");
    let hdr_tx = wire.len() as u64;
    let mut be = resp.conn;
    let inline = match resp.framing {
        Framing::Length(n) if !coded && span.is_none() && n <= INLINE && be.buf.len() as u64 >= n => n,
        _ => 0,
    };
    wire.extend_from_slice(&be.buf.split_to(inline as usize));
    r.arm_send();
    let head_sent = r.conn.out().write_all(&wire).await;
    r.sess.wire = wire;
    if head_sent.is_err() {
        return head_not_sent(r, fetch);
    }
    let t = Transfer {
        framing: if inline > 0 { Framing::Length(0) } else { resp.framing },
        chunk_out,
        src_side: Side::Backend,
        dst_side: Side::Client,
        read_timeout: fetch.timeout(2),
        pace: None,
    };
    let moved = if coded {
        coded_transfer(r, &mut fetch, &mut be, t, filters, gunzip_out, coding).await
    } else if let Some((a, b)) = span {
        let mut window = body::Window { inner: r.conn.out(), skip: a, take: b - a + 1 };
        body::transfer(&mut be, &mut window, &t, &mut r.sess.scratch).await.map(|mut m| {
            m.tx = b - a + 1;
            m
        })
    } else {
        body::transfer(&mut be, r.conn.out(), &t, &mut r.sess.scratch).await.map(|mut m| {
            m.rx += inline;
            m.tx += inline;
            m.payload += inline;
            m
        })
    };
    match moved {
        Ok(m) => {
            let reusable = !backend_close && !resp.spent && resp.framing != Framing::Eof;
            fetch.done(Some(m.payload), Some((be, reusable)));
            r.end((hdr_tx, m.tx));
            Step::Done(close_reason(keep, &r.req))
        }
        Err(e) => {
            // Never end a body cleanly that did not arrive whole: close.
            if e.side == Side::Backend {
                fetch.error(&e);
            }
            drop(fetch);
            r.end((hdr_tx, 0));
            Step::Done(Some(if e.side == Side::Backend { Reason::RespClose } else { Reason::TxError }))
        }
    }
}

/// The pass's response as vcl_deliver gets it: the backend's headers but
/// Age and X-Varnish, then Varnish's own (see [`Request::resp_setup`]).
fn pass_resp<T: Transport>(r: &Request<'_, T>, beresp: Beresp, fetch_vxid: u32, t_origin: f64) -> Resp {
    let (status, reason, headers, do_esi) = (beresp.status, beresp.reason, beresp.headers, !r.req.disable_esi);
    let mut out = Resp { status, reason, headers, is_streaming: true, do_esi, ..Resp::default() };
    out.headers.0.retain(|(n, _)| !n.eq_ignore_ascii_case(b"x-varnish") && !crate::fetch::steps::not_passed(n));
    // A pass vcl_hit chose shows its fetch's vxid, as Varnish does.
    r.resp_setup(&mut out.headers, r.hit_pass.then_some(fetch_vxid), t_origin, false);
    out
}

/// The client went before the response head was out: the fetch ends
/// with the error, the request with nothing sent.
fn head_not_sent<T: Transport>(r: &mut Request<'_, T>, mut fetch: Fetch) -> Step {
    fetch.error(&Error::new(Side::Client, "client closed before the response head was sent"));
    drop(fetch);
    r.end((0, 0));
    Step::Done(Some(Reason::TxError))
}

/// A Range on a 200 of known length (the backend sent it whole): the
/// bytes to send, the response made a 206, as Varnish's range filter cuts
/// any delivery. None: the whole body (no range, or one not satisfiable,
/// which goes out whole).
fn span<T: Transport>(r: &Request<'_, T>, out: &mut Resp, framing: Framing) -> Option<(u64, u64)> {
    use crate::req::deliver::{if_range_ok, parse_range, RangeReq};
    let Framing::Length(n) = framing else { return None };
    let v = r.req.headers.get("range").filter(|_| out.status == 200 && r.req.esi_level == 0 && r.p.http_range_support)?;
    if !if_range_ok(&r.req, out) {
        return None;
    }
    let range = parse_range(v, n);
    let RangeReq::Part(a, b) = range else { return None };
    let (status, reason, content_range) = range.answer(Some(n))?;
    (out.status, out.reason) = (status, bytes::Bytes::from_static(reason));
    if let Some(v) = content_range {
        out.headers.set("Content-Range", v);
    }
    Some((a, b))
}

/// What goes after vcl_deliver: the gunzip filter takes Content-Encoding
/// away; the length that goes out is the body's, but an answer to HEAD
/// keeps the backend's (Varnish leaves it alone).
fn after_deliver(h: &mut Headers, gunzip_out: bool, framing: Framing) {
    if gunzip_out {
        h.unset("content-encoding");
    }
    if framing != Framing::None {
        h.unset("content-length");
    }
}

/// The pass's private object, as vcl_deliver sees it (never hit): its
/// ttl, grace and keep are what vcl_backend_response left on beresp, as
/// in Varnish (a pass starts with none).
fn private_view(beresp: &Beresp) -> ObjView {
    ObjView {
        status: beresp.status,
        reason: beresp.reason.clone(),
        headers: Headers::default(),
        ttl: beresp.ttl,
        grace: beresp.grace,
        keep: beresp.keep,
        age: 0.0,
        hits: 0,
        uncacheable: true,
        stv: None,
        can_esi: beresp.do_esi,
        gzip: false,
    }
}

/// The fetch ends with its body unread: a backend response without a
/// body keeps its connection (a restart from vcl_deliver sends its
/// request on it, as Varnish); dropping the fetch closes one whose body
/// was not read.
fn end_unread(fetch: Fetch, resp: Response) {
    match resp.framing {
        Framing::None | Framing::Length(0) => {
            let reusable = !crate::http1::head::backend_closes(&resp.head);
            fetch.done(Some(0), Some((resp.conn, reusable)));
        }
        _ => drop(fetch),
    }
}

/// A pass answered without a body: a 304 (the client already has it), a
/// 1xx or 204; no length, the backend's body left unread.
async fn no_body<T: Transport>(r: &mut Request<'_, T>, fetch: Fetch, resp: Response, out: &mut Resp, keep: bool) -> Step {
    out.headers.unset("content-length");
    end_unread(fetch, resp);
    let mut wire = std::mem::take(&mut r.sess.wire);
    let head = RespHead { status: out.status, reason: &out.reason, headers: &out.headers, framing: None, keep };
    r.write_head(&mut wire, &head);
    r.stamp("Process");
    let hdr_tx = wire.len() as u64;
    r.arm_send();
    let sent = r.conn.out().write_all(&wire).await;
    r.sess.wire = wire;
    r.end((hdr_tx, 0));
    match sent {
        Ok(()) => Step::Done(close_reason(keep, &r.req)),
        Err(_) => Step::Done(Some(Reason::TxError)),
    }
}

/// The client's body stopped coming (a timeout, a close) before the pass
/// could send it: the fetch failed, answered 503 on a connection that then
/// closes, as Varnish does.
fn body_stopped<T: Transport>(r: &mut Request<'_, T>, e: &Error) -> Step {
    r.log.recf(Tag::Error, LogSide::Client, r.rxid, format_args!("request body: {e}"));
    r.keep = false;
    r.body_consumed = true;
    r.body_failed = true;
    Step::Synth { status: 503, reason: "Backend fetch failed".into() }
}
