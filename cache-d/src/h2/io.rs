//! The connection under the `h2` crate: [`Rewind`] gives it the bytes
//! HTTP/1 already read (the preface, or what followed an upgrade
//! request), and passes the client's frames through [`FrameScan`], which
//! answers some errors itself (its frames for the client go out between
//! the crate's) and counts the client's RST_STREAM frames, so that when
//! the crate ends a connection for excessive load the session can say
//! whether resets were the cause.

use std::io;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub use super::scan::FrameScan;
use crate::http1::head::H2_PREFACE as PREFACE;

/// A stream that returns `pre` before what it reads, and can put frames
/// of its own after the client's first SETTINGS frame (an upgrade's
/// request).
pub struct Rewind<S> {
    io: S,
    /// The client's bytes not scanned yet, and those the crate may read.
    pre: BytesMut,
    ready: BytesMut,
    scan: FrameScan,
    /// Frames to put after the client's preface and first frame, and the
    /// client's bytes held back until that frame is complete.
    inject: Option<(Vec<u8>, BytesMut)>,
}

impl<S> Rewind<S> {
    /// `max_frame`: the largest frame payload the connection accepts.
    pub fn new(io: S, pre: BytesMut, max_frame: usize) -> Rewind<S> {
        let mut scan = FrameScan::new();
        scan.set_max_frame(max_frame);
        Rewind { io, pre, ready: BytesMut::new(), scan, inject: None }
    }

    /// The receive window of a stream (see [`FrameScan::set_stream_window`]).
    pub fn set_stream_window(&mut self, n: u32) {
        self.scan.set_stream_window(n);
    }

    /// Told of the client's first DATA payload.
    pub fn data_seen(&self) -> Arc<tokio::sync::Notify> {
        self.scan.data.clone()
    }

    /// The connection error the scan answered with a GOAWAY, if any.
    pub fn goaway_sent(&self) -> Option<h2::Reason> {
        self.scan.dead
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

impl<S: AsyncWrite + Unpin> Rewind<S> {
    /// Send the scan's frames for the client, at a boundary of the
    /// crate's; done when there are none (or the crate is mid-frame).
    fn poll_ours(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.scan.to_client.is_empty() && self.scan.out_boundary() {
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.scan.to_client))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.scan.to_client.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// May the crate write `len` bytes now? How many (the rest of its
    /// frame when the scan has a GOAWAY to send after it).
    fn poll_room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_ours(cx))?;
        if self.scan.dead.is_none() {
            return Poll::Ready(Ok(len));
        }
        match self.scan.out_left() {
            0 => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            left => Poll::Ready(Ok(len.min(left))),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        std::task::ready!(this.poll_inject(cx))?;
        // A reset for the client waits for the crate's frame to end.
        let _ = this.poll_ours(cx)?;
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready[..n]);
                this.ready.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.scan.dead.is_some() {
                std::task::ready!(this.poll_ours(cx))?;
                let _ = std::task::ready!(Pin::new(&mut this.io).poll_flush(cx));
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "HTTP/2 connection error (GOAWAY sent)")));
            }
            if !this.pre.is_empty() {
                let pre = std::mem::take(&mut this.pre);
                this.scan.push(&pre, &mut this.ready);
                continue;
            }
            let before = buf.filled().len();
            std::task::ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
            if buf.filled().len() == before {
                return Poll::Ready(Ok(()));
            }
            this.scan.push(&buf.filled()[before..], &mut this.ready);
            buf.set_filled(before);
            let _ = this.poll_ours(cx)?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let room = std::task::ready!(this.poll_room(cx, buf.len()))?;
        let n = std::task::ready!(Pin::new(&mut this.io).poll_write(cx, &buf[..room]))?;
        this.scan.sent(&buf[..n]);
        Poll::Ready(Ok(n))
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let total = bufs.iter().map(|b| b.len()).sum();
        if std::task::ready!(this.poll_room(cx, total))? < total {
            // Only the rest of a frame may go: one slice at a time.
            let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
            return Pin::new(this).poll_write(cx, first);
        }
        let written = std::task::ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        let mut n = written;
        for b in bufs {
            let k = n.min(b.len());
            this.scan.sent(&b[..k]);
            n -= k;
            if n == 0 {
                break;
            }
        }
        Poll::Ready(Ok(written))
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_ours(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }
    /// The scan's last frames (a GOAWAY) go out first.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_ours(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
