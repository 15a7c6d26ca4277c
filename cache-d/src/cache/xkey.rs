//! Surrogate keys (varnish-modules' xkey): every cached object is indexed
//! under the keys its response listed, so a purge by key costs the
//! objects it touches, never a walk of the cache.
//!
//! The keys are read from the object's `xkey` and `X-HashTwo` headers
//! (varnish-modules' names) and its `Surrogate-Key` header (Fastly's, our
//! addition), all when present; they are separated by white space or
//! commas, as xkey splits them.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::object::{ObjCore, ObjRef};

const SHARDS: usize = 64;

/// The headers that carry an object's keys.
pub const HEADERS: [&str; 3] = ["xkey", "x-hashtwo", "surrogate-key"];

/// One shard of the index: each key's objects by their address.
type Shard = HashMap<Box<[u8]>, HashMap<usize, ObjRef>>;

/// Objects by key, in shards by the key's hash.
pub struct Xkeys {
    shards: Vec<Mutex<Shard>>,
}

impl Default for Xkeys {
    fn default() -> Xkeys {
        Xkeys { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }
}

/// The keys in a header value (or a purge's argument): split on white
/// space and commas, empty pieces dropped.
pub fn split(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| b.is_ascii_whitespace() || *b == b',').filter(|k| !k.is_empty())
}

/// An object's keys, each once.
pub fn keys_of(oc: &ObjRef) -> Vec<Box<[u8]>> {
    let mut keys: Vec<Box<[u8]>> = Vec::new();
    let headers = oc.headers();
    for (name, value) in headers.iter() {
        if HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h.as_bytes())) {
            for k in split(value) {
                if !keys.iter().any(|have| &have[..] == k) {
                    keys.push(k.into());
                }
            }
        }
    }
    keys
}

fn addr(oc: &ObjRef) -> usize {
    let core: &ObjCore = oc;
    core as *const ObjCore as usize
}

impl Xkeys {
    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        let h = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
        self.shards[(h % SHARDS as u64) as usize].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Index an object under `keys`; the keys that were new. An object
    /// removed meanwhile is taken out again (its removal may have looked
    /// before it was here).
    pub fn add(&self, oc: &ObjRef, keys: &[Box<[u8]>]) -> usize {
        let mut new = 0;
        for k in keys {
            let mut s = self.shard(k);
            let objs = s.entry(k.clone()).or_insert_with(|| {
                new += 1;
                HashMap::new()
            });
            objs.insert(addr(oc), oc.clone());
        }
        if oc.is_dead() {
            self.remove(oc, keys);
        }
        new
    }

    /// Take an object out of the index; the keys that are now gone.
    pub fn remove(&self, oc: &ObjRef, keys: &[Box<[u8]>]) -> usize {
        let mut gone = 0;
        for k in keys {
            let mut s = self.shard(k);
            if let Some(objs) = s.get_mut(k) {
                objs.remove(&addr(oc));
                if objs.is_empty() {
                    s.remove(k);
                    gone += 1;
                }
            }
        }
        gone
    }

    /// The objects under each of `keys`, key by key (a key named twice,
    /// twice; an object under two keys named, under each), as
    /// vmod_xkey's purge walks them.
    pub fn objects(&self, keys: &[&[u8]]) -> Vec<Vec<ObjRef>> {
        keys.iter().map(|k| self.shard(k).get(*k).map(|objs| objs.values().cloned().collect()).unwrap_or_default()).collect()
    }

    /// How many keys are indexed.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
