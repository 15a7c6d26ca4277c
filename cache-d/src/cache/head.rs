//! Object heads and their index. A head holds the variants under one key
//! and the busy markers of the fetches in progress; the index is a hash
//! table of heads, each knowing its key through its object. Sixteen bytes
//! in the table for the usual head, one object and no fetch; a second
//! variant, a busy marker or a head with no object yet (the key is then
//! kept beside them) moves to a box of its own.

use std::sync::Arc;

use hashbrown::HashTable;

use tokio::sync::watch;

use crate::cache::ban::list::BanRefs;
use crate::cache::key::Key;
use crate::cache::object::{ObjRef, Vary};

/// Outcome of the fetch a busy marker stands for, as waiters see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyState {
    Fetching,
    /// Headers are in and the object (or a hit-for-miss) is in the index.
    Ready,
    /// The fetch failed before there was an object.
    Failed,
}

/// The marker of a fetch in progress for an object head.
pub struct Busy {
    pub(super) tx: watch::Sender<BusyState>,
    /// The variant it is expected to bring (Varnish's predictive Vary):
    /// the Vary of an object already under the head, with the values of
    /// the request that started the fetch. Requests for another variant
    /// do not wait for it. None: any request may be served by it.
    pub(super) vary: Option<Vary>,
}

pub(super) struct Head {
    one: Option<ObjRef>,
    more: Option<Box<More>>,
}

struct More {
    key: Key,
    variants: Vec<ObjRef>,
    /// One marker per fetch in progress (one per variant expected).
    busy: Vec<Arc<Busy>>,
}

impl More {
    fn boxed(key: Key) -> Box<More> {
        Box::new(More { key, variants: Vec::new(), busy: Vec::new() })
    }
}

impl Head {
    fn new(key: Key) -> Head {
        Head { one: None, more: Some(More::boxed(key)) }
    }

    pub fn key(&self) -> Key {
        match (&self.one, &self.more) {
            (Some(o), _) => o.key,
            (None, Some(m)) => m.key,
            (None, None) => unreachable!("a head always has an object or its box"),
        }
    }

    pub fn variants(&self) -> impl DoubleEndedIterator<Item = &ObjRef> + Clone {
        self.one.iter().chain(self.more.iter().flat_map(|m| m.variants.iter()))
    }

    pub fn len(&self) -> usize {
        self.one.is_some() as usize + self.more.as_ref().map_or(0, |m| m.variants.len())
    }

    /// Neither an object nor a fetch: the head can leave the index.
    pub fn idle(&self) -> bool {
        self.one.is_none() && self.more.as_ref().is_none_or(|m| m.variants.is_empty() && m.busy.is_empty())
    }

    /// The fetches in progress.
    pub fn busy(&self) -> impl Iterator<Item = &Arc<Busy>> {
        self.more.iter().flat_map(|m| m.busy.iter())
    }

    pub fn add_busy(&mut self, busy: Arc<Busy>) {
        let key = self.key();
        self.more.get_or_insert_with(|| More::boxed(key)).busy.push(busy);
    }

    /// Take `busy`'s marker away (its fetch settled).
    pub fn remove_busy(&mut self, busy: &Arc<Busy>) {
        if let Some(m) = &mut self.more {
            m.busy.retain(|b| !Arc::ptr_eq(b, busy));
        }
        self.tidy();
    }

    pub fn push(&mut self, oc: ObjRef) {
        if self.one.is_none() {
            self.one = Some(oc);
        } else {
            let key = self.key();
            self.more.get_or_insert_with(|| More::boxed(key)).variants.push(oc);
        }
        self.tidy();
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&ObjRef) -> bool) {
        let key = self.key();
        if self.one.as_ref().is_some_and(|o| !keep(o)) {
            self.one = None;
        }
        if let Some(m) = &mut self.more {
            m.variants.retain(&mut keep);
        }
        if self.one.is_none() && self.more.is_none() {
            self.more = Some(More::boxed(key));
        }
        self.tidy();
    }

    /// Keep the inline place filled, and the box only while it holds
    /// something (or the key of a head with no object).
    fn tidy(&mut self) {
        if let Some(m) = &mut self.more {
            if self.one.is_none() && !m.variants.is_empty() {
                self.one = Some(m.variants.remove(0));
            }
            if self.one.is_some() && m.variants.is_empty() && m.busy.is_empty() {
                self.more = None;
            }
        }
    }
}

/// One shard of the index: heads by key, and how many of its objects
/// were last tested up to each ban.
#[derive(Default)]
pub(super) struct HeadMap {
    heads: HashTable<Head>,
    pub refs: BanRefs,
}

/// Keys are random already: the table uses one half as the hash.
fn hash(key: Key) -> u64 {
    key.1
}

impl HeadMap {
    pub fn get(&self, key: &Key) -> Option<&Head> {
        self.heads.find(hash(*key), |h| h.key() == *key)
    }

    pub fn get_mut(&mut self, key: &Key) -> Option<&mut Head> {
        self.heads.find_mut(hash(*key), |h| h.key() == *key)
    }

    /// The head for `key`, a new one if there was none (and whether it is new).
    pub fn get_or_insert(&mut self, key: Key) -> (&mut Head, bool) {
        match self.heads.entry(hash(key), |h| h.key() == key, |h| hash(h.key())) {
            hashbrown::hash_table::Entry::Occupied(e) => (e.into_mut(), false),
            hashbrown::hash_table::Entry::Vacant(e) => (e.insert(Head::new(key)).into_mut(), true),
        }
    }

    pub fn remove(&mut self, key: &Key) {
        if let Ok(e) = self.heads.find_entry(hash(*key), |h| h.key() == *key) {
            e.remove();
        }
    }

    pub fn values(&self) -> impl Iterator<Item = &Head> {
        self.heads.iter()
    }
}
