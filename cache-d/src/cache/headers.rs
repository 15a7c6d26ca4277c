//! A stored response head: the reason phrase and every header name and
//! value packed in one buffer (a cached object keeps these for its whole
//! life, so they cost one allocation, shared with a small body):
//!
//! `[count u16][reason len u16][(name, value end) × count][reason][names and values]`
//!
//! The pairs are u16 when the names and values take under 32 KiB (almost
//! every head) and u32 otherwise; the count's top bit says which. A
//! value's end counts from the start of the names and values; `name` is
//! either the name's end there or, with its top bit set, the index of a
//! common name in [`NAMES`], spelled exactly so, which then takes no room
//! in the buffer (a name is kept byte for byte either way).

use bytes::Bytes;

/// Header names stored as an index (exactly these bytes; anything else,
/// other capitalizations too, is stored as it came).
const NAMES: &[&str] = &[
    "cache-control",
    "content-type",
    "content-encoding",
    "content-language",
    "content-disposition",
    "content-location",
    "content-range",
    "date",
    "etag",
    "expires",
    "last-modified",
    "server",
    "vary",
    "age",
    "accept-ranges",
    "via",
    "link",
    "location",
    "set-cookie",
    "pragma",
    "x-cache",
    "x-powered-by",
    "x-request-id",
    "x-frame-options",
    "x-content-type-options",
    "x-xss-protection",
    "referrer-policy",
    "content-security-policy",
    "permissions-policy",
    "strict-transport-security",
    "alt-svc",
    "server-timing",
    "timing-allow-origin",
    "surrogate-control",
    "surrogate-key",
    "xkey",
    "access-control-allow-origin",
    "access-control-allow-credentials",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-expose-headers",
    "access-control-max-age",
    "cross-origin-resource-policy",
    "cross-origin-opener-policy",
    "cross-origin-embedder-policy",
    "report-to",
    "nel",
    "Cache-Control",
    "Content-Type",
    "Content-Encoding",
    "Content-Language",
    "Content-Disposition",
    "Content-Location",
    "Content-Range",
    "Date",
    "ETag",
    "Etag",
    "Expires",
    "Last-Modified",
    "Server",
    "Vary",
    "Age",
    "Accept-Ranges",
    "Via",
    "Link",
    "Location",
    "Set-Cookie",
    "Pragma",
    "X-Cache",
    "X-Powered-By",
    "X-Request-Id",
    "X-Request-ID",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Referrer-Policy",
    "Content-Security-Policy",
    "Permissions-Policy",
    "Strict-Transport-Security",
    "Alt-Svc",
    "Server-Timing",
    "Timing-Allow-Origin",
    "Surrogate-Control",
    "Surrogate-Key",
    "Access-Control-Allow-Origin",
    "Access-Control-Allow-Credentials",
    "Access-Control-Allow-Methods",
    "Access-Control-Allow-Headers",
    "Access-Control-Expose-Headers",
    "Access-Control-Max-Age",
    "P3P",
    "Report-To",
    "NEL",
];

/// The count's flag for u32 pairs.
const WIDE: u16 = 0x8000;
/// Most headers a head keeps (the count's other 15 bits; HTTP limits on
/// heads are far below).
const MAX_HEADERS: usize = 0x7fff;

fn common(name: &[u8]) -> Option<usize> {
    NAMES.iter().position(|n| n.as_bytes() == name)
}

/// A header's name: common (in [`NAMES`]) or where it is in the buffer.
#[derive(Clone, Copy)]
enum Name {
    Common(&'static str),
    At(usize, usize),
}

/// A stored response head (see the module's comment for the layout).
#[derive(Clone)]
pub struct ObjHeaders {
    buf: Bytes,
}

impl Default for ObjHeaders {
    fn default() -> ObjHeaders {
        ObjHeaders::from_pairs(b"", std::iter::empty())
    }
}

impl ObjHeaders {
    /// Pack `reason` and the headers. A head too large for the layout
    /// (more than 32,767 headers or a 64 KiB reason) keeps what fits; the
    /// HTTP limits on heads are far below that.
    pub fn from_pairs<'a>(reason: &[u8], pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> ObjHeaders {
        ObjHeaders::with_body(reason, pairs, b"").0
    }

    /// Pack the head with a body after it, in the same allocation (a
    /// small object costs one allocation); returns the body's slice.
    pub fn with_body<'a>(reason: &[u8], pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone, body: &[u8]) -> (ObjHeaders, Bytes) {
        let pairs = pairs.take(MAX_HEADERS).map(|(n, v)| (common(n), n, v));
        let reason = &reason[..reason.len().min(u16::MAX as usize)];
        let (n, total) =
            pairs.clone().fold((0usize, 0usize), |(n, t), (c, a, b)| (n + 1, t + if c.is_some() { 0 } else { a.len() } + b.len()));
        let wide = total >= 0x8000;
        let width = if wide { 4 } else { 2 };
        let mut buf = Vec::with_capacity(4 + 2 * width * n + reason.len() + total + body.len());
        buf.extend_from_slice(&(n as u16 | if wide { WIDE } else { 0 }).to_le_bytes());
        buf.extend_from_slice(&(reason.len() as u16).to_le_bytes());
        let put = |buf: &mut Vec<u8>, x: usize, index: bool| {
            if wide {
                buf.extend_from_slice(&(x as u32 | if index { 0x8000_0000 } else { 0 }).to_le_bytes());
            } else {
                buf.extend_from_slice(&(x as u16 | if index { 0x8000 } else { 0 }).to_le_bytes());
            }
        };
        let mut end = 0;
        for (c, a, b) in pairs.clone() {
            match c {
                Some(i) => put(&mut buf, i, true),
                None => {
                    end += a.len();
                    put(&mut buf, end, false);
                }
            }
            end += b.len();
            put(&mut buf, end, false);
        }
        buf.extend_from_slice(reason);
        for (c, a, b) in pairs {
            if c.is_none() {
                buf.extend_from_slice(a);
            }
            buf.extend_from_slice(b);
        }
        let at = buf.len();
        buf.extend_from_slice(body);
        let buf = Bytes::from(buf);
        let body = if body.is_empty() { Bytes::new() } else { buf.slice(at..) };
        (ObjHeaders { buf }, body)
    }

    /// The head packed in `buf` (from [`ObjHeaders::with_body`], maybe
    /// with the body cut off).
    pub fn from_bytes(buf: Bytes) -> ObjHeaders {
        ObjHeaders { buf }
    }

    pub fn into_bytes(self) -> Bytes {
        self.buf
    }

    /// The body packed after the head (empty if none).
    pub fn packed_body(&self) -> &[u8] {
        &self.buf[self.head_len()..]
    }

    /// The head's own length (where a packed body starts).
    pub fn head_len(&self) -> usize {
        Layout(&self.buf).end()
    }

    /// The reason phrase.
    pub fn reason(&self) -> Bytes {
        let (a, b) = reason_span(&self.buf);
        self.buf.slice(a..b)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        let l = Layout(&self.buf);
        l.spans().map(move |(name, (c, d))| (l.name(name), &l.0[c..d]))
    }

    /// First value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<Bytes> {
        find(&self.buf, name).map(|(a, b)| self.buf.slice(a..b))
    }

    /// As an editable list (slices of the same buffer, no copies), with
    /// room for the four headers a delivery adds (X-Varnish, Age, Via,
    /// Accept-Ranges) without growing it.
    pub fn to_headers(&self) -> crate::vcl::model::Headers {
        let l = Layout(&self.buf);
        let mut list = Vec::with_capacity(l.count() + 4);
        list.extend(l.spans().map(|(name, (c, d))| {
            let name = match name {
                Name::Common(n) => Bytes::from_static(n.as_bytes()),
                Name::At(a, b) => self.buf.slice(a..b),
            };
            (name, self.buf.slice(c..d))
        }));
        crate::vcl::model::Headers(list)
    }

    /// Bytes held (with a body packed after the head).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }
}

/// Where the first value of header `name` (case-insensitive) is in the
/// packed head `buf`.
pub fn find(buf: &[u8], name: &str) -> Option<(usize, usize)> {
    let l = Layout(buf);
    l.spans().find(|(n, _)| l.name(*n).eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
}

/// Can every accessor read `buf` as a packed head (every span inside it,
/// in order)? A head read back from disk is checked so before use.
pub fn valid(buf: &[u8]) -> bool {
    if buf.len() < 4 {
        return false;
    }
    let l = Layout(buf);
    let n = l.count();
    if 4 + 2 * l.width() * n > buf.len() || l.reason().1 > buf.len() {
        return false;
    }
    let d = l.data();
    let mut prev = 0;
    for i in 0..n {
        let ((name, common), value_end) = (l.entry(2 * i), l.entry(2 * i + 1).0);
        let name_end = if common { prev } else { name };
        if (common && name >= NAMES.len()) || name_end < prev || value_end < name_end || d + value_end > buf.len() {
            return false;
        }
        prev = value_end;
    }
    true
}

/// Where the reason phrase is in the packed head `buf`.
pub fn reason_span(buf: &[u8]) -> (usize, usize) {
    Layout(buf).reason()
}

/// Reading a packed head.
#[derive(Clone, Copy)]
struct Layout<'a>(&'a [u8]);

impl<'a> Layout<'a> {
    fn u16_at(&self, i: usize) -> usize {
        u16::from_le_bytes([self.0[i], self.0[i + 1]]) as usize
    }

    fn count(&self) -> usize {
        self.u16_at(0) & MAX_HEADERS
    }

    fn width(&self) -> usize {
        if self.u16_at(0) & WIDE as usize != 0 {
            4
        } else {
            2
        }
    }

    /// Pair entry `j` (0 the first name): its offset and whether it is an
    /// index into [`NAMES`].
    fn entry(&self, j: usize) -> (usize, bool) {
        self.entry_w(j, self.width())
    }

    /// [`Layout::entry`] with the pair width already read.
    fn entry_w(&self, j: usize, width: usize) -> (usize, bool) {
        let at = 4 + j * width;
        if width == 4 {
            let x = u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes"));
            ((x & 0x7fff_ffff) as usize, x & 0x8000_0000 != 0)
        } else {
            let x = self.u16_at(at);
            (x & 0x7fff, x & 0x8000 != 0)
        }
    }

    /// Where the reason phrase is (after the pairs).
    fn reason(&self) -> (usize, usize) {
        let at = 4 + 2 * self.width() * self.count();
        (at, at + self.u16_at(2))
    }

    /// Where the names and values start (after the reason).
    fn data(&self) -> usize {
        self.reason().1
    }

    /// Where the head ends.
    fn end(&self) -> usize {
        match self.count() {
            0 => self.data(),
            n => self.data() + self.entry(2 * n - 1).0,
        }
    }

    /// Every header in order: its name as a common name or a span of the
    /// buffer, and its value's span. One pass: the width, where the data
    /// starts and the last value's end are read once, not again for each
    /// header (a hit reads them all).
    fn spans(self) -> impl Iterator<Item = (Name, (usize, usize))> + Clone + 'a {
        let (d, w) = (self.data(), self.width());
        let mut prev = 0;
        (0..self.count()).map(move |i| {
            let (name, value_end) = (self.entry_w(2 * i, w), self.entry_w(2 * i + 1, w).0);
            let start = std::mem::replace(&mut prev, value_end);
            match name {
                (idx, true) => (Name::Common(NAMES.get(idx).copied().unwrap_or("")), (d + start, d + value_end)),
                (end, false) => (Name::At(d + start, d + end), (d + end, d + value_end)),
            }
        })
    }

    fn name(&self, name: Name) -> &'a [u8] {
        match name {
            Name::Common(n) => n.as_bytes(),
            Name::At(a, b) => &self.0[a..b],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_heads_keep_reason_and_headers_in_order() {
        let pairs = [
            (&b"Content-Type"[..], &b"text/plain"[..]),
            (&b"X-Empty"[..], &b""[..]),
            (&b"x-b"[..], &b"2"[..]),
            (&b"X-B"[..], &b"3"[..]),
            (&b"date"[..], &b"Tue, 01 Dec 2026 19:28:32 GMT"[..]),
            (&b"CONTENT-TYPE"[..], &b"x"[..]),
        ];
        let h = ObjHeaders::from_pairs(b"Not Quite OK", pairs.iter().copied());
        assert_eq!(&h.reason()[..], b"Not Quite OK");
        assert_eq!(h.iter().collect::<Vec<_>>(), pairs.to_vec());
        assert_eq!(h.get("x-b").as_deref(), Some(&b"2"[..]));
        assert_eq!(h.get("x-empty").as_deref(), Some(&b""[..]));
        assert_eq!(h.get("content-type").as_deref(), Some(&b"text/plain"[..]));
        assert_eq!(h.get("missing"), None);
        let list = h.to_headers().0;
        assert_eq!(list.len(), 6);
        assert_eq!(&list[0].0[..], b"Content-Type");
        assert_eq!(&list[5].0[..], b"CONTENT-TYPE");
        // Common names take no room: 4 + 6 × 4 + reason + data.
        assert_eq!(h.bytes(), 4 + 24 + 12 + (10 + 7 + 3 + 1 + 3 + 1 + 29 + 12 + 1));
        let empty = ObjHeaders::default();
        assert_eq!(empty.iter().count(), 0);
        assert!(empty.reason().is_empty());
        assert_eq!(empty.bytes(), 4);
    }

    #[test]
    fn large_heads_use_wide_offsets() {
        let big = vec![b'v'; 40_000];
        let pairs = [(&b"X-Big"[..], &big[..]), (&b"etag"[..], &b"\"1\""[..]), (&b"X-After"[..], &b"after"[..])];
        let (h, body) = ObjHeaders::with_body(b"OK", pairs.iter().copied(), b"body");
        assert_eq!(h.head_len(), h.bytes() - 4);
        assert_eq!(h.iter().collect::<Vec<_>>(), pairs.to_vec());
        assert_eq!(h.get("x-after").as_deref(), Some(&b"after"[..]));
        assert_eq!(&body[..], b"body");
        assert_eq!(h.bytes(), 4 + 24 + 2 + 5 + 40_000 + 3 + 7 + 5 + 4);
    }

    #[test]
    fn heads_are_checked_before_they_are_read() {
        let pairs = [(&b"Content-Type"[..], &b"text/plain"[..]), (&b"X-A"[..], &b"1"[..])];
        let h = ObjHeaders::from_pairs(b"OK", pairs.iter().copied()).into_bytes();
        assert!(valid(&h) && valid(&ObjHeaders::default().into_bytes()));
        assert!(!valid(b"") && !valid(&h[..h.len() - 1]));
        for i in 0..h.len() {
            for bit in [1u8, 0x40, 0x80] {
                let mut d = h.to_vec();
                d[i] ^= bit;
                if valid(&d) {
                    let o = ObjHeaders::from_bytes(Bytes::from(d));
                    let _ = (o.reason(), o.get("x-a"), o.to_headers(), o.head_len());
                }
            }
        }
    }

    #[test]
    fn names_fit_the_index() {
        assert!(NAMES.len() < 0x7fff);
        let mut seen = std::collections::HashSet::new();
        assert!(NAMES.iter().all(|n| seen.insert(n)), "a name listed twice");
    }
}
