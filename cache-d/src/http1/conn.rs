//! A socket with a read buffer that survives between messages.

use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// A socket with a read buffer that survives between messages (pipelining,
/// keep-alive).
pub struct BufConn<S> {
    pub io: S,
    pub buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> BufConn<S> {
    pub fn new(io: S) -> BufConn<S> {
        BufConn { io, buf: BytesMut::with_capacity(8192) }
    }

    /// Read more bytes into the buffer; Ok(0) at EOF.
    pub async fn fill(&mut self, timeout: Duration) -> std::io::Result<usize> {
        self.fill_for(timeout, 0).await
    }

    /// Read more bytes, with room for up to `want` of them (at most 256
    /// KiB): a large body is read, and stored, in large pieces.
    pub async fn fill_for(&mut self, timeout: Duration, want: u64) -> std::io::Result<usize> {
        self.make_room(want);
        match tokio::time::timeout(timeout, self.io.read_buf(&mut self.buf)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")),
        }
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
