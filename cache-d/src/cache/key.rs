//! An object head's key.

/// An object head's key: a 128-bit keyed hash of the hash data vcl_hash
/// gathered (Varnish keys heads by a SHA-256 digest of it). Sixteen bytes
/// per head, whatever the URL's length, and no allocation of its own; the
/// hash keys are random per process, so nobody can aim two URLs at one
/// head. (A store that outlives the process will need a stable digest
/// here, such as Varnish's SHA-256, keyed by a secret kept with it.)
///
/// Two u64 rather than a u128: 8-byte alignment keeps the object core
/// (which holds its key) 16 bytes smaller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key(pub(super) u64, pub(super) u64);

impl Key {
    pub fn of(data: &[u8]) -> Key {
        use std::hash::BuildHasher;
        static STATES: std::sync::OnceLock<(std::collections::hash_map::RandomState, std::collections::hash_map::RandomState)> =
            std::sync::OnceLock::new();
        let (a, b) = STATES.get_or_init(Default::default);
        Key(a.hash_one(data), b.hash_one(data))
    }

    /// Which of `n` shards the key's head is in.
    pub fn shard(self, n: usize) -> usize {
        self.0 as usize % n
    }
}
