//! Log records: tag numbers and names, and the record encoding.
//!
//! The layout is Varnish 7.0–7.2's, in native-endian 32-bit words:
//! `w0 = tag << 24 | len` where `len` counts the payload bytes including a
//! trailing NUL; `w1 = B(bit 31) | C(bit 30) | vxid (30 bits)`; then the
//! payload, padded with zeros to a multiple of 4 bytes. Payloads longer than
//! the record limit (`vsl_reclen`, 255 by default) are cut, as Varnish does.

use std::fmt;

macro_rules! tags {
    ($( $num:literal $id:ident $name:literal; )*) => {
        /// A log tag (Varnish 7.1 numbering).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Tag { $( $id = $num, )* }

        impl Tag {
            /// The tag with this number, if it is one.
            pub fn from_u8(n: u8) -> Option<Tag> {
                match n { $( $num => Some(Tag::$id), )* _ => None }
            }
            /// Varnish's name for the tag (`ReqURL`, `Timestamp`...).
            pub fn name(self) -> &'static str {
                match self { $( Tag::$id => $name, )* }
            }
            /// Look a tag up by name, case-insensitively as varnishlog does.
            pub fn from_name(s: &str) -> Option<Tag> {
                $( if s.eq_ignore_ascii_case($name) { return Some(Tag::$id); } )*
                None
            }
            /// Every tag, in number order.
            pub const ALL: &'static [Tag] = &[ $( Tag::$id, )* ];
        }
    };
}

tags! {
    1 Debug "Debug"; 2 Error "Error"; 3 Cli "CLI"; 4 SessOpen "SessOpen"; 5 SessClose "SessClose";
    6 BackendOpen "BackendOpen"; 7 BackendReuse "BackendReuse"; 8 BackendClose "BackendClose";
    9 HttpGarbage "HttpGarbage"; 10 Proxy "Proxy"; 11 ProxyGarbage "ProxyGarbage"; 12 Backend "Backend";
    13 Length "Length"; 14 FetchError "FetchError";
    15 ReqMethod "ReqMethod"; 16 ReqUrl "ReqURL"; 17 ReqProtocol "ReqProtocol"; 18 ReqStatus "ReqStatus";
    19 ReqReason "ReqReason"; 20 ReqHeader "ReqHeader"; 21 ReqUnset "ReqUnset"; 22 ReqLost "ReqLost";
    23 RespMethod "RespMethod"; 24 RespUrl "RespURL"; 25 RespProtocol "RespProtocol"; 26 RespStatus "RespStatus";
    27 RespReason "RespReason"; 28 RespHeader "RespHeader"; 29 RespUnset "RespUnset"; 30 RespLost "RespLost";
    31 BereqMethod "BereqMethod"; 32 BereqUrl "BereqURL"; 33 BereqProtocol "BereqProtocol"; 34 BereqStatus "BereqStatus";
    35 BereqReason "BereqReason"; 36 BereqHeader "BereqHeader"; 37 BereqUnset "BereqUnset"; 38 BereqLost "BereqLost";
    39 BerespMethod "BerespMethod"; 40 BerespUrl "BerespURL"; 41 BerespProtocol "BerespProtocol"; 42 BerespStatus "BerespStatus";
    43 BerespReason "BerespReason"; 44 BerespHeader "BerespHeader"; 45 BerespUnset "BerespUnset"; 46 BerespLost "BerespLost";
    47 ObjMethod "ObjMethod"; 48 ObjUrl "ObjURL"; 49 ObjProtocol "ObjProtocol"; 50 ObjStatus "ObjStatus";
    51 ObjReason "ObjReason"; 52 ObjHeader "ObjHeader"; 53 ObjUnset "ObjUnset"; 54 ObjLost "ObjLost";
    55 BogoHeader "BogoHeader"; 56 LostHeader "LostHeader"; 57 Ttl "TTL"; 58 FetchBody "Fetch_Body";
    59 VclAcl "VCL_acl"; 60 VclCall "VCL_call"; 61 VclTrace "VCL_trace"; 62 VclReturn "VCL_return";
    63 ReqStart "ReqStart"; 64 Hit "Hit"; 65 HitPass "HitPass"; 66 ExpBan "ExpBan"; 67 ExpKill "ExpKill";
    68 WorkThread "WorkThread"; 69 EsiXmlerror "ESI_xmlerror"; 70 Hash "Hash"; 71 BackendHealth "Backend_health";
    72 VclLog "VCL_Log"; 73 VclError "VCL_Error"; 74 Gzip "Gzip"; 75 Link "Link"; 76 Begin "Begin"; 77 End "End";
    78 Vsl "VSL"; 79 Storage "Storage"; 80 Timestamp "Timestamp"; 81 ReqAcct "ReqAcct"; 82 PipeAcct "PipeAcct";
    83 BereqAcct "BereqAcct"; 84 VfpAcct "VfpAcct"; 85 Witness "Witness"; 86 BackendStart "BackendStart";
    87 H2RxHdr "H2RxHdr"; 88 H2RxBody "H2RxBody"; 89 H2TxHdr "H2TxHdr"; 90 H2TxBody "H2TxBody";
    91 HitMiss "HitMiss"; 92 Filters "Filters"; 93 SessError "SessError"; 94 VclUse "VCL_use";
    95 Notice "Notice"; 96 VdpAcct "VdpAcct";
}

/// Which side of the cache a record belongs to (the B/C bits of w1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Client,
    Backend,
    /// Neither bit: session-less records such as CLI.
    None,
}

impl Side {
    /// The letter varnishlog prints in raw mode: `c`, `b` or `-`.
    pub fn letter(self) -> char {
        match self {
            Side::Client => 'c',
            Side::Backend => 'b',
            Side::None => '-',
        }
    }
}

const B_BIT: u32 = 1 << 31;
const C_BIT: u32 = 1 << 30;
/// vxids are 30 bits wide in this layout.
pub const VXID_MASK: u32 = (1 << 30) - 1;
/// Default and largest record payload limits (`vsl_reclen`), NUL included.
pub const RECLEN_DEFAULT: usize = 255;
pub const RECLEN_MAX: usize = 4084;
/// Size of a record header in bytes.
pub const HEADER_BYTES: usize = 8;

/// Bytes a record with `len` payload bytes (NUL included) takes.
pub const fn record_bytes(len: usize) -> usize {
    HEADER_BYTES + len.div_ceil(4) * 4
}

/// A batch's first buffer size: a usual transaction's records fit.
const BATCH_START: usize = 2048;
/// Buffers kept per thread for the next batches, then in a pool all
/// threads share (a transaction may end on another thread than the one
/// it began on), and the largest kept.
const POOL_MAX: usize = 64;
const SHARED_POOL_MAX: usize = 1024;
const POOL_BUF_MAX: usize = 64 * 1024;

static SHARED_POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

thread_local! {
    /// Buffers of finished batches. Every transaction has a batch, so
    /// without these a server allocates and frees two buffers per
    /// request; freed, they leave holes in the heap that the long-lived
    /// cached objects allocated meanwhile are cut from, and the pieces
    /// left over are too small to reuse (measured: a fifth of the memory
    /// of a cache of 1 KiB objects).
    static POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Drop for Batch {
    fn drop(&mut self) {
        let cap = self.buf.capacity();
        if (BATCH_START..=POOL_BUF_MAX).contains(&cap) {
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            let buf = POOL.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOL_MAX {
                    p.push(buf);
                    None
                } else {
                    Some(buf)
                }
            });
            if let Ok(Some(buf)) = buf {
                if let Ok(mut shared) = SHARED_POOL.lock() {
                    if shared.len() < SHARED_POOL_MAX {
                        shared.push(buf);
                    }
                }
            }
        }
    }
}

/// A transaction's records, built in a local buffer and appended to the ring
/// in one step.
#[derive(Debug, Default)]
pub struct Batch {
    buf: Vec<u8>,
    reclen: usize,
    records: u32,
    /// Tags left out (vsl_mask): records with them are not written.
    mask: TagMask,
}

/// A set of log tags, a bit per tag number.
pub type TagMask = [u64; 4];

impl Batch {
    pub fn new() -> Batch {
        Batch::with_reclen(RECLEN_DEFAULT)
    }

    /// A batch whose records carry at most `reclen` payload bytes (NUL included).
    pub fn with_reclen(reclen: usize) -> Batch {
        let buf =
            POOL.with_borrow_mut(Vec::pop).or_else(|| SHARED_POOL.lock().ok()?.pop()).unwrap_or_else(|| Vec::with_capacity(BATCH_START));
        Batch { buf, reclen: reclen.clamp(2, RECLEN_MAX), records: 0, mask: TagMask::default() }
    }

    /// A batch with a record limit that leaves out the tags in `mask`
    /// (Varnish's vsl_reclen and vsl_mask).
    pub fn with_limits(reclen: usize, mask: TagMask) -> Batch {
        let mut b = Batch::with_reclen(reclen);
        b.mask = mask;
        b
    }

    /// Are records with `tag` written (not masked)?
    pub fn logs(&self, tag: Tag) -> bool {
        let n = tag as usize;
        self.mask[n / 64] & (1 << (n % 64)) == 0
    }

    /// Append a record with a raw payload (cut at the record limit).
    pub fn rec(&mut self, tag: Tag, side: Side, vxid: u32, payload: &[u8]) {
        if !self.logs(tag) {
            return;
        }
        let start = self.open(tag, side, vxid);
        self.buf.extend_from_slice(payload);
        self.close(start);
    }

    /// Append a record whose payload is the concatenation of `parts`.
    pub fn rec_parts(&mut self, tag: Tag, side: Side, vxid: u32, parts: &[&[u8]]) {
        if !self.logs(tag) {
            return;
        }
        let start = self.open(tag, side, vxid);
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.close(start);
    }

    /// Append a record whose payload is formatted in place (no allocation).
    pub fn recf(&mut self, tag: Tag, side: Side, vxid: u32, args: fmt::Arguments<'_>) {
        if !self.logs(tag) {
            return;
        }
        let start = self.open(tag, side, vxid);
        // Straight into the buffer through fmt::Write (io::Write's adapter
        // showed in profiles of hits); writing into a Vec cannot fail.
        let _ = fmt::write(&mut VecFmt(&mut self.buf), args);
        self.close(start);
    }

    /// Append a record whose payload `put` writes straight into the
    /// buffer: the hit path's records (timestamps, ReqAcct) without
    /// core::fmt, which was a tenth of a hit's CPU.
    pub fn rec_with(&mut self, tag: Tag, side: Side, vxid: u32, put: impl FnOnce(&mut Vec<u8>)) {
        if !self.logs(tag) {
            return;
        }
        let start = self.open(tag, side, vxid);
        put(&mut self.buf);
        self.close(start);
    }

    fn open(&mut self, tag: Tag, side: Side, vxid: u32) -> usize {
        let start = self.buf.len();
        let marker = match side {
            Side::Client => C_BIT,
            Side::Backend => B_BIT,
            Side::None => 0,
        };
        let w1 = marker | (vxid & VXID_MASK);
        // The header in one copy (two showed in hit profiles: a hit
        // writes about 40 records).
        let mut head = [0u8; HEADER_BYTES];
        head[..4].copy_from_slice(&((tag as u32) << 24).to_ne_bytes());
        head[4..].copy_from_slice(&w1.to_ne_bytes());
        self.buf.extend_from_slice(&head);
        start
    }

    fn close(&mut self, start: usize) {
        let body = start + HEADER_BYTES;
        // Cut at the record limit, never inside the header; then NUL and pad.
        let max = self.reclen - 1;
        if self.buf.len() - body > max {
            self.buf.truncate(body + max);
        }
        let len = self.buf.len() - body + 1;
        // NUL and padding: a fixed four-byte store, then cut back (resize
        // called memset for the one to four bytes).
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.truncate(body + len.div_ceil(4) * 4);
        let w0 = u32::from_ne_bytes(self.buf[start..start + 4].try_into().unwrap_or_default());
        self.buf[start..start + 4].copy_from_slice(&(w0 | len as u32).to_ne_bytes());
        self.records += 1;
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Number of records in the batch.
    pub fn records(&self) -> u32 {
        self.records
    }
    pub fn clear(&mut self) {
        self.buf.clear();
        self.records = 0;
    }
}

/// One decoded record, borrowing its payload from the reader's copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub tag: Tag,
    pub side: Side,
    pub vxid: u32,
    /// The payload without its trailing NUL.
    pub payload: &'a [u8],
}

impl Record<'_> {
    /// The payload as text, with invalid UTF-8 replaced.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.payload)
    }
}

/// Why bytes could not be decoded as a record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record header cut short ({0} bytes left)")]
    Short(usize),
    #[error("unknown log tag {0}")]
    UnknownTag(u8),
    #[error("record length {len} runs past the end of the data ({left} bytes left)")]
    Overlong { len: usize, left: usize },
    #[error("record with an empty payload (no NUL)")]
    NoNul,
}

/// Decode the record at the start of `buf`; returns it and its size in bytes.
pub fn decode(buf: &[u8]) -> Result<(Record<'_>, usize), DecodeError> {
    if buf.len() < HEADER_BYTES {
        return Err(DecodeError::Short(buf.len()));
    }
    let w0 = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let w1 = u32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let tag_n = (w0 >> 24) as u8;
    let tag = Tag::from_u8(tag_n).ok_or(DecodeError::UnknownTag(tag_n))?;
    let len = (w0 & 0x00ff_ffff) as usize;
    let total = record_bytes(len);
    if total > buf.len() {
        return Err(DecodeError::Overlong { len, left: buf.len() });
    }
    if len == 0 {
        return Err(DecodeError::NoNul);
    }
    let side = if w1 & B_BIT != 0 {
        Side::Backend
    } else if w1 & C_BIT != 0 {
        Side::Client
    } else {
        Side::None
    };
    let payload = &buf[HEADER_BYTES..HEADER_BYTES + len - 1];
    Ok((Record { tag, side, vxid: w1 & VXID_MASK, payload }, total))
}

/// Iterate over the whole records of `buf`; stops at the first error, which
/// [`Records::error`] then reports.
pub struct Records<'a> {
    buf: &'a [u8],
    pos: usize,
    error: Option<DecodeError>,
}

impl<'a> Records<'a> {
    pub fn new(buf: &'a [u8]) -> Records<'a> {
        Records { buf, pos: 0, error: None }
    }
    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn error(&self) -> Option<&DecodeError> {
        self.error.as_ref()
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;
    fn next(&mut self) -> Option<Record<'a>> {
        if self.pos >= self.buf.len() || self.error.is_some() {
            return None;
        }
        match decode(&self.buf[self.pos..]) {
            Ok((rec, n)) => {
                self.pos += n;
                Some(rec)
            }
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }
}

/// `n` in decimal, written on the stack: no allocation, no formatter.
#[derive(Clone, Copy)]
pub struct Decimal {
    buf: [u8; 20],
    at: u8,
}

impl Decimal {
    pub fn new(n: u64) -> Decimal {
        let mut buf = [0u8; 20];
        let at = digits_before(&mut buf, 20, n) as u8;
        Decimal { buf, at }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[usize::from(self.at)..]
    }
}

/// Append `n` in decimal.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    let at = digits_before(&mut buf, 20, n);
    out.extend_from_slice(&buf[at..]);
}

/// "00" to "99": two digits a step (a hit prints a dozen timestamps).
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Write `n` in decimal into `buf` so that it ends just before `end`;
/// where it starts. `buf[..end]` must have room (20 bytes hold any u64).
#[inline]
pub fn digits_before(buf: &mut [u8], end: usize, mut n: u64) -> usize {
    let mut at = end;
    while n >= 100 {
        at = pair_before(buf, at, (n % 100) as usize);
        n /= 100;
    }
    if n >= 10 {
        return pair_before(buf, at, n as usize);
    }
    at -= 1;
    buf[at] = b'0' + n as u8;
    at
}

/// Write `d` (below 100) as two digits just before `end`; where they start.
#[inline]
pub fn pair_before(buf: &mut [u8], end: usize, d: usize) -> usize {
    buf[end - 2..end].copy_from_slice(&PAIRS[2 * d..2 * d + 2]);
    end - 2
}

/// A Vec of bytes as a `fmt::Write` target.
struct VecFmt<'a>(&'a mut Vec<u8>);

impl fmt::Write for VecFmt<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_print_as_display_does() {
        for n in [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 65535, 1796136670, 10u64.pow(19), u64::MAX] {
            let mut v = Vec::new();
            put_u64(&mut v, n);
            assert_eq!(v, n.to_string().into_bytes());
            assert_eq!(Decimal::new(n).as_bytes(), n.to_string().as_bytes());
        }
    }

    #[test]
    fn records_written_in_place_are_records_formatted() {
        let (mut a, mut b) = (Batch::with_reclen(255), Batch::with_reclen(255));
        for n in [0u64, 7, 10, 4_294_967_295, u64::MAX] {
            a.recf(Tag::ReqAcct, Side::Client, 9, format_args!("{n} x"));
            b.rec_with(Tag::ReqAcct, Side::Client, 9, |o| {
                put_u64(o, n);
                o.extend_from_slice(b" x");
            });
        }
        assert_eq!(a.as_bytes(), b.as_bytes());
        assert_eq!(a.records(), 5);
        // The record limit cuts those written in place too.
        let mut c = Batch::with_reclen(8);
        c.rec_with(Tag::ReqAcct, Side::Client, 9, |o| o.extend_from_slice(b"0123456789"));
        let mut d = Batch::with_reclen(8);
        d.rec(Tag::ReqAcct, Side::Client, 9, b"0123456789");
        assert_eq!(c.as_bytes(), d.as_bytes());
    }

    #[test]
    fn tag_numbers_follow_varnish_7_1() {
        assert_eq!(Tag::ReqMethod as u8, 15);
        assert_eq!(Tag::RespStatus as u8, 26);
        assert_eq!(Tag::BereqUrl as u8, 32);
        assert_eq!(Tag::BerespHeader as u8, 44);
        assert_eq!(Tag::Link as u8, 75);
        assert_eq!(Tag::Begin as u8, 76);
        assert_eq!(Tag::Timestamp as u8, 80);
        assert_eq!(Tag::ReqAcct as u8, 81);
        assert_eq!(Tag::VdpAcct as u8, 96);
        assert_eq!(Tag::ALL.len(), 96);
        assert_eq!(Tag::from_name("requrl"), Some(Tag::ReqUrl));
        assert_eq!(Tag::ReqUrl.name(), "ReqURL");
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn golden_bytes() {
        let mut b = Batch::new();
        b.rec(Tag::ReqUrl, Side::Client, 32770, b"/index.html");
        b.rec(Tag::End, Side::Backend, 5, b"");
        b.rec(Tag::Cli, Side::None, 0, b"Rd ping");
        #[rustfmt::skip]
        let want: &[u8] = &[
            // ReqURL (16), len 12 ("/index.html" + NUL), C | 32770
            12, 0, 0, 16,  0x02, 0x80, 0x00, 0x40,
            b'/', b'i', b'n', b'd', b'e', b'x', b'.', b'h', b't', b'm', b'l', 0,
            // End (77), len 1, B | 5, one NUL padded to a word
            1, 0, 0, 77,  5, 0, 0, 0x80,  0, 0, 0, 0,
            // CLI (3), len 8, no side bit, vxid 0
            8, 0, 0, 3,  0, 0, 0, 0,  b'R', b'd', b' ', b'p', b'i', b'n', b'g', 0,
        ];
        assert_eq!(b.as_bytes(), want);
        assert_eq!(b.records(), 3);
        let recs: Vec<_> = Records::new(b.as_bytes()).collect();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].payload, b"/index.html");
        assert_eq!((recs[0].side, recs[0].vxid), (Side::Client, 32770));
        assert_eq!((recs[1].tag, recs[1].side, recs[1].payload), (Tag::End, Side::Backend, &b""[..]));
        assert_eq!(recs[2].side, Side::None);
    }

    #[test]
    fn payloads_are_cut_at_reclen() {
        let mut b = Batch::with_reclen(8);
        b.recf(Tag::ReqUrl, Side::Client, 1, format_args!("/{}", "abcdefghijkl"));
        let (r, n) = decode(b.as_bytes()).unwrap();
        assert_eq!(r.payload, b"/abcdef");
        assert_eq!(n, b.len());
    }

    #[test]
    fn masked_tags_are_left_out() {
        let mut mask = TagMask::default();
        mask[Tag::Hash as usize / 64] |= 1 << (Tag::Hash as usize % 64);
        let mut b = Batch::with_limits(255, mask);
        assert!(!b.logs(Tag::Hash) && b.logs(Tag::ReqUrl));
        b.rec(Tag::Hash, Side::Client, 1, b"/");
        b.rec_parts(Tag::Hash, Side::Client, 1, &[b"/"]);
        b.recf(Tag::Hash, Side::Client, 1, format_args!("/"));
        b.rec(Tag::ReqUrl, Side::Client, 1, b"/");
        assert_eq!(b.records(), 1);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(decode(&[1, 2, 3]), Err(DecodeError::Short(3)));
        assert_eq!(decode(&[0, 0, 0, 0, 0, 0, 0, 0]), Err(DecodeError::UnknownTag(0)));
        assert!(matches!(decode(&[0xff, 0xff, 0xff, 16, 0, 0, 0, 0]), Err(DecodeError::Overlong { .. })));
        assert_eq!(decode(&[0, 0, 0, 16, 0, 0, 0, 0]), Err(DecodeError::NoNul));
        let mut it = Records::new(&[5, 0, 0, 200, 0, 0, 0, 0]);
        assert!(it.next().is_none());
        assert!(it.error().is_some());
    }
}
