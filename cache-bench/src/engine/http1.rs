//! The HTTP/1.1 client: one prebuilt request per URL written, the head
//! parsed with httparse, the body skipped by Content-Length, chunks or
//! close; keep-alive, and a new connection when the server closes or a
//! request fails.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::conn::{connect, BenchStream};
use super::ctx::{expected, next_due, record, Ctx, Pace, Picker, Resp};
use crate::stats::ErrorKind;

pub(super) async fn connection(ctx: Rc<Ctx>, index: usize) {
    let mut pick = Picker::new(&ctx, index, ctx.plan.conns);
    let mut conn: Option<Conn> = None;
    let mut used = 0u64;
    let timeout = Duration::from_secs_f64(ctx.plan.timeout_s.max(0.001));
    let mut pace = Pace::new(&ctx);
    loop {
        let Some(base) = next_due(&ctx, &mut pace).await else { break };
        let url = pick.next(&ctx);
        if conn.is_none() {
            match tokio::time::timeout(timeout, connect(&ctx.target)).await {
                Ok(Ok(s)) => {
                    conn = Some(Conn::new(s));
                    used = 0;
                }
                _ => {
                    let at = Instant::now();
                    ctx.rec.borrow_mut().error(ctx.second(at), ErrorKind::Connect);
                    ctx.live.errors.fetch_add(1, Ordering::Relaxed);
                    // Do not spin on a refusing target.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let result = tokio::time::timeout(timeout, c.exchange(&ctx.target.requests[url], ctx.target.head)).await;
        let done = Instant::now();
        used += 1;
        let outcome = match result {
            Err(_) => Err(ErrorKind::Timeout),
            Ok(Err(k)) => Err(k),
            Ok(Ok(r)) => {
                if r.close || ctx.plan.requests_per_conn.is_some_and(|n| used >= n) {
                    conn = None;
                }
                expected(&ctx.plan, r)
            }
        };
        if matches!(outcome, Err(ErrorKind::Timeout | ErrorKind::Io | ErrorKind::ShortBody)) {
            conn = None;
        }
        record(&ctx, base, done, outcome);
    }
}

/// A client connection and its read buffer.
struct Conn {
    s: BenchStream,
    buf: Vec<u8>,
    /// Bytes of `buf` holding unread data: buf[at..len].
    at: usize,
    len: usize,
}

const MAX_HEAD: usize = 64 * 1024;

impl Conn {
    fn new(s: BenchStream) -> Conn {
        Conn { s, buf: vec![0; 16 * 1024], at: 0, len: 0 }
    }

    /// Read more into the buffer (compacting it first); Io on EOF.
    async fn fill(&mut self) -> Result<usize, ErrorKind> {
        if self.at > 0 {
            self.buf.copy_within(self.at..self.len, 0);
            self.len -= self.at;
            self.at = 0;
        }
        if self.len == self.buf.len() {
            if self.buf.len() >= MAX_HEAD {
                return Err(ErrorKind::Io);
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        match self.s.read(&mut self.buf[self.len..]).await {
            Ok(0) | Err(_) => Err(ErrorKind::Io),
            Ok(n) => {
                self.len += n;
                Ok(n)
            }
        }
    }

    /// Send `req`, read the whole response.
    async fn exchange(&mut self, req: &[u8], head_only: bool) -> Result<Resp, ErrorKind> {
        self.s.write_all(req).await.map_err(|_| ErrorKind::Io)?;
        // TLS may hold the last record after a partial write (a no-op on TCP).
        self.s.flush().await.map_err(|_| ErrorKind::Io)?;
        let mut read = 0u64;
        let (status, framing, hit, close, first_byte) = self.read_head(head_only, &mut read).await?;
        let body = match framing {
            Framing::None => 0,
            Framing::Length(n) => self.read_length(n, &mut read).await?,
            Framing::Chunked => self.read_chunked(&mut read).await?,
            Framing::Close => self.read_to_close(&mut read).await?,
        };
        if self.at == self.len {
            self.at = 0;
            self.len = 0;
        }
        Ok(Resp { status, body, bytes: read, hit, close: close || framing == Framing::Close, first_byte })
    }

    /// The response head (interim 1xx responses skipped): status, framing,
    /// whether it was a hit, whether the server closes, and when its first
    /// byte came.
    async fn read_head(&mut self, head_only: bool, read: &mut u64) -> Result<(u16, Framing, bool, bool, Instant), ErrorKind> {
        let mut first_byte = None;
        loop {
            if self.len > self.at {
                let mut headers = [httparse::EMPTY_HEADER; 64];
                let mut r = httparse::Response::new(&mut headers);
                match r.parse(&self.buf[self.at..self.len]) {
                    Ok(httparse::Status::Complete(n)) => {
                        let status = r.code.unwrap_or(0);
                        let (framing, hit, close) = head_facts(&r, status, head_only);
                        self.at += n;
                        if (100..200).contains(&status) {
                            // An interim response: skip it, wait for the real one.
                            *read += n as u64;
                            continue;
                        }
                        return Ok((status, framing, hit, close, first_byte.unwrap_or_else(Instant::now)));
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(_) => return Err(ErrorKind::Io),
                }
            }
            let n = self.fill().await?;
            first_byte.get_or_insert_with(Instant::now);
            *read += n as u64;
        }
    }

    /// A body of `left` bytes.
    async fn read_length(&mut self, mut left: u64, read: &mut u64) -> Result<u64, ErrorKind> {
        let mut body = 0u64;
        loop {
            let have = (self.len - self.at) as u64;
            let take = have.min(left);
            self.at += take as usize;
            body += take;
            left -= take;
            if left == 0 {
                return Ok(body);
            }
            self.at = 0;
            self.len = 0;
            match self.s.read(&mut self.buf[..]).await {
                Ok(0) | Err(_) => return Err(ErrorKind::ShortBody),
                Ok(n) => {
                    self.len = n;
                    *read += n as u64;
                }
            }
        }
    }

    /// A chunked body (trailers skipped); its payload length.
    async fn read_chunked(&mut self, read: &mut u64) -> Result<u64, ErrorKind> {
        let mut body = 0u64;
        loop {
            // A size line.
            let line_end = loop {
                if let Some(p) = self.buf[self.at..self.len].windows(2).position(|w| w == b"\r\n") {
                    break self.at + p;
                }
                *read += self.fill().await.map_err(|_| ErrorKind::ShortBody)? as u64;
            };
            let line = std::str::from_utf8(&self.buf[self.at..line_end]).map_err(|_| ErrorKind::Io)?;
            let size = u64::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16).map_err(|_| ErrorKind::Io)?;
            self.at = line_end + 2;
            if size == 0 {
                // Trailers up to an empty line.
                loop {
                    if let Some(p) = self.buf[self.at..self.len].windows(2).position(|w| w == b"\r\n") {
                        self.at += p + 2;
                        if p == 0 {
                            return Ok(body);
                        }
                        continue;
                    }
                    *read += self.fill().await.map_err(|_| ErrorKind::ShortBody)? as u64;
                }
            }
            // The data and its CRLF.
            let mut left = size.saturating_add(2);
            loop {
                let take = ((self.len - self.at) as u64).min(left);
                self.at += take as usize;
                left -= take;
                if left == 0 {
                    break;
                }
                *read += self.fill().await.map_err(|_| ErrorKind::ShortBody)? as u64;
            }
            body = body.saturating_add(size);
        }
    }

    /// A body that ends when the server closes.
    async fn read_to_close(&mut self, read: &mut u64) -> Result<u64, ErrorKind> {
        let mut body = 0u64;
        loop {
            body += (self.len - self.at) as u64;
            self.at = 0;
            self.len = 0;
            match self.s.read(&mut self.buf[..]).await {
                Ok(0) => return Ok(body),
                Err(_) => return Err(ErrorKind::Io),
                Ok(n) => {
                    self.len = n;
                    *read += n as u64;
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    Close,
}

/// How the body is framed, whether a cache served it, and whether the
/// server closes the connection. A hit: `X-Cache` saying HIT, else
/// `X-Varnish` with two ids, else `Age` above 0; anything else is a miss.
fn head_facts(r: &httparse::Response<'_, '_>, status: u16, head_only: bool) -> (Framing, bool, bool) {
    let (length, chunked, mut close, hit) = header_facts(r.headers.iter().map(|h| (h.name, h.value)));
    if r.version == Some(0) {
        close = true;
    }
    let framing = if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        if n == 0 {
            Framing::None
        } else {
            Framing::Length(n)
        }
    } else {
        Framing::Close
    };
    (framing, hit, close)
}

/// From a response's fields: Content-Length, chunked, Connection: close,
/// and whether a cache served it.
pub(super) fn header_facts<'a>(headers: impl Iterator<Item = (&'a str, &'a [u8])>) -> (Option<u64>, bool, bool, bool) {
    let (mut length, mut chunked, mut close, mut xcache, mut xvarnish, mut age) = (None, false, false, None, None, None);
    for (name, v) in headers {
        if name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(v).ok().and_then(|s| s.trim().parse::<u64>().ok());
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = v.windows(7).any(|w| w.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            close = v.windows(5).any(|w| w.eq_ignore_ascii_case(b"close"));
        } else if name.eq_ignore_ascii_case("x-cache") {
            xcache = Some(v.windows(3).any(|w| w.eq_ignore_ascii_case(b"hit")));
        } else if name.eq_ignore_ascii_case("x-varnish") {
            xvarnish = Some(v.split(|b| *b == b' ').filter(|p| !p.is_empty()).count() >= 2);
        } else if name.eq_ignore_ascii_case("age") {
            age = std::str::from_utf8(v).ok().and_then(|s| s.trim().parse::<u64>().ok());
        }
    }
    let hit = xcache.or(xvarnish).unwrap_or(age.is_some_and(|a| a > 0));
    (length, chunked, close, hit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::conn::BenchStream;
    use tokio::net::TcpStream;

    /// One connection answering `replies` in turn, each after reading a
    /// request head; closes after the last.
    fn canned(replies: Vec<&'static [u8]>) -> std::net::SocketAddr {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            for r in replies {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                // In pieces, to exercise partial reads.
                for piece in r.chunks(7) {
                    s.write_all(piece).unwrap();
                    s.flush().unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        });
        addr
    }

    #[test]
    fn the_client_reads_every_framing() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        rt.block_on(async {
            let addr = canned(vec![
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Cache: HIT\r\n\r\nhello",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
                b"HTTP/1.1 200 OK\r\n\r\nuntil the end",
            ]);
            let mut c = Conn::new(BenchStream::Tcp(TcpStream::connect(addr).await.unwrap()));
            let r = c.exchange(req, false).await.unwrap();
            assert_eq!((r.status, r.body, r.hit, r.close), (200, 5, true, false));
            let r = c.exchange(req, false).await.unwrap();
            assert_eq!((r.status, r.body), (200, 11));
            let r = c.exchange(req, false).await.unwrap();
            assert_eq!((r.status, r.body), (404, 0));
            let r = c.exchange(req, false).await.unwrap();
            assert_eq!((r.status, r.body, r.close), (200, 13, true));
            // Cut short, and not HTTP at all.
            for (reply, want) in [
                (&b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"[..], ErrorKind::ShortBody),
                (&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab"[..], ErrorKind::ShortBody),
                (&b"SSH-2.0-OpenSSH\r\n\r\n"[..], ErrorKind::Io),
            ] {
                let addr = canned(vec![reply]);
                let mut c = Conn::new(BenchStream::Tcp(TcpStream::connect(addr).await.unwrap()));
                assert_eq!(c.exchange(req, false).await.err(), Some(want));
            }
        });
    }

    #[test]
    fn hits_and_framing_from_the_head() {
        let facts = |raw: &str| {
            let mut h = [httparse::EMPTY_HEADER; 16];
            let mut r = httparse::Response::new(&mut h);
            r.parse(raw.as_bytes()).unwrap();
            let status = r.code.unwrap();
            head_facts(&r, status, false)
        };
        let (f, hit, close) = facts("HTTP/1.1 200 OK\r\nX-Varnish: 5 3\r\nContent-Length: 10\r\n\r\n");
        assert!(f == Framing::Length(10) && hit && !close);
        assert!(!facts("HTTP/1.1 200 OK\r\nX-Varnish: 5\r\nAge: 0\r\nContent-Length: 1\r\n\r\n").1);
        assert!(facts("HTTP/1.1 200 OK\r\nAge: 12\r\nContent-Length: 1\r\n\r\n").1);
        assert!(!facts("HTTP/1.1 200 OK\r\nX-Cache: MISS\r\nAge: 12\r\nContent-Length: 1\r\n\r\n").1, "X-Cache decides");
        assert!(facts("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").0 == Framing::Chunked);
        let (f, _, close) = facts("HTTP/1.0 200 OK\r\n\r\n");
        assert!(f == Framing::Close && close);
        assert!(facts("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n").0 == Framing::None);
    }
}
