//! Listeners beyond plain TCP: PROXY protocol listeners (their log
//! records and `%h` against varnishd's on the same bytes) and Unix-domain
//! sockets (with their mode, through curl).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use crate::util::*;

/// The port of the listener named `name` in an instance's `_.listen`.
pub(crate) fn listen_port(dir: &Path, name: &str) -> u16 {
    wait_for(10, "the named listener", || {
        let text = std::fs::read_to_string(dir.join("_.listen")).ok()?;
        text.lines().find(|l| l.starts_with(&format!("{name} ")))?.split(' ').nth(2)?.parse().ok()
    })
}

/// A cache-d (`policy`: `-b ORIGIN` or `-f FILE`) with an https listener
/// named `tls` serving the PEM bundle `pem` (an -A file beside it in
/// `dir`); the daemon and the listener's port.
pub(crate) fn tls_daemon(dir: &Path, policy: &[&str], pem: &Path) -> (Daemon, u16) {
    let conf = dir.join("tls.conf");
    std::fs::write(&conf, format!("pem-file = \"{}\"\n", pem.display())).unwrap();
    let mut args = policy.to_vec();
    args.extend_from_slice(&["-A", conf.to_str().unwrap(), "-a", "tls=127.0.0.1:0,https"]);
    let d = Daemon::start_args(&dir.join("i"), &args);
    let port = listen_port(&d.dir, "tls");
    (d, port)
}

/// What one connection to a PROXY listener sends first, and whether a
/// request is answered after it.
fn openings_table() -> Vec<(Vec<u8>, bool)> {
    let mut t: Vec<(Vec<u8>, bool)> = OPENINGS.iter().map(|(b, ok)| (b.to_vec(), *ok)).collect();
    // Regressions (issue 32), each closed by Varnish: a checksum TLV of
    // two bytes (CRC32C is four); a 1,024-byte block (1,040 bytes in all,
    // past the 1,024 Varnish reads a header into); 330 empty TLVs (more
    // than its session workspace holds).
    let v2 = |tlvs: &[u8]| {
        let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
        h.extend_from_slice(&(12 + tlvs.len() as u16).to_be_bytes());
        h.extend_from_slice(&[0xc0, 0x00, 0x02, 0x07, 0xc6, 0x33, 0x64, 0x09, 0x9c, 0x40, 0x01, 0xbb]);
        h.extend_from_slice(tlvs);
        h
    };
    t.push((v2(&[0x03, 0, 2, 0, 0]), false));
    t.push((v2(&[[0xe0, 0x03, 0xf1].as_slice(), &[b'a'; 1009]].concat()), false));
    t.push((v2(&[0xe0, 0, 0].repeat(330)), false));
    t
}

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
    openings_table()
        .iter()
        .map(|(first, _)| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.write_all(first);
            let _ = s.write_all(b"GET /size/3?max_age=60 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            let text = String::from_utf8_lossy(&got);
            text.strip_prefix("HTTP/1.1 ").and_then(|r| r[..3].parse().ok()).unwrap_or(0)
        })
        .collect()
}

/// The records a PROXY listener's sessions leave, without vxids, times
/// and descriptors: Begin, Proxy, ProxyGarbage, Error, ReqStart, SessClose's reason.
fn proxy_records(raw: &str) -> Vec<String> {
    raw.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.get(1).copied()? {
                "Begin" if f.get(3) == Some(&"sess") => Some(f[1..].join(" ")),
                "Proxy" | "ProxyGarbage" | "Error" => Some(f[1..].join(" ")),
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
    let want: Vec<u16> = openings_table().iter().map(|(_, ok)| if *ok { 200 } else { 0 }).collect();
    assert_eq!(ours, want);
    // The child is still serving, and the plain listener never needed PROXY.
    assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200);
    let ds = d.dir.to_str().unwrap();
    let records = wait_for(10, "the sessions' records", || {
        let r = proxy_records(&stdout(&run("cache-log", &["-d", "-g", "raw", "-n", ds])));
        (r.iter().filter(|l| l.starts_with("SessClose")).count() >= openings_table().len()).then_some(r)
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
        "ProxyGarbage c PROXY2: CRC error",
        "SessClose RX_OVERFLOW",
        "Error c insufficient workspace",
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
        (r.iter().filter(|l| l.starts_with("SessClose")).count() >= openings_table().len()).then_some(r)
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

/// A self-signed certificate and key for these names, as one PEM bundle.
fn bundle(names: &[&str]) -> String {
    pem_bundle(names).0
}

/// curl over TLS to `name` (resolved to 127.0.0.1), trusting `ca`: the
/// exit status and what it printed (-v on stderr).
fn curl_tls(port: u16, name: &str, ca: &Path, path: &str) -> (i32, String, String) {
    let o = std::process::Command::new("curl")
        .args(["-s", "-v", "--max-time", "10", "--cacert", ca.to_str().unwrap(), "--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn https_listeners_pick_the_certificate_by_sni() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.pem"), tmp.path().join("b.pem"));
    std::fs::write(&a, bundle(&["a.test"])).unwrap();
    std::fs::write(&b, bundle(&["b.test", "*.b.test"])).unwrap();
    let conf = tmp.path().join("tls.conf");
    std::fs::write(
        &conf,
        format!(
            "pem-file = \"{}\"\nfrontend = {{\n  host = \"127.0.0.1\"\n  port = \"0\"\n}}\npem-file = \"{}\"\n",
            a.display(),
            b.display()
        ),
    )
    .unwrap();
    let d = Daemon::start(
        &tmp.path().join("i"),
        &format!("127.0.0.1:{}", origin.port),
        &["-A", conf.to_str().unwrap(), "-a", "tls=127.0.0.1:0,https"],
    );
    let port = listen_port(&d.dir, "tls");
    // Each name gets its own certificate (curl trusts only that one).
    let (rc, body, err) = curl_tls(port, "a.test", &a, "/size/5?max_age=60");
    assert_eq!((rc, body.as_str()), (0, "01234"), "{err}");
    assert!(err.contains("ALPN: server accepted http/1.1") || err.contains("ALPN, server accepted to use http/1.1"), "{err}");
    assert_eq!(curl_tls(port, "b.test", &b, "/size/5").0, 0);
    assert_eq!(curl_tls(port, "x.b.test", &b, "/size/5").0, 0, "wildcard");
    // The wrong certificate for the name: curl refuses it (60: peer certificate).
    assert_eq!(curl_tls(port, "b.test", &a, "/size/5").0, 60);
    // An unknown name gets the default (the first pem-file).
    let (rc, _, err) = curl_tls(port, "other.test", &a, "/size/5");
    assert_eq!(rc, 60, "the default certificate is a.test's, not valid for other.test: {err}");
    // The frontend section is an https listener too.
    let fport = listen_port(&d.dir, "a2");
    assert_eq!(curl_tls(fport, "a.test", &a, "/size/5").0, 0);
    // Plain HTTP to the TLS port: no session, an Error record, the child serves on.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(!got.starts_with(b"HTTP/"), "at most a TLS alert, then the close");
    let ds = d.dir.to_str().unwrap();
    wait_for(10, "the handshake's Error record", || {
        stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "Error", "-n", ds])).contains("TLS handshake failed").then_some(())
    });
    assert_eq!(curl_tls(port, "a.test", &a, "/size/5").0, 0);
    // Counted: the handshakes that completed (on our side: a client that
    // refuses the certificate may still complete ours), and the plain
    // request's failure.
    let st = stat(&d.dir);
    assert!(counter(&st, "MAIN.tls_handshakes").unwrap_or(0) >= 5, "{st}");
    assert!(counter(&st, "MAIN.tls_handshake_fail").unwrap_or(0) >= 1, "{st}");
    // Requests over TLS are logged like any other (ReqStart with the listener).
    let raw = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "ReqStart", "-n", ds]));
    assert!(raw.lines().any(|l| l.trim_end().ends_with(" tls")), "{raw}");
}

#[test]
fn https_needs_a_certificate_and_bad_ones_are_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    let start = |args: &[&str]| {
        let o = std::process::Command::new(bin("cache-d"))
            .args(["-F", "-n", dir.to_str().unwrap(), "-b", "127.0.0.1:9"])
            .args(args)
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (code, err) = start(&["-a", "t=127.0.0.1:0,https"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("listener t speaks https but there is no certificate"), "{err}");
    let conf = tmp.path().join("tls.conf");
    let pem = tmp.path().join("c.pem");
    let good = bundle(&["a.test"]);
    std::fs::write(&pem, &good[..good.find("-----BEGIN PRIVATE KEY").unwrap()]).unwrap();
    std::fs::write(&conf, format!("pem-file = \"{}\"\n", pem.display())).unwrap();
    let (code, err) = start(&["-a", "127.0.0.1:0,https", "-A", conf.to_str().unwrap()]);
    assert_ne!(code, Some(0));
    assert!(err.contains("no usable private key"), "{err}");
    std::fs::write(&conf, "pem-file = \"/no/such.pem\"\nfrontend = {\n").unwrap();
    let (_, err) = start(&["-A", conf.to_str().unwrap()]);
    assert!(err.contains(":2: frontend not closed"), "{err}");
}

#[test]
fn vmod_tls_tells_the_policy_what_the_connection_negotiated() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.pem");
    std::fs::write(&a, bundle(&["a.test"])).unwrap();
    let vcl = vcl_src(
        tmp.path(),
        "tls.vcl",
        "vcl 4.1;\nimport tls;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\n\
         sub vcl_deliver {\n  set resp.http.x-tls = tls.is_tls();\n  if (tls.is_tls()) {\n    set resp.http.x-version = tls.version();\n\
         set resp.http.x-cipher = tls.cipher();\n    set resp.http.x-sni = tls.authority();\n    set resp.http.x-alpn = tls.alpn();\n  }\n}\n",
        origin.port,
    );
    let (d, port) = tls_daemon(tmp.path(), &["-f", vcl.to_str().unwrap()], &a);
    let o = std::process::Command::new("curl")
        .args(["-s", "-i", "--tlsv1.3", "--cacert", a.to_str().unwrap(), "--resolve", &format!("a.test:{port}:127.0.0.1")])
        .arg(format!("https://a.test:{port}/size/5"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_lowercase();
    for want in ["x-tls: true", "x-version: tlsv1.3", "x-cipher: tls_aes_", "x-sni: a.test", "x-alpn: http/1.1"] {
        assert!(text.contains(want), "{want} in {text}");
    }
    let r = Client::connect(d.port).get("/size/5", "");
    assert_eq!(r.header("x-tls"), Some("false"));
    assert_eq!(r.header("x-version"), None);
    // Without the import, the program is refused (as any vmod's functions).
    let bad = vcl_src(tmp.path(), "bad.vcl", "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\nsub vcl_deliver { set resp.http.x = tls.version(); }\n", origin.port);
    let o = run("cache-d", &["-C", "-f", bad.to_str().unwrap()]);
    assert!(stderr(&o).contains("import tls"), "{}", stderr(&o));
}

#[test]
fn large_bodies_over_tls_arrive_whole_on_a_kept_connection() {
    if !have("curl") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.pem");
    std::fs::write(&a, bundle(&["a.test"])).unwrap();
    let (_d, port) = tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port)], &a);
    // Several large responses one after the other on one connection (curl
    // reuses it), a miss streamed from the origin and then hits, each
    // ending with the socket full: every byte must arrive without waiting
    // for a next write.
    let url = |n: u32| format!("https://a.test:{port}/size/3000000?max_age=60&n={n}");
    let o = std::process::Command::new("curl")
        .args(["-s", "--max-time", "20", "--cacert", a.to_str().unwrap(), "--resolve", &format!("a.test:{port}:127.0.0.1")])
        .args([
            "-w",
            "%{size_download} %{num_connects}\n",
            "-o",
            "/dev/null",
            &url(1),
            "-o",
            "/dev/null",
            &url(1),
            "-o",
            "/dev/null",
            &url(2),
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["3000000 1", "3000000 0", "3000000 0"], "whole bodies, one connection");
}

#[test]
fn cache_bench_speaks_https_to_a_tls_listener() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.pem");
    std::fs::write(&a, bundle(&["a.test"])).unwrap();
    let (d, port) = tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port)], &a);
    let bench = |extra: &[&str]| {
        let url = format!("https://a.test:{port}/size/100?max_age=60");
        let mut args = vec!["run", "-q", "--json", "-c", "4", "-t", "1", "-n", "200", "--resolve", "a.test:127.0.0.1"];
        args.extend_from_slice(extra);
        args.push(&url);
        let o = run("cache-bench", &args);
        serde_json::from_str::<serde_json::Value>(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&o), stderr(&o)))
    };
    // Trusting the listener's certificate: every request answered.
    let v = bench(&["--cacert", a.to_str().unwrap()]);
    assert_eq!((v["requests"].as_u64(), v["errors"]["total"].as_u64()), (Some(200), Some(0)), "{v}");
    assert!(v["target"].as_str().unwrap_or_default().starts_with("https://"), "{v}");
    // Another CA: every handshake refused, counted as connect errors.
    let other = tmp.path().join("other.pem");
    std::fs::write(&other, bundle(&["a.test"])).unwrap();
    let o = run(
        "cache-bench",
        &[
            "run",
            "-q",
            "--json",
            "-c",
            "1",
            "-d",
            "1s",
            "--resolve",
            "a.test:127.0.0.1",
            "--cacert",
            other.to_str().unwrap(),
            &format!("https://a.test:{port}/size/1"),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["requests"].as_u64(), Some(0), "{v}");
    assert!(v["errors"]["connect"].as_u64().unwrap_or(0) > 0, "{v}");
    // --insecure accepts it.
    let v = bench(&["-k"]);
    assert_eq!(v["requests"].as_u64(), Some(200), "{v}");
    assert!(counter(&stat(&d.dir), "MAIN.tls_handshakes").unwrap_or(0) >= 8);
}
