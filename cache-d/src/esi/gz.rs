//! ESI pages kept gzip (Varnish's `esi_gzip`): the parsed page compressed
//! once, at fetch, segment by segment, each full-flushed, so that on
//! delivery the verbatim segments go out as they are stored between the
//! includes' own deflate data, in one gzip stream; and the bits of that
//! stream the delivery writes itself (header, fragment padding, end).

use bytes::Bytes;

use super::{EsiData, Instr};
use crate::gzip::code::{crc32, Segmenter, Settings};

/// The gzip header an assembled page starts with (Varnish's).
pub const GZIP_HDR: [u8; 10] = [0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0x02, 0x03];

/// A cursor over a body's pieces.
struct Cursor<'a> {
    pieces: &'a [Bytes],
    at: (usize, usize),
}

impl<'a> Cursor<'a> {
    fn take(&mut self, mut n: u64) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        while n > 0 && self.at.0 < self.pieces.len() {
            let p = &self.pieces[self.at.0][..];
            let k = ((p.len() - self.at.1) as u64).min(n) as usize;
            out.push(&p[self.at.1..self.at.1 + k]);
            n -= k as u64;
            self.at.1 += k;
            if self.at.1 == p.len() {
                self.at = (self.at.0 + 1, 0);
            }
        }
        out
    }
}

/// The gzip body and instructions of a page parsed plain: the header
/// (skipped on delivery: the page writes its own), each segment
/// compressed on its own, the includes where they were, and a valid end
/// (final block and trailer), so the stored body is the whole page
/// gzipped. Returns the body and the page's ESI data over it.
pub fn gzip_page(plain: &[Bytes], instrs: &[Instr], s: &Settings) -> (Vec<Bytes>, EsiData) {
    let mut z = Segmenter::new(s);
    let mut cur = Cursor { pieces: plain, at: (0, 0) };
    let mut body: Vec<Bytes> = vec![Bytes::from_static(&GZIP_HDR)];
    let mut out = vec![Instr::Skip(GZIP_HDR.len() as u64)];
    let mut crcs = Vec::new();
    let (mut crc, mut len) = (crc32(0, &[]), 0u64);
    for i in instrs {
        match i {
            Instr::Verbatim(n) | Instr::Skip(n) => {
                let parts = cur.take(*n);
                let seg_crc = parts.iter().fold(crc32(0, &[]), |c, p| crc32(c, p));
                crc = parts.iter().fold(crc, |c, p| crc32(c, p));
                len += n;
                let c = z.segment(parts.iter().copied(), false);
                let clen = c.len() as u64;
                body.push(Bytes::from(c));
                if matches!(i, Instr::Verbatim(_)) {
                    out.push(Instr::Verbatim(clen));
                    crcs.push((seg_crc, *n));
                } else {
                    out.push(Instr::Skip(clen));
                }
            }
            inc => out.push(inc.clone()),
        }
    }
    let mut end = z.segment(std::iter::empty(), true);
    end.extend_from_slice(&crc.to_le_bytes());
    end.extend_from_slice(&(len as u32).to_le_bytes());
    body.push(Bytes::from(end));
    (body, EsiData { instrs: out, gzip: Some(crcs) })
}

/// The end of an assembled gzip page: an empty final stored block, then
/// the CRC and length of everything the client will inflate.
pub fn tail(crc: u32, len: u64) -> [u8; 13] {
    let mut t = [0x01, 0x00, 0x00, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0];
    t[5..9].copy_from_slice(&crc.to_le_bytes());
    t[9..13].copy_from_slice(&(len as u32).to_le_bytes());
    t
}

/// Plain bytes as non-final stored deflate blocks (an include that is not
/// gzip, inside a gzip page: Varnish's "pretend gzip").
pub fn stored_blocks(data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(65535) {
        let l = chunk.len() as u16;
        out.push(0);
        out.extend_from_slice(&l.to_le_bytes());
        out.extend_from_slice(&(!l).to_le_bytes());
        out.extend_from_slice(chunk);
    }
}

/// Where a gzip fragment's deflate data is cut to go inside a page: from
/// its first block to the end of its last, the final bit cleared, then
/// padded to a byte boundary with empty blocks (Varnish's `ved_gzgz`).
/// `body` is the fragment's whole stored gzip; returns the bytes to send
/// and the fragment's CRC and length from its trailer.
pub fn splice(body: &[u8], start: u64, last: u64, stop: u64) -> Option<(Vec<u8>, u32, u64)> {
    let olen = body.len() as u64;
    if start == 0 || start % 8 != 0 || last < start || stop < last + 10 || stop >= olen * 8 || olen < 18 {
        return None;
    }
    // Its blocks up to the last one, whose final bit is cleared, and the
    // rest of that block (it is at least 10 bits long: never the same
    // byte as its end).
    let mut out = Vec::with_capacity((stop / 8 - start / 8 + 8) as usize);
    out.extend_from_slice(&body[(start / 8) as usize..(last / 8) as usize]);
    out.push(body[(last / 8) as usize] & !(1u8 << (last & 7)));
    out.extend_from_slice(&body[(last / 8 + 1) as usize..(stop / 8) as usize]);
    // Then padded to a byte boundary with empty blocks (Varnish's table).
    let b = body[(stop / 8) as usize];
    match stop & 7 {
        0 => {}
        1 | 3 | 5 => out.extend_from_slice(&[b, 0x00, 0x00, 0xff, 0xff]),
        2 => out.extend_from_slice(&[b | 0x08, 0x20, 0x80, 0x00]),
        4 => out.extend_from_slice(&[b | 0x20, 0x80, 0x00]),
        6 => out.extend_from_slice(&[b | 0x80, 0x00]),
        _ => out.extend_from_slice(&[b, 0x00, 0x00, 0x00, 0xff, 0xff]),
    }
    let t = &body[body.len() - 8..];
    let crc = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    let len = u32::from_le_bytes([t[4], t[5], t[6], t[7]]) as u64;
    Some((out, crc, len))
}
