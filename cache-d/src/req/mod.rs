//! The client side of a request (Varnish's `CNT_Request`): a session
//! reads requests from its transport, and each request runs through the
//! steps — one function per step (`recv`, `lookup`, `pass`, `pipe`,
//! `deliver`, `synth`), each taking the request in progress
//! ([`state::Request`]) and returning the next [`state::Step`]; only
//! [`run`]'s loop moves between them.
//!
//! ```text
//! Recv ─┬─ Lookup ─┬─ Hit ──┬──────────────────────────── Deliver
//!       │          ├─ Miss ─┴─(fetch for the cache)────── Deliver
//!       │          └─ Pass ─── PassFetch (streamed through)
//!       ├─ Purge ─── Synth
//!       ├─ Pass
//!       ├─ Pipe
//!       └─ Synth                 any step ── Restart ──▶ Recv
//! ```

pub mod cached;
pub mod contain;
pub mod deliver;
pub mod gather;
pub mod include;
pub mod lookup;
pub mod page;
pub mod pass;
pub mod pieces;
pub mod pipe;
pub mod reason;
pub mod recv;
pub mod rfc;
pub mod state;
pub mod synth;
pub mod transport;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use tokio::sync::watch;

use self::reason::Reason;
use self::state::{sess_open, Request, Sess, Step};
use self::transport::{ProxyRead, ReadErr, Transport};
use crate::http1::head::{Framing, HeadError};
use crate::listen::{On, Proto};
use crate::shared::Shared;
use crate::util::{now, Clock};

/// How a connection's HTTP/1 session ended.
pub enum Served {
    /// Closed (SessClose logged).
    Closed,
    /// It goes on as HTTP/2: after the connection preface (`upgrade`
    /// None), or answering an `Upgrade: h2c` request on stream 1.
    H2 { sess: Box<Sess>, upgrade: Option<crate::http1::head::Head> },
    /// Its next requests go on on another event loop (see crate::child::loops).
    Move(Box<Sess>),
}

/// Serve a connection: its requests one after another (keep-alive,
/// pipelining), logged as Varnish logs a session (`Begin sess`,
/// `Link req`, `SessClose`), until it ends, turns to HTTP/2 or moves to
/// another event loop.
pub async fn session<T: Transport>(
    sh: Arc<Shared>,
    conn: &mut T,
    peer: SocketAddr,
    local: SocketAddr,
    on: On,
    stop: watch::Receiver<bool>,
) -> Served {
    let tls = conn.tls_info().map(Arc::new);
    let mut s = Sess::open(sh, peer, local, &on, conn.fd(), tls);
    if on.proto == Proto::Proxy {
        if let Err(r) = proxy_header(&mut s, conn).await {
            close_session(&mut s, r);
            conn.close().await;
            return Served::Closed;
        }
    }
    requests(s, conn, stop).await
}

/// A session's requests, from the next one on: until the connection ends,
/// turns to HTTP/2, or moves to another event loop (between two requests,
/// when this loop is asked to shed connections).
pub async fn requests<T: Transport>(mut s: Sess, conn: &mut T, stop: watch::Receiver<bool>) -> Served {
    let mut stop = transport::Stop::new(stop);
    let reason = loop {
        if crate::child::loops::take_move() {
            return Served::Move(Box::new(s));
        }
        // Held while the connection waits for its next request: an Arc,
        // not a guard (see Shared::params).
        let p = s.sh.params_arc();
        // A session whose VCL set sess.timeout_idle waits that long.
        let own = s.timeout_idle.map(|t| {
            let mut own = crate::params::Params::clone(&p);
            own.timeout_idle = t;
            own
        });
        match conn.read_head(own.as_ref().unwrap_or(&p), &mut stop).await {
            // h2c is for cleartext connections (RFC 9113 §3.1).
            Ok((head, _)) if p.http2() && s.tls.is_none() && crate::http1::head::wants_h2c(&head) => {
                return Served::H2 { sess: Box::new(s), upgrade: Some(head) };
            }
            Ok((head, t_start)) => {
                // The request runs with the parameters in force now: a
                // change made while the connection waited applies to it.
                let p = match Arc::ptr_eq(&s.sh.params(), &p) {
                    true => p,
                    false => s.sh.params_arc(),
                };
                if let Some(reason) = request(&mut s, conn, head, t_start, p).await {
                    break reason;
                }
                if !conn.buffered().is_empty() {
                    s.sh.seg.add(C::SessReadahead, 1);
                }
            }
            Err(ReadErr::Preface) => return Served::H2 { sess: Box::new(s), upgrade: None },
            Err(ReadErr::Closed(r)) => break r,
            Err(ReadErr::Bad { err, t_start }) => {
                drop(p);
                recv::bad_request(&mut s, conn, err, t_start).await;
                break if err == HeadError::TooLarge { Reason::RxOverflow } else { Reason::RxJunk };
            }
        }
    };
    close_session(&mut s, reason);
    conn.close().await;
    Served::Closed
}

/// The session is over: its SessClose and End records and counters.
pub fn close_session(s: &mut Sess, reason: Reason) {
    let sh = &s.sh;
    sh.seg.add(if reason.is_error() { C::SessClosedErr } else { C::SessClosed }, 1);
    sh.seg.add(reason.counter(), 1);
    s.log.recf(Tag::SessClose, LogSide::Client, s.vxid, format_args!("{} {:.3}", reason.name(), now() - s.t0));
    s.log.rec(Tag::End, LogSide::Client, s.vxid, b"");
    sh.seg.log(&s.log);
    s.log.clear();
}

/// Read the PROXY header of a connection to a `,PROXY` listener (within
/// timeout_idle, as Varnish): its addresses become client.ip and
/// server.ip, logged as a `Proxy` record; a header that cannot be used
/// closes the session, with a `ProxyGarbage` (or `Error`) record saying why.
async fn proxy_header<T: Transport>(s: &mut Sess, conn: &mut T) -> Result<(), Reason> {
    let timeout = s.sh.params().timeout_idle;
    match conn.read_proxy(timeout).await {
        ProxyRead::Header(h) => {
            if let Some(why) = &h.ignored {
                s.log.rec(Tag::ProxyGarbage, LogSide::Client, s.vxid, why.as_bytes());
            }
            if let Some(r) = &h.record {
                s.log.rec(Tag::Proxy, LogSide::Client, s.vxid, r.as_bytes());
            }
            if let Some((client, server)) = h.addrs {
                s.ends.client = client;
                s.ends.server = server;
                s.ends.proxy_tlvs = Some(h.tlvs.into());
                s.addr_text = None;
            }
            Ok(())
        }
        ProxyRead::Closed { reason, garbage } => {
            if let Some(r) = &garbage.proxy {
                s.log.rec(Tag::Proxy, LogSide::Client, s.vxid, r.as_bytes());
            }
            if let Some((tag, why)) = &garbage.why {
                s.log.rec(*tag, LogSide::Client, s.vxid, why.as_bytes());
            }
            Err(reason)
        }
    }
}

/// A connection that never became a session (its TLS handshake failed or
/// timed out): its own short transaction says why.
pub fn no_session(sh: &Shared, peer: SocketAddr, local: SocketAddr, on: &On, why: &str) {
    let (vxid, mut log) = sess_open(sh, peer, local, on, now(), -1);
    log.rec(Tag::Error, LogSide::Client, vxid, why.as_bytes());
    log.rec(Tag::SessClose, LogSide::Client, vxid, b"RX_JUNK 0.000");
    log.rec(Tag::End, LogSide::Client, vxid, b"");
    sh.seg.log(&log);
    sh.seg.add(C::SessClosedErr, 1);
    sh.seg.add(Reason::RxJunk.counter(), 1);
}

/// A session whose task panicked: its connection is gone (closed when the
/// task was dropped); say so in the log and the counters. The records the
/// session had gathered went with it.
pub fn failed(sh: &Shared, peer: SocketAddr, why: &str) {
    let vxid = sh.next_vxid();
    let mut log = sh.batch();
    log.rec(Tag::Begin, LogSide::Client, vxid, b"sess 0 HTTP/1");
    log.recf(Tag::Error, LogSide::Client, vxid, format_args!("request task failed ({} {}): {why}", peer.ip(), peer.port()));
    log.rec(Tag::SessClose, LogSide::Client, vxid, b"VCL_FAILURE 0.000");
    log.rec(Tag::End, LogSide::Client, vxid, b"");
    sh.seg.log(&log);
    sh.seg.add(C::SessClosedErr, 1);
    sh.seg.add(Reason::VclFailure.counter(), 1);
}

/// Serve one request; Some(reason) when the session must end.
pub(crate) async fn request<T: Transport>(
    s: &mut Sess,
    conn: &mut T,
    head: crate::http1::head::Head,
    t_start: f64,
    p: Arc<crate::params::Params>,
) -> Option<Reason> {
    let sh = &s.sh;
    if sh.debug_panic_request.load(std::sync::atomic::Ordering::Relaxed)
        && sh.debug_panic_request.swap(false, std::sync::atomic::Ordering::Relaxed)
    {
        panic!("Don't panic (debug.panic.request was asked to)");
    }
    match recv::admit(s, conn, head, t_start, p).await {
        Ok(mut r) => {
            let end = run(&mut r).await;
            if r.req.timeout_idle_set {
                r.sess.timeout_idle = std::time::Duration::try_from_secs_f64(r.req.timeout_idle).ok();
            }
            // A TLS connection may hold the response's last records after
            // a write the socket took only part of: out before the next
            // request is read (a no-op on plain sockets).
            let _ = tokio::io::AsyncWriteExt::flush(r.conn.out()).await;
            end
        }
        Err(reason) => Some(reason),
    }
}

/// Includes one client request may make in all (cachekit's bound; Varnish
/// bounds only their depth).
pub const MAX_ESI_INCLUDES: u32 = crate::esi::MAX_PAGE_INCLUDES as u32;

impl<T: Transport> Request<'_, T> {
    /// Run an ESI include of `url` for this request's page: the state
    /// machine again, for a sub-request whose body is written to this one's
    /// output (chunked if the page is; into its gzip stream if `gz`).
    /// False if the page cannot go on: writing to the client failed, or
    /// (`abort`, with feature esi_include_onerror) the include's delivery
    /// did. With `gz`, also the CRC and length its deflate data stands for.
    /// Also the body bytes it added to the page.
    #[allow(clippy::type_complexity)]
    pub fn include<'a>(
        &'a mut self,
        url: &'a str,
        host: Option<&'a str>,
        abort: bool,
        chunked: bool,
        gz: bool,
    ) -> Pin<Box<dyn Future<Output = (bool, Option<(u32, u64)>, u64)> + Send + 'a>> {
        let r = self;
        Box::pin(async move {
            let sh = r.sh.clone();
            let depth = sh.params().max_esi_depth;
            // With feature esi_include_onerror, an include without
            // onerror="continue" whose delivery fails ends the page.
            let abort = abort && sh.params().has_feature("esi_include_onerror");
            if r.req.esi_level >= depth {
                r.log.recf(Tag::VclError, LogSide::Client, r.rxid, format_args!("ESI depth limit reach (param max_esi_depth = {depth})"));
                return (true, None, 0);
            }
            // A page's whole tree of includes is bounded too: breadth
            // times depth could otherwise make billions of them.
            let count = r.req.esi_includes.get_or_insert_with(Default::default).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if count >= MAX_ESI_INCLUDES {
                r.log.recf(
                    Tag::VclError,
                    LogSide::Client,
                    r.rxid,
                    format_args!("ESI include left out: {MAX_ESI_INCLUDES} includes for one request"),
                );
                return (true, None, 0);
            }
            sh.seg.add(C::EsiReq, 1);
            let xid = sh.next_vxid();
            r.log.recf(Tag::Link, LogSide::Client, r.rxid, format_args!("req {xid} esi"));
            let mut log = sh.batch();
            log.recf(Tag::Begin, LogSide::Client, xid, format_args!("req {} esi", r.rxid));
            let clock = Clock::start(&mut log, LogSide::Client, xid, now());
            let req = include::sub_req(&r.req, url, host, xid, gz);
            // As Varnish logs an include: its URL as set, then the whole
            // request as vcl_recv gets it (no VCL_use: it goes on in the
            // page's VCL).
            let c = r.sess.ends.client;
            log.rec(Tag::ReqUrl, LogSide::Client, xid, &req.url);
            log.recf(Tag::ReqStart, LogSide::Client, xid, format_args!("{} {} {}", c.ip(), c.port(), r.sess.listen));
            log.rec(Tag::ReqMethod, LogSide::Client, xid, &req.method);
            log.rec(Tag::ReqUrl, LogSide::Client, xid, &req.url);
            log.rec(Tag::ReqProtocol, LogSide::Client, xid, b"HTTP/1.1");
            for (n, v) in req.headers.iter() {
                log.rec_parts(Tag::ReqHeader, LogSide::Client, xid, &[n, b": ", v]);
            }
            // Includes start in the program the page's request started
            // in, even when that one switched to a label's.
            let active = r.vcl0.clone().unwrap_or_else(|| r.active.clone());
            let out: &mut (dyn tokio::io::AsyncWrite + Unpin + Send) = r.conn.out();
            let mut conn = include::EsiConn::new(out, chunked, gz);
            let mut sub = Request {
                sess: &mut *r.sess,
                conn: &mut conn,
                sh,
                p: r.p.clone(),
                active,
                vcl0: r.vcl0.clone(),
                req,
                log,
                clock,
                rxid: xid,
                hdr_rx: 0,
                body_rx: 0,
                keep: true,
                head_only: false,
                framing: Framing::None,
                body_consumed: false,
                piped: false,
                body_failed: false,
                hit_pass: false,
                continue_pending: false,
                interim: None,
                cached_body: None,
                body_error: None,
                loaded: None,
            };
            let reason = run(&mut sub).await;
            drop(sub);
            let ok = match reason {
                Some(Reason::TxError) => false,
                Some(Reason::RespClose) => !abort,
                _ => true,
            };
            (ok, conn.gz(), conn.written())
        })
    }
}

/// The client-side state machine: only this loop moves between steps.
pub async fn run<T: Transport>(r: &mut Request<'_, T>) -> Option<Reason> {
    let mut step = Step::Recv;
    loop {
        // An include about to fetch: what its page holds goes out first.
        if r.req.esi_level > 0 && matches!(step, Step::Miss { .. } | Step::PassFetch | Step::Pipe) {
            let _ = tokio::io::AsyncWriteExt::flush(r.conn.out()).await;
        }
        step = match step {
            Step::Recv => recv::recv(r).await,
            Step::Purge(key) => recv::purge(r, &key),
            Step::Lookup(key) => lookup::lookup(r, key).await,
            Step::Hit { oc, guard } => lookup::hit(r, oc, guard),
            Step::Miss { guard, stale } => lookup::miss(r, guard, stale).await,
            Step::Pass => pass::vcl_pass(r),
            // Boxed: its future is about 12 KB, six times any other
            // step's, and would make every request's (and every ESI
            // include's, copied into its box) that large.
            Step::PassFetch => Box::pin(pass::fetch(r)).await,
            Step::Pipe => pipe::pipe(r).await,
            Step::Deliver { oc, hit, pass } => deliver::deliver(r, &oc, hit, pass).await,
            Step::DeliverSynthetic { resp, body } => synth::deliver_synthetic(r, resp, body).await,
            Step::Synth { status, reason } => synth::vcl_synth(r, status, &reason).await,
            Step::Restart => {
                r.restart();
                Step::Recv
            }
            Step::Done(reason) => return reason,
        };
    }
}
