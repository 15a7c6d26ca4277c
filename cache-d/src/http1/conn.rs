//! A socket with a read buffer that survives between messages.

use std::time::Duration;

use bytes::BytesMut;
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
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16384);
        }
        match tokio::time::timeout(timeout, self.io.read_buf(&mut self.buf)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")),
        }
    }
}
