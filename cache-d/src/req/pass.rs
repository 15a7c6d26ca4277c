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
use crate::req::state::{divert, Request, RespHead, Step, With};
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
    if let Err(e) = r.conn.prefill(r.framing, PREFILL, sh.params().timeout_idle).await {
        return bad_body(r, &e).await;
    }
    sh.seg.add(C::SPass, 1);
    let bxid = sh.next_vxid();
    r.log.recf(Tag::Link, LogSide::Client, r.rxid, format_args!("bereq {bxid} pass"));
    let mut fetch = Fetch::new(&sh, bxid, r.rxid, "pass");
    let mut bereq = Bereq::from_req(&r.req, bxid);
    bereq.uncacheable = true;
    let framing = r.framing;
    let addrs = (r.sess.peer, r.sess.local);
    let fetched = match r.cached_body.clone() {
        // A body std.cache_req_body() read: sent from memory, retries allowed.
        Some(b) => {
            let mut body = CachedBody(b);
            fetch.replayable = true;
            let mut t = BeTxn::new(&sh, &*r.active.policy, &mut fetch, &mut bereq, addrs);
            t.framing = Framing::Length(body.0.len() as u64);
            t.client = Some(&mut body);
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
    match fetched {
        // beresp.do_stream = false: the whole body first (a body that
        // fails is a 503, as Varnish), then delivered with its length.
        Fetched::Resp { mut resp, beresp, .. } if !beresp.do_stream => match read_ahead(&mut resp, fetch.timeout(2)).await {
            Ok(()) => deliver(r, fetch, resp, beresp).await,
            Err(e) => {
                fetch.error(&e);
                drop(fetch);
                Step::Synth { status: 503, reason: "Backend fetch failed".into() }
            }
        },
        Fetched::Resp { resp, beresp, .. } => deliver(r, fetch, resp, beresp).await,
        Fetched::Synthetic { beresp, body, .. } => {
            fetch.done(Some(body.len() as u64), None);
            r.stamp("Fetch");
            let resp = Resp { status: beresp.status, reason: beresp.reason, headers: beresp.headers, is_streaming: false };
            Step::DeliverSynthetic { resp, body }
        }
        Fetched::Abandoned(e) => {
            fetch.note(&e);
            fetch.done(None, None);
            Step::Synth { status: 503, reason: "Backend fetch failed".into() }
        }
        Fetched::Client(e) => {
            fetch.error(&e);
            fetch.done(None, None);
            bad_body(r, &e).await
        }
    }
}

/// Read the whole body of `resp` into its connection's buffer, so that it
/// is delivered as a body of known length.
async fn read_ahead(resp: &mut Response, read_timeout: std::time::Duration) -> Result<(), Error> {
    let t =
        Transfer { framing: resp.framing, chunk_out: false, src_side: Side::Backend, dst_side: Side::Internal, read_timeout, pace: None };
    let mut body = Vec::new();
    let m = body::transfer(&mut resp.conn, &mut body, &t, &mut Vec::new()).await?;
    if let Framing::Length(n) = resp.framing {
        if m.payload != n {
            return Err(Error::new(Side::Backend, "backend body ended early"));
        }
    }
    resp.spent = resp.framing == Framing::Eof;
    let rest = resp.conn.buf.split();
    resp.conn.buf.extend_from_slice(&body);
    resp.conn.buf.extend_from_slice(&rest);
    resp.framing = Framing::Length(body.len() as u64);
    Ok(())
}

/// vcl_deliver on the backend's response, then its body streamed through.
/// Every exit ends the backend transaction (`fetch` is dropped, or done
/// with what was delivered).
async fn deliver<T: Transport>(r: &mut Request<'_, T>, mut fetch: Fetch, resp: Response, beresp: Beresp) -> Step {
    let mut keep = r.keep && r.framing == Framing::None;
    r.stamp("Fetch");
    let backend_close = resp.head.minor == 0 || resp.head.has_token("connection", "close");
    let streamed = matches!(resp.framing, Framing::Chunked | Framing::Eof);
    let chunk_out = streamed && r.req.minor >= 1;
    if streamed && !chunk_out {
        keep = false; // HTTP/1.0 client: the body ends at close.
    }
    // The pass's private object, as vcl_deliver sees it (never hit).
    let view = r.active.policy.defines(Sub::Deliver).then(|| ObjView {
        status: beresp.status,
        reason: beresp.reason.clone(),
        headers: Headers::default(),
        ttl: beresp.ttl,
        grace: beresp.grace,
        keep: beresp.keep,
        age: 0.0,
        hits: 0,
        uncacheable: true,
    });
    let mut out = Resp { status: beresp.status, reason: beresp.reason, headers: beresp.headers, is_streaming: true };
    out.headers.unset("x-varnish");
    let action = r.call(Sub::Deliver, With { resp: Some(&mut out), obj: view.as_ref(), ..With::default() });
    if action != Action::Deliver {
        drop(fetch);
        return divert(action);
    }
    let mut wire = std::mem::take(&mut r.sess.wire);
    let framing = match resp.framing {
        Framing::Length(n) => Some((&b"Content-Length"[..], n.to_string())),
        Framing::Chunked | Framing::Eof if chunk_out => Some((&b"Transfer-Encoding"[..], "chunked".to_string())),
        _ => None,
    };
    // A pass vcl_hit chose shows its fetch's vxid, as Varnish does.
    let obj_vxid = r.hit_pass.then_some(fetch.vxid);
    let head = RespHead { status: out.status, reason: &out.reason, headers: &out.headers, obj_vxid, framing, keep, accept_ranges: false };
    r.write_head(&mut wire, &head);
    r.stamp("Process");
    let hdr_tx = wire.len() as u64;
    let mut be = resp.conn;
    let inline = match resp.framing {
        Framing::Length(n) if n <= INLINE && be.buf.len() as u64 >= n => n,
        _ => 0,
    };
    wire.extend_from_slice(&be.buf.split_to(inline as usize));
    r.arm_send();
    let head_sent = r.conn.out().write_all(&wire).await;
    r.sess.wire = wire;
    if head_sent.is_err() {
        fetch.error(&Error::new(Side::Client, "client closed before the response head was sent"));
        drop(fetch);
        r.end((0, 0));
        return Step::Done(Some(Reason::TxError));
    }
    let t = Transfer {
        framing: if inline > 0 { Framing::Length(0) } else { resp.framing },
        chunk_out,
        src_side: Side::Backend,
        dst_side: Side::Client,
        read_timeout: fetch.timeout(2),
        pace: None,
    };
    let moved = body::transfer(&mut be, r.conn.out(), &t, &mut r.sess.scratch).await.map(|mut m| {
        m.rx += inline;
        m.tx += inline;
        m.payload += inline;
        m
    });
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
