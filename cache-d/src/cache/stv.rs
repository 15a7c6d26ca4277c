//! The stores (Varnish's stevedores) of a cache: each with its budget,
//! eviction ring and expiry heap, its `SMA`/`SMF`/`SMP.<name>.*` counters,
//! and for the file and persistent kinds, the disk it writes to.

use std::sync::{Arc, Mutex, MutexGuard};

use common::counters::{Stv as F, STV, STV_MEMORY};
use common::segment::SegmentWriter;

use crate::cache::disk::{Disk, Recovered};
use crate::cache::spec::{Kind, Spec, TRANSIENT};
use crate::cache::store::Store;

pub struct Stv {
    pub name: String,
    pub kind: Kind,
    pub budget: u64,
    store: Mutex<Store>,
    counters: Option<Counters>,
    pub disk: Option<Disk>,
}

/// A store's counters in the segment's dynamic slots.
struct Counters {
    seg: Arc<SegmentWriter>,
    slots: Vec<Option<usize>>,
}

impl Drop for Counters {
    fn drop(&mut self) {
        for s in self.slots.iter().flatten() {
            self.seg.unregister(*s);
        }
    }
}

impl Stv {
    /// Make the store `spec` says (opening its disk, reading back a
    /// persistent one's objects).
    pub fn open(spec: &Spec, seg: Option<&Arc<SegmentWriter>>) -> Result<(Stv, Vec<Recovered>), String> {
        let (disk, found) = match spec.kind.disk() {
            None => (None, Vec::new()),
            Some((path, size, persistent, wipe)) => {
                let (d, f) = Disk::open(&spec.name, path, size, persistent, wipe)?;
                (Some(d), f)
            }
        };
        let n = if disk.is_some() { STV.len() } else { STV_MEMORY };
        let counters = seg.map(|seg| {
            let prefix = format!("{}.{}", spec.kind.group(), spec.name);
            let slots = STV[..n].iter().map(|d| seg.register(&format!("{prefix}.{}", d.name), d)).collect();
            Counters { seg: seg.clone(), slots }
        });
        // The header is not space objects can use.
        let budget = spec.kind.size().saturating_sub(if disk.is_some() { crate::cache::disk::record::HEADER } else { 0 });
        let stv = Stv { name: spec.name.clone(), kind: spec.kind.clone(), budget, store: Mutex::new(Store::default()), counters, disk };
        if budget != u64::MAX {
            stv.count(F::GSpace, budget as i64);
        }
        Ok((stv, found))
    }

    pub(super) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn count(&self, c: F, delta: i64) {
        let Some(k) = &self.counters else { return };
        if let Some(Some(slot)) = k.slots.get(c as usize) {
            if delta >= 0 {
                k.seg.add_slot(*slot, delta as u64);
            } else {
                k.seg.sub_slot(*slot, delta.unsigned_abs());
            }
        }
    }

    /// An allocation of `n` bytes (counted as Varnish counts them).
    pub fn allocated(&self, n: u64) {
        self.count(F::CBytes, n as i64);
        self.count(F::GBytes, n as i64);
        if self.budget != u64::MAX {
            self.count(F::GSpace, -(n as i64));
        }
    }

    /// `n` bytes given back.
    pub fn freed(&self, n: u64) {
        self.count(F::CFreed, n as i64);
        self.count(F::GBytes, -(n as i64));
        if self.budget != u64::MAX {
            self.count(F::GSpace, n as i64);
        }
    }

    pub fn is_transient(&self) -> bool {
        self.name == TRANSIENT
    }
}

/// The stores of a cache, and the two that have a role: Transient (for
/// short-lived and uncacheable objects), and the memory tier (the first
/// malloc store that is not Transient: disk objects' bodies in memory
/// are charged to it and evicted by its LRU with its own objects).
pub struct Stvs {
    pub all: Vec<Stv>,
    pub transient: u8,
    pub tier: Option<u8>,
    /// The stores objects VCL does not place go to, round robin
    /// ([`crate::cache::spec::unplaced`]: Varnish's, all but Transient,
    /// unless some are persistent) and the turn.
    unplaced: Vec<u8>,
    next: std::sync::atomic::AtomicUsize,
}

impl Stvs {
    /// Open every store in `specs` (resolved: named, with Transient).
    /// The stores' objects found on disk come back with the index of
    /// their store.
    pub fn open(specs: &[Spec], seg: Option<&Arc<SegmentWriter>>) -> Result<(Stvs, Vec<(u8, Recovered)>), String> {
        if specs.len() > 64 {
            return Err("at most 64 stores".into());
        }
        // The hash key: the first persistent store's, so its objects'
        // keys are found again.
        for s in specs {
            if let Kind::Persistent { path, size, .. } = &s.kind {
                if let Some(k) = crate::cache::disk::secret_of(path, &s.name, *size) {
                    crate::cache::key::Key::adopt(k);
                    break;
                }
            }
        }
        let mut all = Vec::new();
        let mut found = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let (stv, f) = Stv::open(spec, seg)?;
            all.push(stv);
            found.extend(f.into_iter().map(|r| (i as u8, r)));
        }
        let transient = all.iter().position(Stv::is_transient).ok_or("no Transient store")? as u8;
        let tier = all.iter().position(|s| matches!(s.kind, Kind::Malloc { .. }) && !s.is_transient()).map(|i| i as u8);
        if let Some(t) = tier {
            all[t as usize].store().tier = true;
        }
        let unplaced = crate::cache::spec::unplaced(specs).into_iter().map(|i| i as u8).collect();
        Ok((Stvs { all, transient, tier, unplaced, next: Default::default() }, found))
    }

    pub fn get(&self, i: u8) -> &Stv {
        &self.all[i as usize]
    }

    /// A store by name.
    pub fn find(&self, name: &str) -> Option<u8> {
        self.all.iter().position(|s| s.name == name).map(|i| i as u8)
    }

    /// The next store in the round robin for objects VCL does not place
    /// (never Transient, unless it is the only one).
    pub fn next(&self) -> u8 {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.unplaced.get(i % self.unplaced.len().max(1)).copied().unwrap_or(self.transient)
    }

    /// The store a disk object's memory copy is charged to.
    pub fn ram_of(&self, stv: u8) -> u8 {
        if self.get(stv).disk.is_some() {
            self.tier.unwrap_or(self.transient)
        } else {
            stv
        }
    }
}
