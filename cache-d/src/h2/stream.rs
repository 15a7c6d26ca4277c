//! An HTTP/2 stream as the request steps' transport: one request, its
//! body read from the stream's DATA (credit returned as it is consumed),
//! its response written through [`RespOut`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use tokio::io::AsyncWrite;

use super::out::RespOut;
use crate::error::{Error, Side};
use crate::http1::body::{Moved, Pace};
use crate::http1::head::{Framing, Head};
use crate::params::Params;
use crate::req::pieces::{Pieces, Source};
use crate::req::reason::Reason;
use crate::req::transport::{ReadErr, ReqBody, Transport, Tunnel};

pub struct H2Stream {
    body: Pieces<H2Body>,
    pub out: RespOut,
    fd: i32,
}

/// A stream's DATA: credit for each piece goes back to the client as it
/// is read.
pub struct H2Body(RecvStream);

impl Source for H2Body {
    async fn read(&mut self) -> std::io::Result<Option<Bytes>> {
        match self.0.data().await {
            Some(Ok(b)) => {
                let _ = self.0.flow_control().release_capacity(b.len());
                Ok(Some(b))
            }
            Some(Err(e)) => Err(e.into_io().unwrap_or_else(|| std::io::ErrorKind::ConnectionReset.into())),
            None => Ok(None),
        }
    }
}

impl H2Stream {
    pub fn new(body: RecvStream, out: RespOut, fd: i32) -> H2Stream {
        let body = if body.is_end_stream() { None } else { Some(H2Body(body)) };
        H2Stream { body: Pieces::new(body), out, fd }
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
        self.body.copy(chunk_out, dst, dst_side, read_timeout).await
    }
}

impl Transport for H2Stream {
    type Out = RespOut;

    /// A stream carries one request, handed to the steps directly.
    async fn read_head(&mut self, _: &Params, _: &mut crate::req::transport::Stop) -> Result<(Head, f64), ReadErr> {
        Err(ReadErr::Closed(Reason::RemClose))
    }
    /// Content-Length if the client sent one (the crate checks the DATA
    /// against it), else a body until the stream ends, forwarded chunked.
    fn framing(&self, head: &Head) -> Option<Result<Framing, &'static str>> {
        let length = head.get("content-length").map(|v| std::str::from_utf8(v).ok().and_then(|v| v.trim().parse::<u64>().ok()));
        Some(match (length, self.body.to_come()) {
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
        self.body.pace = pace;
    }
    fn arm_send(&mut self, total: Duration, idle: Duration) {
        self.out.arm(total, idle);
    }
    fn out(&mut self) -> &mut RespOut {
        &mut self.out
    }
    async fn prefill(&mut self, _: Framing, limit: usize, read_timeout: Duration) -> Result<(), Error> {
        self.body.prefill(limit, read_timeout).await
    }
    /// Never called: a pipe on a stream is turned into a pass in vcl_recv.
    async fn tunnel(&mut self, _: &mut crate::backend::tls::BeStream, _: Duration) -> Tunnel {
        Tunnel { to_backend: 0, to_client: 0, idle_out: false }
    }
    async fn close(&mut self) {
        self.out.finish();
    }
}
