//! HTTP/1.1 as the request state machine's transport: keep-alive and
//! pipelined request heads, bodies by Content-Length or chunked, responses
//! through the client socket's send deadlines, and pipes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, Side};
use crate::http1::body::{self, Moved, Pace, Transfer};
use crate::http1::clientio::ClientIo;
use crate::http1::conn::BufConn;
use crate::http1::head::{self, Framing, Head, Parsed};
use crate::listen::proxy::{self, Garbage, Scan};
use crate::listen::stream::ClientStream;
use crate::params::Params;
use crate::req::reason::Reason;
use crate::req::transport::{ProxyRead, ReadErr, ReqBody, Stop, Transport, Tunnel};
use crate::util::now;

/// A client's HTTP/1 connection.
pub struct Http1 {
    conn: BufConn<ClientIo<ClientStream>>,
    /// Scratch space for body transfers.
    scratch: Vec<u8>,
    /// When a request body was last read to its end, not yet logged.
    body_done: Option<f64>,
}

impl Http1 {
    pub fn new(stream: ClientStream) -> Http1 {
        Http1 { conn: BufConn::new(ClientIo::new(stream)), scratch: Vec::new(), body_done: None }
    }

    /// The protocol TLS's ALPN chose (None: not TLS, or none chosen).
    pub fn alpn(&self) -> Option<&[u8]> {
        self.conn.io.get_ref().alpn()
    }

    /// A connection going on with bytes already read (`into_parts`).
    pub fn from_parts(stream: ClientStream, buf: BytesMut) -> Http1 {
        Http1 { conn: BufConn::with_buf(ClientIo::new(stream), buf), scratch: Vec::new(), body_done: None }
    }

    /// The connection and the bytes read and not used (for HTTP/2, or
    /// another event loop).
    pub fn into_parts(self) -> (ClientStream, BytesMut) {
        (self.conn.io.into_inner(), self.conn.buf)
    }
}

impl ReqBody for Http1 {
    async fn copy_body<W: AsyncWrite + Unpin>(
        &mut self,
        framing: Framing,
        chunk_out: bool,
        dst: &mut W,
        dst_side: Side,
        read_timeout: Duration,
    ) -> Result<Moved, Error> {
        let t = Transfer { framing, chunk_out, src_side: Side::Client, dst_side, read_timeout, pace: self.conn.io.pace };
        let moved = body::transfer(&mut self.conn, dst, &t, &mut self.scratch).await?;
        if framing != Framing::None {
            self.body_done = Some(now());
        }
        Ok(moved)
    }

    fn take_body_done(&mut self) -> Option<f64> {
        self.body_done.take()
    }
}

impl Transport for Http1 {
    type Out = ClientIo<ClientStream>;

    async fn read_head(&mut self, p: &Params, stop: &mut Stop) -> Result<(Head, f64), ReadErr> {
        let c = &mut self.conn;
        let mut t_start = if c.buf.is_empty() { None } else { Some(now()) };
        let mut head_deadline = None;
        loop {
            if !c.buf.is_empty() && p.http2() && head::H2_PREFACE.starts_with(&c.buf[..c.buf.len().min(24)]) {
                // An HTTP/2 client with prior knowledge (or the start of
                // its preface: wait for the rest).
                if c.buf.len() >= head::H2_PREFACE.len() {
                    return Err(ReadErr::Preface);
                }
            } else if !c.buf.is_empty() {
                let t = *t_start.get_or_insert_with(now);
                match head::parse_request(&mut c.buf, p.http_max_hdr, p.http_req_size) {
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
            // The read first: a request that came is served before a stop
            // is looked at (and the stop's waiter is not polled at all).
            tokio::select! {
                biased;
                r = c.fill(wait) => match r {
                    Ok(0) if idle => return Err(ReadErr::Closed(Reason::RemClose)),
                    Ok(0) => return Err(ReadErr::Closed(Reason::RxJunk)),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                        return Err(ReadErr::Closed(if idle { Reason::RxCloseIdle } else { Reason::RxTimeout }))
                    }
                    Err(_) => return Err(ReadErr::Closed(Reason::RemClose)),
                },
                _ = &mut *stop, if idle => return Err(ReadErr::Closed(Reason::RxCloseIdle)),
            }
        }
    }

    async fn read_proxy(&mut self, timeout: Duration) -> ProxyRead {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let c = &mut self.conn;
            let closed = |reason| ProxyRead::Closed { reason, garbage: Garbage::default() };
            match proxy::scan(&c.buf) {
                Scan::More => {}
                Scan::Junk => return closed(Reason::RxJunk),
                Scan::Overflow => return closed(Reason::RxOverflow),
                Scan::Complete { len, header } => {
                    // What follows is the first request.
                    let _ = c.buf.split_to(len);
                    return match header {
                        Ok(h) => ProxyRead::Header(h),
                        Err(garbage) => ProxyRead::Closed { reason: Reason::RxJunk, garbage },
                    };
                }
            }
            match c.fill(deadline.saturating_duration_since(tokio::time::Instant::now())).await {
                Ok(0) => return closed(if c.buf.is_empty() { Reason::RemClose } else { Reason::RxJunk }),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return closed(Reason::RxTimeout),
                Err(_) => return closed(Reason::RemClose),
            }
        }
    }

    fn tls_info(&self) -> Option<crate::vcl::model::TlsInfo> {
        let ClientStream::Tls(s) = self.conn.io.get_ref() else { return None };
        let c = &s.get_ref().1;
        let version = match c.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "",
        };
        let cipher = c.negotiated_cipher_suite().and_then(|s| s.suite().as_str()).unwrap_or_default();
        // rustls names TLS 1.3 suites TLS13_...; IANA's names are TLS_...
        let cipher = cipher.strip_prefix("TLS13_").map_or_else(|| cipher.to_string(), |rest| format!("TLS_{rest}"));
        let alpn = c.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned());
        Some(crate::vcl::model::TlsInfo { version, cipher, sni: c.server_name().map(str::to_string), alpn })
    }

    fn fd(&self) -> i32 {
        self.conn.io.get_ref().raw_fd()
    }

    fn buffered(&self) -> &[u8] {
        &self.conn.buf
    }

    fn take_buffered(&mut self) -> BytesMut {
        self.conn.buf.split()
    }

    fn set_pace(&mut self, pace: Option<Pace>) {
        self.conn.io.pace = pace;
    }

    fn arm_send(&mut self, total: Duration, idle: Duration) {
        self.conn.io.arm(total, idle);
    }

    fn hold(&mut self, on: bool) {
        self.conn.io.hold(on);
    }

    fn out(&mut self) -> &mut ClientIo<ClientStream> {
        &mut self.conn.io
    }

    async fn prefill(&mut self, framing: Framing, limit: usize, read_timeout: Duration) -> Result<(), Error> {
        let pace = self.conn.io.pace;
        body::prefill(&mut self.conn, framing, limit, read_timeout, pace).await
    }

    async fn tunnel(&mut self, backend: &mut crate::backend::tls::BeStream, idle: Duration) -> Tunnel {
        let (to_be, to_client) = (AtomicU64::new(0), AtomicU64::new(0));
        let mut idle_out = false;
        {
            let (mut cr, mut cw) = tokio::io::split(self.conn.io.get_mut());
            let (mut br, mut bw) = tokio::io::split(backend);
            tokio::select! {
                _ = relay(&mut cr, &mut bw, &to_be) => {}
                _ = relay(&mut br, &mut cw, &to_client) => {}
                _ = idle_timer(idle, &to_be, &to_client) => idle_out = true,
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), cw.shutdown()).await;
        }
        Tunnel { to_backend: to_be.into_inner(), to_client: to_client.into_inner(), idle_out }
    }

    async fn close(&mut self) {
        let _ = self.conn.io.shutdown().await;
    }
}

/// Resolves once neither counter moved for `idle` (never when it is 0).
async fn idle_timer(idle: Duration, a: &AtomicU64, b: &AtomicU64) {
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
                // Flushed: a TLS side may hold what it took (a no-op on TCP).
                if w.write_all(&buf[..k]).await.is_err() || w.flush().await.is_err() {
                    return;
                }
                n.fetch_add(k as u64, Ordering::Relaxed);
            }
        }
    }
}
