//! Pipe: hand the connection to the backend and relay bytes both ways until
//! either side closes (vcl_pipe), as Varnish does for unknown methods.

use common::counters::{Vbe, C};
use common::vsl::{Batch, Side as LogSide, Tag};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::fetch::Fetch;
use crate::http::Framing;
use crate::policy::{run_sub, Action, Bereq, Req, Sub};
use crate::session::{Client, Clock, Reason, ReqCtx, Sess};

pub(crate) async fn pipe(s: &mut Sess, c: &mut Client, req: &mut Req, mut log: Batch, mut clock: Clock, ctx: ReqCtx) -> Option<Reason> {
    let sh = s.sh.clone();
    let (rxid, side) = (ctx.rxid, LogSide::Client);
    let bxid = sh.next_vxid();
    // The body, if any, is relayed raw: keep the client's framing headers.
    let mut bereq = Bereq::from_req(req, bxid);
    // vcl_pipe sees req and bereq.
    let action = {
        let policy = s.policy();
        let mut t = s.task(&mut log, rxid);
        t.req = Some(req);
        t.bereq = Some(&mut bereq);
        run_sub(&*policy, Sub::Pipe, &mut t)
    };
    if action != Action::Pipe {
        let (status, reason) = match action {
            Action::Synth(st, r) => (st, r),
            _ => (503, "VCL failed".to_string()),
        };
        // vcl_synth can only deliver here: a restart after pipe is not possible.
        let mut ctx = ctx;
        ctx.keep = false;
        return match s.vcl_synth(c, req, log, clock, &ctx, status, &reason).await {
            crate::session::Step::Done(r) => r,
            crate::session::Step::Restart(..) => Some(Reason::RespClose),
        };
    }
    sh.seg.add(C::SPipe, 1);
    log.recf(Tag::Link, side, rxid, format_args!("bereq {bxid} pipe"));
    let mut f = Fetch::new(&sh, bxid, rxid, "pipe");
    let framing = match (bereq.headers.get("content-length"), bereq.headers.get("transfer-encoding")) {
        (_, Some(_)) => Framing::Chunked,
        (Some(n), None) => std::str::from_utf8(n).ok().and_then(|n| n.trim().parse().ok()).map_or(Framing::None, Framing::Length),
        _ => Framing::None,
    };
    bereq.headers.set("Connection", bytes::Bytes::from_static(b"close"));
    let mut wire = std::mem::take(&mut s.wire);
    f.build_request(&sh, &bereq.method.clone(), &bereq, framing, s.peer.ip(), &mut wire);
    // build_request drops Connection as hop-by-hop; the pipe asks to close.
    wire.truncate(wire.len() - 2);
    wire.extend_from_slice(b"Connection: close\r\n\r\n");
    f.be = s.policy().backend(bereq.backend.as_deref(), bereq.hash.as_deref().unwrap_or(&bereq.url)).unwrap_or_else(|| sh.backend.clone());
    let backend = f.be.clone();
    let mut be = match backend.connect(backend.cfg.connect_timeout.unwrap_or(sh.params().connect_timeout)).await {
        Ok(b) => {
            sh.seg.add(C::BackendConn, 1);
            backend.count(Vbe::Req, 1);
            b
        }
        Err(e) => {
            sh.seg.add(C::BackendFail, 1);
            backend.count_fail(&e);
            s.wire = wire;
            f.error(&sh, &e);
            f.end(&sh);
            let tx = s.synth(c, &mut log, rxid, 503, "Backend fetch failed", true).await;
            s.end_req(log, &mut clock, rxid, (ctx.hdr_rx, 0), tx);
            return Some(Reason::TxError);
        }
    };
    f.open_record(&be, false);
    let bereq_hdr = wire.len() as u64;
    let mut ok = be.io.write_all(&wire).await.is_ok();
    let pending = c.buf.split();
    ok = ok && be.io.write_all(&pending).await.is_ok();
    s.wire = wire;
    clock.stamp(&mut log, rxid, "Pipe");
    let (to_be, to_client) = (AtomicU64::new(pending.len() as u64), AtomicU64::new(0));
    if ok {
        // Relay both ways; when either side closes, the pipe is over, and
        // when nothing moves either way for pipe_timeout, it is closed.
        let idle = sh.params().pipe_timeout;
        let (mut cr, mut cw) = c.io.get_mut().split();
        let (mut br, mut bw) = be.io.split();
        tokio::select! {
            _ = relay(&mut cr, &mut bw, &to_be) => {}
            _ = relay(&mut br, &mut cw, &to_client) => {}
            _ = idle_out(idle, &to_be, &to_client) => {
                log.rec(Tag::Error, side, rxid, b"pipe_timeout: nothing moved either way");
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), cw.shutdown()).await;
    }
    let (to_be, to_client) = (to_be.into_inner(), to_client.into_inner());
    clock.stamp(&mut log, rxid, "PipeSess");
    log.recf(Tag::PipeAcct, side, rxid, format_args!("{} {} {} {}", ctx.hdr_rx, bereq_hdr, to_be, to_client));
    sh.seg.add(C::SPipeHdrbytes, ctx.hdr_rx);
    sh.seg.add(C::SPipeIn, to_be);
    sh.seg.add(C::SPipeOut, to_client);
    for (c, n) in [(Vbe::PipeHdrbytes, bereq_hdr), (Vbe::PipeOut, to_be), (Vbe::PipeIn, to_client)] {
        backend.count(c, n);
    }
    f.finish(&sh, None, None);
    f.end(&sh);
    log.rec(Tag::End, side, rxid, b"");
    sh.seg.log(&log);
    Some(Reason::TxPipe)
}

/// Resolves once neither counter moved for `idle` (never when it is 0).
async fn idle_out(idle: Duration, a: &AtomicU64, b: &AtomicU64) {
    if idle.is_zero() {
        return std::future::pending().await;
    }
    let moved = || a.load(Ordering::Relaxed) + b.load(Ordering::Relaxed);
    let mut last = moved();
    loop {
        tokio::time::sleep(idle).await;
        let now = moved();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Copy until EOF or an error, counting bytes as they pass.
async fn relay<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(r: &mut R, w: &mut W, n: &AtomicU64) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(k) => {
                if w.write_all(&buf[..k]).await.is_err() {
                    return;
                }
                n.fetch_add(k as u64, Ordering::Relaxed);
            }
        }
    }
}
