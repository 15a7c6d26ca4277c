//! The forwarding path: framing, keep-alive, errors and their counters.

use std::io::Write;
use std::net::TcpListener;

use crate::util::*;

fn setup() -> (Origin, tempfile::TempDir, Daemon) {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    (origin, tmp, d)
}

#[test]
fn bodies_heads_and_chunked_transfers() {
    let (_o, _t, d) = setup();
    let mut c = Client::connect(d.port);
    // Passed (a Cookie), chunked from the origin stays chunked to an
    // HTTP/1.1 client.
    let r = c.get("/size/100000?chunked=1", "Cookie: a=b\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.body.len(), 100000);
    assert!(r.body.starts_with(b"0123456789abcdef"));
    // HEAD: headers (with the length) and no body, connection still usable.
    c.send_raw(b"HEAD /size/5000 HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.read_response(true).unwrap();
    assert_eq!(r.header("content-length"), Some("5000"));
    let r = c.get("/size/10", "");
    assert_eq!(r.body, b"0123456789");
    // Pipelined requests are answered in order.
    c.send_raw(b"GET /size/1 HTTP/1.1\r\nHost: x\r\n\r\nGET /size/2 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().body, b"0");
    assert_eq!(c.read_response(false).unwrap().body, b"01");
    // A POST with a chunked body reaches the origin and the answer comes back.
    c.send_raw(b"POST /size/3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.header("x-request-body-bytes")), (200, Some("4")));
    c.send_raw(b"POST /size/4 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.body.as_slice(), r.header("x-request-body-bytes")), (&b"0123"[..], Some("5")));
    // Connection: close is honoured.
    c.send_raw(b"GET /size/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.client_req"), Some(8));
    assert_eq!(counter(&once, "MAIN.s_req_bodybytes"), Some(5 + 14));
    assert_eq!(counter(&once, "MAIN.sess_conn"), Some(1));
}

#[test]
fn malformed_requests_get_400_a_counter_and_a_log_record() {
    let (_o, _t, d) = setup();
    let cases: [&[u8]; 4] = [
        b"GARBAGE\x01\x02\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header Name: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    ];
    for raw in cases {
        let mut c = Client::connect(d.port);
        c.send_raw(raw);
        let r = c.read_response(false).expect("an answer to a bad request");
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(raw));
        assert!(c.closed());
    }
    // Oversized head.
    let mut c = Client::connect(d.port);
    let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(40_000));
    c.send_raw(big.as_bytes());
    assert_eq!(c.read_response(false).unwrap().status, 400);
    // One header past http_req_hdr_len (8k) in a head within http_req_size.
    let mut c = Client::connect(d.port);
    let long = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Long: {}\r\n\r\n", "b".repeat(9000));
    c.send_raw(long.as_bytes());
    assert_eq!(c.read_response(false).unwrap().status, 400);
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.client_req_400"), Some(6), "{once}");
    assert_eq!(counter(&once, "MAIN.client_req"), Some(0));
    // (A request's records are committed just after its last byte.)
    let log = wait_for(10, "six 400s logged", || {
        Some(stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()]))).filter(|l| l.matches("RespStatus     400").count() >= 6)
    });
    // Printed as varnishlog prints it: quoted, bytes outside printable ASCII as %XX.
    assert!(log.contains("HttpGarbage    \"GARBAGE%01%02"), "{log}");
    assert_eq!(log.matches("RespStatus     400").count(), 6);
    assert!(log.contains("SessClose      RX_JUNK"));
    // ncsa skips garbage transactions but keeps the parsed bad ones.
    let ncsa = stdout(&run("cache-ncsa", &["-d", "-n", d.dir.to_str().unwrap()]));
    assert_eq!(ncsa.lines().count(), 3, "{ncsa}");
    // A chunked body with a bad chunk size: 400, on the pass and the cache path.
    for method in ["POST", "GET"] {
        let mut c = Client::connect(d.port);
        let req = format!("{method} /size/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n");
        c.send_raw(req.as_bytes());
        assert_eq!(c.read_response(false).unwrap().status, 400, "{method}");
        assert!(c.closed());
    }
    // HTTP/1.1 without Host: the built-in policy's synthetic 400.
    let mut c = Client::connect(d.port);
    c.send_raw(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 400);
}

#[test]
fn unreachable_backend_gets_503_and_backend_fail() {
    // A port that was free a moment ago: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{port}"), &["-p", "connect_timeout=1"]);
    let mut c = Client::connect(d.port);
    let r = c.get("/", "");
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).contains("Guru Meditation"));
    // Still keep-alive after a synthetic 503.
    assert_eq!(c.get("/", "").status, 503);
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.backend_fail"), Some(2));
    assert_eq!(counter(&once, "MAIN.fetch_failed"), Some(2));
    let log = stdout(&run("cache-log", &["-d", "-g", "request", "-n", d.dir.to_str().unwrap()]));
    assert!(log.contains("FetchError     connect: Connection refused"), "{log}");
}

#[test]
fn a_backend_dying_mid_body_closes_the_client_connection() {
    let (_o, _t, d) = setup();
    let mut c = Client::connect(d.port);
    c.send_raw(b"GET /size/100000?abort_after=30000 HTTP/1.1\r\nHost: x\r\n\r\n");
    // The head arrives with the full length, then the body stops short and
    // the connection closes: the client must not see a complete response.
    assert!(c.read_response(false).is_none());
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.fetch_failed"), Some(1));
    // The daemon is fine afterwards.
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/size/3", "").body, b"012");
}

#[test]
fn a_backend_that_drops_a_reused_connection_is_retried() {
    // A backend that answers the first request on each connection, keeps it
    // open, and closes it without a word when a second request arrives: the
    // pooled connection looks alive but fails on reuse.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(2) {
            let mut s = s.unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = std::io::Read::read(&mut s, &mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 2\r\n\r\nok");
                let _ = std::io::Read::read(&mut s, &mut buf);
            });
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{port}"), &[]);
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/", "").body, b"ok");
    assert_eq!(c.get("/", "").body, b"ok");
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.backend_retry"), Some(1), "{once}");
    assert_eq!(counter(&once, "MAIN.backend_conn"), Some(2));
}

#[test]
fn pooled_connections_the_backend_closed_are_not_reused() {
    // One response per connection, then close: the pool must notice.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(3) {
            let mut s = s.unwrap();
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{port}"), &[]);
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/", "").body, b"ok");
    // Let the close reach us before the next request.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(c.get("/", "").body, b"ok");
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MAIN.backend_conn"), Some(2), "{once}");
    assert_eq!(counter(&once, "MAIN.backend_reuse"), Some(0));
}
