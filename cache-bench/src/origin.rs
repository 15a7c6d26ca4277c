//! The built-in test origin: predictable bodies, latency, caching headers and
//! a request counter, so demos and tests need no other server.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LAST_MODIFIED};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Largest body served, so a typo cannot ask for terabytes.
pub const MAX_SIZE: u64 = 1 << 30;

/// Counters the origin keeps (served at `/__stats`).
pub struct Stats {
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
    /// `/__pause?ms=N`: every request waits until this time (ms since
    /// `epoch`), as a whole server stalls in a GC pause or a disk hiccup.
    paused_until: AtomicU64,
    epoch: std::time::Instant,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats { requests: AtomicU64::new(0), bytes: AtomicU64::new(0), paused_until: AtomicU64::new(0), epoch: std::time::Instant::now() }
    }
}

/// A body of `left` bytes of a repeating pattern, sent in `chunk`-sized
/// frames; optionally fails after `abort_after` bytes; optionally without a
/// length (so hyper sends it chunked).
struct Pattern {
    left: u64,
    sent: u64,
    chunk: usize,
    abort_after: Option<u64>,
    /// Before failing, wait a little so hyper flushes what was sent.
    abort_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Pause this long after the first frame (to show streaming).
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    sized: bool,
}

const PATTERN: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\n";

impl Body for Pattern {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.abort_after.is_some_and(|a| self.sent >= a) {
            let timer = self.abort_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(50))));
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            return Poll::Ready(Some(Err(std::io::Error::other("aborted as asked"))));
        }
        if self.left == 0 {
            return Poll::Ready(None);
        }
        if self.sent > 0 {
            if let Some(st) = self.stall.as_mut() {
                if st.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.stall = None;
            }
        }
        let mut n = (self.chunk as u64).min(self.left);
        if let Some(a) = self.abort_after {
            n = n.min(a - self.sent);
        }
        let start = (self.sent % PATTERN.len() as u64) as usize;
        let data: Vec<u8> = PATTERN.iter().cycle().skip(start).take(n as usize).copied().collect();
        self.left -= n;
        self.sent += n;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(data)))))
    }
    fn is_end_stream(&self) -> bool {
        self.left == 0 && self.abort_after.is_none()
    }
    fn size_hint(&self) -> SizeHint {
        if self.sized {
            SizeHint::with_exact(self.left)
        } else {
            SizeHint::default()
        }
    }
}

type OriginBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

fn text(status: StatusCode, s: String) -> Response<OriginBody> {
    let mut r = Response::new(Full::new(Bytes::from(s)).map_err(|e: Infallible| match e {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn query(req: &Request<()>, key: &str) -> Option<String> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| v.replace("%20", " ").replace("%2C", ","))
    })
}

fn num(req: &Request<()>, key: &str) -> Result<Option<u64>, String> {
    match query(req, key) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| format!("{key}={v} is not a number\n")),
    }
}

/// What the query and path ask of a response.
struct Params {
    delay: Option<u64>,
    max_age: Option<u64>,
    status: Option<u64>,
    abort_after: Option<u64>,
    stall_ms: Option<u64>,
    size: u64,
}

fn params(req: &Request<()>, path: &str) -> Result<Params, String> {
    let n = |k| num(req, k);
    let (delay, max_age, status, abort_after, stall_ms) = (n("delay_ms")?, n("max_age")?, n("status")?, n("abort_after")?, n("stall_ms")?);
    let size = match path.strip_prefix("/size/").or_else(|| path.strip_prefix("/text/")) {
        Some(s) => match s.parse::<u64>() {
            Ok(v) if v <= MAX_SIZE => v,
            _ => return Err(format!("bad size \"{s}\" (0..={MAX_SIZE})\n")),
        },
        None => 0,
    };
    Ok(Params { delay, max_age, status, abort_after, stall_ms, size })
}

async fn handle(req: Request<Incoming>, stats: Arc<Stats>, started: u64) -> Result<Response<OriginBody>, Infallible> {
    let path = req.uri().path().to_string();
    if path == "/__pause" {
        let ms = req.uri().query().and_then(|q| q.strip_prefix("ms=")).and_then(|v| v.parse::<u64>().ok()).unwrap_or(1000).min(600_000);
        let until = stats.epoch.elapsed().as_millis() as u64 + ms;
        stats.paused_until.fetch_max(until, Ordering::Relaxed);
        return Ok(text(StatusCode::OK, format!("pausing every response for {ms} ms\n")));
    }
    let until = stats.paused_until.load(Ordering::Relaxed);
    let now = stats.epoch.elapsed().as_millis() as u64;
    if until > now && path != "/__stats" {
        tokio::time::sleep(Duration::from_millis(until - now)).await;
    }
    // /__stats does not count itself, so tests can poll it.
    let n = if path == "/__stats" { stats.requests.load(Ordering::Relaxed) } else { stats.requests.fetch_add(1, Ordering::Relaxed) + 1 };
    // Read the request body (so the connection stays reusable); its size
    // is reported in X-Request-Body-Bytes.
    let (parts, body) = req.into_parts();
    let received = match body.collect().await {
        Ok(b) => b.to_bytes().len(),
        Err(_) => return Ok(text(StatusCode::BAD_REQUEST, "could not read the request body\n".into())),
    };
    let req = Request::from_parts(parts, ());
    if path == "/__stats" {
        let body = serde_json::json!({ "requests": n, "bytes": stats.bytes.load(Ordering::Relaxed) }).to_string();
        let mut r = text(StatusCode::OK, body + "\n");
        r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return Ok(r);
    }
    let Params { delay, max_age, status, abort_after, stall_ms, size } = match params(&req, &path) {
        Ok(x) => x,
        Err(e) => return Ok(text(StatusCode::BAD_REQUEST, e)),
    };
    if let Some(ms) = delay {
        tokio::time::sleep(Duration::from_millis(ms.min(600_000))).await;
    }
    let etag = format!("\"{size:x}-{started:x}\"");
    let status = match status.map(|s| StatusCode::from_u16(s as u16)) {
        None => StatusCode::OK,
        Some(Ok(s)) => s,
        Some(Err(_)) => return Ok(text(StatusCode::BAD_REQUEST, "bad status\n".into())),
    };
    let mut resp = if req.headers().get(IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == etag.as_bytes()) {
        let mut r = Response::new(http_body_util::Empty::new().map_err(|e: Infallible| match e {}).boxed());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if path.starts_with("/size/") {
        stats.bytes.fetch_add(size, Ordering::Relaxed);
        let body = Pattern {
            left: size,
            sent: 0,
            chunk: 16384,
            abort_after,
            abort_timer: None,
            stall: stall_ms.map(|ms| Box::pin(tokio::time::sleep(Duration::from_millis(ms.min(600_000))))),
            sized: query(&req, "chunked").is_none(),
        };
        let mut r = Response::new(body.boxed());
        *r.status_mut() = status;
        r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        r
    } else if let Some(n) = path.strip_prefix("/esi/") {
        let (r, len) = esi_page(&req, n, max_age, status);
        stats.bytes.fetch_add(len, Ordering::Relaxed);
        r
    } else if path.starts_with("/text/") {
        stats.bytes.fetch_add(size, Ordering::Relaxed);
        text_response(&req, size, status)
    } else if path == "/echo" {
        // The request as it arrived: target, then each header line.
        let mut t = format!("{} {}\n", req.method(), req.uri());
        for (k, v) in req.headers() {
            t.push_str(&format!("{}: {}\n", k, String::from_utf8_lossy(v.as_bytes())));
        }
        text(status, t)
    } else {
        text(status, format!("cachekit test origin: request {n} for {path}\n"))
    };
    decorate(&mut resp, &req, &etag, received, started, max_age);
    Ok(resp)
}

/// `/esi/N`: an HTML page of N ESI includes of /text/<frag_size> (default
/// 100), each its own object; the page's max_age applies to them too.
/// `loop=1` makes every include the page itself, `bad=1` adds markup an
/// ESI parser must report. Returns the response and its body's size.
fn esi_page(req: &Request<()>, n: &str, max_age: Option<u64>, status: StatusCode) -> (Response<OriginBody>, u64) {
    let n: usize = n.parse().unwrap_or(0).min(10_000);
    let frag = num(req, "frag_size").ok().flatten().unwrap_or(100).min(MAX_SIZE);
    let age = max_age.map(|a| format!("&max_age={a}")).unwrap_or_default();
    let mut page = String::from("<html><body>\n");
    let own = format!("/esi/{n}?loop=1{age}").replace('&', "&amp;");
    let looped = query(req, "loop").is_some();
    for i in 0..n {
        let src = if looped { own.clone() } else { format!("/text/{frag}?f={i}{}", age.replace('&', "&amp;")) };
        page.push_str(&format!("<div id=\"f{i}\"><esi:include src=\"{src}\"/></div>\n"));
    }
    if query(req, "bad").is_some() {
        page.push_str("<esi:bogus/><esi:include/><esi:include src=\"/text/1\"><esi:include src=\"https://x/y\"/>");
        page.push_str("<esi:comment text=\"c\"><esi:remove/></esi:include><esi:include src=\"a b\"/>\n");
    }
    page.push_str("</body></html>\n");
    let len = page.len() as u64;
    let mut r = text(status, page);
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    (r, len)
}

/// Words the text bodies are made of: compressible as prose is
/// (gzip makes about a third of it).
const WORDS: &[&str] = &[
    "cache", "object", "request", "the", "backend", "of", "and", "varnish", "header", "a", "response", "to", "hit", "miss", "grace",
    "origin", "in", "ttl", "body", "client", "is", "for", "gzip", "vary", "ban", "purge", "stale", "fresh", "with", "on",
];

/// `n` bytes of text made of [`WORDS`], the same for the same `n`.
pub fn text_body(n: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n as usize);
    let mut x: u32 = 0x2545_f491;
    let mut col = 0;
    while (out.len() as u64) < n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let w = WORDS[(x % WORDS.len() as u32) as usize];
        out.extend_from_slice(w.as_bytes());
        col += w.len() + 1;
        out.push(if col > 72 { b'\n' } else { b' ' });
        if col > 72 {
            col = 0;
        }
    }
    out.truncate(n as usize);
    out
}

/// `/text/N`: N bytes of text. `gzip=1` compresses it for clients that
/// send `Accept-Encoding: gzip` (with `Vary: Accept-Encoding`, as a web
/// server configured for gzip does), `gzip=force` for every client; bad
/// gzip for tests: `gzip=corrupt` (its middle broken), `gzip=truncated`
/// (its last 20 bytes missing), `gzip=junk` (bytes after its end).
fn text_response(req: &Request<()>, size: u64, status: StatusCode) -> Response<OriginBody> {
    use std::io::Write;
    let plain = text_body(size);
    let mode = query(req, "gzip");
    let accepts = req.headers().get(hyper::header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("gzip"));
    let zip = match mode.as_deref() {
        Some("1") => accepts,
        Some("force" | "corrupt" | "truncated" | "junk") => true,
        _ => false,
    };
    let body = if zip {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        let _ = e.write_all(&plain);
        let mut g = e.finish().unwrap_or_default();
        match mode.as_deref() {
            Some("corrupt") if g.len() > 20 => {
                let mid = g.len() / 2;
                g[mid..mid + 4].copy_from_slice(b"\xff\xff\xff\xff");
            }
            Some("truncated") => g.truncate(g.len().saturating_sub(20)),
            Some("junk") => g.extend_from_slice(b"junk after the gzip member"),
            _ => {}
        }
        g
    } else {
        plain
    };
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|e: Infallible| match e {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if zip {
        r.headers_mut().insert(hyper::header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if mode.as_deref() == Some("1") {
        r.headers_mut().insert(hyper::header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    r
}

/// The headers every answer carries (ETag, Last-Modified, the request
/// body's size) and the ones the query asks for (cache_control, max_age,
/// vary, header=NAME:VALUE).
fn decorate(resp: &mut Response<OriginBody>, req: &Request<()>, etag: &str, received: usize, started: u64, max_age: Option<u64>) {
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(ETAG, v);
    }
    h.insert("x-request-body-bytes", HeaderValue::from(received));
    if let Ok(v) = HeaderValue::from_str(&common::httpdate::format(started as f64)) {
        h.insert(LAST_MODIFIED, v);
    }
    let cc = match (query(req, "cache_control"), max_age) {
        (Some(cc), _) => Some(cc),
        (None, Some(a)) => Some(format!("public, max-age={a}")),
        (None, None) => None,
    };
    if let Some(v) = cc.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(CACHE_CONTROL, v);
    }
    if let Some(v) = query(req, "vary").and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(hyper::header::VARY, v);
    }
    // header=NAME:VALUE (repeatable), any response header a test needs.
    let pairs = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.strip_prefix("header="))
        .map(|v| v.replace("%20", " ").replace("%2C", ","));
    for nv in pairs {
        if let Some((n, v)) = nv.split_once(':') {
            if let (Ok(n), Ok(v)) = (hyper::header::HeaderName::from_bytes(n.as_bytes()), HeaderValue::from_str(v)) {
                h.append(n, v);
            }
        }
    }
}

/// Serve on `listener` forever.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    let stats = Arc::new(Stats::default());
    let started = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let stats = stats.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(req, stats.clone(), started));
            let _ = hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

/// Bind, announce the address on stdout, and serve.
pub fn run(addr: &str) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let listener = TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("could not listen on {addr}: {e}"))?;
        let local: SocketAddr = listener.local_addr()?;
        println!("listening on {local}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        serve(listener).await?;
        Ok(())
    })
}
