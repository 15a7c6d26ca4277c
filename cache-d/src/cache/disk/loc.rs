//! Where a disk object is.

/// Where an object's record and body are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub seg: u32,
    pub seq: u64,
    /// File offsets of the record and the body.
    pub rec_off: u64,
    pub body_off: u64,
    pub body_len: u64,
    pub body_crc: u32,
    /// Bytes it takes on disk (record and body).
    pub bytes: u64,
}
