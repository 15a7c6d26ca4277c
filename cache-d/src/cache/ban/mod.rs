//! The ban list: appended in O(1), tested lazily on lookup (each object
//! remembers the newest ban it was tested against) and by the lurker for
//! bans that need no request; completed, duplicate and deletable bans as
//! Varnish marks them.

pub mod expr;
pub mod list;
pub mod lurker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::counters::C;

use self::expr::ReqView;
use self::list::{Ban, BanInfo, BanList};
use crate::cache::object::ObjRef;
use crate::cache::Cache;

impl Cache {
    fn bans(&self) -> std::sync::MutexGuard<'_, BanList> {
        self.inner.bans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ban every cache starts with (completed, empty spec).
    pub(super) fn initial_ban(&self) {
        let mut b = self.bans();
        b.next = 1;
        b.list.push(Arc::new(Ban {
            id: 1,
            time: crate::util::now(),
            spec: String::new(),
            conds: Vec::new(),
            req: false,
            completed: AtomicBool::new(true),
        }));
        self.inner.newest_ban.store(1, Ordering::Release);
        self.inner.count(C::Bans, 1);
        self.inner.count(C::BansAdded, 1);
        self.inner.count(C::BansCompleted, 1);
    }

    /// Add a ban from `ban` arguments. O(1) plus marking older duplicates
    /// (when `dups`), which Varnish also does on add.
    pub fn ban(&self, args: &[String], now: f64, dups: bool) -> Result<u64, expr::BanError> {
        self.add_ban(args, now, dups, true)
    }

    /// The same; `journal`: also in the persistent stores' journals (not
    /// for the bans read back from them).
    pub(super) fn add_ban(&self, args: &[String], now: f64, dups: bool, journal: bool) -> Result<u64, expr::BanError> {
        let (conds, spec) = expr::parse(args)?;
        if journal {
            self.journal_ban(args, now);
        }
        let req = expr::has_req(&conds);
        let c = &self.inner;
        let mut b = self.bans();
        b.next += 1;
        let id = b.next;
        // obj.ttl and obj.age bans depend on when they were made.
        if dups && !spec.contains("obj.ttl") && !spec.contains("obj.age") {
            for old in b.list.iter().filter(|o| o.spec == spec && !o.completed()) {
                old.completed.store(true, Ordering::Release);
                c.count(C::BansDups, 1);
                c.count(C::BansCompleted, 1);
            }
        }
        b.list.push(Arc::new(Ban { id, time: now, spec, conds, req, completed: AtomicBool::new(false) }));
        c.newest_ban.store(id, Ordering::Release);
        c.count(C::BansAdded, 1);
        c.count(C::Bans, 1);
        c.count(if req { C::BansReq } else { C::BansObj }, 1);
        drop(b);
        if !req {
            self.kick_lurker();
        }
        Ok(id)
    }

    /// Test the variants under `key` against the bans newer than they have
    /// seen; kill those that match. Call before [`Cache::lookup`].
    pub fn check_bans<'a, I>(&self, key: &[u8], url: &[u8], headers: I)
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        self.check_bans_key(crate::cache::Key::of(key), url, headers)
    }

    /// The same, for a head's key.
    pub fn check_bans_key<'a, I>(&self, key: crate::cache::Key, url: &[u8], headers: I)
    where
        I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        let newest = self.inner.newest_ban.load(Ordering::Acquire);
        let pending: Vec<ObjRef> = match self.inner.shard(key).get(&key) {
            Some(h) => h.variants().filter(|o| o.ban_id.load(Ordering::Acquire) < newest).cloned().collect(),
            None => return,
        };
        if pending.is_empty() {
            return;
        }
        let header = |name: &str| crate::cache::vary_value(headers.clone(), name).map(|b| b.to_vec());
        let view = ReqView { url, header: &header };
        for oc in pending {
            if self.test(&oc, Some(&view), newest) {
                self.inner.count(C::BansObjKilled, 1);
                self.inner.remove(&oc);
            }
        }
    }

    /// Test `oc` against the bans newer than it has seen (all of them, or
    /// only request-free ones when `req` is None). True if one matches.
    fn test(&self, oc: &ObjRef, req: Option<&ReqView<'_>>, newest: u64) -> bool {
        let seen = oc.ban_id.load(Ordering::Acquire);
        let todo: Vec<Arc<Ban>> = {
            let b = self.bans();
            b.list.iter().rev().take_while(|x| x.id > seen).filter(|x| !x.completed() && (req.is_some() || !x.req)).cloned().collect()
        };
        // A lookup counts as Varnish does: one object tested, and the
        // tests of the bans up to the one that matched.
        let mut tests = 0;
        let hit = todo.iter().any(|x| {
            tests += x.conds.len() as i64;
            expr::matches(&x.conds, oc, req, x.time)
        });
        if req.is_some() {
            self.inner.count(C::BansTested, 1);
            self.inner.count(C::BansTestsTested, tests);
        } else {
            self.inner.count(C::BansLurkerTested, todo.len() as i64);
        }
        if !hit && req.is_some() {
            self.tested_up_to(oc, newest);
        }
        // It may have been the last object on the oldest ban.
        if req.is_some() && self.bans().list.get(1).is_some_and(|x| seen < x.id) {
            self.kick_lurker();
        }
        hit
    }

    /// `oc` has been tested against every ban up to `newest`. Under its
    /// shard's lock, so that the shard's count of objects per ban stays
    /// exact (an object no longer in the index is no longer counted).
    fn tested_up_to(&self, oc: &ObjRef, newest: u64) {
        let mut shard = self.inner.shard(oc.key);
        let old = oc.ban_id.load(Ordering::Acquire);
        if newest <= old {
            return;
        }
        oc.ban_id.store(newest, Ordering::Release);
        let indexed = shard.get(&oc.key).is_some_and(|h| h.variants().any(|v| ObjRef::ptr_eq(v, oc)));
        if indexed {
            shard.refs.sub(old);
            shard.refs.add(newest);
        }
    }

    /// The oldest ban an indexed object was last tested up to (the
    /// newest ban when the cache is empty): every older ban can go.
    fn oldest_needed(&self) -> u64 {
        let c = &self.inner;
        let newest = c.newest_ban.load(Ordering::Acquire);
        c.shards.iter().filter_map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).refs.oldest()).min().unwrap_or(newest)
    }

    /// One lurker pass at `now` with ban_lurker_age `age`: objects killed.
    pub fn lurk(&self, now: f64, age: f64) -> usize {
        self.lurk_pass(now, age).0
    }

    /// The bans, newest first, with how many objects point at each; a
    /// completed ban shows no expression (Varnish drops it). Listing wakes
    /// the lurker, as Varnish's ban.list does.
    pub fn ban_list(&self) -> Vec<BanInfo> {
        self.kick_lurker();
        let mut refs = std::collections::HashMap::new();
        for shard in &self.inner.shards {
            for (id, n) in shard.lock().unwrap_or_else(|e| e.into_inner()).refs.iter() {
                *refs.entry(id).or_insert(0u64) += u64::from(n);
            }
        }
        self.bans()
            .list
            .iter()
            .rev()
            .map(|b| {
                let (completed, refs) = (b.completed(), refs.get(&b.id).copied().unwrap_or(0));
                BanInfo { time: b.time, refs, completed, spec: if completed { String::new() } else { b.spec.clone() } }
            })
            .collect()
    }
}
