//! A stream's response side. The request steps write an HTTP/1.1
//! response (head, then the body framed by Content-Length, chunked, or
//! until the end) to their transport's byte sink, whatever the protocol;
//! [`RespOut`] is that sink for an HTTP/2 stream: it reads the head back
//! into HEADERS, strips the body's framing ([`Unframe`]) and sends the
//! payload as DATA within the stream's flow-control window, ending the
//! stream with the body. Every delivery path (hits, passes, ESI pages,
//! gzip on the fly, ranges, synthetic pages, 100 Continue) works on a
//! stream unchanged.
//!
//! A stream waits for credit within send_timeout and idle_send_timeout,
//! and, with its connection's other streams ([`Stalls`]), within a bound
//! of its own: a response that cannot be sent keeps what is behind it —
//! for a pass, a backend connection (the fetch goes at the client's
//! pace: its body is not kept in memory). A client that opens streams and
//! never opens its window would otherwise pin h2_max_concurrent_streams
//! backend connections per connection for idle_send_timeout. So once a
//! connection has given no credit to any stream for [`STALL_GRACE`], at
//! most [`MAX_STALLED`] of its streams keep waiting; the others fail as a
//! send timeout does (the stream is reset, the fetch ends, its backend
//! connection is closed). A client that reads slowly still gives credit
//! now and then and is not affected; one with a stream it does not read
//! (a paused video) has other streams moving.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::SendStream;
use tokio::io::AsyncWrite;
use tokio::time::{Instant, Sleep};

use super::head;
use crate::http1::head::{parse_response, Head, Parsed};

/// The most a response head may take (ours, so generous).
const MAX_HEAD: usize = 1 << 20;
/// The most payload offered to one DATA write (the crate splits it into
/// frames of the client's maximum size).
const MAX_CHUNK: usize = 256 * 1024;

/// How long a connection may give no credit before its waiting streams
/// past [`MAX_STALLED`] give up.
pub const STALL_GRACE: Duration = Duration::from_secs(2);
/// The most streams of a connection that wait for credit the connection
/// does not give.
pub const MAX_STALLED: usize = 8;

/// A connection's streams waiting for flow-control credit.
pub struct Stalls {
    base: Instant,
    /// Streams waiting now.
    waiting: AtomicUsize,
    /// When a stream last got credit (ms since `base`).
    credit_ms: AtomicU64,
}

impl Stalls {
    pub fn new() -> Arc<Stalls> {
        Arc::new(Stalls { base: Instant::now(), waiting: AtomicUsize::new(0), credit_ms: AtomicU64::new(0) })
    }

    fn credit(&self) {
        self.credit_ms.store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Too many streams wait on a connection that gives no credit.
    fn over(&self) -> bool {
        let since = self.base.elapsed().saturating_sub(Duration::from_millis(self.credit_ms.load(Ordering::Relaxed)));
        self.waiting.load(Ordering::Relaxed) > MAX_STALLED && since >= STALL_GRACE
    }
}

/// One stream counted as waiting, until dropped.
struct Waiting(Arc<Stalls>);

impl Waiting {
    fn new(s: &Arc<Stalls>) -> Waiting {
        s.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(s.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How a body's bytes are framed in what the steps write.
#[derive(Debug, PartialEq)]
pub enum Unframe {
    /// This many payload bytes remain.
    Length(u64),
    Chunked(Chunk),
    /// Everything until the request ends is payload.
    Eof,
    /// The body is complete; anything more is dropped.
    Over,
}

/// Where a chunked body's parser stands.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    /// Reading a chunk size (hex digits so far).
    Size(u64),
    /// Skipping the rest of the size line (extensions, CR).
    Line(u64),
    /// Payload bytes of the chunk remain.
    Data(u64),
    /// Skipping the CRLF after a chunk's payload.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one (the flag:
    /// the current line is empty so far).
    Trailer(bool),
}

/// What the next bytes written are.
#[derive(Debug, PartialEq)]
pub enum Piece {
    /// This many bytes are framing, consumed.
    Frame(usize),
    /// This many bytes are payload.
    Data(usize),
    /// The body is over.
    Over,
}

impl Unframe {
    /// How the body after response head `h` is framed in what the steps
    /// write; Over (no body) for HEAD (`head_only`), 1xx, 204 and 304.
    pub fn of(h: &Head, head_only: bool) -> Unframe {
        if head::bodiless(h.status, head_only) {
            Unframe::Over
        } else if h.has_token("transfer-encoding", "chunked") {
            Unframe::Chunked(Chunk::Size(0))
        } else {
            match h.get("content-length").and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok()) {
                Some(n) => Unframe::Length(n),
                None => Unframe::Eof,
            }
        }
    }

    /// Does a response with this framing carry no payload at all?
    pub fn empty(&self) -> bool {
        matches!(self, Unframe::Over | Unframe::Length(0))
    }

    /// Classify the start of `buf` (not empty); framing bytes are consumed
    /// here, payload bytes when [`Unframe::took`] says they went out.
    pub fn step(&mut self, buf: &[u8]) -> Piece {
        match self {
            Unframe::Over | Unframe::Length(0) => {
                *self = Unframe::Over;
                Piece::Over
            }
            Unframe::Eof => Piece::Data(buf.len()),
            Unframe::Length(n) => Piece::Data((*n).min(buf.len() as u64) as usize),
            Unframe::Chunked(Chunk::Data(n)) => Piece::Data((*n).min(buf.len() as u64) as usize),
            Unframe::Chunked(c) => {
                let mut i = 0;
                while i < buf.len() && !matches!(c, Chunk::Data(_)) {
                    if c.frame_byte(buf[i]) {
                        *self = Unframe::Over;
                        return Piece::Frame(i + 1);
                    }
                    i += 1;
                }
                Piece::Frame(i)
            }
        }
    }

    /// `n` payload bytes went out.
    pub fn took(&mut self, n: usize) {
        match self {
            Unframe::Length(left) => *left -= n as u64,
            Unframe::Chunked(Chunk::Data(left)) => {
                *left -= n as u64;
                if *left == 0 {
                    *self = Unframe::Chunked(Chunk::DataEnd);
                }
            }
            _ => {}
        }
    }

    /// Does the body end with the payload sent so far?
    pub fn complete(&self) -> bool {
        matches!(self, Unframe::Length(0) | Unframe::Over)
    }
}

impl Chunk {
    /// One framing byte; true when it ended the body.
    fn frame_byte(&mut self, b: u8) -> bool {
        match *self {
            Chunk::Size(n) => match (b as char).to_digit(16) {
                Some(d) => *self = Chunk::Size(n.saturating_mul(16).saturating_add(u64::from(d))),
                None if b == b'\n' => *self = Chunk::after_size(n),
                None => *self = Chunk::Line(n),
            },
            Chunk::Line(n) => {
                if b == b'\n' {
                    *self = Chunk::after_size(n);
                }
            }
            Chunk::DataEnd => {
                if b == b'\n' {
                    *self = Chunk::Size(0);
                }
            }
            Chunk::Trailer(empty) => match b {
                b'\n' if empty => return true,
                b'\n' => *self = Chunk::Trailer(true),
                b'\r' => {}
                _ => *self = Chunk::Trailer(false),
            },
            Chunk::Data(_) => {}
        }
        false
    }

    fn after_size(n: u64) -> Chunk {
        if n == 0 {
            Chunk::Trailer(true)
        } else {
            Chunk::Data(n)
        }
    }
}

enum State {
    /// Waiting for (the rest of) a response head.
    Head(BytesMut),
    Body {
        send: SendStream<Bytes>,
        body: Unframe,
    },
    /// The stream ended (or never will carry more): writes are dropped.
    Done,
}

/// The byte sink of a stream's response.
pub struct RespOut {
    respond: SendResponse<Bytes>,
    state: State,
    head_only: bool,
    /// Send deadlines (see [`crate::req::transport::Transport::arm_send`]).
    deadline: Option<Instant>,
    idle: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// The connection's streams waiting for credit, and this one among
    /// them while it waits (with when it started).
    stalls: Arc<Stalls>,
    waiting: Option<(Waiting, Instant)>,
    /// The stream was reset or its connection went away.
    pub broken: bool,
    /// We reset the stream (a cut or missing response).
    we_reset: bool,
}

impl RespOut {
    pub fn new(respond: SendResponse<Bytes>, head_only: bool, stalls: Arc<Stalls>) -> RespOut {
        let state = State::Head(BytesMut::new());
        RespOut {
            respond,
            state,
            head_only,
            deadline: None,
            idle: Duration::MAX,
            timer: None,
            stalls,
            waiting: None,
            broken: false,
            we_reset: false,
        }
    }

    pub fn arm(&mut self, total: Duration, idle: Duration) {
        self.deadline = Some(Instant::now() + total);
        self.idle = idle;
        self.timer = None;
    }

    /// The request is over: end the stream. A body without a length ends
    /// here; a response that never came or was cut short resets the
    /// stream (a client must not take a partial body for a whole one).
    pub fn finish(&mut self) {
        match &mut self.state {
            State::Body { send, body: Unframe::Eof | Unframe::Over } => {
                let _ = send.send_data(Bytes::new(), true);
                self.state = State::Done;
            }
            _ => self.reset(h2::Reason::INTERNAL_ERROR),
        }
    }

    /// End the stream with RST_STREAM `why` unless it is over.
    fn reset(&mut self, why: h2::Reason) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Body { mut send, .. } => send.send_reset(why),
            State::Head(_) => self.respond.send_reset(why),
            State::Done => return,
        }
        self.we_reset = true;
    }

    /// Did the client reset the stream (with an error code)?
    pub fn peer_reset(&mut self) -> bool {
        if self.we_reset {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        matches!(self.respond.poll_reset(&mut cx), Poll::Ready(Ok(r)) if r != h2::Reason::NO_ERROR)
    }

    /// Take `buf` towards a response head; how much of it was used.
    fn head_bytes(&mut self, buf: &[u8]) -> io::Result<usize> {
        let State::Head(acc) = &mut self.state else { return Ok(0) };
        let before = acc.len();
        acc.extend_from_slice(buf);
        // As many header slots as the head has lines (on the stack for
        // any usual head), not a fixed large number.
        let lines = acc.iter().filter(|&&b| b == b'\n').count();
        let h = match parse_response(acc, lines.max(1), MAX_HEAD) {
            Ok(Parsed::Complete(h)) => h,
            Ok(Parsed::Partial) => return Ok(buf.len()),
            Err(e) => return Err(io::Error::other(format!("response head for HTTP/2: {e:?}"))),
        };
        // parse_response split the head off; what follows is not ours yet.
        let used = h.raw.len().saturating_sub(before).max(1).min(buf.len());
        acc.clear();
        self.send_head(&h)?;
        Ok(used)
    }

    fn send_head(&mut self, h: &Head) -> io::Result<()> {
        let resp = head::response(h);
        if (100..200).contains(&h.status) {
            // 100 Continue and the like; a head follows.
            return self.respond.send_informational(resp).map_err(broken);
        }
        let body = Unframe::of(h, self.head_only);
        let end = body.empty();
        let send = self.respond.send_response(resp, end).map_err(broken)?;
        self.state = if end { State::Done } else { State::Body { send, body } };
        Ok(())
    }

    /// Wait for flow-control credit; the send deadlines apply, and the
    /// connection's bound on streams waiting for credit it does not give.
    fn poll_credit(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        let State::Body { send, .. } = &mut self.state else { return Poll::Ready(Ok(0)) };
        send.reserve_capacity(want.min(MAX_CHUNK));
        loop {
            if send.capacity() > 0 {
                self.timer = None;
                self.waiting = None;
                self.stalls.credit();
                return Poll::Ready(Ok(send.capacity()));
            }
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(broken(e))),
                Poll::Ready(None) => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Poll::Pending => break,
            }
        }
        let now = Instant::now();
        let since = self.waiting.get_or_insert_with(|| (Waiting::new(&self.stalls), now)).1;
        let idle_until = since.checked_add(self.idle).unwrap_or(since + Duration::from_secs(86_400 * 365));
        let until = self.deadline.map_or(idle_until, |d| d.min(idle_until));
        // Wake at the send deadline, and every STALL_GRACE to look at the
        // connection's other streams.
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until.min(now + STALL_GRACE))));
        loop {
            ready!(timer.as_mut().poll(cx));
            let now = Instant::now();
            if now >= until {
                self.waiting = None;
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "send timeout (HTTP/2 flow control)")));
            }
            if self.stalls.over() {
                // Leaving the count lets the others stay under the bound.
                self.waiting = None;
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "send timeout (HTTP/2 flow control: too many streams wait on a connection that gives no credit)",
                )));
            }
            timer.as_mut().reset(until.min(now + STALL_GRACE));
        }
    }
}

/// A stream error as an I/O error.
fn broken(e: h2::Error) -> io::Error {
    match e.into_io() {
        Some(e) => e,
        None => io::ErrorKind::BrokenPipe.into(),
    }
}

use std::future::Future as _;

impl AsyncWrite for RespOut {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.broken {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let r = match &mut this.state {
            State::Head(_) => this.head_bytes(buf),
            State::Done => Ok(buf.len()),
            State::Body { body, .. } => match body.step(buf) {
                Piece::Frame(n) => {
                    if body.complete() {
                        this.finish();
                    }
                    Ok(n)
                }
                Piece::Over => {
                    this.finish();
                    Ok(buf.len())
                }
                Piece::Data(n) => match ready!(this.poll_credit(cx, n)) {
                    Ok(credit) => this.send(&buf[..n.min(credit)]),
                    Err(e) => Err(e),
                },
            },
        };
        if let Err(e) = &r {
            // A stream that ran out of send time is cancelled, as Varnish
            // does (other failures reset it when the request ends).
            if e.kind() == io::ErrorKind::TimedOut {
                this.reset(h2::Reason::CANCEL);
            }
            this.broken = true;
        }
        Poll::Ready(r)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.finish();
        Poll::Ready(Ok(()))
    }
}

impl RespOut {
    /// Send payload bytes we have credit for; the last of the body ends
    /// the stream with them.
    fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        let State::Body { send, body } = &mut self.state else { return Ok(data.len()) };
        body.took(data.len());
        let end = body.complete();
        send.send_data(Bytes::copy_from_slice(data), end).map_err(broken)?;
        if end {
            self.state = State::Done;
        }
        Ok(data.len())
    }
}
