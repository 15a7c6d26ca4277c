//! A socket with a read buffer that survives between messages.

use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// A socket with a read buffer that survives between messages (pipelining,
/// keep-alive).
pub struct BufConn<S> {
    pub io: S,
    pub buf: BytesMut,
    /// The read deadline, kept between reads with the event loop it was
    /// made on: moved to a later deadline, a registered timer only has its
    /// expiry raised (one atomic step), where a timeout per read made a
    /// timer, registered it with the loop's timer wheel and took it out
    /// again (a lock each way, about 2% of a small hit).
    timer: Option<(usize, Pin<Box<tokio::time::Sleep>>)>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> BufConn<S> {
    pub fn new(io: S) -> BufConn<S> {
        BufConn::with_buf(io, BytesMut::with_capacity(8192))
    }

    /// Read more bytes into the buffer; Ok(0) at EOF.
    pub async fn fill(&mut self, timeout: Duration) -> std::io::Result<usize> {
        self.fill_for(timeout, 0).await
    }

    /// Read more bytes, with room for up to `want` of them (at most 256
    /// KiB): a large body is read, and stored, in large pieces.
    pub async fn fill_for(&mut self, timeout: Duration, want: u64) -> std::io::Result<usize> {
        self.make_room(want);
        let timer = arm(&mut self.timer, timeout);
        tokio::select! {
            biased;
            r = self.io.read_buf(&mut self.buf) => r,
            () = timer => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")),
        }
    }

    /// A connection that had its buffer elsewhere (moved between loops,
    /// or read by another transport before).
    pub fn with_buf(io: S, buf: BytesMut) -> BufConn<S> {
        BufConn { io, buf, timer: None }
    }

    /// Read what the socket has now, with room for up to `want` bytes,
    /// never waiting: None when nothing is there yet (nothing is lost:
    /// the read is cancel-safe), Ok(0) at EOF.
    pub fn fill_ready(&mut self, want: u64) -> Option<std::io::Result<usize>> {
        self.make_room(want);
        self.io.read_buf(&mut self.buf).now_or_never()
    }

    /// Room for a read of up to `want` bytes (at most 256 KiB): reserved
    /// when less than a quarter of it is free.
    fn make_room(&mut self, want: u64) {
        let room = (want.min(256 * 1024) as usize).max(16384);
        if self.buf.capacity() - self.buf.len() < room / 4 {
            self.buf.reserve(room);
        }
    }
}

/// The read timer in `slot`, set to `timeout` from now. A timer is tied to
/// the runtime it was made on: one is kept only on an event loop (whose
/// tag tells them apart), and a connection that moved gets a new one.
fn arm(slot: &mut Option<(usize, Pin<Box<tokio::time::Sleep>>)>, timeout: Duration) -> Pin<&mut tokio::time::Sleep> {
    let now = tokio::time::Instant::now();
    // As tokio::time::timeout: a timeout too long to add is "never".
    let deadline = now.checked_add(timeout).unwrap_or_else(|| now + Duration::from_secs(86400 * 365 * 30));
    let here = crate::child::loops::here();
    if here == 0 || slot.as_ref().is_some_and(|(on, _)| *on != here) {
        *slot = None;
    }
    let mut fresh = false;
    let (_, t) = slot.get_or_insert_with(|| {
        fresh = true;
        (here, Box::pin(tokio::time::sleep_until(deadline)))
    });
    if !fresh {
        t.as_mut().reset(deadline);
    }
    t.as_mut()
}
