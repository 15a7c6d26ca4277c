//! An HTTP/2 stream as the request steps' transport: one request, its
//! body read from the stream's DATA (credit returned as it is consumed),
//! its response written through [`RespOut`].

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::out::RespOut;
use crate::error::{Error, Side};
use crate::http1::body::{body_wait, Moved, Pace};
use crate::http1::head::{Framing, Head};
use crate::params::Params;
use crate::req::reason::Reason;
use crate::req::transport::{ReadErr, ReqBody, Transport, Tunnel};

pub struct H2Stream {
    /// The request body still to come (None: none, or all read).
    body: Option<RecvStream>,
    /// Body bytes read ahead (prefill) and not yet forwarded.
    pending: VecDeque<Bytes>,
    pending_len: usize,
    rx: u64,
    pace: Option<Pace>,
    pub out: RespOut,
    fd: i32,
}

impl H2Stream {
    pub fn new(body: RecvStream, out: RespOut, fd: i32) -> H2Stream {
        let body = if body.is_end_stream() { None } else { Some(body) };
        H2Stream { body, pending: VecDeque::new(), pending_len: 0, rx: 0, pace: None, out, fd }
    }

    /// The next piece of the body (read ahead first); None at its end.
    async fn next_piece(&mut self, read_timeout: Duration) -> Result<Option<Bytes>, Error> {
        if let Some(b) = self.pending.pop_front() {
            self.pending_len -= b.len();
            return Ok(Some(b));
        }
        self.read_piece(read_timeout).await
    }

    /// Read a piece of the body from the stream, within `read_timeout`
    /// and the body's pace; credit for it goes back to the client.
    async fn read_piece(&mut self, read_timeout: Duration) -> Result<Option<Bytes>, Error> {
        let Some(body) = self.body.as_mut() else { return Ok(None) };
        let wait = body_wait(read_timeout, self.pace.as_ref(), self.rx);
        let failed = |e: std::io::Error| Error::io(Side::Client, "reading body", e);
        match tokio::time::timeout(wait, body.data()).await {
            Ok(Some(Ok(b))) => {
                let _ = body.flow_control().release_capacity(b.len());
                self.rx += b.len() as u64;
                Ok(Some(b))
            }
            Ok(Some(Err(e))) => Err(failed(e.into_io().unwrap_or_else(|| std::io::ErrorKind::ConnectionReset.into()))),
            Ok(None) => {
                self.body = None;
                Ok(None)
            }
            Err(_) => Err(failed(std::io::ErrorKind::TimedOut.into())),
        }
    }
}

impl ReqBody for H2Stream {
    async fn copy_body<W: AsyncWrite + Unpin>(
        &mut self,
        _: Framing,
        chunk_out: bool,
        dst: &mut W,
        dst_side: Side,
        read_timeout: Duration,
    ) -> Result<Moved, Error> {
        let mut m = Moved::default();
        let werr = |e| Error::io(dst_side, "writing body", e);
        while let Some(b) = self.next_piece(read_timeout).await? {
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

impl Transport for H2Stream {
    type Out = RespOut;

    /// A stream carries one request, handed to the steps directly.
    async fn read_head(&mut self, _: &Params, _: &mut watch::Receiver<bool>) -> Result<(Head, f64), ReadErr> {
        Err(ReadErr::Closed(Reason::RemClose))
    }
    /// Content-Length if the client sent one (the crate checks the DATA
    /// against it), else a body until the stream ends, forwarded chunked.
    fn framing(&self, head: &Head) -> Option<Result<Framing, &'static str>> {
        let length = head.get("content-length").map(|v| std::str::from_utf8(v).ok().and_then(|v| v.trim().parse::<u64>().ok()));
        Some(match (length, self.body.is_some()) {
            (Some(None), _) => Err("Bad Content-Length header"),
            (Some(Some(n)), true) => Ok(Framing::Length(n)),
            (Some(Some(0)) | None, false) => Ok(Framing::None),
            (Some(Some(_)), false) => Err("Content-Length on a request without a body"),
            (None, true) => Ok(Framing::Chunked),
        })
    }
    fn fd(&self) -> i32 {
        self.fd
    }
    fn buffered(&self) -> &[u8] {
        &[]
    }
    fn take_buffered(&mut self) -> BytesMut {
        BytesMut::new()
    }
    fn set_pace(&mut self, pace: Option<Pace>) {
        self.pace = pace;
    }
    fn arm_send(&mut self, total: Duration, idle: Duration) {
        self.out.arm(total, idle);
    }
    fn out(&mut self) -> &mut RespOut {
        &mut self.out
    }
    async fn prefill(&mut self, _: Framing, limit: usize, read_timeout: Duration) -> Result<(), Error> {
        while self.pending_len < limit {
            let Some(b) = self.read_piece(read_timeout).await? else { break };
            self.pending_len += b.len();
            self.pending.push_back(b);
        }
        Ok(())
    }
    /// Never called: a pipe on a stream is turned into a pass in vcl_recv.
    async fn tunnel(&mut self, _: &mut crate::backend::tls::BeStream, _: Duration) -> Tunnel {
        Tunnel { to_backend: 0, to_client: 0, idle_out: false }
    }
    async fn close(&mut self) {
        self.out.finish();
    }
}
