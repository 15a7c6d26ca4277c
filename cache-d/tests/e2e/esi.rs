//! ESI end to end: a page of cached fragments from the test origin,
//! assembled as varnishd assembles it; the includes' transactions read by
//! varnishlog and varnishncsa as cache-log and cache-ncsa read them;
//! hostile pages bounded.

use crate::util::*;

const VCL: &str = "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\nsub vcl_backend_response {\n  if (bereq.url ~ \"^/esi/\") { set beresp.do_esi = true; }\n}\n";

#[test]
fn a_page_of_fragments_is_assembled_and_logged_as_varnish_does() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "esi.vcl", VCL, origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let url = "/esi/10?max_age=600&frag_size=50";
    let mut c = Client::connect(d.port);
    let page = c.get(url, "");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("transfer-encoding"), Some("chunked"));
    let text = String::from_utf8(page.body.clone()).unwrap();
    assert_eq!(text.matches("<div id=").count(), 10);
    assert!(!text.contains("esi:include"), "{text}");
    let frag = Client::connect(origin.port).get("/text/50", "").body;
    assert!(text.contains(&format!("<div id=\"f3\">{}</div>", String::from_utf8_lossy(&frag))));
    // A hit assembles the same page from the cache.
    assert_eq!(c.get(url, "").body, page.body);
    assert_eq!(counter(&stat(&d.dir), "MAIN.esi_req"), Some(20));
    assert_eq!(counter(&stat(&d.dir), "MAIN.cache_hit"), Some(11), "the page and its ten fragments hit the second time");
    // The log: each include its own transaction, linked to the page
    // (committed just after its last byte).
    let ds = d.dir.to_str().unwrap();
    wait_for(10, "two pages and twenty includes logged", || {
        (stdout(&run("cache-ncsa", &["-d", "-E", "-n", ds, "-F", "%U"])).lines().count() >= 22).then_some(())
    });
    let f = tmp.path().join("dump.vsl");
    let fs = f.to_str().unwrap();
    run("cache-log", &["-d", "-w", fs, "-n", ds]);
    let grouped = stdout(&run("cache-log", &["-r", fs, "-g", "request", "-i", "Begin,Link,ReqURL"]));
    assert_eq!(grouped.lines().filter(|l| l.ends_with(" esi")).count(), 40, "a Link and a Begin for each of twenty includes:\n{grouped}");
    let lines = stdout(&run("cache-ncsa", &["-E", "-r", fs, "-F", "%U%q %s %b"]));
    assert_eq!(lines.lines().count(), 22, "two pages and twenty includes:\n{lines}");
    assert_eq!(stdout(&run("cache-ncsa", &["-r", fs, "-F", "%U"])).lines().count(), 2, "without -E, the pages only");
    if have("varnishlog") {
        for (tool, ours, args) in [
            ("varnishlog", "cache-log", &["-r", fs, "-g", "request"][..]),
            ("varnishncsa", "cache-ncsa", &["-E", "-r", fs, "-F", "%U%q %s %b %{Varnish:handling}x"][..]),
        ] {
            let theirs = std::process::Command::new(tool).args(args).output().unwrap();
            let (a, b) = (stdout(&run(ours, args)), String::from_utf8_lossy(&theirs.stdout).into_owned());
            assert!(a == b, "{ours} and {tool} differ on {args:?}");
        }
    }
    // varnishd assembles the same page.
    if have("varnishd") {
        let v = Varnishd::start_vcl(&tmp.path().join("v"), &vcl);
        assert_eq!(Client::connect(v.port).get(url, "").body, page.body);
    }
}

#[test]
fn hostile_pages_are_bounded_and_the_child_lives() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "esi.vcl", VCL, origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    // 10,000 includes of one cached fragment: all there, in time (a
    // debug build, on two cores shared with other tests: 30 s was once
    // not enough).
    let t = std::time::Instant::now();
    let r = Client::connect(d.port).get("/esi/10000?max_age=600&frag_size=1", "");
    assert_eq!(r.status, 200);
    assert_eq!(String::from_utf8_lossy(&r.body).matches("<div id=").count(), 10_000);
    assert!(t.elapsed() < std::time::Duration::from_secs(60), "{:?}", t.elapsed());
    // A page of 20 includes of itself, five deep, would be 3.2 million
    // includes: the tree stops at its bound, in time.
    let t = std::time::Instant::now();
    let mut c = Client::connect(d.port);
    c.send_raw(b"GET /esi/20?loop=1&max_age=600 HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.read_response(false).expect("a whole response");
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < std::time::Duration::from_secs(60), "{:?}", t.elapsed());
    // (The 10,000 of the first page count too: this one makes the rest.)
    let made = counter(&stat(&d.dir), "MAIN.esi_req").unwrap();
    assert_eq!(made, 10_000 + cache_d::req::MAX_ESI_INCLUDES as u64, "{made} includes");
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
}

#[test]
fn a_large_page_kept_gzip_reads_the_same_to_every_client() {
    use std::io::Read;
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    // do_gzip on a plain page: kept gzip; 2,000 includes make it larger
    // than what comes with the head, so it streams in.
    let src = VCL.replace("set beresp.do_esi = true;", "set beresp.do_esi = true; set beresp.do_gzip = true;");
    let vcl = vcl_src(tmp.path(), "esi-gz.vcl", &src, origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let url = "/esi/2000?max_age=600&frag_size=20";
    let mut c = Client::connect(d.port);
    let gz = c.get(url, "Accept-Encoding: gzip\r\n");
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&gz.body[..]).read_to_end(&mut unzipped).expect("one valid gzip stream");
    let plain = c.get(url, "");
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(unzipped, plain.body);
    assert_eq!(String::from_utf8_lossy(&plain.body).matches("<div id=").count(), 2000);
    assert!(!String::from_utf8_lossy(&plain.body).contains("esi:include"));
    if have("varnishd") {
        let v = Varnishd::start_vcl(&tmp.path().join("v"), &vcl);
        assert_eq!(Client::connect(v.port).get(url, "").body, plain.body, "varnishd assembles the same page");
    }
}

#[test]
fn bad_markup_is_reported_as_varnishd_reports_it() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "esi.vcl", VCL, origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let url = "/esi/2?max_age=600&frag_size=5&bad=1";
    let ours = Client::connect(d.port).get(url, "");
    let xml = |tool: &str, dir: &str| {
        let o = std::process::Command::new(tool).args(["-d", "-g", "raw", "-i", "ESI_xmlerror", "-n", dir]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().map(|l| l.split_whitespace().skip(3).collect::<Vec<_>>().join(" ")).collect::<Vec<_>>()
    };
    let mine = xml(&bin("cache-log").to_string_lossy(), d.dir.to_str().unwrap());
    assert!(mine.len() >= 6, "{mine:?}");
    assert!(mine.iter().any(|m| m.contains("<esi:bogus> element")), "{mine:?}");
    assert!(counter(&stat(&d.dir), "MAIN.esi_errors").unwrap() >= 4);
    if have("varnishd") {
        let v = Varnishd::start_vcl(&tmp.path().join("v"), &vcl);
        let theirs = Client::connect(v.port).get(url, "");
        assert_eq!(theirs.body, ours.body, "the same page");
        let vs = v.dir.to_str().unwrap().to_string();
        let got = wait_for(10, "varnishd's ESI_xmlerror records", || {
            let r = xml("varnishlog", &vs);
            (r.len() >= mine.len()).then_some(r)
        });
        assert_eq!(got, mine, "the same ESI_xmlerror records, offsets included");
    }
}

/// A backend for pages whose bytes no origin endpoint makes: `/esi/N` is
/// row N's page, anything else a fragment naming its URL; every request
/// line it reads is kept.
fn page_backend(pages: Vec<Vec<u8>>) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = lines.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut req = Vec::new();
            let mut b = [0u8; 4096];
            s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            let line = req.split(|&c| c == b'\n').next().unwrap_or_default().to_vec();
            let target = line.split(|&c| c == b' ').nth(1).unwrap_or_default().to_vec();
            seen.lock().unwrap().push(line);
            let row = target.strip_prefix(b"/esi/").and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok());
            let body = match row.and_then(|n| pages.get(n)) {
                Some(page) => page.clone(),
                None => [b"[".as_slice(), &target, b"]"].concat(),
            };
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = s.write_all(&[head.as_bytes(), &body].concat());
        }
    });
    (port, lines)
}

/// Regression (issue 32): a NUL byte (or another control byte) in an
/// include's src reached the backend's request line. Varnish keeps the
/// src as a C string, so it ends at a NUL (`/a\0b` includes `/a`, and
/// `http://h\0x/a` has no path: invalid); it refuses whitespace; other
/// control bytes it sends as they are, which we refuse instead.
#[test]
fn control_bytes_in_an_include_src_never_reach_a_request_line() {
    let rows: &[(&str, &[u8], &[u8])] = &[
        ("NUL", b"/a\0b", b"[/a]"),
        ("NUL before a space", b"/a\0 b", b"[/a]"),
        ("NUL in the host", b"http://h\0x/a", b""),
        ("SOH", b"/a\x01b", b""),
        ("ESC", b"/a\x1bb", b""),
        ("DEL", b"/a\x7fb", b""),
        ("CR", b"/a\rb", b""),
        // The same as text is a URL like any other.
        ("%00 as text", b"/a%00b", b"[/a%00b]"),
    ];
    let pages = rows.iter().map(|(_, src, _)| [b"<html><esi:include src=\"".as_slice(), src, b"\"/></html>"].concat()).collect();
    let (port, lines) = page_backend(pages);
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "esi.vcl", VCL, port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let mut bodies = Vec::new();
    for (i, (name, _, want)) in rows.iter().enumerate() {
        let r = Client::connect(d.port).get(&format!("/esi/{i}"), "");
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.body, [b"<html>".as_slice(), want, b"</html>"].concat(), "{name}: {}", String::from_utf8_lossy(&r.body));
        bodies.push(r.body);
    }
    for line in lines.lock().unwrap().iter() {
        let target = &line[..line.len() - 1];
        assert!(!target.iter().any(|c| c.is_ascii_control()), "a control byte reached the backend: {:?}", String::from_utf8_lossy(line));
    }
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
    // varnishd gives the same pages where it keeps the bytes off the wire.
    if have("varnishd") {
        let v = Varnishd::start_vcl(&tmp.path().join("v"), &vcl);
        for (i, (name, src, _)) in rows.iter().enumerate() {
            if src.iter().any(|&c| c != 0 && c.is_ascii_control()) {
                continue;
            }
            assert_eq!(Client::connect(v.port).get(&format!("/esi/{i}"), "").body, bodies[i], "{name}: varnishd differs");
        }
    }
}
