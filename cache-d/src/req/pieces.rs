//! A request body that comes in pieces: an HTTP/2 or HTTP/3 stream's
//! DATA, read ahead (prefill) or forwarded as it comes, each read within
//! the read timeout and the body's pace. The stream's own reader is a
//! [`Source`]; this part is the same for both protocols.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::error::{Error, Side};
use crate::http1::body::{body_wait, Moved, Pace};

/// A stream's body as its protocol reads it.
#[allow(async_fn_in_trait)]
pub trait Source: Send {
    /// The next piece; None at the body's end.
    async fn read(&mut self) -> std::io::Result<Option<Bytes>>;
}

pub struct Pieces<S> {
    /// The body still to come (None: none, or all read).
    src: Option<S>,
    /// Pieces read ahead (prefill) and not yet forwarded.
    pending: VecDeque<Bytes>,
    pending_len: usize,
    rx: u64,
    pub pace: Option<Pace>,
}

impl<S: Source> Pieces<S> {
    pub fn new(src: Option<S>) -> Pieces<S> {
        Pieces { src, pending: VecDeque::new(), pending_len: 0, rx: 0, pace: None }
    }

    /// Is more of the body still to be read from the stream?
    pub fn to_come(&self) -> bool {
        self.src.is_some()
    }

    /// The next piece (read ahead first); None at the end.
    async fn next(&mut self, read_timeout: Duration) -> Result<Option<Bytes>, Error> {
        if let Some(b) = self.pending.pop_front() {
            self.pending_len -= b.len();
            return Ok(Some(b));
        }
        self.read(read_timeout).await
    }

    /// Read a piece from the stream, within `read_timeout` and the pace.
    async fn read(&mut self, read_timeout: Duration) -> Result<Option<Bytes>, Error> {
        let Some(src) = self.src.as_mut() else { return Ok(None) };
        let wait = body_wait(read_timeout, self.pace.as_ref(), self.rx);
        let failed = |e: std::io::Error| Error::io(Side::Client, "reading body", e);
        match tokio::time::timeout(wait, src.read()).await {
            Ok(Ok(Some(b))) => {
                self.rx += b.len() as u64;
                Ok(Some(b))
            }
            Ok(Ok(None)) => {
                self.src = None;
                Ok(None)
            }
            Ok(Err(e)) => Err(failed(e)),
            Err(_) => Err(failed(std::io::ErrorKind::TimedOut.into())),
        }
    }

    /// Read until `limit` bytes (or all of a smaller body) are held.
    pub async fn prefill(&mut self, limit: usize, read_timeout: Duration) -> Result<(), Error> {
        while self.pending_len < limit {
            let Some(b) = self.read(read_timeout).await? else { break };
            self.pending_len += b.len();
            self.pending.push_back(b);
        }
        Ok(())
    }

    /// Copy the body to `dst`, chunked when `chunk_out`.
    pub async fn copy<W: AsyncWrite + Unpin>(
        &mut self,
        chunk_out: bool,
        dst: &mut W,
        dst_side: Side,
        read_timeout: Duration,
    ) -> Result<Moved, Error> {
        let mut m = Moved::default();
        let werr = |e| Error::io(dst_side, "writing body", e);
        while let Some(b) = self.next(read_timeout).await? {
            if b.is_empty() {
                continue;
            }
            m.rx += b.len() as u64;
            m.payload += b.len() as u64;
            if chunk_out {
                let size = format!("{:x}\r\n", b.len());
                dst.write_all(size.as_bytes()).await.map_err(werr)?;
                dst.write_all(&b).await.map_err(werr)?;
                dst.write_all(b"\r\n").await.map_err(werr)?;
                m.tx += size.len() as u64 + 2;
            } else {
                dst.write_all(&b).await.map_err(werr)?;
            }
            m.tx += b.len() as u64;
        }
        if chunk_out {
            dst.write_all(b"0\r\n\r\n").await.map_err(werr)?;
            m.tx += 5;
        }
        Ok(m)
    }
}
