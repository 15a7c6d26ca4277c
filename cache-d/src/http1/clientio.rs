//! The client socket with send deadlines: `send_timeout` bounds a whole
//! response, `idle_send_timeout` each write that cannot proceed. Every
//! delivery (hits, passes, synthetic answers) writes through it, so a
//! client that stops reading loses its connection instead of holding it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

pub struct ClientIo<S> {
    io: S,
    /// When the current response must be out (None: no response armed).
    deadline: Option<Instant>,
    idle: Duration,
    /// A write is waiting for the socket; the timer runs.
    blocked: bool,
    timer: Option<Pin<Box<Sleep>>>,
    /// How fast the current request's body must arrive (set per request;
    /// every reader of the body — discard, prefill, the fetch that
    /// forwards it — keeps to the same one).
    pub pace: Option<crate::http1::body::Pace>,
    /// While an ESI page goes out: its parts' small writes kept here and
    /// sent together (see `hold`).
    held: Option<Held>,
}

/// Bytes kept while holding, and how many of them are already sent.
struct Held {
    buf: Vec<u8>,
    sent: usize,
}

/// The most bytes held before they go out.
const HOLD_MAX: usize = 64 * 1024;

impl<S> ClientIo<S> {
    pub fn new(io: S) -> ClientIo<S> {
        ClientIo { io, deadline: None, idle: Duration::MAX, blocked: false, timer: None, pace: None, held: None }
    }

    /// Hold writes (`on`), or stop holding (after a flush, which sends
    /// what was held). An ESI page's own bytes and its includes' bodies
    /// are many small writes: held, they go out in one write (up to
    /// HOLD_MAX at a time) instead of a syscall, and a wake-up of the
    /// client, each (issue 37: 21 writes for a page of 10 fragments). A
    /// flush sends what is held: the page's end, and any wait for more
    /// body or a fetch (`req::run`, `deliver::send_parts`), so nothing
    /// held waits on the network. (A wait for a busy object of an
    /// include does not flush: the page's bytes before it go out with it.)
    pub fn hold(&mut self, on: bool) {
        match (on, &self.held) {
            // A page of ten 1 KiB fragments without growing.
            (true, None) => self.held = Some(Held { buf: Vec::with_capacity(HOLD_MAX / 4), sent: 0 }),
            (false, Some(h)) if h.buf.len() == h.sent => self.held = None,
            _ => {}
        }
    }

    /// A response starts: it must be written within `total`, and no
    /// single write may wait longer than `idle`.
    pub fn arm(&mut self, total: Duration, idle: Duration) {
        self.deadline = Some(Instant::now() + total);
        self.idle = idle;
        self.blocked = false;
    }

    pub fn into_inner(self) -> S {
        self.io
    }

    pub fn get_ref(&self) -> &S {
        &self.io
    }

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// send_timeout is checked before every write, as Varnish does before
    /// each writev: a response that drips slower than it allows is cut
    /// even when no write ever blocks.
    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() > d)
    }

    /// After an inner write: done (the timer stops), or pending (it runs).
    fn settle(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(r) => {
                self.blocked = false;
                Poll::Ready(r)
            }
            Poll::Pending => self.poll_timer(cx),
        }
    }

    /// The inner write is pending: wait on the timer, or fail once it ran out.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(deadline) = self.deadline else { return Poll::Pending };
        if !self.blocked {
            self.blocked = true;
            let at = Instant::now().checked_add(self.idle).map_or(deadline, |t| t.min(deadline));
            match &mut self.timer {
                Some(t) => t.as_mut().reset(at),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
            }
        }
        match self.timer.as_mut().map(|t| t.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "send timed out"))),
            _ => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientIo<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> ClientIo<S> {
    /// Send what is held (Ready once all of it is out).
    fn poll_send_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Some(h) = &self.held else { return Poll::Ready(Ok(())) };
            if h.sent == h.buf.len() {
                if let Some(h) = &mut self.held {
                    h.buf.clear();
                    h.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if self.past_deadline() {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "send timed out (send_timeout)")));
            }
            let r = Pin::new(&mut self.io).poll_write(cx, &h.buf[h.sent..]);
            match self.settle(cx, r) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    if let Some(h) = &mut self.held {
                        h.sent += n;
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Keep `bufs` if they fit in what may be held (after sending what
    /// was, if they would not); None when not holding or too big to.
    fn poll_keep(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Option<Poll<io::Result<usize>>> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        let h = self.held.as_ref()?;
        if h.buf.len() + n > HOLD_MAX {
            match self.poll_send_held(cx) {
                Poll::Ready(Ok(())) => {}
                other => return Some(other.map(|r| r.map(|()| 0))),
            }
            if n > HOLD_MAX {
                return None;
            }
        }
        let h = self.held.as_mut()?;
        for b in bufs {
            h.buf.extend_from_slice(b);
        }
        Some(Poll::Ready(Ok(n)))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientIo<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if let Some(r) = me.poll_keep(cx, &[io::IoSlice::new(buf)]) {
            return r;
        }
        if me.past_deadline() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "send timed out (send_timeout)")));
        }
        let r = Pin::new(&mut me.io).poll_write(cx, buf);
        me.settle(cx, r)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if let Some(r) = me.poll_keep(cx, bufs) {
            return r;
        }
        if me.past_deadline() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "send timed out (send_timeout)")));
        }
        let r = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        me.settle(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match me.poll_send_held(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        match Pin::new(&mut me.io).poll_flush(cx) {
            Poll::Ready(r) => {
                me.blocked = false;
                Poll::Ready(r)
            }
            Poll::Pending => me.poll_timer(cx).map(|r| r.map(|_| ())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_stops_reading_times_the_write_out() {
        let (a, _b) = tokio::io::duplex(1024);
        let mut c = ClientIo::new(a);
        c.arm(Duration::from_secs(600), Duration::from_secs(2));
        let t0 = Instant::now();
        let e = c.write_all(&[0u8; 8192]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed().as_secs(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn send_timeout_bounds_a_slow_but_moving_reader() {
        let (a, mut b) = tokio::io::duplex(1024);
        tokio::spawn(async move {
            let mut buf = [0u8; 100];
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if tokio::io::AsyncReadExt::read(&mut b, &mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
            }
        });
        let mut c = ClientIo::new(a);
        c.arm(Duration::from_secs(5), Duration::from_secs(2));
        let t0 = Instant::now();
        assert!(c.write_all(&vec![0u8; 1 << 20]).await.is_err());
        assert!((5..=6).contains(&t0.elapsed().as_secs()));
    }

    #[tokio::test(start_paused = true)]
    async fn send_timeout_cuts_a_response_that_drips_without_blocking() {
        let (a, _b) = tokio::io::duplex(1 << 16);
        let mut c = ClientIo::new(a);
        c.arm(Duration::from_millis(800), Duration::from_millis(100));
        c.write_all(b"1\r\nx\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let e = c.write_all(b"1\r\ny\r\n").await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        c.arm(Duration::from_millis(800), Duration::from_millis(100));
        c.write_all(b"next response").await.unwrap();
    }

    #[tokio::test]
    async fn unarmed_writes_pass_through() {
        let (a, _b) = tokio::io::duplex(1 << 16);
        let mut c = ClientIo::new(a);
        c.write_all(b"hello").await.unwrap();
    }

    /// Counts the writes that reach it.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.get_mut().0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn held_writes_go_out_together_on_flush_or_when_too_many() {
        let mut c = ClientIo::new(Writes::default());
        c.hold(true);
        for part in [&b"<html>"[..], b"fragment one", b"fragment two"] {
            c.write_all(part).await.unwrap();
        }
        assert!(c.get_ref().0.is_empty(), "held");
        c.flush().await.unwrap();
        assert_eq!(c.get_ref().0, vec![b"<html>fragment onefragment two".to_vec()]);
        // Past HOLD_MAX: what was held goes first, then the rest is held;
        // a write bigger than HOLD_MAX goes straight through.
        c.write_all(&[1u8; 40 * 1024]).await.unwrap();
        c.write_all(&[2u8; 40 * 1024]).await.unwrap();
        assert_eq!(c.get_ref().0.len(), 2);
        c.write_all(&[3u8; HOLD_MAX + 1]).await.unwrap();
        assert_eq!(c.get_ref().0.iter().map(Vec::len).collect::<Vec<_>>(), [30, 40 * 1024, 40 * 1024, HOLD_MAX + 1]);
        // Not holding: every write through.
        c.hold(false);
        c.write_all(b"a").await.unwrap();
        c.write_all(b"b").await.unwrap();
        assert_eq!(c.get_ref().0.len(), 6);
    }
}
