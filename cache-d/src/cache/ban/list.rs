//! The ban list's entries: each ban with its conditions and whether it
//! is completed; what `ban.list` shows of one.

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
}

/// What `ban.list` shows of a ban.
pub struct BanInfo {
    pub time: f64,
    pub refs: u64,
    pub completed: bool,
    pub spec: String,
}
