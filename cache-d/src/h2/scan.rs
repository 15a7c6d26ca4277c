//! The client's frames, checked before the `h2` crate reads them
//! ([`FrameScan`]), for the errors Varnish answers with RFC 9113's own
//! codes where the crate says PROTOCOL_ERROR, or nothing: frames of the
//! wrong size (FRAME_SIZE_ERROR), an initial window over 2^31-1
//! (FLOW_CONTROL_ERROR), header blocks HPACK cannot take apart
//! (COMPRESSION_ERROR), PUSH_PROMISE, unsolicited PING ACKs, frames on
//! even streams and bad padding (GOAWAY PROTOCOL_ERROR naming the highest
//! stream the client opened, as Varnish counts it), and the stream errors
//! RFC 9113 asks for instead of a GOAWAY: a WINDOW_UPDATE of 0 on a
//! stream, DATA after END_STREAM (STREAM_CLOSED), a request field name
//! that is not a lower-case token or an unknown pseudo-header
//! (PROTOCOL_ERROR). The scan also follows the crate's output to its
//! frame boundaries, where its own frames for the client go.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use h2::Reason;
use tokio::sync::Notify;

use crate::http1::head::H2_PREFACE as PREFACE;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// A stream's halves as the scan follows them.
const REMOTE_DONE: u8 = 1;
const LOCAL_DONE: u8 = 2;
/// The most streams followed at once (the crate refuses streams far
/// below this); the most header block bytes gathered over CONTINUATION
/// frames for the HPACK check.
const MAX_FOLLOWED: usize = 4096;
const MAX_BLOCK: usize = 256 * 1024;

/// The largest frame payload the scan gathers before the crate sees it,
/// unless told the connection's own limit.
const DEFAULT_MAX_FRAME: usize = 16_384;

pub struct FrameScan {
    /// Preface bytes still to pass.
    preface: usize,
    /// The frame being gathered: its header, then (not DATA) its payload.
    frame: Vec<u8>,
    /// Payload bytes passed (or dropped, `drop`) without gathering.
    through: usize,
    drop: bool,
    /// A header block continued in CONTINUATION frames: its stream and
    /// the fragments so far.
    block: Option<(u32, Vec<u8>)>,
    max_frame: usize,
    /// The highest stream the client opened.
    highest: u32,
    streams: HashMap<u32, u8>,
    /// PINGs the server sent that the client has not acknowledged.
    pings: u32,
    /// The client's RST_STREAM frames so far.
    pub resets: Arc<AtomicU64>,
    /// Told of the client's first DATA payload (the connection's
    /// window opens then, as Varnish opens it on DATA).
    pub data: Arc<Notify>,
    data_told: bool,
    /// Frames for the client (RST_STREAM, GOAWAY), sent between the
    /// crate's frames.
    pub to_client: Vec<u8>,
    /// A connection error ended the reading; its GOAWAY code.
    pub dead: Option<Reason>,
    /// Window given back for padding-only DATA frames kept from the
    /// crate, not yet sent: the connection's and each stream's.
    pad_credit: (u32, HashMap<u32, u32>),
    /// Credit sent back in batches of this much (a quarter of a stream's
    /// window, at most 16 KiB), so a client never waits on it.
    pad_batch: u32,
    /// The crate's output: the frame header so far, payload bytes left.
    out_head: [u8; 9],
    out_have: usize,
    out_skip: usize,
}

impl FrameScan {
    pub fn new() -> FrameScan {
        FrameScan {
            preface: PREFACE.len(),
            frame: Vec::with_capacity(64),
            through: 0,
            drop: false,
            block: None,
            max_frame: DEFAULT_MAX_FRAME,
            highest: 0,
            streams: HashMap::new(),
            pings: 0,
            resets: Arc::new(AtomicU64::new(0)),
            data: Arc::new(Notify::new()),
            data_told: false,
            to_client: Vec::new(),
            dead: None,
            pad_credit: (0, HashMap::new()),
            pad_batch: 16_384,
            out_head: [0; 9],
            out_have: 0,
            out_skip: 0,
        }
    }

    /// The largest frame payload the connection accepts.
    pub fn set_max_frame(&mut self, n: usize) {
        self.max_frame = n;
    }

    /// The receive window of a stream (h2_initial_window_size).
    pub fn set_stream_window(&mut self, n: u32) {
        self.pad_batch = (n / 4).clamp(1, 16_384);
    }

    /// Scan the client's bytes (what the crate may read goes to a sink).
    pub fn feed(&mut self, b: &[u8]) {
        self.push(b, &mut BytesMut::new());
    }

    /// Scan the client's bytes; what the crate is to read goes to `out`.
    pub fn push(&mut self, mut b: &[u8], out: &mut BytesMut) {
        while !b.is_empty() && self.dead.is_none() {
            let n = if self.preface > 0 {
                let n = self.preface.min(b.len());
                self.preface -= n;
                out.extend_from_slice(&b[..n]);
                n
            } else if self.through > 0 {
                let n = self.through.min(b.len());
                self.through -= n;
                if !self.drop {
                    out.extend_from_slice(&b[..n]);
                }
                n
            } else {
                let want = if self.frame.len() < 9 { 9 } else { 9 + frame_len(&self.frame) };
                let n = (want - self.frame.len()).min(b.len());
                self.frame.extend_from_slice(&b[..n]);
                if self.frame.len() == 9 {
                    self.on_head(out);
                } else if self.frame.len() == want {
                    self.on_frame(out);
                }
                n
            };
            b = &b[n..];
        }
    }

    /// A frame header is complete: DATA, unknown and oversized frames
    /// pass on their header, others are gathered whole.
    fn on_head(&mut self, out: &mut BytesMut) {
        let (len, kind) = (frame_len(&self.frame), self.frame[3]);
        if kind == DATA && self.frame[4] & PADDED != 0 && (1..=256).contains(&len) {
            // Small padded DATA: gathered whole, to see if it holds data.
        } else if kind == DATA {
            self.on_data(out);
        } else if kind > CONTINUATION || len > self.max_frame {
            self.pass_head(out, len, false);
        } else if len == 0 {
            self.on_frame(out);
        }
    }

    /// The frame header goes on (or not), its payload after it.
    fn pass_head(&mut self, out: &mut BytesMut, len: usize, drop: bool) {
        if !drop {
            out.extend_from_slice(&self.frame);
        }
        self.frame.clear();
        (self.through, self.drop) = (len, drop);
    }

    fn on_data(&mut self, out: &mut BytesMut) {
        let (len, flags, s) = (frame_len(&self.frame), self.frame[4], stream(&self.frame));
        let state = self.streams.get(&s).copied();
        if self.misplaced(DATA, s) {
            return self.conn_error(Reason::PROTOCOL_ERROR);
        }
        if state.is_some_and(|st| st == REMOTE_DONE) {
            // Half-closed (remote): a stream error (RFC 9113 §5.1).
            self.stream_error(out, s, Reason::STREAM_CLOSED);
            return self.pass_head(out, len, true);
        }
        if flags & END_STREAM != 0 {
            self.mark(s, REMOTE_DONE);
        }
        if len > 0 && !self.data_told {
            self.data_told = true;
            self.data.notify_one();
        }
        self.pass_head(out, len, false);
    }

    /// A small padded DATA frame, gathered whole. Padding alone, on an
    /// open stream, not its end: kept from the crate (which counts such
    /// frames as empty ones, a flood past 256 of them), and its window
    /// given back to the client, as Varnish opens the window for padding
    /// it counted. Anything else goes the way of other DATA frames.
    fn on_padded_data(&mut self, out: &mut BytesMut) {
        let frame = std::mem::take(&mut self.frame);
        let (len, flags, s) = (frame.len() - 9, frame[4], stream(&frame));
        let padding_only = usize::from(frame[9]) + 1 == len && flags & END_STREAM == 0;
        let open = self.streams.get(&s).is_some_and(|st| st & REMOTE_DONE == 0);
        if padding_only && open && !self.misplaced(DATA, s) {
            self.credit(s, len as u32);
            self.frame = frame;
            self.frame.clear();
            return;
        }
        self.frame.extend_from_slice(&frame[..9]);
        self.on_data(out);
        if self.dead.is_some() {
            return;
        }
        if !self.drop {
            out.extend_from_slice(&frame[9..]);
        }
        self.through = 0;
    }

    /// Give `n` bytes of window back on stream `s` and the connection,
    /// in batches.
    fn credit(&mut self, s: u32, n: u32) {
        let (conn, streams) = &mut self.pad_credit;
        *conn += n;
        *streams.entry(s).or_default() += n;
        if *conn < self.pad_batch && streams.values().all(|&v| v < self.pad_batch) {
            return;
        }
        let mut f = Vec::with_capacity(13 * (streams.len() + 1));
        for (id, v) in std::iter::once((0, std::mem::take(conn))).chain(streams.drain()) {
            f.extend_from_slice(&[0, 0, 4, WINDOW_UPDATE, 0]);
            f.put_u32(id);
            f.put_u32(v);
        }
        self.to_client.extend_from_slice(&f);
    }

    /// A whole frame (not DATA) is gathered.
    fn on_frame(&mut self, out: &mut BytesMut) {
        if self.frame[3] == DATA {
            return self.on_padded_data(out);
        }
        let frame = std::mem::take(&mut self.frame);
        let (kind, flags, s) = (frame[3], frame[4], stream(&frame));
        let p = &frame[9..];
        let verdict = match kind {
            _ if self.misplaced(kind, s) => Err(Reason::PROTOCOL_ERROR),
            HEADERS => return self.on_headers(out, frame),
            CONTINUATION => self.on_continuation(s, flags, p),
            PUSH_PROMISE => Err(Reason::PROTOCOL_ERROR),
            RST_STREAM if p.len() != 4 => Err(Reason::FRAME_SIZE_ERROR),
            RST_STREAM => {
                self.resets.fetch_add(1, Ordering::Relaxed);
                self.streams.remove(&s);
                Ok(())
            }
            SETTINGS if flags & ACK != 0 && !p.is_empty() => Err(Reason::FRAME_SIZE_ERROR),
            SETTINGS if p.chunks_exact(6).any(|e| e[..2] == [0, 4] && e[2] & 0x80 != 0) => Err(Reason::FLOW_CONTROL_ERROR),
            PING if s != 0 => Err(Reason::PROTOCOL_ERROR),
            PING if p.len() != 8 => Err(Reason::FRAME_SIZE_ERROR),
            PING if flags & ACK != 0 && self.pings == 0 => Err(Reason::PROTOCOL_ERROR),
            PING if flags & ACK != 0 => {
                self.pings -= 1;
                Ok(())
            }
            WINDOW_UPDATE if p.len() != 4 => Err(Reason::FRAME_SIZE_ERROR),
            WINDOW_UPDATE if s != 0 && s <= self.highest && u32::from_be_bytes([p[0] & 0x7f, p[1], p[2], p[3]]) == 0 => {
                return self.stream_error(out, s, Reason::PROTOCOL_ERROR);
            }
            _ => Ok(()),
        };
        match verdict {
            Ok(()) => out.extend_from_slice(&frame),
            Err(code) => self.conn_error(code),
        }
        self.frame = frame;
        self.frame.clear();
    }

    /// A frame on a stream its type may not use (as Varnish's table of
    /// frames has it: on stream 0, on another, on one not opened yet, on
    /// an even one), or other than the CONTINUATION a header block awaits.
    fn misplaced(&self, kind: u8, s: u32) -> bool {
        const GOAWAY: u8 = 0x7;
        let on_zero = matches!(kind, DATA | HEADERS | 0x2 | RST_STREAM | PUSH_PROMISE | CONTINUATION);
        let on_other = matches!(kind, SETTINGS | PING | GOAWAY);
        let on_idle = !matches!(kind, HEADERS | 0x2);
        let awaited = self.block.as_ref().is_none_or(|(bs, _)| kind == CONTINUATION && *bs == s);
        (s == 0 && on_zero) || (s != 0 && on_other) || (s > self.highest && on_idle) || (s != 0 && s % 2 == 0) || !awaited
    }

    /// HEADERS: a new stream counts as opened before its padding and
    /// header block are checked (Varnish's last stream in the GOAWAY).
    fn on_headers(&mut self, out: &mut BytesMut, mut frame: Vec<u8>) {
        let (flags, s) = (frame[4], stream(&frame));
        if s > self.highest {
            self.highest = s;
            if self.streams.len() < MAX_FOLLOWED {
                self.streams.insert(s, 0);
            }
        }
        let len = frame.len() - 9;
        let mut block = 9..frame.len();
        if flags & PADDED != 0 {
            let pad = frame.get(9).map_or(usize::MAX, |&b| usize::from(b));
            if pad.saturating_add(1) > len {
                return self.end_headers(frame, Err(Reason::PROTOCOL_ERROR));
            }
            block = 10..frame.len() - pad;
        }
        let prio = block.start..block.start + if flags & PRIORITY != 0 { 5 } else { 0 };
        if prio.end > block.end {
            return self.end_headers(frame, Err(Reason::PROTOCOL_ERROR));
        }
        block.start = prio.end;
        if flags & END_STREAM != 0 {
            self.mark(s, REMOTE_DONE);
        }
        if flags & END_HEADERS == 0 {
            self.block = Some((s, frame[block].to_vec()));
            out.extend_from_slice(&frame);
            return self.end_headers(frame, Ok(()));
        }
        match check_block(&frame[block.clone()]) {
            Err(Undecodable) => return self.end_headers(frame, Err(Reason::COMPRESSION_ERROR)),
            Ok(bad) if bad.is_empty() => out.extend_from_slice(&frame),
            Ok(bad) => {
                // A malformed request is a stream error (RFC 9113 §8.1.1):
                // the names become tokens of the same length (the HPACK
                // tables stay as the client keeps them) and a "te: x" field
                // makes the crate reset the stream with PROTOCOL_ERROR.
                for r in bad {
                    frame[block.start + r.start..block.start + r.end].fill(b'x');
                }
                let te = [0x00, 0x02, b't', b'e', 0x01, b'x'];
                let n = prio.len() + block.len() + te.len();
                let head = [(n >> 16) as u8, (n >> 8) as u8, n as u8, HEADERS, flags & !PADDED];
                out.extend_from_slice(&head);
                out.extend_from_slice(&frame[5..9]);
                out.extend_from_slice(&frame[prio]);
                out.extend_from_slice(&frame[block]);
                out.extend_from_slice(&te);
            }
        }
        self.end_headers(frame, Ok(()));
    }

    fn end_headers(&mut self, frame: Vec<u8>, verdict: Result<(), Reason>) {
        if let Err(code) = verdict {
            self.conn_error(code);
        }
        self.frame = frame;
        self.frame.clear();
    }

    /// A header block continued: checked when it ends.
    fn on_continuation(&mut self, s: u32, flags: u8, p: &[u8]) -> Result<(), Reason> {
        let Some((bs, frags)) = &mut self.block else { return Ok(()) };
        if *bs != s || frags.len() + p.len() > MAX_BLOCK {
            self.block = None;
            return Ok(());
        }
        frags.extend_from_slice(p);
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let ok = check_block(frags).is_ok();
        self.block = None;
        if ok {
            Ok(())
        } else {
            Err(Reason::COMPRESSION_ERROR)
        }
    }

    fn mark(&mut self, s: u32, half: u8) {
        if let Some(st) = self.streams.get_mut(&s) {
            *st |= half;
            if *st == REMOTE_DONE | LOCAL_DONE {
                self.streams.remove(&s);
            }
        }
    }

    /// GOAWAY with `code` naming the highest stream opened; nothing more
    /// is read.
    fn conn_error(&mut self, code: Reason) {
        let mut f = vec![0, 0, 8, 0x7, 0];
        f.put_u32(0);
        f.put_u32(self.highest);
        f.put_u32(code.into());
        self.to_client.extend_from_slice(&f);
        self.dead = Some(code);
    }

    /// RST_STREAM with `code` for the client; the crate, if it follows the
    /// stream, reads a CANCEL from the client in its place.
    fn stream_error(&mut self, out: &mut BytesMut, s: u32, code: Reason) {
        self.to_client.extend_from_slice(&rst(s, code));
        if self.streams.remove(&s).is_some() {
            out.extend_from_slice(&rst(s, Reason::CANCEL));
        }
    }

    /// Are the crate's frames whole so far (may ours go out now)?
    pub fn out_boundary(&self) -> bool {
        self.out_have == 0 && self.out_skip == 0
    }

    /// The bytes left of the crate's frame in progress (of its header,
    /// while that is incomplete).
    pub fn out_left(&self) -> usize {
        if self.out_have > 0 {
            9 - self.out_have
        } else {
            self.out_skip
        }
    }

    /// The crate wrote these bytes: follow its frames (PINGs it sent,
    /// streams it ended or reset).
    pub fn sent(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.out_skip > 0 {
                let n = self.out_skip.min(b.len());
                (self.out_skip, b) = (self.out_skip - n, &b[n..]);
                continue;
            }
            let n = (9 - self.out_have).min(b.len());
            self.out_head[self.out_have..self.out_have + n].copy_from_slice(&b[..n]);
            (self.out_have, b) = (self.out_have + n, &b[n..]);
            if self.out_have < 9 {
                continue;
            }
            self.out_have = 0;
            let h = self.out_head;
            self.out_skip = frame_len(&h);
            let s = stream(&h);
            match h[3] {
                PING if h[4] & ACK == 0 => self.pings += 1,
                DATA | HEADERS if h[4] & END_STREAM != 0 => self.mark(s, LOCAL_DONE),
                RST_STREAM => {
                    self.streams.remove(&s);
                }
                _ => {}
            }
        }
    }
}

impl Default for FrameScan {
    fn default() -> FrameScan {
        FrameScan::new()
    }
}

fn frame_len(h: &[u8]) -> usize {
    (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2])
}

fn stream(h: &[u8]) -> u32 {
    u32::from_be_bytes([h[5] & 0x7f, h[6], h[7], h[8]])
}

fn rst(s: u32, code: Reason) -> [u8; 13] {
    let (s, c) = (s.to_be_bytes(), u32::from(code).to_be_bytes());
    [0, 0, 4, RST_STREAM, 0, s[0], s[1], s[2], s[3], c[0], c[1], c[2], c[3]]
}

/// A header block HPACK cannot take apart (COMPRESSION_ERROR).
#[derive(Debug, PartialEq)]
pub struct Undecodable;

/// Take a header block apart as far as its structure goes (RFC 7541 §6),
/// without the tables: an integer or string that overflows or runs past
/// the end is an error; the literal names (not Huffman-coded) that are
/// not lower-case tokens or known pseudo-headers are returned.
pub fn check_block(b: &[u8]) -> Result<Vec<Range<usize>>, Undecodable> {
    let mut at = 0;
    let mut bad = Vec::new();
    while at < b.len() {
        let c = b[at];
        let (prefix, literal) = match c {
            _ if c & 0x80 != 0 => (7, false),
            _ if c & 0xc0 == 0x40 => (6, true),
            _ if c & 0xe0 == 0x20 => (5, false),
            _ => (4, true),
        };
        let index = int(b, &mut at, prefix)?;
        if prefix == 7 && index == 0 {
            return Err(Undecodable);
        }
        if !literal {
            continue;
        }
        if index == 0 {
            let (huffman, name) = string(b, &mut at)?;
            if !huffman && !good_name(&b[name.clone()]) {
                bad.push(name);
            }
        }
        string(b, &mut at)?;
    }
    Ok(bad)
}

/// An HPACK integer with an `n`-bit prefix at `at` (at most 32 bits).
fn int(b: &[u8], at: &mut usize, n: u32) -> Result<u64, Undecodable> {
    let max = (1u64 << n) - 1;
    let mut v = u64::from(*b.get(*at).ok_or(Undecodable)?) & max;
    *at += 1;
    if v < max {
        return Ok(v);
    }
    for shift in (0..35).step_by(7) {
        let byte = *b.get(*at).ok_or(Undecodable)?;
        *at += 1;
        v += u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return if v > u64::from(u32::MAX) { Err(Undecodable) } else { Ok(v) };
        }
    }
    Err(Undecodable)
}

/// An HPACK string at `at`: Huffman-coded or not, and where its bytes are.
fn string(b: &[u8], at: &mut usize) -> Result<(bool, Range<usize>), Undecodable> {
    let huffman = *b.get(*at).ok_or(Undecodable)? & 0x80 != 0;
    let len = usize::try_from(int(b, at, 7)?).map_err(|_| Undecodable)?;
    let start = *at;
    let end = start.checked_add(len).filter(|&e| e <= b.len()).ok_or(Undecodable)?;
    *at = end;
    Ok((huffman, start..end))
}

/// A request field name Varnish takes: a lower-case token, or one of the
/// pseudo-headers it knows.
fn good_name(n: &[u8]) -> bool {
    if n.first() == Some(&b':') {
        return [&b":method"[..], b":path", b":scheme", b":authority"].contains(&n);
    }
    let tchar = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(c);
    !n.is_empty() && n.iter().all(tchar)
}
