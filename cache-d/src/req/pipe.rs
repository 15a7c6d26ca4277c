//! Pipe: hand the connection to the backend and relay bytes both ways until
//! either side closes (vcl_pipe), as Varnish does for unknown methods.

use common::counters::{Vbe, C};
use common::log::vsl::{Side as LogSide, Tag};
use tokio::io::AsyncWriteExt;

use crate::fetch::txn::Fetch;
use crate::http1::head::Framing;
use crate::req::reason::Reason;
use crate::req::state::{Request, Step, With};
use crate::req::transport::Transport;
use crate::vcl::model::{Action, Bereq, Sub};

/// How the client's body is framed, relayed as it is.
fn framing_of(bereq: &Bereq) -> Framing {
    match (bereq.headers.get("content-length"), bereq.headers.get("transfer-encoding")) {
        (_, Some(_)) => Framing::Chunked,
        (Some(n), None) => std::str::from_utf8(n).ok().and_then(|n| n.trim().parse().ok()).map_or(Framing::None, Framing::Length),
        _ => Framing::None,
    }
}

/// A pipe counted in MAIN.n_pipe while it lasts.
struct Piping<'a>(&'a common::segment::SegmentWriter);

impl<'a> Piping<'a> {
    /// A pipe more, or None (counted in MAIN.pipe_limited) when
    /// pipe_sess_max are open already.
    fn enter(sh: &'a crate::shared::Shared) -> Option<Self> {
        let max = u64::from(sh.params().pipe_sess_max);
        sh.seg.add(C::NPipe, 1);
        let p = Piping(&sh.seg);
        if max > 0 && sh.seg.get(C::NPipe) > max {
            sh.seg.add(C::PipeLimited, 1);
            return None;
        }
        Some(p)
    }
}

impl Drop for Piping<'_> {
    fn drop(&mut self) {
        self.0.sub(C::NPipe, 1);
    }
}

/// The backend connection of a pipe: an idle pooled one first, as
/// Varnish's pipe does, else a new one; None (the error logged) if it
/// cannot be had.
async fn connect(sh: &crate::shared::Shared, f: &mut Fetch) -> Option<(crate::backend::pool::BeConn, bool)> {
    let backend = f.be.clone();
    let idle = backend.take_idle(sh.params().backend_idle_timeout);
    let reused = idle.is_some();
    let connected = match idle {
        Some(c) => Ok(c),
        None => backend.connect(f.timeout(0)).await,
    };
    match connected {
        Ok(b) => {
            sh.seg.add(if reused { C::BackendReuse } else { C::BackendConn }, 1);
            backend.count(Vbe::Req, 1);
            Some((b, reused))
        }
        Err(e) => {
            sh.seg.add(C::BackendFail, 1);
            backend.count_fail(&e);
            f.error(&e);
            None
        }
    }
}

/// The pipe's backend request as vcl_pipe gets it (Varnish's cnt_pipe):
/// the client's headers, framing ones too (the body is relayed raw), then
/// X-Varnish with the client request's vxid and Connection: close in
/// place of the client's.
fn pipe_bereq(req: &crate::vcl::model::Req, rxid: u32, bxid: u32) -> Bereq {
    let mut bereq = Bereq::from_req(req, bxid);
    bereq.headers.unset("x-varnish");
    bereq.headers.0.push((bytes::Bytes::from_static(b"X-Varnish"), bytes::Bytes::from(rxid.to_string())));
    bereq.headers.unset("connection");
    bereq.headers.0.push((bytes::Bytes::from_static(b"Connection"), bytes::Bytes::from_static(b"close")));
    bereq
}

/// vcl_pipe, then the pipe; the session ends with it.
pub async fn pipe<T: Transport>(r: &mut Request<'_, T>) -> Step {
    let sh = r.sh.clone();
    let (rxid, side) = (r.rxid, LogSide::Client);
    let bxid = sh.next_vxid();
    let mut bereq = pipe_bereq(&r.req, rxid, bxid);
    let action = r.call(Sub::Pipe, With { bereq: Some(&mut bereq), ..With::default() });
    if action != Action::Pipe {
        let (status, reason) = match action {
            Action::Synth(st, reason) => (st, reason),
            _ => (503, "VCL failed".to_string()),
        };
        // vcl_synth can only deliver here: a restart after pipe is not possible.
        r.keep = false;
        r.piped = true;
        return Step::Synth { status, reason };
    }
    sh.seg.add(C::SPipe, 1);
    // pipe_sess_max: over it, vcl_synth's 503 as for a VCL failure.
    let Some(_piping) = Piping::enter(&sh) else {
        (r.keep, r.piped) = (false, true);
        return Step::Synth { status: 503, reason: "VCL failed".into() };
    };
    r.log.recf(Tag::Link, side, rxid, format_args!("bereq {bxid} pipe"));
    let mut f = Fetch::new(&sh, bxid, rxid, "pipe");
    f.close_why = "Piped transaction";
    // A body std.cache_req_body() read goes first, with its length.
    let cached = r.cached_body.take();
    if let Some(b) = &cached {
        bereq.headers.unset("transfer-encoding");
        bereq.headers.set("Content-Length", bytes::Bytes::from(b.len().to_string()));
    }
    let framing = framing_of(&bereq);
    let mut wire = std::mem::take(&mut r.sess.wire);
    // build_request sends the headers as they are, in the client's HTTP
    // version.
    f.pipe_http10 = r.req.minor == 0;
    f.piped = true;
    f.build_request(&bereq.method.clone(), &bereq, framing, &mut wire);
    // A named backend that picks none is "No backend"; as Varnish does, the
    // client's connection is closed without a response.
    let picked = r.active.policy.backend(bereq.backend.as_deref(), bereq.hash.as_deref().unwrap_or(&bereq.url));
    let no_backend = picked.is_none() && bereq.backend.is_some();
    f.be = picked.unwrap_or_else(|| sh.backend.clone());
    if no_backend {
        r.sess.wire = wire;
        f.error(&crate::error::Error::new(crate::error::Side::Backend, "No backend"));
        f.end_unsent();
        r.body_rx = 0;
        r.end((0, 0));
        return Step::Done(Some(Reason::TxError));
    }
    let backend = f.be.clone();
    f.vcl_timeouts[0] = bereq.connect_timeout;
    let Some((mut be, reused)) = connect(&sh, &mut f).await else {
        // As Varnish: the client's connection closes, no response.
        r.sess.wire = wire;
        f.end_unsent();
        r.body_rx = 0;
        r.end((0, 0));
        return Step::Done(Some(Reason::TxError));
    };
    f.open_record(&be, reused);
    let bereq_hdr = wire.len() as u64;
    let mut ok = be.io.write_all(&wire).await.is_ok();
    if let Some(b) = &cached {
        ok = ok && be.io.write_all(b).await.is_ok();
    }
    let pending = r.conn.take_buffered();
    ok = ok && be.io.write_all(&pending).await.is_ok();
    ok = ok && tokio::io::AsyncWriteExt::flush(&mut be.io).await.is_ok();
    r.sess.wire = wire;
    r.stamp("Pipe");
    let (mut to_be, mut to_client) = (pending.len() as u64 + cached.as_ref().map_or(0, |b| b.len() as u64), 0);
    if ok {
        // Relay both ways; when either side closes, the pipe is over, and
        // when nothing moves either way for pipe_timeout, it is closed.
        let pipe_timeout = sh.params().pipe_timeout;
        let t = r.conn.tunnel(&mut be.io, pipe_timeout).await;
        if t.idle_out {
            r.log.rec(Tag::Error, side, rxid, b"pipe_timeout: nothing moved either way");
        }
        to_be += t.to_backend;
        to_client += t.to_client;
    }
    r.stamp("PipeSess");
    let hdr_rx = r.hdr_rx;
    r.log.recf(Tag::PipeAcct, side, rxid, format_args!("{hdr_rx} {bereq_hdr} {to_be} {to_client}"));
    sh.seg.add(C::SPipeHdrbytes, hdr_rx);
    sh.seg.add(C::SPipeIn, to_be);
    sh.seg.add(C::SPipeOut, to_client);
    for (c, n) in [(Vbe::PipeHdrbytes, bereq_hdr), (Vbe::PipeOut, to_be), (Vbe::PipeIn, to_client)] {
        backend.count(c, n);
    }
    f.done(None, None);
    r.log.rec(Tag::End, side, rxid, b"");
    sh.seg.log(&r.log);
    Step::Done(Some(Reason::TxPipe))
}
