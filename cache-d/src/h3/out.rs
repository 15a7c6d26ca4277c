//! An HTTP/3 stream's response side: the byte sink the request steps
//! write their HTTP/1.1 response to, as [`crate::h2::out::RespOut`] is
//! for HTTP/2. The head is read back into a HEADERS frame (without the
//! fields HTTP/3 forbids), the body's framing stripped ([`Unframe`]) and
//! its payload sent as DATA; the stream ends with the body.
//!
//! h3 sends with async methods, so a send in progress is a boxed future
//! that holds the stream's lock; a write waits for the one before it to
//! finish, so one piece (at most [`MAX_CHUNK`]) is in flight beyond what
//! QUIC itself buffers (h3_send_window). The send deadlines apply to that
//! wait; when one passes, the send is dropped and the stream reset. A
//! response that never came whole is reset too, never finished: the
//! client must not take a partial body for a whole one.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h3::error::{Code, StreamError};
use tokio::io::AsyncWrite;
use tokio::sync::Mutex;
use tokio::time::{Instant, Sleep};

use crate::h2::head;
use crate::h2::out::{Piece, Unframe};
use crate::http1::head::{parse_response, Head, Parsed};

/// The send half of a request stream.
pub type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// The most a response head may take (ours, so generous).
const MAX_HEAD: usize = 1 << 20;
/// The most payload in one DATA frame we send.
const MAX_CHUNK: usize = 64 * 1024;

type Op = Pin<Box<dyn Future<Output = Result<(), StreamError>> + Send>>;

enum State {
    /// Waiting for (the rest of) a response head.
    Head(BytesMut),
    Body(Unframe),
    /// The response is whole (or given up): writes are dropped.
    Done,
}

pub struct H3Out {
    stream: Arc<Mutex<SendHalf>>,
    state: State,
    head_only: bool,
    /// A send in progress.
    op: Option<Op>,
    /// The send in progress ends the stream.
    ending: bool,
    /// The stream was ended (FIN sent) or reset: nothing more to do.
    finished: bool,
    deadline: Option<Instant>,
    idle: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// When the send in progress started to wait.
    waiting_since: Option<Instant>,
    /// The stream failed (reset by either side, the connection gone).
    pub broken: bool,
}

impl H3Out {
    pub fn new(stream: SendHalf, head_only: bool) -> H3Out {
        H3Out {
            stream: Arc::new(Mutex::new(stream)),
            state: State::Head(BytesMut::new()),
            head_only,
            op: None,
            ending: false,
            finished: false,
            deadline: None,
            idle: Duration::MAX,
            timer: None,
            waiting_since: None,
            broken: false,
        }
    }

    pub fn arm(&mut self, total: Duration, idle: Duration) {
        self.deadline = Some(Instant::now() + total);
        self.idle = idle;
        self.timer = None;
    }

    /// The request is over: wait for what is in flight, then end the
    /// stream if the response is whole, else reset it.
    pub async fn close(&mut self) {
        let sent = std::future::poll_fn(|cx| self.poll_op(cx)).await;
        if sent.is_err() || self.broken {
            return self.reset(Code::H3_INTERNAL_ERROR);
        }
        match self.state {
            // Whole, and the end already sent with its last piece.
            State::Done if self.finished => {}
            // A body that ends with the stream.
            State::Body(Unframe::Eof | Unframe::Over) => {
                self.state = State::Done;
                let s = self.stream.clone();
                match async move { s.lock_owned().await.finish().await }.await {
                    Ok(()) => self.finished = true,
                    Err(_) => self.reset(Code::H3_INTERNAL_ERROR),
                }
            }
            _ => self.reset(Code::H3_INTERNAL_ERROR),
        }
    }

    /// Reset the stream (what is in flight is dropped first): quinn would
    /// end a stream dropped unfinished as if it were whole.
    fn reset(&mut self, code: Code) {
        self.op = None;
        self.state = State::Done;
        if self.finished {
            return;
        }
        self.finished = true;
        if let Ok(mut s) = self.stream.try_lock() {
            s.stop_stream(code);
        }
    }

    /// Wait for the send in progress, within the send deadlines.
    fn poll_op(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(op) = self.op.as_mut() else { return Poll::Ready(Ok(())) };
        if let Poll::Ready(r) = op.as_mut().poll(cx) {
            self.op = None;
            self.timer = None;
            self.waiting_since = None;
            if r.is_ok() && self.ending {
                self.finished = true;
            }
            return Poll::Ready(r.map_err(|e| {
                self.broken = true;
                self.reset(Code::H3_INTERNAL_ERROR);
                io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/3 stream: {e}"))
            }));
        }
        let now = Instant::now();
        let since = *self.waiting_since.get_or_insert(now);
        let idle_until = since.checked_add(self.idle).unwrap_or(since + Duration::from_secs(86_400 * 365));
        let until = self.deadline.map_or(idle_until, |d| d.min(idle_until));
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
        ready!(timer.as_mut().poll(cx));
        self.reset(Code::H3_REQUEST_CANCELLED);
        self.broken = true;
        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "send timeout (HTTP/3)")))
    }

    /// Start sending: the head, a piece of the body, and the end of the
    /// stream after it when `end`.
    fn start(&mut self, head: Option<http::Response<()>>, data: Option<Bytes>, end: bool) {
        let s = self.stream.clone();
        self.ending = end;
        self.op = Some(Box::pin(async move {
            let mut s = s.lock_owned().await;
            if let Some(h) = head {
                s.send_response(h).await?;
            }
            if let Some(d) = data {
                s.send_data(d).await?;
            }
            if end {
                s.finish().await?;
            }
            Ok(())
        }));
    }

    /// Take `buf` towards a response head; how much of it was used.
    fn head_bytes(&mut self, buf: &[u8]) -> io::Result<usize> {
        let State::Head(acc) = &mut self.state else { return Ok(0) };
        let before = acc.len();
        acc.extend_from_slice(buf);
        let lines = acc.iter().filter(|&&b| b == b'\n').count();
        let h = match parse_response(acc, lines.max(1), MAX_HEAD) {
            Ok(Parsed::Complete(h)) => h,
            Ok(Parsed::Partial) => return Ok(buf.len()),
            Err(e) => return Err(io::Error::other(format!("response head for HTTP/3: {e:?}"))),
        };
        let used = h.raw.len().saturating_sub(before).max(1).min(buf.len());
        acc.clear();
        self.send_head(&h);
        Ok(used)
    }

    fn send_head(&mut self, h: &Head) {
        let resp = head::response(h);
        if (100..200).contains(&h.status) {
            // 100 Continue and the like; a head follows.
            return self.start(Some(resp), None, false);
        }
        let body = Unframe::of(h, self.head_only);
        let end = body.empty();
        self.state = if end { State::Done } else { State::Body(body) };
        self.start(Some(resp), None, end);
    }
}

impl AsyncWrite for H3Out {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.broken {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        ready!(this.poll_op(cx))?;
        let r = match &mut this.state {
            State::Head(_) => this.head_bytes(buf),
            State::Done => Ok(buf.len()),
            State::Body(body) => match body.step(buf) {
                Piece::Frame(n) => {
                    if body.complete() {
                        this.state = State::Done;
                        this.start(None, None, true);
                    }
                    Ok(n)
                }
                Piece::Over => {
                    this.state = State::Done;
                    this.start(None, None, true);
                    Ok(buf.len())
                }
                Piece::Data(n) => {
                    let n = n.min(MAX_CHUNK);
                    body.took(n);
                    let end = body.complete();
                    if end {
                        this.state = State::Done;
                    }
                    this.start(None, Some(Bytes::copy_from_slice(&buf[..n])), end);
                    Ok(n)
                }
            },
        };
        if r.is_err() {
            this.reset(Code::H3_INTERNAL_ERROR);
            this.broken = true;
        }
        Poll::Ready(r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_op(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_op(cx)
    }
}

impl Drop for H3Out {
    /// A response dropped before its end (the request's task failed) is
    /// reset, not ended as if whole.
    fn drop(&mut self) {
        self.reset(Code::H3_INTERNAL_ERROR);
    }
}
