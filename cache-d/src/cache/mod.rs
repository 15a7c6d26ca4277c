//! The cache: object heads by hash key, variants (Vary), the busy markers
//! and waiting lists that coalesce concurrent misses, storage accounting
//! with LRU eviction, expiry, and purge. Sans-io: time comes in as `now`.

pub mod ban;
pub mod body;
pub mod disk;
mod head;
pub mod headers;
pub mod key;
pub mod object;
pub mod rfc;
pub mod spec;
mod store;
pub mod stv;
mod tier;
pub mod ttl;
pub mod xkey;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use common::counters::{Stv as F, C};
use common::segment::SegmentWriter;
use tokio::sync::watch;

pub use self::head::BusyState;
use self::head::{Busy, Head, HeadMap};
pub use self::key::Key;
pub use self::object::{vary_value, Kind, ObjCore, ObjHeaders, ObjRef, Object, OBJ_OVERHEAD};
use self::stv::Stvs;
pub use self::ttl::Bounds;

const SHARDS: usize = 64;

/// The fetching request's hold on a busy marker. Dropped without
/// [`Cache::insert`], it fails the waiters.
pub struct BusyGuard {
    cache: Weak<CacheInner>,
    key: Key,
    busy: Arc<Busy>,
    done: bool,
}

impl BusyGuard {
    pub fn key(&self) -> Key {
        self.key
    }
    /// Wake the waiters with `state` and clear the marker.
    fn settle(&mut self, state: BusyState) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(c) = self.cache.upgrade() {
            let mut shard = c.shard(self.key);
            if let Some(h) = shard.get_mut(&self.key) {
                h.remove_busy(&self.busy);
                if h.idle() {
                    shard.remove(&self.key);
                    c.count(C::NObjecthead, -1);
                }
            }
        }
        self.busy.tx.send_replace(state);
    }
}

impl BusyGuard {
    /// Give the fetch up without an object (vcl_miss chose pass or synth):
    /// the waiters look up again instead of failing.
    pub fn release(mut self) {
        self.settle(BusyState::Ready);
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.settle(BusyState::Failed);
    }
}

/// What a lookup found.
pub enum Lookup {
    /// A fresh object.
    Hit(ObjRef),
    /// A stale object within grace; with a guard when this request should
    /// start the background refresh.
    Grace(ObjRef, Option<BusyGuard>),
    HitForMiss(ObjRef),
    HitForPass(ObjRef),
    /// Nothing usable: this request fetches. `stale` is an object within
    /// grace or keep whose validators can make the fetch conditional.
    Miss {
        guard: BusyGuard,
        stale: Option<ObjRef>,
    },
    /// Another request is fetching this object (this variant, as far as
    /// can be told): wait, then look up again.
    Busy(watch::Receiver<BusyState>),
}

pub struct CacheInner {
    shards: Vec<Mutex<HeadMap>>,
    /// The stores. Lock order: a shard, then a store.
    stvs: Stvs,
    /// Lock order: a shard, then the bans (never the other way round).
    bans: Mutex<ban::list::BanList>,
    newest_ban: AtomicU64,
    seg: Option<Arc<SegmentWriter>>,
    /// Objects by surrogate key (xkey).
    xkeys: xkey::Xkeys,
    /// With gzip support on, Vary: Accept-Encoding does not split
    /// variants: one gzip object serves every client (Varnish's vry_cmp,
    /// which skips it when matching, not when storing).
    vary_skips_ae: AtomicBool,
    /// RFC mode (feature rfc9111): a variant stored under Vary:
    /// Accept-Language also serves a request whose one most preferred
    /// language is its Content-Language (the origin's choice for it).
    vary_negotiates: AtomicBool,
    /// The most objects one allocation may evict (nuke_limit).
    nuke_limit: AtomicU32,
}

/// The cache. Cheap to clone (an Arc).
#[derive(Clone)]
pub struct Cache {
    inner: Arc<CacheInner>,
}

/// Does an object list surrogate keys (a header lookup; the keys are
/// parsed only for those that do)?
fn tagged(oc: &ObjRef) -> bool {
    xkey::HEADERS.iter().any(|h| oc.header_ref(h).is_some())
}

/// Do two objects' Vary values select the same requests (Accept-Encoding
/// left out when `skip_ae`)?
fn same_vary(a: Option<&object::Vary>, b: Option<&object::Vary>, skip_ae: bool) -> bool {
    match (a, b) {
        (Some(a), Some(b)) if skip_ae => {
            let keep = |v: &&(String, Option<bytes::Bytes>)| v.0 != "accept-encoding";
            a.iter().filter(keep).eq(b.iter().filter(keep))
        }
        _ => a == b,
    }
}

impl CacheInner {
    fn shard(&self, key: Key) -> MutexGuard<'_, HeadMap> {
        self.shards[key.shard(SHARDS)].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, c: C, delta: i64) {
        if let Some(s) = &self.seg {
            if delta >= 0 {
                s.add(c, delta as u64);
            } else {
                s.sub(c, delta.unsigned_abs());
            }
        }
    }

    /// Take an object out of the index (if still there) and free its
    /// bytes (and its record on disk).
    fn remove(&self, oc: &ObjRef) -> bool {
        self.remove_as(oc, true)
    }

    /// The same; `kill` false when its disk segment was taken back (its
    /// record is being written over: leave it).
    fn remove_as(&self, oc: &ObjRef, kill: bool) -> bool {
        if oc.dead.swap(true, Ordering::AcqRel) {
            return false;
        }
        {
            let mut shard = self.shard(oc.key);
            if let Some(h) = shard.get_mut(&oc.key) {
                let before = h.len();
                h.retain(|v| !ObjRef::ptr_eq(v, oc));
                let found = h.len() < before;
                if h.idle() {
                    shard.remove(&oc.key);
                    self.count(C::NObjecthead, -1);
                }
                if found {
                    shard.refs.sub(oc.ban_id.load(Ordering::Acquire));
                }
            }
        }
        self.count(C::NObject, -1);
        self.count(C::NObjectcore, -1);
        if tagged(oc) {
            let gone = self.xkeys.remove(oc, &xkey::keys_of(oc));
            self.count(C::XkeyKeys, -(gone as i64));
        }
        self.free(oc, kill);
        true
    }

    /// Give back what `oc` was charged and take it out of the ring and
    /// the expiry heap (a disk object: its memory copy, its place in its
    /// store and, when `kill`, its record).
    fn free(&self, oc: &ObjCore, kill: bool) {
        if !oc.stored.swap(false, Ordering::AcqRel) {
            return;
        }
        self.release(oc);
        if oc.disk().is_some() {
            self.free_disk(oc, kill);
        } else {
            self.stvs.get(oc.stv).count(F::GAlloc, -1);
        }
    }

    /// Give back the memory `oc` was charged (for a disk object: its
    /// memory copy, which goes).
    fn release(&self, oc: &ObjCore) {
        self.uncharge(oc);
        if let Some(d) = oc.disk() {
            drop(d.set_ram(None));
        }
    }

    /// Give back the memory `oc` was charged, and take it out of its ring
    /// (a disk object keeps its memory copy until it is written).
    fn uncharge(&self, oc: &ObjCore) {
        let s = self.stvs.get(self.stvs.ram_of(oc.stv));
        let n = oc.charged.swap(0, Ordering::AcqRel);
        let gone = {
            let mut st = s.store();
            st.used = st.used.saturating_sub(n);
            // Without a memory tier a disk object's copy is in no ring.
            if oc.disk().is_none() || st.tier {
                st.forget(oc)
            } else {
                None
            }
        };
        drop(gone);
        s.freed(n);
    }

    /// Charge `n` more bytes for `oc`, evicting least recently used objects
    /// to make room (a disk object's memory copy makes room by leaving
    /// memory alone). False if it cannot fit even in an empty store.
    fn charge(&self, oc: &ObjRef, n: u64) -> bool {
        let s = self.stvs.get(self.stvs.ram_of(oc.stv));
        s.count(F::CReq, 1);
        let total = oc.charged.load(Ordering::Acquire) + n;
        if total > s.budget {
            s.count(F::CFail, 1);
            return false;
        }
        let mut nuked = 0;
        loop {
            let victim = {
                let mut st = s.store();
                if st.used + n <= s.budget {
                    st.used += n;
                    oc.charged.fetch_add(n, Ordering::AcqRel);
                    break;
                }
                // As Varnish: at most nuke_limit evictions for one
                // allocation, then it fails (n_lru_limited).
                if nuked >= self.nuke_limit.load(Ordering::Relaxed) {
                    drop(st);
                    self.count(C::NLruLimited, 1);
                    s.count(F::CFail, 1);
                    return false;
                }
                match st.victim(oc) {
                    Some(v) => v,
                    None => {
                        drop(st);
                        s.count(F::CFail, 1);
                        return false;
                    }
                }
            };
            nuked += 1;
            // A disk object whose write is queued keeps its body there.
            if victim.disk().is_some_and(|d| d.loc.get().is_some()) {
                self.release(&victim);
            } else if self.remove(&victim) {
                self.count(C::NLruNuked, 1);
            }
        }
        s.allocated(n);
        true
    }
}

impl Cache {
    /// The most objects one allocation may evict (nuke_limit).
    pub fn set_nuke_limit(&self, n: u32) {
        self.inner.nuke_limit.store(n, Ordering::Relaxed);
    }

    /// Whether Vary: Accept-Encoding splits variants (not while
    /// http_gzip_support is on).
    pub fn set_gzip_support(&self, on: bool) {
        self.inner.vary_skips_ae.store(on, Ordering::Relaxed);
    }

    /// RFC mode's language selection under Vary: Accept-Language.
    pub fn set_rfc9111(&self, on: bool) {
        self.inner.vary_negotiates.store(on, Ordering::Relaxed);
    }

    /// A cache with one malloc store of `budget` bytes (s0) and Transient.
    pub fn new(budget: u64, seg: Option<Arc<SegmentWriter>>) -> Cache {
        let specs = [spec::Spec { name: "s0".into(), kind: spec::Kind::Malloc { size: budget } }];
        Cache::open(&spec::resolve(&specs).expect("one malloc store"), seg).expect("malloc stores open")
    }

    /// A cache with the stores `specs` name (resolved: named, with
    /// Transient), the objects of persistent ones read back into it.
    pub fn open(specs: &[spec::Spec], seg: Option<Arc<SegmentWriter>>) -> Result<Cache, String> {
        let (stvs, found) = Stvs::open(specs, seg.as_ref())?;
        let shards = (0..SHARDS).map(|_| Mutex::new(HeadMap::default())).collect();
        let c = Cache {
            inner: Arc::new(CacheInner {
                shards,
                stvs,
                bans: Mutex::new(ban::list::BanList::default()),
                newest_ban: AtomicU64::new(0),
                seg,
                xkeys: xkey::Xkeys::default(),
                vary_skips_ae: AtomicBool::new(true),
                vary_negotiates: AtomicBool::new(false),
                nuke_limit: AtomicU32::new(50),
            }),
        };
        c.initial_ban();
        c.recover(found);
        Ok(c)
    }

    /// The first store's budget.
    pub fn budget(&self) -> u64 {
        self.inner.stvs.get(0).budget
    }

    /// Bytes charged to the first store now.
    pub fn used(&self) -> u64 {
        self.inner.stvs.get(0).store().used
    }

    /// The stores.
    pub fn stores(&self) -> &Stvs {
        &self.inner.stvs
    }

    /// A store's bytes in use and free, by name.
    pub fn space(&self, name: &str) -> Option<(u64, u64)> {
        let s = self.inner.stvs.get(self.inner.stvs.find(name)?);
        let used = s.store().used;
        Some((used, s.budget.saturating_sub(used)))
    }

    /// Look `key` up for a request whose headers are `req` at `now`.
    pub fn lookup<'a, I>(&self, key: &[u8], req: I, now: f64) -> Lookup
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        self.try_lookup(Key::of(key), req, Bounds::default(), false, now, false).expect("lookup without the ban check always answers")
    }

    /// Look `key` up for the request with `url`, headers `req` and
    /// req.ttl/req.grace `bounds`, after testing the objects under it
    /// against the bans they have not seen (and removing those that
    /// match). The usual case, nothing under the key waiting for a ban
    /// test, takes one pass over the index.
    pub fn lookup_banned<'a, I>(&self, key: &[u8], url: &[u8], req: I, bounds: Bounds, now: f64) -> Lookup
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        self.lookup_request(key, url, req, bounds, false, now)
    }

    /// [`Cache::lookup_banned`]; with `ignore_vary` (req.hash_ignore_vary)
    /// any variant does, the most recent first.
    pub fn lookup_request<'a, I>(&self, key: &[u8], url: &[u8], req: I, bounds: Bounds, ignore_vary: bool, now: f64) -> Lookup
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        let key = Key::of(key);
        if let Some(found) = self.try_lookup(key, req.clone(), bounds, ignore_vary, now, true) {
            return found;
        }
        self.check_bans_key(key, url, req.clone());
        self.try_lookup(key, req, bounds, ignore_vary, now, false).expect("lookup without the ban check always answers")
    }

    /// The lookup (as Varnish's HSH_Lookup); None (nothing changed) when
    /// `bans` asks to stop at a variant that has bans to be tested
    /// against first. An object is fresh, or stale within grace, as far
    /// as `bounds` allows; a request waits only for a fetch of its own
    /// variant, and only when it has no stale object it accepts.
    fn try_lookup<'a, I>(&self, key: Key, req: I, bounds: Bounds, ignore_vary: bool, now: f64, bans: bool) -> Option<Lookup>
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        let c = &self.inner;
        let newest = c.newest_ban.load(Ordering::Acquire);
        let mut shard = c.shard(key);
        let (head, new) = shard.get_or_insert(key);
        if new {
            c.count(C::NObjecthead, 1);
        } else if bans && head.variants().any(|o| o.ban_id.load(Ordering::Acquire) < newest) {
            return None;
        }
        let skip_ae = c.vary_skips_ae.load(Ordering::Relaxed);
        let negotiates = c.vary_negotiates.load(Ordering::Relaxed);
        // The object's Content-Language is looked up only where Vary asks
        // for it (a search of the stored head, once on every hit before).
        let selects = |vary: Option<&object::Vary>, oc: Option<&ObjRef>| match vary {
            None => true,
            Some(_) if ignore_vary => true,
            Some(v) => v.iter().all(|(name, want)| {
                (skip_ae && name == "accept-encoding")
                    || vary_value(req.clone(), name) == *want
                    || (negotiates
                        && name == "accept-language"
                        && rfc::language_selects(req.clone(), oc.and_then(|o| o.header_ref("content-language"))))
            }),
        };
        let mut stale = None;
        let mut fresh = None;
        // Objects without a TTL are never found (Varnish skips them too).
        // The newest first, as Varnish keeps them: a hit-for-miss without
        // Vary does not hide a variant cached after it.
        for oc in head.variants().rev().filter(|oc| !oc.is_dead() && oc.obj.life().ttl > 0.0 && selects(oc.obj.vary(), Some(oc))) {
            let life = oc.obj.life();
            if life.fresh_for(bounds, now) {
                // Ignoring Vary, the most recent of them.
                if fresh.as_ref().is_none_or(|f: &ObjRef| life.t_origin > f.obj.life().t_origin) {
                    fresh = Some(oc.clone());
                }
                if !ignore_vary {
                    break;
                }
                continue;
            }
            // The newest expired object (Varnish's exp_oc; one that is
            // fresh but older than req.ttl allows is neither a hit nor
            // stale): a hit-for-miss makes a private miss at once, a
            // normal one can be served in grace or revalidated.
            let expired = !life.fresh(now) && (life.in_grace(now) || life.in_keep(now));
            if expired && oc.obj.kind != Kind::HitForPass && stale.as_ref().is_none_or(|s: &ObjRef| life.t_origin > s.obj.life().t_origin) {
                stale = Some(oc.clone());
            }
        }
        if let Some(oc) = fresh {
            return Some(match oc.obj.kind {
                Kind::Normal => {
                    drop(shard);
                    self.touch(&oc);
                    Lookup::Hit(oc)
                }
                Kind::HitForMiss => Lookup::HitForMiss(oc),
                Kind::HitForPass => Lookup::HitForPass(oc),
            });
        }
        if let Some(s) = stale.take() {
            if s.obj.kind == Kind::HitForMiss {
                return Some(Lookup::HitForMiss(s));
            }
            stale = Some(s);
        }
        // A fetch in progress for another variant is not waited for.
        let busy = head.busy().find(|b| selects(b.vary.as_ref(), None)).map(|b| b.tx.subscribe());
        if let Some(s) = stale.as_ref().filter(|s| s.obj.life().in_grace_for(bounds, now)) {
            let guard = if busy.is_none() { Some(self.new_busy(head, key, req)) } else { None };
            return Some(Lookup::Grace(s.clone(), guard));
        }
        if let Some(rx) = busy {
            return Some(Lookup::Busy(rx));
        }
        let guard = self.new_busy(head, key, req);
        Some(Lookup::Miss { guard, stale })
    }

    /// A busy marker under `head` for the fetch of the request with
    /// headers `req`, with the variant it is expected to bring: the Vary
    /// of an object already there (its header names, in its order), with
    /// this request's values.
    fn new_busy<'a, I>(&self, head: &mut Head, key: Key, req: I) -> BusyGuard
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        let known = head.variants().filter(|o| !o.is_dead()).find_map(|o| o.obj.vary());
        let vary = known.map(|v| Box::new(v.iter().map(|(name, _)| (name.clone(), vary_value(req.clone(), name))).collect()));
        let (tx, _) = watch::channel(BusyState::Fetching);
        let busy = Arc::new(Busy { tx, vary });
        head.add_busy(busy.clone());
        BusyGuard { cache: Arc::downgrade(&self.inner), key, busy, done: false }
    }

    /// A miss that does not coalesce (hit-for-miss, or a waiter's second
    /// chance): no busy marker, but the result may be inserted.
    pub fn private_guard(&self, key: &[u8]) -> BusyGuard {
        self.private_guard_for(Key::of(key))
    }

    /// The same, for a head's key.
    pub fn private_guard_for(&self, key: Key) -> BusyGuard {
        let (tx, _) = watch::channel(BusyState::Fetching);
        BusyGuard { cache: Weak::new(), key, busy: Arc::new(Busy { tx, vary: None }), done: true }
    }

    /// A hit marks the object referenced; eviction gives it a second
    /// chance (CLOCK). No lock: a hit never waits on the LRU.
    fn touch(&self, oc: &ObjRef) {
        if !oc.referenced.load(Ordering::Relaxed) {
            oc.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// Put an object in the index under the guard's key, replacing variants
    /// with the same Vary values, and wake the waiters. Returns the core, or
    /// None if it did not fit in storage (it is then delivered but not kept).
    pub fn insert(&self, guard: BusyGuard, obj: Object) -> (ObjRef, bool) {
        let stv = self.inner.stvs.next();
        self.insert_in(guard, obj, stv)
    }

    /// The same, in store `stv` (an index in [`stores`](Self::stores)). A
    /// disk store's object is written by [`persist`](Self::persist) once
    /// its body is complete (the caller takes the body it delivers
    /// first: the copy in memory may go once written);
    /// ESI pages and objects with a Brotli copy stay in memory (the
    /// memory tier, or Transient without one).
    pub fn insert_in(&self, mut guard: BusyGuard, obj: Object, stv: u8) -> (ObjRef, bool) {
        let c = &self.inner;
        let key = guard.key;
        let expires = obj.life.expires_at();
        let in_memory = obj.coding.as_deref().is_some_and(|k| k.esi || k.br.is_some());
        let stv = match c.stvs.get(stv).disk.is_some() && in_memory {
            true => c.stvs.tier.unwrap_or(c.stvs.transient),
            false => stv,
        };
        let disk = c.stvs.get(stv).disk.is_some().then(crate::util::now);
        let start = object::Start { key, ban_id: c.newest_ban.load(Ordering::Acquire), stored: true, stv, disk };
        let (oc, bytes) = ObjRef::new(obj, start);
        c.stvs.get(stv).store().add(&oc, expires);
        if disk.is_none() {
            c.stvs.get(stv).count(F::GAlloc, 1);
        } else if let Some(t) = c.stvs.tier {
            c.stvs.get(t).store().add_resident(&oc);
        }
        // A disk object's memory copy that does not fit is dropped once
        // written; anything else that does not fit is not kept.
        if !c.charge(&oc, bytes) {
            if disk.is_some() {
                c.uncharge(&oc);
            } else {
                oc.dead.store(true, Ordering::Release);
                c.free(&oc, true);
                guard.settle(BusyState::Ready);
                return (oc, false);
            }
        }
        self.index(&oc);
        guard.settle(BusyState::Ready);
        (oc, true)
    }

    /// Put a new object in the index: it replaces the variants with its
    /// Vary values.
    fn index(&self, oc: &ObjRef) {
        let c = &self.inner;
        let key = oc.key;
        let replaced: Vec<ObjRef> = {
            let mut shard = c.shard(key);
            let (head, new) = shard.get_or_insert(key);
            if new {
                c.count(C::NObjecthead, 1);
            }
            let skip_ae = c.vary_skips_ae.load(Ordering::Relaxed);
            // An object with no TTL is never found (Varnish's lookup skips
            // it): it does not replace the one it would, which may still
            // serve in grace.
            let no_ttl = oc.obj.life().ttl <= 0.0;
            let same = |o: &ObjRef| !no_ttl && same_vary(o.obj.vary(), oc.obj.vary(), skip_ae);
            let old: Vec<_> = head.variants().filter(|o| same(o)).cloned().collect();
            head.retain(|o| !same(o));
            head.push(oc.clone());
            for o in &old {
                shard.refs.sub(o.ban_id.load(Ordering::Acquire));
            }
            shard.refs.add(oc.ban_id.load(Ordering::Acquire));
            old
        };
        c.count(C::NObject, 1);
        c.count(C::NObjectcore, 1);
        if tagged(oc) {
            let new = c.xkeys.add(oc, &xkey::keys_of(oc));
            c.count(C::XkeyKeys, new as i64);
        }
        for o in replaced {
            c.remove(&o);
        }
    }

    /// A core for an object that is delivered but never indexed
    /// (uncacheable responses, passes through the fetch path).
    pub fn private(&self, obj: Object) -> ObjRef {
        let stv = self.inner.stvs.transient;
        ObjRef::new(obj, object::Start { key: Key::PRIVATE, ban_id: u64::MAX, stored: false, stv, disk: None }).0
    }

    /// Charge body bytes as they arrive (`so_far` the body's length with
    /// them). If the object no longer fits, it leaves the index (its
    /// current readers finish; nobody else gets it) and false says so:
    /// its body is then in transit, not kept.
    pub fn grow(&self, oc: &ObjRef, n: u64, so_far: u64) -> bool {
        if oc.is_dead() || !oc.stored() {
            return !oc.stored();
        }
        if let Some(d) = oc.disk() {
            // Larger than a segment of its disk store: it cannot be
            // written, so it is not held whole to find that out.
            let s = self.inner.stvs.get(oc.stv);
            if s.disk.as_ref().is_some_and(|k| so_far > k.seg_size) {
                s.count(F::CFail, 1);
                s.count(F::CDiskWriteFail, 1);
                self.inner.remove(oc);
                return false;
            }
            // A disk object's copy outside the memory tier's ring (no
            // tier, or too large for it) is not charged: it goes once
            // written.
            if d.mem_slot.load(Ordering::Relaxed) == object::NONE {
                return true;
            }
        }
        if self.inner.charge(oc, n) {
            return true;
        }
        // A disk object too large for the memory tier still goes to disk:
        // its copy, uncharged, goes once written.
        if oc.disk().is_some() {
            self.inner.uncharge(oc);
            true
        } else {
            self.inner.remove(oc);
            false
        }
    }

    /// Remove an object whose fetch failed (never keep a truncated body).
    pub fn kill(&self, oc: &ObjRef) {
        self.inner.remove(oc);
    }

    /// xkey.purge (`soft`: xkey.softpurge): the objects under any of the
    /// keys in `keys` are removed (made stale at `now`, grace and keep
    /// kept); how many, counted as vmod_xkey counts: key by key, a hard
    /// purge every object it finds (one under two keys named counts
    /// twice), a soft one only those still fresh. Costs the objects
    /// touched, not a walk.
    pub fn xkey_purge(&self, keys: &[u8], soft: bool, now: f64) -> usize {
        let list: Vec<&[u8]> = xkey::split(keys).collect();
        let mut n = 0;
        for oc in self.inner.xkeys.objects(&list).into_iter().flatten() {
            if soft {
                if !oc.is_dead() && oc.obj.life().ttl_left(now) > 0.0 {
                    self.rearm(&oc, now, 0.0, None, None);
                    n += 1;
                }
            } else {
                self.inner.remove(&oc);
                n += 1;
            }
        }
        let (calls, objs) = if soft { (C::XkeySoftpurges, C::XkeyObjSoftpurged) } else { (C::XkeyPurges, C::XkeyObjPurged) };
        self.inner.count(calls, 1);
        self.inner.count(objs, n as i64);
        n
    }

    /// Surrogate keys indexed now.
    pub fn xkeys(&self) -> usize {
        self.inner.xkeys.len()
    }

    /// purge.soft(): every variant under `key` fresh for `ttl` more
    /// seconds at most, with this grace and keep (None: unchanged); how
    /// many.
    pub fn soft_purge(&self, key: &[u8], now: f64, ttl: f64, grace: Option<f64>, keep: Option<f64>) -> usize {
        let key = Key::of(key);
        let victims: Vec<ObjRef> = self.inner.shard(key).get(&key).map(|h| h.variants().cloned().collect()).unwrap_or_default();
        for v in &victims {
            self.rearm(v, now, ttl, grace, keep);
        }
        victims.len()
    }

    /// A soft purge of `oc`: fresh for `ttl` more seconds at most, grace
    /// and keep as given (None: unchanged). Its place in the expiry heap
    /// moves with it, so it leaves when its grace and keep end, and a
    /// persistent store's record is rewritten.
    fn rearm(&self, oc: &ObjRef, now: f64, ttl: f64, grace: Option<f64>, keep: Option<f64>) {
        oc.obj.rearm(now, ttl, grace, keep);
        self.inner.stvs.get(oc.stv).store().retime(oc, oc.obj.life().expires_at());
        self.record_life(oc);
    }

    /// Remove every variant under `key`; returns how many.
    pub fn purge(&self, key: &[u8]) -> usize {
        let key = Key::of(key);
        let victims: Vec<ObjRef> = self.inner.shard(key).get(&key).map(|h| h.variants().cloned().collect()).unwrap_or_default();
        victims.iter().filter(|v| self.inner.remove(v)).count()
    }

    /// Drop objects whose ttl + grace + keep ended before `now`; returns how many.
    pub fn expire(&self, now: f64) -> usize {
        let due: Vec<ObjRef> = self.inner.stvs.all.iter().flat_map(|s| s.store().expired(now)).collect();
        let mut n = 0;
        for oc in due {
            if self.inner.remove(&oc) {
                n += 1;
            }
        }
        self.inner.count(C::NExpired, n as i64);
        n
    }

    /// Number of objects in the index.
    pub fn objects(&self) -> usize {
        self.inner.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).values().map(|h| h.len()).sum::<usize>()).sum()
    }
}

#[cfg(test)]
mod tests;
