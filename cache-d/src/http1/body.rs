//! HTTP/1 bodies: Content-Length, chunked and close-delimited transfer
//! with exact byte counts, re-framing as chunked, and a request body's
//! pace.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, Side};
use crate::http1::conn::BufConn;
use crate::http1::head::Framing;

/// Byte counts of one body transfer.
#[derive(Debug, Default, Clone, Copy)]
pub struct Moved {
    /// Bytes read from the source, framing included.
    pub rx: u64,
    /// Bytes written to the destination, framing included.
    pub tx: u64,
    /// Payload bytes (without chunk framing).
    pub payload: u64,
}

/// Limits and sides for one transfer.
pub struct Transfer {
    pub framing: Framing,
    /// Re-frame as chunked on the way out (else pass the payload as is).
    pub chunk_out: bool,
    /// Side blamed when reading fails.
    pub src_side: Side,
    /// Side blamed when writing fails.
    pub dst_side: Side,
    pub read_timeout: Duration,
    /// A request body's pace, when the source is a client.
    pub pace: Option<Pace>,
}

impl Transfer {
    /// A backend's body read in whole or into an object: as it comes, no
    /// re-chunking, no pace; read failures are the backend's.
    pub fn from_backend(framing: Framing, read_timeout: Duration) -> Transfer {
        Transfer { framing, chunk_out: false, src_side: Side::Backend, dst_side: Side::Internal, read_timeout, pace: None }
    }
}

/// How fast a client must send its request body: everything received by
/// `start + grace + received / min_rate` seconds (timeout_reqbody and
/// reqbody_min_rate), whatever the spacing of its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    until: tokio::time::Instant,
    min_rate: u64,
}

impl Pace {
    pub fn new(grace: Duration, min_rate: u64) -> Pace {
        let now = tokio::time::Instant::now();
        Pace { until: now.checked_add(grace).unwrap_or(now + Duration::from_secs(86400 * 365)), min_rate: min_rate.max(1) }
    }

    /// How long the next read may wait once `rx` bytes are in.
    fn allowance(&self, rx: u64) -> Duration {
        let earned = Duration::from_secs_f64(rx as f64 / self.min_rate as f64);
        self.until.checked_add(earned).map_or(Duration::MAX, |t| t.saturating_duration_since(tokio::time::Instant::now()))
    }
}

/// How long a read of a body may wait: `read_timeout`, or less when a
/// pace is due sooner.
pub fn body_wait(read_timeout: Duration, pace: Option<&Pace>, rx: u64) -> Duration {
    pace.map_or(read_timeout, |p| read_timeout.min(p.allowance(rx)))
}

/// Read a request body into the connection's buffer before a backend
/// connection is taken for it: all of it, or its first `limit` bytes. A
/// client that dribbles its body then holds only its own connection
/// until `pace` cuts it, never a backend's.
pub async fn prefill<S: AsyncRead + AsyncWrite + Unpin>(
    src: &mut BufConn<S>,
    framing: Framing,
    limit: usize,
    read_timeout: Duration,
    pace: Option<Pace>,
) -> Result<(), Error> {
    loop {
        let enough = match framing {
            Framing::None | Framing::Eof => true,
            Framing::Length(n) => src.buf.len() as u64 >= n.min(limit as u64),
            Framing::Chunked => src.buf.len() >= limit || !matches!(chunked_end(&src.buf), Ok(None)),
        };
        if enough {
            return Ok(());
        }
        match src.fill(body_wait(read_timeout, pace.as_ref(), src.buf.len() as u64)).await {
            Ok(0) => return Err(Error::new(Side::Client, "request body cut short")),
            Ok(_) => {}
            Err(e) => return Err(Error::io(Side::Client, "reading body", e)),
        }
    }
}

/// Where a chunked body that starts `buf` ends (trailers included):
/// Ok(None) while it is incomplete, Err(()) when it is malformed (the
/// transfer then reports that, with a 400).
#[allow(clippy::result_unit_err)]
pub fn chunked_end(buf: &[u8]) -> Result<Option<usize>, ()> {
    let mut at = 0usize;
    let line = |at: usize| buf.get(at..).and_then(|b| b.iter().position(|&c| c == b'\n')).map(|i| (at, at + i + 1));
    loop {
        let Some((start, next)) = line(at) else { return Ok(None) };
        let text = &buf[start..next];
        let hex = text.split(|&b| b == b';' || b == b'\r' || b == b'\n').next().unwrap_or_default().trim_ascii();
        if hex.is_empty() || hex.len() > 15 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return Err(());
        }
        let size = usize::from_str_radix(std::str::from_utf8(hex).map_err(|_| ())?, 16).map_err(|_| ())?;
        at = next;
        if size == 0 {
            loop {
                let Some((s, n)) = line(at) else { return Ok(None) };
                at = n;
                if n - s <= 2 && buf[s..n].iter().all(|&b| b == b'\r' || b == b'\n') {
                    return Ok(Some(at));
                }
            }
        }
        at = at.checked_add(size).ok_or(())?;
        if at > buf.len() {
            return Ok(None);
        }
        let Some((_, n)) = line(at) else { return Ok(None) };
        at = n;
    }
}

/// Copy a body from `src` (its buffer first) to `dst`.
pub async fn transfer<S, D>(src: &mut BufConn<S>, dst: &mut D, t: &Transfer, scratch: &mut Vec<u8>) -> Result<Moved, Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    D: AsyncWrite + Unpin,
{
    let mut m = Moved::default();
    match t.framing {
        Framing::None => {}
        Framing::Length(n) => copy_exact(src, dst, n, t, &mut m, scratch, "body cut short").await?,
        Framing::Eof => loop {
            if src.buf.is_empty() && fill(src, t, m.rx).await? == 0 {
                break;
            }
            let part = src.buf.split();
            m.rx += part.len() as u64;
            write_payload(dst, &part, t, &mut m, scratch).await?;
        },
        Framing::Chunked => loop {
            let (size, line) = chunk_line(src, t, m.rx).await?;
            m.rx += line as u64;
            if size == 0 {
                // Trailers: skip lines up to the empty one.
                loop {
                    let (l, wire) = read_line(src, t, m.rx).await?;
                    m.rx += wire as u64;
                    if l.is_empty() {
                        break;
                    }
                }
                break;
            }
            copy_exact(src, dst, size, t, &mut m, scratch, "chunked body cut short").await?;
            let (crlf, wire) = read_line(src, t, m.rx).await?;
            if !crlf.is_empty() {
                return Err(Error::new(t.src_side, "chunk not followed by CRLF"));
            }
            m.rx += wire as u64;
        },
    }
    if t.chunk_out && t.framing != Framing::None {
        write_all(dst, b"0\r\n\r\n", t.dst_side).await?;
        m.tx += 5;
    }
    Ok(m)
}

/// Copy exactly `n` payload bytes from `src` to `dst`.
async fn copy_exact<S, D>(
    src: &mut BufConn<S>,
    dst: &mut D,
    n: u64,
    t: &Transfer,
    m: &mut Moved,
    scratch: &mut Vec<u8>,
    short: &'static str,
) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    D: AsyncWrite + Unpin,
{
    let mut left = n;
    while left > 0 {
        if src.buf.is_empty() && fill_for(src, t, m.rx, left).await? == 0 {
            return Err(Error::new(t.src_side, short));
        }
        let take = (src.buf.len() as u64).min(left) as usize;
        let part = src.buf.split_to(take);
        write_payload(dst, &part, t, m, scratch).await?;
        m.rx += take as u64;
        left -= take as u64;
    }
    Ok(())
}

async fn fill<S: AsyncRead + AsyncWrite + Unpin>(src: &mut BufConn<S>, t: &Transfer, rx: u64) -> Result<usize, Error> {
    fill_for(src, t, rx, 0).await
}

/// Read more of a body of which `want` bytes are still to come.
async fn fill_for<S: AsyncRead + AsyncWrite + Unpin>(src: &mut BufConn<S>, t: &Transfer, rx: u64, want: u64) -> Result<usize, Error> {
    let wait = body_wait(t.read_timeout, t.pace.as_ref(), rx);
    src.fill_for(wait, want).await.map_err(|e| Error::io(t.src_side, "reading body", e))
}

async fn write_all<D: AsyncWrite + Unpin>(dst: &mut D, b: &[u8], side: Side) -> Result<(), Error> {
    dst.write_all(b).await.map_err(|e| Error::io(side, "writing", e))
}

async fn write_payload<D: AsyncWrite + Unpin>(
    dst: &mut D,
    part: &[u8],
    t: &Transfer,
    m: &mut Moved,
    scratch: &mut Vec<u8>,
) -> Result<(), Error> {
    if part.is_empty() {
        return Ok(());
    }
    m.payload += part.len() as u64;
    if t.chunk_out {
        scratch.clear();
        use std::io::Write as _;
        let _ = write!(scratch, "{:x}\r\n", part.len());
        let head = scratch.len();
        write_all(dst, scratch, t.dst_side).await?;
        write_all(dst, part, t.dst_side).await?;
        write_all(dst, b"\r\n", t.dst_side).await?;
        m.tx += (head + part.len() + 2) as u64;
    } else {
        write_all(dst, part, t.dst_side).await?;
        m.tx += part.len() as u64;
    }
    Ok(())
}

/// The longest chunk-size line (extensions included) or trailer line taken,
/// whether it arrives in pieces or at once.
const MAX_CHUNK_LINE: usize = 4096;

/// Read one line (without its CRLF or LF) from the buffer, filling as
/// needed; returns the line and its length on the wire.
async fn read_line<S: AsyncRead + AsyncWrite + Unpin>(src: &mut BufConn<S>, t: &Transfer, rx: u64) -> Result<(BytesMut, usize), Error> {
    loop {
        if let Some(i) = src.buf.iter().position(|&b| b == b'\n') {
            if i > MAX_CHUNK_LINE {
                return Err(Error::new(t.src_side, "chunk line too long"));
            }
            let mut line = src.buf.split_to(i + 1);
            line.truncate(i);
            if line.last() == Some(&b'\r') {
                line.truncate(i - 1);
            }
            return Ok((line, i + 1));
        }
        if src.buf.len() > MAX_CHUNK_LINE {
            return Err(Error::new(t.src_side, "chunk line too long"));
        }
        if fill(src, t, rx).await? == 0 {
            return Err(Error::new(t.src_side, "chunked body cut short"));
        }
    }
}

/// Read a chunk-size line; returns (size, bytes on the wire).
async fn chunk_line<S: AsyncRead + AsyncWrite + Unpin>(src: &mut BufConn<S>, t: &Transfer, rx: u64) -> Result<(u64, usize), Error> {
    let (line, wire) = read_line(src, t, rx).await?;
    let hex = line[..].split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
    if hex.is_empty() || hex.len() > 15 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return Err(Error::new(t.src_side, "invalid chunk size"));
    }
    let size =
        u64::from_str_radix(std::str::from_utf8(hex).unwrap_or("x"), 16).map_err(|_| Error::new(t.src_side, "invalid chunk size"))?;
    Ok((size, wire))
}

/// A writer that passes on only bytes `skip..skip + take` of what it is
/// given and takes the rest as written (a range cut from a pass's body
/// as it streams through).
pub struct Window<'w, W> {
    pub inner: &'w mut W,
    pub skip: u64,
    pub take: u64,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Window<'_, W> {
    fn poll_write(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = self.get_mut();
        let len = buf.len() as u64;
        if this.take == 0 || this.skip >= len {
            this.skip = this.skip.saturating_sub(len);
            return Poll::Ready(Ok(buf.len()));
        }
        let start = this.skip as usize;
        let end = (this.skip + this.take).min(len) as usize;
        match std::pin::Pin::new(&mut *this.inner).poll_write(cx, &buf[start..end]) {
            Poll::Ready(Ok(n)) => {
                this.skip = 0;
                this.take -= n as u64;
                // Past the window, the rest of `buf` is dropped.
                Poll::Ready(Ok(if this.take == 0 { buf.len() } else { start + n }))
            }
            other => other,
        }
    }
    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.get_mut().inner).poll_shutdown(cx)
    }
}
