//! An object head's key.

use std::hash::Hasher;
use std::sync::OnceLock;

/// An object head's key: a 128-bit keyed hash (SipHash-1-3) of the hash
/// data vcl_hit gathered (Varnish keys heads by a SHA-256 digest of it).
/// Sixteen bytes per head, whatever the URL's length, and no allocation
/// of its own. The hash key is a secret: random per process, so nobody
/// can aim two URLs at one head, unless a persistent store brings one
/// back (it keeps the secret its keys were made with in its header).
///
/// Two u64 rather than a u128: 8-byte alignment keeps the object core
/// (which holds its key) 16 bytes smaller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(pub(super) u64, pub(super) u64);

static SECRET: OnceLock<(u64, u64)> = OnceLock::new();

impl Key {
    /// A private object's (a pass's page): in no index.
    pub const PRIVATE: Key = Key(0, 0);

    pub fn of(data: &[u8]) -> Key {
        let (k0, k1) = Key::secret();
        let mut h = siphasher::sip128::SipHasher13::new_with_keys(k0, k1);
        h.write(data);
        let v = siphasher::sip128::Hasher128::finish128(&h);
        Key(v.h1, v.h2)
    }

    /// The process's hash key (random unless [`adopt`](Self::adopt)ed).
    pub fn secret() -> (u64, u64) {
        *SECRET.get_or_init(|| {
            use std::hash::BuildHasher;
            let s = std::collections::hash_map::RandomState::new();
            (s.hash_one(1u64), s.hash_one(2u64))
        })
    }

    /// Use `s` as the hash key if no key was made yet; whether the
    /// process's key is `s` now.
    pub fn adopt(s: (u64, u64)) -> bool {
        *SECRET.get_or_init(|| s) == s
    }

    /// Which of `n` shards the key's head is in.
    pub fn shard(self, n: usize) -> usize {
        self.0 as usize % n
    }
}
