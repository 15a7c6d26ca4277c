//! A cached object: its response (status, packed headers, body,
//! lifetime, Vary values) and the core the index keeps around it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use triomphe::ThinArc;

use crate::cache::body::{Body, ObjBody};
pub use crate::cache::headers::ObjHeaders;
use crate::cache::ttl::Life;

/// Bytes charged per object on top of its bytes (packed head and small
/// body): the core in the same allocation (96 bytes; 112 with the count
/// and length), malloc's own, the index entry (16 bytes in a hash table
/// kept under 7/8 full), the eviction ring slot (8) and expiry heap entry
/// (8). Measured, not guessed (`scripts/bench-memory.sh`; README,
/// Benchmarks): the structures of 100,000 objects of 1 KiB take 162 bytes
/// each beyond their bytes (`cargo run --release -p cache-d --example
/// object_bytes`), and a child that fetched them through the
/// request path about 220 (what the allocator keeps free between them);
/// the charge lies between, and a cache kept full by LRU stays within its
/// budget + 10% (1.09x measured, 1 KiB and 10 KiB objects).
pub const OBJ_OVERHEAD: u64 = 200;
/// A body that streams in (larger than what came with the head) costs
/// its own struct, lock and wake-up list, and each stored chunk a handle
/// and a shared count.
pub const LIVE_BODY_OVERHEAD: u64 = 192;
pub const CHUNK_OVERHEAD: u64 = 64;

/// What kind of object sits in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    /// Uncacheable response remembered: the next requests fetch on their own
    /// without waiting for each other.
    HitForMiss,
    /// Remembered decision to pass.
    HitForPass,
}

/// For each header named by Vary: its normalized request value (boxed
/// twice so an object pays one pointer when it has no Vary).
pub type Vary = Box<Vec<(String, Option<Bytes>)>>;

/// An immutable cached response (its body may still be streaming in).
pub struct Object {
    /// vxid of the backend transaction that made it.
    pub vxid: u32,
    pub status: u16,
    /// Reason phrase and response headers as stored (hop-by-hop and
    /// framing headers removed).
    pub headers: ObjHeaders,
    pub body: ObjBody,
    pub life: Life,
    pub kind: Kind,
    /// For each header named by Vary: its normalized request value.
    pub vary: Option<Vary>,
    /// A gzip body (and its bits), a Brotli copy; None for a plain body.
    pub coding: Option<Box<crate::gzip::Coding>>,
}

impl Object {
    pub fn header(&self, name: &str) -> Option<Bytes> {
        self.headers.get(name)
    }

    pub fn reason(&self) -> Bytes {
        self.headers.reason()
    }

    /// What its Brotli copy costs in storage when made whole at fetch
    /// (one that streams in is charged as it grows, as the body is).
    fn coding_bytes(&self) -> u64 {
        match self.coding.as_deref() {
            None => 0,
            Some(c) => {
                std::mem::size_of::<crate::gzip::Coding>() as u64
                    + match &c.br {
                        Some(ObjBody::Whole(b)) => b.len() as u64,
                        Some(ObjBody::Live(_) | ObjBody::Blocks(_)) => LIVE_BODY_OVERHEAD,
                        None => 0,
                    }
                    // The instructions of an ESI page parsed before it was
                    // stored (one that streams in is charged once parsed).
                    + c.esi_data.get().map_or(0, |d| d.bytes())
            }
        }
    }
}

/// What a stored object keeps of its [`Object`] besides its bytes.
pub struct Meta {
    /// vxid of the backend transaction that made it.
    pub vxid: u32,
    pub status: u16,
    life: crate::cache::ttl::StoredLife,
    pub kind: Kind,
    /// Vary values, coding and a body that lives apart, for the objects
    /// that have any (a plain small object pays one pointer for them).
    extra: Option<Box<Extra>>,
}

struct Extra {
    vary: Option<Vary>,
    coding: Option<crate::gzip::Coding>,
    /// A body that streams in (or was too large to pack) lives apart.
    live: Option<Arc<Body>>,
    /// An object of a disk store: its place there and its body in memory.
    disk: Option<DiskObj>,
}

/// What an object of a disk store has besides the rest: where it is on
/// disk once written, and its body while it is in memory (charged to
/// the memory tier, in whose eviction ring it then sits).
pub struct DiskObj {
    /// Set when its write is queued (the writer writes in order, so what
    /// comes after, a kill, lands after it).
    pub loc: std::sync::OnceLock<crate::cache::disk::loc::Loc>,
    /// The write is done: its body can be read back.
    pub written: AtomicBool,
    pub ram: std::sync::Mutex<Option<ObjBody>>,
    /// Its slot in the memory tier's ring ([`NONE`] when not there).
    pub(super) mem_slot: AtomicU32,
    /// When it entered the cache (bans made later apply to it).
    pub t_insert: f64,
}

impl DiskObj {
    pub fn ram(&self) -> Option<ObjBody> {
        self.ram.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    pub fn set_ram(&self, b: Option<ObjBody>) -> Option<ObjBody> {
        std::mem::replace(&mut *self.ram.lock().unwrap_or_else(|e| e.into_inner()), b)
    }
}

impl Meta {
    /// When it was made, its ttl, grace and keep.
    pub fn life(&self) -> Life {
        self.life.get()
    }

    /// A soft purge: fresh for `ttl` more seconds at most, grace and keep
    /// as given (None: unchanged).
    pub fn rearm(&self, now: f64, ttl: f64, grace: Option<f64>, keep: Option<f64>) {
        self.life.rearm(now, ttl, grace, keep);
    }

    /// For each header named by Vary: its normalized request value.
    pub fn vary(&self) -> Option<&Vary> {
        self.extra.as_ref()?.vary.as_ref()
    }

    /// A gzip body (and its bits), a Brotli copy; None for a plain body.
    pub fn coding(&self) -> Option<&crate::gzip::Coding> {
        self.extra.as_ref()?.coding.as_ref()
    }
}

/// An object in the index, with the bookkeeping the cache needs. It is
/// the fixed part of one allocation whose bytes ([`ObjRef`]) are the
/// packed head and, when it came whole, the body.
pub struct ObjCore {
    pub key: crate::cache::key::Key,
    pub obj: Meta,
    /// Where the head ends and the packed body starts in the bytes.
    head_len: u32,
    /// Bytes charged to storage so far.
    pub(super) charged: AtomicU64,
    /// Its slot in the eviction ring and place in the expiry heap
    /// ([`NONE`] when not there).
    pub(super) slot: AtomicU32,
    pub(super) heap: AtomicU32,
    /// The newest ban this object was tested against (or inserted after).
    pub(super) ban_id: AtomicU64,
    /// Removed from the index (evicted, expired, purged, replaced, failed).
    pub(super) dead: AtomicBool,
    /// Charged to storage at all (objects over budget are not).
    pub(super) stored: AtomicBool,
    /// Hit since eviction last looked at it (its second chance).
    pub(super) referenced: AtomicBool,
    /// Times delivered from the cache (obj.hits).
    pub(super) hits: AtomicU64,
    /// Its store (an index into the cache's stores).
    pub stv: u8,
}

impl ObjCore {
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }
    pub fn stored(&self) -> bool {
        self.stored.load(Ordering::Acquire)
    }
    /// Count a hit; the hits before this one.
    pub fn hit(&self) -> u64 {
        self.hits.fetch_add(1, Ordering::Relaxed)
    }
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
    /// What it has as a disk store's object.
    pub fn disk(&self) -> Option<&DiskObj> {
        self.obj.extra.as_ref()?.disk.as_ref()
    }
}

/// No position: not in the eviction ring or expiry heap.
pub(super) const NONE: u32 = u32::MAX;

/// Bodies up to this size that are whole when stored are packed into the
/// object's allocation; larger ones stay where they are.
const PACK_MAX: usize = 64 * 1024;

/// A counted reference to a stored object: one allocation holding the
/// [`ObjCore`], the packed head and a small body (no separate buffers,
/// counts or handles per object). Bytes handed out for delivery are views
/// of it that keep it alive.
#[derive(Clone)]
pub struct ObjRef(ThinArc<ObjCore, u8>);

impl std::ops::Deref for ObjRef {
    type Target = ObjCore;
    fn deref(&self) -> &ObjCore {
        &self.0.header.header
    }
}

impl AsRef<[u8]> for ObjRef {
    fn as_ref(&self) -> &[u8] {
        &self.0.slice
    }
}

/// How a new object starts out in the index.
pub(super) struct Start {
    pub key: crate::cache::key::Key,
    pub ban_id: u64,
    /// In the index and charged (false for a private object).
    pub stored: bool,
    pub stv: u8,
    /// A disk store's object (its body kept apart): when it came in.
    pub disk: Option<f64>,
}

impl ObjRef {
    /// The stored form of `obj`, and what it costs in storage (a body that
    /// streams in is charged as it arrives).
    pub(super) fn new(obj: Object, start: Start) -> (ObjRef, u64) {
        let coding = obj.coding_bytes();
        let Object { vxid, status, headers, body, life, kind, vary, coding: k } = obj;
        let head_len = headers.head_len();
        let (data, live, ram, body_charge) = split(headers, body, head_len, start.disk.is_some());
        let disk = start.disk.map(|t_insert| DiskObj {
            loc: Default::default(),
            ram: std::sync::Mutex::new(ram),
            mem_slot: AtomicU32::new(NONE),
            written: AtomicBool::new(false),
            t_insert,
        });
        // A disk object is charged its body alone (its memory copy, which
        // can go; its index entry is outside the budgets).
        let charge = body_charge + if disk.is_some() { 0 } else { data.len() as u64 + OBJ_OVERHEAD + coding };
        let core = ObjCore {
            key: start.key,
            obj: Meta {
                vxid,
                status,
                life: life.into(),
                kind,
                extra: (vary.is_some() || k.is_some() || live.is_some() || disk.is_some())
                    .then(|| Box::new(Extra { vary, coding: k.map(|k| *k), live, disk })),
            },
            head_len: head_len as u32,
            charged: AtomicU64::new(0),
            slot: AtomicU32::new(NONE),
            heap: AtomicU32::new(NONE),
            ban_id: AtomicU64::new(start.ban_id),
            dead: AtomicBool::new(!start.stored),
            stored: AtomicBool::new(start.stored),
            referenced: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            stv: start.stv,
        };
        (ObjRef(ThinArc::from_header_and_slice(core, &data)), charge)
    }

    /// How many references to it there are (this one included).
    pub fn refs(&self) -> usize {
        self.0.with_arc(triomphe::Arc::count)
    }

    /// The same object?
    pub fn ptr_eq(a: &ObjRef, b: &ObjRef) -> bool {
        a.0.ptr() == b.0.ptr()
    }

    fn head(&self) -> &[u8] {
        &self.0.slice[..self.head_len as usize]
    }

    /// The object's bytes as a `Bytes` that keeps it alive (one small
    /// allocation; slices of it are free).
    fn view(&self) -> Bytes {
        Bytes::from_owner(self.clone())
    }

    /// The stored head (reason and headers).
    pub fn headers(&self) -> ObjHeaders {
        ObjHeaders::from_bytes(self.view().slice(..self.head_len as usize))
    }

    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<Bytes> {
        let (a, b) = crate::cache::headers::find(self.head(), name)?;
        Some(self.view().slice(a..b))
    }

    /// The same, borrowed (no view made).
    pub fn header_ref(&self, name: &str) -> Option<&[u8]> {
        let (a, b) = crate::cache::headers::find(self.head(), name)?;
        Some(&self.0.slice[a..b])
    }

    pub fn reason(&self) -> Bytes {
        let (a, b) = crate::cache::headers::reason_span(self.head());
        self.view().slice(a..b)
    }

    /// The head and the body, sharing one view.
    pub fn parts(&self) -> (ObjHeaders, ObjBody) {
        let view = self.view();
        let body = self.body_of(&view);
        (ObjHeaders::from_bytes(view.slice(..self.head_len as usize)), body)
    }

    pub fn body(&self) -> ObjBody {
        self.body_of(&self.view())
    }

    /// A disk object's body is its memory copy; one not in memory (taken
    /// out between the lookup that loaded it and now) reads as failed.
    fn body_of(&self, view: &Bytes) -> ObjBody {
        if let Some(d) = self.disk() {
            return d.ram().unwrap_or_else(|| {
                let b = Body::new(None);
                b.fail();
                ObjBody::Live(Arc::new(b))
            });
        }
        match self.live() {
            Some(b) => ObjBody::Live(b.clone()),
            None => ObjBody::Whole(view.slice(self.head_len as usize..)),
        }
    }

    /// The body that streams in, if it does.
    pub fn live(&self) -> Option<&Arc<Body>> {
        self.obj.extra.as_ref()?.live.as_ref()
    }
}

/// An object's bytes (the packed head, and a small whole body with it),
/// the body that lives apart, a disk object's memory copy of its body
/// (always apart: it can go), and what the bodies apart cost.
fn split(headers: ObjHeaders, body: ObjBody, head_len: usize, disk: bool) -> (Bytes, Option<Arc<Body>>, Option<ObjBody>, u64) {
    let live_cost =
        |b: &Body| LIVE_BODY_OVERHEAD + if b.progress().done == crate::cache::body::Done::Complete { b.progress().len } else { 0 };
    let packed = |b: &Bytes| headers.packed_body().as_ptr_range() == b.as_ptr_range() || (b.is_empty() && headers.packed_body().is_empty());
    match body {
        ObjBody::Whole(b) if disk => {
            let b = if packed(&b) { Bytes::copy_from_slice(&b) } else { b };
            let n = b.len() as u64;
            (headers.into_bytes().slice(..head_len), None, Some(ObjBody::Whole(b)), n)
        }
        ObjBody::Live(b) if disk => {
            let n = live_cost(&b);
            (headers.into_bytes().slice(..head_len), None, Some(ObjBody::Live(b)), n)
        }
        ObjBody::Whole(b) if packed(&b) => (headers.into_bytes(), None, None, 0),
        ObjBody::Whole(b) if b.len() <= PACK_MAX => {
            let mut v = Vec::with_capacity(head_len + b.len());
            v.extend_from_slice(&headers.into_bytes()[..head_len]);
            v.extend_from_slice(&b);
            (Bytes::from(v), None, None, 0)
        }
        ObjBody::Whole(b) => {
            let live = Arc::new(Body::whole(b));
            let n = live_cost(&live);
            (headers.into_bytes().slice(..head_len), Some(live), None, n)
        }
        ObjBody::Live(b) => {
            let n = live_cost(&b);
            (headers.into_bytes().slice(..head_len), Some(b), None, n)
        }
        // Never stored (a disk hit's body as it is sent); should one be,
        // it reads as failed rather than as something else.
        ObjBody::Blocks(_) => {
            let b = Body::new(None);
            b.fail();
            (headers.into_bytes().slice(..head_len), Some(Arc::new(b)), None, LIVE_BODY_OVERHEAD)
        }
    }
}

/// Normalize a request header's value for Vary: its lines joined, list
/// items trimmed and joined with ", ".
pub fn vary_value<'a>(headers: impl Iterator<Item = (&'a [u8], &'a [u8])>, name: &str) -> Option<Bytes> {
    let mut out: Vec<u8> = Vec::new();
    let mut any = false;
    for (n, v) in headers {
        if !n.eq_ignore_ascii_case(name.as_bytes()) {
            continue;
        }
        any = true;
        for item in v.split(|&b| b == b',').map(|i| i.trim_ascii()).filter(|i| !i.is_empty()) {
            if !out.is_empty() {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(item);
        }
    }
    any.then(|| Bytes::from(out))
}
