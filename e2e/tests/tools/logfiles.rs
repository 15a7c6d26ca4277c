//! Log files: golden outputs of cache-log and cache-ncsa for a recorded log
//! (tests/golden/session.vsl, in every grouping: a miss, a hit, HEAD, a pass with a cookie, a
//! 404, a POST, a range, a 400, a pipe, basic auth), checked byte for byte —
//! and, where Varnish is installed, against varnishlog and varnishncsa
//! reading the same file. Then -w/-a/-r against a live daemon.

use std::path::{Path, PathBuf};

use crate::util::*;

/// Every varnishncsa format letter (and every %{...}t and %{...}T form).
const LETTERS: &str = "%b %D %H %h %I %{Referer}i %l %m %{Content-Type}o %O %q %r %s %t %{%d/%b/%Y %T}t %T %{us}T %{ms}T %{s}T %U %u \
%{Varnish:time_firstbyte}x %{Varnish:hitmiss}x %{Varnish:handling}x %{Varnish:side}x %{Varnish:vxid}x \
%{sec}t %{msec}t %{usec}t %{msec_frac}t %{usec_frac}t \
%{VSL:Begin}x %{VSL:Timestamp:Resp[2]}x %{VSL:ReqHeader:Host}x %{VSL:ReqAcct[5]}x %{VSL:RespHeader:X-Nope}x";

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

fn expect(name: &str, got: &str) {
    let want = std::fs::read_to_string(golden(name)).unwrap();
    assert!(got == want, "output differs from tests/golden/{name}:\n--- got\n{got}\n--- want\n{want}");
}

fn reference(tool: &str, args: &[&str]) -> Option<String> {
    let path = ["/usr/bin", "/usr/local/bin"].iter().map(|d| Path::new(d).join(tool)).find(|p| p.exists())?;
    let o = std::process::Command::new(path).args(args).output().unwrap();
    assert!(o.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8(o.stdout).unwrap())
}

#[test]
fn golden_outputs_match_byte_for_byte() {
    let log = golden("session.vsl");
    let log = log.to_str().unwrap();
    for g in ["raw", "vxid", "request", "session"] {
        let ours = stdout(&run("cache-log", &["-r", log, "-g", g]));
        expect(&format!("log-{g}.txt"), &ours);
        if let Some(theirs) = reference("varnishlog", &["-r", log, "-g", g]) {
            assert!(ours == theirs, "cache-log -g {g} and varnishlog disagree on the same file");
        }
    }
    let ours = stdout(&run("cache-ncsa", &["-r", log]));
    expect("ncsa-default.txt", &ours);
    if let Some(theirs) = reference("varnishncsa", &["-r", log]) {
        assert_eq!(ours, theirs, "the default format");
    }
    let ours = stdout(&run("cache-ncsa", &["-F", LETTERS, "-r", log]));
    expect("ncsa-letters.txt", &ours);
    if let Some(theirs) = reference("varnishncsa", &["-F", LETTERS, "-r", log]) {
        assert_eq!(ours, theirs, "every format letter");
    }
    // Sides and grouping, as varnishncsa chooses them.
    for extra in [&["-b"][..], &["-b", "-c"], &["-g", "request"], &["-g", "request", "-b"]] {
        let mut a = vec!["-F", LETTERS, "-r", log];
        a.extend_from_slice(extra);
        let ours = stdout(&run("cache-ncsa", &a));
        assert!(!ours.is_empty(), "{extra:?}");
        if let Some(theirs) = reference("varnishncsa", &a) {
            assert_eq!(ours, theirs, "{extra:?}");
        }
    }
    let b = stdout(&run("cache-ncsa", &["-b", "-F", "%{Varnish:side}x %s %h", "-r", log]));
    // Seven backend transactions (the pipe's has no status).
    assert!(b.lines().all(|l| l.starts_with("b ")) && b.lines().count() == 7, "{b}");
    // Queries work on files too.
    let q = stdout(&run("cache-ncsa", &["-F", "%s %U", "-q", "RespStatus >= 400", "-r", log]));
    assert_eq!(q, "404 /size/3\n400 /\n");
}

#[test]
fn write_append_and_read_back() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = d.dir.to_str().unwrap();
    let mut c = Client::connect(d.port);
    for u in ["/size/1", "/size/2?status=404", "/size/1"] {
        c.get(u, "");
    }
    // A transaction's records reach the log just after its response has
    // gone out: wait for the third before capturing (on a busy machine
    // the capture could otherwise miss it while a later read sees it).
    wait_for(10, "the three requests in the log", || {
        let raw = stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "ReqAcct", "-n", ds]));
        (raw.lines().count() >= 3).then_some(())
    });
    let f = tmp.path().join("cap.vsl");
    let fs = f.to_str().unwrap();
    let o = run("cache-log", &["-d", "-w", fs, "-n", ds]);
    assert!(o.status.success() && stdout(&o).is_empty(), "-w writes the file, not stdout: {}", stderr(&o));
    assert_eq!(stdout(&run("cache-log", &["-r", fs, "-g", "request"])), stdout(&run("cache-log", &["-d", "-g", "request", "-n", ds])));
    let live = stdout(&run("cache-ncsa", &["-d", "-n", ds]));
    assert_eq!(stdout(&run("cache-ncsa", &["-r", fs])), live);
    // -a appends; without it the file starts over.
    run("cache-log", &["-d", "-w", fs, "-a", "-n", ds]);
    assert_eq!(stdout(&run("cache-ncsa", &["-r", fs])), format!("{live}{live}"));
    run("cache-log", &["-d", "-w", fs, "-n", ds]);
    assert_eq!(stdout(&run("cache-ncsa", &["-r", fs])), live);
    // Only what the query selects is written.
    run("cache-log", &["-d", "-w", fs, "-q", "RespStatus == 404", "-n", ds]);
    assert_eq!(stdout(&run("cache-ncsa", &["-F", "%U", "-r", fs])), "/size/2\n");
    // Not a log file: a clear error, exit 2.
    std::fs::write(&f, "hello").unwrap();
    let o = run("cache-log", &["-r", fs]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a log file"), "{}", stderr(&o));
}

/// Lines in a file (0 if it does not exist).
fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p).map(|t| t.lines().map(str::to_string).collect()).unwrap_or_default()
}

#[test]
fn no_line_lost_under_load_and_across_a_rotation() {
    if !have("wrk") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = d.dir.to_str().unwrap().to_string();
    let url = format!("http://127.0.0.1:{}/size/100?max_age=600", d.port);
    let mut c = Client::connect(d.port);
    c.get("/size/100?max_age=600", "");
    let log = tmp.path().join("access.log");
    let rotated = tmp.path().join("access.log.1");
    let mut ncsa = Follower::start("cache-ncsa", &["-n", &ds, "-w", log.to_str().unwrap(), "-F", "%s %b %U"]);
    // Attached once a marker request shows in the file (a live reader
    // starts at the tail, so markers go out until one is seen).
    wait_for(10, "cache-ncsa to attach", || {
        c.get("/size/1?marker", "");
        std::thread::sleep(std::time::Duration::from_millis(100));
        lines(&log).iter().any(|l| l == "200 1 /size/1").then_some(())
    });
    let before = counter(&stat(&d.dir), "MAIN.client_req").unwrap();
    // Load in 3 s rounds of wrk until at least 50,000 requests went through;
    // the file is renamed and cache-ncsa sent SIGHUP during the second one.
    let (pid, log2, rot2) = (ncsa.child.id() as i32, log.clone(), rotated.clone());
    let rotate = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(4500));
        std::fs::rename(&log2, &rot2).unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGHUP) };
    });
    let mut sent = 0;
    for _ in 0..20 {
        let o = std::process::Command::new("wrk").args(["-t2", "-c16", "-d3s", &url]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        sent = counter(&stat(&d.dir), "MAIN.client_req").unwrap() - before;
        if sent >= 50_000 && rotate.is_finished() {
            break;
        }
    }
    rotate.join().unwrap();
    // Requests wrk wrote just before it exited may still be in the
    // socket buffers, counted once cache-d reads them: the count is
    // taken again once it stops moving.
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = counter(&stat(&d.dir), "MAIN.client_req").unwrap() - before;
        if now == sent {
            break;
        }
        sent = now;
    }
    assert!(sent >= 50_000, "only {sent} requests");
    // Exactly one line per request, across the two files, each a whole
    // line with the right status and byte count.
    let load_lines = || lines(&rotated).iter().chain(&lines(&log)).filter(|l| *l == "200 100 /size/100").count() as u64;
    wait_for(30, "every line", || (load_lines() >= sent).then_some(()));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (a, b) = (lines(&rotated), lines(&log));
    assert!(a.len() > 1 && !b.is_empty(), "both files hold lines ({} + {})", a.len(), b.len());
    let (load, other): (Vec<&String>, Vec<&String>) = a.iter().chain(&b).partition(|l| *l == "200 100 /size/100");
    assert_eq!(load.len() as u64, sent, "one line per request, each with its status and byte count");
    assert!(other.iter().all(|l| *l == "200 1 /size/1"), "only the markers besides: {other:?}");
    assert!(!ncsa.has_line(false, |l| l.contains("overrun")), "{:?}", ncsa.err);
}

#[test]
fn json_lines_and_presets() {
    let log = golden("session.vsl");
    let log = log.to_str().unwrap();
    let text = stdout(&run("cache-ncsa", &["-j", "-r", log]));
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    assert_eq!(rows.len(), 10);
    assert_eq!(rows[0]["status"], 200);
    assert_eq!(rows[0]["bytes"], 10);
    assert_eq!(rows[1]["req_referer"], "http://example.com/start");
    assert_eq!(rows[1]["user"], "alice");
    assert!(rows[0]["req_referer"].is_null());
    assert!(rows[0]["time"].as_str().is_some_and(|t| t.starts_with("2026-") && t.contains('T')));
    let rich = stdout(&run("cache-ncsa", &["--format-preset", "json", "-r", log]));
    let first: serde_json::Value = serde_json::from_str(rich.lines().next().unwrap()).unwrap();
    for k in ["host", "request", "status", "bytes", "duration_us", "hitmiss", "handling", "time_firstbyte", "vxid", "method", "url"] {
        assert!(first.get(k).is_some(), "{k} in {first}");
    }
    // A header value with quotes and control characters stays valid JSON.
    assert!(text.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    let common = stdout(&run("cache-ncsa", &["--format-preset", "common", "-r", log]));
    assert!(common.lines().next().unwrap().ends_with("\"GET http://127.0.0.1:18081/size/10?max_age=60 HTTP/1.1\" 200 10"), "{common}");
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), "%s %U\n").unwrap();
    assert_eq!(stdout(&run("cache-ncsa", &["-f", f.path().to_str().unwrap(), "-r", log])).lines().next(), Some("200 /size/10"));
    assert_eq!(run("cache-ncsa", &["--format-preset", "nope", "-r", log]).status.code(), Some(2));
}

#[test]
fn record_and_transaction_selection_as_varnishlog() {
    let log = golden("session.vsl");
    let log = log.to_str().unwrap();
    let cases: &[&[&str]] = &[
        &["-b"],
        &["-c"],
        &["-c", "-g", "session"],
        &["-k", "2"],
        &["-v"],
        &["-v", "-g", "request"],
        &["-I", "ReqURL:size/3"],
        &["-X", "ReqHeader:curl"],
        &["-I", "ReqHeader:Host", "-i", "ReqHeader"],
        &["-X", "ReqHeader:curl", "-i", "ReqHeader"],
        &["-i", "Req*", "-x", "ReqHeader"],
        &["-x", "Timestamp,VCL_*"],
        &["-I", "size/3"],
    ];
    for args in cases {
        let mut a = vec!["-r", log];
        a.extend_from_slice(args);
        let ours = stdout(&run("cache-log", &a));
        assert!(!ours.is_empty(), "{args:?}");
        if let Some(theirs) = reference("varnishlog", &a) {
            assert!(ours == theirs, "cache-log {args:?} differs from varnishlog");
        }
    }
    // Without the reference at hand, the essentials.
    let b = stdout(&run("cache-log", &["-r", log, "-b"]));
    assert!(b.contains("<< BeReq") && !b.contains("<< Request") && !b.contains("<< Session"));
    let k = stdout(&run("cache-log", &["-r", log, "-k", "2"]));
    assert_eq!(k.matches("<< ").count(), 2);
    let i = stdout(&run("cache-log", &["-r", log, "-I", "ReqURL:size/3"]));
    assert_eq!(i.lines().filter(|l| l.starts_with('-')).collect::<Vec<_>>(), ["-   ReqURL         /size/3?status=404"]);
    // --json: one object per transaction.
    let j = stdout(&run("cache-log", &["-r", log, "-g", "request", "--json"]));
    let objs: Vec<serde_json::Value> = j.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(objs.iter().any(|o| o["type"] == "Request" && o["level"] == 1));
    assert!(objs.iter().any(|o| o["type"] == "BeReq" && o["level"] == 2 && o["records"][0]["tag"] == "Begin"));
    assert!(objs.iter().all(|o| o["records"].as_array().is_some_and(|r| !r.is_empty())));
}

#[test]
fn default_lines_match_varnishncsa_on_the_same_traffic() {
    if !have("varnishd") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let v = Varnishd::start(&tmp.path().join("v"), &format!("127.0.0.1:{}", origin.port));
    let (vport, vdir) = (v.port, v.dir.clone());
    let d = Daemon::start(&tmp.path().join("c"), &format!("127.0.0.1:{}", origin.port), &[]);
    // The same requests to both: misses, hits, a pass, a 404, a POST,
    // a range, HEAD, odd headers.
    let requests: &[(&str, &str, &str)] = &[
        ("GET", "/size/10?max_age=60", ""),
        ("GET", "/size/10?max_age=60", "Referer: http://example.com/a\r\nUser-Agent: Mozilla/5.0 \"quoted\"\r\n"),
        ("HEAD", "/size/10?max_age=60", ""),
        ("GET", "/size/5", "Cookie: s=1\r\n"),
        ("GET", "/size/3?status=404", ""),
        ("GET", "/size/10?max_age=60", "Range: bytes=2-5\r\n"),
        ("GET", "/size/7", "Authorization: Basic Ym9iOnNlY3JldA==\r\n"),
    ];
    for port in [vport, d.port] {
        let mut c = Client::connect(port);
        for (m, u, h) in requests {
            c.send_raw(format!("{m} {u} HTTP/1.1\r\nHost: 127.0.0.1\r\n{h}\r\n").as_bytes());
            c.read_response(*m == "HEAD").expect("a response");
        }
        let mut c = Client::connect(port);
        c.send_raw(b"POST /size/2 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello");
        c.read_response(false).expect("a response");
    }
    let theirs = wait_for(10, "varnishncsa's lines", || {
        let o = std::process::Command::new("varnishncsa").arg("-d").arg("-n").arg(&vdir).output().ok()?;
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        (t.lines().count() == 8).then_some(t)
    });
    let ours = stdout(&run("cache-ncsa", &["-d", "-n", d.dir.to_str().unwrap()]));
    // Field by field, without the time: host ident user "request" status
    // bytes "referer" "user-agent".
    let fields = |line: &str| -> Vec<String> {
        let (head, rest) = line.split_once(" [").unwrap();
        let (_, rest) = rest.split_once("] ").unwrap();
        let mut out: Vec<String> = head.split(' ').map(str::to_string).collect();
        out.push(rest.to_string());
        out
    };
    // The order may differ: varnishd can commit a keep-alive connection's
    // request to its log after a later request on another connection.
    let (mut t, mut o): (Vec<_>, Vec<_>) = (theirs.lines().map(fields).collect(), ours.lines().map(fields).collect());
    t.sort();
    o.sort();
    assert_eq!(t.len(), 8, "{theirs}");
    assert_eq!(o, t, "cache-ncsa:\n{ours}\nvarnishncsa:\n{theirs}");
}

#[test]
fn cache_log_in_the_background_rotates_its_file() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let (f, rotated, pid) = (tmp.path().join("cap.vsl"), tmp.path().join("cap.vsl.1"), tmp.path().join("cache-log.pid"));
    let o = run("cache-log", &["-D", "-P", pid.to_str().unwrap(), "-w", f.to_str().unwrap(), "-n", d.dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p: i32 = wait_for(10, "the pid file", || std::fs::read_to_string(&pid).ok()?.trim().parse().ok());
    let requests = |f: &Path| stdout(&run("cache-ncsa", &["-F", "%U", "-r", f.to_str().unwrap()]));
    let mut c = Client::connect(d.port);
    // Live readers start at the tail: wait until a request shows up.
    wait_for(10, "cache-log to attach", || {
        c.get("/size/1?first", "");
        std::thread::sleep(std::time::Duration::from_millis(200));
        requests(&f).contains("/size/1").then_some(())
    });
    std::fs::rename(&f, &rotated).unwrap();
    // SAFETY: signalling the cache-log we started.
    unsafe { libc::kill(p, libc::SIGHUP) };
    c.get("/size/2?second", "");
    wait_for(10, "the new file", || requests(&f).contains("/size/2").then_some(()));
    unsafe { libc::kill(p, libc::SIGTERM) };
    wait_for(10, "the pid file to go", || (!pid.exists()).then_some(()));
    assert!(!requests(&rotated).contains("/size/2") && requests(&rotated).contains("/size/1"));
    assert!(!requests(&f).contains("/size/1"));
}

#[test]
fn restarts_log_linked_transactions_as_varnish_7() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let vcl = vcl_src(
        tmp.path(),
        "restart.vcl",
        r#"vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "ORIGIN_PORT"; }
sub vcl_recv { if (req.restarts == 0 && req.url ~ "^/r") { set req.url = "/size/3"; return (restart); } }
"#,
        origin.port,
    );
    let d = Daemon::start_args(&tmp.path().join("i"), &["-f", vcl.to_str().unwrap()]);
    let ds = d.dir.to_str().unwrap();
    // One connection each, closed, so both sessions are complete.
    assert_eq!(Client::connect(d.port).get("/r1", "").status, 200);
    Client::connect(d.port).get("/size/1", "");
    wait_for(10, "both sessions to close", || {
        (stdout(&run("cache-log", &["-d", "-g", "raw", "-i", "SessClose", "-n", ds])).lines().count() == 2).then_some(())
    });
    let f = tmp.path().join("cap.vsl");
    let fs = f.to_str().unwrap();
    run("cache-log", &["-d", "-w", fs, "-n", ds]);
    // The restart ends the first transaction with a link to a new one,
    // which begins "req <first> restart"; -g request shows both at level 1.
    let grouped = stdout(&run("cache-log", &["-r", fs, "-g", "request", "-i", "Begin,Link"]));
    let first = grouped.lines().position(|l| l.contains("Link") && l.ends_with("restart")).expect(&grouped);
    let link = grouped.lines().nth(first).unwrap().to_string();
    let new: u32 = link.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(grouped.contains(&format!("*   << Request  >> {new}")), "the restart at level 1:\n{grouped}");
    assert!(grouped.lines().any(|l| l.contains("Begin") && l.ends_with("restart")), "{grouped}");
    // The same text as varnishlog and varnishncsa give for this file.
    for (tool, ours, args) in [
        ("varnishlog", "cache-log", &["-g", "request", "-r", fs][..]),
        ("varnishlog", "cache-log", &["-g", "session", "-r", fs][..]),
        ("varnishncsa", "cache-ncsa", &["-r", fs][..]),
    ] {
        if let Some(want) = reference(tool, args) {
            assert_eq!(stdout(&run(ours, args)), want, "{ours} {args:?} differs from {tool}");
        }
    }
}
