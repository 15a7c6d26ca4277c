//! cache-stat against a real cache-d: -j against its published schema,
//! Prometheus exposition parsed back (one-shot and served), the repeating
//! listing when stdout is not a terminal, and the interactive screen driven
//! in tmux under load.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::util::*;

fn schema() -> serde_json::Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cache-stat/schema/cache-stat-j.schema.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn json_follows_its_schema() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let mut c = Client::connect(d.port);
    for _ in 0..3 {
        c.get("/size/10?max_age=60", "");
    }
    let schema = jsonschema::JSONSchema::compile(&schema()).expect("the schema compiles");
    for args in [vec!["-j"], vec!["-j", "-f", "MAIN.cache_*", "-f", "^MAIN.cache_hit_grace"]] {
        let mut a = args.clone();
        a.extend(["-n", d.dir.to_str().unwrap()]);
        let o = run("cache-stat", &a);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if let Err(errors) = schema.validate(&v) {
            let e: Vec<String> = errors.map(|e| format!("{e} at {}", e.instance_path)).collect();
            panic!("cache-stat {args:?} does not follow its schema: {e:?}");
        }
        assert_eq!(v["counters"]["MAIN.cache_hit"]["value"], 2);
    }
    // And the schema is not a rubber stamp.
    let bad = serde_json::json!({"version": 1, "timestamp": "now", "counters": {"MAIN.x": {"value": -1}}});
    assert!(!schema.is_valid(&bad));
}

pub(crate) fn scrape(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("valid exposition")
}

fn sample<'a>(s: &'a prometheus_parse::Scrape, name: &str, label: Option<(&str, &str)>) -> Option<&'a prometheus_parse::Sample> {
    s.samples.iter().find(|x| x.metric == name && label.is_none_or(|(k, v)| x.labels.get(k) == Some(v)))
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

#[test]
fn prometheus_exposition_parses_back() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("i");
    let mut d = Daemon::start(&dir, &format!("127.0.0.1:{}", origin.port), &[]);
    let ds = d.dir.to_str().unwrap().to_string();
    let mut c = Client::connect(d.port);
    for _ in 0..5 {
        c.get("/size/10?max_age=60", "");
    }
    let text = stdout(&run("cache-stat", &["--prometheus", "-n", &ds]));
    let s = scrape(&text);
    let up = sample(&s, "varnish_up", None).expect("varnish_up");
    assert!(matches!(up.value, prometheus_parse::Value::Gauge(v) if v == 1.0));
    match &sample(&s, "varnish_main_client_req", None).expect("client_req").value {
        prometheus_parse::Value::Counter(v) => assert_eq!(*v, 5.0),
        other => panic!("client_req is a counter: {other:?}"),
    }
    assert!(matches!(sample(&s, "varnish_main_cache_hit", None).unwrap().value, prometheus_parse::Value::Counter(v) if v == 4.0));
    assert!(matches!(sample(&s, "varnish_main_n_object", None).unwrap().value, prometheus_parse::Value::Gauge(v) if v == 1.0));
    assert!(sample(&s, "varnish_backend_req", None).is_some(), "MAIN.backend_req in the exporter's backend group");
    assert!(sample(&s, "varnish_sma_g_bytes", Some(("ident", "s0"))).is_some(), "{text}");
    assert!(s.docs.get("varnish_main_client_req").is_some_and(|d| !d.is_empty()));
    // Served: every scrape reads afresh; a stopped daemon is varnish_up 0.
    let mut f = Follower::start("cache-stat", &["--listen", "127.0.0.1:0", "-n", &ds]);
    f.wait_line(10, false, "the listen address", |l| l.contains("/metrics"));
    let addr = f.err.iter().find_map(|l| l.split("http://").nth(1)).and_then(|a| a.strip_suffix("/metrics")).unwrap().to_string();
    let (status, body) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        matches!(sample(&scrape(&body), "varnish_main_client_req", None).unwrap().value, prometheus_parse::Value::Counter(v) if v == 5.0)
    );
    c.get("/size/10?max_age=60", "");
    let (_, body) = http_get(&addr, "/metrics");
    assert!(
        matches!(sample(&scrape(&body), "varnish_main_client_req", None).unwrap().value, prometheus_parse::Value::Counter(v) if v == 6.0)
    );
    assert_eq!(http_get(&addr, "/other").0, 404);
    d.stop();
    let (_, body) = http_get(&addr, "/metrics");
    let s = scrape(&body);
    assert!(matches!(sample(&s, "varnish_up", None).unwrap().value, prometheus_parse::Value::Gauge(v) if v == 0.0), "{body}");
    assert!(sample(&s, "varnish_main_client_req", None).is_none());
}

#[test]
fn without_a_terminal_the_listing_repeats() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let mut f = Follower::start("cache-stat", &["-w", "0.2", "-f", "MAIN.client_req", "-n", d.dir.to_str().unwrap()]);
    f.wait_line(10, true, "a first reading", |l| l.starts_with("MAIN.client_req") && l.split_whitespace().nth(1) == Some("0"));
    Client::connect(d.port).get("/size/1", "");
    f.wait_line(10, true, "a later reading", |l| l.starts_with("MAIN.client_req") && l.split_whitespace().nth(1) == Some("1"));
    assert!(f.out.iter().all(|l| l.is_empty() || l.starts_with("MAIN.client_req")), "{:?}", f.out);
    // A bad interval is a usage error.
    assert_eq!(run("cache-stat", &["-w", "0"]).status.code(), Some(2));
}

#[test]
fn interactive_screen_in_tmux_under_load() {
    if !have("tmux") {
        return;
    }
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let (port, st) = (d.port, stop.clone());
    let load = std::thread::spawn(move || {
        let mut c = Client::connect(port);
        let mut n = 0u64;
        while !st.load(Ordering::Relaxed) {
            c.send_raw(format!("GET /size/100?max_age=60&k={} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", n % 20).as_bytes());
            if c.read_response(false).is_none() {
                eprintln!("load: no response to request {n}");
                c = Client::connect(port);
            }
            n += 1;
        }
    });
    let cmd = format!("{} -n {}; echo cache-stat exited $?; sleep 60", bin("cache-stat").display(), d.dir.display());
    let t = Tmux::start(tmp.path(), "ckstat", 120, 40, &cmd);
    let screen = || t.screen();
    let rate = |s: &str, name: &str| -> Option<f64> {
        s.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().nth(2)).and_then(|r| r.parse().ok())
    };
    let s = wait_for(15, "a non-zero req/s and a hit rate", || {
        let s = screen();
        let hit = s
            .lines()
            .find_map(|l| l.split_once("avg(n):"))
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok());
        (rate(&s, "MAIN.client_req").is_some_and(|r| r > 0.0) && hit.is_some_and(|h| h > 0.5)).then_some(s)
    });
    assert!(s.contains("Uptime child:") && s.contains("Hitrate n:"), "{s}");
    // The filter.
    t.keys(&["/", "cache_hit$", "Enter"]);
    let s = wait_for(10, "the filtered table", || {
        let s = screen();
        (s.contains("filter: cache_hit$") && s.lines().any(|l| l.starts_with("MAIN.cache_hit "))).then_some(s)
    });
    assert!(!s.lines().any(|l| l.starts_with("MAIN.client_req")), "{s}");
    // The charts pane.
    t.keys(&["g"]);
    wait_for(10, "the charts", || screen().contains("client req/s").then_some(()));
    // q quits and the terminal comes back: the shell's line on the normal
    // screen, the alternate screen off.
    t.keys(&["q"]);
    wait_for(10, "cache-stat to exit", || screen().contains("cache-stat exited 0").then_some(()));
    let alt = String::from_utf8_lossy(&t.run(&["display-message", "-p", "-t", &t.session, "#{alternate_on}"]).stdout).trim().to_string();
    assert_eq!(alt, "0", "the alternate screen was left");
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    // Closing the terminal under a running cache-stat ends it too (it
    // must not spin on a hung-up terminal).
    let t2 = Tmux::start(tmp.path(), "ckstat2", 80, 24, &format!("{} -n {}", bin("cache-stat").display(), d.dir.display()));
    wait_for(10, "the second screen", || t2.screen().contains("Hitrate n:").then_some(()));
    let mine = |pid: &str| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            c.contains("cache-stat") && c.contains(d.dir.to_str().unwrap())
        })
    };
    let alive = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| !s.contains("State:\tZ"));
    let pids: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && mine(p) && alive(p))
        .collect();
    assert!(!pids.is_empty(), "the second cache-stat is running");
    drop(t2);
    wait_for(10, "cache-stat to end with its terminal", || pids.iter().all(|p| !alive(p)).then_some(()));
}
