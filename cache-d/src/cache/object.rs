//! A cached object: its response (status, packed headers, body,
//! lifetime, Vary values) and the core the index keeps around it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;

use crate::cache::body::ObjBody;
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

/// A stored response head: the reason phrase and every header name and
/// value in one buffer (a cached object keeps these for its whole life,
/// so they are packed into a single allocation):
///
/// `[count u16][reason len u16][(name end u32, value end u32) × count][reason][name value name value …]`
///
/// Ends count from the start of the names and values.
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
    /// (more than 65,535 headers or a 64 KiB reason) keeps what fits; the
    /// HTTP limits on heads are far below that.
    pub fn from_pairs<'a>(reason: &[u8], pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> ObjHeaders {
        ObjHeaders::with_body(reason, pairs, b"").0
    }

    /// Pack the head with a body after it, in the same allocation (a
    /// small object costs one allocation); returns the body's slice.
    pub fn with_body<'a>(reason: &[u8], pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone, body: &[u8]) -> (ObjHeaders, Bytes) {
        let pairs = pairs.take(u16::MAX as usize);
        let reason = &reason[..reason.len().min(u16::MAX as usize)];
        let (n, total) = pairs.clone().fold((0usize, 0usize), |(n, t), (a, b)| (n + 1, t + a.len() + b.len()));
        let mut buf = Vec::with_capacity(4 + 8 * n + reason.len() + total + body.len());
        buf.extend_from_slice(&(n as u16).to_le_bytes());
        buf.extend_from_slice(&(reason.len() as u16).to_le_bytes());
        let mut end = 0u32;
        for (a, b) in pairs.clone() {
            end += a.len() as u32;
            buf.extend_from_slice(&end.to_le_bytes());
            end += b.len() as u32;
            buf.extend_from_slice(&end.to_le_bytes());
        }
        buf.extend_from_slice(reason);
        for (a, b) in pairs {
            buf.extend_from_slice(a);
            buf.extend_from_slice(b);
        }
        let at = buf.len();
        buf.extend_from_slice(body);
        let buf = Bytes::from(buf);
        let body = if body.is_empty() { Bytes::new() } else { buf.slice(at..) };
        (ObjHeaders { buf }, body)
    }

    fn u16_at(&self, i: usize) -> usize {
        u16::from_le_bytes([self.buf[i], self.buf[i + 1]]) as usize
    }

    fn count(&self) -> usize {
        self.u16_at(0)
    }

    /// Where the names and values start.
    fn data(&self) -> usize {
        4 + 8 * self.count() + self.u16_at(2)
    }

    /// The spans of header `i`'s name and value in `buf`.
    fn span(&self, i: usize) -> ((usize, usize), (usize, usize)) {
        let at = |j: usize| u32::from_le_bytes(self.buf[j..j + 4].try_into().expect("4 bytes")) as usize;
        let d = self.data();
        let start = if i == 0 { 0 } else { at(4 + 8 * (i - 1) + 4) };
        let (ne, ve) = (at(4 + 8 * i), at(4 + 8 * i + 4));
        ((d + start, d + ne), (d + ne, d + ve))
    }

    /// The reason phrase.
    pub fn reason(&self) -> Bytes {
        let at = 4 + 8 * self.count();
        self.buf.slice(at..at + self.u16_at(2))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        (0..self.count()).map(|i| {
            let ((a, b), (c, d)) = self.span(i);
            (&self.buf[a..b], &self.buf[c..d])
        })
    }

    /// First value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<Bytes> {
        (0..self.count())
            .map(|i| self.span(i))
            .find(|((a, b), _)| self.buf[*a..*b].eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, (c, d))| self.buf.slice(c..d))
    }

    /// As an editable list (slices of the same buffer, no copies).
    pub fn to_headers(&self) -> crate::vcl::model::Headers {
        crate::vcl::model::Headers(
            (0..self.count())
                .map(|i| {
                    let ((a, b), (c, d)) = self.span(i);
                    (self.buf.slice(a..b), self.buf.slice(c..d))
                })
                .collect(),
        )
    }

    /// Bytes held (with a body packed after the head).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }
}

/// For each header named by Vary: its normalized request value.
pub type Vary = Box<[(String, Option<Bytes>)]>;

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
    pub(super) lru_seq: AtomicU64,
    /// This object's key in the expiry map: (expiry ms, insertion seq).
    pub(super) exp_key: (u64, u64),
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
