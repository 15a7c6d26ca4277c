//! HTTP/1.1 framing on tokio sockets: buffered reads, request and response
//! heads parsed with httparse into owned offsets, and body transfer for
//! Content-Length, chunked and close-delimited bodies with exact byte counts.

use std::ops::Range;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, Side};

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

/// A parsed message head. The raw bytes are kept; fields are ranges into them.
#[derive(Debug, Clone)]
pub struct Head {
    pub raw: Bytes,
    /// Request method, or response reason.
    pub first: Range<usize>,
    /// Request URL (empty for responses).
    pub url: Range<usize>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Response status (0 for requests).
    pub status: u16,
    pub headers: Vec<(Range<usize>, Range<usize>)>,
}

impl Head {
    fn s(&self, r: &Range<usize>) -> &[u8] {
        &self.raw[r.clone()]
    }
    pub fn method(&self) -> &[u8] {
        self.s(&self.first)
    }
    pub fn reason(&self) -> &[u8] {
        self.s(&self.first)
    }
    pub fn url(&self) -> &[u8] {
        self.s(&self.url)
    }
    pub fn protocol(&self) -> &'static str {
        if self.minor == 0 {
            "HTTP/1.0"
        } else {
            "HTTP/1.1"
        }
    }
    /// Headers as (name, value) byte slices, in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers.iter().map(|(n, v)| (self.s(n), self.s(v)))
    }
    /// First value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
    /// Does any `name` header contain the comma-separated token `tok`?
    pub fn has_token(&self, name: &str, tok: &str) -> bool {
        self.iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(tok.as_bytes()))
    }
    /// Bytes of the head on the wire.
    pub fn wire_len(&self) -> usize {
        self.raw.len()
    }
}

/// Where `part` (a slice httparse returned) lies within `base`; an empty
/// range for anything outside it (a defaulted, static empty string).
fn offset(base: &[u8], part: &[u8]) -> Range<usize> {
    let (b, p) = (base.as_ptr() as usize, part.as_ptr() as usize);
    if p < b || p + part.len() > b + base.len() {
        return 0..0;
    }
    p - b..p - b + part.len()
}

/// Outcome of trying to parse a head from the buffer.
pub enum Parsed {
    Complete(Head),
    Partial,
}

/// Why a head could not be parsed; maps to 400 (client) or 503 (backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    Syntax(&'static str),
    TooManyHeaders,
    TooLarge,
}

impl HeadError {
    pub fn text(self) -> &'static str {
        match self {
            HeadError::Syntax(s) => s,
            HeadError::TooManyHeaders => "too many headers",
            HeadError::TooLarge => "head too large",
        }
    }
}

fn parse_err(e: httparse::Error) -> HeadError {
    match e {
        httparse::Error::TooManyHeaders => HeadError::TooManyHeaders,
        httparse::Error::HeaderName => HeadError::Syntax("invalid header name"),
        httparse::Error::HeaderValue => HeadError::Syntax("invalid header value"),
        httparse::Error::NewLine => HeadError::Syntax("invalid line ending"),
        httparse::Error::Status => HeadError::Syntax("invalid status"),
        httparse::Error::Token => HeadError::Syntax("invalid token"),
        httparse::Error::Version => HeadError::Syntax("invalid HTTP version"),
    }
}

/// Header slots kept on the stack; http_max_hdr above this uses the heap.
const STACK_HEADERS: usize = 128;

fn header_slots<'a, 'h>(
    stack: &'a mut [httparse::Header<'h>; STACK_HEADERS],
    heap: &'a mut Vec<httparse::Header<'h>>,
    max: usize,
) -> &'a mut [httparse::Header<'h>] {
    if max <= STACK_HEADERS {
        &mut stack[..max]
    } else {
        heap.resize(max, httparse::EMPTY_HEADER);
        &mut heap[..]
    }
}

/// The length of a complete head within `max_size`, None while partial.
/// Requests and responses share the limit rule (http_req_size and
/// http_resp_size): a head longer than the limit is an error whether or
/// not it is complete yet.
fn head_len(r: httparse::Result<usize>, buffered: usize, max_size: usize) -> Result<Option<usize>, HeadError> {
    match r {
        Ok(httparse::Status::Complete(n)) if n > max_size => Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(n)) => Ok(Some(n)),
        Ok(httparse::Status::Partial) if buffered > max_size => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(parse_err(e)),
    }
}

/// Parse a request head at the start of `buf`, splitting it off when complete.
pub fn parse_request(buf: &mut BytesMut, max_headers: usize, max_size: usize) -> Result<Parsed, HeadError> {
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut heap = Vec::new();
    let mut req = httparse::Request::new(header_slots(&mut stack, &mut heap, max_headers));
    let Some(n) = head_len(req.parse(buf), buf.len(), max_size)? else { return Ok(Parsed::Partial) };
    let base: &[u8] = buf;
    let first = offset(base, req.method.unwrap_or_default().as_bytes());
    let url = offset(base, req.path.unwrap_or_default().as_bytes());
    let minor = req.version.unwrap_or(1);
    let headers = req.headers.iter().map(|h| (offset(base, h.name.as_bytes()), offset(base, h.value))).collect();
    let raw = buf.split_to(n).freeze();
    Ok(Parsed::Complete(Head { raw, first, url, minor, status: 0, headers }))
}

/// Parse a response head at the start of `buf`, splitting it off when complete.
pub fn parse_response(buf: &mut BytesMut, max_headers: usize, max_size: usize) -> Result<Parsed, HeadError> {
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut heap = Vec::new();
    let mut resp = httparse::Response::new(header_slots(&mut stack, &mut heap, max_headers));
    let Some(n) = head_len(resp.parse(buf), buf.len(), max_size)? else { return Ok(Parsed::Partial) };
    let base: &[u8] = buf;
    let first = offset(base, resp.reason.unwrap_or_default().as_bytes());
    let status = resp.code.unwrap_or(0);
    let minor = resp.version.unwrap_or(1);
    let headers = resp.headers.iter().map(|h| (offset(base, h.name.as_bytes()), offset(base, h.value))).collect();
    let raw = buf.split_to(n).freeze();
    Ok(Parsed::Complete(Head { raw, first, url: 0..0, minor, status, headers }))
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    /// Until the sender closes (responses only).
    Eof,
}

/// Body framing of a request (RFC 9112 §6.3); errors mean 400. The only
/// transfer coding taken is one lone `chunked`: `chunked, identity`,
/// `gzip, chunked` or two Transfer-Encoding headers are refused (a proxy
/// and a backend that read them differently is a smuggling channel).
pub fn request_framing(h: &Head) -> Result<Framing, &'static str> {
    let mut te = h.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"transfer-encoding")).map(|(_, v)| v);
    let te = match (te.next(), te.next()) {
        (None, _) => None,
        (Some(v), None) if v.trim_ascii().eq_ignore_ascii_case(b"chunked") => Some(()),
        (Some(_), None) => return Err("unsupported Transfer-Encoding"),
        (Some(_), Some(_)) => return Err("more than one Transfer-Encoding header"),
    };
    let cl = content_length(h)?;
    match (te, cl) {
        (Some(()), Some(_)) => Err("both Transfer-Encoding and Content-Length"),
        (Some(()), None) => Ok(Framing::Chunked),
        (None, Some(0)) | (None, None) => Ok(Framing::None),
        (None, Some(n)) => Ok(Framing::Length(n)),
    }
}

/// Request checks beyond framing (Varnish's HTTP1_DissectRequest): one
/// Host header at most (two would let the cache key and the backend
/// disagree), and a Connection header may not name Host.
pub fn request_checks(h: &Head) -> Result<(), &'static str> {
    if h.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"host")).nth(1).is_some() {
        return Err("Duplicate Host header");
    }
    if h.has_token("connection", "host") {
        return Err("Connection names the Host header");
    }
    Ok(())
}

/// An absolute-form request target (`http://host/path`, RFC 9112 §3.2.2):
/// its authority and the path, as Varnish splits it (only http://, and
/// only with a path); None for origin-form.
pub fn absolute_form(url: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = url.get(..7).filter(|s| s.eq_ignore_ascii_case(b"http://")).map(|_| &url[7..])?;
    let slash = rest.iter().position(|&b| b == b'/')?;
    Some((&rest[..slash], &rest[slash..]))
}

/// The header names listed in `Connection` header(s) among `headers`
/// (besides close and keep-alive): headers for this hop only, not
/// forwarded (RFC 9110 §7.6.1). Empty (no allocation) in the usual case.
pub fn connection_tokens<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<&'a [u8]> {
    headers
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case(b"close") && !t.eq_ignore_ascii_case(b"keep-alive"))
        .collect()
}

/// Is `name` one of `tokens` (from [`connection_tokens`])?
pub fn is_listed(tokens: &[&[u8]], name: &[u8]) -> bool {
    tokens.iter().any(|t| t.eq_ignore_ascii_case(name))
}

/// Body framing of a response to `method`.
pub fn response_framing(h: &Head, method: &[u8]) -> Result<Framing, &'static str> {
    if method == b"HEAD" || (100..200).contains(&h.status) || h.status == 204 || h.status == 304 {
        return Ok(Framing::None);
    }
    if h.has_token("transfer-encoding", "chunked") {
        return Ok(Framing::Chunked);
    }
    match content_length(h)? {
        Some(n) => Ok(Framing::Length(n)),
        None => Ok(Framing::Eof),
    }
}

fn content_length(h: &Head) -> Result<Option<u64>, &'static str> {
    let mut found: Option<u64> = None;
    for (n, v) in h.iter() {
        if !n.eq_ignore_ascii_case(b"content-length") {
            continue;
        }
        let v = v.trim_ascii();
        if v.is_empty() || !v.iter().all(u8::is_ascii_digit) || v.len() > 18 {
            return Err("invalid Content-Length");
        }
        let n: u64 = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).ok_or("invalid Content-Length")?;
        if found.is_some_and(|f| f != n) {
            return Err("conflicting Content-Length headers");
        }
        found = Some(n);
    }
    Ok(found)
}

/// Headers a proxy must not forward (RFC 9110 §7.6.1), plus framing headers
/// it sets itself.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 8] =
        [b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade", b"content-length"];
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

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
fn body_wait(read_timeout: Duration, pace: Option<&Pace>, rx: u64) -> Duration {
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
        if src.buf.is_empty() && fill(src, t, m.rx).await? == 0 {
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
    src.fill(body_wait(t.read_timeout, t.pace.as_ref(), rx)).await.map_err(|e| Error::io(t.src_side, "reading body", e))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &str) -> Result<Parsed, HeadError> {
        let mut b = BytesMut::from(s);
        parse_request(&mut b, 64, 32768)
    }

    #[test]
    fn parses_requests_and_keeps_the_rest() {
        let mut b = BytesMut::from("GET /a?b HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\nGET /next");
        let Ok(Parsed::Complete(h)) = parse_request(&mut b, 64, 32768) else { panic!() };
        assert_eq!(h.method(), b"GET");
        assert_eq!(h.url(), b"/a?b");
        assert_eq!(h.get("host"), Some(&b"x"[..]));
        assert_eq!(h.wire_len(), 38);
        assert_eq!(&b[..], b"GET /next");
        assert!(matches!(req("GET / HTTP/1.1\r\nHost"), Ok(Parsed::Partial)));
        assert!(matches!(req("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"), Err(HeadError::Syntax(_))));
        assert!(req("\x01\x02garbage\r\n\r\n").is_err());
    }

    #[test]
    fn heads_over_the_size_limit_are_refused_complete_or_not() {
        let head = format!("HTTP/1.1 200 OK\r\nX-Big: {}\r\n\r\n", "a".repeat(300));
        assert_eq!(parse_response(&mut BytesMut::from(head.as_str()), 64, 256).err(), Some(HeadError::TooLarge));
        assert!(matches!(parse_response(&mut BytesMut::from(head.as_str()), 64, 1024), Ok(Parsed::Complete(_))));
        let req = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(300));
        assert_eq!(parse_request(&mut BytesMut::from(req.as_str()), 64, 256).err(), Some(HeadError::TooLarge));
    }

    #[test]
    fn framing_rules() {
        let head = |s: &str| match req(s) {
            Ok(Parsed::Complete(h)) => h,
            _ => panic!("{s}"),
        };
        assert_eq!(request_framing(&head("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")), Ok(Framing::Length(5)));
        assert_eq!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")), Ok(Framing::Chunked));
        assert!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")).is_err());
        assert!(request_framing(&head("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")).is_err());
        assert!(request_framing(&head("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n")).is_err());
        assert_eq!(request_framing(&head("GET / HTTP/1.1\r\n\r\n")), Ok(Framing::None));
        for te in ["chunked, identity", "gzip, chunked", "identity", "chunked;q=1", "xchunked"] {
            let h = head(&format!("POST / HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n"));
            assert!(request_framing(&h).is_err(), "{te}");
        }
        assert!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")).is_err());
        assert_eq!(request_framing(&head("POST / HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n\r\n")), Ok(Framing::Chunked));
        assert!(request_checks(&head("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n")).is_err());
        assert!(request_checks(&head("GET / HTTP/1.1\r\nHost: a\r\nConnection: close, Host\r\n\r\n")).is_err());
        assert!(request_checks(&head("GET / HTTP/1.1\r\nHost: a\r\nConnection: X-A\r\n\r\n")).is_ok());
        assert_eq!(absolute_form(b"http://Example.com:8080/a?b"), Some((&b"Example.com:8080"[..], &b"/a?b"[..])));
        assert_eq!(absolute_form(b"HTTP://h/"), Some((&b"h"[..], &b"/"[..])));
        assert_eq!(absolute_form(b"http://h"), None);
        assert_eq!(absolute_form(b"/http://h/"), None);
        assert_eq!(absolute_form(b"https://h/"), None);
    }

    #[test]
    fn chunked_ends_are_found_exactly() {
        assert_eq!(chunked_end(b"5\r\nhello\r\n0\r\n\r\n"), Ok(Some(15)));
        assert_eq!(chunked_end(b"5;x=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET"), Ok(Some(27)));
        assert_eq!(chunked_end(b"5\r\nhello\r\n0\r\nX-T: 1\r\n"), Ok(None));
        assert_eq!(chunked_end(b"5\r\nhel"), Ok(None));
        assert_eq!(chunked_end(b"5\r\nhello\r\n"), Ok(None));
        assert_eq!(chunked_end(b"zz\r\n"), Err(()));
        assert_eq!(chunked_end(b"ffffffffffffffff\r\n"), Err(()));
        assert_eq!(chunked_end(b"fffffffffffffff\r\n"), Ok(None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dribbling_body_is_cut_by_its_pace() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            for _ in 0..100 {
                if a.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let mut src = BufConn::new(b);
        let t0 = tokio::time::Instant::now();
        let pace = Pace::new(Duration::from_secs(5), 500);
        let e = prefill(&mut src, Framing::Length(1000), 65536, Duration::from_secs(60), Some(pace)).await.unwrap_err();
        assert_eq!(e.side, Side::Client);
        assert!((5..=6).contains(&t0.elapsed().as_secs()), "{:?}", t0.elapsed());
    }

    #[tokio::test]
    async fn chunked_bodies_are_reframed() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        a.write_all(b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT").await.unwrap();
        let mut src = BufConn::new(b);
        let mut out = Vec::new();
        let t = Transfer {
            framing: Framing::Chunked,
            chunk_out: true,
            src_side: Side::Backend,
            dst_side: Side::Client,
            read_timeout: Duration::from_secs(1),
            pace: None,
        };
        let m = transfer(&mut src, &mut out, &t, &mut Vec::new()).await.unwrap();
        assert_eq!(out, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
        assert_eq!(m.payload, 11);
        assert_eq!(m.tx, out.len() as u64);
        assert_eq!(m.rx, 40); // every byte of the chunked input but "NEXT"
        assert_eq!(&src.buf[..], b"NEXT");
    }

    #[tokio::test]
    async fn short_bodies_blame_the_sender() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        a.write_all(b"abc").await.unwrap();
        drop(a);
        let mut src = BufConn::new(b);
        let t = Transfer {
            framing: Framing::Length(10),
            chunk_out: false,
            src_side: Side::Backend,
            dst_side: Side::Client,
            read_timeout: Duration::from_secs(1),
            pace: None,
        };
        let e = transfer(&mut src, &mut Vec::new(), &t, &mut Vec::new()).await.unwrap_err();
        assert_eq!(e.side, Side::Backend);
    }
}
