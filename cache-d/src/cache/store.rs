//! Storage bookkeeping: bytes charged against the budget, the CLOCK ring
//! eviction sweeps, and the expiry heap. The ring holds a pointer per
//! object, the heap its expiry and ring slot, and the object its places
//! in both (Varnish's binheap index in the objcore): 16 bytes an object,
//! and it leaves in O(log n) whatever the reason it goes.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::cache::object::{ObjCore, ObjRef, NONE};

/// Unix seconds, rounded up, as the heap keeps them.
fn secs(t: f64) -> u32 {
    t.max(0.0).ceil().min(u32::MAX as f64) as u32
}

/// Compact the ring when at least this many slots are free and they are
/// more than half of it (so a sweep never walks mostly empty slots).
const COMPACT_FREE: usize = 4096;

#[derive(Default)]
pub(super) struct Store {
    pub used: u64,
    /// Every stored object, in the order eviction sweeps them. A freed slot
    /// is reused by the next object, and slots are freed where the hand
    /// passed (evictions), so a new object lands behind the hand: the
    /// last the sweep comes back to.
    ring: Vec<Option<ObjRef>>,
    free: Vec<u32>,
    hand: usize,
    /// Min-heap on expiry time: (when, in whole seconds rounded up, the
    /// object's ring slot). Eight bytes an object; the sweep runs once a
    /// second and a lookup tests freshness itself, so seconds are enough.
    heap: Vec<(u32, u32)>,
    /// The memory tier: its ring also holds the disk objects whose
    /// bodies are in memory (through their own slot: their heap place is
    /// their disk store's).
    pub tier: bool,
}

impl Store {
    /// Objects in the ring (stored objects).
    #[cfg(test)]
    pub fn stored(&self) -> usize {
        self.ring.len() - self.free.len()
    }

    /// Objects in the expiry heap.
    #[cfg(test)]
    pub fn expiring(&self) -> usize {
        self.heap.len()
    }

    /// Where `oc` keeps its slot in this ring.
    fn slot<'a>(&self, oc: &'a ObjCore) -> &'a AtomicU32 {
        match oc.disk() {
            Some(d) if self.tier => &d.mem_slot,
            _ => &oc.slot,
        }
    }

    /// Is `oc` one of this store's own objects (in its heap), not a disk
    /// object's memory copy?
    fn own(&self, oc: &ObjCore) -> bool {
        !(self.tier && oc.disk().is_some())
    }

    /// Take a new object in: a ring slot and its expiry time (Unix seconds).
    pub fn add(&mut self, oc: &ObjRef, expires: f64) {
        self.take(oc);
        self.heap.push((secs(expires), self.slot(oc).load(Ordering::Relaxed)));
        let at = self.heap.len() - 1;
        oc.heap.store(at as u32, Ordering::Relaxed);
        self.up(at);
    }

    /// `oc`'s times changed (a soft purge): its new place in the heap, so
    /// it leaves when its grace and keep end, not at its old expiry.
    pub fn retime(&mut self, oc: &ObjCore, expires: f64) {
        if !self.own(oc) {
            return;
        }
        let at = oc.heap.load(Ordering::Relaxed) as usize;
        let Some(e) = self.heap.get_mut(at) else { return };
        e.0 = secs(expires);
        let at = self.up(at);
        self.down(at);
    }

    /// A disk object's memory copy joins the ring (the tier only).
    pub fn add_resident(&mut self, oc: &ObjRef) {
        if self.slot(oc).load(Ordering::Relaxed) == NONE {
            self.take(oc);
        }
    }

    /// A ring slot for `oc`.
    fn take(&mut self, oc: &ObjRef) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.ring[s as usize] = Some(oc.clone());
                s
            }
            None => {
                self.ring.push(Some(oc.clone()));
                (self.ring.len() - 1) as u32
            }
        };
        self.slot(oc).store(slot, Ordering::Relaxed);
    }

    /// Take an object out of the ring and the heap (if there); the caller
    /// drops what is returned after letting go of the lock.
    pub fn forget(&mut self, oc: &ObjCore) -> Option<ObjRef> {
        if self.own(oc) {
            let at = oc.heap.swap(NONE, Ordering::Relaxed);
            if at != NONE {
                self.heap_remove(at as usize);
            }
        }
        let slot = self.slot(oc).swap(NONE, Ordering::Relaxed);
        if slot == NONE {
            return None;
        }
        let gone = self.ring.get_mut(slot as usize).and_then(Option::take);
        self.free.push(slot);
        if self.free.len() >= COMPACT_FREE && self.free.len() * 2 > self.ring.len() {
            self.compact();
        }
        gone
    }

    /// The object to evict: the first the hand finds unreferenced; one
    /// hit since the hand last passed gives an object one more round
    /// (CLOCK, an approximation of LRU whose hits take no lock). `own`
    /// (the object being charged) is skipped, and so is one on its way out. None when nothing can go.
    pub fn victim(&mut self, own: &ObjCore) -> Option<ObjRef> {
        let n = self.ring.len();
        for _ in 0..=2 * n {
            if self.hand >= n {
                self.hand = 0;
            }
            let i = self.hand;
            self.hand += 1;
            let Some(v) = &self.ring[i] else { continue };
            if std::ptr::eq(&**v, own) || v.is_dead() {
                continue;
            }
            if v.referenced.swap(false, Ordering::AcqRel) {
                continue;
            }
            return Some(v.clone());
        }
        None
    }

    /// The objects whose time ended by `now` (Unix seconds), taken out
    /// of the heap (still in the ring: the caller removes them).
    pub fn expired(&mut self, now: f64) -> Vec<ObjRef> {
        let mut due = Vec::new();
        while self.heap.first().is_some_and(|(t, _)| (*t as f64) <= now) {
            let (_, slot) = self.heap[0];
            self.heap_remove(0);
            if let Some(oc) = self.ring.get(slot as usize).and_then(Option::as_ref) {
                oc.heap.store(NONE, Ordering::Relaxed);
                due.push(oc.clone());
            }
        }
        due
    }

    /// Rebuild the ring without its free slots (the hand keeps its place
    /// among the objects).
    fn compact(&mut self) {
        let hand = self.ring[..self.hand.min(self.ring.len())].iter().filter(|s| s.is_some()).count();
        self.ring.retain(Option::is_some);
        for (i, oc) in self.ring.iter().enumerate() {
            if let Some(oc) = oc {
                self.slot(oc).store(i as u32, Ordering::Relaxed);
                if !self.own(oc) {
                    continue;
                }
                let at = oc.heap.load(Ordering::Relaxed);
                if let Some(e) = self.heap.get_mut(at as usize) {
                    e.1 = i as u32;
                }
            }
        }
        self.ring.shrink_to(self.ring.len() * 2);
        self.free.clear();
        self.free.shrink_to(COMPACT_FREE);
        self.hand = hand;
    }

    fn heap_remove(&mut self, at: usize) {
        if at >= self.heap.len() {
            return;
        }
        self.heap.swap_remove(at);
        if at < self.heap.len() {
            self.place(at);
            let at = self.up(at);
            self.down(at);
        }
    }

    /// Tell the object at heap position `at` where it is.
    fn place(&self, at: usize) {
        if let Some(Some(oc)) = self.ring.get(self.heap[at].1 as usize) {
            oc.heap.store(at as u32, Ordering::Relaxed);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.place(a);
        self.place(b);
    }

    fn up(&mut self, mut at: usize) -> usize {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent].0 <= self.heap[at].0 {
                break;
            }
            self.swap(parent, at);
            at = parent;
        }
        at
    }

    fn down(&mut self, mut at: usize) {
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut min = at;
            if l < self.heap.len() && self.heap[l].0 < self.heap[min].0 {
                min = l;
            }
            if r < self.heap.len() && self.heap[r].0 < self.heap[min].0 {
                min = r;
            }
            if min == at {
                return;
            }
            self.swap(at, min);
            at = min;
        }
    }
}
