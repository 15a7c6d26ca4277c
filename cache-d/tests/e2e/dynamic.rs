//! Dynamic backends (`import dynamic;`, issue 20): a name followed in
//! DNS as its answer changes, each address a real backend with its probe
//! and counters, the last good answer kept through a DNS outage. The
//! name server is the harness's (`e2e::dns`), which the test controls.

use crate::util::*;
use e2e::dns::Dns;

/// Two test origins on 127.0.0.5 and 127.0.0.6 with the same port (a
/// dynamic director has one port for all of a name's addresses).
fn two_origins() -> (Origin, Origin) {
    for _ in 0..20 {
        let a = Origin::start_at("127.0.0.5:0");
        if std::net::TcpListener::bind(("127.0.0.6", a.port)).is_ok() {
            let b = Origin::start_at(&format!("127.0.0.6:{}", a.port));
            return (a, b);
        }
    }
    panic!("no port free on both 127.0.0.5 and 127.0.0.6");
}

/// `n` requests through the director, and how many each address took
/// (by its backend's VBE.*.req; the probes' requests are not counted).
fn spread(d: &Daemon, n: usize, port: u16) -> (u64, u64) {
    let took = || {
        let once = stat(&d.dir);
        let of = |ip: &str| counter(&once, &format!("VBE.boot.d({ip}:{port}).req")).unwrap_or(0);
        (of("127.0.0.5"), of("127.0.0.6"))
    };
    let (a0, b0) = took();
    for i in 0..n {
        let r = Client::connect(d.port).get(&format!("/dyn/{i}"), "");
        assert_eq!(r.status, 200, "request {i}: {:?}", String::from_utf8_lossy(&r.body));
    }
    let (a1, b1) = took();
    (a1.saturating_sub(a0), b1.saturating_sub(b0))
}

const VCL: &str = r#"vcl 4.1;
import dynamic;

probe alive {
    .url = "/";
    .interval = 0.3s;
    .initial = 1;
    .threshold = 1;
    .window = 2;
}

sub vcl_init {
    new r = dynamic.resolver(set_from_os = false);
    r.add_nameserver("127.0.0.1:DNS_PORT");
    r.set_timeout(1s);
    new d = dynamic.director(port = "ORIGIN_PORT", ttl = 0.5s, keep = 1, retry_after = 0.5s, probe = alive, resolver = r.use());
}

sub vcl_recv {
    set req.backend_hint = d.backend("a.test");
    return (pass);
}
"#;

#[test]
fn a_dynamic_director_follows_the_name_and_keeps_the_last_answer() {
    let dns = Dns::start();
    let (a, _b) = two_origins();
    dns.set("a.test", &["127.0.0.5"]);
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "dyn.vcl", &VCL.replace("DNS_PORT", &dns.port.to_string()), a.port);
    let d = Daemon::start_args(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()]);
    let ds = d.dir.to_str().unwrap().to_string();
    assert_eq!(spread(&d, 10, a.port), (10, 0), "the name's one address");
    // Each address is a backend: listed, probed, counted.
    let name_a = format!("d(127.0.0.5:{})", a.port);
    let list = stdout(&run("cache-adm", &["-n", &ds, "backend.list"]));
    assert!(list.lines().any(|l| l.starts_with(&format!("boot.{name_a}")) && l.contains("healthy")), "{list}");
    assert_eq!(counter(&stat(&d.dir), &format!("VBE.boot.{name_a}.req")), Some(10));

    // The name moves to both addresses: requests go to both, no reload.
    dns.set("a.test", &["127.0.0.5", "127.0.0.6"]);
    let name_b = format!("d(127.0.0.6:{})", a.port);
    wait_for(10, "the second address to be probed healthy", || {
        let list = stdout(&run("cache-adm", &["-n", &ds, "backend.list"]));
        list.lines().any(|l| l.starts_with(&format!("boot.{name_b}")) && l.contains("healthy")).then_some(())
    });
    let (to_a, to_b) = spread(&d, 20, a.port);
    assert_eq!((to_a + to_b, to_a >= 5, to_b >= 5), (20, true, true), "both addresses take requests: {to_a} and {to_b}");

    // Then to the second only: the first goes once it missed more than
    // `keep` answers; its counters go with it.
    dns.set("a.test", &["127.0.0.6"]);
    wait_for(10, "the first address to be removed", || {
        let list = stdout(&run("cache-adm", &["-n", &ds, "backend.list"]));
        (!list.contains(&name_a)).then_some(())
    });
    assert_eq!(spread(&d, 10, a.port), (0, 10), "only the new address");
    wait_for(5, "the removed backend's counters to go", || {
        counter(&stat(&d.dir), &format!("VBE.boot.{name_a}.req")).is_none().then_some(())
    });

    // DNS fails: the last good answer stays and requests keep flowing.
    dns.fail(true);
    let q = dns.queries();
    wait_for(10, "lookups to fail a few times", || (dns.queries() >= q + 3).then_some(()));
    assert_eq!(spread(&d, 10, a.port), (0, 10), "the last good answer is kept through the outage");
    let list = stdout(&run("cache-adm", &["-n", &ds, "backend.list"]));
    assert!(list.contains(&name_b), "{list}");
    // The failures are logged as libvmod-dynamic logs them.
    let log = stdout(&run("cache-log", &["-n", &ds, "-d", "-g", "raw", "-i", "Error"]));
    assert!(log.lines().any(|l| l.contains("vmod-dynamic boot d a.test:") && l.contains("dns")), "{log}");
    dns.fail(false);
}

#[test]
fn the_system_resolver_and_a_name_from_the_request() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    // The name comes from the Host header; `localhost` may also resolve to
    // ::1, where nothing listens: the probe keeps requests off it.
    let src = r#"vcl 4.1;
import dynamic;
probe alive { .url = "/"; .interval = 0.3s; .initial = 0; .threshold = 1; .window = 1; }
sub vcl_init {
    new d = dynamic.director(port = "ORIGIN_PORT", ttl = 10s, probe = alive, first_lookup_timeout = 2s);
}
sub vcl_recv {
    set req.backend_hint = d.backend();
    return (pass);
}
"#;
    let vcl = vcl_src(tmp.path(), "sys.vcl", src, origin.port);
    let d = Daemon::start_args(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()]);
    let name = format!("d(127.0.0.1:{})", origin.port);
    let get = |host: &str| {
        let mut c = Client::connect(d.port);
        c.send_raw(format!("GET /sys HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        c.read_response(false).expect("a response").status
    };
    wait_for(10, "a healthy address for localhost", || (get("localhost:8080") == 200).then_some(()));
    assert!((0..5).all(|_| get("localhost") == 200));
    assert!(counter(&stat(&d.dir), &format!("VBE.boot.{name}.req")) >= Some(6));
    // A name that does not resolve: no backend, 503.
    assert_eq!(get("no-such-name.invalid"), 503);
    let log = stdout(&run("cache-log", &["-n", d.dir.to_str().unwrap(), "-d", "-g", "raw", "-i", "FetchError"]));
    assert!(log.contains("No backend"), "as Varnish logs a hint that picks none: {log}");
    assert_eq!(get("localhost"), 200, "the child is still serving");
}

/// A cache-d whose stderr goes to `err` (to count what it says there).
fn daemon_to(dir: &std::path::Path, args: &[&str], err: &std::path::Path) -> Daemon {
    let child = std::process::Command::new(bin("cache-d"))
        .args(["-F", "-a", "127.0.0.1:0", "-n"])
        .arg(dir)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .unwrap();
    let port = wait_for(10, "cache-d to listen", || {
        std::fs::read_to_string(dir.join("_.listen")).ok()?.lines().next()?.split(' ').nth(2)?.parse().ok()
    });
    Daemon { child: Some(child), dir: dir.to_path_buf(), port }
}

const HOST_VCL: &str = r#"vcl 4.1;
import dynamic;
sub vcl_init {
    new r = dynamic.resolver(set_from_os = false);
    r.add_nameserver("127.0.0.1:DNS_PORT");
    r.set_timeout(1s);
    new d = dynamic.director(port = "ORIGIN_PORT", first_lookup_timeout = 2s, resolver = r.use());
}
sub vcl_recv {
    if (req.http.x-name) {
        set req.backend_hint = d.backend(req.http.x-name);
    } else {
        set req.backend_hint = d.backend();
    }
    return (pass);
}
"#;

/// Regression (issue 32): a director named from the Host header filled
/// its 1,024 name slots in ~1,000 requests and then refused every new
/// name for domain_usage_timeout (2 hours). A new name now takes the slot
/// of the least recently used one.
#[test]
fn made_up_host_names_do_not_lock_out_new_names() {
    let dns = Dns::start();
    let origin = Origin::start();
    dns.set("a.test", &["127.0.0.1"]);
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "host.vcl", &HOST_VCL.replace("DNS_PORT", &dns.port.to_string()), origin.port);
    let d = Daemon::start_args(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()]);
    let get = |host: &str| {
        let mut c = Client::connect(d.port);
        c.send_raw(format!("GET /h HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        c.read_response(false).expect("a response").status
    };
    assert_eq!(get("a.test"), 200);
    // 1,100 names that do not resolve (503, no backend), one per request.
    for i in 0..1100 {
        assert_eq!(get(&format!("n{i}.test")), 503, "name {i}");
    }
    assert_eq!(get("b.test"), 503, "the lookup of a new name ran");
    dns.set("c.test", &["127.0.0.1"]);
    assert_eq!(get("c.test"), 200, "a new name got a slot");
    assert_eq!(get("a.test"), 200);
    let ds = d.dir.to_str().unwrap();
    let log = stdout(&run("cache-log", &["-n", ds, "-d", "-g", "raw", "-i", "VCL_Error,VCL_Log"]));
    assert!(!log.contains("names at once"), "{}", log.lines().find(|l| l.contains("names at once")).unwrap_or_default());
    assert!(log.contains("vmod-dynamic boot d a.test:") && log.contains("evicted (least recently used of 1024)"), "the first names went");
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
}

/// Regression (issue 32): a DNS answer with 4,000 addresses made 4,000
/// backends, took every counter slot of the segment (4,096: 204
/// backends' worth) and wrote 3,797 lines on stderr. One answer gives a
/// name at most 64 addresses (one Error record says how many were
/// dropped); stderr stays quiet. (2,500 addresses here: as many as the
/// test name server fits in one TCP message, and far past the slots.)
#[test]
fn an_answer_of_thousands_of_addresses_takes_64() {
    let dns = Dns::start();
    let origin = Origin::start();
    let many: Vec<String> = (0..2499u32).map(|i| format!("127.1.{}.{}", i / 250, 1 + i % 250)).collect();
    let mut addrs: Vec<&str> = vec!["127.0.0.1"];
    addrs.extend(many.iter().map(String::as_str));
    dns.set("many.test", &addrs);
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "many.vcl", &HOST_VCL.replace("DNS_PORT", &dns.port.to_string()), origin.port);
    let err = tmp.path().join("stderr");
    let d = daemon_to(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()], &err);
    let mut c = Client::connect(d.port);
    c.send_raw(b"GET /m HTTP/1.1\r\nHost: x\r\nX-Name: many.test\r\n\r\n");
    c.read_response(false).expect("a response");
    let ds = d.dir.to_str().unwrap().to_string();
    let list = stdout(&run("cache-adm", &["-n", &ds, "backend.list"]));
    let listed = list.lines().filter(|l| l.starts_with("boot.d(127.")).count();
    assert_eq!(listed, 64, "{list}");
    assert!(list.contains(&format!("boot.d(127.0.0.1:{})", origin.port)), "the answer's first address is taken: {list}");
    let log = stdout(&run("cache-log", &["-n", &ds, "-d", "-g", "raw", "-i", "Error"]));
    let said: Vec<&str> = log.lines().filter(|l| l.contains("addresses dropped")).collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("vmod-dynamic boot d many.test:")
            && said[0].contains("2436 of 2500 addresses dropped (at most 64 from one answer)"),
        "{log}"
    );
    let text = std::fs::read_to_string(&err).unwrap();
    assert_eq!(text.matches("no room in the segment").count(), 0, "{} stderr lines", text.lines().count());
    // The rest of the segment's counters are there for other backends.
    assert!(counter(&stat(&d.dir), &format!("VBE.boot.d(127.0.0.1:{}).req", origin.port)).is_some());
    assert_eq!(counter(&stat(&d.dir), "MGT.child_start"), Some(1));
}

/// A resolver's clear_nameservers() drops the name servers added before
/// it (r1 asks only the server added after; r2, cleared of that one, asks
/// only the other, which does not know the name: no backend, 503), and a
/// director's debug(true) logs its lookups as Debug records (d2's, not
/// turned on, none).
#[test]
fn clear_nameservers_drops_the_ones_added_before() {
    let (known, unknown) = (Dns::start(), Dns::start());
    known.set("a.test", &["127.0.0.1"]);
    let origin = Origin::start();
    let src = r#"vcl 4.1;
import dynamic;
sub vcl_init {
    new r1 = dynamic.resolver(set_from_os = false);
    r1.add_nameserver("127.0.0.1:UNKNOWN");
    r1.clear_nameservers();
    r1.add_nameserver("127.0.0.1:KNOWN");
    r1.set_timeout(1s);
    new r2 = dynamic.resolver(set_from_os = false);
    r2.add_nameserver("127.0.0.1:KNOWN");
    r2.clear_nameservers();
    r2.add_nameserver("127.0.0.1:UNKNOWN");
    r2.set_timeout(1s);
    new d1 = dynamic.director(port = "ORIGIN_PORT", first_lookup_timeout = 2s, resolver = r1.use());
    new d2 = dynamic.director(port = "ORIGIN_PORT", first_lookup_timeout = 2s, resolver = r2.use());
    d1.debug(true);
}
sub vcl_recv {
    if (req.http.x-d == "2") {
        set req.backend_hint = d2.backend("a.test");
    } else {
        set req.backend_hint = d1.backend("a.test");
    }
    return (pass);
}
"#;
    let src = src.replace("UNKNOWN", &unknown.port.to_string()).replace("KNOWN", &known.port.to_string());
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(tmp.path(), "clear.vcl", &src, origin.port);
    let d = Daemon::start_args(&tmp.path().join("n"), &["-f", vcl.to_str().unwrap()]);
    let get = |which: &str| {
        let mut c = Client::connect(d.port);
        c.send_raw(format!("GET /c HTTP/1.1\r\nHost: x\r\nX-D: {which}\r\n\r\n").as_bytes());
        c.read_response(false).expect("a response").status
    };
    assert_eq!(get("1"), 200);
    assert_eq!(unknown.queries(), 0, "r1 asked the name server it cleared");
    let asked = known.queries();
    assert_eq!(get("2"), 503, "r2 asked only the server that does not know a.test");
    assert!(unknown.queries() > 0);
    assert_eq!(known.queries(), asked, "r2 asked the name server it cleared");
    let ds = d.dir.to_str().unwrap();
    let log = stdout(&run("cache-log", &["-n", ds, "-d", "-g", "raw", "-i", "Debug"]));
    assert!(log.lines().any(|l| l.contains("d1 a.test:") && l.contains("lookup: 127.0.0.1")), "{log}");
    assert!(!log.contains("d2 a.test"), "{log}");
}
