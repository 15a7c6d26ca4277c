//! The shared-memory segment: a memory-mapped file in the instance directory.
//!
//! Why a file-backed mmap and not the `shared_memory` crate: readers must find
//! the segment from the instance directory alone, tell a segment replaced by a
//! restarted daemon (a new inode) from the one they hold, and keep reading a
//! segment whose daemon died; a plain file with `memmap2` gives all three
//! with the file system's own semantics (as Varnish's `_.vsm_*` files do),
//! while `shared_memory`'s OS ids and owner-unlinks-on-drop model would add a
//! second name to keep in step and give none of them.
//!
//! Layout (native-endian; offsets in bytes):
//!
//! | off | field |
//! |-----|-------|
//! | 0   | magic `CKITSEG\0` |
//! | 8   | layout version (u32) |
//! | 12  | header size (u32) = 128 |
//! | 16  | creator pid (u32) |
//! | 20  | state (u32): 0 starting, 1 running, 2 stopped |
//! | 24  | generation (u64): one more than the segment it replaced |
//! | 32  | creation time, ms since the epoch (u64) |
//! | 40  | heartbeat, ms since the epoch (u64), updated every second |
//! | 48  | counter names offset (u64) |
//! | 56  | counter count (u32) |
//! | 60  | value shards (u32) |
//! | 64  | counter values offset (u64) |
//! | 72  | shard stride in bytes (u64) |
//! | 80  | log section offset (u64) |
//! | 88  | log section length (u64) |
//! | 96  | file length (u64) |
//! | 104 | names generation (u64): odd while a dynamic name changes |
//!
//! Counter names: one 256-byte entry per counter slot: name (128, NUL
//! padded: room for `VBE.<vcl>.<backend>.<field>`), kind, level, format,
//! 0, description (124, NUL padded). The
//! first slots hold [`counters::TABLE`]; the [`DYN_SLOTS`] after them are
//! dynamic (per-backend `VBE.*` counters), free while their name is empty.
//! The child names and frees them under a seqlock: the names generation
//! goes odd, the entry (and its values, zeroed) change, it goes even again;
//! a reader copies the names and keeps the copy only if the generation was
//! even and the same before and after ([`Segment::refresh`]).
//! Counter values: `shards` arrays of u64, each `stride` bytes (a multiple of
//! 64). Each writer thread adds to its own shard, so hot-path increments never
//! share a cache line between cores; readers sum the shards (wrapping).
//! The log section is described in [`crate::log::ring`].

mod layout;
mod reader;
mod sigbus;
#[cfg(test)]
mod tests;
mod writer;

pub use layout::*;
pub use reader::{CounterInfo, Health, Segment};
pub use sigbus::exit_on_sigbus;
pub use writer::SegmentWriter;
