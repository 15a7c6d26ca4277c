//! A response body filtered on its way to the client, for a pass: the
//! fetch filters (testgunzip, gzip, gunzip) and then, for a client that
//! cannot take gzip, the delivery gunzip. Written to like the client
//! connection itself; it frames what comes out as chunked when asked.

use std::collections::VecDeque;
use std::io::Write as _;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;

use super::code::{CodeError, Zstream};
use super::fetch::{Coder, Sinks};

/// The filters between a pass's backend body and its client.
pub struct Coded<'a, W> {
    inner: &'a mut W,
    coder: Option<Coder>,
    /// The delivery gunzip, after the fetch filters.
    pub gunzip: Option<Zstream>,
    chunked: bool,
    /// Made, not yet written.
    pending: VecDeque<Bytes>,
    /// Bytes written to the client, framing included.
    pub tx: u64,
    /// Why the filters refused the body.
    pub failed: Option<CodeError>,
}

impl<'a, W: AsyncWrite + Unpin> Coded<'a, W> {
    pub fn new(inner: &'a mut W, coder: Option<Coder>, gunzip: Option<Zstream>, chunked: bool) -> Coded<'a, W> {
        Coded { inner, coder, gunzip, chunked, pending: VecDeque::new(), tx: 0, failed: None }
    }

    pub fn coder(&self) -> Option<&Coder> {
        self.coder.as_ref()
    }

    /// Queue a piece of output, framed.
    fn queue(pending: &mut VecDeque<Bytes>, chunked: bool, b: Bytes) {
        if b.is_empty() {
            return;
        }
        if chunked {
            let mut h = Vec::with_capacity(10);
            let _ = write!(h, "{:x}\r\n", b.len());
            pending.push_back(Bytes::from(h));
            pending.push_back(b);
            pending.push_back(Bytes::from_static(b"\r\n"));
        } else {
            pending.push_back(b);
        }
    }

    /// Run `input` (or the end) through the filters into `pending`.
    fn filter(&mut self, input: Bytes, end: bool) -> Result<(), CodeError> {
        let Coded { coder, gunzip, pending, chunked, .. } = self;
        let chunked = *chunked;
        let mut stage2_err = None;
        let mut second = |b: Bytes, gunzip: &mut Option<Zstream>, pending: &mut VecDeque<Bytes>, last: bool| match gunzip {
            None => Self::queue(pending, chunked, b),
            Some(z) => {
                if let Err(e) = z.feed(&b, last, &mut |o| Self::queue(pending, chunked, o)) {
                    stage2_err.get_or_insert(e);
                }
            }
        };
        match coder {
            None => second(input, gunzip, pending, end),
            Some(c) => {
                let mut made = Vec::new();
                {
                    let mut out = Sinks { body: &mut |b| made.push(b), br: &mut |_| () };
                    c.feed(input, &mut out)?;
                    if end {
                        c.finish(&mut out)?;
                    }
                }
                let n = made.len();
                for (i, b) in made.into_iter().enumerate() {
                    second(b, gunzip, pending, end && i + 1 == n);
                }
                if end && n == 0 {
                    second(Bytes::new(), gunzip, pending, true);
                }
            }
        }
        match stage2_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Write out what is pending.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some(front) = self.pending.front_mut() {
            let n = ready!(Pin::new(&mut *self.inner).poll_write(cx, front))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.tx += n as u64;
            if n == front.len() {
                self.pending.pop_front();
            } else {
                let _ = front.split_to(n);
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The body ended: finish the filters, end the chunked framing, and
    /// write everything.
    pub async fn finish(&mut self) -> std::io::Result<()> {
        if let Err(e) = self.filter(Bytes::new(), true) {
            self.failed = Some(e);
            return Err(std::io::Error::other("bad gzip"));
        }
        if self.chunked {
            self.pending.push_back(Bytes::from_static(b"0\r\n\r\n"));
        }
        std::future::poll_fn(|cx| self.poll_drain(cx)).await?;
        tokio::io::AsyncWriteExt::flush(self.inner).await
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Coded<'_, W> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        if let Err(e) = this.filter(Bytes::copy_from_slice(buf), false) {
            this.failed = Some(e);
            return Poll::Ready(Err(std::io::Error::other("bad gzip")));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut *this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut *this.inner).poll_shutdown(cx)
    }
}
