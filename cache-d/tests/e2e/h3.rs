//! HTTP/3 with an independent client: aioquic (PyPI), driven by
//! `cache-d/tests/h3client.py`, against cache-d's QUIC listener on an
//! https listener's port: hits, misses, passes, ESI and gzip through the
//! same steps as HTTP/1; the Alt-Svc that advertises it; the feature
//! turned on and off at runtime; a certificate committed at runtime on new
//! QUIC connections; a client that changes its port mid-connection; the
//! records and counters it leaves.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::listeners::tls_daemon;
use crate::util::*;

/// Can the aioquic client run here? (.ci/run installs it; elsewhere the
/// tests skip with a note, as they do without curl.)
pub(crate) fn have_aioquic() -> bool {
    let ok = Command::new("python3").args(["-c", "import aioquic"]).output().is_ok_and(|o| o.status.success());
    assert!(ok || std::env::var_os("CI").is_none(), "aioquic is missing: .ci/run installs it (pip install aioquic)");
    if !ok {
        eprintln!("skipped: needs python3 with aioquic (pip install aioquic)");
    }
    ok
}

/// Run the HTTP/3 client against `port` with `args`; its JSON report.
fn h3(port: u16, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3client.py");
    let o = Command::new("python3").arg(script).arg(port.to_string()).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text} {}", String::from_utf8_lossy(&o.stderr)))
}

/// Response `i` of a report: status, a header's value, body.
fn status(r: &Value, i: usize) -> u64 {
    r["responses"][i]["status"].as_u64().unwrap_or(0)
}

fn header<'a>(r: &'a Value, i: usize, name: &str) -> Option<&'a str> {
    r["responses"][i]["headers"].as_array()?.iter().find(|h| h[0].as_str() == Some(name)).and_then(|h| h[1].as_str())
}

fn body(r: &Value, i: usize) -> &str {
    r["responses"][i]["body"].as_str().unwrap_or_default()
}

const POLICY: &str = "vcl 4.1;\nimport tls;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\n\
    sub vcl_recv {\n  if (req.url ~ \"^/pass/\") { set req.url = regsub(req.url, \"^/pass\", \"\"); return (pass); }\n}\n\
    sub vcl_backend_response {\n  if (bereq.url ~ \"^/esi/\") { set beresp.do_esi = true; }\n}\n\
    sub vcl_deliver {\n  set resp.http.x-proto = req.proto;\n  set resp.http.x-tls = tls.version() + \" \" + tls.alpn() + \" \" + tls.authority();\n}\n";

pub(crate) fn pem(dir: &Path, name: &str) -> std::path::PathBuf {
    self_signed(dir, &[name], name).bundle
}

#[test]
fn hits_misses_passes_esi_and_gzip_over_http3() {
    if !have_aioquic() {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "h3.vcl", POLICY, origin.port);
    let (d, port) = tls_daemon(tmp.path(), &["-f", vcl.to_str().unwrap(), "-p", "feature=+http3"], &pem(tmp.path(), "h3.test"));
    let r = h3(
        port,
        &[
            "--sni",
            "h3.test",
            "/size/1000?max_age=60",
            "/size/1000?max_age=60",
            "/pass/size/300",
            "POST:/size/7:a body",
            "/esi/3?max_age=60",
            "/esi/3?max_age=60",
            "/text/20000?gzip=force&max_age=60",
            "HEAD:/size/1000?max_age=60",
            "/size/300000?max_age=60",
        ],
    );
    assert_eq!(r["alpn"], "h3", "{r}");
    // A miss, then a hit of the same object (X-Varnish names its fetch).
    assert_eq!((status(&r, 0), status(&r, 1)), (200, 200), "{r}");
    assert_eq!(r["responses"][0]["length"], 1000);
    assert_eq!(r["responses"][0]["sha256"], r["responses"][1]["sha256"]);
    assert_eq!(header(&r, 1, "x-varnish").map(|v| v.split(' ').count()), Some(2), "{r}");
    assert_eq!(header(&r, 1, "x-proto"), Some("HTTP/3"));
    assert_eq!(header(&r, 1, "x-tls"), Some("TLSv1.3 h3 h3.test"));
    // Nothing HTTP/3 forbids goes out.
    assert_eq!(header(&r, 1, "connection"), None);
    // A pass, and a request body forwarded (a POST is passed).
    assert_eq!((status(&r, 2), r["responses"][2]["length"].as_u64()), (200, Some(300)), "{r}");
    assert_eq!(header(&r, 2, "x-varnish").map(|v| v.split(' ').count()), Some(1));
    assert_eq!((status(&r, 3), header(&r, 3, "x-request-body-bytes")), (200, Some("6")), "{r}");
    // An ESI page assembled, the same from the cache.
    let page = body(&r, 4);
    assert!(page.contains("<div id=\"f2\">") && !page.contains("esi:include"), "{page}");
    assert_eq!(body(&r, 5), page);
    // A gzip object to a client that did not ask for gzip: gunzipped.
    assert_eq!((status(&r, 6), r["responses"][6]["length"].as_u64()), (200, Some(20000)), "{r}");
    assert_eq!(header(&r, 6, "content-encoding"), None);
    // HEAD: the head, no body; a large body whole.
    assert_eq!((status(&r, 7), r["responses"][7]["length"].as_u64(), header(&r, 7, "content-length")), (200, Some(0), Some("1000")));
    assert_eq!((status(&r, 8), r["responses"][8]["length"].as_u64()), (200, Some(300_000)), "{r}");
    // gzip asked for: stored gzip, as stored.
    let r = h3(port, &["--sni", "h3.test", "--header", "accept-encoding:gzip", "/text/20000?gzip=force&max_age=60"]);
    assert_eq!(header(&r, 0, "content-encoding"), Some("gzip"), "{r}");
    // Ten streams at once on one connection.
    let many: Vec<String> = (0..10).map(|i| format!("/size/{}?max_age=60", 100 + i)).collect();
    let mut args = vec!["--sni", "h3.test", "--parallel"];
    args.extend(many.iter().map(String::as_str));
    let r = h3(port, &args);
    for i in 0..10 {
        assert_eq!((status(&r, i), r["responses"][i]["length"].as_u64()), (200, Some(100 + i as u64)), "{r}");
    }
    let stat = stat(&d.dir);
    assert_eq!(counter(&stat, "MAIN.h3_conn"), Some(3), "{stat}");
    assert_eq!(counter(&stat, "MAIN.h3_streams"), Some(20), "{stat}");
}

#[test]
fn http3_is_advertised_on_tcp_and_off_until_the_feature_is_set() {
    if !have_aioquic() || !have("curl") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let a = pem(tmp.path(), "h3.test");
    let (d, port) = tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port)], &a);
    let head = || {
        let o = Command::new("curl")
            .args(["-s", "-D-", "-o", "/dev/null", "--max-time", "10", "--cacert", a.to_str().unwrap()])
            .args(["--resolve", &format!("h3.test:{port}:127.0.0.1"), &format!("https://h3.test:{port}/size/5?max_age=60")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_lowercase()
    };
    // Off by default: no Alt-Svc, and QUIC packets are not answered.
    assert!(!head().contains("alt-svc"));
    let r = h3(port, &["--sni", "h3.test", "--timeout", "2", "/size/5"]);
    assert!(r["error"].is_string(), "{r}");
    // On at runtime: advertised with this port, and the advertised port
    // answers over HTTP/3.
    let dir = d.dir.to_str().unwrap();
    assert!(run("cache-adm", &["-n", dir, "param.set", "feature", "+http3"]).status.success());
    assert!(head().contains(&format!("alt-svc: h3=\":{port}\"; ma=86400")), "{}", head());
    assert!(run("cache-adm", &["-n", dir, "param.set", "h3_alt_svc_max_age", "3600"]).status.success());
    let adv = head();
    let at: u16 = adv.split("h3=\":").nth(1).and_then(|s| s.split('"').next()).and_then(|p| p.parse().ok()).unwrap();
    assert!(adv.contains("ma=3600"), "{adv}");
    let r = h3(at, &["--sni", "h3.test", "/size/5?max_age=60"]);
    assert_eq!((status(&r, 0), body(&r, 0)), (200, "01234"), "{r}");
    // Off again: new QUIC connections are not answered, counted.
    assert!(run("cache-adm", &["-n", dir, "param.set", "feature", "-http3"]).status.success());
    let r = h3(port, &["--sni", "h3.test", "--timeout", "2", "/size/5"]);
    assert!(r["error"].is_string(), "{r}");
    assert!(counter(&stat(&d.dir), "MAIN.h3_refused").unwrap_or(0) >= 2);
}

#[test]
fn a_certificate_committed_at_runtime_serves_new_quic_connections() {
    if !have_aioquic() {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let old = self_signed(tmp.path(), &["h3.test"], "old");
    let new = self_signed(tmp.path(), &["h3.test"], "new");
    let (d, port) = tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port), "-p", "feature=+http3"], &old.bundle);
    let sha = |der: &[u8]| {
        use sha2::Digest;
        sha2::Sha256::digest(der).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let r = h3(port, &["--sni", "h3.test", "/size/5"]);
    assert_eq!(r["cert_sha256"].as_str(), Some(sha(&old.der).as_str()), "{r}");
    let dir = d.dir.to_str().unwrap();
    for args in [&["tls.cert.load", "old", new.bundle.to_str().unwrap()][..], &["tls.cert.commit"]] {
        let mut all = vec!["-n", dir];
        all.extend_from_slice(args);
        assert!(run("cache-adm", &all).status.success());
    }
    let r = h3(port, &["--sni", "h3.test", "/size/5"]);
    assert_eq!(r["cert_sha256"].as_str(), Some(sha(&new.der).as_str()), "{r}");
}

#[test]
fn a_client_that_changes_its_port_keeps_its_connection_and_the_log_shows_http3() {
    if !have_aioquic() {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let (d, port) =
        tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port), "-p", "feature=+http3"], &pem(tmp.path(), "h3.test"));
    let r = h3(port, &["--sni", "h3.test", "--migrate-after", "1", "/size/5?max_age=60", "/size/6?max_age=60", "/size/7?max_age=60"]);
    let ports = r["ports"].as_array().unwrap();
    assert_ne!(ports[0], ports[1], "{r}");
    assert_eq!((body(&r, 1), body(&r, 2)), ("012345", "0123456"), "{r}");
    // One session for the connection, its three requests under it.
    let dir = d.dir.to_str().unwrap();
    let text = wait_for(10, "the session's records", || {
        let t = stdout(&run("cache-log", &["-d", "-g", "session", "-n", dir]));
        t.contains("SessClose").then_some(t)
    });
    assert_eq!(text.matches("Begin          sess 0 HTTP/3").count(), 1, "{text}");
    assert_eq!(text.matches("ReqProtocol    HTTP/3").count(), 3, "{text}");
    assert_eq!(text.matches("RespProtocol   HTTP/3").count(), 3, "{text}");
    assert_eq!(text.matches("Link           req ").count(), 3, "{text}");
    // cache-ncsa's %H.
    let ncsa = stdout(&run("cache-ncsa", &["-d", "-n", dir, "-F", "%H %s %U"]));
    assert_eq!(ncsa.lines().filter(|l| l.starts_with("HTTP/3 200 /size/")).count(), 3, "{ncsa}");
}

/// What each hostile row (cache-d/tests/h3hostile.py) must get.
const HOSTILE: &[(&str, &str)] = &[
    // A tunnel is not served, as Varnish refuses one on HTTP/2.
    ("connect", "reset:0x10e"),
    // Malformed requests (RFC 9114 §4.1.2, §4.2): H3_MESSAGE_ERROR.
    ("no-path", "reset:0x10e"),
    ("connection-field", "reset:0x10e"),
    // h3 decodes a pseudo-header after a regular field without complaint
    // (its order is lost before we see the request); otherwise well
    // formed, it is answered.
    ("pseudo-after-field", "status:200"),
    // Past h3_max_field_section_size: 431, the connection goes on.
    ("oversized-fields", "status:431"),
    ("many-fields", "status:431"),
    // We grant no QPACK dynamic table: a reference to one is a
    // decompression failure of the connection.
    ("qpack-dynamic-reference", "closed:0x200"),
    // Frames out of place: H3_FRAME_UNEXPECTED; a frame cut short:
    // H3_FRAME_ERROR; a stream ended before its head: H3_REQUEST_INCOMPLETE.
    ("data-before-headers", "closed:0x105"),
    ("settings-on-request-stream", "closed:0x105"),
    ("truncated-headers", "closed:0x106"),
    ("fin-without-headers", "reset:0x10d"),
    // A reserved frame type is ignored.
    ("reserved-frame-first", "status:200"),
    // Resets free no work early (a stream's credit returns when its
    // request is done), and the connection serves on.
    ("rapid-reset", "status:200"),
    // Past our stream limit, requests wait for credit; all are answered.
    ("stream-flood", "answered:250/250"),
    // A client that stops reading a large answer: send_timeout resets the
    // stream (H3_REQUEST_CANCELLED), no whole-looking truncated body.
    ("never-reads", "reset:0x10c"),
    // 200 handshakes left half-open: past h3_retry_above, Retry.
    ("handshake-flood", "retried:1"),
    ("garbage-datagrams", "sent"),
];

#[test]
fn hostile_http3_is_answered_and_the_child_lives() {
    if !have_aioquic() {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let args = ["-b", &format!("127.0.0.1:{}", origin.port), "-p", "feature=+http3", "-p", "send_timeout=3"];
    let (d, port) = tls_daemon(tmp.path(), &args, &pem(tmp.path(), "h3.test"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3hostile.py");
    for (row, want) in HOSTILE {
        let o = Command::new("python3").arg(&script).arg(port.to_string()).arg(row).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        let got: Value =
            serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{row}: {e}: {text} {}", String::from_utf8_lossy(&o.stderr)));
        assert_eq!(got["outcome"].as_str(), Some(*want), "{row}: {}", String::from_utf8_lossy(&o.stderr));
        // Every row leaves the child serving HTTP/3.
        let r = h3(port, &["--sni", "h3.test", "/size/3"]);
        assert_eq!(status(&r, 0), 200, "after {row}: {r}");
    }
    let once = stat(&d.dir);
    assert_eq!(counter(&once, "MGT.child_start"), Some(1), "the child died on the way:\n{once}");
    assert!(counter(&once, "MAIN.h3_retry") > Some(0), "{once}");
    assert!(counter(&once, "MAIN.h3_stream_errors") >= Some(5), "{once}");
    let dir = d.dir.to_str().unwrap();
    let log = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "Error", "-n", dir]));
    assert!(log.contains("Missing :path") && log.contains("connection-specific header field"), "{log}");
}

#[test]
fn cache_bench_loads_h3_streams_and_new_connections() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let a = self_signed(tmp.path(), &["h3.test"], "h3");
    let (d, port) = tls_daemon(tmp.path(), &["-b", &format!("127.0.0.1:{}", origin.port), "-p", "feature=+http3"], &a.bundle);
    let url = format!("https://h3.test:{port}/size/100?max_age=60");
    let bench = |extra: &[&str]| {
        let mut args =
            vec!["run", "-q", "--json", "-t", "1", "--h3", "--cacert", a.bundle.to_str().unwrap(), "--resolve", "h3.test:127.0.0.1"];
        args.extend_from_slice(extra);
        args.push(&url);
        let o = run("cache-bench", &args);
        serde_json::from_str::<Value>(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {} {}", stdout(&o), stderr(&o)))
    };
    let count = |v: &Value| (v["requests"].as_u64(), v["errors"]["total"].as_u64());
    let delta = |before: &str, after: &str, name: &str| counter(after, name).unwrap_or(0) - counter(before, name).unwrap_or(0);
    // 2 QUIC connections, 10 streams each.
    let before = stat(&d.dir);
    let v = bench(&["--streams", "10", "-c", "2", "-n", "1000"]);
    assert_eq!(count(&v), (Some(1000), Some(0)), "{v}");
    let after = stat(&d.dir);
    assert_eq!((delta(&before, &after, "MAIN.h3_conn"), delta(&before, &after, "MAIN.h3_streams")), (2, 1000), "{after}");
    // A full QUIC handshake per request.
    let v = bench(&["--new-conn", "-c", "2", "-n", "100"]);
    assert_eq!(count(&v), (Some(100), Some(0)), "{v}");
    let again = stat(&d.dir);
    assert_eq!(delta(&after, &again, "MAIN.h3_conn"), 100, "{again}");
    // --h3 is for https:// URLs.
    let o = run("cache-bench", &["run", "--h3", &format!("http://127.0.0.1:{}/", d.port)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn zero_rtt_when_enabled_serves_safe_methods_early_and_holds_the_others() {
    if !have_aioquic() {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(
        tmp.path(),
        "early.vcl",
        "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; .port = \"ORIGIN_PORT\"; }\n\
         sub vcl_deliver { set resp.http.x-early = req.http.Early-Data; }\n",
        origin.port,
    );
    let (d, port) = tls_daemon(tmp.path(), &["-f", vcl.to_str().unwrap(), "-p", "feature=+http3"], &pem(tmp.path(), "h3.test"));
    let ticket = tmp.path().join("ticket");
    let t = ticket.to_str().unwrap();
    let go = |t: &str| h3(port, &["--sni", "h3.test", "--ticket", t, "/size/5", "POST:/size/3:abc"]);
    // Off (the default): the tickets allow no early data.
    go(t);
    let r = go(t);
    assert_eq!(r["early_data_accepted"], false, "{r}");
    assert_eq!(header(&r, 0, "x-early"), Some(""), "{r}");
    // On: a resumed connection's GET is served in 0-RTT and says so; the
    // POST waits for the handshake, and is not marked.
    assert!(run("cache-adm", &["-n", d.dir.to_str().unwrap(), "param.set", "h3_0rtt", "on"]).status.success());
    go(t);
    let saved = std::fs::read(&ticket).unwrap();
    let r = go(t);
    assert_eq!(r["early_data_accepted"], true, "{r}");
    assert_eq!((status(&r, 0), header(&r, 0, "x-early")), (200, Some("1")), "{r}");
    assert_eq!((status(&r, 1), header(&r, 1, "x-early"), header(&r, 1, "x-request-body-bytes")), (200, Some(""), Some("3")), "{r}");
    // A ticket used a second time (a replay) gets no early data.
    std::fs::write(&ticket, &saved).unwrap();
    let r = go(t);
    assert_eq!(r["early_data_accepted"], false, "{r}");
    assert_eq!(header(&r, 0, "x-early"), Some(""), "{r}");
}
