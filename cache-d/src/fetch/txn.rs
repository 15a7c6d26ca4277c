//! A backend transaction: its log and byte counts, building the backend
//! request, sending it (with the client's body), reading the response head,
//! and the connection's fate. Whoever streams the body ends the transaction
//! with [`Fetch::done`]; a transaction dropped without it is logged as
//! ended with nothing delivered (a `Drop` guard, so every exit ends it once).

use common::counters::{Vbe, C};
use common::log::vsl::{Batch, Side as LogSide, Tag};
use tokio::io::AsyncWriteExt;

use std::sync::Arc;

use crate::backend::pool::{Backend, BeConn, Slot};
use crate::error::{Error, Side};
use crate::http1::head::{self, Framing, Head, HeadOut, Parsed};
use crate::req::transport::ReqBody;
use crate::shared::Shared;
use crate::util::{now, Clock};
use crate::vcl::model::Bereq;

/// An interim response as the client gets it: an HTTP/1.1 status line and
/// the end-to-end headers (the connection's own are not forwarded).
fn interim_head(h: &head::Head) -> bytes::Bytes {
    let mut out = format!("HTTP/1.1 {} ", h.status).into_bytes();
    out.extend_from_slice(h.reason());
    out.extend_from_slice(b"\r\n");
    let listed = head::connection_tokens(h.iter());
    for (n, v) in h.iter().filter(|(n, _)| !head::is_hop_by_hop(n) && !head::is_listed(&listed, n)) {
        out.extend_from_slice(n);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.into()
}

/// Interim (1xx) responses skipped before a backend's answer counts as
/// broken: a backend streaming 100 Continue forever must not hold a fetch.
const MAX_INTERIM: usize = 16;

/// A backend transaction in progress.
pub struct Fetch {
    pub vxid: u32,
    pub log: Batch,
    pub(super) clock: Clock,
    pub hdr_tx: u64,
    pub body_tx: u64,
    pub hdr_rx: u64,
    /// Request body bytes read from the client (wire bytes).
    pub req_body_rx: u64,
    fd: i32,
    is_head: bool,
    /// The backend this fetch goes to (vcl_backend_fetch may change it
    /// before the request is sent).
    pub be: Arc<Backend>,
    /// The connection in use, counted against .max_connections.
    slot: Option<Slot>,
    /// Connect, first-byte and between-bytes timeouts VCL set on bereq:
    /// they win over the backend's, which win over the parameters.
    pub vcl_timeouts: [Option<f64>; 3],
    /// The request body is in memory (std.cache_req_body): the request
    /// can be sent again.
    pub replayable: bool,
    /// VCL set `bereq.http.Connection: close`: sent, and the connection
    /// is not reused after the response.
    pub(crate) close_after: bool,
    /// A pipe of an HTTP/1.0 request: the request line says HTTP/1.0.
    pub(crate) pipe_http10: bool,
    /// A pipe: the request goes with its headers as vcl_pipe left them
    /// (X-Varnish and Connection: close were put there before it).
    pub(crate) piped: bool,
    sh: Arc<Shared>,
    /// The transaction's End has been logged.
    ended: bool,
    /// This attempt went to vcl_backend_error (its Error timestamp is
    /// logged, and no BerespBody).
    pub(crate) errored: bool,
    /// Why the connection closes, as Varnish's BackendClose says it
    /// (a pipe's "Piped transaction"); empty where not known.
    pub(crate) close_why: &'static str,
    /// Where the backend's interim responses (1xx but 100 and 101: 103
    /// Early Hints, 102) go, to be forwarded to the client that asked
    /// (RFC 9110 §15.2); None: read past.
    pub interim: Option<tokio::sync::mpsc::UnboundedSender<bytes::Bytes>>,
}

/// A backend response whose head has been read.
pub struct Response {
    pub conn: BeConn,
    pub head: Head,
    pub framing: Framing,
    /// The body was read ahead to its end and the connection is done
    /// (it was close-delimited): never recycle it.
    pub spent: bool,
}

impl Response {
    /// Read the whole body into the connection's buffer, so that it is
    /// delivered (or stored) as a body of known length: at most `cap`
    /// bytes (an ESI page: [`crate::esi::MAX_PAGE`]; a cache object: its
    /// store's size); a larger body, or one that ends early, fails.
    pub async fn read_whole(&mut self, read_timeout: std::time::Duration, cap: usize) -> Result<(), Error> {
        use crate::http1::body::{transfer, Transfer};
        // No body (a HEAD's answer keeps the Content-Length it announced).
        if self.framing == Framing::None {
            return Ok(());
        }
        if matches!(self.framing, Framing::Length(n) if n > cap as u64) {
            return Err(Error::new(Side::Backend, format!("backend body larger than {cap} bytes to read whole")));
        }
        let t = Transfer::from_backend(self.framing, read_timeout);
        let mut capped = crate::util::Capped { v: Vec::new(), cap };
        let m = transfer(&mut self.conn, &mut capped, &t, &mut Vec::new()).await?;
        let body = capped.v;
        if matches!(self.framing, Framing::Length(n) if m.payload != n) {
            return Err(Error::new(Side::Backend, "backend body ended early"));
        }
        self.spent = self.framing == Framing::Eof;
        let rest = self.conn.buf.split();
        self.conn.buf.extend_from_slice(&body);
        self.conn.buf.extend_from_slice(&rest);
        self.framing = Framing::Length(body.len() as u64);
        Ok(())
    }
}

impl Fetch {
    pub fn new(sh: &Arc<Shared>, vxid: u32, parent: u32, reason: &str) -> Fetch {
        let t = now();
        let mut log = sh.batch();
        log.recf(Tag::Begin, LogSide::Backend, vxid, format_args!("bereq {parent} {reason}"));
        let clock = Clock::start(&mut log, LogSide::Backend, vxid, t);
        Fetch {
            vxid,
            log,
            clock,
            hdr_tx: 0,
            body_tx: 0,
            hdr_rx: 0,
            req_body_rx: 0,
            fd: -1,
            is_head: false,
            be: sh.backend.clone(),
            slot: None,
            vcl_timeouts: [None; 3],
            replayable: false,
            close_after: false,
            pipe_http10: false,
            piped: false,
            sh: sh.clone(),
            ended: false,
            errored: false,
            close_why: "",
            interim: None,
        }
    }

    /// The connect (0), first-byte (1) or between-bytes (2) timeout in
    /// force: bereq's (VCL), else the backend's, else the parameter.
    pub fn timeout(&self, which: usize) -> std::time::Duration {
        let p = self.sh.params();
        let (cfg, param) = match which {
            0 => (self.be.cfg.connect_timeout, p.connect_timeout),
            1 => (self.be.cfg.first_byte_timeout, p.first_byte_timeout),
            _ => (self.be.cfg.between_bytes_timeout, p.between_bytes_timeout),
        };
        match self.vcl_timeouts[which.min(2)] {
            Some(s) => std::time::Duration::from_secs_f64(s.clamp(0.0, crate::params::MAX_SECONDS)),
            None => cfg.unwrap_or(param),
        }
    }

    pub fn stamp(&mut self, label: &str) {
        self.clock.stamp(&mut self.log, self.vxid, label);
    }

    /// A retry goes on as a new transaction, as in Varnish 7: this one
    /// links to it and ends; the new one begins `bereq OLD retry`, its
    /// Start at the Retry time.
    pub fn retry_txn(&mut self) {
        let (old, new, side) = (self.vxid, self.sh.next_vxid(), LogSide::Backend);
        self.log.recf(Tag::Link, side, old, format_args!("bereq {new} retry"));
        self.log.rec(Tag::End, side, old, b"");
        self.sh.seg.log(&self.log);
        self.log.clear();
        self.vxid = new;
        self.log.recf(Tag::Begin, side, new, format_args!("bereq {old} retry"));
        self.clock.restart(&mut self.log, new);
    }

    /// Send the request (and the client's body, if `client` is given) and
    /// read the response head. `build_request` must have filled `wire`.
    pub async fn send<B: ReqBody>(&mut self, req_framing: Framing, mut client: Option<&mut B>, wire: &mut [u8]) -> Result<Response, Error> {
        let sh = self.sh.clone();
        let p = sh.params();
        let be = self.be.clone();
        let mut retried = false;
        if !be.healthy() {
            sh.seg.add(C::BackendUnhealthy, 1);
            be.count(Vbe::Unhealthy, 1);
            return Err(Error::new(Side::Backend, format!("backend {} is sick", be.full_name())));
        }
        loop {
            if self.slot.is_none() {
                match be.slot() {
                    Some(s) => self.slot = Some(s),
                    None => {
                        sh.seg.add(C::BackendBusy, 1);
                        be.count(Vbe::Busy, 1);
                        return Err(Error::new(Side::Backend, format!("backend {}: max_connections reached", be.full_name())));
                    }
                }
            }
            let (mut conn, reused) = match be.take_idle(p.backend_idle_timeout) {
                Some(c) => (c, true),
                None => match be.connect(self.timeout(0)).await {
                    Ok(c) => {
                        sh.seg.add(C::BackendConn, 1);
                        (c, false)
                    }
                    Err(e) => {
                        sh.seg.add(C::BackendFail, 1);
                        be.count_fail(&e);
                        self.slot = None;
                        return Err(e);
                    }
                },
            };
            if reused {
                sh.seg.add(C::BackendReuse, 1);
            }
            self.open_record(&conn, reused);
            sh.seg.add(C::BackendReq, 1);
            be.count(Vbe::Req, 1);
            match self.exchange(&mut conn, wire, req_framing, client.as_deref_mut()).await {
                Ok((head, framing)) => return Ok(Response { conn, head, framing, spent: false }),
                // A reused connection the backend had closed: try once more
                // on a fresh one, if the request can be sent again.
                Err((e, nothing_back))
                    if reused
                        && nothing_back
                        && !retried
                        && (req_framing == Framing::None || self.replayable)
                        && e.side == Side::Backend =>
                {
                    self.close_record("close", false);
                    sh.seg.add(C::BackendRetry, 1);
                    retried = true;
                }
                Err((e, _)) => {
                    self.close_record("close", false);
                    return Err(e);
                }
            }
        }
    }

    /// Build the backend request head into `wire` (and the log): `method`
    /// and the request's URL and headers (X-Forwarded-For was set before
    /// vcl_recv), hop-by-hop headers dropped, plus X-Varnish and the body
    /// framing (no Via: Varnish sends none to the backend).
    pub fn build_request(&mut self, method: &[u8], req: &Bereq, framing: Framing, wire: &mut Vec<u8>) {
        let (v, side) = (self.vxid, LogSide::Backend);
        self.is_head = method == b"HEAD";
        wire.clear();
        wire.extend_from_slice(method);
        wire.push(b' ');
        wire.extend_from_slice(&req.url);
        // A fetch speaks HTTP/1.1 (HTTP/1.0 when VCL 4.0 set bereq.proto
        // so); a pipe keeps the client's version.
        let proto: &[u8] = if self.pipe_http10 || req.minor == 0 { b"HTTP/1.0" } else { b"HTTP/1.1" };
        wire.push(b' ');
        wire.extend_from_slice(proto);
        wire.extend_from_slice(b"\r\n");
        self.log.rec(Tag::BereqMethod, side, v, method);
        self.log.rec(Tag::BereqUrl, side, v, &req.url);
        self.log.rec(Tag::BereqProtocol, side, v, proto);
        let mut out = HeadOut { wire, log: &mut self.log, tag: Tag::BereqHeader, side, vxid: v };
        if self.piped {
            for (n, val) in req.headers.iter() {
                out.header(n, val);
            }
            out.wire.extend_from_slice(b"\r\n");
            return;
        }
        for (n, val) in req.headers.iter() {
            // The headers the client's Connection named are not in
            // `req` (see Bereq::from_req).
            if head::is_hop_by_hop(n) || n.eq_ignore_ascii_case(b"x-varnish") {
                continue;
            }
            out.header(n, val);
        }
        // Connection is hop-by-hop, but a `close` VCL put on bereq is
        // honoured, as Varnish does: sent, and the connection not reused.
        self.close_after = req.headers.iter().any(|(n, v)| n.eq_ignore_ascii_case(b"connection") && head::has_token(v, "close"));
        if self.close_after {
            out.header(b"Connection", b"close");
        }
        out.header(b"X-Varnish", v.to_string().as_bytes());
        match framing {
            Framing::Length(n) => out.header(b"Content-Length", n.to_string().as_bytes()),
            Framing::Chunked => out.header(b"Transfer-Encoding", b"chunked"),
            Framing::None | Framing::Eof => {}
        }
        out.wire.extend_from_slice(b"\r\n");
    }

    pub(crate) fn open_record(&mut self, conn: &BeConn, reused: bool) {
        self.fd = conn.io.as_raw_fd();
        let (peer, local) = (conn.io.peer_addr().ok(), conn.io.local_addr().ok());
        let ip_port = |a: Option<std::net::SocketAddr>| a.map(|a| (a.ip().to_string(), a.port())).unwrap_or(("-".into(), 0));
        let ((rip, rport), (lip, lport)) = (ip_port(peer), ip_port(local));
        let how = if reused { "reuse" } else { "connect" };
        self.stamp("Connected");
        self.log.recf(
            Tag::BackendOpen,
            LogSide::Backend,
            self.vxid,
            format_args!("{} {} {rip} {rport} {lip} {lport} {how}", self.fd, self.be.name),
        );
    }

    /// Write the request and read the response head. On error, also says
    /// whether nothing at all came back (so a retry is safe).
    async fn exchange<B: ReqBody>(
        &mut self,
        conn: &mut BeConn,
        wire: &[u8],
        req_framing: Framing,
        client: Option<&mut B>,
    ) -> Result<(Head, Framing), (Error, bool)> {
        let sh = self.sh.clone();
        let p = sh.params();
        conn.io.write_all(wire).await.map_err(|e| (Error::io(Side::Backend, "writing request", e), true))?;
        self.hdr_tx = wire.len() as u64;
        if let (Some(client), true) = (client, req_framing != Framing::None) {
            let chunk_out = req_framing == Framing::Chunked;
            let moved =
                client.copy_body(req_framing, chunk_out, &mut conn.io, Side::Backend, p.timeout_idle).await.map_err(|e| (e, false))?;
            self.body_tx = moved.tx;
            self.req_body_rx = moved.rx;
            sh.seg.add(C::SReqBodybytes, moved.rx);
        }
        // A TLS backend may hold the request's last record (a no-op on TCP).
        conn.io.flush().await.map_err(|e| (Error::io(Side::Backend, "writing request", e), false))?;
        self.stamp("Bereq");
        // Header bytes of this attempt only (a retry's counts go on).
        let rx_before = self.hdr_rx;
        let mut interim = 0;
        loop {
            let parsed = head::parse_response(&mut conn.buf, p.http_max_hdr, p.http_resp_size)
                .map_err(|e| (Error::new(Side::Backend, format!("bad response head: {}", e.text())), false))?;
            match parsed {
                Parsed::Complete(h) if (100..200).contains(&h.status) && h.status != 101 => {
                    self.hdr_rx += h.wire_len() as u64;
                    interim += 1;
                    if interim > MAX_INTERIM {
                        return Err((Error::new(Side::Backend, "too many interim (1xx) responses"), false));
                    }
                    if let Some(tx) = self.interim.as_ref().filter(|_| h.status != 100) {
                        let _ = tx.send(interim_head(&h));
                    }
                    continue;
                }
                Parsed::Complete(head) if head.iter().any(|(n, v)| n.len() + 2 + v.len() > p.http_resp_hdr_len) => {
                    return Err((Error::new(Side::Backend, "a response header is longer than http_resp_hdr_len"), false));
                }
                Parsed::Complete(head) => {
                    self.hdr_rx += head.wire_len() as u64;
                    self.stamp("Beresp");
                    let (v, side) = (self.vxid, LogSide::Backend);
                    self.log.rec(Tag::BerespProtocol, side, v, head.protocol().as_bytes());
                    self.log.recf(Tag::BerespStatus, side, v, format_args!("{}", head.status));
                    self.log.rec(Tag::BerespReason, side, v, head.reason());
                    for (n, val) in head.iter() {
                        self.log.rec_parts(Tag::BerespHeader, side, v, &[n, b": ", val]);
                    }
                    let framing = head::response_framing(&head, if self.is_head { b"HEAD" } else { b"" })
                        .map_err(|e| (Error::new(Side::Backend, e), false))?;
                    // Varnish's fetch_* counters (fetch_304 where the 304 is merged).
                    let kind = match (self.is_head, head.status, framing) {
                        (true, ..) => Some(C::FetchHead),
                        (_, 204, _) => Some(C::Fetch204),
                        (_, 304, _) => None,
                        (_, _, Framing::Chunked) => Some(C::FetchChunked),
                        (_, _, Framing::Length(n)) if n > 0 => Some(C::FetchLength),
                        (_, _, Framing::Eof) => Some(C::FetchEof),
                        _ => Some(C::FetchNone),
                    };
                    if let Some(c) = kind {
                        sh.seg.add(c, 1);
                    }
                    return Ok((head, framing));
                }
                Parsed::Partial => {
                    let first = conn.buf.is_empty() && self.hdr_rx == rx_before;
                    let timeout = if first { self.timeout(1) } else { self.timeout(2) };
                    match conn.fill(timeout).await {
                        Ok(0) => return Err((Error::new(Side::Backend, "backend closed the connection before a response"), first)),
                        Ok(_) => {}
                        // Varnish's FetchError for a backend that never
                        // started its answer in time.
                        Err(e) if first && e.kind() == std::io::ErrorKind::TimedOut => {
                            return Err((Error::new(Side::Backend, "first byte timeout"), false));
                        }
                        Err(e) => {
                            let retry = first && e_is_reset(&e);
                            return Err((Error::io(Side::Backend, "reading response", e), retry));
                        }
                    }
                }
            }
        }
    }

    /// Log the end of the body, the byte counts and the connection's fate.
    fn finish(&mut self, body_rx: Option<u64>, conn: Option<(BeConn, bool)>) {
        // The connection's fate comes first, as Varnish logs it.
        match conn {
            Some((c, true)) if !self.close_after => {
                self.close_record("recycle", true);
                self.be.recycle(c);
            }
            _ => self.close_record("close", false),
        }
        if !self.errored {
            self.stamp("BerespBody");
        }
        if let Some(n) = body_rx {
            self.log.recf(Tag::Length, LogSide::Backend, self.vxid, format_args!("{n}"));
        }
        let rx = body_rx.unwrap_or(0);
        for (c, n) in [
            (Vbe::BereqHdrbytes, self.hdr_tx),
            (Vbe::BereqBodybytes, self.body_tx),
            (Vbe::BerespHdrbytes, self.hdr_rx),
            (Vbe::BerespBodybytes, rx),
        ] {
            self.be.count(c, n);
        }
        self.log.recf(
            Tag::BereqAcct,
            LogSide::Backend,
            self.vxid,
            format_args!("{} {} {} {} {} {}", self.hdr_tx, self.body_tx, self.hdr_tx + self.body_tx, self.hdr_rx, rx, self.hdr_rx + rx),
        );
    }

    /// A response that is not used (a retry, an error, abandon): its
    /// connection goes back to the pool when nothing of it is left to read
    /// (no body), as Varnish does; else it is closed.
    pub fn release(&mut self, resp: Response) {
        let empty = matches!(resp.framing, Framing::None | Framing::Length(0));
        if empty && !self.close_after && !head::backend_closes(&resp.head) {
            self.close_record("recycle", true);
            self.be.recycle(resp.conn);
        } else {
            self.close_record("close", false);
        }
    }

    fn close_record(&mut self, how: &str, recycled: bool) {
        if self.fd < 0 {
            return;
        }
        if recycled {
            self.sh.seg.add(C::BackendRecycle, 1);
        }
        let why = if how == "close" { self.close_why } else { "" };
        let sep = if why.is_empty() { "" } else { " " };
        self.log.recf(Tag::BackendClose, LogSide::Backend, self.vxid, format_args!("{} {} {how}{sep}{why}", self.fd, self.be.name));
        self.fd = -1;
        self.slot = None;
    }

    /// Log why a fetch was given up without counting it as failed again
    /// (the policy abandoned it).
    pub fn note(&mut self, e: &Error) {
        self.log.recf(Tag::FetchError, LogSide::Backend, self.vxid, format_args!("{e}"));
    }

    /// Log a failure of this fetch.
    pub fn error(&mut self, e: &Error) {
        self.sh.seg.add(C::FetchFailed, 1);
        self.log.recf(Tag::FetchError, LogSide::Backend, self.vxid, format_args!("{e}"));
    }

    /// End the transaction: the body's length (None: none was
    /// delivered), the byte counts, the connection's fate (recycled when
    /// the flag says it can be), then the log.
    pub fn done(mut self, body_rx: Option<u64>, conn: Option<(BeConn, bool)>) {
        self.finish(body_rx, conn);
        self.end();
    }

    /// End a transaction that never reached a backend (a pipe that could
    /// not connect): no byte counts, just the log.
    pub fn end_unsent(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.ended = true;
        self.log.rec(Tag::End, LogSide::Backend, self.vxid, b"");
        self.sh.seg.log(&self.log);
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        if !self.ended {
            self.finish(None, None);
            self.end();
        }
    }
}

fn e_is_reset(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionAborted)
}
