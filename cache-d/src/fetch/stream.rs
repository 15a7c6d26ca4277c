//! A fetched body on its way into its object: streamed in through the
//! gzip, Brotli and ESI filters and charged to its store, or in transit
//! when it is not kept (at the pace of its slowest reader); an ESI page
//! parsed whole, within bounds; a 304's copy of a large disk body.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use common::counters::C;
use common::log::vsl::{Side as LogSide, Tag};
use tokio::io::AsyncWrite;

use crate::cache::body::{Blocks, Body, ObjBody, Room};
use crate::cache::{Cache, ObjRef};
use crate::error::{Error, Side};
use crate::fetch::txn::{Fetch, Response};
use crate::gzip::fetch::{Coder, Sinks};
use crate::gzip::Coding;
use crate::http1::body::{self as http_body, Transfer};
use crate::http1::head::Framing;
use crate::shared::Shared;

/// The most an object can hold in the store `name` (any store when the
/// name is not one): the largest store's size.
pub(super) fn store_room(sh: &Shared, name: &str) -> usize {
    let stores = sh.cache.stores();
    let budget = match stores.find(name) {
        Some(i) => stores.get(i).budget,
        None => stores.all.iter().filter(|s| !s.is_transient()).map(|s| s.budget).max().unwrap_or(0),
    };
    usize::try_from(budget).unwrap_or(usize::MAX)
}

/// An ESI page whole and plain: parsed once, its instructions set; kept
/// gzip, compressed segment by segment (or whole, with no ESI in it).
/// Returns the pieces to store.
pub(crate) fn esi_page(sh: &Shared, f: &mut Fetch, url: &[u8], k: &Coding, plain: Vec<Bytes>) -> Result<Vec<Bytes>, Error> {
    let total: u64 = plain.iter().map(|b| b.len() as u64).sum();
    if total > crate::esi::MAX_PAGE {
        return Err(Error::new(Side::Backend, format!("ESI page larger than {} bytes", crate::esi::MAX_PAGE)));
    }
    // Gathered whole before anyone reads it, as an unstreamed body: one
    // no store can hold fails the fetch (Varnish: 503).
    let room = store_room(sh, "") as u64;
    if total > room {
        return Err(Error::new(Side::Backend, format!("ESI page larger than the largest store ({room} bytes)")));
    }
    let data = crate::esi::parse_page(
        url,
        sh.params().esi_features(),
        plain.iter().map(|b| &b[..]),
        &sh.seg,
        &mut f.log,
        LogSide::Backend,
        f.vxid,
    );
    if data.as_ref().is_some_and(|d| d.includes() > crate::esi::MAX_PAGE_INCLUDES) {
        return Err(Error::new(Side::Backend, format!("ESI page with more than {} includes", crate::esi::MAX_PAGE_INCLUDES)));
    }
    if !k.gzip {
        if let Some(d) = data {
            let _ = k.esi_data.set(Arc::new(d));
        }
        return Ok(plain);
    }
    let instrs = data.as_ref().map_or_else(|| vec![crate::esi::Instr::Verbatim(total)], |d| d.instrs.clone());
    let (body, gz) = crate::esi::gz::gzip_page(&plain, &instrs, &sh.params().coding());
    sh.seg.add(C::NGzip, 1);
    let bits = crate::gzip::bits::scan(body.iter().map(|b| &b[..])).unwrap_or_default();
    let _ = k.info.set(crate::gzip::GzipInfo { bits, plain_len: total });
    let out: u64 = body.iter().map(|b| b.len() as u64).sum();
    let rec = crate::gzip::record("G F E", total, out, bits);
    f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, rec.as_bytes());
    if data.is_some() {
        let _ = k.esi_data.set(Arc::new(gz));
    }
    Ok(body)
}

/// The log records of filters that failed: Varnish's zlib error record,
/// the FetchError, then the filter's `Gzip` record with what it got to.
pub(super) fn refused(f: &mut Fetch, c: &Coder, e: &crate::gzip::code::CodeError) {
    if let Some(r) = &e.record {
        f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
    }
    f.error(&Error::new(Side::Backend, e.fetch_error.clone()));
    if let Some(r) = c.record() {
        f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
    }
}

/// Where a fetched body goes: the object and its body, and whether its
/// readers take it as it comes (do_stream) or wait for it whole.
pub(super) struct Dest<'a> {
    pub body: &'a Arc<Body>,
    pub oc: &'a ObjRef,
    pub stream: bool,
}

/// Stream the body into the object as it arrives (through the gzip and
/// Brotli filters, if any), charging the cache; a body that fails, ends
/// early or is bad gzip kills the object. True if it came whole.
pub(super) async fn stream_body(sh: &Shared, mut f: Fetch, resp: Response, to: Dest<'_>, mut coder: Option<Coder>, url: &[u8]) -> bool {
    let Dest { body, oc, stream } = to;
    let mut be = resp.conn;
    let backend_close = crate::http1::head::backend_closes(&resp.head);
    let tr = Transfer::from_backend(resp.framing, f.timeout(2));
    let coding = oc.obj.coding();
    let br = match coding.and_then(|c| c.br.as_ref()) {
        Some(ObjBody::Live(b)) => Some(b.clone()),
        _ => None,
    };
    // A page kept gzip is gathered plain on the side, compressed at the end.
    let scratch = coding.filter(|k| k.esi && k.gzip).map(|_| Body::new(None));
    let (window, wait) = (sh.params().transit_buffer, sh.params().send_timeout);
    let window = (stream && !coding.is_some_and(|k| k.esi)).then_some(window);
    let store = Store {
        body: scratch.as_ref().unwrap_or(body),
        br: br.as_deref(),
        cache: &sh.cache,
        oc,
        charge: scratch.is_none(),
        window,
        esi: coding.is_some_and(|k| k.esi),
        lost: std::sync::atomic::AtomicBool::new(false),
    };
    // An object that is not kept (uncacheable) is in transit from the start.
    if let (false, Some(w)) = (oc.stored(), window) {
        body.set_transit(w);
    }
    let mut sink = BodySink { store: &store, coder: coder.as_mut(), failed: None, waiting: None, wait, stopped: None };
    let moved = http_body::transfer(&mut be, &mut sink, &tr, &mut Vec::new()).await;
    let (mut bad, mut stopped) = (sink.failed.take(), sink.stopped.take());
    // The sink borrows the coder (and a boxed wait may hold borrows to its
    // drop): let it go before the coder is used again.
    drop(sink);
    let whole = match moved {
        Ok(m) if !matches!(resp.framing, Framing::Length(n) if n != m.payload) => match coder.as_mut() {
            Some(c) => match store.sinks(|o| c.finish(o)) {
                Ok(()) => Some(m),
                Err(e) => {
                    bad = Some(e);
                    None
                }
            },
            None => Some(m),
        },
        _ => None,
    };
    // A body its readers wait for whole that could not be stored fails
    // (Varnish: no storage, the fetch fails) rather than be sent unkept.
    let whole = match whole {
        Some(_) if window.is_none() && store.lost.load(std::sync::atomic::Ordering::Relaxed) => {
            stopped = Some(NO_STORAGE);
            None
        }
        w => w,
    };
    match whole {
        Some(m) => {
            if let (Some(c), Some(k)) = (coder.as_ref(), coding) {
                if let Some(info) = c.info() {
                    let _ = k.info.set(info);
                }
            }
            if let Some(k) = coding.filter(|k| k.esi) {
                if let Err(e) = finish_esi(sh, &mut f, url, k, &store, body, scratch.as_ref()) {
                    if let Some(b) = &br {
                        b.fail();
                    }
                    body.fail();
                    sh.cache.kill(oc);
                    f.error(&e);
                    f.done(None, None);
                    return false;
                }
            }
            f.log.rec(Tag::FetchBody, LogSide::Backend, f.vxid, b"3 length stream");
            if let Some(r) = coder.as_ref().and_then(|c| c.record()) {
                f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
            }
            // The connection goes back to the pool before any reader sees
            // the body end: the client's next request may fetch at once,
            // and must find it there (a backend serving one connection at
            // a time would otherwise never answer the new one).
            let reusable = !backend_close && resp.framing != Framing::Eof;
            f.done(Some(m.payload), Some((be, reusable)));
            if let Some(b) = &br {
                b.finish();
            }
            body.finish();
            sh.cache.persist(oc);
            true
        }
        None => {
            failed(sh, f, (body, br.as_deref(), oc), bad, stopped, coder.as_ref());
            false
        }
    }
}

/// Why a body its readers wait for whole failed when its store could not
/// hold it.
const NO_STORAGE: &str = "Could not get storage";

/// A body that failed, ended early, was bad gzip or was left by its
/// readers: the object goes, the fetch logs why and is counted failed,
/// then the body (and its Brotli copy) fail, which cuts the deliveries
/// (so a client that sees the cut finds the counters and the log
/// written).
fn failed(
    sh: &Shared,
    mut f: Fetch,
    (body, br, oc): (&Body, Option<&Body>, &ObjRef),
    bad: Option<crate::gzip::code::CodeError>,
    stopped: Option<&'static str>,
    coder: Option<&Coder>,
) {
    sh.cache.kill(oc);
    match (bad, coder) {
        (Some(e), Some(c)) => refused(&mut f, c, &e),
        _ => {
            let side = match stopped {
                Some(NO_STORAGE) => Side::Internal,
                Some(_) => Side::Client,
                None => Side::Backend,
            };
            f.error(&Error::new(side, stopped.unwrap_or("backend body ended early or failed")));
            if let Some(r) = coder.and_then(|c| c.record()) {
                f.log.rec(Tag::Gzip, LogSide::Backend, f.vxid, r.as_bytes());
            }
        }
    }
    f.done(None, None);
    if let Some(b) = br {
        b.fail();
    }
    body.fail();
}

/// An ESI page whole: parsed (and compressed, kept gzip) before the body
/// is marked complete, so a delivery waiting for it finds the
/// instructions there; they are charged with it.
fn finish_esi(
    sh: &Shared,
    f: &mut Fetch,
    url: &[u8],
    k: &Coding,
    store: &Store<'_>,
    body: &Body,
    scratch: Option<&Body>,
) -> Result<(), Error> {
    let plain = scratch.map_or_else(|| body.chunks_now(), |s| s.chunks_now());
    let stored = esi_page(sh, f, url, k, plain)?;
    if scratch.is_some() {
        for piece in stored {
            store.keep(body, piece);
        }
    }
    let esi_bytes = k.esi_data.get().map_or(0, |d| d.bytes());
    sh.cache.grow(store.oc, esi_bytes, body.progress().len);
    Ok(())
}

/// A 304 refreshed a large disk object: its body is copied block by
/// block (each checked as it is read) into the new object, charged as a
/// fetched body is, then written; a block that cannot be read fails the
/// body (its readers get a cut response, never a wrong one).
pub(super) async fn copy_blocks(sh: &Shared, src: Arc<dyn Blocks>, body: &Body, oc: &ObjRef) {
    for i in 0..src.count() {
        let s = src.clone();
        match tokio::task::spawn_blocking(move || s.read(i)).await {
            Ok(Some(block)) => {
                let so_far = body.progress().len + block.len() as u64;
                if !sh.cache.grow(oc, block.len() as u64 + crate::cache::object::CHUNK_OVERHEAD, so_far) {
                    body.set_transit(sh.params().transit_buffer);
                }
                body.push(block);
                // In transit: at the pace of the slowest reader.
                let send_timeout = sh.params().send_timeout;
                if room(body, oc, send_timeout).await.is_err() {
                    body.fail();
                    return;
                }
            }
            _ => {
                body.fail();
                sh.cache.kill(oc);
                return;
            }
        }
    }
    body.finish();
    sh.cache.persist(oc);
}

/// Wait until a body in transit may take more: Ok, or why the fetch
/// stops — every reader left, the client of an object nobody else can
/// read let go of it (looked at every [`TRANSIT_TICK`]: it may never have
/// started reading), or nobody read for `wait` (send_timeout).
async fn room(body: &Body, oc: &ObjRef, wait: std::time::Duration) -> Result<(), &'static str> {
    let since = Instant::now();
    loop {
        let r = std::future::poll_fn(|cx| match body.room(cx.waker()) {
            Room::Wait => Poll::Pending,
            r => Poll::Ready(r),
        });
        match tokio::time::timeout(TRANSIT_TICK, r).await {
            Ok(Room::Yes) => return Ok(()),
            Ok(_) => return Err("every client of the body in transit left"),
            Err(_) if !oc.stored() && oc.refs() == 1 => return Err("the client of the body in transit left"),
            Err(_) if since.elapsed() >= wait => return Err("no client took the body in transit within send_timeout"),
            Err(_) => {}
        }
    }
}

/// A fetch waiting for room in a body in transit.
type Waiting<'a> = Pin<Box<dyn std::future::Future<Output = Result<(), &'static str>> + Send + 'a>>;

/// Where a streaming body's pieces are kept (and its Brotli copy's),
/// charged to the cache as they come.
struct Store<'a> {
    body: &'a Body,
    br: Option<&'a Body>,
    cache: &'a Cache,
    oc: &'a ObjRef,
    /// Pieces kept in `body` are charged to storage (not those of a page
    /// gathered plain before it is compressed).
    charge: bool,
    /// An ESI page (gathered whole, up to esi::MAX_PAGE).
    esi: bool,
    /// transit_buffer, for a body that turns out not to be kept (None
    /// when its readers wait for it whole: do_stream off, an ESI page).
    window: Option<u64>,
    /// Storage for a piece could not be had (a body nobody reads as it
    /// comes then fails, as in Varnish).
    lost: std::sync::atomic::AtomicBool,
}

impl Store<'_> {
    fn keep(&self, to: &Body, b: Bytes) {
        if self.charge || !std::ptr::eq(to, self.body) {
            let so_far = to.progress().len + b.len() as u64;
            if !self.cache.grow(self.oc, b.len() as u64 + crate::cache::object::CHUNK_OVERHEAD, so_far) {
                // Not kept (uncacheable, or too large for its store):
                // what its readers have been sent goes.
                if let Some(w) = self.window {
                    self.body.set_transit(w);
                }
                self.lost.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        to.push(b);
    }

    /// Run `f` with this store as a coder's two outputs.
    fn sinks<R>(&self, f: impl FnOnce(&mut Sinks<'_>) -> R) -> R {
        let mut body = |b| self.keep(self.body, b);
        let mut br = |b| {
            if let Some(to) = self.br {
                self.keep(to, b)
            }
        };
        f(&mut Sinks { body: &mut body, br: &mut br })
    }
}

/// How often a fetch held by a body in transit looks whether its client
/// is still there.
const TRANSIT_TICK: std::time::Duration = std::time::Duration::from_millis(500);

/// Storage for a body as it streams in, through the filters if any.
struct BodySink<'a> {
    store: &'a Store<'a>,
    coder: Option<&'a mut Coder>,
    /// Why the filters refused the body.
    failed: Option<crate::gzip::code::CodeError>,
    /// A body in transit whose readers are behind: the fetch waiting for
    /// them ([`room`]), at most `wait` (send_timeout).
    waiting: Option<Waiting<'a>>,
    wait: std::time::Duration,
    /// Why the fetch stopped for its readers (all gone, or too slow).
    stopped: Option<&'static str>,
}

impl AsyncWrite for BodySink<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let store = this.store;
        // A body in transit goes at the pace of its slowest reader.
        if this.waiting.is_none() && !matches!(store.body.room(cx.waker()), Room::Yes) {
            this.waiting = Some(Box::pin(room(store.body, store.oc, this.wait)));
        }
        if let Some(w) = this.waiting.as_mut() {
            let Poll::Ready(r) = w.as_mut().poll(cx) else { return Poll::Pending };
            this.waiting = None;
            if let Err(why) = r {
                this.stopped = Some(why);
                return Poll::Ready(Err(std::io::Error::other(why)));
            }
        }
        // An ESI page is gathered whole to be parsed: up to a bound.
        if store.esi && store.body.progress().len > crate::esi::MAX_PAGE {
            this.stopped = Some("ESI page larger than 16 MiB");
            return Poll::Ready(Err(std::io::Error::other("ESI page too large")));
        }
        match this.coder.as_deref_mut() {
            None => store.keep(store.body, Bytes::copy_from_slice(buf)),
            Some(c) => {
                let r = store.sinks(|o| c.feed(Bytes::copy_from_slice(buf), o));
                if let Err(e) = r {
                    this.failed = Some(e);
                    return Poll::Ready(Err(std::io::Error::other("bad gzip from the backend")));
                }
            }
        }
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
