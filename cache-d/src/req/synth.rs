//! Synthetic responses: vcl_synth and the page it builds, the built-in
//! error page for requests too malformed for the policy, and
//! vcl_backend_error's page delivered to a pass.

use bytes::Bytes;
use common::counters::C;
use common::log::vsl::{Batch, Side as LogSide};
use tokio::io::AsyncWriteExt;

use crate::req::reason::Reason;
use crate::req::state::{divert, write_head, Framed, Request, RespHead, Sess, Step, With};
use crate::req::transport::Transport;
use crate::util::{http_date, now};
use crate::vcl::model::{Action, Headers, NoEnv, Req, Resp, Sub, Task};
use crate::vcl::policy::{run_sub, Builtin};

/// A synthetic response's start: status, reason, Date, Server and
/// X-Varnish (Varnish's Resp_Setup_Synth: no Via, no Age).
fn synthetic(status: u16, reason: &str, rxid: u32) -> Resp {
    Resp {
        status,
        reason: Bytes::copy_from_slice(reason.as_bytes()),
        headers: Headers(vec![
            (Bytes::from_static(b"Date"), Bytes::from(http_date(now()))),
            (Bytes::from_static(b"Server"), Bytes::from_static(b"cachekit")),
            (Bytes::from_static(b"X-Varnish"), Bytes::from(rxid.to_string())),
        ]),
        ..Resp::default()
    }
}

/// vcl_synth, then the synthetic response. The connection stays open only
/// if the request's body (if any) has been read.
pub async fn vcl_synth<T: Transport>(r: &mut Request<'_, T>, status: u16, reason: &str) -> Step {
    r.sh.seg.add(C::SSynth, 1);
    let mut resp = synthetic(crate::vcl::builtin::wire_status(status), reason, r.rxid);
    // VCL sees the status as synth() gave it (above 999 too).
    resp.vcl_status = status;
    // A 100 Continue still owed: the page suggests closing, neither
    // sending it nor reading the body; vcl_synth may veto by unsetting it
    // (Varnish's Resp_Setup_Synth).
    if r.continue_pending {
        resp.headers.set("Connection", Bytes::from_static(b"close"));
    }
    let mut body = Vec::new();
    let action = r.call(Sub::Synth, With { resp: Some(&mut resp), body: Some(&mut body), ..With::default() });
    r.stamp("Process"); // whatever vcl_synth returned, as Varnish
    match action {
        // After vcl_pipe, vcl_synth can only deliver.
        Action::Restart if r.req.restarts < r.p.max_restarts && r.piped => return Step::Done(Some(Reason::RespClose)),
        Action::Restart if r.req.restarts <= r.p.max_restarts => return Step::Restart,
        // Past max_restarts a restart is taken as deliver (Varnish's
        // cnt_synth): the page as vcl_synth left it.
        Action::Deliver | Action::Restart => {}
        // fail: a bare 500 and the connection closed (Varnish's
        // minimal_response), no page.
        _ => {
            let bare = Resp { status: 500, reason: Bytes::from_static(b"Internal Server Error"), ..Resp::default() };
            let page = Page { resp: &bare, body: &[], close: true, head_only: true, include: false };
            let tx = send_synth(r.sess, r.conn, &mut r.log, r.rxid, page).await;
            r.end(tx);
            return Step::Done(Some(Reason::VclFailure));
        }
    }
    send(r, &resp, &body).await
}

/// Deliver vcl_backend_error's page to a pass: through vcl_deliver.
pub async fn deliver_synthetic<T: Transport>(r: &mut Request<'_, T>, mut resp: Resp, body: Vec<u8>) -> Step {
    resp.headers.0.retain(|(n, _)| !crate::fetch::steps::not_passed(n));
    r.resp_setup(&mut resp.headers, None, now(), false);
    let action = r.call(Sub::Deliver, With { resp: Some(&mut resp), ..With::default() });
    r.stamp("Process");
    if action != Action::Deliver {
        return divert(action);
    }
    send(r, &resp, &body).await
}

/// A Range on a synthetic 200 to a top-level request, as Varnish's range
/// filter serves it on any delivery: 206 with the part, or 416.
fn ranged<'b, T: Transport>(r: &Request<'_, T>, resp: &Resp, body: &'b [u8]) -> Option<(Resp, &'b [u8])> {
    use crate::req::deliver::{if_range_ok, parse_range, RangeReq};
    let on = resp.status == 200 && r.req.esi_level == 0 && r.p.http_range_support;
    let v = r.req.headers.get("range").filter(|_| on)?;
    if !if_range_ok(&r.req, resp) {
        return None;
    }
    let range = parse_range(v, body.len() as u64);
    let (status, reason, content_range) = range.answer(Some(body.len() as u64))?;
    let mut out = resp.clone();
    (out.status, out.reason) = (status, Bytes::from_static(reason));
    if let Some(v) = content_range {
        out.headers.set("Content-Range", v);
    }
    let part = match range {
        RangeReq::Part(a, b) => &body[a as usize..=b as usize],
        _ => &[][..],
    };
    Some((out, part))
}

/// Send a synthetic response and end the request.
async fn send<T: Transport>(r: &mut Request<'_, T>, resp: &Resp, body: &[u8]) -> Step {
    // Connection: close on the page closes the connection (Varnish's
    // SC_RESP_CLOSE). Else, on a connection that goes on, a body nothing
    // read is read and dropped (up to 64 KiB; after the 100 Continue it
    // waits for), as Varnish's VRB_Ignore.
    if resp.headers.get("connection").is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"close")) {
        r.keep = false;
    } else if r.keep && r.send_continue().await {
        drain_body(r, 64 * 1024).await;
    }
    let part = ranged(r, resp, body);
    let (resp, body) = part.as_ref().map_or((resp, body), |(o, b)| (o, *b));
    let close = r.close_after();
    let page = Page { resp, body, close, head_only: r.head_only, include: r.req.esi_level > 0 };
    let tx = send_synth(r.sess, r.conn, &mut r.log, r.rxid, page).await;
    r.end(tx);
    // Sent: its head went out (an include's head is never sent: its body).
    let sent = tx.0 > 0 || (r.req.esi_level > 0 && (tx.1 > 0 || body.is_empty() || r.head_only));
    Step::Done(match (close, sent, r.body_failed) {
        (_, _, true) => Some(Reason::RxBody),
        (false, true, _) => None,
        _ => Some(Reason::RespClose),
    })
}

/// Send the built-in error page without running the policy (requests too
/// malformed for it), closing the connection; returns the (header, body)
/// bytes written, zeros if the client was gone.
pub async fn refuse<T: Transport>(s: &mut Sess, conn: &mut T, log: &mut Batch, rxid: u32, status: u16, reason: &str) -> (u64, u64) {
    let mut resp = synthetic(status, reason, rxid);
    let mut body = Vec::new();
    let mut r = Req { xid: rxid, ..Req::default() };
    {
        let mut t = Task::new(&NoEnv);
        t.log = Some((log, rxid, LogSide::Client));
        t.req = Some(&mut r);
        t.resp = Some(&mut resp);
        t.body = Some(&mut body);
        run_sub(&Builtin, Sub::Synth, &mut t);
    }
    send_synth(s, conn, log, rxid, Page { resp: &resp, body: &body, close: true, head_only: false, include: false }).await
}

/// A response with its body in hand.
struct Page<'p> {
    resp: &'p Resp,
    body: &'p [u8],
    /// Close the connection after it.
    close: bool,
    /// A HEAD request: the head only.
    head_only: bool,
    /// An ESI include: the body only (the head is logged, not sent).
    include: bool,
}

/// Write a response with a body in hand; returns the (header, body) bytes
/// written, zeros if the client was gone.
async fn send_synth<T: Transport>(s: &mut Sess, conn: &mut T, log: &mut Batch, rxid: u32, page: Page<'_>) -> (u64, u64) {
    let Page { resp, body, close, head_only, include } = page;
    let mut wire = std::mem::take(&mut s.wire);
    let mut headers = resp.headers.clone();
    headers.unset("content-length");
    // As Varnish's cnt_transmit.
    let bodyless = crate::http1::head::bodyless(resp.status);
    // Connection follows `close` (set from the page's own header).
    headers.unset("connection");
    let head = RespHead {
        status: resp.status,
        reason: &resp.reason,
        headers: &headers,
        framing: (!bodyless).then(|| Framed::length(body.len() as u64)),
        keep: !close,
    };
    write_head(&mut wire, log, rxid, s.minor, &head);
    if include {
        wire.clear();
    }
    let hdr = wire.len() as u64;
    let body = if head_only || bodyless { &[][..] } else { body };
    wire.extend_from_slice(body);
    {
        let p = s.sh.params();
        conn.arm_send(p.send_timeout, p.idle_send_timeout);
    }
    let ok = conn.out().write_all(&wire).await.is_ok();
    s.wire = wire;
    if ok {
        (hdr, body.len() as u64)
    } else {
        (0, 0)
    }
}

/// Before a synthetic answer: read and drop a request body nothing took,
/// so the connection can go on (Varnish's VRB_Ignore), when it is at most
/// `cap` bytes; a longer one, or one that fails, leaves the connection to
/// close.
async fn drain_body<T: Transport>(r: &mut Request<'_, T>, cap: u64) {
    if r.framing == crate::http1::head::Framing::None
        || r.body_failed
        || matches!(r.framing, crate::http1::head::Framing::Length(n) if n > cap)
    {
        return;
    }
    let mut sink = crate::util::Capped { v: Vec::new(), cap: cap as usize };
    if r.read_body(&mut sink).await.is_ok() {
        r.body_consumed = true;
    }
}
