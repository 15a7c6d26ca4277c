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

use crate::error::{Error, Side};
use crate::fetch::{Fetch, HeadOut};
use crate::http::{self, BufConn, Framing, Head, HeadError, Parsed, Transfer};
use crate::server::Shared;
use crate::util::{http_date, now};

type Client = BufConn<TcpStream>;

/// Why a session ended (SessClose reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
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
        }
    }
    fn is_error(self) -> bool {
        !matches!(self, Reason::RemClose | Reason::ReqClose | Reason::ReqHttp10 | Reason::RxCloseIdle | Reason::RespClose)
    }
}

/// One connection's context.
struct Sess {
    sh: Arc<Shared>,
    peer: SocketAddr,
    listen: Arc<str>,
    vxid: u32,
    log: Batch,
    /// Reusable buffers: response/bereq heads and chunk framing.
    wire: Vec<u8>,
    scratch: Vec<u8>,
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
    let mut log = Batch::with_reclen(sh.params.vsl_reclen);
    log.rec(Tag::Begin, LogSide::Client, vxid, b"sess 0 HTTP/1");
    log.recf(
        Tag::SessOpen,
        LogSide::Client,
        vxid,
        format_args!("{} {} {} {} {} {:.6} {}", peer.ip(), peer.port(), listen, local.ip(), local.port(), t0, stream.as_raw_fd()),
    );
    let mut s = Sess { sh, peer, listen, vxid, log, wire: Vec::with_capacity(1024), scratch: Vec::new() };
    let mut c = BufConn::new(stream);
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
    s.log.recf(Tag::SessClose, LogSide::Client, s.vxid, format_args!("{} {:.3}", reason.name(), now() - t0));
    s.log.rec(Tag::End, LogSide::Client, s.vxid, b"");
    sh.seg.log(&s.log);
    let _ = c.io.shutdown().await;
}

enum ReadErr {
    Closed(Reason),
    Bad { err: HeadError, t_start: f64 },
}

/// Wait for a complete request head. An idle connection is closed when the
/// daemon shuts down or after `timeout_idle`.
async fn read_head(s: &Sess, c: &mut Client, stop: &mut watch::Receiver<bool>) -> Result<(Head, f64), ReadErr> {
    let p = &s.sh.params;
    let mut t_start = if c.buf.is_empty() { None } else { Some(now()) };
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
        tokio::select! {
            r = c.fill(p.timeout_idle) => match r {
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
struct Clock {
    start: f64,
    last: f64,
}

impl Clock {
    fn stamp(&mut self, log: &mut Batch, vxid: u32, label: &str) {
        let t = now();
        log.recf(Tag::Timestamp, LogSide::Client, vxid, format_args!("{label}: {t:.6} {:.6} {:.6}", t - self.start, t - self.last));
        self.last = t;
    }
}

impl Sess {
    fn begin_req(&mut self, t_start: f64) -> (u32, Batch, Clock) {
        let rxid = self.sh.next_vxid();
        self.log.recf(Tag::Link, LogSide::Client, self.vxid, format_args!("req {rxid} rxreq"));
        let mut log = Batch::with_reclen(self.sh.params.vsl_reclen);
        log.recf(Tag::Begin, LogSide::Client, rxid, format_args!("req {} rxreq", self.vxid));
        log.recf(Tag::Timestamp, LogSide::Client, rxid, format_args!("Start: {t_start:.6} 0.000000 0.000000"));
        let mut clock = Clock { start: t_start, last: t_start };
        clock.stamp(&mut log, rxid, "Req");
        log.recf(Tag::ReqStart, LogSide::Client, rxid, format_args!("{} {} {}", self.peer.ip(), self.peer.port(), self.listen));
        (rxid, log, clock)
    }

    /// Serve one request. Returns Some(reason) when the session must end.
    async fn request(&mut self, c: &mut Client, head: Head, t_start: f64) -> Option<Reason> {
        let sh = self.sh.clone();
        let (rxid, mut log, mut clock) = self.begin_req(t_start);
        let side = LogSide::Client;
        log.rec(Tag::ReqMethod, side, rxid, head.method());
        log.rec(Tag::ReqUrl, side, rxid, head.url());
        log.rec(Tag::ReqProtocol, side, rxid, head.protocol().as_bytes());
        for (n, v) in head.iter() {
            log.rec_parts(Tag::ReqHeader, side, rxid, &[n, b": ", v]);
        }
        let hdr_rx = head.wire_len() as u64;
        let framing = match http::request_framing(&head) {
            Ok(f) => f,
            Err(why) => {
                sh.seg.add(C::ClientReq400, 1);
                log.rec(Tag::Error, side, rxid, why.as_bytes());
                let tx = self.synth(c, &mut log, rxid, 400, "Bad Request", false).await;
                self.end_req(log, &mut clock, rxid, (hdr_rx, 0), tx);
                return Some(Reason::RxJunk);
            }
        };
        sh.seg.add(C::ClientReq, 1);
        sh.seg.add(C::SReqHdrbytes, hdr_rx);
        let mut keep = head.minor >= 1 && !head.has_token("connection", "close");
        // Built-in policy: HTTP/1.1 requires Host.
        if head.minor >= 1 && head.get("host").is_none() {
            sh.seg.add(C::SSynth, 1);
            // A body we did not read would be taken for the next request.
            let go_on = framing == Framing::None && keep;
            let tx = self.synth(c, &mut log, rxid, 400, "Bad Request", !go_on).await;
            self.end_req(log, &mut clock, rxid, (hdr_rx, 0), tx);
            return if go_on && tx.0 > 0 { None } else { Some(Reason::RespClose) };
        }
        let bxid = sh.next_vxid();
        log.recf(Tag::Link, side, rxid, format_args!("bereq {bxid} pass"));
        let mut fetch = Fetch::new(&sh, bxid, rxid, "pass");
        let mut wire = std::mem::take(&mut self.wire);
        let result = fetch.run(&sh, &head, framing, c, self.peer.ip(), &mut wire).await;
        let body_rx = fetch.req_body_rx;
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                self.wire = wire;
                fetch.error(&sh, &e);
                fetch.finish(&sh, None, None);
                fetch.end(&sh);
                if e.side == Side::Client {
                    // The client went away or sent a bad body: no answer.
                    self.end_req(log, &mut clock, rxid, (hdr_rx, body_rx), (0, 0));
                    return Some(Reason::RxBody);
                }
                let tx = self.synth(c, &mut log, rxid, 503, "Backend fetch failed", !keep).await;
                self.end_req(log, &mut clock, rxid, (hdr_rx, body_rx), tx);
                return if keep && tx.0 > 0 { None } else { Some(Reason::TxError) };
            }
        };
        clock.stamp(&mut log, rxid, "Fetch");
        // Response head to the client.
        let be_head = &resp.head;
        let backend_close = be_head.minor == 0 || be_head.has_token("connection", "close");
        let chunk_out = matches!(resp.framing, Framing::Chunked | Framing::Eof) && head.minor >= 1;
        if matches!(resp.framing, Framing::Chunked | Framing::Eof) && !chunk_out {
            keep = false; // HTTP/1.0 client: the body ends at close.
        }
        wire.clear();
        wire.extend_from_slice(b"HTTP/1.1 ");
        wire.extend_from_slice(be_head.status.to_string().as_bytes());
        wire.push(b' ');
        wire.extend_from_slice(be_head.reason());
        wire.extend_from_slice(b"\r\n");
        log.rec(Tag::RespProtocol, side, rxid, b"HTTP/1.1");
        log.recf(Tag::RespStatus, side, rxid, format_args!("{}", be_head.status));
        log.rec(Tag::RespReason, side, rxid, be_head.reason());
        {
            let mut out = HeadOut { wire: &mut wire, log: &mut log, tag: Tag::RespHeader, side, vxid: rxid };
            for (n, v) in be_head.iter() {
                let keep_cl = resp.framing == Framing::None && n.eq_ignore_ascii_case(b"content-length");
                if (http::is_hop_by_hop(n) && !keep_cl) || n.eq_ignore_ascii_case(b"x-varnish") {
                    continue;
                }
                out.header(n, v);
            }
            out.header(b"X-Varnish", rxid.to_string().as_bytes());
            out.header(b"Via", sh.via.as_bytes());
            match resp.framing {
                Framing::Length(n) => out.header(b"Content-Length", n.to_string().as_bytes()),
                Framing::Chunked | Framing::Eof if chunk_out => out.header(b"Transfer-Encoding", b"chunked"),
                _ => {}
            }
            if !keep {
                out.header(b"Connection", b"close");
            }
            out.wire.extend_from_slice(b"\r\n");
        }
        clock.stamp(&mut log, rxid, "Process");
        let hdr_tx = wire.len() as u64;
        let mut be = resp.conn;
        // A small body that arrived with the head goes out in the same write.
        let inline = match resp.framing {
            Framing::Length(n) if n <= 64 * 1024 && be.buf.len() as u64 >= n => n,
            _ => 0,
        };
        wire.extend_from_slice(&be.buf.split_to(inline as usize));
        let head_sent = c.io.write_all(&wire).await;
        self.wire = wire;
        if head_sent.is_err() {
            fetch.error(&sh, &Error::new(Side::Client, "client closed before the response head was sent"));
            fetch.finish(&sh, None, None);
            fetch.end(&sh);
            self.end_req(log, &mut clock, rxid, (hdr_rx, body_rx), (0, 0));
            return Some(Reason::TxError);
        }
        let t = Transfer {
            framing: if inline > 0 { Framing::Length(0) } else { resp.framing },
            chunk_out,
            src_side: Side::Backend,
            dst_side: Side::Client,
            read_timeout: sh.params.between_bytes_timeout,
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
                if keep {
                    None
                } else if head.minor == 0 {
                    Some(Reason::ReqHttp10)
                } else if head.has_token("connection", "close") {
                    Some(Reason::ReqClose)
                } else {
                    Some(Reason::RespClose)
                }
            }
            Err(e) => {
                // Never end a body cleanly that did not arrive whole: close.
                if e.side == Side::Backend {
                    fetch.error(&sh, &e);
                }
                fetch.finish(&sh, None, None);
                fetch.end(&sh);
                self.end_req(log, &mut clock, rxid, (hdr_rx, body_rx), (hdr_tx, 0));
                Some(if e.side == Side::Backend { Reason::RespClose } else { Reason::TxError })
            }
        }
    }

    /// Log the end of a request: Resp timestamp, ReqAcct, End; add the
    /// byte counters.
    fn end_req(&self, mut log: Batch, clock: &mut Clock, rxid: u32, rx: (u64, u64), tx: (u64, u64)) {
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

    /// Send a synthetic response (the "Guru Meditation" page); returns the
    /// (header, body) bytes written, zeros if the client was gone.
    async fn synth(&mut self, c: &mut Client, log: &mut Batch, rxid: u32, status: u16, reason: &str, close: bool) -> (u64, u64) {
        let body = format!(
            "<!DOCTYPE html>\n<html>\n  <head>\n    <title>{status} {reason}</title>\n  </head>\n  <body>\n    <h1>Error {status} {reason}</h1>\n    <p>{reason}</p>\n    <h3>Guru Meditation:</h3>\n    <p>XID: {rxid}</p>\n    <hr>\n    <p>cachekit cache server</p>\n  </body>\n</html>\n"
        );
        let side = LogSide::Client;
        let mut wire = std::mem::take(&mut self.wire);
        wire.clear();
        wire.extend_from_slice(format!("HTTP/1.1 {status} {reason}\r\n").as_bytes());
        log.rec(Tag::RespProtocol, side, rxid, b"HTTP/1.1");
        log.recf(Tag::RespStatus, side, rxid, format_args!("{status}"));
        log.rec(Tag::RespReason, side, rxid, reason.as_bytes());
        {
            let mut out = HeadOut { wire: &mut wire, log, tag: Tag::RespHeader, side, vxid: rxid };
            out.header(b"Date", http_date(now()).as_bytes());
            out.header(b"Server", b"cachekit");
            out.header(b"X-Varnish", rxid.to_string().as_bytes());
            out.header(b"Content-Type", b"text/html; charset=utf-8");
            out.header(b"Retry-After", b"5");
            out.header(b"Content-Length", body.len().to_string().as_bytes());
            out.header(b"Via", self.sh.via.as_bytes());
            if close {
                out.header(b"Connection", b"close");
            }
            out.wire.extend_from_slice(b"\r\n");
        }
        let hdr = wire.len() as u64;
        wire.extend_from_slice(body.as_bytes());
        let ok = c.io.write_all(&wire).await.is_ok();
        self.wire = wire;
        if ok {
            (hdr, body.len() as u64)
        } else {
            (0, 0)
        }
    }
}
