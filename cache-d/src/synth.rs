//! Synthetic responses: vcl_synth and the page it builds, the built-in
//! error page for requests too malformed for the policy, and
//! vcl_backend_error's page delivered to a pass.

use bytes::Bytes;
use common::counters::C;
use common::vsl::{Batch, Side as LogSide};
use tokio::io::AsyncWriteExt;

use crate::http::Framing;
use crate::policy::{self, run_sub, Action, Headers, Req, Resp, Sub, Task};
use crate::session::{Client, Clock, Reason, ReqCtx, Sess, Step};
use crate::util::{http_date, now};

impl Sess {
    /// vcl_synth, then the synthetic response. The connection stays open
    /// only if the request's body (if any) has been read.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn vcl_synth(
        &mut self,
        c: &mut Client,
        req: &mut Req,
        mut log: Batch,
        mut clock: Clock,
        ctx: &ReqCtx,
        status: u16,
        reason: &str,
    ) -> Step {
        let sh = self.sh.clone();
        let rxid = ctx.rxid;
        sh.seg.add(C::SSynth, 1);
        let mut resp = Resp {
            status: status % 1000,
            reason: Bytes::copy_from_slice(reason.as_bytes()),
            headers: Headers(vec![
                (Bytes::from_static(b"Date"), Bytes::from(http_date(now()))),
                (Bytes::from_static(b"Server"), Bytes::from_static(b"cachekit")),
            ]),
            is_streaming: false,
        };
        if resp.status < 100 {
            resp.status = 503;
        }
        let mut body = Vec::new();
        let action = {
            let policy = self.policy();
            let mut t = self.task(&mut log, rxid);
            t.req = Some(req);
            t.resp = Some(&mut resp);
            t.body = Some(&mut body);
            run_sub(&*policy, Sub::Synth, &mut t)
        };
        match action {
            Action::Restart if req.restarts < sh.params().max_restarts => return Step::Restart(log, clock),
            Action::Deliver => {}
            _ => {
                // fail (or a restart too many): the built-in page.
                resp = Resp { status: 503, reason: Bytes::from_static(b"VCL failed"), headers: Headers::default(), is_streaming: false };
                let mut t = Task::new(&policy::NoEnv);
                t.req = Some(req);
                t.resp = Some(&mut resp);
                t.body = Some(&mut body);
                policy::builtin(Sub::Synth, &mut t);
            }
        }
        let close = !ctx.keep || ctx.framing != Framing::None;
        let tx = self.send_synth(c, &mut log, rxid, &resp, &body, close, ctx.head_only).await;
        self.end_req(log, &mut clock, rxid, (ctx.hdr_rx, ctx.body_rx), tx);
        Step::Done(if !close && tx.0 > 0 { None } else { Some(Reason::RespClose) })
    }

    /// Send the built-in error page without running the policy (requests
    /// too malformed for it); returns the (header, body) bytes written,
    /// zeros if the client was gone.
    pub(crate) async fn synth(&mut self, c: &mut Client, log: &mut Batch, rxid: u32, status: u16, reason: &str, close: bool) -> (u64, u64) {
        let mut resp = Resp {
            status,
            reason: Bytes::copy_from_slice(reason.as_bytes()),
            headers: Headers(vec![
                (Bytes::from_static(b"Date"), Bytes::from(http_date(now()))),
                (Bytes::from_static(b"Server"), Bytes::from_static(b"cachekit")),
            ]),
            is_streaming: false,
        };
        let mut body = Vec::new();
        let mut r = Req { xid: rxid, ..Req::default() };
        {
            let mut t = Task::new(&policy::NoEnv);
            t.log = Some((log, rxid, LogSide::Client));
            t.req = Some(&mut r);
            t.resp = Some(&mut resp);
            t.body = Some(&mut body);
            run_sub(&policy::Builtin, Sub::Synth, &mut t);
        }
        self.send_synth(c, log, rxid, &resp, &body, close, false).await
    }

    /// Write a response with a body in hand; returns the (header, body)
    /// bytes written, zeros if the client was gone.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn send_synth(
        &mut self,
        c: &mut Client,
        log: &mut Batch,
        rxid: u32,
        resp: &Resp,
        body: &[u8],
        close: bool,
        head_only: bool,
    ) -> (u64, u64) {
        let mut wire = std::mem::take(&mut self.wire);
        let framing = Some((&b"Content-Length"[..], body.len().to_string()));
        let mut headers = resp.headers.clone();
        headers.unset("content-length");
        self.write_head(&mut wire, log, rxid, resp.status, &resp.reason, &headers, None, framing, !close, false);
        let hdr = wire.len() as u64;
        let body = if head_only { &[][..] } else { body };
        wire.extend_from_slice(body);
        self.arm_send(c);
        let ok = c.io.write_all(&wire).await.is_ok();
        self.wire = wire;
        if ok {
            (hdr, body.len() as u64)
        } else {
            (0, 0)
        }
    }

    /// Deliver vcl_backend_error's page to a pass: through vcl_deliver.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn deliver_synthetic(
        &mut self,
        c: &mut Client,
        req: &mut Req,
        mut resp: Resp,
        body: Vec<u8>,
        mut log: Batch,
        mut clock: Clock,
        ctx: &mut ReqCtx,
    ) -> Step {
        let rxid = ctx.rxid;
        let action = {
            let policy = self.policy();
            let mut t = self.task(&mut log, rxid);
            t.req = Some(req);
            t.resp = Some(&mut resp);
            run_sub(&*policy, Sub::Deliver, &mut t)
        };
        if action != Action::Deliver {
            return self.divert(c, req, log, clock, ctx, action).await;
        }
        let close = !ctx.keep || ctx.framing != Framing::None;
        let tx = self.send_synth(c, &mut log, rxid, &resp, &body, close, ctx.head_only).await;
        self.end_req(log, &mut clock, rxid, (ctx.hdr_rx, ctx.body_rx), tx);
        Step::Done(if !close && tx.0 > 0 { None } else { Some(Reason::RespClose) })
    }
}
