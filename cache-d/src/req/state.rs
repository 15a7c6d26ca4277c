//! What a request carries through the client-side steps: the connection's
//! context ([`Sess`]), the request in progress ([`Request`], Varnish's
//! `struct req`), its timestamps ([`crate::util::Clock`]) and the steps themselves
//! ([`Step`]).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::counters::C;
use common::log::vsl::{Batch, Decimal, Side as LogSide, Tag};
use tokio::sync::mpsc;

use crate::cache::{BusyGuard, Kind, ObjRef};
use crate::http1::head::{Framing, HeadOut};
use crate::listen::On;
use crate::params::Params;
use crate::req::reason::Reason;
use crate::req::transport::Transport;
use crate::shared::{Active, Shared};
use crate::util::{Clock, Secs};
use crate::vcl::model::{Action, Bereq, Ends, Headers, ObjView, Req, Resp, Sub, Task, TlsInfo};
use crate::vcl::policy::run_sub;

/// Session records are flushed to the log once this many bytes gather.
const SESSION_LOG_FLUSH: usize = 4096;

/// One connection's context.
pub struct Sess {
    pub sh: Arc<Shared>,
    /// The connection's addresses (with what a PROXY header said).
    pub ends: Ends,
    pub listen: Arc<str>,
    pub vxid: u32,
    /// The session's own records (Link req..., SessClose).
    pub log: Batch,
    /// Reusable buffers: response heads and body framing.
    pub wire: Vec<u8>,
    pub scratch: Vec<u8>,
    /// The current request's HTTP version: 0 for 1.0 (a kept connection
    /// says so), 1 for 1.1, 2 for an HTTP/2 stream.
    pub minor: u8,
    /// What the connection's TLS negotiated (None: not TLS).
    pub tls: Option<Arc<TlsInfo>>,
    /// When the session began.
    pub t0: f64,
    /// sess.timeout_idle as VCL set it (None: the parameter).
    pub timeout_idle: Option<std::time::Duration>,
    /// `ends` as text, made at the first request that needs it; None
    /// again when a PROXY header changes `ends`.
    pub addr_text: Option<AddrText>,
}

/// A session's addresses as every request writes them: formatted once
/// per session, not per request.
#[derive(Clone)]
pub struct AddrText {
    /// client.ip (X-Forwarded-For).
    pub client_ip: Bytes,
    /// server.ip (the built-in vcl_hash without a Host).
    pub server_ip: Arc<str>,
    /// ReqStart's payload: client address, port, listener.
    pub req_start: Bytes,
}

impl Sess {
    /// A new session on a connection between `peer` and `local`
    /// accepted by listener `on`: its Begin and SessOpen records.
    pub fn open(sh: Arc<Shared>, peer: SocketAddr, local: SocketAddr, on: &On, fd: i32, tls: Option<Arc<TlsInfo>>) -> Sess {
        let t0 = crate::util::now();
        let (vxid, log) = sess_open(&sh, peer, local, on, t0, fd);
        Sess {
            sh,
            ends: Ends::open(peer, local, vxid, on.name.clone(), fd),
            listen: on.name.clone(),
            vxid,
            log,
            wire: Vec::with_capacity(1024),
            scratch: Vec::new(),
            minor: 1,
            tls,
            t0,
            timeout_idle: None,
            addr_text: None,
        }
    }

    /// The session's addresses as text (made on first use).
    pub fn addr_text(&mut self) -> &AddrText {
        let (ends, listen) = (&self.ends, &self.listen);
        self.addr_text.get_or_insert_with(|| {
            let client_ip = ends.client.ip().to_string();
            AddrText {
                req_start: Bytes::from(format!("{client_ip} {} {listen}", ends.client.port())),
                client_ip: Bytes::from(client_ip),
                server_ip: ends.server.ip().to_string().into(),
            }
        })
    }

    /// The context of one HTTP/2 (`minor` 2) or HTTP/3 (3) stream's
    /// request on this session: the same session, its own buffers and
    /// records (its Link record is written when the stream ends).
    pub fn for_stream(&self, minor: u8) -> Sess {
        Sess {
            sh: self.sh.clone(),
            ends: self.ends.clone(),
            listen: self.listen.clone(),
            vxid: self.vxid,
            log: self.sh.batch(),
            wire: Vec::with_capacity(1024),
            scratch: Vec::new(),
            minor,
            tls: self.tls.clone(),
            t0: self.t0,
            timeout_idle: self.timeout_idle,
            addr_text: self.addr_text.clone(),
        }
    }

    /// A request begins: its vxid, its log (Begin, Start, Req) and
    /// clock; the session links to it.
    pub fn begin_req(&mut self, t_start: f64, p: &Params) -> (u32, Batch, Clock) {
        let rxid = self.sh.next_vxid();
        self.log.rec_with(Tag::Link, LogSide::Client, self.vxid, |o| link(o, rxid, b" rxreq"));
        // A long keep-alive session would grow its record buffer without
        // bound: flush it in pieces, as Varnish's vsl_buffer does (readers
        // gather a transaction's records by vxid until its End).
        if self.log.len() >= SESSION_LOG_FLUSH {
            self.sh.seg.log(&self.log);
            self.log.clear();
        }
        let mut log = Batch::with_limits(p.vsl_reclen, p.vsl_mask);
        log.rec_with(Tag::Begin, LogSide::Client, rxid, |o| link(o, self.vxid, b" rxreq"));
        let mut clock = Clock::start(&mut log, LogSide::Client, rxid, t_start);
        clock.stamp(&mut log, rxid, "Req");
        (rxid, log, clock)
    }
}

/// A Link or Begin payload: "req VXID REASON" (REASON with its space).
fn link(o: &mut Vec<u8>, vxid: u32, reason: &[u8]) {
    o.extend_from_slice(b"req ");
    common::log::vsl::put_u64(o, vxid.into());
    o.extend_from_slice(reason);
}

/// A session's first records (Begin, SessOpen with the connection's ends
/// and descriptor) under a new vxid.
pub fn sess_open(sh: &Shared, peer: SocketAddr, local: SocketAddr, on: &On, t0: f64, fd: i32) -> (u32, Batch) {
    let vxid = sh.next_vxid();
    let mut log = sh.batch();
    log.rec_parts(Tag::Begin, LogSide::Client, vxid, &[b"sess 0 ", on.proto.transport().as_bytes()]);
    log.recf(
        Tag::SessOpen,
        LogSide::Client,
        vxid,
        format_args!("{} {} {} {} {} {} {fd}", peer.ip(), peer.port(), on.name, local.ip(), local.port(), Secs(t0)),
    );
    (vxid, log)
}

/// The steps of the client side. Each step function returns the next;
/// only the loop in [`crate::req`] moves between them.
pub enum Step {
    /// vcl_recv and vcl_hash.
    Recv,
    /// Purge the objects under this hash key, then vcl_purge.
    Purge(Vec<u8>),
    /// Look the hash key up in the cache.
    Lookup(Vec<u8>),
    /// vcl_hit on a found object; `guard` when this request refreshes a
    /// stale one in the background.
    Hit { oc: ObjRef, guard: Option<BusyGuard> },
    /// vcl_miss, then the fetch for the cache.
    Miss { guard: BusyGuard, stale: Option<ObjRef> },
    /// vcl_pass.
    Pass,
    /// The fetch for this request alone, streamed through.
    PassFetch,
    /// vcl_pipe, then the pipe.
    Pipe,
    /// vcl_deliver and the object's delivery; `hit` when it came from the
    /// cache (X-Varnish shows its vxid).
    /// `pass`: a pass's private object (no Accept-Ranges).
    Deliver { oc: ObjRef, hit: bool, pass: bool },
    /// A pass's vcl_backend_error page, through vcl_deliver.
    DeliverSynthetic { resp: Resp, body: Vec<u8> },
    /// vcl_synth and the synthetic response.
    Synth { status: u16, reason: String },
    /// Back to vcl_recv.
    Restart,
    /// The response went out (or could not): the session goes on (None)
    /// or ends for this reason.
    Done(Option<Reason>),
}

/// Where a subroutine's restart, synth or fail leads.
pub fn divert(action: Action) -> Step {
    match action {
        Action::Restart => Step::Restart,
        Action::Synth(status, reason) => Step::Synth { status, reason },
        _ => Step::Synth { status: 503, reason: "VCL failed".into() },
    }
}

/// One request on its way through the steps.
pub struct Request<'a, T> {
    pub sess: &'a mut Sess,
    pub conn: &'a mut T,
    pub sh: Arc<Shared>,
    /// The parameters this request runs with, read once as it starts (a
    /// change made meanwhile applies from the next request): a hit read
    /// them a dozen times through arc_swap.
    pub p: Arc<Params>,
    /// The program this request runs on, to its end (vcl.use does not
    /// change it mid-request; held here so vcl.list's busy count is exact).
    pub active: Arc<Active>,
    /// The program the top request started in, once it switched to a
    /// label's (`return (vcl(LABEL))`): ESI includes start there.
    pub vcl0: Option<Arc<Active>>,
    pub req: Req,
    pub log: Batch,
    pub clock: Clock,
    pub rxid: u32,
    /// Bytes received: head, and body read so far.
    pub hdr_rx: u64,
    pub body_rx: u64,
    /// May the connection stay open after this response?
    pub keep: bool,
    pub head_only: bool,
    /// The request body's framing; None once it has been read.
    pub framing: Framing,
    /// The body was read (and is gone: a restart cannot send it again).
    pub body_consumed: bool,
    /// vcl_pipe chose synth: vcl_synth cannot restart.
    pub piped: bool,
    /// The client's body stopped coming: the session ends after the
    /// answer, closed as RX_BODY.
    pub body_failed: bool,
    /// vcl_hit chose pass: X-Varnish shows the pass's fetch too.
    pub hit_pass: bool,
    /// The client asked for 100 Continue and it has not been sent.
    pub continue_pending: bool,
    /// The backend's interim responses to this request's fetch, to
    /// forward before its final response ([`Request::interim_channel`]).
    pub interim: Option<mpsc::UnboundedReceiver<Bytes>>,
    /// The body, read into memory by std.cache_req_body().
    pub cached_body: Option<bytes::Bytes>,
    /// Reading it for vmod bodyaccess in vcl_recv failed: answered when
    /// vcl_recv is over, as a failed std.cache_req_body() read.
    pub body_error: Option<crate::error::Error>,
    /// A disk object's body its lookup read back (delivered from here
    /// even if the memory tier lets it go meanwhile).
    pub loaded: Option<(ObjRef, crate::cache::body::ObjBody)>,
}

/// What a client-side subroutine sees besides `req`.
#[derive(Default)]
pub struct With<'x> {
    pub resp: Option<&'x mut Resp>,
    pub obj: Option<&'x ObjView>,
    pub key: Option<&'x mut Vec<u8>>,
    pub body: Option<&'x mut Vec<u8>>,
    pub bereq: Option<&'x mut Bereq>,
}

/// A response head to write.
pub struct RespHead<'h> {
    pub status: u16,
    pub reason: &'h [u8],
    pub headers: &'h Headers,
    pub framing: Option<Framed>,
    pub keep: bool,
}

/// The framing header a response head ends with.
#[derive(Clone, Copy)]
pub enum Framed {
    Length(Decimal),
    Chunked,
}

impl Framed {
    pub fn length(n: u64) -> Framed {
        Framed::Length(Decimal::new(n))
    }

    fn header(&self) -> (&'static [u8], &[u8]) {
        match self {
            Framed::Length(n) => (b"Content-Length", n.as_bytes()),
            Framed::Chunked => (b"Transfer-Encoding", b"chunked"),
        }
    }
}

impl<T: Transport> Request<'_, T> {
    /// Run a client-side subroutine of the request's program.
    pub fn call(&mut self, sub: Sub, with: With<'_>) -> Action {
        // vmod bodyaccess may have the body read in vcl_recv (req::cached).
        let mut body = crate::req::cached::Source {
            conn: &mut *self.conn,
            sh: &self.sh,
            framing: &mut self.framing,
            cached: &mut self.cached_body,
            body_rx: &mut self.body_rx,
            continue_pending: &mut self.continue_pending,
            error: &mut self.body_error,
            may_read: sub == Sub::Recv && self.sess.minor < 2 && self.req.esi_level == 0,
        };
        let mut t = Task::new(&*self.sh);
        t.req_body = Some(&mut body);
        t.log = Some((&mut self.log, self.rxid, LogSide::Client));
        t.clock = Some(&mut self.clock);
        t.ends = Some(&self.sess.ends);
        t.tls = self.sess.tls.clone();
        t.req = Some(&mut self.req);
        t.resp = with.resp;
        t.obj = with.obj;
        t.key = with.key;
        t.body = with.body;
        t.bereq = with.bereq;
        let a = run_sub(&*self.active.policy, sub, &mut t);
        if a == Action::Fail {
            self.sh.seg.add(C::VclFail, 1);
            // The answer to a failed task closes the connection (Varnish's
            // SC_VCL_FAILURE).
            self.keep = false;
        }
        a
    }

    pub fn stamp(&mut self, label: &str) {
        self.body_stamp();
        self.clock.stamp(&mut self.log, self.rxid, label);
    }

    /// A request body read to its end since the last timestamp (by a
    /// pass, std.cache_req_body or a drain) comes first, as Varnish's
    /// ReqBody.
    fn body_stamp(&mut self) {
        if let Some(t) = self.conn.take_body_done() {
            self.clock.stamp_at(&mut self.log, self.rxid, "ReqBody", t);
        }
    }

    /// A restart, as Varnish 7 does it: this transaction ends with a link
    /// to a new one (`Link req N restart`), which begins `req OLD restart`
    /// and carries on from vcl_recv with the new vxid (req.xid, X-Varnish).
    pub fn restart(&mut self) {
        self.req.restarts += 1;
        if self.req.restarts > self.p.max_restarts {
            // vcl_recv says "Too many restarts"; no new transaction.
            return;
        }
        let (old, new) = (self.rxid, self.sh.next_vxid());
        let side = LogSide::Client;
        self.stamp("Restart");
        self.log.recf(Tag::Link, side, old, format_args!("req {new} restart"));
        self.log.rec(Tag::End, side, old, b"");
        self.sh.seg.log(&self.log);
        self.log.clear();
        self.rxid = new;
        self.req.xid = new;
        self.log.recf(Tag::Begin, side, new, format_args!("req {old} restart"));
        self.clock.restart(&mut self.log, new);
        self.log_recv();
    }

    /// The request as vcl_recv gets it again, logged as Varnish's
    /// cnt_recv logs it on each pass: ReqStart, the request line, the
    /// headers as they are now.
    fn log_recv(&mut self) {
        let (side, v) = (LogSide::Client, self.rxid);
        self.log.rec(Tag::ReqStart, side, v, &self.sess.addr_text().req_start);
        self.log.rec(Tag::ReqMethod, side, v, &self.req.method);
        self.log.rec(Tag::ReqUrl, side, v, &self.req.url);
        let proto = crate::http1::head::proto_name(self.req.minor);
        self.log.rec(Tag::ReqProtocol, side, v, proto.as_bytes());
        for (n, val) in self.req.headers.iter() {
            self.log.rec_parts(Tag::ReqHeader, side, v, &[n, b": ", val]);
        }
    }

    /// A response (or 100 Continue) starts: its writes must be done within
    /// send_timeout, none blocked longer than idle_send_timeout.
    pub fn arm_send(&mut self) {
        self.conn.arm_send(self.p.send_timeout, self.p.idle_send_timeout);
    }

    /// The headers a delivery has before vcl_deliver sees it, as Varnish's
    /// Resp_Setup_Deliver: X-Varnish (with the object's vxid on a hit),
    /// Age (whole seconds since `t_origin`), Via; on a 200 from the cache
    /// (not a pass's private object) with range support, Accept-Ranges.
    pub fn resp_setup(&self, h: &mut Headers, obj_vxid: Option<u32>, t_origin: f64, ranges: bool) {
        // X-Varnish and Age written into one buffer, split in two.
        let mut b = bytes::BytesMut::with_capacity(48);
        put_decimal(&mut b, self.rxid.into());
        if let Some(o) = obj_vxid {
            b.extend_from_slice(b" ");
            put_decimal(&mut b, o.into());
        }
        let xv = b.split().freeze();
        put_decimal(&mut b, (crate::util::now() - t_origin).max(0.0).floor() as u64);
        h.0.reserve(if ranges { 4 } else { 3 });
        h.0.push((bytes::Bytes::from_static(b"X-Varnish"), xv));
        h.0.push((bytes::Bytes::from_static(b"Age"), b.freeze()));
        h.0.push((bytes::Bytes::from_static(b"Via"), self.sh.via.clone()));
        // HTTP/3 is offered on TLS over TCP, on the same port, where the
        // listener has QUIC beside it (feature http3).
        if self.sess.tls.is_some() && self.sess.minor < 3 {
            let p = self.sh.params();
            if p.http3() && self.sh.has_quic(&self.sess.listen) {
                let v = format!("h3=\":{}\"; ma={}", self.sess.ends.local.port(), p.h3.alt_svc_max_age);
                h.0.push((bytes::Bytes::from_static(b"Alt-Svc"), bytes::Bytes::from(v)));
            }
        }
        if ranges {
            h.unset("accept-ranges");
            h.0.push((bytes::Bytes::from_static(b"Accept-Ranges"), bytes::Bytes::from_static(b"bytes")));
        }
    }

    /// Write a response head into `wire` and log it.
    pub fn write_head(&mut self, wire: &mut Vec<u8>, head: &RespHead<'_>) {
        write_head(wire, &mut self.log, self.rxid, self.sess.minor, head);
        // An ESI include's head is logged, never sent: its body goes into
        // the page.
        if self.req.esi_level > 0 {
            wire.clear();
        }
    }

    /// The request is over: Resp timestamp, ReqAcct, End, byte counters.
    pub fn end(&mut self, tx: (u64, u64)) {
        self.body_stamp();
        let rx = (self.hdr_rx, self.body_rx);
        if self.req.esi_level == 0 {
            return end_log(&self.sh, &mut self.log, &mut self.clock, self.rxid, rx, tx);
        }
        // An include's bytes are its page's too: only the top request
        // counts in MAIN.s_resp_* (Varnish's IS_TOPREQ).
        end_records(&mut self.log, &mut self.clock, self.rxid, rx, tx);
        self.sh.seg.log(&self.log);
    }

    /// Send the 100 Continue the client waits for, if it is still owed;
    /// false if the client is gone.
    /// Where this request's fetch sends the backend's interim responses
    /// (fetch::txn's Fetch::interim), when they can be forwarded: not to
    /// an HTTP/1.0 client (RFC 9110 §15.2), nor from an ESI include.
    pub fn interim_channel(&mut self) -> Option<mpsc::UnboundedSender<Bytes>> {
        if self.req.minor == 0 || self.req.esi_level > 0 {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        self.interim = Some(rx);
        Some(tx)
    }

    /// Forward the interim responses the fetch got, before the final
    /// response (in order, once the final head is in; at most
    /// fetch::txn's MAX_INTERIM). False: the client is gone.
    pub async fn forward_interim(&mut self) -> bool {
        let Some(mut rx) = self.interim.take() else { return true };
        while let Ok(head) = rx.try_recv() {
            self.arm_send();
            if tokio::io::AsyncWriteExt::write_all(self.conn.out(), &head).await.is_err() {
                return false;
            }
        }
        true
    }

    pub async fn send_continue(&mut self) -> bool {
        if !self.continue_pending {
            return true;
        }
        self.continue_pending = false;
        self.arm_send();
        tokio::io::AsyncWriteExt::write_all(self.conn.out(), b"HTTP/1.1 100 Continue\r\n\r\n").await.is_ok()
    }

    /// Read what is left of the request's body into `into` (within
    /// timeout_idle, counted): none is left after, whatever `into` keeps.
    /// A write `into` refuses fails as Side::Internal.
    pub async fn read_body<W: tokio::io::AsyncWrite + Unpin>(&mut self, into: &mut W) -> Result<(), crate::error::Error> {
        let idle = self.p.timeout_idle;
        let m = self.conn.copy_body(self.framing, false, into, crate::error::Side::Internal, idle).await?;
        self.sh.seg.add(C::SReqBodybytes, m.rx);
        self.body_rx += m.rx;
        self.framing = Framing::None;
        Ok(())
    }

    /// The connection stays open after a response only if the request's
    /// body (if any) has been read.
    pub fn close_after(&self) -> bool {
        !self.keep || self.framing != Framing::None
    }
}

/// Write a response head into `wire` (cleared first) and log it: status
/// line, `headers` (X-Varnish, Age and Via are among them since before
/// vcl_deliver or vcl_synth), the framing header, and Connection as needed.
pub fn write_head(wire: &mut Vec<u8>, log: &mut Batch, rxid: u32, minor: u8, h: &RespHead<'_>) {
    let side = LogSide::Client;
    wire.clear();
    let status = Decimal::new(h.status.into());
    wire.extend_from_slice(b"HTTP/1.1 ");
    wire.extend_from_slice(status.as_bytes());
    wire.push(b' ');
    wire.extend_from_slice(h.reason);
    wire.extend_from_slice(b"\r\n");
    // The wire always carries HTTP/1.1; an HTTP/2 stream's transport
    // turns it into frames.
    // (An HTTP/2 or HTTP/3 stream's own version.)
    log.rec(Tag::RespProtocol, side, rxid, crate::http1::head::proto_name(minor.max(1)).as_bytes());
    log.rec(Tag::RespStatus, side, rxid, status.as_bytes());
    log.rec(Tag::RespReason, side, rxid, h.reason);
    let mut out = HeadOut { wire, log, tag: Tag::RespHeader, side, vxid: rxid };
    for (n, v) in h.headers.iter() {
        out.header(n, v);
    }
    if let Some(f) = &h.framing {
        let (n, v) = f.header();
        out.header(n, v);
    }
    // A connection that stays open says so to HTTP/1.0 and 1.1 alike, as
    // Varnish's V1D_Deliver (unless VCL set a Connection header).
    if !h.keep {
        out.header(b"Connection", b"close");
    } else if minor <= 1 && !h.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"connection")) {
        out.header(b"Connection", b"keep-alive");
    }
    out.wire.extend_from_slice(b"\r\n");
}

/// Log the end of a request: Resp timestamp, ReqAcct, End; add the byte
/// counters.
pub fn end_log(sh: &Shared, log: &mut Batch, clock: &mut Clock, rxid: u32, rx: (u64, u64), tx: (u64, u64)) {
    end_records(log, clock, rxid, rx, tx);
    sh.seg.add(C::SRespHdrbytes, tx.0);
    sh.seg.add(C::SRespBodybytes, tx.1);
    sh.seg.log(log);
}

/// A request's last records: its Resp timestamp, ReqAcct and End.
fn end_records(log: &mut Batch, clock: &mut Clock, rxid: u32, rx: (u64, u64), tx: (u64, u64)) {
    clock.stamp(log, rxid, "Resp");
    log.rec_with(Tag::ReqAcct, LogSide::Client, rxid, |o| {
        for (i, n) in [rx.0, rx.1, rx.0 + rx.1, tx.0, tx.1, tx.0 + tx.1].into_iter().enumerate() {
            if i > 0 {
                o.push(b' ');
            }
            common::log::vsl::put_u64(o, n);
        }
    });
    log.rec(Tag::End, LogSide::Client, rxid, b"");
}

/// A cached object as vcl_hit (`full`) or vcl_deliver sees it.
pub fn obj_view(oc: &ObjRef, t: f64, full: bool) -> ObjView {
    let life = oc.obj.life();
    ObjView {
        status: oc.obj.status,
        reason: oc.reason(),
        headers: if full { oc.headers().to_headers() } else { Headers::default() },
        ttl: life.ttl_left(t),
        grace: life.grace,
        keep: life.keep,
        age: (t - life.t_origin).max(0.0),
        hits: oc.hits(),
        uncacheable: oc.obj.kind != Kind::Normal || !oc.stored(),
        stv: Some(oc.stv),
        can_esi: oc.obj.coding().is_some_and(|c| c.esi_data.get().is_some()),
        gzip: oc.obj.coding().is_some_and(|c| c.gzip),
    }
}

fn put_decimal(b: &mut bytes::BytesMut, n: u64) {
    b.extend_from_slice(Decimal::new(n).as_bytes());
}
