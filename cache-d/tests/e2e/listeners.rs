//! Listeners beyond plain TCP: PROXY protocol listeners (their log
//! records and `%h` against varnishd's on the same bytes) and Unix-domain
//! sockets (with their mode, through curl).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use crate::util::*;

/// The port of the listener named `name` in an instance's `_.listen`.
fn listen_port(dir: &Path, name: &str) -> u16 {
    wait_for(10, "the named listener", || {
        let text = std::fs::read_to_string(dir.join("_.listen")).ok()?;
        text.lines().find(|l| l.starts_with(&format!("{name} ")))?.split(' ').nth(2)?.parse().ok()
    })
}

/// What one connection to a PROXY listener sends first, and whether a
/// request is answered after it.
const OPENINGS: &[(&[u8], bool)] = &[
    (b"PROXY TCP4 192.0.2.7 198.51.100.9 40000 443\r\n", true),
    (b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\xc0\x00\x02\x08\xc6\x33\x64\x09\x9c\x41\x01\xbb", true),
    (b"PROXY TCP6 2001:db8::1 2001:db8::2 5555 8443\r\n", true),
    (b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00", true),
    (b"\r\n\r\n\0\r\nQUIT\n\x21\x31\x00\x00", true),
    (b"PROXY TCP5 192.0.2.7 198.51.100.9 1 2\r\n", false),
    (b"PROXY TCP4 192.0.2.7 198.51.100.9 1\r\n", false),
    (b"PROXY TCP4 192.0.2.7 example.com 1 2\r\n", false),
    (b"\r\n\r\n\0\r\nQUIT\n\x31\x11\x00\x0c\xc0\x00\x02\x07\xc6\x33\x64\x09\x9c\x40\x01\xbb", false),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false),
];

/// Send every opening, one connection each, with a request behind it;
/// the statuses seen (0: closed without an answer).
fn openings(port: u16) -> Vec<u16> {
    OPENINGS
        .iter()
        .map(|(first, _)| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(first).unwrap();
            let _ = s.write_all(b"GET /size/3?max_age=60 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            let text = String::from_utf8_lossy(&got);
            text.strip_prefix("HTTP/1.1 ").and_then(|r| r[..3].parse().ok()).unwrap_or(0)
        })
        .collect()
}

/// The records a PROXY listener's sessions leave, without vxids, times
/// and descriptors: Begin, Proxy, ProxyGarbage, ReqStart, SessClose's reason.
fn proxy_records(raw: &str) -> Vec<String> {
    raw.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.get(1).copied()? {
                "Begin" if f.get(3) == Some(&"sess") => Some(f[1..].join(" ")),
                "Proxy" | "ProxyGarbage" => Some(f[1..].join(" ")),
                // The connection's own port is whatever the kernel chose.
                "ReqStart" if f[3] == "127.0.0.1" => Some(format!("ReqStart c 127.0.0.1 PORT {}", f[5..].join(" "))),
                "ReqStart" => Some(f[1..].join(" ")),
                "SessClose" => Some(format!("SessClose {}", f.get(3)?)),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn proxy_listeners_log_and_address_as_varnishd_does() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let d = Daemon::start(&tmp.path().join("i"), &backend, &["-a", "px=127.0.0.1:0,PROXY"]);
    let port = listen_port(&d.dir, "px");
    let ours = openings(port);
    let want: Vec<u16> = OPENINGS.iter().map(|(_, ok)| if *ok { 200 } else { 0 }).collect();
    assert_eq!(ours, want);
    // The child is still serving, and the plain listener never needed PROXY.
    assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200);
    let ds = d.dir.to_str().unwrap();
    let records = wait_for(10, "the sessions' records", || {
        let r = proxy_records(&stdout(&run("cache-log", &["-d", "-g", "raw", "-n", ds])));
        (r.iter().filter(|l| l.starts_with("SessClose")).count() >= OPENINGS.len()).then_some(r)
    });
    for want in [
        "Begin c sess 0 PROXY",
        "Proxy c 1 192.0.2.7 40000 198.51.100.9 443",
        "ReqStart c 192.0.2.7 40000 px",
        "Proxy c 2 192.0.2.8 40001 198.51.100.9 443",
        "Proxy c 1 2001:db8::1 5555 2001:db8::2 8443",
        "Proxy c 2 local local local local",
        "ProxyGarbage c PROXY2: Ignoring unsupported protocol (0x31)",
        "ProxyGarbage c PROXY1: Wrong TCP[46] field",
        "ProxyGarbage c PROXY1: Too few fields",
        "ProxyGarbage c PROXY1: Cannot resolve destination address",
        "ProxyGarbage c PROXY2: bad version (3)",
        "SessClose RX_JUNK",
    ] {
        assert!(records.iter().any(|r| r == want), "{want:?} in {records:#?}");
    }
    // %h is the address the PROXY header gave.
    let hosts = stdout(&run("cache-ncsa", &["-d", "-n", ds, "-F", "%h"]));
    for h in ["192.0.2.7", "192.0.2.8", "2001:db8::1", "127.0.0.1"] {
        assert!(hosts.lines().any(|l| l == h), "{h} in {hosts}");
    }
    if !have("varnishd") {
        return;
    }
    // varnishd on the very same bytes: the same answers and records.
    let vport = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let v = Varnishd::start_args(&tmp.path().join("v"), &backend, &["-a", &format!("px=127.0.0.1:{vport},PROXY")]);
    assert_eq!(openings(vport), ours);
    let vs = v.dir.to_str().unwrap();
    let theirs = wait_for(10, "varnishd's session records", || {
        let o = std::process::Command::new("varnishlog").args(["-d", "-g", "raw", "-n", vs]).output().unwrap();
        let r = proxy_records(&String::from_utf8_lossy(&o.stdout));
        (r.iter().filter(|l| l.starts_with("SessClose")).count() >= OPENINGS.len()).then_some(r)
    });
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // Sessions end in whatever order their tasks finish: compare as sets
    // with counts (sorted).
    let ours_px: Vec<String> = records.iter().filter(|r| !r.ends_with(" a0")).cloned().collect();
    assert_eq!(sorted(ours_px), sorted(theirs));
}

#[test]
fn unix_socket_listeners_serve_with_their_mode() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("c.sock");
    let spec = format!("uds={},mode=600", sock.display());
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &["-a", &spec]);
    let listen = std::fs::read_to_string(d.dir.join("_.listen")).unwrap();
    assert!(listen.lines().any(|l| l == format!("uds {} -", sock.display())), "{listen}");
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    if have("curl") {
        let o = std::process::Command::new("curl")
            .args(["-s", "-i", "--unix-socket", sock.to_str().unwrap(), "http://cache/size/5?max_age=60"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.ends_with("01234"), "{text}");
    }
    // Over the socket, with our own client: every address is 0.0.0.0 port 0.
    let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    s.write_all(b"GET /size/5?max_age=60 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert!(got.starts_with(b"HTTP/1.1 200"));
    let ds = d.dir.to_str().unwrap();
    let raw = wait_for(10, "the socket's session records", || {
        let raw = stdout(&run("cache-log", &["-d", "-g", "raw", "-n", ds]));
        raw.contains("ReqStart").then_some(raw)
    });
    let words: Vec<String> = raw.lines().map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")).collect();
    assert!(words.iter().any(|l| l.starts_with("SessOpen c 0.0.0.0 0 uds 0.0.0.0 0 ")), "{raw}");
    assert!(words.iter().any(|l| l == "ReqStart c 0.0.0.0 0 uds"), "{raw}");
    // The TCP listener still serves beside it.
    assert_eq!(Client::connect(d.port).get("/size/5", "").status, 200);
}
