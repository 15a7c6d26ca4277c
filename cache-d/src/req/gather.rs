//! What is ready to go out of a delivery, gathered: small bytes copied
//! together, stored pieces by reference, sent with vectored writes.

use std::io::IoSlice;

use bytes::Bytes;
use smallvec::SmallVec;
use tokio::io::AsyncWriteExt;

impl Gather<'_> {
    /// Nothing gathered yet, over `wire`.
    pub fn new(wire: &mut Vec<u8>) -> Gather<'_> {
        Gather { wire, segs: SmallVec::new(), mark: 0 }
    }
}

/// Body pieces smaller than this are copied next to the head and the
/// chunk framing; larger ones go out from storage as they are.
pub const COPY_BELOW: usize = 1024;
/// Pieces gathered into one vectored write at most.
pub const MAX_IOV: usize = 64;
/// Small pieces copied together at most before they are sent.
pub const MAX_COPIED: usize = 64 * 1024;

/// What is ready to go out, in order: small bytes in `wire` (the head,
/// chunk framing, small pieces) and stored body pieces, sent together
/// with vectored writes, so a hit's body is never copied on its way to
/// the socket.
pub struct Gather<'w> {
    pub wire: &'w mut Vec<u8>,
    /// Inline for the usual few pieces: a hit allocates none.
    pub segs: SmallVec<[Seg; 8]>,
    /// Bytes of `wire` that `segs` already cover.
    pub mark: usize,
}

pub enum Seg {
    Wire(usize, usize),
    Data(Bytes),
}

impl Gather<'_> {
    pub fn piece(&mut self, b: Bytes) {
        if b.len() < COPY_BELOW {
            self.wire.extend_from_slice(&b);
            return;
        }
        self.cut();
        self.segs.push(Seg::Data(b));
    }

    /// The bytes added to `wire` since the last piece become a segment.
    pub fn cut(&mut self) {
        if self.wire.len() > self.mark {
            self.segs.push(Seg::Wire(self.mark, self.wire.len()));
            self.mark = self.wire.len();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty() && self.wire.is_empty()
    }

    /// Write everything gathered (within the response's send deadlines);
    /// false if it failed or timed out.
    pub async fn flush<W: tokio::io::AsyncWrite + Unpin>(&mut self, out: &mut W) -> bool {
        self.cut();
        let ok = {
            let wire = &self.wire[..];
            let mut iov: SmallVec<[IoSlice<'_>; 8]> = self
                .segs
                .iter()
                .map(|s| match s {
                    Seg::Wire(a, b) => IoSlice::new(&wire[*a..*b]),
                    Seg::Data(d) => IoSlice::new(d),
                })
                .collect();
            write_all_vectored(out, &mut iov).await
        };
        self.segs.clear();
        self.wire.clear();
        self.mark = 0;
        ok
    }
}

async fn write_all_vectored<W: tokio::io::AsyncWrite + Unpin>(out: &mut W, mut iov: &mut [IoSlice<'_>]) -> bool {
    while !iov.is_empty() {
        match out.write_vectored(iov).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => IoSlice::advance_slices(&mut iov, n),
        }
    }
    true
}
