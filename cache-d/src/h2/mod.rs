//! HTTP/2 (`-p feature=+http2`, off by default as in Varnish): on TLS
//! listeners by ALPN, on cleartext ones by the connection preface (prior
//! knowledge) or `Upgrade: h2c`. The `h2` crate does the framing, HPACK
//! and flow control; each stream becomes one request through the same
//! steps as HTTP/1 ([`stream::H2Stream`] is its transport), logged under
//! the connection's session as Varnish logs streams.
//!
//! Defences, beyond the crate's own (HPACK tables bounded by
//! h2_header_table_size, decoded header lists by h2_max_header_list_size
//! and http_req_size, CONTINUATION frames counted, streams reset before
//! they are accepted limited):
//! - work in progress is bounded by h2_max_concurrent_streams counted in
//!   our running requests, not in the client's open streams, so resetting
//!   streams frees nothing (CVE-2023-44487); a stream over the limit is
//!   refused (REFUSED_STREAM);
//! - resets within h2_rapid_reset of a stream's start, and refused
//!   streams, count against h2_rapid_reset_limit per h2_rapid_reset_period;
//!   past it the connection ends with GOAWAY ENHANCE_YOUR_CALM (SessClose
//!   RAPID_RESET, MAIN.sc_rapid_reset).

pub mod head;
pub mod io;
pub mod out;
pub mod scan;
pub mod stream;
pub mod upgrade;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::server::{Connection, SendResponse};
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use self::io::Rewind;
use self::out::RespOut;
use self::stream::H2Stream;
use crate::http1::head::Head;
use crate::listen::stream::ClientStream;
use crate::params::Params;
use crate::req::reason::Reason;
use crate::req::state::Sess;
use crate::util::now;

/// The HTTP/2 connection preface a client starts with.
pub use crate::http1::head::H2_PREFACE as PREFACE;

/// Serve a connection as HTTP/2 until it ends, then close the session.
/// `pre` holds bytes already read from it (the preface, or what followed
/// an upgrade request); `upgrade` is the HTTP/1.1 request that asked for
/// h2c, answered on stream 1.
pub async fn serve(mut sess: Sess, stream: ClientStream, pre: BytesMut, upgrade: Option<Head>, stop: watch::Receiver<bool>) {
    let fd = stream.raw_fd();
    let p = sess.sh.params().clone();
    // The session's first records (Begin, SessOpen, earlier requests'
    // Links) go out before any stream's Link record.
    sess.sh.seg.log(&sess.log);
    sess.log.clear();
    let mut io = Rewind::new(stream, pre, p.h2.max_frame_size as usize);
    io.set_stream_window(p.h2.initial_window_size);
    let reason = match upgrade {
        Some(head) => match upgrade::switch(&mut io, &head).await {
            Ok(()) => connection(&mut sess, &mut io, &p, fd, stop).await,
            Err(r) => r,
        },
        None => connection(&mut sess, &mut io, &p, fd, stop).await,
    };
    crate::req::close_session(&mut sess, reason);
    let _ = tokio::time::timeout(Duration::from_secs(1), io.shutdown()).await;
    if io.goaway_sent().is_some() {
        // What the client still sends is read and dropped for a moment:
        // closing with it unread would reset the connection, and the
        // client could lose the GOAWAY.
        let drain = async {
            let mut sink = [0u8; 4096];
            while matches!(io.get_mut().read(&mut sink).await, Ok(n) if n > 0) {}
        };
        let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
    }
}

/// The crate's server settings from the h2_* parameters.
fn builder(p: &Params) -> h2::server::Builder {
    let h = &p.h2;
    let mut b = h2::server::Builder::new();
    b.initial_window_size(h.initial_window_size)
        .max_frame_size(h.max_frame_size)
        .max_header_list_size(h.max_header_list_size.min(u32::try_from(p.http_req_size).unwrap_or(u32::MAX)))
        .header_table_size(h.header_table_size)
        .max_concurrent_streams(h.max_concurrent_streams);
    b
}

/// Handshake and serve streams; why the session ended.
async fn connection<S>(sess: &mut Sess, io: &mut Rewind<S>, p: &Params, fd: i32, mut stop: watch::Receiver<bool>) -> Reason
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let resets_seen = io.resets();
    let data = io.data_seen();
    let ended = |sess: &mut Sess, e: &h2::Error| ended(sess, e, resets_seen.load(std::sync::atomic::Ordering::Relaxed));
    let mut conn =
        match tokio::time::timeout(p.timeout_idle.max(Duration::from_millis(1)), builder(p).handshake::<_, Bytes>(&mut *io)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return ended(sess, &e),
            Err(_) => return Reason::RxTimeout,
        };
    // The streams run in this task, beside the connection (as a server
    // thread serves its connections' streams): no task per stream, no
    // wakeups across threads; connections spread over the workers.
    let mut tasks = FuturesUnordered::new();
    let mut resets = Resets::new(p.h2.rapid_reset_limit, p.h2.rapid_reset_period);
    let mut verdict = None;
    let mut stopping = false;
    let mut wide = false;
    let stalls = out::Stalls::new();
    let limit = p.h2.max_concurrent_streams as usize;
    let reason = loop {
        let idle = tasks.is_empty() && !stopping;
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((req, respond))) if req.uri().path().is_empty() => no_path(sess, respond),
                Some(Ok((req, respond))) if tasks.len() >= limit => {
                    refuse(sess, req.into_body(), respond);
                    if resets.hit() {
                        verdict = Some(calm(&mut conn));
                    }
                }
                Some(Ok((req, respond))) => {
                    let t = StreamTask { sess: sess.for_stream(2), fd, rapid: p.h2.rapid_reset, stalls: stalls.clone() };
                    tasks.push(t.run(req, respond));
                }
                Some(Err(e)) => break verdict.unwrap_or_else(|| ended(sess, &e)),
                None => break verdict.unwrap_or(Reason::RemClose),
            },
            // The connection's window opens to h2_rx_window_low_water with
            // the first DATA of a request body (as Varnish: no
            // WINDOW_UPDATE before one arrives).
            _ = data.notified(), if !wide => {
                conn.set_target_window_size(p.h2.rx_window_low_water.max(65_535));
                wide = true;
            }
            Some(rapid) = tasks.next(), if !tasks.is_empty() => {
                if rapid && resets.hit() && verdict.is_none() {
                    verdict = Some(calm(&mut conn));
                }
            }
            _ = tokio::time::sleep(p.timeout_idle), if idle => {
                conn.graceful_shutdown();
                verdict = verdict.or(Some(Reason::RxCloseIdle));
                stopping = true;
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                conn.graceful_shutdown();
                stopping = true;
            }
        }
    };
    drop(conn);
    let reason = match io.goaway_sent() {
        Some(code) => {
            sess.log.recf(Tag::Error, LogSide::Client, sess.vxid, format_args!("HTTP/2: connection error {code:?} (GOAWAY sent)"));
            Reason::RxJunk
        }
        None => reason,
    };
    // Streams still running end at their next write to the closed
    // connection; their records go before the session's last ones.
    while tasks.next().await.is_some() {}
    reason
}

/// Too many resets: GOAWAY ENHANCE_YOUR_CALM, counted.
fn calm<T: AsyncRead + AsyncWrite + Unpin>(conn: &mut Connection<T, Bytes>) -> Reason {
    conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
    Reason::RapidReset
}

/// A stream without a :path — a CONNECT (RFC 9113 §8.5), or a request
/// the crate let through without one — is reset with PROTOCOL_ERROR, as
/// Varnish resets it ("Missing :path"): there is nothing to look up, and
/// a tunnel is not passed to a backend.
fn no_path(sess: &mut Sess, mut respond: SendResponse<Bytes>) {
    sess.log.rec(Tag::Debug, LogSide::Client, sess.vxid, b"Missing :path");
    respond.send_reset(h2::Reason::PROTOCOL_ERROR);
}

/// A stream over the limit of requests in progress: refused, counted.
fn refuse(sess: &Sess, body: RecvStream, mut respond: SendResponse<Bytes>) {
    drop(body);
    respond.send_reset(h2::Reason::REFUSED_STREAM);
    sess.sh.seg.add(C::ReqReset, 1);
}

/// Why a connection the crate gave up on ended (the client had sent
/// `resets` RST_STREAM frames); an error is logged.
fn ended(sess: &mut Sess, e: &h2::Error, resets: u64) -> Reason {
    if e.is_io() || e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR) {
        return Reason::RemClose;
    }
    let text = e.to_string();
    sess.log.recf(Tag::Error, LogSide::Client, sess.vxid, format_args!("HTTP/2: {text}"));
    // The crate's own limit on streams reset before they were served
    // (its error does not say which limit: the client's resets do).
    if e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) && resets > 0 {
        Reason::RapidReset
    } else {
        Reason::RxJunk
    }
}

/// One stream's request.
struct StreamTask {
    sess: Sess,
    fd: i32,
    /// Resets sooner than this after the stream began count as rapid.
    rapid: Duration,
    /// The connection's streams waiting for flow-control credit.
    stalls: std::sync::Arc<out::Stalls>,
}

impl StreamTask {
    /// Serve the request; true if the client reset the stream within
    /// h2_rapid_reset of its start.
    async fn run(mut self, req: http::Request<RecvStream>, respond: SendResponse<Bytes>) -> bool {
        let (t0, t_start) = (Instant::now(), now());
        let (parts, body) = req.into_parts();
        let head = head::request_head(&parts);
        let out = RespOut::new(respond, parts.method == http::Method::HEAD, self.stalls.clone());
        let mut conn = H2Stream::new(body, out, self.fd);
        let sh = self.sess.sh.clone();
        let served = crate::req::contain::contain(crate::req::request(&mut self.sess, &mut conn, head, t_start, sh.params_arc())).await;
        if let Err(why) = served {
            sh.seg.add(C::ScVclFailure, 1);
            let vxid = self.sess.vxid;
            self.sess.log.recf(Tag::Error, LogSide::Client, vxid, format_args!("request task failed (HTTP/2 stream): {why}"));
        }
        conn.out.finish();
        sh.seg.log(&self.sess.log);
        let reset = conn.out.peer_reset();
        if reset {
            sh.seg.add(C::ReqReset, 1);
        }
        reset && t0.elapsed() < self.rapid
    }
}

/// Suspect resets in a sliding window (h2_rapid_reset_limit per
/// h2_rapid_reset_period; a limit of 0 never trips).
struct Resets {
    limit: u32,
    period: Duration,
    hits: VecDeque<Instant>,
}

impl Resets {
    fn new(limit: u32, period: Duration) -> Resets {
        Resets { limit, period, hits: VecDeque::new() }
    }

    /// One more; true when the limit is exceeded.
    fn hit(&mut self) -> bool {
        if self.limit == 0 {
            return false;
        }
        let now = Instant::now();
        while self.hits.front().is_some_and(|t| now.duration_since(*t) > self.period) {
            self.hits.pop_front();
        }
        if self.hits.len() > self.limit as usize {
            return true;
        }
        self.hits.push_back(now);
        self.hits.len() > self.limit as usize
    }
}
