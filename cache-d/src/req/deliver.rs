//! Delivering a cached object (vcl_deliver): Age and X-Varnish, client
//! conditionals (304), byte ranges (206/416), HEAD, and streaming the body
//! while it may still be arriving from the backend.

use std::io::Write as _;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::cache::body::{Done, ObjBody};
use crate::cache::object::Meta;
use crate::cache::ObjRef;
use crate::esi::EsiData;
use crate::gzip::code::{Dir, Zstream};
use crate::http1::head::Framing;
use crate::req::gather::{Gather, MAX_COPIED, MAX_IOV};
use crate::req::page::{send_esi, send_spliced};
use crate::req::reason::{close_reason, Reason};
use crate::req::state::{divert, obj_view, Framed, Request, RespHead, Step, With};
use crate::req::transport::Transport;
use crate::util::now;
use crate::vcl::model::{Action, Headers, ObjView, Req, Resp, Sub};
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};

/// A parsed `Range` request against a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeReq {
    /// Serve the whole body (no Range, or one we do not honour).
    Whole,
    /// Serve bytes `first..=last`.
    Part(u64, u64),
    Unsatisfiable,
}

impl RangeReq {
    /// The status, reason and Content-Range of an answer to it, for a body
    /// of `len` bytes (no Content-Range on a 416 when that is not known
    /// yet); None to serve the whole body.
    pub fn answer(&self, len: Option<u64>) -> Option<(u16, &'static [u8], Option<Bytes>)> {
        let total = len.unwrap_or(0);
        match self {
            RangeReq::Part(a, b) => Some((206, b"Partial Content", Some(Bytes::from(format!("bytes {a}-{b}/{total}"))))),
            RangeReq::Unsatisfiable => Some((416, b"Range Not Satisfiable", len.map(|n| Bytes::from(format!("bytes */{n}"))))),
            RangeReq::Whole => None,
        }
    }
}

/// A Range header's `bytes=LOW-HIGH` as Varnish 7.1 reads it
/// (http_GetRange): None when it is not one it accepts (no `=`, another
/// unit, several ranges, a blank before a number, high below low,
/// anything after), which is answered 416.
fn range_bounds(v: &[u8]) -> Option<(Option<u64>, Option<u64>)> {
    let v = v.trim_ascii_start();
    let eq = v.iter().position(|&c| c == b'=')?;
    if !v[..eq].eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let num = |s: &mut &[u8]| -> Option<Option<u64>> {
        let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return Some(None);
        }
        let x = std::str::from_utf8(&s[..n]).ok()?.parse::<u64>().ok().filter(|x| *x <= i64::MAX as u64)?;
        *s = &s[n..];
        Some(Some(x))
    };
    let mut rest = &v[eq + 1..];
    let lo = num(&mut rest)?;
    rest = rest.strip_prefix(b"-")?;
    let hi = num(&mut rest)?;
    match (lo, hi) {
        (None, None) | (None, Some(0)) => return None,
        (Some(l), Some(h)) if h < l => return None,
        _ => {}
    }
    rest.trim_ascii().is_empty().then_some((lo, hi))
}

/// The part of a body of `len` bytes a Range header asks for, as Varnish
/// 7.1 serves it (vrg_dorange): a suffix counts from the end, a high
/// beyond the end is cut to it, a low at or beyond the end (or a header
/// it does not accept) is 416.
pub fn parse_range(v: &[u8], len: u64) -> RangeReq {
    let Some((lo, hi)) = range_bounds(v) else { return RangeReq::Unsatisfiable };
    let (low, high) = match (lo, hi) {
        (None, Some(h)) => (len.saturating_sub(h), len.wrapping_sub(1)),
        (Some(l), Some(h)) if h < len => (l, h),
        (Some(l), _) => (l, len.wrapping_sub(1)),
        (None, None) => return RangeReq::Unsatisfiable,
    };
    if low >= len {
        return RangeReq::Unsatisfiable;
    }
    RangeReq::Part(low, high)
}

/// A range of a body whose length is not known yet: a header Varnish does
/// not accept is 416; any other is served whole.
fn range_unknown_len(v: &[u8]) -> RangeReq {
    match range_bounds(v) {
        None => RangeReq::Unsatisfiable,
        Some(_) => RangeReq::Whole,
    }
}

fn strip_weak(t: &[u8]) -> &[u8] {
    let t = t.trim_ascii();
    t.strip_prefix(b"W/").unwrap_or(t)
}

/// A header's HTTP date, read as Varnish reads dates.
fn http_date(v: &[u8]) -> Option<f64> {
    std::str::from_utf8(v).ok().and_then(common::httpdate::parse_strict)
}

/// Does the client's cached copy match (If-None-Match, else
/// If-Modified-Since), judged on the response vcl_deliver leaves, as
/// Varnish judges it? Only for 200 responses to GET and HEAD. With a
/// Range, If-None-Match compares strongly (a weak ETag never matches), so
/// the range is served instead. `stored_date`: RFC mode, for a stored
/// response: without Last-Modified, If-Modified-Since compares with its
/// Date (RFC 9111 §4.3.2), where Varnish answers the whole response.
pub fn not_modified(req: &Req, resp: &Resp, stored_date: bool) -> bool {
    if resp.status != 200 || !(&req.method[..] == b"GET" || &req.method[..] == b"HEAD") {
        return false;
    }
    if let Some(inm) = req.headers.get("if-none-match") {
        let Some(etag) = resp.headers.get("etag") else { return false };
        let strong = req.headers.has("range");
        let weak_tag = |t: &[u8]| t.trim_ascii().starts_with(b"W/");
        return inm
            .split(|&c| c == b',')
            .any(|t| t.trim_ascii() == b"*" || (strip_weak(t) == strip_weak(etag) && !(strong && (weak_tag(t) || weak_tag(etag)))));
    }
    if let Some(ims) = req.headers.get("if-modified-since") {
        let Some(ims) = http_date(ims).filter(|ims| *ims <= now()) else { return false };
        let lm = resp.headers.get("last-modified").or_else(|| resp.headers.get("date").filter(|_| stored_date));
        return lm.and_then(|v| http_date(v)).is_some_and(|lm| lm <= ims);
    }
    false
}

/// Does If-Range allow the range (RFC 9110 §13.1.5, strong validation, as
/// Varnish checks it)? No If-Range: yes. An ETag: the same strong ETag.
/// A date: exactly the Last-Modified, which is at least a second older
/// than Date.
pub(crate) fn if_range_ok(req: &Req, resp: &Resp) -> bool {
    let Some(ir) = req.headers.get("if-range") else { return true };
    let ir = ir.trim_ascii();
    if ir.starts_with(b"W/") {
        return false;
    }
    if ir.starts_with(b"\"") {
        return resp.headers.get("etag").is_some_and(|e| !e.starts_with(b"W/") && e.trim_ascii() == ir);
    }
    let (Some(ir), Some(lm)) = (http_date(ir), resp.headers.get("last-modified").and_then(|v| http_date(v))) else { return false };
    let strong = resp.headers.get("date").and_then(|v| http_date(v)).is_none_or(|d| lm <= d - 1.0);
    strong && lm == ir
}

/// What goes out for a delivery, once vcl_deliver and the client's
/// conditionals and range have had their say.
struct Plan<'o> {
    status: u16,
    reason: &'o [u8],
    headers: Headers,
    framing: Option<Framed>,
    /// Bytes `first..=last` of the body only.
    span: Option<(u64, u64)>,
    send_body: bool,
    chunked: bool,
    keep: bool,
}

/// Which form of the object a client gets.
enum Rep<'o> {
    /// The body as stored.
    Stored,
    /// A gzip body gunzipped on the way out, for a client that cannot
    /// take gzip (Varnish's gunzip VDP).
    Gunzip,
    /// The Brotli copy, for a client that sent `br`.
    Brotli(&'o ObjBody),
}

impl Rep<'_> {
    /// What vcl_deliver sees: a weak ETag for a changed encoding (Varnish's
    /// Resp_Setup_Deliver); the Brotli copy's Content-Encoding.
    fn mark(&self, h: &mut Headers) {
        match self {
            Rep::Stored => {}
            Rep::Gunzip => crate::gzip::weaken_etag(h),
            Rep::Brotli(_) => {
                crate::gzip::weaken_etag(h);
                h.set("Content-Encoding", Bytes::from_static(b"br"));
            }
        }
    }
}

/// Choose the form for this request (gzip support and Brotli on or off).
fn rep<'o>(obj: &'o Meta, req: &Req, gzip: bool, brotli: bool) -> Rep<'o> {
    let Some(c) = obj.coding() else { return Rep::Stored };
    match &c.br {
        Some(br) if brotli && crate::gzip::can_brotli(&req.headers) && br.progress().done != Done::Failed => Rep::Brotli(br),
        _ if gzip && c.gzip && !crate::gzip::can_gzip(&req.headers) => Rep::Gunzip,
        _ => Rep::Stored,
    }
}

/// The head and body to deliver: the body its lookup held, or for a disk
/// object no lookup held (a waiter's, a stale one delivered after all)
/// its body held now, never one that reads as failed because its memory
/// copy went. None when a disk object cannot be read back.
async fn parts<T: Transport>(r: &mut Request<'_, T>, oc: &ObjRef) -> Option<(crate::cache::ObjHeaders, ObjBody)> {
    match r.loaded.take() {
        Some((o, b)) if ObjRef::ptr_eq(&o, oc) => Some((oc.headers(), b)),
        _ if oc.disk().is_some() => r.sh.cache.held_body(oc).await.ok().map(|b| (oc.headers(), b)),
        _ => Some(oc.parts()),
    }
}

/// Send `oc`'s object to the client. `hit` adds the object's vxid to
/// X-Varnish; a pass's object (`pass`) gets no Accept-Ranges.
pub async fn deliver<T: Transport>(r: &mut Request<'_, T>, oc: &ObjRef, hit: bool, pass: bool) -> Step {
    let obj = &oc.obj;
    let Some((headers, body)) = parts(r, oc).await else {
        return Step::Synth { status: 503, reason: "Backend fetch failed".into() };
    };
    let t = now();
    let (gzip, brotli, ranges) = {
        let p = &r.p;
        (p.http_gzip_support, p.http_brotli_support, p.http_range_support)
    };
    let Some((rep, esi, spliced)) = forms(r, obj, &body, gzip, brotli).await else {
        return Step::Synth { status: 503, reason: "Backend fetch failed".into() };
    };
    let mut resp = Resp {
        status: obj.status,
        reason: headers.reason(),
        headers: headers.to_headers(),
        is_streaming: body.progress().done == Done::Streaming,
        // Whether or not the object has ESI to process (Varnish's
        // VRT_r_resp_do_esi reads !req->disable_esi).
        do_esi: !r.req.disable_esi,
        ..Resp::default()
    };
    r.resp_setup(&mut resp.headers, hit.then_some(obj.vxid), obj.life().t_origin, ranges && obj.status == 200 && !pass);
    rep.mark(&mut resp.headers);
    let view = r.active.policy.defines(Sub::Deliver).then(|| ObjView { can_esi: esi.is_some(), ..obj_view(oc, t, false) });
    let action = r.call(Sub::Deliver, With { resp: Some(&mut resp), obj: view.as_ref(), ..With::default() });
    r.stamp("Process"); // whatever vcl_deliver returned, as Varnish
    if action != Action::Deliver {
        return divert(action);
    }
    if let Some(step) = too_many_headers(r, &resp.headers) {
        return step;
    }
    // The length that goes out is the body's (Varnish's cnt_transmit
    // replaces a Content-Length that does not match it).
    resp.headers.unset("content-length");
    // The gunzip filter takes Content-Encoding away after vcl_deliver, as
    // Varnish's does; the length is the plain one once the object is whole.
    // An assembled page has no length known in advance, and its ETag is
    // weak (Varnish's ESI delivery).
    // req.esi = false counts on the client's own request only (Varnish
    // ignores it in an include).
    let esi = esi.filter(|_| resp.do_esi && !(r.req.disable_esi && r.req.esi_level == 0));
    if esi.is_some() {
        crate::gzip::weaken_etag(&mut resp.headers);
    }
    let (body, len, mut gunzip) = match rep {
        Rep::Stored => (&body, body.known_len(), None),
        Rep::Brotli(br) => (br, br.known_len(), None),
        Rep::Gunzip => {
            resp.headers.unset("content-encoding");
            r.sh.seg.add(common::counters::C::NGunzip, 1);
            let info = obj.coding().and_then(|c| c.info.get().copied());
            (&body, info.map(|i| i.plain_len), Some(Zstream::new(Dir::Gunzip, &r.p.coding())))
        }
    };
    let keep = r.keep && r.framing == Framing::None;
    let len = if esi.is_some() { None } else { len };
    let plan = plan(&r.req, len, &mut resp, r.head_only, keep, ranges, !pass && r.p.rfc9111());
    let mut wire = std::mem::take(&mut r.sess.wire);
    let head = RespHead { status: plan.status, reason: plan.reason, headers: &plan.headers, framing: plan.framing, keep: plan.keep };
    r.write_head(&mut wire, &head);
    let hdr_tx = wire.len() as u64;
    // send_timeout bounds the whole response, as in Varnish.
    r.arm_send();
    let (body_tx, failed) = match (esi, spliced) {
        (Some((data, pieces)), _) if plan.send_body => {
            // Without gzip support nothing is gunzipped for the client.
            let gzip_client = !gzip || crate::gzip::can_gzip(&r.req.headers);
            send_esi(r, &mut wire, &data, pieces, plan.chunked, gzip_client).await
        }
        (_, Some(pieces)) if plan.send_body => match send_spliced(r, obj, &pieces).await {
            Some(sent) => sent,
            None => send_body(r.conn.out(), &mut wire, body, &plan, gunzip.as_mut()).await,
        },
        _ => send_body(r.conn.out(), &mut wire, body, &plan, gunzip.as_mut()).await,
    };
    r.sess.wire = wire;
    if let Some(z) = &gunzip {
        gunzip_record(r, obj, z);
    }
    r.end((hdr_tx, body_tx));
    if failed {
        // The body did not arrive whole (or the client left): close,
        // never end the response cleanly. A range cut short is
        // Varnish's RANGE_SHORT.
        let short = plan.span.is_some_and(|(a, b)| body_tx < b - a + 1);
        return Step::Done(Some(if short { Reason::RangeShort } else { Reason::RespClose }));
    }
    Step::Done(close_reason(plan.keep, &r.req))
}

/// The page (whole) an ESI object is, with its instructions.
type EsiPage = Option<(std::sync::Arc<EsiData>, Vec<Bytes>)>;

/// Which form of the object this request gets, and, waiting for the
/// object to be whole where that is needed: an ESI page's instructions
/// and bytes, or a gzip object's bytes to splice into the gzip page it is
/// included in (one that cannot be is gunzipped and wrapped instead).
/// None if the object failed.
async fn forms<'o, T: Transport>(
    r: &mut Request<'_, T>,
    obj: &'o Meta,
    body: &ObjBody,
    gzip: bool,
    brotli: bool,
) -> Option<(Rep<'o>, EsiPage, Option<Vec<Bytes>>)> {
    let mut rep = rep(obj, &r.req, gzip, brotli);
    // An ESI page is delivered once it is whole (it is fetched whole).
    let esi = match obj.coding().filter(|c| c.esi) {
        None => None,
        Some(c) => {
            // Its instructions are there once it is whole.
            let pieces = body.pieces().await?;
            c.esi_data.get().cloned().map(|d| (d, pieces))
        }
    };
    let mut spliced = None;
    // A gzip object that is not delivered as an ESI page (one parsed for
    // ESI that held none is one too) is spliced into a gzip page.
    let gzip_obj = obj.coding().is_some_and(|c| c.gzip);
    if esi.is_none() && gzip_obj && r.conn.esi_gzip().is_some() {
        spliced = body.pieces().await;
        if spliced.is_none() || obj.coding().is_some_and(|c| c.info.get().is_none()) {
            (spliced, rep) = (None, Rep::Gunzip);
        }
    }
    Some((rep, esi, spliced))
}

/// The `U D -` record of a delivery gunzip.
fn gunzip_record<T: Transport>(r: &mut Request<'_, T>, obj: &Meta, z: &Zstream) {
    let bits = match (z.ended(), obj.coding().and_then(|c| c.info.get())) {
        (true, Some(i)) => i.bits,
        _ => Default::default(),
    };
    let rec = crate::gzip::record("U D -", z.total_in(), z.total_out(), bits);
    r.log.rec(Tag::Gzip, LogSide::Client, r.rxid, rec.as_bytes());
}

/// Status, headers and framing: 304 for a matching conditional, 206 or
/// 416 for a range, chunked when the length is not known yet (close for
/// an HTTP/1.0 client).
/// The response's headers move into the plan (the conditionals and
/// If-Range are judged on them first).
fn plan<'o>(req: &Req, len: Option<u64>, resp: &'o mut Resp, head_only: bool, keep: bool, ranges: bool, rfc: bool) -> Plan<'o> {
    let not_modified = not_modified(req, resp, rfc);
    let range = match (resp.status, req.headers.get("range").filter(|_| ranges), len) {
        (200, Some(r), Some(n)) if !not_modified && if_range_ok(req, resp) => parse_range(r, n),
        (200, Some(r), None) if !not_modified && if_range_ok(req, resp) => range_unknown_len(r),
        _ => RangeReq::Whole,
    };
    let mut p = Plan {
        status: resp.status,
        headers: std::mem::take(&mut resp.headers),
        reason: &resp.reason,
        framing: None,
        span: None,
        send_body: !head_only,
        chunked: false,
        keep,
    };
    if not_modified {
        (p.status, p.reason) = (304, b"Not Modified");
        p.headers.unset("content-length");
        p.send_body = false;
        return p;
    }
    // No body, and no length, for a 1xx or 204 (RFC 9110 §8.6), as
    // Varnish's cnt_transmit (a status VCL set over a stored body too).
    if p.status < 200 || p.status == 204 {
        p.headers.unset("content-length");
        p.send_body = false;
        return p;
    }
    if let Some((status, reason, content_range)) = range.answer(len) {
        (p.status, p.reason) = (status, reason);
        if let Some(v) = content_range {
            p.headers.set("Content-Range", v);
        }
    }
    match range {
        RangeReq::Part(a, b) => {
            p.span = Some((a, b));
            p.framing = Some(Framed::length(b - a + 1));
        }
        RangeReq::Unsatisfiable => {
            p.send_body = false;
            p.framing = Some(Framed::length(0));
        }
        RangeReq::Whole => match len {
            Some(n) => p.framing = Some(Framed::length(n)),
            // An include's body goes into its page as it is.
            None if req.esi_level > 0 => {}
            // A HEAD of a body whose length is not known yet: neither
            // length nor chunking, as Varnish.
            None if req.minor >= 1 && !p.send_body => {}
            None if req.minor >= 1 => {
                p.chunked = true;
                p.framing = Some(Framed::Chunked);
            }
            None => p.keep = false,
        },
    }
    p
}

/// Send the head already in `wire` and the body (the planned span of it,
/// chunked if planned), as it becomes available. Returns the body bytes
/// sent and whether the delivery failed.
async fn send_body<W: tokio::io::AsyncWrite + Unpin>(
    out: &mut W,
    wire: &mut Vec<u8>,
    body: &ObjBody,
    plan: &Plan<'_>,
    gunzip: Option<&mut Zstream>,
) -> (u64, bool) {
    let mut g = Gather::new(wire);
    let (mut body_tx, mut failed) = if plan.send_body { send_parts(out, &mut g, body, plan, gunzip).await } else { (0, false) };
    if plan.chunked && !failed {
        g.wire.extend_from_slice(b"0\r\n\r\n");
        body_tx += 5;
    }
    // What was gathered goes out even when the body failed: the client
    // gets what there was, then the connection closes.
    if !g.is_empty() && !g.flush(out).await {
        failed = true;
    }
    (body_tx, failed)
}

/// What a delivery gunzip makes before it sends it: its memory per
/// connection, whatever the gzip inflates to.
const GUNZIP_WINDOW: usize = 128 * 1024;

/// What a delivery gunzip gathers before it sends (Varnish's gzip_buffer
/// default).
const GUNZIP_HOLD: usize = 32 * 1024;

/// The body's pieces (the planned span, chunked if planned) as they come,
/// gunzipped on the way if asked; returns the bytes and whether it
/// failed. The last pieces may be left gathered.
async fn send_parts<W: tokio::io::AsyncWrite + Unpin>(
    out: &mut W,
    g: &mut Gather<'_>,
    body: &ObjBody,
    plan: &Plan<'_>,
    mut gunzip: Option<&mut Zstream>,
) -> (u64, bool) {
    let (span, chunked) = (plan.span, plan.chunked);
    let mut reader = body.reader();
    let (mut pos, mut body_tx) = (0u64, 0u64);
    let mut pieces: SmallVec<[Bytes; 4]> = SmallVec::new();
    // A stored piece the gunzip has not finished with (and whether it was
    // the end): it is inflated window by window, each sent before the next.
    let mut unzipping: Option<(Bytes, bool)> = None;
    loop {
        let (chunk, end) = match unzipping.take() {
            Some(rest) => rest,
            None => {
                // Gather what is there; before waiting for more, send it.
                let next = match reader.try_next() {
                    Some(n) => n,
                    None => {
                        if !send_before_wait(out, g).await {
                            return (body_tx, true);
                        }
                        reader.next().await
                    }
                };
                match next {
                    Ok(Some(c)) => (c, false),
                    Ok(None) => (Bytes::new(), true),
                    Err(()) => return (body_tx, true),
                }
            }
        };
        match gunzip.as_deref_mut() {
            None if end => break,
            None => pieces.push(chunk),
            Some(z) => match z.feed_upto(&chunk, end, &mut |b| pieces.push(b), GUNZIP_WINDOW) {
                Err(_) => return (body_tx, true),
                Ok((used, more)) => {
                    if more {
                        unzipping = Some((chunk.slice(used..), end));
                    }
                }
            },
        }
        // A delivery gunzip holds what it made until it has a buffer's
        // worth or the end, as Varnish's gunzip VDP: of a body that turns
        // out corrupt (junk after its end), nothing inflated goes out.
        if gunzip.is_some() && !end && pieces.iter().map(Bytes::len).sum::<usize>() < GUNZIP_HOLD {
            continue;
        }
        for piece in pieces.drain(..) {
            let start = pos;
            pos += piece.len() as u64;
            let part = match span {
                None => piece,
                Some((a, b)) => {
                    if pos <= a || start > b {
                        continue;
                    }
                    let from = a.saturating_sub(start) as usize;
                    let to = ((b + 1).min(pos) - start) as usize;
                    piece.slice(from..to)
                }
            };
            if part.is_empty() {
                continue;
            }
            if chunked {
                let _ = write!(g.wire, "{:x}\r\n", part.len());
            }
            body_tx += part.len() as u64;
            g.piece(part);
            if chunked {
                g.wire.extend_from_slice(b"\r\n");
                body_tx += 2;
            }
            if (g.segs.len() >= MAX_IOV || g.wire.len() >= MAX_COPIED) && !g.flush(out).await {
                return (body_tx, true);
            }
        }
        if span.is_some_and(|(_, b)| pos > b) {
            break;
        }
        if unzipping.is_some() {
            // A window out before the next is made.
            if !g.is_empty() && !g.flush(out).await {
                return (body_tx, true);
            }
            continue;
        }
        if end {
            break;
        }
    }
    (body_tx, false)
}

/// Before waiting for more of a body: what is gathered goes out, and what
/// an ESI page holds (ClientIo::hold), not kept waiting on the fetch.
async fn send_before_wait<W: tokio::io::AsyncWrite + Unpin>(out: &mut W, g: &mut Gather<'_>) -> bool {
    (g.is_empty() || g.flush(out).await) && tokio::io::AsyncWriteExt::flush(out).await.is_ok()
}

/// A response with more header lines than http_max_hdr allows (five of
/// its slots hold the first line in Varnish) is not delivered: the header
/// is lost, the workspace marked overflowed, and the client gets 500 as
/// from Varnish.
fn too_many_headers<T: Transport>(r: &mut Request<'_, T>, h: &Headers) -> Option<Step> {
    let room = r.p.http_max_hdr.saturating_sub(5);
    if h.0.len() <= room {
        return None;
    }
    let lost = h.0.get(room).map(|(n, v)| [&n[..], b": ", &v[..]].concat()).unwrap_or_default();
    r.sh.seg.add(C::LostHdr, 1);
    r.log.rec(Tag::LostHeader, LogSide::Client, r.rxid, &lost);
    r.log.rec(Tag::Error, LogSide::Client, r.rxid, b"out of workspace (req)");
    Some(Step::Synth { status: 500, reason: "Internal Server Error".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeReq::*;
        assert_eq!(parse_range(b"bytes=0-9", 100), Part(0, 9));
        assert_eq!(parse_range(b"bytes=90-", 100), Part(90, 99));
        assert_eq!(parse_range(b"bytes=-10", 100), Part(90, 99));
        assert_eq!(parse_range(b"bytes=-500", 100), Part(0, 99));
        assert_eq!(parse_range(b"bytes=50-500", 100), Part(50, 99));
        assert_eq!(parse_range(b"bytes=100-", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=200-300", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 100), Unsatisfiable);
        // What varnishd 7.1 answers 416 (c0189).
        for bad in ["bytes=5-1", "bytes=0-1,5-6", "items=0-1", "bytes=x-1", "bytes 1-2", "bytes=-", "bytes= 1-2", "bytes=1-2x"] {
            assert_eq!(parse_range(bad.as_bytes(), 100), Unsatisfiable, "{bad}");
        }
        assert_eq!(parse_range(b"BYTES=1-2 ", 100), Part(1, 2));
        assert_eq!(parse_range(b"bytes=0-0", 0), Unsatisfiable);
    }
}
