//! An HTTP/3 request stream as the request steps' transport: its head
//! (QPACK-decoded by h3) becomes the [`Head`] an HTTP/1 request gives,
//! logged as `HTTP/3`; its body comes from the stream's DATA; its
//! response goes out through [`H3Out`].

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use tokio::io::AsyncWrite;
use tokio::sync::watch;

use super::out::H3Out;
use crate::error::{Error, Side};
use crate::http1::body::{Moved, Pace};
use crate::http1::head::{Framing, Head};
use crate::params::Params;
use crate::req::pieces::{Pieces, Source};
use crate::req::reason::Reason;
use crate::req::state::Sess;
use crate::req::transport::{ReadErr, ReqBody, Transport, Tunnel};
use crate::util::now;

type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;
type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// Serve one request stream of a connection, its records logged under
/// `sess` (the connection's session, as [`Sess::for_stream`] made it);
/// `early`: it came before the connection's handshake had completed.
pub async fn run(mut sess: Sess, resolver: Resolver, p: Arc<Params>, mut done: watch::Receiver<bool>, early: bool) {
    let sh = sess.sh.clone();
    // The head comes within timeout_req of the stream's start.
    let (req, mut stream) = match tokio::time::timeout(p.timeout_req.max(Duration::from_millis(1)), resolver.resolve_request()).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return bad_stream(&sess, &format!("HTTP/3 request refused: {e}")),
        Err(_) => return bad_stream(&sess, "HTTP/3 request head timed out"),
    };
    // A CONNECT (no :path: a tunnel, RFC 9114 §4.4) is refused as Varnish
    // refuses one on HTTP/2 ("Missing :path", the stream reset): there
    // is nothing to look up, and no tunnel is passed to a backend.
    // So is a request with a field that belongs to one HTTP/1 connection
    // (RFC 9114 §4.2: malformed), which h3 lets through.
    let why = if req.uri().path_and_query().is_none() { Some("Missing :path") } else { connection_specific(req.headers()) };
    if let Some(why) = why {
        stream.stop_stream(h3::error::Code::H3_MESSAGE_ERROR);
        stream.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
        return bad_stream(&sess, why);
    }
    // 0-RTT (h3_0rtt): a request before the handshake is done could be a
    // replay. A safe one is served now and says so to the policy and the
    // backend (RFC 8470 §5.1); any other waits for the handshake, which a
    // replay never completes.
    let (mut parts, ()) = req.into_parts();
    if early && !*done.borrow() {
        if matches!(parts.method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS) {
            parts.headers.insert("early-data", http::HeaderValue::from_static("1"));
        } else if !matches!(tokio::time::timeout(p.timeout_idle, done.wait_for(|d| *d)).await, Ok(Ok(_))) {
            stream.stop_stream(h3::error::Code::H3_REQUEST_REJECTED);
            return bad_stream(&sess, "HTTP/3: a request in 0-RTT data whose handshake did not complete");
        }
    }
    sh.seg.add(C::H3Streams, 1);
    let t_start = now();
    let head = crate::h2::head::request_head_as(&parts, 3);
    let (send, recv) = stream.split();
    let framing = framing(&parts);
    let out = H3Out::new(send, parts.method == http::Method::HEAD);
    let body = Some(H3Body(recv)).filter(|_| framing != Framing::None);
    let mut conn = H3Stream { body: Pieces::new(body), framing, out, fd: sess.ends.fd.unwrap_or(-1) };
    let served = crate::req::contain::contain(crate::req::request(&mut sess, &mut conn, head, t_start, p.clone())).await;
    if let Err(why) = served {
        sh.seg.add(C::ScVclFailure, 1);
        let vxid = sess.vxid;
        sess.log.recf(Tag::Error, LogSide::Client, vxid, format_args!("request task failed (HTTP/3 stream): {why}"));
    }
    conn.out.close().await;
    sh.seg.log(&sess.log);
}

/// A stream that never became a request: counted; the session logs why
/// (an Error record: Varnish's Debug for an HTTP/2 stream it refuses is
/// masked by default, and this is worth seeing).
fn bad_stream(sess: &Sess, why: &str) {
    sess.sh.seg.add(C::H3StreamErrors, 1);
    let mut log = sess.sh.batch();
    log.rec(Tag::Error, LogSide::Client, sess.vxid, why.as_bytes());
    sess.sh.seg.log(&log);
}

/// Why a request's fields make it malformed in HTTP/3: a connection-
/// specific field, or TE other than "trailers" (RFC 9114 §4.2).
fn connection_specific(h: &http::HeaderMap) -> Option<&'static str> {
    const FIELDS: [&str; 5] = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"];
    if FIELDS.iter().any(|f| h.contains_key(*f)) {
        return Some("HTTP/3: connection-specific header field");
    }
    h.get_all(http::header::TE).iter().any(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers")).then_some("HTTP/3: TE other than trailers")
}

/// How the request's body is framed: Content-Length if sent; none for the
/// methods that have none without it (GET, HEAD, as HTTP/1 reads them);
/// else whatever DATA comes until the stream ends (forwarded chunked).
/// h3 cannot tell whether a stream's request side ended with its HEADERS
/// before reading on, so a GET's body without a length is not read.
fn framing(parts: &http::request::Parts) -> Framing {
    let length = parts.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    match length {
        Some(0) => Framing::None,
        Some(n) => Framing::Length(n),
        None if matches!(parts.method, http::Method::GET | http::Method::HEAD) => Framing::None,
        None => Framing::Chunked,
    }
}

pub struct H3Stream {
    body: Pieces<H3Body>,
    framing: Framing,
    pub out: H3Out,
    fd: i32,
}

/// A stream's DATA.
pub struct H3Body(RecvHalf);

impl Source for H3Body {
    async fn read(&mut self) -> std::io::Result<Option<Bytes>> {
        match self.0.recv_data().await {
            Ok(Some(mut b)) => Ok(Some(b.copy_to_bytes(b.remaining()))),
            Ok(None) => Ok(None),
            Err(_) => Err(std::io::ErrorKind::ConnectionReset.into()),
        }
    }
}

impl ReqBody for H3Stream {
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

impl Transport for H3Stream {
    type Out = H3Out;

    /// A stream carries one request, handed to the steps directly.
    async fn read_head(&mut self, _: &Params, _: &mut crate::req::transport::Stop) -> Result<(Head, f64), ReadErr> {
        Err(ReadErr::Closed(Reason::RemClose))
    }
    fn framing(&self, _: &Head) -> Option<Result<Framing, &'static str>> {
        Some(Ok(self.framing))
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
    fn out(&mut self) -> &mut H3Out {
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
        self.out.close().await;
    }
}
