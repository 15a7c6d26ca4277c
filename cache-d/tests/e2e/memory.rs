//! Memory that stays inside its budget whatever clients do (issue 32):
//! each row starts a real cache-d, sends what used to grow the child
//! past every budget, and samples the child's resident memory from
//! /proc while it does.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::storage::child_pid;
use crate::util::*;

/// A backend that answers every request with `head` and `body`, then
/// closes.
fn fixed_backend(head: String, body: Vec<u8>) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let body = std::sync::Arc::new(body);
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (head, body) = (head.clone(), body.clone());
            std::thread::spawn(move || {
                let mut s = s;
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut req = Vec::new();
                let mut b = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(&body);
            });
        }
    });
    port
}

/// The child's resident memory now, in KiB.
fn child_rss(dir: &std::path::Path) -> u64 {
    child_pid(dir).and_then(|p| rss_kib(p as u32)).expect("the child's VmRSS")
}

/// Open `n` connections that each ask for `path` (with `headers`) and
/// never read the answer; the child's largest growth over `secs`.
fn stalled_clients(d: &Daemon, n: usize, path: &str, headers: &str, secs: u64) -> (Vec<TcpStream>, u64) {
    let base = child_rss(&d.dir);
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
