//! Backends from the policy: routing by name, per-backend timeouts and
//! connection limits, health probes going sick and back, backend.list -p.

use std::time::{Duration, Instant};

use crate::util::*;

fn vcl(tmp: &std::path::Path, text: &str) -> String {
    let f = tmp.join("p.vcl");
    std::fs::write(&f, text).unwrap();
    f.to_str().unwrap().to_string()
}

#[test]
fn requests_go_to_the_backend_the_policy_names() {
    let (a, b) = (Origin::start(), Origin::start());
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl(
        tmp.path(),
        &format!(
            r#"vcl 4.1;
backend a {{ .host = "127.0.0.1"; .port = "{}"; }}
backend b {{ .host = "127.0.0.1"; .port = "{}"; .first_byte_timeout = 1s; .max_connections = 1; }}
sub vcl_recv {{
    if (req.url ~ "to=b") {{ set req.backend_hint = b; }}
    return (pass);
}}
sub vcl_deliver {{ set resp.http.X-Backend = req.backend_hint; }}
"#,
            a.port, b.port
        ),
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", &f]);
    let mut c = Client::connect(d.port);
    let (a0, b0) = (a.requests(), b.requests());
    assert_eq!(c.get("/size/3", "").header("x-backend"), Some("a"));
    assert_eq!(c.get("/size/3?to=b", "").header("x-backend"), Some("b"));
    assert_eq!(c.get("/size/3?to=b", "").status, 200);
    assert_eq!((a.requests() - a0, b.requests() - b0), (1, 2));
    // b's first byte timeout is 1 s: a 3 s delay fails at about 1 s.
    let t = Instant::now();
    let r = c.get("/size/3?to=b&delay_ms=3000", "");
    let took = t.elapsed();
    assert_eq!(r.status, 503);
    assert!(took >= Duration::from_millis(900) && took < Duration::from_millis(2800), "{took:?}");
    assert!(stdout(&run("cache-log", &["-d", "-n", d.dir.to_str().unwrap()])).contains("FetchError"));
    // b takes one connection at a time: a second request while one is in
    // flight is refused (backend_busy), a's are not.
    let port = d.port;
    let slow = std::thread::spawn(move || Client::connect(port).get("/size/3?to=b&delay_ms=800", "").status);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(Client::connect(d.port).get("/size/3?to=b", "").status, 503);
    assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200);
    assert_eq!(slow.join().unwrap(), 200);
    assert!(counter(&stat(&d.dir), "MAIN.backend_busy").unwrap() >= 1);
}

#[test]
fn probes_take_a_backend_out_and_back() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let origin = Origin::start_at(&addr);
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl(
        tmp.path(),
        &format!(
            r#"vcl 4.1;
import std;
backend be {{
    .host = "127.0.0.1"; .port = "{port}";
    .probe = {{ .url = "/size/1"; .interval = 200ms; .timeout = 1s; .window = 3; .threshold = 2; .initial = 0; }}
}}
sub vcl_deliver {{ set resp.http.X-Healthy = std.healthy(req.backend_hint); }}
"#
        ),
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", &f]);
    let ds = d.dir.to_str().unwrap().to_string();
    let list = |p: bool| {
        stdout(&run(
            "cache-adm",
            &["-n", &ds, "backend.list", if p { "-p" } else { "" }].iter().copied().filter(|a| !a.is_empty()).collect::<Vec<_>>(),
        ))
    };
    // initial = 0: sick until two probes of the last three are good.
    wait_for(10, "the probes to make it healthy", || {
        list(false).lines().any(|l| l.starts_with("boot.be ") && l.contains("healthy")).then_some(())
    });
    let r = Client::connect(d.port).get("/size/2", "");
    assert_eq!((r.status, r.header("x-healthy")), (200, Some("true")));
    let detail = list(true);
    assert!(detail.contains("Current states  good:") && detail.contains(" Happy") && detail.contains("Good IPv4"), "{detail}");
    // The origin goes away: sick, and requests are refused at once.
    drop(origin);
    wait_for(10, "the backend to go sick", || list(false).lines().any(|l| l.starts_with("boot.be ") && l.contains("sick")).then_some(()));
    assert_eq!(Client::connect(d.port).get("/size/4", "").status, 503);
    assert!(counter(&stat(&d.dir), "MAIN.backend_unhealthy").unwrap() >= 1);
    // And it comes back.
    let _origin = Origin::start_at(&addr);
    wait_for(10, "the backend to come back", || {
        list(false).lines().any(|l| l.starts_with("boot.be ") && l.contains("healthy")).then_some(())
    });
    assert_eq!(Client::connect(d.port).get("/size/5", "").status, 200);
    let log = wait_for(10, "a good probe after the return", || {
        let log = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "Backend_health", "-n", &ds]));
        log.lines().any(|l| l.contains("boot.be Still healthy 4---X-RH 3 2 3")).then_some(log)
    });
    for state in ["Still sick", "Back healthy", "Went sick"] {
        assert!(log.contains(state), "{state} in {log}");
    }
    // backend.set_health overrides the probe.
    run("cache-adm", &["-n", &ds, "backend.set_health", "be", "sick"]);
    assert_eq!(Client::connect(d.port).get("/size/6", "").status, 503);
    run("cache-adm", &["-n", &ds, "backend.set_health", "be", "auto"]);
    assert_eq!(Client::connect(d.port).get("/size/6", "").status, 200);
}

#[test]
fn directors_spread_fall_back_and_shard() {
    let (a, b) = (Origin::start(), Origin::start());
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl(
        tmp.path(),
        &format!(
            r#"vcl 4.1;
import directors;
backend a {{ .host = "127.0.0.1"; .port = "{}"; }}
backend b {{ .host = "127.0.0.1"; .port = "{}"; }}
sub vcl_init {{
    new rr = directors.round_robin();
    rr.add_backend(a);
    rr.add_backend(b);
    new fb = directors.fallback();
    fb.add_backend(a);
    fb.add_backend(b);
    new sh = directors.shard();
    sh.add_backend(a);
    sh.add_backend(b);
    sh.reconfigure();
    new nest = directors.fallback();
    nest.add_backend(rr.backend());
}}
sub vcl_recv {{
    if (req.url ~ "via=rr") {{ set req.backend_hint = rr.backend(); }}
    elsif (req.url ~ "via=fb") {{ set req.backend_hint = fb.backend(); }}
    elsif (req.url ~ "via=sh") {{ set req.backend_hint = sh.backend(); }}
    elsif (req.url ~ "via=nest") {{ set req.backend_hint = nest.backend(); }}
    return (pass);
}}
"#,
            a.port, b.port
        ),
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", &f]);
    let ds = d.dir.to_str().unwrap().to_string();
    let mut c = Client::connect(d.port);
    let counts = || (a.requests(), b.requests());
    let delta = |before: (u64, u64), after: (u64, u64)| (after.0 - before.0, after.1 - before.1);
    let run_n = |c: &mut Client, url: &str, n: usize| {
        for _ in 0..n {
            assert_eq!(c.get(url, "").status, 200, "{url}");
        }
    };
    let t0 = counts();
    run_n(&mut c, "/size/1?via=rr", 10);
    assert_eq!(delta(t0, counts()), (5, 5), "round robin alternates");
    let t0 = counts();
    run_n(&mut c, "/size/1?via=nest", 4);
    assert_eq!(delta(t0, counts()), (2, 2), "a fallback over the round robin");
    let t0 = counts();
    run_n(&mut c, "/size/1?via=fb", 4);
    assert_eq!(delta(t0, counts()), (4, 0), "fallback: the first healthy");
    run("cache-adm", &["-n", &ds, "backend.set_health", "a", "sick"]);
    let t0 = counts();
    run_n(&mut c, "/size/1?via=fb", 4);
    run_n(&mut c, "/size/1?via=rr", 4);
    assert_eq!(delta(t0, counts()), (0, 8), "a sick member is skipped");
    run("cache-adm", &["-n", &ds, "backend.set_health", "a", "auto"]);
    // Shard: a URL always lands on the same member.
    let t0 = counts();
    run_n(&mut c, "/size/1?via=sh&k=1", 6);
    let (x, y) = delta(t0, counts());
    assert!((x, y) == (6, 0) || (x, y) == (0, 6), "{x} {y}");
    // ...and different URLs spread over both (picked at fetch time by the
    // request's hash, as sh.backend() in vcl_recv is resolved lazily).
    let t0 = counts();
    for k in 0..40 {
        run_n(&mut c, &format!("/size/1?via=sh&k={k}"), 1);
    }
    let (x, y) = delta(t0, counts());
    assert!(x + y == 40 && x >= 8 && y >= 8, "{x} {y}");
}

#[test]
fn stale_if_error_serves_the_old_object_when_the_refresh_fails() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    // No grace, a minute of keep: an expired object is refreshed before
    // delivery, and is what stale_if_error falls back on.
    let d =
        Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &["-p", "default_grace=0", "-p", "default_keep=60"]);
    let ds = d.dir.to_str().unwrap().to_string();
    let mut c = Client::connect(d.port);
    let url = "/size/20?max_age=1";
    assert_eq!(c.get(url, "").status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    // The backend goes away: the stale copy, not an error.
    drop(origin);
    let r = c.get(url, "");
    assert_eq!((r.status, r.body.len()), (200, 20));
    assert!(r.header("age").and_then(|a| a.parse::<u64>().ok()).is_some_and(|a| a >= 1), "{r:?}");
    assert!(stdout(&run("cache-log", &["-d", "-n", &ds])).contains("stale_if_error: delivering the stale object"));
    // Marked sick: the same.
    run("cache-adm", &["-n", &ds, "backend.set_health", "default", "sick"]);
    assert_eq!(c.get(url, "").status, 200);
    // Turned off: the error.
    run("cache-adm", &["-n", &ds, "param.set", "stale_if_error", "off"]);
    assert_eq!(Client::connect(d.port).get(url, "").status, 503);
    // Nothing stale: an error either way.
    run("cache-adm", &["-n", &ds, "param.set", "stale_if_error", "on"]);
    assert_eq!(Client::connect(d.port).get("/size/21", "").status, 503);
}

#[test]
fn misbehaving_origins_fail_at_their_timeouts() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        &tmp.path().join("i"),
        &format!("127.0.0.1:{}", origin.port),
        &["-p", "between_bytes_timeout=1", "-p", "first_byte_timeout=2"],
    );
    let ds = d.dir.to_str().unwrap().to_string();
    let failed = || counter(&stat(&d.dir), "MAIN.fetch_failed").unwrap_or(0);
    // Headers later than first_byte_timeout (2 s): 503 at about 2 s.
    let f0 = failed();
    let t = Instant::now();
    assert_eq!(Client::connect(d.port).get("/size/10?delay_ms=5000", "").status, 503);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1800) && took < Duration::from_millis(4000), "first byte: {took:?}");
    assert!(failed() > f0);
    // A body that stalls longer than between_bytes_timeout (1 s): the
    // client gets the head and part of the body, then the connection
    // closes at about 1 s; never a clean end.
    for cookie in ["", "Cookie: pass=1\r\n"] {
        let f0 = failed();
        let mut c = Client::connect(d.port);
        let t = Instant::now();
        c.send_raw(format!("GET /size/100000?stall_ms=4000&max_age=60 HTTP/1.1\r\nHost: 127.0.0.1\r\n{cookie}\r\n").as_bytes());
        assert!(c.read_response(false).is_none(), "a cut body is not a response");
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(800) && took < Duration::from_millis(3500), "between bytes ({cookie:?}): {took:?}");
        assert!(failed() > f0, "{cookie:?}");
    }
    // A backend that resets mid-body: the same, at once.
    let mut c = Client::connect(d.port);
    c.send_raw(b"GET /size/50000?abort_after=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    assert!(c.read_response(false).is_none());
    let log = stdout(&run("cache-log", &["-d", "-n", &ds]));
    assert!(log.contains("FetchError"), "{log}");
    // And the daemon is fine.
    assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200);
}

/// `cache-stat -j -f FILTER`'s counters.
fn stat_counters(dir: &str, filter: &str) -> serde_json::Map<String, serde_json::Value> {
    let o = run("cache-stat", &["-n", dir, "-j", "-f", filter]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    v["counters"].as_object().cloned().unwrap_or_default()
}

fn value(c: &serde_json::Map<String, serde_json::Value>, name: &str) -> u64 {
    c.get(name).and_then(|v| v["value"].as_u64()).unwrap_or_else(|| panic!("no {name} in {:?}", c.keys().collect::<Vec<_>>()))
}

#[test]
fn vbe_counters_per_backend_come_and_go_with_programs() {
    let origin = Origin::start();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl(
        tmp.path(),
        &format!(
            r#"vcl 4.1;
probe quick {{ .url = "/size/1"; .interval = 100ms; .window = 4; .threshold = 2; .initial = 2; }}
backend a {{ .host = "127.0.0.1"; .port = "{}"; .probe = quick; }}
backend dead {{ .host = "127.0.0.1"; .port = "{dead}"; }}
sub vcl_recv {{
    if (req.url ~ "to=dead") {{ set req.backend_hint = dead; }}
    return (pass);
}}
"#,
            origin.port
        ),
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", &f]);
    let ds = d.dir.to_str().unwrap().to_string();
    let mut c = Client::connect(d.port);
    for _ in 0..3 {
        assert_eq!(c.get("/size/100", "").status, 200);
    }
    assert_eq!(c.get("/size/1?to=dead", "").status, 503);
    let s = stat_counters(&ds, "VBE.*");
    // Varnish 7's twenty fields for each backend, with their kinds.
    let fields: Vec<&str> = s.keys().filter_map(|k| k.strip_prefix("VBE.boot.a.")).collect();
    assert_eq!(fields.len(), 20, "{fields:?}");
    assert_eq!(s["VBE.boot.a.happy"]["flag"], "b");
    assert_eq!(s["VBE.boot.a.conn"]["flag"], "g");
    assert_eq!(s["VBE.boot.a.beresp_bodybytes"]["format"], "B");
    assert_eq!(value(&s, "VBE.boot.a.req"), 3);
    assert_eq!(value(&s, "VBE.boot.a.beresp_bodybytes"), 300);
    assert!(value(&s, "VBE.boot.a.beresp_hdrbytes") > 3 * 50);
    assert!(value(&s, "VBE.boot.a.bereq_hdrbytes") > 3 * 20);
    assert_eq!(value(&s, "VBE.boot.a.conn"), 0, "no request in flight");
    assert_eq!(value(&s, "VBE.boot.a.fail"), 0);
    assert_eq!(value(&s, "VBE.boot.dead.req"), 0);
    assert_eq!((value(&s, "VBE.boot.dead.fail"), value(&s, "VBE.boot.dead.fail_econnrefused")), (1, 1));
    // The probe's last results, as a bitmap.
    wait_for(10, "happy probes", || (value(&stat_counters(&ds, "VBE.boot.a.happy"), "VBE.boot.a.happy") & 0b1111 == 0b1111).then_some(()));
    // A request in flight holds a connection.
    let port = d.port;
    let slow = std::thread::spawn(move || Client::connect(port).get("/size/1?delay_ms=1500", "").status);
    wait_for(10, "a connection in use", || (value(&stat_counters(&ds, "VBE.boot.a.conn"), "VBE.boot.a.conn") == 1).then_some(()));
    assert_eq!(slow.join().unwrap(), 200);
    assert_eq!(value(&stat_counters(&ds, "VBE.boot.a.conn"), "VBE.boot.a.conn"), 0);
    // Sick: fetches not attempted are counted.
    run("cache-adm", &["-n", &ds, "backend.set_health", "a", "sick"]);
    assert_eq!(c.get("/size/1", "").status, 503);
    assert_eq!(value(&stat_counters(&ds, "VBE.boot.a.unhealthy"), "VBE.boot.a.unhealthy"), 1);
    run("cache-adm", &["-n", &ds, "backend.set_health", "a", "auto"]);
    // Another program brings its backends' counters; discarding it takes
    // them away, and the first program's stay.
    let o = run(
        "cache-adm",
        // Words are joined as varnishadm joins them: the source is quoted.
        &[
            "-n",
            &ds,
            "vcl.inline",
            "two",
            &common::adm::quote(&format!("vcl 4.1; backend z {{ .host = \"127.0.0.1\"; .port = \"{}\"; }}", origin.port)),
        ],
    );
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(stat_counters(&ds, "VBE.two.z.*").len(), 20);
    let o = run("cache-adm", &["-n", &ds, "vcl.discard", "two"]);
    assert!(o.status.success(), "{}", stdout(&o));
    wait_for(10, "two's counters to go", || stat_counters(&ds, "VBE.two.*").is_empty().then_some(()));
    assert_eq!(value(&stat_counters(&ds, "VBE.boot.a.req"), "VBE.boot.a.req"), 4, "three and the slow one");
    // Prometheus: one family per field, labelled by backend and program.
    let prom = stdout(&run("cache-stat", &["-n", &ds, "--prometheus"]));
    assert!(prom.contains("varnish_backend_req{backend=\"a\",server=\"boot\"} 4"), "{prom}");
    assert!(prom.contains("# TYPE varnish_backend_conn gauge"), "a family mixing MAIN.backend_conn and VBE.*.conn");
}

#[test]
fn vbe_counters_match_varnishd() {
    if !have("varnishd") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let v = Varnishd::start(&tmp.path().join("v"), &format!("127.0.0.1:{}", origin.port));
    let (vport, vdir) = (v.port, v.dir.clone());
    let d = Daemon::start(&tmp.path().join("c"), &format!("127.0.0.1:{}", origin.port), &[]);
    for port in [vport, d.port] {
        let mut c = Client::connect(port);
        for u in ["/size/100?max_age=60", "/size/100?max_age=60", "/size/7", "/size/2000?chunked=1"] {
            assert_eq!(c.get(u, "").status, 200);
        }
    }
    let theirs: serde_json::Value = wait_for(10, "varnishstat", || {
        let o = std::process::Command::new("varnishstat").arg("-n").arg(&vdir).args(["-j", "-f", "VBE.*"]).output().ok()?;
        serde_json::from_slice(&o.stdout).ok()
    });
    let theirs = theirs["counters"].as_object().unwrap().clone();
    let ours = stat_counters(d.dir.to_str().unwrap(), "VBE.*");
    let shape = |m: &serde_json::Map<String, serde_json::Value>| -> Vec<String> {
        m.iter().map(|(k, v)| format!("{k} {} {} {}", v["flag"], v["format"], v["description"])).collect()
    };
    assert_eq!(shape(&ours), shape(&theirs), "names, kinds, formats and descriptions as varnishstat's");
    for f in ["req", "beresp_bodybytes", "conn", "fail", "unhealthy", "busy"] {
        let n = format!("VBE.boot.default.{f}");
        assert_eq!(value(&ours, &n), value(&theirs, &n), "{n}");
    }
}

/// A port that accepts no more connections: a listener with a backlog of
/// one whose queue is full, so the kernel drops further SYNs and a connect
/// hangs until its timeout (loopback's stand-in for an unreachable host).
fn black_hole() -> (u16, Vec<std::net::TcpStream>, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor we own; the address is a
    // zeroed sockaddr_in filled in for 127.0.0.1:0.
    let (fd, port) = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, &sa as *const _ as *const libc::sockaddr, len), 0);
        assert_eq!(libc::listen(fd, 0), 0);
        let mut got: libc::sockaddr_in = std::mem::zeroed();
        let mut glen = len;
        assert_eq!(libc::getsockname(fd, &mut got as *mut _ as *mut libc::sockaddr, &mut glen), 0);
        (std::os::fd::OwnedFd::from_raw_fd(fd), u16::from_be(got.sin_port))
    };
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(s) => fillers.push(s),
            Err(_) => return (port, fillers, fd),
        }
    }
    panic!("the listen queue never filled");
}

#[test]
fn unreachable_refusing_and_failing_origins() {
    let origin = Origin::start();
    let (hole, _fillers, _fd) = black_hole();
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl(
        tmp.path(),
        &format!(
            r#"vcl 4.1;
backend default {{ .host = "127.0.0.1"; .port = "{}"; }}
backend hole {{ .host = "127.0.0.1"; .port = "{hole}"; .connect_timeout = 1s; }}
backend refused {{ .host = "127.0.0.1"; .port = "{refused}"; }}
sub vcl_recv {{
    if (req.url ~ "to=hole") {{ set req.backend_hint = hole; return (pass); }}
    if (req.url ~ "to=refused") {{ set req.backend_hint = refused; return (pass); }}
}}
sub vcl_backend_fetch {{
    # The same object, but the origin answers 500 this time.
    if (bereq.http.X-Break) {{
        set bereq.url = bereq.url + "&status=500";
        unset bereq.http.If-None-Match;
        unset bereq.http.If-Modified-Since;
    }}
}}
"#,
            origin.port
        ),
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", &f, "-p", "default_grace=0", "-p", "default_keep=60"]);
    let ds = d.dir.to_str().unwrap().to_string();
    let one = |name: &str| value(&stat_counters(&ds, name), name);
    // A connect that never completes: 503 at the backend's connect_timeout.
    let t = Instant::now();
    assert_eq!(Client::connect(d.port).get("/size/1?to=hole", "").status, 503);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_millis(2500), "connect timeout: {took:?}");
    assert_eq!((one("VBE.boot.hole.fail"), one("VBE.boot.hole.fail_etimedout")), (1, 1));
    // Refused: 503 at once.
    let t = Instant::now();
    assert_eq!(Client::connect(d.port).get("/size/1?to=refused", "").status, 503);
    assert!(t.elapsed() < Duration::from_millis(900));
    assert_eq!(one("VBE.boot.refused.fail_econnrefused"), 1);
    assert!(one("MAIN.backend_fail") >= 2);
    // 500s: passed on when nothing is stale; when a stale copy is kept,
    // that instead (stale_if_error).
    let mut c = Client::connect(d.port);
    assert_eq!(c.get("/size/30?x=1", "X-Break: 1\r\n").status, 500);
    let url = "/size/20?max_age=1";
    assert_eq!(c.get(url, "").status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    let r = c.get(url, "X-Break: 1\r\n");
    assert_eq!((r.status, r.body.len()), (200, 20), "{r:?}");
    assert!(stdout(&run("cache-log", &["-d", "-n", &ds])).contains("stale_if_error"));
    // Nothing hung: the daemon still serves.
    assert_eq!(Client::connect(d.port).get("/size/3", "").status, 200);
}

#[test]
fn probes_move_director_traffic_to_the_healthy_member() {
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (pa, pb) = (free(), free());
    let a = Origin::start_at(&format!("127.0.0.1:{pa}"));
    let b = Origin::start_at(&format!("127.0.0.1:{pb}"));
    let tmp = tempfile::tempdir().unwrap();
    let f = vcl(
        tmp.path(),
        &format!(
            r#"vcl 4.1;
import directors;
probe p {{ .url = "/size/1"; .interval = 100ms; .timeout = 500ms; .window = 3; .threshold = 2; .initial = 3; }}
backend a {{ .host = "127.0.0.1"; .port = "{pa}"; .probe = p; }}
backend b {{ .host = "127.0.0.1"; .port = "{pb}"; .probe = p; }}
sub vcl_init {{
    new fb = directors.fallback();
    fb.add_backend(a);
    fb.add_backend(b);
    new rr = directors.round_robin();
    rr.add_backend(a);
    rr.add_backend(b);
}}
sub vcl_recv {{
    if (req.url ~ "via=fb") {{ set req.backend_hint = fb.backend(); }} else {{ set req.backend_hint = rr.backend(); }}
    return (pass);
}}
sub vcl_backend_response {{ set beresp.http.X-Be = beresp.backend.name; }}
"#
        ),
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", &f]);
    let ds = d.dir.to_str().unwrap().to_string();
    let mut c = Client::connect(d.port);
    // Which backend answered each of n requests.
    let send = |c: &mut Client, url: &str, n: usize| -> Vec<String> {
        (0..n)
            .map(|_| {
                let r = c.get(url, "");
                assert_eq!(r.status, 200, "{url}");
                r.header("x-be").unwrap_or_default().to_string()
            })
            .collect()
    };
    assert_eq!(send(&mut c, "/size/1?via=fb", 3), ["a", "a", "a"], "fallback: the first");
    let rr = send(&mut c, "/size/1?via=rr", 4);
    assert_eq!(rr.iter().filter(|b| *b == "a").count(), 2, "round robin alternates: {rr:?}");
    // a dies: the probes take it out, and both directors send to b.
    drop(a);
    let health = || stdout(&run("cache-adm", &["-n", &ds, "backend.list"]));
    wait_for(10, "a to go sick", || health().lines().any(|l| l.starts_with("boot.a ") && l.contains("sick")).then_some(()));
    assert_eq!(send(&mut c, "/size/1?via=fb", 3), ["b", "b", "b"]);
    assert_eq!(send(&mut c, "/size/1?via=rr", 3), ["b", "b", "b"]);
    // a comes back: the fallback returns to it (not sticky), the round
    // robin uses both again.
    let _a = Origin::start_at(&format!("127.0.0.1:{pa}"));
    wait_for(10, "a to come back", || health().lines().any(|l| l.starts_with("boot.a ") && l.contains("healthy")).then_some(()));
    assert_eq!(send(&mut c, "/size/1?via=fb", 3), ["a", "a", "a"]);
    let rr = send(&mut c, "/size/1?via=rr", 4);
    assert_eq!(rr.iter().filter(|b| *b == "a").count(), 2, "{rr:?}");
    drop(b);
}

#[test]
fn hash_and_shard_directors_map_keys_as_varnishd() {
    if !have("varnishd") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let vcl = tmp.path().join("directors.vcl");
    let mut src = String::from("vcl 4.1;\nimport directors;\n");
    for i in 1..=4 {
        src += &format!("backend b{i} {{ .host = \"127.0.0.1\"; .port = \"{}\"; }}\n", 9000 + i);
    }
    src += "sub vcl_init {\n\tnew h = directors.hash();\n\tnew s = directors.shard();\n";
    for i in 1..=4 {
        src += &format!("\th.add_backend(b{i}, 1.0);\n\ts.add_backend(b{i});\n");
    }
    src += "\ts.reconfigure();\n}\n\
            sub vcl_recv {\n\
            \tif (req.url ~ \"^/h/\") { set req.backend_hint = h.backend(req.url); }\n\
            \telse { set req.backend_hint = s.backend(by=KEY, key=s.key(req.url)); }\n\
            \treturn (synth(200));\n}\n\
            sub vcl_synth { set resp.http.x-be = req.backend_hint; }\n";
    std::fs::write(&vcl, src).unwrap();
    let d = Daemon::start_args(&tmp.path().join("c"), &["-f", vcl.to_str().unwrap()]);
    let v = Varnishd::start_vcl(&tmp.path().join("v"), &vcl);
    let (mut ours, mut theirs) = (Client::connect(d.port), Client::connect(v.port));
    let mut differ = Vec::new();
    for kind in ["h", "s"] {
        for k in 0..10_000 {
            let url = format!("/{kind}/key-{k}");
            let (a, b) = (ours.get(&url, "").header("x-be").map(str::to_string), theirs.get(&url, "").header("x-be").map(str::to_string));
            assert!(b.is_some(), "varnishd answered without x-be for {url}");
            if a != b {
                differ.push(format!("{url}: cache-d {a:?}, varnishd {b:?}"));
            }
        }
    }
    assert!(differ.is_empty(), "{} of 20,000 keys map differently, e.g.:\n{}", differ.len(), differ[..differ.len().min(10)].join("\n"));
}
