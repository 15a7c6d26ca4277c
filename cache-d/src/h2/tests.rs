use bytes::BytesMut;

use super::head::{request_head, response};
use super::out::{Piece, Unframe};
use super::upgrade::{request_frames, settings_field_ok};
use crate::http1::head::wants_h2c;
use crate::http1::head::{parse_request, parse_response, Head, Parsed};

/// Feed `wire` to an unframer in writes of `step` bytes, as the steps
/// would; the payload it let through and whether the body ended.
fn unframe(mut u: Unframe, wire: &[u8], step: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let buf = &wire[at..(at + step).min(wire.len())];
        match u.step(buf) {
            Piece::Frame(n) => at += n,
            Piece::Data(n) => {
                out.extend_from_slice(&buf[..n]);
                u.took(n);
                at += n;
            }
            Piece::Over => break,
        }
        if u.complete() {
            break;
        }
    }
    (out, u.complete())
}

#[test]
fn chunked_bodies_lose_their_framing_in_any_split() {
    let wire = b"5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer: x\r\n\r\nEXTRA";
    for step in [1, 2, 3, 7, 64, 1000] {
        let (payload, done) = unframe(Unframe::Chunked(super::out::Chunk::Size(0)), wire, step);
        assert_eq!(payload, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
        assert!(done, "step {step}");
    }
    // A chunk size past u64 (found by fuzz/h2_glue) saturates.
    let (payload, done) = unframe(Unframe::Chunked(super::out::Chunk::Size(0)), b"ffffffffffffffffffffffff\nab", 3);
    assert_eq!((payload, done), (b"ab".to_vec(), false));
    // A body cut before its last chunk is not complete.
    let (payload, done) = unframe(Unframe::Chunked(super::out::Chunk::Size(0)), b"5\r\nhel", 2);
    assert_eq!((payload, done), (b"hel".to_vec(), false));
}

#[test]
fn lengths_end_the_body_and_eof_never_does() {
    assert_eq!(unframe(Unframe::Length(5), b"helloEXTRA", 3), (b"hello".to_vec(), true));
    assert_eq!(unframe(Unframe::Length(5), b"hel", 3), (b"hel".to_vec(), false));
    assert_eq!(unframe(Unframe::Eof, b"anything", 3), (b"anything".to_vec(), false));
}

fn http1(raw: &[u8]) -> Head {
    match parse_request(&mut BytesMut::from(raw), 64, 65536).unwrap() {
        Parsed::Complete(h) => h,
        Parsed::Partial => panic!("partial"),
    }
}

#[test]
fn a_stream_request_is_a_head_as_http1_gives() {
    let req = http::Request::builder()
        .method("POST")
        .uri("https://example.com/a?b=c")
        .header("cookie", "a=1")
        .header("x-one", "1")
        .header("cookie", "b=2")
        .body(())
        .unwrap();
    let (parts, ()) = req.into_parts();
    let h = request_head(&parts);
    assert_eq!((h.method(), h.url(), h.protocol()), (&b"POST"[..], &b"/a?b=c"[..], "HTTP/2.0"));
    assert_eq!(h.get("host"), Some(&b"example.com"[..]));
    assert_eq!(h.get("cookie"), Some(&b"a=1; b=2"[..]));
    assert_eq!(h.get("x-one"), Some(&b"1"[..]));
    // :authority and a host field make two Host fields (refused as a
    // duplicate, as Varnish refuses them), :authority's first.
    let (parts, ()) = http::Request::builder().uri("http://a.test/").header("host", "b.test").body(()).unwrap().into_parts();
    let h = request_head(&parts);
    let hosts: Vec<&[u8]> = h.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"host")).map(|(_, v)| v).collect();
    assert_eq!(hosts, [&b"a.test"[..], b"b.test"]);
    assert!(crate::http1::head::request_checks(&h).is_err());
    // A host field alone is the Host.
    let (parts, ()) = http::Request::builder().uri("/").header("host", "b.test").body(()).unwrap().into_parts();
    assert_eq!(request_head(&parts).get("host"), Some(&b"b.test"[..]));
}

#[test]
fn responses_drop_what_http2_forbids() {
    let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close, Other\r\nKeep-Alive: x\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nOther: y\r\nX-A: 2\r\n\r\n";
    let Parsed::Complete(h) = parse_response(&mut BytesMut::from(&wire[..]), 64, 65536).unwrap() else { panic!() };
    let r = response(&h);
    assert_eq!(r.status(), 200);
    let names: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["content-length", "x-a"]);
    assert_eq!(r.headers().get_all("x-a").iter().count(), 2);
}

#[test]
fn upgrades_are_recognised_only_as_the_rfc_asks() {
    let ok = "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n";
    assert!(wants_h2c(&http1(ok.as_bytes())));
    for bad in [
        ok.replace("Upgrade: h2c", "Upgrade: websocket"),
        ok.replace("HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n", ""),
        ok.replace("HTTP/1.1", "HTTP/1.0"),
        ok.replace("Host: a\r\n", "Host: a\r\nContent-Length: 5\r\n"),
        ok.replace("Host: a\r\n", "Host: a\r\nHTTP2-Settings: AAAA\r\n"),
    ] {
        assert!(!wants_h2c(&http1(bad.as_bytes())), "{bad}");
    }
    // Connection need not name them (Varnish does not ask it to).
    assert!(wants_h2c(&http1(ok.replace("Connection: Upgrade, HTTP2-Settings\r\n", "").as_bytes())));
    for (v, good) in [
        ("AAMAAABkAAQAAP__", true),
        ("AAMAAABkAAQCAAAAAAIAAAAA", true),
        ("", true),
        ("#######", false),
        ("AAMAAABk", true),
        ("AAMAAA", false),
        ("AAMAAABkAAQAAP+/", false),
    ] {
        assert_eq!(settings_field_ok(v.as_bytes()), good, "{v}");
    }
}

#[test]
fn the_upgrade_request_becomes_headers_on_stream_one() {
    let h = http1(
        b"GET /x HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAAA\r\nX-Y: z\r\n\r\n",
    );
    let f = request_frames(&h);
    let len = (usize::from(f[0]) << 16) | (usize::from(f[1]) << 8) | usize::from(f[2]);
    assert_eq!(len + 9, f.len());
    assert_eq!(&f[3..9], &[0x1, 0x5, 0, 0, 0, 1], "HEADERS, END_STREAM|END_HEADERS, stream 1");
    let block = &f[9..];
    // Literal, not indexed, new name ":method" (7 bytes) "GET" (3 bytes).
    assert_eq!(&block[..13], b"\x00\x07:method\x03GET");
    let text = String::from_utf8_lossy(block);
    assert!(text.contains(":authority\x06a.test") && text.contains("x-y\x01z"), "{text:?}");
    assert!(!text.contains("upgrade") && !text.contains("http2-settings") && !text.contains("host\x06"), "{text:?}");
    // A long head is cut into HEADERS and CONTINUATION frames.
    let long = format!("GET / HTTP/1.1\r\nHost: a\r\nX-Long: {}\r\n\r\n", "v".repeat(40_000));
    let f = request_frames(&http1(long.as_bytes()));
    let mut at = 0;
    let mut kinds = Vec::new();
    while at < f.len() {
        let len = (usize::from(f[at]) << 16) | (usize::from(f[at + 1]) << 8) | usize::from(f[at + 2]);
        kinds.push((f[at + 3], f[at + 4]));
        at += 9 + len;
    }
    assert_eq!(kinds, [(0x1, 0x1), (0x9, 0x0), (0x9, 0x4)]);
}

#[test]
fn the_frame_scan_counts_resets_in_any_split() {
    // SETTINGS on stream 0, the others on stream 1 (HEADERS whole: seven
    // empty HPACK literals).
    let frame = |kind: u8, len: usize| {
        let (flags, s) = (if kind == 1 { 4 } else { 0 }, u8::from(kind != 4));
        [&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags, 0, 0, 0, s][..], &vec![0; len]].concat()
    };
    let wire = [super::PREFACE.to_vec(), frame(4, 6), frame(1, 21), frame(3, 4), frame(0, 70_000), frame(3, 4), frame(3, 4)].concat();
    for step in [1, 5, 9, 100, wire.len()] {
        let mut scan = super::io::FrameScan::new();
        for piece in wire.chunks(step) {
            scan.feed(piece);
        }
        assert_eq!(scan.resets.load(std::sync::atomic::Ordering::Relaxed), 3, "step {step}");
    }
}

#[test]
fn the_frame_scan_answers_frame_errors_with_their_codes() {
    use super::scan::{check_block, FrameScan, Undecodable};
    let frame = |kind: u8, flags: u8, s: u8, p: &[u8]| [&[0, 0, p.len() as u8, kind, flags, 0, 0, 0, s][..], p].concat();
    let run = |wire: Vec<u8>| {
        let mut scan = FrameScan::new();
        let mut out = BytesMut::new();
        scan.push(&[super::PREFACE, &wire[..]].concat(), &mut out);
        (scan.dead, scan.to_client, out.len() - super::PREFACE.len())
    };
    let headers = frame(1, 0x4, 1, &[0x82, 0x86, 0x84]);
    assert_eq!(run([headers.clone(), frame(3, 0, 1, &[0; 5])].concat()).0, Some(h2::Reason::FRAME_SIZE_ERROR));
    assert_eq!(run(frame(6, 0, 0, &[0; 7])).0, Some(h2::Reason::FRAME_SIZE_ERROR));
    assert_eq!(run(frame(6, 1, 0, &[0; 8])).0, Some(h2::Reason::PROTOCOL_ERROR));
    assert_eq!(run(frame(4, 0, 0, &[0, 4, 0x80, 0, 0, 0])).0, Some(h2::Reason::FLOW_CONTROL_ERROR));
    let (dead, goaway, passed) = run([headers.clone(), frame(5, 0, 1, &[0; 8])].concat());
    assert_eq!((dead, &goaway[9..13], passed), (Some(h2::Reason::PROTOCOL_ERROR), &[0, 0, 0, 1][..], headers.len()));
    // A WINDOW_UPDATE of 0 on an open stream: RST for the client, CANCEL for the crate.
    let (dead, rst, passed) = run([headers.clone(), frame(8, 0, 1, &[0; 4])].concat());
    assert_eq!((dead, rst.len(), passed), (None, 13, headers.len() + 13));
    assert_eq!(check_block(&[0xff; 12]), Err(Undecodable));
    assert_eq!(check_block(&[0x82, 0x41, 0x0f, b'w']), Err(Undecodable));
    assert_eq!(check_block(&[0x00, 0x05, b's', b'n', b'a', b'F', b'u', 0x01, b'x']), Ok(vec![std::ops::Range { start: 2, end: 7 }]));
    assert_eq!(check_block(&[0x00, 0x03, b'a', b'-', b'b', 0x00]), Ok(vec![]));
}

#[test]
fn padding_only_data_is_kept_from_the_crate_and_its_window_given_back() {
    use super::scan::FrameScan;
    let frame = |kind: u8, flags: u8, s: u8, p: &[u8]| [&[0, 0, p.len() as u8, kind, flags, 0, 0, 0, s][..], p].concat();
    let headers = frame(1, 0x4, 1, &[0x82, 0x86, 0x84]);
    let padded = |pad: u8, data: &[u8], flags: u8| frame(0, 0x8 | flags, 1, &[&[pad][..], data, &vec![0; usize::from(pad)]].concat());
    let mut scan = FrameScan::new();
    scan.set_stream_window(65_535);
    let mut out = BytesMut::new();
    scan.push(&[super::PREFACE, &headers[..]].concat(), &mut out);
    let before = out.len();
    // 64 frames of 255 bytes of padding: 16320 bytes, under the batch.
    for _ in 0..64 {
        scan.push(&padded(254, b"", 0), &mut out);
    }
    assert_eq!((out.len(), scan.to_client.len()), (before, 0), "nothing for the crate, no credit yet");
    scan.push(&padded(254, b"", 0), &mut out);
    // One WINDOW_UPDATE for the connection, one for stream 1: 16575 each.
    assert_eq!(scan.to_client.len(), 26);
    let updates: Vec<_> = scan
        .to_client
        .chunks(13)
        .map(|f| (f[3], u32::from_be_bytes([f[5], f[6], f[7], f[8]]), u32::from_be_bytes([f[9], f[10], f[11], f[12]])))
        .collect();
    assert!(updates.contains(&(0x8, 0, 16_575)) && updates.contains(&(0x8, 1, 16_575)), "{updates:?}");
    // Padding with data, or ending the stream, goes to the crate whole.
    let with_data = padded(3, b"abc", 0);
    scan.push(&with_data, &mut out);
    let end = padded(2, b"", 0x1);
    scan.push(&end, &mut out);
    assert_eq!(&out[before..], &[with_data, end].concat()[..]);
    assert!(scan.dead.is_none());
}
