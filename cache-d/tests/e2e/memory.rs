//! Memory that stays inside its budget whatever clients do (issue 32):
//! each row starts a real cache-d, sends what used to grow the child
//! past every budget, and samples the child's resident memory from
//! /proc while it does.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::hostile::hostile_backend;
use crate::storage::child_pid;
use crate::util::*;

/// A backend that answers every request with `head` and `body`, then
/// closes.
fn fixed_backend(head: String, body: Vec<u8>) -> u16 {
    hostile_backend(vec![[head.into_bytes(), body].concat()])
}

/// The child's resident memory now, in KiB.
fn child_rss(dir: &std::path::Path) -> u64 {
    child_pid(dir).and_then(|p| rss_kib(p as u32)).expect("the child's VmRSS")
}

/// The child's resident memory once it serves: its log's pages are
/// faulted in as it starts (see SegmentWriter::attach), after _.listen
/// tells a test it may go. A request without Host is answered 400 by the
/// child itself, without taking a scripted backend's one answer.
fn base_rss(d: &Daemon) -> u64 {
    let mut first = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    first.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    first.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 400");
    child_rss(&d.dir)
}

/// Open `n` connections that each ask for `path` (with `headers`) and
/// never read the answer; the child's largest growth over `secs`.
fn stalled_clients(d: &Daemon, n: usize, path: &str, headers: &str, secs: u64) -> (Vec<TcpStream>, u64) {
    let base = base_rss(d);
    let mut held = Vec::new();
    for _ in 0..n {
        let mut s = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").as_bytes()).unwrap();
        held.push(s);
    }
    let (t0, mut grew) = (Instant::now(), 0);
    while t0.elapsed() < Duration::from_secs(secs) {
        grew = grew.max(child_rss(&d.dir).saturating_sub(base));
        std::thread::sleep(Duration::from_millis(50));
    }
    (held, grew)
}

/// A gzip object of 64 MiB of zeros (64 KiB stored) delivered to clients
/// that cannot take gzip and do not read: each delivery inflates it
/// window by window as the client takes it; it inflated a whole stored
/// piece at once (64 MiB per client here; 264 MB per client from a 1 MB
/// gzip in the audit).
#[test]
fn a_gzip_bomb_to_plain_clients_that_do_not_read_is_inflated_in_windows() {
    let plain = 64usize << 20;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    z.write_all(&vec![0u8; plain]).unwrap();
    let gz = z.finish().unwrap();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        gz.len()
    );
    let port = fixed_backend(head, gz);
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{port}"), &["-s", "malloc,32M"]);
    // Cached gzip first.
    let r = Client::connect(d.port).get("/bomb", "Accept-Encoding: gzip\r\n");
    assert_eq!((r.status, r.header("content-encoding")), (200, Some("gzip")));
    let (held, grew) = stalled_clients(&d, 4, "/bomb", "", 3);
    assert!(grew < 40 << 10, "four stalled plain clients grew the child by {grew} KiB");
    drop(held);
    // A plain client that reads gets every byte.
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    s.write_all(b"GET /bomb HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(all.len() - at, plain);
    assert!(all[at..].iter().all(|&b| b == 0));
    // A 100-byte range of it stops inflating past the range.
    let r = Client::connect(d.port).get("/bomb", "Range: bytes=0-99\r\n");
    assert_eq!((r.status, r.body.len()), (206, 100));
}

/// Misses too large for the store, and uncacheable ones, for clients
/// that do not read: the fetch goes at the pace of the slowest client,
/// holding at most transit_buffer (it read the whole body into memory:
/// two such clients on two 1 GiB objects took the child from 22 MB to
/// 2.1 GB under -s malloc,100M in the audit). A client that reads gets
/// every byte, and one that leaves frees the backend.
#[test]
fn bodies_not_kept_go_at_the_pace_of_their_clients() {
    let o = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", o.port), &["-s", "malloc,16M"]);
    let big = "/size/300000000?max_age=600";
    let private = "/size/300000000?cache_control=no-store&v=1";
    let (held, grew) = stalled_clients(&d, 2, big, "", 3);
    let (held2, grew2) = stalled_clients(&d, 2, private, "", 3);
    assert!(grew < 48 << 10, "two stalled clients of a 300 MB miss grew the child by {grew} KiB");
    assert!(grew2 < 48 << 10, "two stalled clients of a 300 MB uncacheable object grew the child by {grew2} KiB");
    drop((held, held2));
    // The backend connections are let go once the clients are gone.
    let conn = |d: &Daemon| counter(&stat(&d.dir), "VBE.boot.default.conn");
    wait_for(15, "the fetches to stop", || (conn(&d) == Some(0)).then_some(()));
    // A client that reads gets all of a body too large to keep.
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    s.write_all(b"GET /size/40000000?max_age=600&v=2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(all.len() - at, 40_000_000);
    let fresh = Client::connect(o.port).get("/size/40000000", "");
    assert!(all[at..] == fresh.body[..], "the bytes the origin sends");
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
}

/// ESI pages are parsed whole: a page over 16 MiB plain, or with more
/// includes than a request may ever run, fails its fetch (a 153 KB gzip
/// page of 2.8 million includes took 23 s of CPU and 1.47 GB in the
/// audit; a 610 KB one killed the child). The child stays small and
/// alive, and a sane page still works.
#[test]
fn esi_pages_are_bounded_in_size_and_includes() {
    let gz = |plain: &[u8]| {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
        z.write_all(plain).unwrap();
        z.finish().unwrap()
    };
    let include = b"<esi:include src=\"/i\"/>";
    let huge: Vec<u8> = include.iter().copied().cycle().take(include.len() * 1_000_000).collect();
    let many: Vec<u8> = include.iter().copied().cycle().take(include.len() * 30_000).collect();
    for (what, plain) in [("24 MB of includes", huge), ("30,000 includes", many)] {
        let body = gz(&plain);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Type: text/html\r\nCache-Control: max-age=600\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let port = fixed_backend(head, body);
        let tmp = tempfile::tempdir().unwrap();
        let src = "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\nsub vcl_backend_response { set beresp.do_esi = true; }\n";
        let vcl = vcl_src(tmp.path(), "esi.vcl", src, port);
        let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap(), "-s", "malloc,64M"]);
        let base = base_rss(&d);
        let t0 = Instant::now();
        for ae in ["Accept-Encoding: gzip\r\n", ""] {
            let r = Client::connect(d.port).get("/page", ae);
            assert_eq!(r.status, 503, "{what}: the fetch fails");
        }
        let grew = child_rss(&d.dir).saturating_sub(base);
        assert!(t0.elapsed() < Duration::from_secs(5), "{what}: {:?}", t0.elapsed());
        assert!(grew < 80 << 10, "{what}: the child grew by {grew} KiB");
        let s = stat(&d.dir);
        assert_eq!(counter(&s, "MGT.child_start"), Some(1), "{what}");
    }
}

/// HTTP/3 clients that ask for a 300 MB miss on ten streams each and stop
/// reading: what a QUIC connection holds for a client that does not read
/// is bounded by h3_send_window (sent and not acknowledged) and one piece
/// per stream, and the fetch goes at the client's pace as over TCP.
#[test]
fn http3_clients_that_do_not_read_hold_little() {
    if !crate::h3::have_aioquic() {
        return;
    }
    let o = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let args = ["-b", &format!("127.0.0.1:{}", o.port), "-s", "malloc,16M", "-p", "feature=+http3"];
    let (d, port) = crate::listeners::tls_daemon(tmp.path(), &args, &crate::h3::pem(tmp.path(), "h3.test"));
    let base = base_rss(&d);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3hostile.py");
    let greedy = std::process::Command::new("python3")
        .arg(script)
        .arg(port.to_string())
        .arg("greedy-readers")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (t0, mut grew) = (Instant::now(), 0);
    while t0.elapsed() < Duration::from_secs(5) {
        grew = grew.max(child_rss(&d.dir).saturating_sub(base));
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("memory: four stalled HTTP/3 clients (10 streams each) grew the child by {grew} KiB");
    let out = greedy.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("held"), "{}", String::from_utf8_lossy(&out.stdout));
    // Four connections of ten streams: 4 x 1 MiB of send window, and the
    // fetches' transit buffers, well under what one body would take.
    assert!(grew < 64 << 10, "four stalled HTTP/3 clients of a 300 MB miss grew the child by {grew} KiB");
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
}
