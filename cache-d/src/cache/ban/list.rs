//! The ban list's entries: each ban with its conditions and whether it
//! is completed; what `ban.list` shows of one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::cache::ban::expr::Cond;

/// One ban.
pub struct Ban {
    pub id: u64,
    pub time: f64,
    pub spec: String,
    pub(crate) conds: Vec<Cond>,
    /// Has request conditions: the lurker cannot test it.
    pub req: bool,
    pub(crate) completed: AtomicBool,
}

impl Ban {
    pub fn completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }
}

/// Bans in id order (oldest first); appending is a push.
#[derive(Default)]
pub struct BanList {
    pub(crate) list: Vec<Arc<Ban>>,
    pub(crate) next: u64,
    /// Wakes the lurker (see super::lurker).
    pub(crate) kick: Arc<tokio::sync::Notify>,
}

/// How many indexed objects have been tested up to each ban (their
/// `ban_id`), kept per index shard under the shard's lock. The lurker
/// reads the oldest ban any object still needs from these instead of
/// walking the cache (Varnish keeps a reference count on each ban for
/// the same reason), and `ban.list` its reference counts.
#[derive(Default)]
pub struct BanRefs(BTreeMap<u64, u32>);

impl BanRefs {
    pub fn add(&mut self, id: u64) {
        *self.0.entry(id).or_insert(0) += 1;
    }

    pub fn sub(&mut self, id: u64) {
        if let Some(n) = self.0.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                self.0.remove(&id);
            }
        }
    }

    /// The oldest ban an object here was last tested up to.
    pub fn oldest(&self) -> Option<u64> {
        self.0.keys().next().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.0.iter().map(|(k, v)| (*k, *v))
    }
}

/// What `ban.list` shows of a ban.
pub struct BanInfo {
    pub time: f64,
    pub refs: u64,
    pub completed: bool,
    pub spec: String,
}
