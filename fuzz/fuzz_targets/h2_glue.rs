//! cachekit's own HTTP/2 glue from arbitrary bytes (the framing, HPACK and
//! flow control are the h2 crate's, fuzzed upstream): the frame scanner
//! counts the same RST_STREAM frames however the bytes are split, the
//! unframer never lets through more payload than it was given nor panics
//! on a broken chunked body, and an upgrade request parsed from the bytes
//! becomes well-formed HEADERS/CONTINUATION frames.
#![no_main]

use bytes::BytesMut;
use cache_d::h2::io::FrameScan;
use cache_d::h2::out::{Chunk, Piece, Unframe};
use cache_d::h2::upgrade::{request_frames, settings_field_ok};
use cache_d::http1::head::{parse_request, Parsed};
use libfuzzer_sys::fuzz_target;
use std::sync::atomic::Ordering;

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else { return };
    let step = usize::from(step).max(1);
    // Frame scan: whole, and in pieces of `step` bytes.
    let (mut whole, mut pieces) = (FrameScan::new(), FrameScan::new());
    whole.feed(rest);
    for p in rest.chunks(step) {
        pieces.feed(p);
    }
    assert_eq!(whole.resets.load(Ordering::Relaxed), pieces.resets.load(Ordering::Relaxed));
    // Unframe a chunked body written in pieces.
    let mut u = Unframe::Chunked(Chunk::Size(0));
    let (mut at, mut out) = (0, 0);
    while at < rest.len() {
        let buf = &rest[at..(at + step).min(rest.len())];
        match u.step(buf) {
            Piece::Frame(n) => at += n,
            Piece::Data(n) => {
                assert!(n >= 1 && n <= buf.len());
                u.took(n);
                out += n;
                at += n;
            }
            Piece::Over => break,
        }
        if u.complete() {
            break;
        }
    }
    assert!(out <= rest.len());
    let _ = settings_field_ok(rest);
    // An upgrade request's frames: each length matches what follows it.
    if let Ok(Parsed::Complete(head)) = parse_request(&mut BytesMut::from(rest), 64, 65536) {
        let f = request_frames(&head);
        let mut at = 0;
        while at < f.len() {
            assert!(at + 9 <= f.len());
            let len = (usize::from(f[at]) << 16) | (usize::from(f[at + 1]) << 8) | usize::from(f[at + 2]);
            assert!(len <= 16_384);
            at += 9 + len;
        }
        assert_eq!(at, f.len());
    }
});
