//! Compression end to end: gzip objects to gzip and plain clients, the
//! log records and byte counts next to varnishd's on the same traffic,
//! bad gzip from the backend, and Brotli copies.

use std::io::Read;

use crate::util::*;

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).expect("valid gzip");
    out
}

/// The payloads of a log's Gzip records, in order (vxids and sides left
/// out: they differ between daemons).
fn gzip_records(raw: &str) -> Vec<String> {
    raw.lines().filter(|l| l.contains(" Gzip ")).map(|l| l.split_whitespace().skip(3).collect::<Vec<_>>().join(" ")).collect()
}

/// The same requests against any proxy: a gzip object fetched by a gzip
/// client, then hit by a plain one, a HEAD and a gzip one.
fn traffic(port: u16) -> Vec<(u16, usize, Option<String>)> {
    let mut c = Client::connect(port);
    let url = "/text/100000?gzip=1&max_age=600";
    let mut seen = Vec::new();
    for ae in ["Accept-Encoding: gzip, br\r\n", "", "Accept-Encoding: x-gzip\r\n"] {
        let r = c.get(url, ae);
        seen.push((r.status, r.body.len(), r.header("content-encoding").map(str::to_string)));
    }
    seen
}

#[test]
fn gzip_records_and_byte_counts_agree_with_varnishd() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let backend = format!("127.0.0.1:{}", origin.port);
    let d = Daemon::start(&tmp.path().join("i"), &backend, &[]);
    let ours = traffic(d.port);
    assert_eq!(ours[0].2.as_deref(), Some("gzip"));
    assert_eq!(ours[1], (200, 100_000, None), "gunzipped for a plain client");
    assert_eq!(ours[2].2.as_deref(), Some("gzip"));
    assert_eq!(origin.requests(), 1, "one fetch serves all three");
    let plain = text_of(&origin, 100_000);
    let mut c = Client::connect(d.port);
    let r = c.get("/text/100000?gzip=1&max_age=600", "");
    assert_eq!(r.body, plain);
    let r = c.get("/text/100000?gzip=1&max_age=600", "Accept-Encoding: gzip\r\n");
    assert_eq!(gunzip(&r.body), plain);
    let ds = d.dir.to_str().unwrap();
    let raw = stdout(&run("cache-log", &["-d", "-g", "raw", "-n", ds]));
    let records = gzip_records(&raw);
    assert_eq!(records.len(), 3, "u F - at the fetch, U D - for each plain client: {records:?}");
    let gz_len = ours[0].1;
    assert!(records[0].starts_with(&format!("u F - {gz_len} 100000 80 ")), "{records:?}");
    assert!(records[1].starts_with(&format!("U D - {gz_len} 100000 80 ")), "{records:?}");
    assert_eq!(records[0][6..], records[1][6..], "the same totals and bits at fetch and on delivery");
    assert_eq!(counter(&stat(&d.dir), "MAIN.n_test_gunzip"), Some(1));
    assert_eq!(counter(&stat(&d.dir), "MAIN.n_gunzip"), Some(2));
    // varnishlog and varnishncsa read our log as cache-log and cache-ncsa do.
    let f = tmp.path().join("dump.vsl");
    let fs = f.to_str().unwrap();
    run("cache-log", &["-d", "-w", fs, "-n", ds]);
    let fmt = "%s %b %O %{Content-Encoding}o %{Varnish:handling}x";
    if have("varnishlog") {
        let theirs = std::process::Command::new("varnishlog").args(["-r", fs, "-g", "raw", "-i", "Gzip"]).output().unwrap();
        assert_eq!(stdout(&run("cache-log", &["-r", fs, "-g", "raw", "-i", "Gzip"])), String::from_utf8_lossy(&theirs.stdout));
        let theirs = std::process::Command::new("varnishncsa").args(["-r", fs, "-F", fmt]).output().unwrap();
        assert_eq!(stdout(&run("cache-ncsa", &["-r", fs, "-F", fmt])), String::from_utf8_lossy(&theirs.stdout));
    }
    // varnishd on the same traffic: the same answers, Gzip records and
    // body byte counts (the backend's gzip is stored and sent as is).
    if !have("varnishd") {
        return;
    }
    let v = Varnishd::start(&tmp.path().join("v"), &backend);
    assert_eq!(traffic(v.port), ours);
    let vs = v.dir.to_str().unwrap();
    // varnishd writes a transaction's records when it ends, a moment
    // after the client has its response.
    let theirs = wait_for(10, "varnishd's Gzip records", || {
        let o = std::process::Command::new("varnishlog").args(["-d", "-g", "raw", "-n", vs]).output().unwrap();
        let r = gzip_records(&String::from_utf8_lossy(&o.stdout));
        (r.len() >= 2).then_some(r)
    });
    // (In either order: varnishd writes each transaction's records when
    // it ends, and the client's may end before the fetch's.)
    let (mut theirs, mut ours2) = (theirs, records[..2].to_vec());
    theirs.sort();
    ours2.sort();
    assert_eq!(theirs, ours2, "varnishd's Gzip records for the same three requests");
    let bytes = |tool: &str, dir: &str| {
        let o = std::process::Command::new(tool).args(["-d", "-n", dir, "-F", "%s %b", "-q", "ReqURL ~ \"text\""]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().take(3).map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(bytes(&bin("cache-ncsa").to_string_lossy(), ds), bytes("varnishncsa", vs));
}

/// The origin's text body, as `/text/N` makes it (asked of it directly).
fn text_of(o: &Origin, n: u64) -> Vec<u8> {
    Client::connect(o.port).get(&format!("/text/{n}"), "").body
}

#[test]
fn bad_gzip_from_the_backend_fails_the_fetch_and_is_never_stored() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = d.dir.to_str().unwrap().to_string();
    // (what the origin sends, body size): small bodies come with the head
    // and are checked whole; large ones stream through the check.
    let rows = [
        ("corrupt", 20_000),
        ("corrupt", 3_000_000),
        ("truncated", 20_000),
        ("truncated", 3_000_000),
        ("junk", 20_000),
        ("junk", 3_000_000),
    ];
    for (i, (mode, size)) in rows.iter().enumerate() {
        let url = format!("/text/{size}?gzip={mode}&max_age=600&row={i}");
        for ae in ["Accept-Encoding: gzip\r\n", ""] {
            let before = origin.requests();
            let mut c = Client::connect(d.port);
            c.send_raw(format!("GET {url} HTTP/1.1\r\nHost: x\r\n{ae}\r\n").as_bytes());
            // A 503, or a response cut short (a streamed body failed):
            // never a whole 200 with garbage.
            match c.read_response(false) {
                None => {}
                Some(r) => assert_eq!(r.status, 503, "{mode} {size}: {r:?}"),
            }
            assert_eq!(origin.requests(), before + 1, "{mode} {size}: nothing stored, every request fetches");
        }
    }
    let raw = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "FetchError", "-n", &ds]));
    for want in ["Invalid Gzip data", "tGunzip failed", "Junk after gzip data"] {
        assert!(raw.contains(want), "FetchError {want}: {raw}");
    }
    assert_eq!(counter(&stat(&d.dir), "MAIN.n_object"), Some(0));
    assert_eq!(counter(&stat(&d.dir), "MAIN.fetch_failed"), Some(rows.len() as u64 * 2));
    // The child served it all without dying.
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
    assert_eq!(Client::connect(d.port).get("/text/10?max_age=1", "").status, 200);
}

#[test]
fn brotli_copies_go_to_br_clients_only() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(
        tmp.path(),
        "br.vcl",
        "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\nsub vcl_backend_response {\n  set beresp.do_brotli = true;\n  if (bereq.url ~ \"plain\") { set beresp.do_gzip = true; }\n}\n",
        origin.port,
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap(), "-p", "http_brotli_support=on"]);
    let plain = text_of(&origin, 300_000);
    for url in ["/text/300000?gzip=1&max_age=600", "/text/300000?plain=1&max_age=600"] {
        let mut c = Client::connect(d.port);
        let before = origin.requests();
        let r = c.get(url, "Accept-Encoding: gzip, deflate, br\r\n");
        assert_eq!(r.header("content-encoding"), Some("br"), "{url}");
        assert!(r.header("etag").is_some_and(|e| e.starts_with("W/")), "{r:?}");
        let mut out = Vec::new();
        brotli::Decompressor::new(&r.body[..], 4096).read_to_end(&mut out).unwrap();
        assert_eq!(out, plain, "{url}");
        let r = c.get(url, "Accept-Encoding: gzip\r\n");
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        assert_eq!(gunzip(&r.body), plain);
        let r = c.get(url, "Accept-Encoding: br;q=0, gzip\r\n");
        assert_eq!(r.header("content-encoding"), Some("gzip"), "br;q=0 is a refusal");
        let r = c.get(url, "");
        assert_eq!((r.header("content-encoding"), r.body.len()), (None, plain.len()));
        assert_eq!(origin.requests(), before + 1, "{url}: one fetch, one Brotli copy");
    }
    assert_eq!(counter(&stat(&d.dir), "MAIN.n_brotli"), Some(2));
    // Without the parameter, br is washed away and nobody gets Brotli.
    let d2 = Daemon::start_args(&tmp.path().join("j"), &["-f", vcl.to_str().unwrap()]);
    let r = Client::connect(d2.port).get("/text/1000?gzip=1&max_age=600", "Accept-Encoding: br\r\n");
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, 1000));
}
