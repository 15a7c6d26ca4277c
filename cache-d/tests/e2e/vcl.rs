//! Real-world VCL (tests/vcl) run by a real cache-d against the test
//! origin: every subroutine the engine calls, restarts, retries, synthetic
//! pages, grace by backend health, normalisation and bans from VCL. The
//! same files compile with the real varnishd where it is installed.

use std::path::Path;
use std::time::Duration;

use crate::util::*;

/// The corpus files that are valid VCL 4.1 (varnish2.vcl is the one that
/// must fail).
const CORPUS: [&str; 6] =
    ["wordpress.vcl", "errors-and-redirects.vcl", "grace-and-health.vcl", "normalize.vcl", "ban-on-header.vcl", "shard-cluster.vcl"];

fn ids(r: &Resp) -> usize {
    r.header("x-varnish").map_or(0, |v| v.split(' ').count())
}

fn request(c: &mut Client, method: &str, path: &str, headers: &str) -> Resp {
    c.send_raw(format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n").as_bytes());
    c.read_response(method == "HEAD").expect("a response")
}

fn log_dump(d: &Daemon) -> String {
    stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()]))
}

#[test]
fn the_corpus_compiles_here_and_in_varnishd() {
    let tmp = tempfile::tempdir().unwrap();
    let varnishd = ["/usr/sbin/varnishd", "/usr/local/sbin/varnishd"].into_iter().find(|p| Path::new(p).exists());
    if varnishd.is_none() {
        eprintln!("varnishd not installed: checking the corpus with cache-d alone");
    }
    for name in CORPUS {
        let f = vcl_file(tmp.path(), name, 8080);
        let o = run("cache-d", &["-C", "-f", f.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        if let Some(v) = varnishd {
            let o = std::process::Command::new(v)
                .args(["-C", "-f", f.to_str().unwrap(), "-n", tmp.path().join("v").to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(0), "varnishd rejects {name}: {}", stderr(&o));
        }
    }
}

#[test]
fn errors_redirects_retries_and_restarts() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl_file(tmp.path(), "errors-and-redirects.vcl", origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", f.to_str().unwrap()]);
    let mut c = Client::connect(d.port);
    // synth(750) in vcl_recv, turned into a redirect by vcl_synth.
    let r = c.get("/old/page?x=1", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://127.0.0.1/new/page?x=1"));
    // A synthetic body from vcl_synth, on a connection that stays open.
    let r = c.get("/teapot", "");
    assert_eq!((r.status, String::from_utf8_lossy(&r.body).as_ref()), (418, "418 I'm a teapot\n"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    // vcl_deliver restarts a 404 onto the fallback page.
    let r = c.get("/size/5?status=404", "");
    assert_eq!((r.status, r.body.len()), (200, 7));
    assert_eq!(r.header("x-restarted"), Some("1"));
    // vcl_backend_response retries 5xx twice, then delivers the third.
    let before = counter(&stat(&d.dir), "MAIN.backend_req").unwrap();
    let r = c.get("/size/5?status=500&max_age=0", "");
    assert_eq!(r.status, 500);
    assert_eq!(counter(&stat(&d.dir), "MAIN.backend_req"), Some(before + 3));
    let log = log_dump(&d);
    assert!(log.contains("VCL_return     retry"), "{log}");
    assert!(log.contains("BereqHeader    X-Retries: 2"), "{log}");
    assert!(log.contains("Timestamp      Restart:"), "{log}");
    // The origin goes away: vcl_backend_error retries, then its own page.
    drop(origin);
    let r = c.get("/size/9?max_age=60&gone=1", "");
    assert_eq!(r.status, 503);
    assert_eq!(String::from_utf8_lossy(&r.body), "Sorry, the origin is down (503 after 2 retries)\n");
    let once = stat(&d.dir);
    assert!(counter(&once, "MAIN.backend_fail").unwrap() >= 3, "{once}");
    let log = log_dump(&d);
    assert!(log.contains("VCL_call       BACKEND_ERROR"), "{log}");
    // The error object is not kept: the next request fetches again.
    let fails = counter(&stat(&d.dir), "MAIN.backend_fail").unwrap();
    c.get("/size/9?max_age=60&gone=1", "");
    assert!(counter(&stat(&d.dir), "MAIN.backend_fail").unwrap() >= fails + 3);
}

#[test]
fn grace_follows_backend_health() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl_file(tmp.path(), "grace-and-health.vcl", origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", f.to_str().unwrap()]);
    let ds = d.dir.to_str().unwrap().to_string();
    let mut c = Client::connect(d.port);
    let url = "/size/10?max_age=1";
    assert_eq!(ids(&c.get(url, "")), 1, "a miss");
    let r = c.get(url, "");
    assert_eq!((ids(&r), r.header("x-hits")), (2, Some("1")), "a hit; obj.hits counts this one");
    assert_eq!(c.get(url, "").header("x-hits"), Some("2"));
    // Healthy: 2.5 s stale is more than req.grace (2 s) allows: a miss.
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(ids(&c.get(url, "")), 1, "too stale while the backend is healthy");
    // 0.5 s stale is within it: served stale, refreshed in the background.
    std::thread::sleep(Duration::from_millis(1500));
    let r = c.get(url, "");
    assert_eq!(ids(&r), 2);
    assert!(r.header("x-grace").is_some_and(|g| g.starts_with("stale by ")), "{r:?}");
    // Sick: the whole hour of grace is used.
    let o = run("cache-adm", &["-n", &ds, "backend.set_health", "default", "sick"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    std::thread::sleep(Duration::from_millis(3500));
    let r = c.get(url, "");
    assert_eq!((r.status, ids(&r)), (200, 2), "{r:?}");
    assert!(r.header("x-grace").is_some(), "{r:?}");
    assert!(counter(&stat(&d.dir), "MAIN.cache_hit_grace").unwrap() >= 2);
}

#[test]
fn normalisation_collapses_variants_and_cookies() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl_file(tmp.path(), "normalize.vcl", origin.port);
    // Without gzip support, so that Vary: Accept-Encoding splits variants
    // and the policy's own normalisation decides which (with it on, one
    // gzip object serves every client, as in Varnish).
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", f.to_str().unwrap(), "-p", "http_gzip_support=off"]);
    let mut c = Client::connect(d.port);
    let url = "/size/10?max_age=60&vary=Accept-Encoding";
    assert_eq!(ids(&c.get(url, "Accept-Encoding: gzip, deflate\r\n")), 1);
    assert_eq!(ids(&c.get(url, "Accept-Encoding: deflate, gzip;q=1\r\n")), 2, "the same normalised variant");
    assert_eq!(ids(&c.get(url, "Accept-Encoding: br, gzip\r\n")), 1, "another variant");
    assert_eq!(ids(&c.get(url, "Accept-Encoding: identity\r\n")), 1, "no encoding: a third variant");
    assert_eq!(ids(&c.get(url, "")), 2, "the same as no usable encoding");
    let lang = "/size/10?max_age=60&vary=Accept-Language";
    assert_eq!(ids(&c.get(lang, "Accept-Language: de-DE,de;q=0.9,en;q=0.5\r\n")), 1);
    assert_eq!(ids(&c.get(lang, "Accept-Language: DE-at\r\n")), 2, "both are de");
    assert_eq!(ids(&c.get(lang, "Accept-Language: en-GB\r\n")), 1);
    // Query strings sorted, tracking parameters dropped.
    let r = c.get("/size/3?max_age=60&utm_source=news&b=1", "");
    assert_eq!((ids(&r), r.header("x-url")), (1, Some("/size/3?b=1&max_age=60")));
    assert_eq!(ids(&c.get("/size/3?b=1&gclid=abc&max_age=60", "")), 2);
    // Only the lang cookie survives, and it is part of the hash.
    let page = "/size/4?max_age=60";
    assert_eq!(ids(&c.get(page, "Cookie: _ga=1; lang=de; session=2\r\n")), 1);
    assert_eq!(ids(&c.get(page, "Cookie: lang=de\r\n")), 2);
    assert_eq!(ids(&c.get(page, "Cookie: lang=fr; _ga=9\r\n")), 1);
    assert_eq!(ids(&c.get(page, "Cookie: _ga=1\r\n")), 1, "no lang: a third object");
    assert_eq!(ids(&c.get(page, "")), 2, "no cookie is the same as no lang cookie");
    let log = log_dump(&d);
    assert!(log.contains("BereqHeader    X-Lang: de"), "{log}");
    assert!(!log.contains("BereqHeader    Cookie"), "the origin never sees cookies: {log}");
}

#[test]
fn bans_from_vcl_by_object_headers() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl_file(tmp.path(), "ban-on-header.vcl", origin.port);
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", f.to_str().unwrap()]);
    let mut c = Client::connect(d.port);
    for p in ["/size/10?max_age=60&p=1", "/size/10?max_age=60&p=2"] {
        c.get(p, "");
        let r = c.get(p, "");
        assert_eq!(ids(&r), 2);
        assert!(r.header("x-url").is_none() && r.header("x-host").is_none(), "internal headers stay inside: {r:?}");
    }
    let r = request(&mut c, "BAN", "/", "X-Ban-Url: p=1$\r\n");
    assert_eq!((r.status, String::from_utf8_lossy(&r.body).contains("Ban added")), (200, true), "{r:?}");
    let list = stdout(&run("cache-adm", &["-n", d.dir.to_str().unwrap(), "ban.list"]));
    assert!(list.contains("obj.http.x-host == 127.0.0.1 && obj.http.x-url ~ p=1$"), "{list}");
    assert_eq!(ids(&c.get("/size/10?max_age=60&p=1", "")), 1, "banned");
    assert_eq!(ids(&c.get("/size/10?max_age=60&p=2", "")), 2, "not banned");
    assert_eq!(request(&mut c, "BAN", "/", "").status, 400);
    assert_eq!(counter(&stat(&d.dir), "MAIN.bans_added"), Some(2), "the ban every cache starts with, and this one");
    // By cache channel, the header the application tags responses with.
    let news = ["/size/10?max_age=60&header=X-Cache-Channel:news&a=1", "/size/10?max_age=60&header=X-Cache-Channel:news&a=2"];
    let sport = "/size/10?max_age=60&header=X-Cache-Channel:sport";
    for p in news.iter().chain([&sport]) {
        c.get(p, "");
        let r = c.get(p, "");
        assert_eq!(ids(&r), 2);
        assert!(r.header("x-cache-channel").is_none(), "{r:?}");
    }
    assert_eq!(request(&mut c, "BAN", "/", "X-Purge-CC: ^news$\r\n").status, 200);
    for p in news {
        assert_eq!(ids(&c.get(p, "")), 1, "{p} banned");
    }
    assert_eq!(ids(&c.get(sport, "")), 2, "another channel stays");
}

#[test]
fn vcl_labels_state_and_busy_counts() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = d.dir.to_str().unwrap().to_string();
    let adm = |args: &[&str]| {
        let mut a = vec!["-n", ds.as_str()];
        a.extend_from_slice(args);
        let o = run("cache-adm", &a);
        (o.status.code(), stdout(&o))
    };
    let tagged = "vcl 4.1; sub vcl_deliver { set resp.http.X-Policy = \"tagged\"; }";
    // Words are joined as varnishadm joins them: the source is quoted.
    assert_eq!(adm(&["vcl.inline", "tagged", &common::adm::quote(tagged)]).0, Some(0));
    assert_eq!(adm(&["vcl.label", "prod", "tagged"]).0, Some(0));
    let (rc, out) = adm(&["vcl.label", "prod2", "prod"]);
    assert!(rc != Some(0) && out.contains("label"), "a label of a label: {out}");
    let (_, list) = adm(&["vcl.list"]);
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert!(list.lines().any(|l| words(l) == ["available", "label", "warm", "0", "prod", "->", "tagged"]), "{list}");
    assert!(list.lines().any(|l| words(l) == ["available", "auto", "warm", "0", "tagged", "<-", "(1", "label)"]), "{list}");
    // Using the label switches to its program.
    assert_eq!(adm(&["vcl.use", "prod"]).0, Some(0));
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/size/1", "").header("x-policy"), Some("tagged"));
    // (Its records are committed just after its last byte.)
    wait_for(10, "VCL_use tagged via prod", || log_dump(&d).contains("VCL_use        tagged via prod").then_some(()));
    let (rc, out) = adm(&["vcl.discard", "tagged"]);
    assert!(rc != Some(0) && out.contains("prod"), "a labelled program stays: {out}");
    // A slow request keeps its program busy while another is active.
    let port = d.port;
    let slow = std::thread::spawn(move || Client::connect(port).get("/size/1?delay_ms=4000", ""));
    let busy = || {
        let (_, list) = adm(&["vcl.list", "-j"]);
        let v: serde_json::Value = serde_json::from_str(&list).unwrap();
        v.as_array().unwrap()[3..].iter().find(|e| e["name"] == "tagged").and_then(|e| e["busy"].as_u64())
    };
    wait_for(10, "the slow request to start", || (busy() == Some(1)).then_some(()));
    assert_eq!(adm(&["vcl.use", "boot"]).0, Some(0));
    assert_eq!(busy(), Some(1), "still running on tagged after vcl.use boot");
    assert_eq!(slow.join().unwrap().header("x-policy"), Some("tagged"), "the in-flight request finished on its program");
    // vcl.state: neither the active program nor a labelled one can go
    // cold; once the label is gone, it can, and cannot be used cold.
    assert_ne!(adm(&["vcl.state", "boot", "cold"]).0, Some(0));
    let (rc, out) = adm(&["vcl.state", "tagged", "cold"]);
    assert!(rc != Some(0) && out.contains("A labeled VCL cannot be set cold"), "{out}");
    assert_eq!(adm(&["vcl.discard", "prod"]).0, Some(0));
    assert_eq!(adm(&["vcl.state", "tagged", "cold"]).0, Some(0));
    let (_, list) = adm(&["vcl.list"]);
    assert!(list.lines().any(|l| words(l) == ["available", "cold", "cold", "0", "tagged"]), "{list}");
    assert_ne!(adm(&["vcl.use", "tagged"]).0, Some(0));
    assert_eq!(adm(&["vcl.discard", "t*"]).0, Some(0));
    assert_eq!(adm(&["vcl.list"]).1.lines().count(), 1);
}

#[test]
fn runtime_failures_answer_503_and_log_vcl_error() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl_src(
        tmp.path(),
        "fail.vcl",
        r#"vcl 4.1;
import std;
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; }
sub vcl_recv {
    if (req.url == "/fail") { return (fail); }
    if (req.url ~ "^/size/3") { set req.http.X-Q = 100 / std.integer(req.http.X-D, 0); }
}
sub vcl_pipe { set bereq.http.X-Pipe = "yes"; }
sub vcl_deliver { set resp.http.X-Q = req.http.X-Q; }
"#,
        origin.port,
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", f.to_str().unwrap()]);
    let mut c = Client::connect(d.port);
    let r = c.get("/fail", "");
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).contains("VCL failed"), "{r:?}");
    // The failure closed the connection, as Varnish's does.
    assert_eq!(r.header("connection"), Some("close"));
    let mut c = Client::connect(d.port);
    let r = c.get("/size/3", "X-D: 4\r\n");
    assert_eq!((r.status, r.header("x-q")), (200, Some("25")));
    let r = c.get("/size/3", "");
    assert_eq!(r.status, 503, "division by zero fails the request");
    let log = wait_for(10, "the failed request's records", || Some(log_dump(&d)).filter(|l| l.contains("VCL_Error      division by zero")));
    assert!(log.contains("VCL_Error      division by zero"), "{log}");
    assert!(log.contains("VCL_return     fail"), "{log}");
    // vcl_pipe edits the backend request of a pipe.
    let mut p = Client::connect(d.port);
    let r = request(&mut p, "BREW", "/size/2", "Connection: close\r\n");
    assert_eq!(r.status, 200);
    // (The pipe's records are written when it ends, a moment after the
    // client has its answer.)
    wait_for(10, "the pipe's records", || log_dump(&d).contains("BereqHeader    X-Pipe: yes").then_some(()));
}

#[test]
fn the_vcl_page_documents_every_subroutine_variable_and_function() {
    let page = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../man/cache-vcl.7")).unwrap();
    let page = page.replace("\\-", "-").replace("\\e", "\\");
    for sub in cache_d::vcl::model::Sub::ALL {
        assert!(page.contains(sub.name()), "cache-vcl(7) does not document {}", sub.name());
    }
    for v in cache_d::vcl::compile::variables() {
        let v = if v.ends_with('.') { format!("{v}*") } else { v.to_string() };
        assert!(page.contains(&v), "cache-vcl(7) does not document {v}");
    }
    for f in cache_d::vcl::compile::FUNCTIONS {
        assert!(page.contains(&format!("{f}(")), "cache-vcl(7) does not document {f}()");
    }
}

/// tests/conformance/vmods.tsv (vmod, function, signature, scenarios)
/// stays true to cache-d: every vmod function cache-d knows has a row,
/// every vmod `import` accepts has rows, a row for a plain function names
/// one cache-d knows, and every row names scenarios that exist — a
/// conformance scenario in tests/conformance/, or an e2e test as
/// `cache-d/tests/e2e/FILE.rs::test_name` (for vmods varnishd lacks); a
/// "(partial: ...)" note after them is not read.
#[test]
fn the_vmods_table_lists_every_vmod_function_with_scenarios_that_exist() {
    use cache_d::vcl::compile::{FUNCTIONS, VMODS};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let table = std::fs::read_to_string(root.join("tests/conformance/vmods.tsv")).unwrap();
    let (mut functions, mut vmods) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for (i, line) in table.lines().enumerate().skip(1) {
        let at = format!("vmods.tsv:{}", i + 1);
        let cols: Vec<&str> = line.split('\t').collect();
        let [vmod, function, signature, scenarios] = cols[..] else { panic!("{at}: 4 tab-separated columns, not {}", cols.len()) };
        assert!(VMODS.contains(&vmod), "{at}: import does not accept vmod {vmod}");
        vmods.insert(vmod);
        functions.insert(function);
        // `TYPE vmod.name(...)` is a function; objects (`new OBJ = ...`)
        // and their methods (`TYPE <obj>.name(...)`) are not in FUNCTIONS:
        // a method is found through its object's kind, so their rows are
        // checked for their scenarios only.
        if signature.split_once(' ').is_some_and(|(_, s)| s.starts_with(&format!("{function}("))) {
            assert!(FUNCTIONS.contains(&function), "{at}: cache-d has no function {function}");
        }
        let named: Vec<&str> = scenarios.split(" (").next().unwrap_or_default().split_whitespace().collect();
        assert!(!named.is_empty(), "{at}: {function} names no scenario");
        for s in named {
            match s.split_once("::") {
                Some((file, test)) => {
                    let src = std::fs::read_to_string(root.join(file)).unwrap_or_default();
                    assert!(
                        file.starts_with("cache-d/tests/e2e/") && src.contains(&format!("fn {test}()")),
                        "{at}: {function}: no e2e test {test} in {file}"
                    );
                }
                None => assert!(
                    s.ends_with(".vtc") && root.join("tests/conformance").join(s).is_file(),
                    "{at}: {function}: no scenario tests/conformance/{s}"
                ),
            }
        }
    }
    for f in FUNCTIONS.iter().filter(|f| f.contains('.')) {
        assert!(functions.contains(f), "vmods.tsv has no row for {f}");
    }
    for m in VMODS {
        assert!(vmods.contains(m), "vmods.tsv has no rows for vmod {m}");
    }
}
