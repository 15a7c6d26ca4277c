//! ESI includes: the transport of a sub-request (no request to read, its
//! body written into its page's response where the include stood), the
//! request it makes (Varnish's `ved_include`), and the page's stored
//! bytes as delivery walks them. The sub-request itself runs through the
//! state machine ([`crate::req::state::Request::include`]).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWrite;

use crate::error::{Error, Side};
use crate::http1::body::{Moved, Pace};
use crate::http1::head::{Framing, Head};
use crate::params::Params;
use crate::req::reason::Reason;
use crate::req::transport::{GzAcc, ReadErr, ReqBody, Transport, Tunnel};
use std::sync::Arc;

use crate::vcl::model::{Req, TopReq};

/// Where an include's body goes: the parent's output, framed as one
/// chunk per write when the page goes out chunked.
pub struct ChunkOut<'a> {
    inner: &'a mut (dyn AsyncWrite + Unpin + Send),
    chunked: bool,
    /// Inside a gzip page: what the include adds to its stream.
    gz: Option<GzAcc>,
    /// Bytes of the current chunk's frame still to write, then of the
    /// data, then of its CRLF (a write is framed whole or not at all).
    frame: BytesMut,
    framed: usize,
    /// Body bytes written (without chunk framing): the include's share
    /// of its page's body, as Varnish counts it.
    written: u64,
}

impl AsyncWrite for ChunkOut<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.poll_write_vectored(cx, &[std::io::IoSlice::new(buf)])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// A write is one piece of the include's body, however many slices
    /// it comes in: one chunk of a chunked page, or stored deflate blocks
    /// inside a gzip one, written whole before the write is reported done.
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let stored = this.gz.as_ref().is_some_and(|g| g.stored);
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        if (!this.chunked && !stored) || n == 0 {
            let r = Pin::new(&mut *this.inner).poll_write_vectored(cx, bufs);
            if let Poll::Ready(Ok(n)) = r {
                this.written += n as u64;
            }
            return r;
        }
        if this.frame.is_empty() {
            if !stored {
                // Straight through when the output takes the whole chunk
                // (a page's output holds its writes): no copy here.
                let mut size = [0u8; 18];
                let head = chunk_head(n, &mut size);
                let mut iov: smallvec::SmallVec<[std::io::IoSlice<'_>; 8]> = smallvec::SmallVec::with_capacity(bufs.len() + 2);
                iov.push(std::io::IoSlice::new(head));
                iov.extend(bufs.iter().map(|b| std::io::IoSlice::new(b)));
                iov.push(std::io::IoSlice::new(b"\r\n"));
                let total = head.len() + n + 2;
                match Pin::new(&mut *this.inner).poll_write_vectored(cx, &iov) {
                    Poll::Ready(Ok(k)) if k == total => {
                        this.written += n as u64;
                        return Poll::Ready(Ok(n));
                    }
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                    // Part of it: the rest goes from the frame, below.
                    Poll::Ready(Ok(k)) => {
                        let mut skip = k;
                        for b in &iov {
                            let from = skip.min(b.len());
                            skip -= from;
                            this.frame.extend_from_slice(&b[from..]);
                        }
                        this.framed = n;
                    }
                    other => return other,
                }
            } else {
                let mut data = Vec::new();
                // One slice (a plain write) as it is; several joined once.
                let joined: std::borrow::Cow<'_, [u8]> = match bufs {
                    [one] => std::borrow::Cow::Borrowed(&one[..]),
                    _ => std::borrow::Cow::Owned(bufs.iter().flat_map(|b| b.iter().copied()).collect()),
                };
                if let Some(g) = this.gz.as_mut() {
                    g.add(crate::gzip::code::crc32(0, &joined), n as u64);
                }
                crate::esi::gz::stored_blocks(&joined, &mut data);
                if this.chunked {
                    let mut size = [0u8; 18];
                    this.frame.extend_from_slice(chunk_head(data.len(), &mut size));
                }
                this.frame.extend_from_slice(&data);
                if this.chunked {
                    this.frame.extend_from_slice(b"\r\n");
                }
                this.framed = n;
            }
        }
        while !this.frame.is_empty() {
            match Pin::new(&mut *this.inner).poll_write(cx, &this.frame) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    let _ = this.frame.split_to(n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        this.written += this.framed as u64;
        Poll::Ready(Ok(this.framed))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A chunk's size line (`1a2\r\n`) for `n` bytes, written into `buf`
/// (as every chunked writer here writes it, without a heap buffer).
fn chunk_head(n: usize, buf: &mut [u8; 18]) -> &[u8] {
    use std::io::Write;
    let mut rest = &mut buf[..];
    // 16 hex digits and CRLF fit in 18 bytes.
    let _ = write!(rest, "{n:x}\r\n");
    let len = 18 - rest.len();
    &buf[..len]
}

/// The transport of an include: no request to read, a body-only
/// response written into the parent's.
pub struct EsiConn<'a> {
    out: ChunkOut<'a>,
}

impl<'a> EsiConn<'a> {
    /// Writing into `out` (the page's output), chunked if the page is, and
    /// into its gzip stream if `gz`.
    pub fn new(out: &'a mut (dyn AsyncWrite + Unpin + Send), chunked: bool, gz: bool) -> EsiConn<'a> {
        EsiConn { out: ChunkOut { inner: out, chunked, gz: gz.then(GzAcc::new), frame: BytesMut::new(), framed: 0, written: 0 } }
    }

    /// What the include added to the page's gzip stream.
    pub fn gz(&self) -> Option<(u32, u64)> {
        self.out.gz.as_ref().map(|g| (g.crc, g.len))
    }

    /// Body bytes the include wrote into its page (without framing).
    pub fn written(&self) -> u64 {
        self.out.written
    }
}

impl ReqBody for EsiConn<'_> {
    async fn copy_body<W: AsyncWrite + Unpin>(&mut self, _: Framing, _: bool, _: &mut W, _: Side, _: Duration) -> Result<Moved, Error> {
        Ok(Moved::default())
    }
}

impl<'a> Transport for EsiConn<'a> {
    type Out = ChunkOut<'a>;

    async fn read_head(&mut self, _: &Params, _: &mut crate::req::transport::Stop) -> Result<(Head, f64), ReadErr> {
        Err(ReadErr::Closed(Reason::RemClose))
    }
    fn fd(&self) -> i32 {
        -1
    }
    fn buffered(&self) -> &[u8] {
        &[]
    }
    fn take_buffered(&mut self) -> BytesMut {
        BytesMut::new()
    }
    fn set_pace(&mut self, _: Option<Pace>) {}
    /// The parent's send deadlines cover the include.
    fn arm_send(&mut self, _: Duration, _: Duration) {}
    fn out(&mut self) -> &mut ChunkOut<'a> {
        &mut self.out
    }
    fn esi_gzip(&mut self) -> Option<&mut GzAcc> {
        self.out.gz.as_mut()
    }
    async fn prefill(&mut self, _: Framing, _: usize, _: Duration) -> Result<(), Error> {
        Ok(())
    }
    /// An include cannot pipe: nothing moves.
    async fn tunnel(&mut self, _: &mut crate::backend::tls::BeStream, _: Duration) -> Tunnel {
        Tunnel { to_backend: 0, to_client: 0, idle_out: false }
    }
    async fn close(&mut self) {}
}

/// The request an include makes (Varnish's `ved_include`): the parent's
/// headers, GET of `url` over HTTP/1.1, Host from the src if it named
/// one, no conditionals, no Range, no body, Accept-Encoding: gzip inside
/// a gzip page and none otherwise.
pub(crate) fn sub_req(parent: &Req, url: &str, host: Option<&str>, xid: u32, gzip: bool) -> Req {
    // The page's request as it arrived (Varnish's http0), not as its
    // vcl_recv left it.
    let mut headers = parent.http0.clone().unwrap_or_else(|| parent.headers.clone());
    if let Some(h) = host.filter(|h| !h.is_empty()) {
        headers.set("Host", Bytes::copy_from_slice(h.as_bytes()));
    }
    for h in ["if-modified-since", "if-none-match", "range", "accept-encoding", "content-length", "transfer-encoding"] {
        headers.unset(h);
    }
    // Inside a gzip page an include asks for gzip, as Varnish's does.
    if gzip {
        headers.set("Accept-Encoding", Bytes::from_static(b"gzip"));
    }
    let top = parent.top.clone().unwrap_or_else(|| {
        Arc::new(TopReq {
            method: parent.method.clone(),
            url: parent.url.clone(),
            minor: parent.minor,
            headers: parent.headers.clone(),
            time: parent.time,
        })
    });
    Req {
        method: Bytes::from_static(b"GET"),
        url: Bytes::copy_from_slice(url.as_bytes()),
        minor: 1,
        server_ip: parent.server_ip.clone(),
        client_ip: parent.client_ip,
        xid,
        esi_level: parent.esi_level + 1,
        top: Some(top),
        esi_includes: parent.esi_includes.clone(),
        http0: Some(headers.clone()),
        headers,
        time: crate::util::now(),
        ..Req::default()
    }
}

/// The body of a page being assembled: the stored (plain) bytes and
/// where delivery is in them.
pub struct Page {
    pieces: Vec<Bytes>,
    /// The piece and offset delivery is at.
    at: (usize, usize),
}

impl Page {
    pub fn new(pieces: Vec<Bytes>) -> Page {
        Page { pieces, at: (0, 0) }
    }

    /// The next `n` bytes, as slices of the stored pieces; fewer if the
    /// body is shorter than its instructions say (never past its end).
    pub fn take(&mut self, mut n: u64, mut each: impl FnMut(Bytes)) {
        while n > 0 && self.at.0 < self.pieces.len() {
            let p = &self.pieces[self.at.0];
            let avail = (p.len() - self.at.1) as u64;
            let k = avail.min(n) as usize;
            if k > 0 {
                each(p.slice(self.at.1..self.at.1 + k));
            }
            n -= k as u64;
            self.at.1 += k;
            if self.at.1 == p.len() {
                self.at = (self.at.0 + 1, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunk_heads_are_lower_hex_sizes() {
        let mut buf = [0u8; 18];
        for (n, want) in [(0usize, "0\r\n"), (9, "9\r\n"), (10, "a\r\n"), (255, "ff\r\n"), (256, "100\r\n"), (1024, "400\r\n")] {
            assert_eq!(super::chunk_head(n, &mut buf), want.as_bytes(), "{n}");
        }
        assert_eq!(super::chunk_head(usize::MAX, &mut buf), b"ffffffffffffffff\r\n");
    }
}
