//! The connection under the `h2` crate: [`Rewind`] gives it the bytes
//! HTTP/1 already read (the preface, or what followed an upgrade
//! request), and counts the client's RST_STREAM frames as they pass
//! ([`FrameScan`]), so that when the crate ends a connection for
//! excessive load the session can say whether resets were the cause.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http1::head::H2_PREFACE as PREFACE;

/// A stream that returns `pre` before what it reads, and can put frames
/// of its own after the client's first SETTINGS frame (an upgrade's
/// request).
pub struct Rewind<S> {
    io: S,
    pre: BytesMut,
    scan: FrameScan,
    /// Frames to put after the client's preface and first frame, and the
    /// client's bytes held back until that frame is complete.
    inject: Option<(Vec<u8>, BytesMut)>,
}

impl<S> Rewind<S> {
    pub fn new(io: S, pre: BytesMut) -> Rewind<S> {
        Rewind { io, pre, scan: FrameScan::new(), inject: None }
    }

    /// Put `frames` after the client's preface and SETTINGS frame.
    pub fn inject_after_settings(&mut self, frames: Vec<u8>) {
        let held = std::mem::take(&mut self.pre);
        self.inject = Some((frames, held));
    }

    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// The count of the client's RST_STREAM frames read so far.
    pub fn resets(&self) -> Arc<AtomicU64> {
        self.scan.resets.clone()
    }
}

impl<S: AsyncRead + Unpin> Rewind<S> {
    /// Hold the client's bytes until its first frame is complete, then
    /// queue them with the injected frames after that frame.
    fn poll_inject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((frames, held)) = &mut self.inject {
            match settings_end(held) {
                Opening::Junk => return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "not an HTTP/2 preface and SETTINGS"))),
                Opening::Ends(at) => {
                    let mut pre = BytesMut::with_capacity(held.len() + frames.len());
                    pre.extend_from_slice(&held[..at]);
                    pre.extend_from_slice(frames);
                    pre.extend_from_slice(&held[at..]);
                    self.pre = pre;
                    self.inject = None;
                }
                Opening::More => {
                    let mut chunk = [0u8; 4096];
                    let mut rb = ReadBuf::new(&mut chunk);
                    std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
                    if rb.filled().is_empty() {
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                    }
                    held.extend_from_slice(rb.filled());
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// How far a client's opening (preface, then a SETTINGS frame) came.
pub enum Opening {
    More,
    /// The SETTINGS frame ends here.
    Ends(usize),
    /// Not a preface and SETTINGS.
    Junk,
}

/// Where the client's first frame (SETTINGS) ends after its preface.
pub fn settings_end(got: &[u8]) -> Opening {
    let n = got.len().min(PREFACE.len());
    if got[..n] != PREFACE[..n] {
        return Opening::Junk;
    }
    let Some(f) = got.get(PREFACE.len()..PREFACE.len() + 9) else { return Opening::More };
    if f[3] != 0x4 {
        return Opening::Junk;
    }
    let len = (usize::from(f[0]) << 16) | (usize::from(f[1]) << 8) | usize::from(f[2]);
    let end = PREFACE.len() + 9 + len;
    if got.len() >= end {
        Opening::Ends(end)
    } else {
        Opening::More
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_inject(cx))?;
        let before = buf.filled().len();
        if !this.pre.is_empty() {
            let n = this.pre.len().min(buf.remaining());
            buf.put_slice(&this.pre[..n]);
            this.pre.advance(n);
        } else {
            std::task::ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        }
        this.scan.feed(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Follows the client's frames by their 9-byte headers (after the
/// preface), counting RST_STREAM frames.
pub struct FrameScan {
    /// Preface bytes still to pass.
    preface: usize,
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    skip: usize,
    pub resets: Arc<AtomicU64>,
}

impl FrameScan {
    pub fn new() -> FrameScan {
        FrameScan { preface: PREFACE.len(), head: [0; 9], have: 0, skip: 0, resets: Arc::new(AtomicU64::new(0)) }
    }

    pub fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.preface > 0 {
                let n = self.preface.min(b.len());
                (self.preface, b) = (self.preface - n, &b[n..]);
            } else if self.skip > 0 {
                let n = self.skip.min(b.len());
                (self.skip, b) = (self.skip - n, &b[n..]);
            } else {
                let n = (9 - self.have).min(b.len());
                self.head[self.have..self.have + n].copy_from_slice(&b[..n]);
                (self.have, b) = (self.have + n, &b[n..]);
                if self.have == 9 {
                    self.have = 0;
                    let h = &self.head;
                    self.skip = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
                    if h[3] == 0x3 {
                        self.resets.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

impl Default for FrameScan {
    fn default() -> FrameScan {
        FrameScan::new()
    }
}
