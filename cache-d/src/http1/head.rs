//! HTTP/1 message heads: parsed with httparse into owned offsets, the
//! framing a head announces, and the header rules a proxy applies
//! (hop-by-hop, Connection-named, absolute-form targets).

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use common::log::vsl::{Batch, Side as LogSide, Tag};

/// A parsed message head. The raw bytes are kept; fields are ranges into them.
#[derive(Debug, Clone)]
pub struct Head {
    pub raw: Bytes,
    /// Request method, or response reason.
    pub first: Range<usize>,
    /// Request URL (empty for responses).
    pub url: Range<usize>,
    /// The HTTP version: 0 for HTTP/1.0, 1 for HTTP/1.1, 2 for a request
    /// that came on an HTTP/2 stream.
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
        proto_name(self.minor)
    }
    /// Headers as (name, value) byte slices, in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers.iter().map(|(n, v)| (self.s(n), self.s(v)))
    }
    /// Each header as its log record reads, "name: value": the field's
    /// own bytes when the head has it so (one copy), else its parts.
    pub fn log_fields(&self, log: &mut common::log::vsl::Batch, tag: common::log::vsl::Tag, side: common::log::vsl::Side, vxid: u32) {
        for (n, v) in &self.headers {
            match self.raw.get(n.start..v.end) {
                Some(line) if v.start == n.end + 2 && line[n.len()..n.len() + 2] == *b": " => log.rec(tag, side, vxid, line),
                _ => log.rec_parts(tag, side, vxid, &[self.s(n), b": ", self.s(v)]),
            }
        }
    }
    /// First value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
    /// Does any `name` header contain the comma-separated token `tok`?
    pub fn has_token(&self, name: &str, tok: &str) -> bool {
        self.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).any(|(_, v)| has_token(v, tok))
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

/// Parse a request head at the start of `buf`, splitting it off when
/// complete. A head with folded header lines (obs-fold) is unfolded and
/// parsed again, as Varnish unfolds them; the common path parses once.
pub fn parse_request(buf: &mut BytesMut, max_headers: usize, max_size: usize) -> Result<Parsed, HeadError> {
    unfolding(buf, |b| parse_request_once(b, max_headers, max_size))
}

/// Parse with `parse`; on failure, unfold the head and, if that changed
/// anything, parse once more.
fn unfolding(buf: &mut BytesMut, parse: impl Fn(&mut BytesMut) -> Result<Parsed, HeadError>) -> Result<Parsed, HeadError> {
    match parse(buf) {
        Err(_) if unfold(buf) => parse(buf),
        r => r,
    }
}

fn parse_request_once(buf: &mut BytesMut, max_headers: usize, max_size: usize) -> Result<Parsed, HeadError> {
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut heap = Vec::new();
    let mut req = httparse::Request::new(header_slots(&mut stack, &mut heap, max_headers));
    let parsed = req.parse(buf);
    if matches!(parsed, Err(httparse::Error::Token)) {
        return odd_request_line(buf, max_headers, max_size);
    }
    let Some(n) = head_len(parsed, buf.len(), max_size)? else { return Ok(Parsed::Partial) };
    let base: &[u8] = buf;
    let first = offset(base, req.method.unwrap_or_default().as_bytes());
    let url = offset(base, req.path.unwrap_or_default().as_bytes());
    let minor = req.version.unwrap_or(1);
    let headers = req.headers.iter().map(|h| (offset(base, h.name.as_bytes()), offset(base, h.value))).collect();
    let raw = buf.split_to(n).freeze();
    Ok(Parsed::Complete(Head { raw, first, url, minor, status: 0, headers }))
}

/// A request line httparse refuses for its tokens: Varnish takes any
/// method and URL without blanks or control characters (a method ":x"
/// too), so the line is split by hand and the header fields left to
/// httparse. Only failed parses come here.
fn odd_request_line(buf: &mut BytesMut, max_headers: usize, max_size: usize) -> Result<Parsed, HeadError> {
    let bad = || HeadError::Syntax("invalid token");
    let start = buf.iter().take_while(|&&c| c == b'\r' || c == b'\n').count();
    // The line ends at LF, CRLF as well.
    let Some(lf) = buf[start..].iter().position(|&c| c == b'\n').map(|i| start + i) else {
        return if buf.len() > max_size { Err(HeadError::TooLarge) } else { Ok(Parsed::Partial) };
    };
    let eol = if lf > start && buf[lf - 1] == b'\r' { lf - 1 } else { lf };
    let base: &[u8] = buf;
    let mut parts = base[start..eol].split(|&c| c == b' ');
    let (Some(method), Some(url), Some(proto), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    if method.is_empty() || url.is_empty() || method.iter().chain(url).any(|c| c.is_ascii_control() || *c >= 0x7f) {
        return Err(bad());
    }
    let minor = match proto {
        b"HTTP/1.1" => 1,
        b"HTTP/1.0" => 0,
        _ => return Err(HeadError::Syntax("invalid HTTP version")),
    };
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut heap = Vec::new();
    let slots = header_slots(&mut stack, &mut heap, max_headers);
    let (n, fields) = match httparse::parse_headers(&base[lf + 1..], slots) {
        Ok(httparse::Status::Complete((n, fields))) => (lf + 1 + n, fields),
        Ok(httparse::Status::Partial) if buf.len() > max_size => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(e) => return Err(parse_err(e)),
    };
    if n > max_size {
        return Err(HeadError::TooLarge);
    }
    let (first, url) = (offset(base, method), offset(base, url));
    let headers = fields.iter().map(|h| (offset(base, h.name.as_bytes()), offset(base, h.value))).collect();
    let raw = buf.split_to(n).freeze();
    Ok(Parsed::Complete(Head { raw, first, url, minor, status: 0, headers }))
}

/// Parse a response head at the start of `buf`, splitting it off when
/// complete; folded header lines are unfolded as for requests.
pub fn parse_response(buf: &mut BytesMut, max_headers: usize, max_size: usize) -> Result<Parsed, HeadError> {
    unfolding(buf, |b| parse_response_once(b, max_headers, max_size))
}

fn parse_response_once(buf: &mut BytesMut, max_headers: usize, max_size: usize) -> Result<Parsed, HeadError> {
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut heap = Vec::new();
    let mut resp = httparse::Response::new(header_slots(&mut stack, &mut heap, max_headers));
    let Some(n) = head_len(resp.parse(buf), buf.len(), max_size)? else { return Ok(Parsed::Partial) };
    let base: &[u8] = buf;
    let first = offset(base, resp.reason.unwrap_or_default().as_bytes());
    let status = resp.code.unwrap_or(0);
    // Three digits from 100 to 999, as Varnish reads a status ("099" is not).
    if status < 100 {
        return Err(HeadError::Syntax("invalid status"));
    }
    let minor = resp.version.unwrap_or(1);
    let headers = resp.headers.iter().map(|h| (offset(base, h.name.as_bytes()), offset(base, h.value))).collect();
    let raw = buf.split_to(n).freeze();
    Ok(Parsed::Complete(Head { raw, first, url: 0..0, minor, status, headers }))
}

/// Unfold obs-fold continuation lines in the head at the start of `buf`,
/// in place, as Varnish does: a header line followed by a line starting
/// with SP or HT is one line, the line break and the continuation's
/// leading whitespace becoming spaces (so offsets and the head's length do
/// not change). The line after the start line is not a continuation (a
/// first header starting with whitespace stays an error). True if
/// anything was unfolded.
pub fn unfold(buf: &mut [u8]) -> bool {
    // Empty lines before the start line are skipped (as the parser does).
    let lead = buf.iter().position(|&c| c != b'\r' && c != b'\n').unwrap_or(buf.len());
    let Some(first) = buf[lead..].iter().position(|&c| c == b'\n').map(|p| p + lead) else { return false };
    let sp = |c: u8| c == b' ' || c == b'\t';
    let mut changed = false;
    let mut line = first + 1;
    while line < buf.len() && buf[line] != b'\r' && buf[line] != b'\n' {
        let Some(nl) = buf[line..].iter().position(|&c| c == b'\n').map(|p| p + line) else { break };
        if !buf.get(nl + 1).is_some_and(|&c| sp(c)) {
            line = nl + 1;
            continue;
        }
        // The same line goes on: blank the break and the indentation.
        let mut k = if nl > line && buf[nl - 1] == b'\r' { nl - 1 } else { nl };
        while k < buf.len() && (k <= nl || sp(buf[k])) {
            buf[k] = b' ';
            k += 1;
        }
        changed = true;
    }
    changed
}

/// Why Varnish's header dissection (http1_dissect_hdrs) refuses the
/// request head at the start of `buf`, in its BogoHeader words; None
/// when the header lines pass those checks (the fault is elsewhere).
/// Only for a head already refused, so the text may allocate.
pub fn bogo_header(buf: &[u8]) -> Option<String> {
    let lead = buf.iter().position(|&c| c != b'\r' && c != b'\n')?;
    let mut p = buf[lead..].iter().position(|&c| c == b'\n')? + lead + 1;
    let crlf = |i: usize| match (buf.get(i), buf.get(i + 1)) {
        (Some(b'\r'), Some(b'\n')) => 2,
        (Some(b'\n'), _) => 1,
        _ => 0,
    };
    let sp = |c: u8| c == b' ' || c == b'\t';
    let show = |a: usize, b: usize| String::from_utf8_lossy(&buf[a..b.min(a + 20)]).into_owned();
    while p < buf.len() && crlf(p) == 0 {
        // The line ends at a line break not followed by white space.
        let (mut q, mut r) = (p, p);
        while r < buf.len() {
            let c = buf[r];
            if (c >= 0x20 && c != 0x7f) || c == b'\t' {
                r += 1;
                continue;
            }
            let i = crlf(r);
            if i == 0 {
                return Some(format!("Header has ctrl char 0x{c:02x}"));
            }
            q = r;
            r += i;
            if r == buf.len() || crlf(r) > 0 || !sp(buf[r]) {
                break;
            }
        }
        if p == q {
            return None;
        }
        if matches!(buf[p], b' ' | b'\t' | b'\r' | b'\n') {
            return Some(format!("1st header has white space: {}", show(p, q)));
        }
        if buf[p] == b':' {
            return Some(format!("Missing header name: {}", show(p, q)));
        }
        while q > p && sp(buf[q - 1]) {
            q -= 1;
        }
        let name = buf[p..q].iter().position(|&c| c == b':').unwrap_or(q - p);
        if let Some(&c) = buf[p..p + name].iter().find(|&&c| !is_tchar(c)) {
            return Some(format!("Illegal char 0x{c:02x} in header name"));
        }
        if p + name == q {
            return Some(format!("Header without ':' {}", show(p, q)));
        }
        p = r;
    }
    None
}

/// A token character (RFC 9110 §5.6.2), as a header name is made of.
fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
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

/// Body framing of a request (RFC 9112 §6.3); errors mean 400 (a HEAD
/// with a body among them). The only
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
    let framing = match (te, cl) {
        (Some(()), Some(_)) => return Err("both Transfer-Encoding and Content-Length"),
        (Some(()), None) => Framing::Chunked,
        (None, Some(0)) | (None, None) => Framing::None,
        (None, Some(n)) => Framing::Length(n),
    };
    // A HEAD with a body is a hard error, as in Varnish (a chunked one
    // too, even if empty): it has no response body to frame the next
    // response by, and proxies disagree on whether to read the body.
    if framing != Framing::None && h.method() == b"HEAD" {
        return Err("HEAD with a body");
    }
    Ok(framing)
}

/// Request checks beyond framing (Varnish's HTTP1_DissectRequest): one
/// Host header at most (two would let the cache key and the backend
/// disagree), and a Connection header may not name Host.
pub fn request_checks(h: &Head) -> Result<(), &'static str> {
    if h.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"host")).nth(1).is_some() {
        return Err("Duplicate Host header");
    }
    // The headers Connection names (none, without allocating, in the
    // usual case) may not be Host, nor one a fetch or a delivery must see
    // (Varnish's http_DoConnection refuses those a pass would not forward
    // anyway).
    let named = connection_tokens(h.iter());
    if named.iter().any(|t| t.eq_ignore_ascii_case(b"host")) {
        return Err("Connection names the Host header");
    }
    const KEPT: [&str; 11] = [
        "age",
        "range",
        "if-range",
        "if-none-match",
        "if-match",
        "if-modified-since",
        "if-unmodified-since",
        "cache-control",
        "content-range",
        "proxy-authenticate",
        "proxy-authorization",
    ];
    if named.iter().any(|t| KEPT.iter().any(|k| t.eq_ignore_ascii_case(k.as_bytes()))) {
        return Err("Connection names a header that must not be removed");
    }
    // Two Content-Length headers, even equal ones, as Varnish's cnt_recv.
    if h.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length")).nth(1).is_some() {
        return Err("Duplicate Content-Length header");
    }
    // An HTTP/1.0 POST or PUT with neither length nor chunking would have
    // its body end at close (RFC 1945 §8.3): refused, as Varnish does,
    // unless it says keep-alive (then it has no body).
    let unframed = h.get("content-length").is_none() && h.get("transfer-encoding").is_none();
    let keep_alive = h.get("connection").is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"keep-alive"));
    if h.minor == 0 && unframed && !keep_alive && matches!(h.method(), b"POST" | b"PUT") {
        return Err("HTTP/1.0 POST or PUT without Content-Length");
    }
    Ok(())
}

/// Does the backend close its connection after this response: HTTP/1.0
/// unless it said keep-alive, any version that said close (Varnish's
/// http1 fetch rules).
pub fn backend_closes(h: &Head) -> bool {
    (h.minor == 0 && !h.has_token("connection", "keep-alive")) || h.has_token("connection", "close")
}

/// An absolute-form request target (`http://host/path`, RFC 9112 §3.2.2):
/// its authority and the path, as Varnish splits it (only http://, or
/// https:// too with feature https_scheme, and only with a path); None
/// for origin-form.
pub fn absolute_form(url: &[u8], https: bool) -> Option<(&[u8], &[u8])> {
    let scheme = |s: &[u8]| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
    let rest = match () {
        () if scheme(b"http://") => &url[7..],
        () if https && scheme(b"https://") => &url[8..],
        () => return None,
    };
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

/// A status whose response has neither body nor length: 1xx, 204, 304
/// (RFC 9110 §6.4.1).
pub fn bodyless(status: u16) -> bool {
    (100..200).contains(&status) || status == 204 || status == 304
}

/// Body framing of a response to `method`.
pub fn response_framing(h: &Head, method: &[u8]) -> Result<Framing, &'static str> {
    // A 204 announcing a body is refused, as Varnish's V1F_FetchRespHdr
    // refuses it (a Content-Length other than 0, or any Transfer-Encoding).
    if h.status == 204
        && method != b"HEAD"
        && (content_length(h)?.is_some_and(|n| n != 0) || h.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"transfer-encoding")))
    {
        return Err("204 response with a body");
    }
    if method == b"HEAD" || bodyless(h.status) {
        return Ok(Framing::None);
    }
    if let Some(te) = h.get("transfer-encoding") {
        // Only `chunked` is a framing Varnish reads (any other coding
        // fails the fetch); with a Content-Length too, which one the
        // backend meant is anyone's guess (a smuggling shape).
        if !te.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            return Err("Unsupported Transfer-Encoding");
        }
        if h.iter().any(|(n, _)| n.eq_ignore_ascii_case(b"content-length")) {
            return Err("Both Content-Length and Transfer-Encoding");
        }
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

/// Does a comma-separated header value list `tok` (case-insensitive)?
pub fn has_token(v: &[u8], tok: &str) -> bool {
    v.split(|&c| c == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(tok.as_bytes()))
}

/// Headers a proxy must not forward (RFC 9110 §7.6.1), plus framing headers
/// it sets itself.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    const HOP: [&[u8]; 8] =
        [b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade", b"content-length"];
    HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// Writes header lines to a wire buffer and logs each one.
pub struct HeadOut<'a> {
    pub wire: &'a mut Vec<u8>,
    pub log: &'a mut Batch,
    pub tag: Tag,
    pub side: LogSide,
    pub vxid: u32,
}

impl HeadOut<'_> {
    pub fn header(&mut self, name: &[u8], value: &[u8]) {
        // The record is the line just written, without its CRLF: one copy
        // of the field less (a hit writes a dozen).
        let start = self.wire.len();
        self.wire.reserve(name.len() + value.len() + 4);
        self.wire.extend_from_slice(name);
        self.wire.extend_from_slice(b": ");
        self.wire.extend_from_slice(value);
        self.log.rec(self.tag, self.side, self.vxid, &self.wire[start..]);
        self.wire.extend_from_slice(b"\r\n");
    }
}

/// The HTTP/2 connection preface a client with prior knowledge starts
/// with (RFC 9113 §3.4).
/// A request's protocol as Varnish logs it (req.proto, ReqProtocol) by
/// our version code: 0 and 1 for HTTP/1.x, 2 for an HTTP/2 stream, 3
/// for an HTTP/3 one.
pub fn proto_name(minor: u8) -> &'static str {
    match minor {
        0 => "HTTP/1.0",
        1 => "HTTP/1.1",
        2 => "HTTP/2.0",
        _ => "HTTP/3",
    }
}

pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Does this HTTP/1.1 request ask to switch to h2c (RFC 7540 §3.2: an
/// Upgrade naming h2c, one HTTP2-Settings field)? Connection need not
/// name them, as Varnish does not ask it to. A request with a body stays
/// on HTTP/1.1, as the RFC allows (and Varnish does): its body would
/// have to be read before the switch.
pub fn wants_h2c(head: &Head) -> bool {
    head.minor == 1
        && head.has_token("upgrade", "h2c")
        && head.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"http2-settings")).count() == 1
        && head.get("content-length").is_none_or(|v| v.trim_ascii() == b"0")
        && head.get("transfer-encoding").is_none()
}
