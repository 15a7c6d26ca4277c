//! The generator: `threads` OS threads, each a single-threaded tokio
//! runtime driving its share of the connections with our own minimal
//! HTTP/1.1 client (one prebuilt request per URL, httparse for the head,
//! bodies skipped by Content-Length, chunks or close), so the generator
//! costs little more than the syscalls — the same shape as wrk.
//!
//! Closed loop: each connection sends its next request when the previous
//! answer is complete; latency runs from the send. Open loop (`-r`,
//! `--stages`): the requests of a schedule are due at fixed times; any
//! free connection of the thread takes the next one, waits for its time
//! and sends it; latency runs from the time it was due, not from when it
//! could leave (coordinated-omission correction, as wrk2), so a stalled
//! server shows in the percentiles instead of silently slowing the load.
//! How late requests left is recorded (schedule lag), and requests still
//! unsent when the run ends are counted as dropped.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod h2;

use crate::plan::{Pick, Plan, Schedule, Target};
use crate::stats::{ErrorKind, Recorder};

/// What the workers share with whoever watches the run.
#[derive(Default)]
pub struct Live {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    /// Set to end the run early (Ctrl-C, a coordinator gone).
    pub stop: AtomicBool,
}

/// A second's view of the run, for progress lines and agents' reports.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    pub elapsed: f64,
    pub requests: u64,
    pub errors: u64,
    /// Requests per second over the last tick.
    pub rps: f64,
}

/// Run `plan`, starting at `start` (or now), calling `on_tick` about once
/// a second until the workers are done. Returns everything measured, with
/// the series cut to the run's length.
pub fn run(plan: &Plan, start: Option<Instant>, live: Arc<Live>, on_tick: &mut dyn FnMut(Tick)) -> Result<Recorder> {
    let target = Arc::new(plan.target()?);
    let start = start.unwrap_or_else(|| Instant::now() + Duration::from_millis(20));
    let budget = Arc::new(AtomicU64::new(plan.count.unwrap_or(u64::MAX)));
    let threads = plan.threads.min(plan.conns).max(1);
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let conns = plan.conns / threads + usize::from(t < plan.conns % threads);
        let first_conn = (0..t).map(|u| plan.conns / threads + usize::from(u < plan.conns % threads)).sum::<usize>();
        let mut share = plan.clone();
        share.rate = plan.rate.map(|r| r * conns as f64 / plan.conns as f64);
        share.stages =
            plan.stages.iter().map(|s| crate::plan::Stage { secs: s.secs, rate: s.rate * conns as f64 / plan.conns as f64 }).collect();
        let (target, live, budget) = (target.clone(), live.clone(), budget.clone());
        let h = std::thread::Builder::new().name(format!("bench-{t}")).spawn(move || -> Result<Recorder> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            Ok(rt.block_on(worker(share, target, live, budget, start, first_conn, conns)))
        })?;
        handles.push(h);
    }
    // Watch: a tick a second until every worker is done.
    let mut last = (0u64, start);
    let mut next = start + Duration::from_secs(1);
    while handles.iter().any(|h| !h.is_finished()) {
        let now = Instant::now();
        if now >= next {
            let requests = live.requests.load(Ordering::Relaxed);
            let dt = now.saturating_duration_since(last.1).as_secs_f64().max(1e-9);
            on_tick(Tick {
                elapsed: now.saturating_duration_since(start).as_secs_f64(),
                requests,
                errors: live.errors.load(Ordering::Relaxed),
                rps: (requests - last.0) as f64 / dt,
            });
            last = (requests, now);
            next += Duration::from_secs(1);
        }
        std::thread::sleep(Duration::from_millis(10).min(next.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)));
    }
    let mut total = Recorder::default();
    for h in handles {
        let r = h.join().map_err(|_| anyhow!("a generator thread panicked"))??;
        total.merge(&r);
    }
    // One row per second of the run: what finished after the end (in
    // flight when it ended) goes in the last one.
    let elapsed = Instant::now().saturating_duration_since(start).as_secs_f64();
    let len = match plan.length_s() {
        Some(l) if !live.stop.load(Ordering::Relaxed) => l,
        Some(l) => l.min(elapsed),
        None => elapsed,
    };
    let rows = (len.ceil() as usize).max(1);
    total.fold_after(rows - 1);
    Ok(total)
}

/// Per-thread state the connection tasks share.
struct Ctx {
    plan: Plan,
    target: Arc<Target>,
    live: Arc<Live>,
    budget: Arc<AtomicU64>,
    start: Instant,
    deadline: Option<Instant>,
    schedule: Option<Schedule>,
    /// Open loop: the next slot of this thread's schedule.
    next_slot: Cell<u64>,
    zipf: Option<Vec<f64>>,
    rec: RefCell<Recorder>,
}

impl Ctx {
    fn second(&self, at: Instant) -> usize {
        at.saturating_duration_since(self.start).as_secs() as usize
    }
    fn stopped(&self) -> bool {
        self.live.stop.load(Ordering::Relaxed)
    }
    /// Closed loop: may another request go?
    fn take(&self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) || self.stopped() {
            return false;
        }
        self.budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1)).is_ok()
    }
}

async fn worker(
    plan: Plan,
    target: Arc<Target>,
    live: Arc<Live>,
    budget: Arc<AtomicU64>,
    start: Instant,
    first: usize,
    conns: usize,
) -> Recorder {
    let zipf = match plan.pick {
        Pick::Zipf(s) => Some(zipf_cdf(target.requests.len(), s)),
        _ => None,
    };
    let ctx = Rc::new(Ctx {
        deadline: plan.length_s().map(|l| start + Duration::from_secs_f64(l)),
        schedule: plan.open_loop().then(|| Schedule::new(&plan)),
        plan,
        target,
        live,
        budget,
        start,
        next_slot: Cell::new(0),
        zipf,
        rec: RefCell::new(Recorder::default()),
    });
    tokio::time::sleep_until(start.into()).await;
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::with_capacity(conns);
    for i in 0..conns {
        let ctx = ctx.clone();
        if ctx.plan.h2 {
            tasks.push(local.spawn_local(h2::connection(ctx, first + i)));
        } else {
            tasks.push(local.spawn_local(connection(ctx, first + i)));
        }
    }
    local
        .run_until(async {
            for t in tasks {
                let _ = t.await;
            }
        })
        .await;
    let mut rec = ctx.rec.borrow().clone();
    if let Some(s) = &ctx.schedule {
        let end = ctx.plan.length_s().unwrap_or(0.0).min(Instant::now().saturating_duration_since(start).as_secs_f64());
        let due = s.due_by(end).floor() as u64;
        rec.dropped = due.saturating_sub(ctx.next_slot.get().min(due));
    }
    rec
}

/// A small fast PRNG (xorshift64*), one per connection.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Cumulative probabilities of ranks 1..=n under Zipf(s).
pub fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let w: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = w.iter().sum();
    let mut acc = 0.0;
    w.iter()
        .map(|x| {
            acc += x / total;
            acc
        })
        .collect()
}

/// When the next request is due, and the time its latency runs from;
/// None when the run is over. In the closed loop it is now. With a rate,
/// it is its slot's time: a request that had to wait for a free
/// connection runs from its due time (the server's slowness delayed it);
/// one whose connection was free early and slept until the due time runs
/// from when it left, so the timer's millisecond grain is not charged to
/// the server.
async fn next_due(ctx: &Ctx) -> Option<Instant> {
    let Some(s) = &ctx.schedule else {
        return ctx.take().then(Instant::now);
    };
    if ctx.stopped() {
        return None;
    }
    let i = ctx.next_slot.get();
    let due = ctx.start + Duration::from_secs_f64(s.time_of(i)?);
    if ctx.deadline.is_some_and(|d| due > d) {
        return None;
    }
    ctx.next_slot.set(i + 1);
    let slept = due > Instant::now();
    if slept {
        tokio::time::sleep_until(due.into()).await;
    }
    let now = Instant::now();
    ctx.rec.borrow_mut().lag(now.saturating_duration_since(due).as_micros() as u64);
    Some(if slept { now } else { due })
}

/// A response the plan expects (status, size), or the error it counts as.
fn expected(plan: &Plan, r: Resp) -> Result<Resp, ErrorKind> {
    let status_ok = match plan.expect_status {
        Some(s) => r.status == s,
        None => (200..400).contains(&r.status),
    };
    if !status_ok {
        Err(ErrorKind::Status)
    } else if plan.expect_size.is_some_and(|s| s != r.body) {
        Err(ErrorKind::ShortBody)
    } else {
        Ok(r)
    }
}

/// Which URL each request of one connection (or HTTP/2 stream loop)
/// takes: Zipf, random, or in turn from a start spread over the
/// connections.
struct Picker {
    rng: Rng,
    seq: usize,
}

impl Picker {
    /// For loop `index` of `of`.
    fn new(ctx: &Ctx, index: usize, of: usize) -> Picker {
        let n_urls = ctx.target.requests.len();
        Picker { rng: Rng::new(ctx.plan.seed ^ (index as u64 + 1)), seq: index * n_urls / of.max(1) }
    }

    fn next(&mut self, ctx: &Ctx) -> usize {
        let n_urls = ctx.target.requests.len();
        match (&ctx.zipf, ctx.plan.pick) {
            (Some(cdf), _) => {
                let u = self.rng.unit();
                cdf.partition_point(|p| *p < u).min(n_urls - 1)
            }
            (None, Pick::Random) => (self.rng.next() % n_urls as u64) as usize,
            _ => {
                self.seq = (self.seq + 1) % n_urls;
                self.seq
            }
        }
    }
}

/// Record a request's outcome: its latency from `base`, or its error.
fn record(ctx: &Ctx, base: Instant, done: Instant, outcome: Result<Resp, ErrorKind>) {
    let sec = ctx.second(done);
    match outcome {
        Ok(r) => {
            let lat = done.saturating_duration_since(base).as_micros() as u64;
            let ttfb = r.first_byte.saturating_duration_since(base).as_micros() as u64;
            ctx.rec.borrow_mut().ok(sec, lat, ttfb, r.bytes, r.hit);
            ctx.live.requests.fetch_add(1, Ordering::Relaxed);
        }
        Err(k) => {
            ctx.rec.borrow_mut().error(sec, k);
            ctx.live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn connection(ctx: Rc<Ctx>, index: usize) {
    let mut pick = Picker::new(&ctx, index, ctx.plan.conns);
    let mut conn: Option<Conn> = None;
    let mut used = 0u64;
    let timeout = Duration::from_secs_f64(ctx.plan.timeout_s.max(0.001));
    loop {
        let Some(base) = next_due(&ctx).await else { break };
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

/// A connection to the target, plain or TLS (its handshake done).
enum BenchStream {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Connect (and shake hands for https): a failure counts as a connect error.
async fn connect(t: &crate::plan::Target) -> std::io::Result<BenchStream> {
    let s = TcpStream::connect(t.addr).await?;
    let _ = s.set_nodelay(true);
    match &t.tls {
        None => Ok(BenchStream::Tcp(s)),
        Some(tls) => {
            let c = tokio_rustls::TlsConnector::from(tls.config.clone());
            Ok(BenchStream::Tls(Box::new(c.connect(tls.name.clone(), s).await?)))
        }
    }
}

impl tokio::io::AsyncRead for BenchStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for BenchStream {
    fn poll_write(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            BenchStream::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            BenchStream::Tls(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
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

/// What a response was.
struct Resp {
    status: u16,
    /// Body bytes, and all bytes read (head + body).
    body: u64,
    bytes: u64,
    hit: bool,
    close: bool,
    first_byte: Instant,
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
fn header_facts<'a>(headers: impl Iterator<Item = (&'a str, &'a [u8])>) -> (Option<u64>, bool, bool, bool) {
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

    #[test]
    fn zipf_is_skewed_and_sums_to_one() {
        let cdf = zipf_cdf(1000, 1.0);
        assert!((cdf[999] - 1.0).abs() < 1e-9);
        // With s = 1 the top 10 of 1000 take about 39% of the requests.
        assert!((0.35..0.43).contains(&cdf[9]), "{}", cdf[9]);
        let mut rng = Rng::new(3);
        let n = 100_000;
        let top = (0..n)
            .filter(|_| {
                let u = rng.unit();
                cdf.partition_point(|p| *p < u) < 10
            })
            .count();
        assert!((top as f64 / n as f64 - cdf[9]).abs() < 0.01);
    }

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
