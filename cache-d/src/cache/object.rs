//! A cached object: its response (status, packed headers, body,
//! lifetime, Vary values) and the core the index keeps around it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;

use crate::cache::body::ObjBody;
pub use crate::cache::headers::ObjHeaders;
use crate::cache::ttl::Life;

/// Bytes charged per object on top of its packed head (and body, when it
/// came whole with the head): the core struct and its Arc, the index entry
/// (a 16-byte key), the LRU and expiry entries, malloc's own overhead.
/// Measured, not guessed (`scripts/bench-memory.sh`; README, Benchmarks):
/// anonymous memory after 100,000 objects of 1 KiB minus what the objects
/// charge otherwise is 520 bytes each; while LRU evicts, the allocator's
/// free lists hold about 70 more per object, and those are charged too so
/// a full cache stays within its budget + 10%.
pub const OBJ_OVERHEAD: u64 = 590;
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

    /// Bytes this object holds, as charged to storage (body excluded while
    /// it streams: it is charged as it arrives).
    pub fn head_bytes(&self) -> u64 {
        let live = if matches!(self.body, ObjBody::Live(_)) { LIVE_BODY_OVERHEAD } else { 0 };
        // A Brotli copy made whole at fetch is charged here; one that
        // streams in is charged as it grows, as the body is.
        let coding = match self.coding.as_deref() {
            None => 0,
            Some(c) => {
                std::mem::size_of::<crate::gzip::Coding>() as u64
                    + match &c.br {
                        Some(ObjBody::Whole(b)) => b.len() as u64,
                        Some(ObjBody::Live(_)) => LIVE_BODY_OVERHEAD,
                        None => 0,
                    }
            }
        };
        self.headers.bytes() as u64 + OBJ_OVERHEAD + live + coding
    }
}

/// An object in the index, with the bookkeeping the cache needs.
pub struct ObjCore {
    pub key: crate::cache::key::Key,
    pub obj: Object,
    /// Bytes charged to storage so far.
    pub(super) charged: AtomicU64,
    /// Its slot in the eviction ring and place in the expiry heap
    /// (`store::NONE` when not there).
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
