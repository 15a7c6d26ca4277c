//! Hostile HTTP/2, frame by frame: a table of connections (rapid reset,
//! CONTINUATION flood, HPACK bomb, junk, a window that never opens), each
//! with the answer it must get, against one daemon whose child must
//! survive them all; and GOAWAY when the daemon stops.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ENHANCE_YOUR_CALM: u32 = 0xb;
const PROTOCOL_ERROR: u32 = 0x1;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A GET's header block: :method GET and :scheme http from the static
/// table, :path and :authority as literals with indexed names.
fn get_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x04, path.len() as u8];
    b.extend_from_slice(path.as_bytes());
    b.extend_from_slice(&[0x01, 0x01, b'x']);
    b
}

fn get(stream: u32, path: &str) -> Vec<u8> {
    frame(HEADERS, END_STREAM | END_HEADERS, stream, &get_block(path))
}

/// A connection's opening: the preface and these SETTINGS.
fn opening(settings: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    [PREFACE, &frame(SETTINGS, 0, 0, &p)].concat()
}

/// A frame as received.
#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// Send `bytes` (what the server takes before it closes), then read frames
/// until the connection closes or `secs` pass.
fn exchange(port: u16, bytes: &[u8], secs: u64) -> Vec<Frame> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = s.write_all(bytes);
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let (mut got, mut buf) = (Vec::new(), [0u8; 65536]);
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    frames(&got)
}

/// The frames in what a server sent (after its preface-less start).
fn frames(got: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at + 9 <= got.len() {
        let len = (usize::from(got[at]) << 16) | (usize::from(got[at + 1]) << 8) | usize::from(got[at + 2]);
        let stream = u32::from_be_bytes(got[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        let payload = got[at + 9..(at + 9 + len).min(got.len())].to_vec();
        frames.push(Frame { kind: got[at + 3], flags: got[at + 4], stream, payload });
        at += 9 + len;
    }
    frames
}

/// The error code of the connection's GOAWAY, if one came.
fn goaway(frames: &[Frame]) -> Option<u32> {
    frames.iter().find(|f| f.kind == GOAWAY).map(|f| u32::from_be_bytes(f.payload[4..8].try_into().unwrap()))
}

/// Did stream `id` get a 200 (HPACK static index 8, as the crate encodes it)?
fn ok_on(frames: &[Frame], id: u32) -> bool {
    frames.iter().any(|f| f.kind == HEADERS && f.stream == id && f.payload.first() == Some(&0x88))
}

/// What a hostile connection must get.
#[derive(Debug)]
enum Want {
    /// GOAWAY with this error code.
    GoAway(u32),
    /// No 200 on stream 1, and the connection ends (GOAWAY or close) or
    /// the stream is reset or refused.
    Refused,
    /// Stream 1 reset (RST_STREAM) without the rest of its body.
    Reset,
    /// Stream 1 reset with this error code before any response.
    ResetWith(u32),
    /// A 400 on stream 1 (HPACK static index 12).
    BadRequest,
}

/// A hostile connection: its name, its bytes, and what it must get.
type Row = (&'static str, fn() -> Vec<u8>, Want);

fn rapid_reset() -> Vec<u8> {
    let mut b = opening(&[]);
    for i in 0..2000u32 {
        let id = 1 + 2 * i;
        b.extend(get(id, "/size/1?max_age=60"));
        b.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    b
}

fn continuation_flood() -> Vec<u8> {
    let mut b = opening(&[]);
    b.extend(frame(HEADERS, END_STREAM, 1, &get_block("/size/1")));
    for _ in 0..20_000 {
        b.extend(frame(CONTINUATION, 0, 1, &[]));
    }
    b
}

fn continuation_oversized() -> Vec<u8> {
    let mut b = opening(&[]);
    b.extend(frame(HEADERS, END_STREAM, 1, &get_block("/size/1")));
    // Literal fields of 1,000 bytes each: far past http_req_size.
    let mut field = vec![0x00, 0x01, b'x', 0x7f, 0xe9, 0x06];
    field.extend(std::iter::repeat_n(b'v', 1000));
    for _ in 0..200 {
        b.extend(frame(CONTINUATION, 0, 1, &field));
    }
    b.extend(frame(CONTINUATION, END_HEADERS, 1, &[]));
    b
}

fn hpack_bomb() -> Vec<u8> {
    // One 4,000-byte value into the dynamic table (literal with incremental
    // indexing), then 5,000 one-byte references to it: 20 MB decoded.
    let mut block = get_block("/size/1");
    block.extend_from_slice(&[0x40, 0x06]);
    block.extend_from_slice(b"x-bomb");
    block.extend_from_slice(&[0x7f, 0x81, 0x1e]);
    block.extend(std::iter::repeat_n(b'a', 4000));
    block.extend(std::iter::repeat_n(0xbe, 5000));
    let mut b = opening(&[]);
    b.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1, &block));
    b
}

fn table_size_bomb() -> Vec<u8> {
    // A dynamic table size update far beyond what we allow.
    let mut block = vec![0x3f, 0xe1, 0xff, 0xff, 0x0f];
    block.extend(get_block("/size/1"));
    [opening(&[]), frame(HEADERS, END_STREAM | END_HEADERS, 1, &block)].concat()
}

fn junk() -> Vec<u8> {
    [PREFACE, b"\x00\x00\x08\x63\xff\x00\x00\x00\x00garbage!" as &[u8], b"\xff\xff\xff\xff\xff\xff\xff\xff\xff"].concat()
}

/// A CONNECT (no :path, as RFC 9113 §8.5 has it): Varnish resets the
/// stream (PROTOCOL_ERROR, "Missing :path"); it was passed to the backend.
fn connect() -> Vec<u8> {
    let mut block = vec![0x02, 0x07];
    block.extend_from_slice(b"CONNECT");
    block.extend_from_slice(&[0x01, 0x0f]);
    block.extend_from_slice(b"example.com:443");
    [opening(&[]), frame(HEADERS, END_STREAM | END_HEADERS, 1, &block)].concat()
}

/// :authority and a host field (static index 38, "y") that disagree:
/// both become Host fields, so Varnish answers 400 (as it does when they
/// agree); it was served.
fn authority_and_host() -> Vec<u8> {
    let mut block = get_block("/size/1");
    block.extend_from_slice(&[0x0f, 0x17, 0x01, b'y']);
    [opening(&[]), frame(HEADERS, END_STREAM | END_HEADERS, 1, &block)].concat()
}

fn closed_window() -> Vec<u8> {
    // SETTINGS_INITIAL_WINDOW_SIZE 0: the response body can never be sent.
    [opening(&[(0x4, 0)]), get(1, "/size/100000?max_age=60")].concat()
}

#[test]
fn hostile_http2_is_answered_and_the_child_lives() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let d = Daemon::start(&tmp.path().join("i"), &backend, &["-p", "feature=+http2", "-p", "idle_send_timeout=1"]);
    let table: &[Row] = &[
        ("rapid reset", rapid_reset, Want::GoAway(ENHANCE_YOUR_CALM)),
        ("CONTINUATION flood", continuation_flood, Want::GoAway(ENHANCE_YOUR_CALM)),
        ("CONTINUATION past the header list size", continuation_oversized, Want::Refused),
        ("HPACK bomb", hpack_bomb, Want::Refused),
        ("HPACK table size update past the setting", table_size_bomb, Want::Refused),
        ("junk frames", junk, Want::Refused),
        ("a window that never opens", closed_window, Want::Reset),
        // Regressions (issue 32), as varnishd 7.1 answers them.
        ("CONNECT", connect, Want::ResetWith(PROTOCOL_ERROR)),
        (":authority and host", authority_and_host, Want::BadRequest),
    ];
    for (name, bytes, want) in table {
        let frames = exchange(d.port, &bytes(), 4);
        let ok = match want {
            Want::GoAway(code) => goaway(&frames) == Some(*code),
            Want::Refused => !ok_on(&frames, 1),
            Want::Reset => {
                let data: usize = frames.iter().filter(|f| f.kind == 0 && f.stream == 1).map(|f| f.payload.len()).sum();
                ok_on(&frames, 1) && data < 100_000 && frames.iter().any(|f| f.kind == RST_STREAM && f.stream == 1)
            }
            Want::ResetWith(code) => {
                !frames.iter().any(|f| f.kind == HEADERS && f.stream == 1)
                    && frames.iter().any(|f| f.kind == RST_STREAM && f.stream == 1 && f.payload == code.to_be_bytes())
            }
            Want::BadRequest => frames.iter().any(|f| f.kind == HEADERS && f.stream == 1 && f.payload.first() == Some(&0x8c)),
        };
        let summary: Vec<String> = frames.iter().map(|f| format!("{}/{:x}/{}/{}", f.kind, f.flags, f.stream, f.payload.len())).collect();
        assert!(ok, "{name}: want {want:?}, got {summary:?}");
        // Every row leaves the child serving.
        assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200, "after {name}");
    }
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MGT.child_start"), Some(1), "the child died on the way:\n{once}");
    assert!(counter(&once, "MAIN.sc_rapid_reset") >= Some(1), "{once}");
    let dir = d.dir.to_str().unwrap();
    let log = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "SessClose,Error", "-n", dir]));
    assert!(log.contains("RAPID_RESET") && log.contains("HTTP/2: connection error detected"), "{log}");
}

#[test]
fn stopping_sends_goaway_and_finishes_streams() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let mut d = Daemon::start(&tmp.path().join("i"), &backend, &["-p", "feature=+http2"]);
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    // A slow response in progress when the stop comes.
    s.write_all(&[opening(&[]), get(1, "/slow?delay_ms=700")].concat()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let stopper = std::thread::spawn(move || d.stop());
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let _ = stopper.join();
    let frames = frames(&got);
    assert_eq!(goaway(&frames), Some(0), "{frames:?}");
    assert!(ok_on(&frames, 1), "{frames:?}");
}

#[test]
fn resets_of_streams_at_work_count_against_the_limit() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let limits = ["-p", "feature=+http2", "-p", "h2_rapid_reset_limit=10", "-p", "h2_max_concurrent_streams=20"];
    let d = Daemon::start(&tmp.path().join("i"), &backend, &limits);
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    s.write_all(&opening(&[])).unwrap();
    // Twenty slow requests at work, then reset by the client; twenty more
    // while the first are still busy (refused: the work in progress is
    // what counts, not the client's open streams).
    for round in 0..2u32 {
        let ids: Vec<u32> = (0..20).map(|i| 1 + 2 * (round * 20 + i)).collect();
        let gets: Vec<u8> = ids.iter().flat_map(|&id| get(id, &format!("/slow?delay_ms=600&n={id}"))).collect();
        s.write_all(&gets).unwrap();
        std::thread::sleep(Duration::from_millis(150));
        let resets: Vec<u8> = ids.iter().flat_map(|&id| frame(RST_STREAM, 0, id, &8u32.to_be_bytes())).collect();
        let _ = s.write_all(&resets);
    }
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert_eq!(goaway(&frames(&got)), Some(ENHANCE_YOUR_CALM));
    let once = wait_for(10, "the session's close", || {
        let once = stat(&d.dir);
        (counter(&once, "MAIN.sc_rapid_reset") == Some(1)).then_some(once)
    });
    assert!(counter(&once, "MAIN.req_reset") > Some(10), "{once}");
    assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200);
}

/// Regression (issue 32): pass streams behind a flow-control window that
/// never opens each held a backend connection for idle_send_timeout
/// (60 s): 100 per client connection (h2_max_concurrent_streams). Once
/// the connection has given no credit for a while, at most 8 of its
/// streams wait for it; the others are reset and their fetches end.
#[test]
fn pass_streams_behind_a_closed_window_do_not_pin_backend_connections() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let d = Daemon::start(&tmp.path().join("i"), &backend, &["-p", "feature=+http2"]);
    let conn = |d: &Daemon| counter(&stat(&d.dir), "VBE.boot.default.conn").unwrap_or(0);
    // SETTINGS_INITIAL_WINDOW_SIZE 0, and never a WINDOW_UPDATE: 100
    // passed (Cookie, static index 32) 1 MB bodies that cannot be sent.
    let mut bytes = opening(&[(0x4, 0)]);
    for i in 0..100u32 {
        let mut block = get_block(&format!("/size/1000000?n={i}"));
        block.extend_from_slice(&[0x0f, 0x11, 0x06]);
        block.extend_from_slice(b"pass=1");
        bytes.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, &block));
    }
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    s.write_all(&bytes).unwrap();
    wait_for(10, "the passes to start", || (conn(&d) >= 50).then_some(()));
    let t0 = Instant::now();
    wait_for(10, "all but a few backend connections to be given up", || (conn(&d) <= 8).then_some(()));
    assert!(t0.elapsed() < Duration::from_secs(6), "given up after {:?}", t0.elapsed());
    // The streams given up were reset; the connection is still there.
    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let frames = frames(&got);
    assert!(
        frames.iter().filter(|f| f.kind == RST_STREAM).count() >= 90,
        "{} resets",
        frames.iter().filter(|f| f.kind == RST_STREAM).count()
    );
    assert_eq!(goaway(&frames), None);
    assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200);
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
}
