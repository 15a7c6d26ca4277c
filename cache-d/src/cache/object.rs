//! A cached object: its response (status, packed headers, body,
//! lifetime, Vary values) and the core the index keeps around it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::cache::body::Body;
use crate::cache::ttl::Lifetime;

/// Bytes charged per object on top of its key, headers and body: the
/// object and core structs, Arcs, index, LRU and expiry entries. Measured
/// (see README: RSS after 100,000 objects), not guessed.
pub const OBJ_OVERHEAD: u64 = 832;

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

/// Stored response headers: every name and value in one buffer, with
/// 16 bytes of offsets per header (a cached object keeps these for its
/// whole life, so they are packed).
#[derive(Clone, Default)]
pub struct ObjHeaders {
    buf: Bytes,
    spans: Box<[[u32; 4]]>,
}

impl ObjHeaders {
    pub fn from_pairs<'a>(pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> ObjHeaders {
        let total: usize = pairs.clone().map(|(n, v)| n.len() + v.len()).sum();
        let mut buf = Vec::with_capacity(total);
        let mut spans = Vec::new();
        for (n, v) in pairs {
            let a = buf.len() as u32;
            buf.extend_from_slice(n);
            let b = buf.len() as u32;
            buf.extend_from_slice(v);
            spans.push([a, b, b, buf.len() as u32]);
        }
        ObjHeaders { buf: Bytes::from(buf), spans: spans.into_boxed_slice() }
    }
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        self.spans.iter().map(|s| (&self.buf[s[0] as usize..s[1] as usize], &self.buf[s[2] as usize..s[3] as usize]))
    }
    /// First value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<Bytes> {
        self.spans
            .iter()
            .find(|s| self.buf[s[0] as usize..s[1] as usize].eq_ignore_ascii_case(name.as_bytes()))
            .map(|s| self.buf.slice(s[2] as usize..s[3] as usize))
    }
    /// As an editable list (slices of the same buffer, no copies).
    pub fn to_headers(&self) -> crate::vcl::model::Headers {
        let span = |a: u32, b: u32| self.buf.slice(a as usize..b as usize);
        crate::vcl::model::Headers(self.spans.iter().map(|s| (span(s[0], s[1]), span(s[2], s[3]))).collect())
    }
    /// Bytes held: the buffer and the offsets.
    pub fn bytes(&self) -> usize {
        self.buf.len() + self.spans.len() * 16
    }
}

/// An immutable cached response (its body may still be streaming in).
pub struct Object {
    /// vxid of the backend transaction that made it.
    pub vxid: u32,
    pub status: u16,
    pub reason: Bytes,
    /// Response headers as stored (hop-by-hop and framing headers removed).
    pub headers: ObjHeaders,
    pub body: Arc<Body>,
    pub life: Lifetime,
    pub kind: Kind,
    /// For each header named by Vary: its normalized request value.
    pub vary: Option<Vec<(String, Option<Bytes>)>>,
}

impl Object {
    pub fn header(&self, name: &str) -> Option<Bytes> {
        self.headers.get(name)
    }

    /// Bytes this object holds, as charged to storage (body excluded while
    /// it streams: it is charged as it arrives).
    pub fn head_bytes(&self, key: &[u8]) -> u64 {
        (key.len() + self.headers.bytes() + self.reason.len()) as u64 + OBJ_OVERHEAD
    }
}

/// An object in the index, with the bookkeeping the cache needs.
pub struct ObjCore {
    pub key: Arc<[u8]>,
    pub obj: Object,
    /// Bytes charged to storage so far.
    pub(super) charged: AtomicU64,
    pub(super) last_touch: AtomicU64,
    pub(super) lru_seq: AtomicU64,
    /// This object's key in the expiry map: (expiry ms, insertion seq).
    pub(super) exp_key: (u64, u64),
    /// The newest ban this object was tested against (or inserted after).
    pub(super) ban_id: AtomicU64,
    /// Removed from the index (evicted, expired, purged, replaced, failed).
    pub(super) dead: AtomicBool,
    /// Charged to storage at all (objects over budget are not).
    pub(super) stored: AtomicBool,
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
