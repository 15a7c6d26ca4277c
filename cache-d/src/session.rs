//! A client connection: read requests (keep-alive, pipelining), hand each to
//! the backend, stream the answer back, and log the session and each request
//! as Varnish does (`Begin sess`, `Link req`, `SessClose`...).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use common::counters::C;
use common::vsl::{Batch, Side as LogSide, Tag};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::cache::ObjCore;
use crate::error::{Error, Side};
use crate::fetch::{Fetch, HeadOut};
use crate::http::{self, BufConn, Framing, Head, HeadError, Parsed, Transfer};
use crate::miss::{self, Fetched};
use crate::policy::{run_sub, Action, Bereq, Headers, ObjView, Policy, Req, Resp, Sub, Task};
use crate::server::Shared;
use crate::util::now;

pub(crate) type Client = BufConn<crate::clientio::ClientIo<TcpStream>>;

/// Request body bytes read before a pass takes a backend connection.
const PREFILL: usize = 64 * 1024;

/// Session records are flushed to the log once this many bytes gather.
const SESSION_LOG_FLUSH: usize = 4096;

/// Why a session ended (SessClose reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    RemClose,
    ReqClose,
    ReqHttp10,
    RxJunk,
    RxOverflow,
    RxTimeout,
    RxBody,
    RxCloseIdle,
    TxError,
    RespClose,
    TxPipe,
    /// The request's task failed (a caught panic).
    VclFailure,
}

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::RemClose => "REM_CLOSE",
            Reason::ReqClose => "REQ_CLOSE",
            Reason::ReqHttp10 => "REQ_HTTP10",
            Reason::RxJunk => "RX_JUNK",
            Reason::RxOverflow => "RX_OVERFLOW",
            Reason::RxTimeout => "RX_TIMEOUT",
            Reason::RxBody => "RX_BODY",
            Reason::RxCloseIdle => "RX_CLOSE_IDLE",
            Reason::TxError => "TX_ERROR",
            Reason::RespClose => "RESP_CLOSE",
            Reason::TxPipe => "TX_PIPE",
            Reason::VclFailure => "VCL_FAILURE",
        }
    }
    /// Varnish's MAIN.sc_* counter for this reason.
    fn counter(self) -> C {
        match self {
            Reason::RemClose => C::ScRemClose,
            Reason::ReqClose => C::ScReqClose,
            Reason::ReqHttp10 => C::ScReqHttp10,
            Reason::RxJunk => C::ScRxJunk,
            Reason::RxOverflow => C::ScRxOverflow,
            Reason::RxTimeout => C::ScRxTimeout,
            Reason::RxBody => C::ScRxBody,
            Reason::RxCloseIdle => C::ScRxCloseIdle,
            Reason::TxError => C::ScTxError,
            Reason::RespClose => C::ScRespClose,
            Reason::TxPipe => C::ScTxPipe,
            Reason::VclFailure => C::ScVclFailure,
        }
    }
    fn is_error(self) -> bool {
        !matches!(self, Reason::RemClose | Reason::ReqClose | Reason::ReqHttp10 | Reason::RxCloseIdle | Reason::RespClose | Reason::TxPipe)
    }
}

/// One connection's context.
pub(crate) struct Sess {
    pub(crate) sh: Arc<Shared>,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    listen: Arc<str>,
    vxid: u32,
    log: Batch,
    /// Reusable buffers: response/bereq heads and chunk framing.
    pub(crate) wire: Vec<u8>,
    pub(crate) scratch: Vec<u8>,
    /// The policy the current request started with (vcl.use does not
    /// change it mid-request).
    pub(crate) active: Option<Arc<crate::server::Active>>,
    /// The current request is HTTP/1.0: a kept connection says so.
    http10: bool,
}

/// What the steps after recv need to know about the request.
#[derive(Clone, Copy)]
pub(crate) struct ReqCtx {
    pub(crate) rxid: u32,
    /// Bytes received (head, and any body already read).
    pub(crate) hdr_rx: u64,
    /// May the connection stay open after this response?
    pub(crate) keep: bool,
    pub(crate) head_only: bool,
    /// The request body's framing; None once it has been read.
    pub(crate) framing: Framing,
    /// Body bytes read so far.
    pub(crate) body_rx: u64,
    /// The body was read (and is gone: a restart cannot send it again).
    pub(crate) body_consumed: bool,
}

/// Why the session ends after a response that went out whole.
pub(crate) fn close_reason(keep: bool, req: &Req) -> Option<Reason> {
    if keep {
        None
    } else if req.minor == 0 {
        Some(Reason::ReqHttp10)
    } else if req.headers.get("connection").is_some_and(|v| v.eq_ignore_ascii_case(b"close")) {
        Some(Reason::ReqClose)
    } else {
        Some(Reason::RespClose)
    }
}

pub async fn run(
    sh: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    listen: Arc<str>,
    mut stop: watch::Receiver<bool>,
) {
    let t0 = now();
    let vxid = sh.next_vxid();
    let mut log = Batch::with_reclen(sh.params().vsl_reclen);
    log.rec(Tag::Begin, LogSide::Client, vxid, b"sess 0 HTTP/1");
    log.recf(
        Tag::SessOpen,
        LogSide::Client,
        vxid,
        format_args!("{} {} {} {} {} {:.6} {}", peer.ip(), peer.port(), listen, local.ip(), local.port(), t0, stream.as_raw_fd()),
    );
    let mut s =
        Sess { active: None, http10: false, sh, peer, local, listen, vxid, log, wire: Vec::with_capacity(1024), scratch: Vec::new() };
    let mut c = BufConn::new(crate::clientio::ClientIo::new(stream));
    let reason = loop {
        match read_head(&s, &mut c, &mut stop).await {
            Ok((head, t_start)) => {
                if let Some(reason) = s.request(&mut c, head, t_start).await {
                    break reason;
                }
            }
            Err(ReadErr::Closed(r)) => break r,
            Err(ReadErr::Bad { err, t_start }) => {
                s.bad_request(&mut c, err, t_start).await;
                break if err == HeadError::TooLarge { Reason::RxOverflow } else { Reason::RxJunk };
            }
        }
    };
    let sh = &s.sh;
    sh.seg.add(if reason.is_error() { C::SessClosedErr } else { C::SessClosed }, 1);
    sh.seg.add(reason.counter(), 1);
    s.log.recf(Tag::SessClose, LogSide::Client, s.vxid, format_args!("{} {:.3}", reason.name(), now() - t0));
    s.log.rec(Tag::End, LogSide::Client, s.vxid, b"");
    sh.seg.log(&s.log);
    let _ = c.io.shutdown().await;
}

/// A session whose task panicked: its connection is gone (closed when the
/// task was dropped); say so in the log and the counters. The records the
/// session had gathered went with it.
pub(crate) fn failed(sh: &Shared, peer: SocketAddr, why: &str) {
    let vxid = sh.next_vxid();
    let mut log = Batch::with_reclen(sh.params().vsl_reclen);
    log.rec(Tag::Begin, LogSide::Client, vxid, b"sess 0 HTTP/1");
    log.recf(Tag::Error, LogSide::Client, vxid, format_args!("request task failed ({} {}): {why}", peer.ip(), peer.port()));
    log.rec(Tag::SessClose, LogSide::Client, vxid, b"VCL_FAILURE 0.000");
    log.rec(Tag::End, LogSide::Client, vxid, b"");
    sh.seg.log(&log);
    sh.seg.add(C::SessClosedErr, 1);
    sh.seg.add(Reason::VclFailure.counter(), 1);
}

enum ReadErr {
    Closed(Reason),
    Bad { err: HeadError, t_start: f64 },
}

/// Wait for a complete request head. An idle connection is closed when the
/// daemon shuts down or after `timeout_idle`; once a request's first byte
/// is in, the whole head must follow within `timeout_req` (however the
/// client spaces its bytes: a slowloris gets RX_TIMEOUT).
async fn read_head(s: &Sess, c: &mut Client, stop: &mut watch::Receiver<bool>) -> Result<(Head, f64), ReadErr> {
    let p = s.sh.params();
    let mut t_start = if c.buf.is_empty() { None } else { Some(now()) };
    let mut head_deadline = None;
    loop {
        if !c.buf.is_empty() {
            let t = *t_start.get_or_insert_with(now);
            match http::parse_request(&mut c.buf, p.http_max_hdr, p.http_req_size) {
                Ok(Parsed::Complete(h)) => return Ok((h, t)),
                Ok(Parsed::Partial) => {}
                Err(err) => return Err(ReadErr::Bad { err, t_start: t }),
            }
        }
        let idle = c.buf.is_empty();
        let wait = if idle {
            p.timeout_idle
        } else {
            let dl = *head_deadline.get_or_insert_with(|| tokio::time::Instant::now() + p.timeout_req);
            dl.saturating_duration_since(tokio::time::Instant::now())
        };
        tokio::select! {
            r = c.fill(wait) => match r {
                Ok(0) if idle => return Err(ReadErr::Closed(Reason::RemClose)),
                Ok(0) => return Err(ReadErr::Closed(Reason::RxJunk)),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return Err(ReadErr::Closed(if idle { Reason::RxCloseIdle } else { Reason::RxTimeout }))
                }
                Err(_) => return Err(ReadErr::Closed(Reason::RemClose)),
            },
            _ = stop.wait_for(|s| *s), if idle => return Err(ReadErr::Closed(Reason::RxCloseIdle)),
        }
    }
}

/// Timestamps of one request.
pub(crate) struct Clock {
    start: f64,
    last: f64,
}

impl Clock {
    pub(crate) fn stamp(&mut self, log: &mut Batch, vxid: u32, label: &str) {
        let t = now();
        log.recf(Tag::Timestamp, LogSide::Client, vxid, format_args!("{label}: {t:.6} {:.6} {:.6}", t - self.start, t - self.last));
        self.last = t;
    }
}

/// How one pass through the state machine ended: the response went out
/// (and whether the session ends), or the policy restarted the request.
pub(crate) enum Step {
    Done(Option<Reason>),
    Restart(Batch, Clock),
}

/// A cached object as vcl_hit (`full`) or vcl_deliver sees it.
pub(crate) fn obj_view(oc: &ObjCore, t: f64, full: bool) -> ObjView {
    let life = &oc.obj.life;
    ObjView {
        status: oc.obj.status,
        reason: oc.obj.reason.clone(),
        headers: if full { oc.obj.headers.to_headers() } else { Headers::default() },
        ttl: life.ttl_left(t),
        grace: life.grace,
        keep: life.keep,
        age: (t - life.t_origin).max(0.0),
        hits: oc.hits(),
        uncacheable: oc.obj.kind != crate::cache::Kind::Normal || !oc.stored(),
    }
}

impl Sess {
    /// A response (or 100 Continue) starts: its writes must be done within
    /// send_timeout, none blocked longer than idle_send_timeout.
    pub(crate) fn arm_send(&self, c: &mut Client) {
        let p = self.sh.params();
        c.io.arm(p.send_timeout, p.idle_send_timeout);
    }

    /// The current request's policy.
    pub(crate) fn policy(&self) -> Arc<dyn Policy> {
        match &self.active {
            Some(a) => a.policy.clone(),
            None => self.sh.policy().policy.clone(),
        }
    }

    /// A client-side task: the request's log, the connection's addresses.
    pub(crate) fn task<'a>(&'a self, log: &'a mut Batch, rxid: u32) -> Task<'a> {
        let mut t = Task::new(&*self.sh);
        t.log = Some((log, rxid, LogSide::Client));
        t.client = Some(self.peer);
        t.local = Some(self.local);
        t
    }

    /// Run a client-side subroutine that sees only `req`.
    pub(crate) fn vcl_req(&self, sub: Sub, req: &mut Req, log: &mut Batch, rxid: u32) -> Action {
        let policy = self.policy();
        let mut t = self.task(log, rxid);
        t.req = Some(req);
        run_sub(&*policy, sub, &mut t)
    }

    /// Where a client-side subroutine's restart, synth or fail leads.
    pub(crate) async fn divert(
        &mut self,
        c: &mut Client,
        req: &mut Req,
        log: Batch,
        clock: Clock,
        ctx: &mut ReqCtx,
        action: Action,
    ) -> Step {
        match action {
            Action::Restart => Step::Restart(log, clock),
            Action::Synth(s, r) => self.vcl_synth(c, req, log, clock, ctx, s, &r).await,
            _ => self.vcl_synth(c, req, log, clock, ctx, 503, "VCL failed").await,
        }
    }

    fn begin_req(&mut self, t_start: f64) -> (u32, Batch, Clock) {
        let rxid = self.sh.next_vxid();
        self.log.recf(Tag::Link, LogSide::Client, self.vxid, format_args!("req {rxid} rxreq"));
        // A long keep-alive session would grow its record buffer without
        // bound: flush it in pieces, as Varnish's vsl_buffer does (readers
        // gather a transaction's records by vxid until its End).
        if self.log.len() >= SESSION_LOG_FLUSH {
            self.sh.seg.log(&self.log);
            self.log.clear();
        }
        let mut log = Batch::with_reclen(self.sh.params().vsl_reclen);
        log.recf(Tag::Begin, LogSide::Client, rxid, format_args!("req {} rxreq", self.vxid));
        log.recf(Tag::Timestamp, LogSide::Client, rxid, format_args!("Start: {t_start:.6} 0.000000 0.000000"));
        let mut clock = Clock { start: t_start, last: t_start };
        clock.stamp(&mut log, rxid, "Req");
        log.recf(Tag::ReqStart, LogSide::Client, rxid, format_args!("{} {} {}", self.peer.ip(), self.peer.port(), self.listen));
        (rxid, log, clock)
    }

    /// Serve one request through the state machine (recv → hash → lookup →
    /// hit/miss/pass/pipe/purge/synth → deliver), again from vcl_recv on a
    /// restart. Returns Some(reason) when the session must end.
    async fn request(&mut self, c: &mut Client, head: Head, t_start: f64) -> Option<Reason> {
        let sh = self.sh.clone();
        if sh.debug_panic_request.load(std::sync::atomic::Ordering::Relaxed)
            && sh.debug_panic_request.swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            panic!("Don't panic (debug.panic.request was asked to)");
        }
        let (rxid, mut log, mut clock) = self.begin_req(t_start);
        let side = LogSide::Client;
        log.rec(Tag::ReqMethod, side, rxid, head.method());
        log.rec(Tag::ReqUrl, side, rxid, head.url());
        log.rec(Tag::ReqProtocol, side, rxid, head.protocol().as_bytes());
        for (n, v) in head.iter() {
            log.rec_parts(Tag::ReqHeader, side, rxid, &[n, b": ", v]);
        }
        let hdr_rx = head.wire_len() as u64;
        let hdr_len = sh.params().http_req_hdr_len;
        let framing = match http::request_framing(&head).and_then(|f| match head.iter().any(|(n, v)| n.len() + 2 + v.len() > hdr_len) {
            true => Err("a header is longer than http_req_hdr_len"),
            false => http::request_checks(&head).map(|()| f),
        }) {
            Ok(f) => f,
            Err(why) => {
                sh.seg.add(C::ClientReq400, 1);
                log.rec(Tag::Error, side, rxid, why.as_bytes());
                let tx = self.synth(c, &mut log, rxid, 400, "Bad Request", true).await;
                self.end_req(log, &mut clock, rxid, (hdr_rx, 0), tx);
                return Some(Reason::RxJunk);
            }
        };
        // Expect: only 100-continue is known (answered when the body is read).
        if let Some(e) = head.get("expect") {
            if !e.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                sh.seg.add(C::ClientReq417, 1);
                let tx = self.synth(c, &mut log, rxid, 417, "Expectation Failed", true).await;
                self.end_req(log, &mut clock, rxid, (hdr_rx, 0), tx);
                return Some(Reason::RxJunk);
            }
            if framing != Framing::None && c.buf.is_empty() {
                self.arm_send(c);
                if c.io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
                    return Some(Reason::TxError);
                }
            }
        }
        sh.seg.add(C::ClientReq, 1);
        sh.seg.add(C::SReqHdrbytes, hdr_rx);
        // HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only
        // when asked to (ApacheBench -k).
        let keep = match head.minor {
            0 => head.has_token("connection", "keep-alive") && !head.has_token("connection", "close"),
            _ => !head.has_token("connection", "close"),
        };
        let mut headers = Headers(head.headers.iter().map(|(n, v)| (head.raw.slice(n.clone()), head.raw.slice(v.clone()))).collect());
        let mut url = head.raw.slice(head.url.clone());
        // An absolute-form target: its authority becomes Host and the URL
        // keeps the path (as Varnish), so the cache key is the same as for
        // the origin-form request.
        if let Some((host, path)) = http::absolute_form(head.url()) {
            let (host, path) = (head.raw.slice_ref(host), head.raw.slice_ref(path));
            if headers.has("host") {
                log.rec(Tag::ReqUnset, side, rxid, &[b"Host: ", &headers.get("host").cloned().unwrap_or_default()[..]].concat());
            }
            log.rec_parts(Tag::ReqHeader, side, rxid, &[b"Host: ", &host]);
            headers.set("Host", host);
            url = path;
        }
        self.http10 = head.minor == 0;
        let mut req = Req {
            method: head.raw.slice(head.first.clone()),
            url,
            minor: head.minor,
            headers,
            server_ip: self.local.ip().to_string(),
            client_ip: Some(self.peer.ip()),
            xid: rxid,
            ..Req::default()
        };
        // This request runs on the policy active now, to its end.
        // (Held only by the session, so vcl.list's busy count is exact.)
        let active = sh.policy();
        log.rec(Tag::VclUse, side, rxid, active.name.as_bytes());
        self.active = Some(active);
        let p = sh.params();
        // How fast the body must arrive; every reader of it keeps to this.
        c.io.pace = Some(http::Pace::new(p.timeout_reqbody, p.reqbody_min_rate));
        let head_only = &req.method[..] == b"HEAD";
        let mut ctx = ReqCtx { rxid, hdr_rx, keep, head_only, framing, body_rx: 0, body_consumed: false };
        loop {
            match self.process(c, &mut req, log, clock, &mut ctx).await {
                Step::Done(r) => {
                    // Idle keep-alive sessions do not keep a program busy.
                    self.active = None;
                    return r;
                }
                Step::Restart(l, k) => {
                    (log, clock) = (l, k);
                    req.restarts += 1;
                    clock.stamp(&mut log, rxid, "Restart");
                }
            }
        }
    }

    /// One pass: vcl_recv, vcl_hash, and what they chose.
    async fn process(&mut self, c: &mut Client, req: &mut Req, mut log: Batch, clock: Clock, ctx: &mut ReqCtx) -> Step {
        let sh = self.sh.clone();
        let rxid = ctx.rxid;
        let action = if req.restarts > sh.params().max_restarts {
            log.rec(Tag::VclError, LogSide::Client, rxid, b"Too many restarts");
            Action::Synth(503, "Too many restarts".into())
        } else {
            self.vcl_req(Sub::Recv, req, &mut log, rxid)
        };
        ctx.head_only = &req.method[..] == b"HEAD";
        // vcl_hash runs whatever vcl_recv chose (as in Varnish), except
        // after fail or restart; its fail fails the request.
        let mut key = Vec::with_capacity(req.url.len() + 32);
        let mut action = action;
        if !matches!(action, Action::Fail | Action::Restart) {
            let policy = self.policy();
            let mut t = self.task(&mut log, rxid);
            t.req = Some(req);
            t.key = Some(&mut key);
            if run_sub(&*policy, Sub::Hash, &mut t) == Action::Fail {
                action = Action::Fail;
            }
            req.hash = Some(bytes::Bytes::copy_from_slice(&key));
        }
        match action {
            Action::Pipe if ctx.body_consumed => {
                // The body was read by an earlier pass: nothing to pipe.
                self.vcl_synth(c, req, log, clock, ctx, 503, "Service Unavailable").await
            }
            Action::Pipe => Step::Done(crate::pipe::pipe(self, c, req, log, clock, *ctx).await),
            Action::Pass => self.vcl_pass(c, req, log, clock, ctx).await,
            Action::Purge | Action::Hash => {
                if let Err(e) = self.discard_body(c, ctx).await {
                    return Step::Done(self.bad_body(c, log, clock, *ctx, &e).await);
                }
                if action == Action::Purge {
                    let n = sh.cache.purge(&key);
                    sh.seg.add(C::NPurges, 1);
                    sh.seg.add(C::NObjPurged, n as u64);
                    let a = self.vcl_req(Sub::Purge, req, &mut log, rxid);
                    return self.divert(c, req, log, clock, ctx, a).await;
                }
                self.lookup(c, req, key, log, clock, ctx).await
            }
            other => self.divert(c, req, log, clock, ctx, other).await,
        }
    }

    /// Read and drop a request body the cache path does not forward
    /// (a GET with a body).
    async fn discard_body(&mut self, c: &mut Client, ctx: &mut ReqCtx) -> Result<(), Error> {
        if ctx.framing == Framing::None {
            return Ok(());
        }
        let t = Transfer {
            framing: ctx.framing,
            chunk_out: false,
            src_side: Side::Client,
            dst_side: Side::Internal,
            read_timeout: self.sh.params().timeout_idle,
            pace: c.io.pace,
        };
        let m = http::transfer(c, &mut tokio::io::sink(), &t, &mut self.scratch).await?;
        self.sh.seg.add(C::SReqBodybytes, m.rx);
        ctx.body_rx += m.rx;
        ctx.framing = Framing::None;
        ctx.body_consumed = true;
        Ok(())
    }

    /// The request body could not be read: a malformed body (bad chunk
    /// framing) gets 400; a client that went away gets nothing.
    async fn bad_body(&mut self, c: &mut Client, mut log: Batch, mut clock: Clock, ctx: ReqCtx, e: &Error) -> Option<Reason> {
        log.recf(Tag::Error, LogSide::Client, ctx.rxid, format_args!("request body: {e}"));
        let tx = if e.io.is_none() {
            self.sh.seg.add(C::ClientReq400, 1);
            self.synth(c, &mut log, ctx.rxid, 400, "Bad Request", true).await
        } else {
            (0, 0)
        };
        self.end_req(log, &mut clock, ctx.rxid, (ctx.hdr_rx, ctx.body_rx), tx);
        Some(Reason::RxBody)
    }

    /// vcl_pass, then the pass.
    pub(crate) async fn vcl_pass(&mut self, c: &mut Client, req: &mut Req, mut log: Batch, clock: Clock, ctx: &mut ReqCtx) -> Step {
        match self.vcl_req(Sub::Pass, req, &mut log, ctx.rxid) {
            Action::Fetch => self.pass(c, req, log, clock, ctx).await,
            other => self.divert(c, req, log, clock, ctx, other).await,
        }
    }

    /// Pass: fetch for this request alone, its body streamed straight
    /// through, nothing stored.
    async fn pass(&mut self, c: &mut Client, req: &mut Req, mut log: Batch, mut clock: Clock, ctx: &mut ReqCtx) -> Step {
        let sh = self.sh.clone();
        let (rxid, side) = (ctx.rxid, LogSide::Client);
        // A body that is still on its way is waited for here, before a
        // backend connection is taken for it.
        if let Err(e) = http::prefill(c, ctx.framing, PREFILL, sh.params().timeout_idle, c.io.pace).await {
            return Step::Done(self.bad_body(c, log, clock, *ctx, &e).await);
        }
        sh.seg.add(C::SPass, 1);
        let bxid = sh.next_vxid();
        log.recf(Tag::Link, side, rxid, format_args!("bereq {bxid} pass"));
        let mut fetch = Fetch::new(&sh, bxid, rxid, "pass");
        let mut bereq = Bereq::from_req(req, bxid);
        bereq.uncacheable = true;
        let framing = ctx.framing;
        let policy = self.policy();
        let addrs = (self.peer, self.local);
        let fetched = miss::backend_side(&sh, &*policy, &mut fetch, &mut bereq, Some(c), framing, addrs, None).await;
        if framing != Framing::None && (fetch.req_body_rx > 0 || fetch.body_tx > 0) {
            ctx.body_rx += fetch.req_body_rx;
            ctx.framing = Framing::None;
            ctx.body_consumed = true;
        }
        let (resp, beresp) = match fetched {
            Fetched::Resp { resp, beresp, .. } => (resp, beresp),
            Fetched::Synthetic { beresp, body, .. } => {
                fetch.finish(&sh, Some(body.len() as u64), None);
                fetch.end(&sh);
                clock.stamp(&mut log, rxid, "Fetch");
                let resp = Resp { status: beresp.status, reason: beresp.reason, headers: beresp.headers, is_streaming: false };
                return self.deliver_synthetic(c, req, resp, body, log, clock, ctx).await;
            }
            Fetched::Abandoned(e) => {
                fetch.note(&e);
                fetch.finish(&sh, None, None);
                fetch.end(&sh);
                return self.vcl_synth(c, req, log, clock, ctx, 503, "Backend fetch failed").await;
            }
            Fetched::Client(e) => {
                fetch.error(&sh, &e);
                fetch.finish(&sh, None, None);
                fetch.end(&sh);
                return Step::Done(self.bad_body(c, log, clock, *ctx, &e).await);
            }
        };
        let body_rx = ctx.body_rx;
        let hdr_rx = ctx.hdr_rx;
        let mut keep = ctx.keep && ctx.framing == Framing::None;
        clock.stamp(&mut log, rxid, "Fetch");
        let be_head = &resp.head;
        let backend_close = be_head.minor == 0 || be_head.has_token("connection", "close");
        let chunk_out = matches!(resp.framing, Framing::Chunked | Framing::Eof) && req.minor >= 1;
        if matches!(resp.framing, Framing::Chunked | Framing::Eof) && !chunk_out {
            keep = false; // HTTP/1.0 client: the body ends at close.
        }
        let mut out = Resp { status: beresp.status, reason: beresp.reason, headers: beresp.headers, is_streaming: true };
        out.headers.unset("x-varnish");
        let action = {
            let mut t = self.task(&mut log, rxid);
            t.req = Some(req);
            t.resp = Some(&mut out);
            run_sub(&*policy, Sub::Deliver, &mut t)
        };
        if action != Action::Deliver {
            fetch.finish(&sh, None, None);
            fetch.end(&sh);
            return self.divert(c, req, log, clock, ctx, action).await;
        }
        let mut wire = std::mem::take(&mut self.wire);
        let framing_header = match resp.framing {
            Framing::Length(n) => Some((&b"Content-Length"[..], n.to_string())),
            Framing::Chunked | Framing::Eof if chunk_out => Some((&b"Transfer-Encoding"[..], "chunked".to_string())),
            _ => None,
        };
        self.write_head(&mut wire, &mut log, rxid, out.status, &out.reason, &out.headers, None, framing_header, keep, false);
        clock.stamp(&mut log, rxid, "Process");
        let hdr_tx = wire.len() as u64;
        let mut be = resp.conn;
        // A small body that arrived with the head goes out in the same write.
        let inline = match resp.framing {
            Framing::Length(n) if n <= 64 * 1024 && be.buf.len() as u64 >= n => n,
            _ => 0,
        };
        wire.extend_from_slice(&be.buf.split_to(inline as usize));
        self.arm_send(c);
        let head_sent = c.io.write_all(&wire).await;
        self.wire = wire;
        if head_sent.is_err() {
            fetch.error(&sh, &Error::new(Side::Client, "client closed before the response head was sent"));
            fetch.finish(&sh, None, None);
            fetch.end(&sh);
            self.end_req(log, &mut clock, rxid, (hdr_rx, body_rx), (0, 0));
            return Step::Done(Some(Reason::TxError));
        }
        let t = Transfer {
            framing: if inline > 0 { Framing::Length(0) } else { resp.framing },
            chunk_out,
            src_side: Side::Backend,
            dst_side: Side::Client,
            read_timeout: sh.params().between_bytes_timeout,
            pace: None,
        };
        let moved = http::transfer(&mut be, &mut c.io, &t, &mut self.scratch).await.map(|mut m| {
            m.rx += inline;
            m.tx += inline;
            m.payload += inline;
            m
        });
        match moved {
            Ok(m) => {
                let reusable = !backend_close && resp.framing != Framing::Eof;
                fetch.finish(&sh, Some(m.payload), Some((be, reusable)));
                fetch.end(&sh);
                self.end_req(log, &mut clock, rxid, (hdr_rx, body_rx), (hdr_tx, m.tx));
                Step::Done(close_reason(keep, req))
            }
            Err(e) => {
                // Never end a body cleanly that did not arrive whole: close.
                if e.side == Side::Backend {
                    fetch.error(&sh, &e);
                }
                fetch.finish(&sh, None, None);
                fetch.end(&sh);
                self.end_req(log, &mut clock, rxid, (hdr_rx, body_rx), (hdr_tx, 0));
                Step::Done(Some(if e.side == Side::Backend { Reason::RespClose } else { Reason::TxError }))
            }
        }
    }

    /// Write a response head into `wire` (cleared first) and log it:
    /// status line, `headers`, then X-Varnish (with the object's vxid on
    /// hits), Via, the framing header, and Connection: close if needed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_head(
        &self,
        wire: &mut Vec<u8>,
        log: &mut Batch,
        rxid: u32,
        status: u16,
        reason: &[u8],
        headers: &Headers,
        obj_vxid: Option<u32>,
        framing: Option<(&[u8], String)>,
        keep: bool,
        accept_ranges: bool,
    ) {
        use std::io::Write as _;
        let side = LogSide::Client;
        wire.clear();
        let _ = write!(wire, "HTTP/1.1 {status} ");
        wire.extend_from_slice(reason);
        wire.extend_from_slice(b"\r\n");
        log.rec(Tag::RespProtocol, side, rxid, b"HTTP/1.1");
        log.recf(Tag::RespStatus, side, rxid, format_args!("{status}"));
        log.rec(Tag::RespReason, side, rxid, reason);
        let mut out = HeadOut { wire, log, tag: Tag::RespHeader, side, vxid: rxid };
        for (n, v) in headers.iter() {
            out.header(n, v);
        }
        let xv = match obj_vxid {
            Some(o) => format!("{rxid} {o}"),
            None => rxid.to_string(),
        };
        out.header(b"X-Varnish", xv.as_bytes());
        out.header(b"Via", self.sh.via.as_bytes());
        if accept_ranges {
            out.header(b"Accept-Ranges", b"bytes");
        }
        if let Some((n, v)) = framing {
            out.header(n, v.as_bytes());
        }
        if !keep {
            out.header(b"Connection", b"close");
        } else if self.http10 {
            out.header(b"Connection", b"keep-alive");
        }
        out.wire.extend_from_slice(b"\r\n");
    }

    /// Log the end of a request: Resp timestamp, ReqAcct, End; add the
    /// byte counters.
    pub(crate) fn end_req(&self, mut log: Batch, clock: &mut Clock, rxid: u32, rx: (u64, u64), tx: (u64, u64)) {
        let sh = &self.sh;
        clock.stamp(&mut log, rxid, "Resp");
        log.recf(Tag::ReqAcct, LogSide::Client, rxid, format_args!("{} {} {} {} {} {}", rx.0, rx.1, rx.0 + rx.1, tx.0, tx.1, tx.0 + tx.1));
        log.rec(Tag::End, LogSide::Client, rxid, b"");
        sh.seg.add(C::SRespHdrbytes, tx.0);
        sh.seg.add(C::SRespBodybytes, tx.1);
        sh.seg.log(&log);
    }

    /// A malformed request: 400, counted and logged, then the session ends.
    async fn bad_request(&mut self, c: &mut Client, err: HeadError, t_start: f64) {
        let (rxid, mut log, mut clock) = self.begin_req(t_start);
        self.sh.seg.add(C::ClientReq400, 1);
        let n = c.buf.len();
        log.rec(Tag::HttpGarbage, LogSide::Client, rxid, &c.buf[..n]);
        log.rec(Tag::Error, LogSide::Client, rxid, err.text().as_bytes());
        let tx = self.synth(c, &mut log, rxid, 400, "Bad Request", true).await;
        self.end_req(log, &mut clock, rxid, (n as u64, 0), tx);
    }
}
