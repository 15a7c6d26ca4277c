//! The seam between the request state machine and the protocol it is
//! spoken in (Varnish's `struct transport`). The steps read a request's
//! head and body and write its response only through these traits; HTTP/1
//! implements them now (`crate::http1::transport`), an HTTP/2 stream or a
//! TLS connection implements them later without touching the steps.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncWrite;
use tokio::sync::watch;

use crate::backend::tls::BeStream;
use crate::error::Error;
use crate::error::Side;
use crate::http1::body::{Moved, Pace};
use crate::http1::head::{Framing, Head, HeadError};
use crate::params::Params;
use crate::req::reason::Reason;

/// Why no request head came.
pub enum ReadErr {
    /// The session ends without a request (closed, idle, timed out).
    Closed(Reason),
    /// Bytes came that are not a request: answered with 400.
    Bad { err: HeadError, t_start: f64 },
    /// The HTTP/2 connection preface came (http2 enabled): the connection
    /// turns to HTTP/2, the preface still buffered.
    Preface,
}

/// The child's stop signal as a connection waits for its next request:
/// one waiter for the connection's life, registered at its first wait and
/// kept between requests, where a `wait_for` per request registered a new
/// waiter and withdrew it every time (a lock each way, about 2% of a small
/// hit).
pub struct Stop {
    wait: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// A receiver to look at: once the waiter is registered for this
    /// task, a poll only checks whether the value changed (an atomic
    /// load), where polling the waiter took its list's lock.
    rx: watch::Receiver<bool>,
    /// The task the waiter was registered for.
    armed: Option<std::task::Waker>,
    done: bool,
}

impl Stop {
    pub fn new(rx: watch::Receiver<bool>) -> Stop {
        let mut waiting = rx.clone();
        // A dropped sender stops too, as wait_for's error did.
        Stop {
            wait: Box::pin(async move {
                let _ = waiting.wait_for(|s| *s).await;
            }),
            rx,
            armed: None,
            done: false,
        }
    }
}

impl std::future::Future for Stop {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.done {
            return std::task::Poll::Ready(());
        }
        // Registered for this task, and nothing sent since: the waiter
        // will wake it (the value only ever goes to true).
        if self.armed.as_ref().is_some_and(|w| w.will_wake(cx.waker())) && matches!(self.rx.has_changed(), Ok(false)) {
            return std::task::Poll::Pending;
        }
        let r = self.wait.as_mut().poll(cx);
        self.done = r.is_ready();
        self.armed = if self.done { None } else { Some(cx.waker().clone()) };
        r
    }
}

/// What reading a PROXY header gave.
pub enum ProxyRead {
    Header(crate::listen::proxy::Header),
    /// The session ends: why, and the records saying so.
    Closed {
        reason: Reason,
        garbage: crate::listen::proxy::Garbage,
    },
}

/// What a pipe moved before it ended.
pub struct Tunnel {
    pub to_backend: u64,
    pub to_client: u64,
    /// Nothing moved either way for pipe_timeout.
    pub idle_out: bool,
}

/// A request body, as the fetch that forwards it reads it.
#[allow(async_fn_in_trait)]
pub trait ReqBody {
    /// Copy the body (framed as `framing` says) to `dst`, chunked again on
    /// the way out when `chunk_out`. A read may wait `read_timeout`, and
    /// the whole body keeps to the request's pace.
    async fn copy_body<W: AsyncWrite + Unpin>(
        &mut self,
        framing: Framing,
        chunk_out: bool,
        dst: &mut W,
        dst_side: Side,
        read_timeout: Duration,
    ) -> Result<Moved, Error>;

    /// When a copy last read the client's body to its end, once (the
    /// request logs it as its ReqBody timestamp); None if not since.
    fn take_body_done(&mut self) -> Option<f64> {
        None
    }
}

/// A client connection the state machine serves requests on.
#[allow(async_fn_in_trait)]
pub trait Transport: ReqBody + Send {
    /// Where a response's bytes go (with the send deadlines armed by
    /// [`Transport::arm_send`]).
    type Out: AsyncWrite + Unpin + Send;

    /// Wait for the next request head: within `timeout_idle` for its
    /// first byte, `timeout_req` for the rest; an idle connection also
    /// ends when `stop` turns true.
    async fn read_head(&mut self, p: &Params, stop: &mut Stop) -> Result<(Head, f64), ReadErr>;
    /// Read the PROXY protocol header a `,PROXY` listener's connections
    /// start with, within `timeout`; what follows it stays buffered for
    /// the first request.
    async fn read_proxy(&mut self, timeout: Duration) -> ProxyRead {
        let _ = timeout;
        ProxyRead::Closed { reason: Reason::RxJunk, garbage: Default::default() }
    }
    /// The body framing of a request with this head, where the transport
    /// knows it rather than the head (an HTTP/2 stream's body ends with
    /// the stream); None: the head's framing fields say (HTTP/1).
    fn framing(&self, head: &Head) -> Option<Result<Framing, &'static str>> {
        let _ = head;
        None
    }
    /// What the connection's TLS negotiated (None: not TLS).
    fn tls_info(&self) -> Option<crate::vcl::model::TlsInfo> {
        None
    }
    /// The connection's descriptor (SessOpen shows it).
    fn fd(&self) -> i32;
    /// Bytes received and not consumed yet (a bad head, the start of a
    /// body, pipelined requests).
    fn buffered(&self) -> &[u8];
    /// Take those bytes (a pipe forwards them first).
    fn take_buffered(&mut self) -> BytesMut;
    /// How fast the current request's body must arrive.
    fn set_pace(&mut self, pace: Option<Pace>);
    /// A response starts: all of it within `total`, no write blocked
    /// longer than `idle`.
    fn arm_send(&mut self, total: Duration, idle: Duration);
    /// The response's byte sink.
    fn out(&mut self) -> &mut Self::Out;
    /// Hold small writes to `out` and send them together, or stop (after
    /// a flush): an ESI page's parts (HTTP/1; elsewhere nothing to do).
    fn hold(&mut self, _on: bool) {}
    /// For an ESI include inside a gzip page: what its body adds to the
    /// page's gzip stream (None everywhere else).
    fn esi_gzip(&mut self) -> Option<&mut GzAcc> {
        None
    }
    /// Read until `limit` bytes of the body (or all of a smaller one) are
    /// buffered.
    async fn prefill(&mut self, framing: Framing, limit: usize, read_timeout: Duration) -> Result<(), Error>;
    /// Relay bytes both ways with `backend` until either side closes, or
    /// nothing moves for `idle` (0: never); then close our side.
    async fn tunnel(&mut self, backend: &mut BeStream, idle: Duration) -> Tunnel;
    /// The session is over: close the connection.
    async fn close(&mut self);
}

/// What an include adds to a gzip page: the CRC and length of the plain
/// bytes its deflate data stands for; with `stored`, whatever it writes
/// is plain and is sent as stored deflate blocks (counted here).
#[derive(Debug)]
pub struct GzAcc {
    pub crc: u32,
    pub len: u64,
    pub stored: bool,
}

impl GzAcc {
    pub fn new() -> GzAcc {
        GzAcc { crc: crate::gzip::code::crc32(0, &[]), len: 0, stored: true }
    }

    /// Deflate data standing for `len` plain bytes with this CRC went out.
    pub fn add(&mut self, crc: u32, len: u64) {
        self.crc = crate::gzip::code::crc32_combine(self.crc, crc, len);
        self.len += len;
    }
}

impl Default for GzAcc {
    fn default() -> GzAcc {
        GzAcc::new()
    }
}

/// A request body read into memory (std.cache_req_body): it can be sent
/// as often as needed.
pub struct CachedBody(pub bytes::Bytes);

impl ReqBody for CachedBody {
    async fn copy_body<W: AsyncWrite + Unpin>(
        &mut self,
        _: Framing,
        _: bool,
        dst: &mut W,
        dst_side: Side,
        _: Duration,
    ) -> Result<Moved, Error> {
        tokio::io::AsyncWriteExt::write_all(dst, &self.0).await.map_err(|e| Error::io(dst_side, "writing body", e))?;
        let n = self.0.len() as u64;
        Ok(Moved { rx: 0, tx: n, payload: n })
    }
}

/// No request body (a fetch for the cache): reading it moves nothing.
pub struct NoBody;

impl ReqBody for NoBody {
    async fn copy_body<W: AsyncWrite + Unpin>(&mut self, _: Framing, _: bool, _: &mut W, _: Side, _: Duration) -> Result<Moved, Error> {
        Ok(Moved::default())
    }
}
