//! cache-bench against the built-in origin and a real cache-d: load models
//! hitting their targets, the CSV, history and JSON contracts, thresholds,
//! coordinated omission, distributed agents and plots.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::util::*;

/// `cache-bench ARGS`: (exit code, stdout, stderr).
fn bench(args: &[&str]) -> (i32, String, String) {
    let o = run("cache-bench", args);
    (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
}

fn bench_json(args: &[&str]) -> (i32, Value) {
    let (code, out, err) = bench(args);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: stdout {out:?} stderr {err:?}"));
    (code, v)
}

fn schema() -> jsonschema::JSONSchema {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cache-bench/schema/summary.schema.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::JSONSchema::compile(&v).expect("the schema compiles")
}

fn follows_schema(v: &Value) {
    let s = schema();
    if let Err(errors) = s.validate(v) {
        let e: Vec<String> = errors.map(|e| format!("{e} at {}", e.instance_path)).collect();
        panic!("the summary does not follow its schema: {e:?}\n{v:#}");
    };
}

fn csv_rows(path: &std::path::Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap().split(',').map(str::to_string).collect();
    (header, lines.map(|l| l.split(',').map(str::to_string).collect()).collect())
}

fn col(header: &[String], name: &str) -> usize {
    header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name} in {header:?}"))
}

#[test]
fn closed_loop_by_count_and_by_time_with_its_csv() {
    let origin = Origin::start();
    let url = format!("http://127.0.0.1:{}/size/100", origin.port);
    // -n: exactly that many.
    let (code, v) = bench_json(&["run", &url, "-n", "2000", "-c", "4", "-t", "1", "--json", "--expect-size", "100"]);
    assert_eq!(code, 0);
    follows_schema(&v);
    assert_eq!((v["requests"].as_u64(), v["errors"]["total"].as_u64()), (Some(2000), Some(0)));
    assert_eq!(v["mode"], "closed");
    assert!(v["bytes"].as_u64().unwrap() > 2000 * 100, "heads and bodies");
    // -d with a CSV: one row per second, adding up to the summary.
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("run.csv");
    let (code, v) = bench_json(&["run", &url, "-d", "3s", "-c", "4", "-t", "2", "--json", "--csv", csv.to_str().unwrap()]);
    assert_eq!(code, 0);
    let (h, rows) = csv_rows(&csv);
    assert_eq!(h[..6], ["second", "requests", "errors", "bytes", "hits", "misses"]);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(), ["1", "2", "3"]);
    let sum = |c: &str| rows.iter().map(|r| r[col(&h, c)].parse::<u64>().unwrap()).sum::<u64>();
    assert_eq!(sum("requests"), v["requests"].as_u64().unwrap());
    assert_eq!(sum("bytes"), v["bytes"].as_u64().unwrap());
    assert!(rows.iter().all(|r| r[col(&h, "requests")].parse::<u64>().unwrap() > 0));
    let p99 = col(&h, "p99_ms");
    assert!(rows.iter().all(|r| r[p99].parse::<f64>().unwrap() > 0.0));
    // A wrong expected size: every response is an error of that kind.
    let (_, v) = bench_json(&["run", &url, "-n", "50", "-c", "2", "--json", "--expect-size", "99"]);
    assert_eq!((v["requests"].as_u64(), v["errors"]["short_body"].as_u64()), (Some(0), Some(50)));
    // A refused connection.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (_, v) = bench_json(&["run", &format!("http://127.0.0.1:{dead}/"), "-d", "300ms", "-c", "1", "--json"]);
    assert!(v["errors"]["connect"].as_u64().unwrap() > 0);
}

#[test]
fn constant_rate_holds_its_target() {
    let origin = Origin::start();
    let url = format!("http://127.0.0.1:{}/size/100", origin.port);
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("rate.csv");
    let (code, v) = bench_json(&["run", &url, "-r", "400", "-d", "5s", "-c", "8", "-t", "1", "--json", "--csv", csv.to_str().unwrap()]);
    assert_eq!(code, 0);
    follows_schema(&v);
    let n = v["requests"].as_f64().unwrap();
    assert!((n - 2000.0).abs() <= 100.0, "400/s for 5 s gave {n} (±5%)");
    assert_eq!(v["mode"], "open");
    assert_eq!(v["open_loop"]["dropped"], 0);
    let (h, rows) = csv_rows(&csv);
    assert_eq!(rows.len(), 5);
    for r in &rows {
        let per = r[col(&h, "requests")].parse::<f64>().unwrap();
        assert!((per - 400.0).abs() <= 40.0, "a second of {per}");
    }
    // --fine-pace: the same rate, each request leaving at its own due
    // time instead of on the runtime timer's millisecond tick with the
    // others due in it, so it leaves later than due by less.
    let lag_p50 = |v: &Value| v["open_loop"]["lag_ms"]["p50"].as_f64().unwrap();
    let (code, fine) = bench_json(&["run", &url, "-r", "400", "-d", "3s", "-c", "8", "-t", "1", "--fine-pace", "--json"]);
    assert_eq!(code, 0);
    follows_schema(&fine);
    let n = fine["requests"].as_f64().unwrap();
    assert!((n - 1200.0).abs() <= 60.0, "400/s for 3 s, finely paced, gave {n} (±5%)");
    assert_eq!(fine["open_loop"]["dropped"], 0);
    assert_eq!((&fine["open_loop"]["fine_pace"], &v["open_loop"]["fine_pace"]), (&Value::Bool(true), &Value::Bool(false)));
    assert!(lag_p50(&fine) < lag_p50(&v), "lag p50: fine {} ms, on the tick {} ms", lag_p50(&fine), lag_p50(&v));
    // Stages: 0 → 400/s over 2 s then 400/s for 2 s: 400 + 800 requests.
    let (_, v) = bench_json(&["run", &url, "--stages", "2s:400,2s:400", "-c", "8", "--json"]);
    let n = v["requests"].as_f64().unwrap();
    assert!((n - 1200.0).abs() <= 60.0, "stages gave {n}");
}

#[test]
fn open_loop_sees_a_stall_that_a_closed_loop_hides() {
    let origin = Origin::start();
    let url = format!("http://127.0.0.1:{}/size/10", origin.port);
    let pause = |port: u16| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            Client::connect(port).get("/__pause?ms=1000", "");
        })
    };
    // Open loop at 200/s: requests due during the 1 s stall wait for it,
    // and their latency counts from when they were due.
    let p = pause(origin.port);
    let (_, open) = bench_json(&["run", &url, "-r", "200", "-d", "4s", "-c", "10", "-t", "1", "--json", "--timeout", "3s"]);
    p.join().unwrap();
    // Closed loop: ten requests wait out the stall, thousands do not.
    let p = pause(origin.port);
    let (_, closed) = bench_json(&["run", &url, "-d", "4s", "-c", "10", "-t", "1", "--json", "--timeout", "3s"]);
    p.join().unwrap();
    let (o99, c99) = (open["latency_ms"]["p99"].as_f64().unwrap(), closed["latency_ms"]["p99"].as_f64().unwrap());
    assert!(o99 >= 500.0, "open loop p99 {o99} ms should show the 1 s stall");
    assert!(c99 < 100.0, "closed loop p99 {c99} ms (it hides the stall)");
    assert!(closed["latency_ms"]["max"].as_f64().unwrap() >= 900.0, "the stall is there, only in max");
}

#[test]
fn against_cache_d_with_server_counters_history_and_thresholds() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let dir = d.dir.to_str().unwrap().to_string();
    let urls = tmp.path().join("urls.txt");
    std::fs::write(&urls, (0..20).map(|i| format!("/size/{}?max_age=60\n", 100 + i)).collect::<String>()).unwrap();
    let base = format!("http://127.0.0.1:{}/", d.port);
    let csv = tmp.path().join("run.csv");
    let history = tmp.path().join("history.csv");
    let args = |label: &'static str| {
        vec![
            "run".to_string(),
            base.clone(),
            "--urls".into(),
            urls.to_str().unwrap().into(),
            "--zipf".into(),
            "1.0".into(),
            "-d".into(),
            "2s".into(),
            "-c".into(),
            "4".into(),
            "--stat".into(),
            dir.clone(),
            "--csv".into(),
            csv.to_str().unwrap().into(),
            "--history".into(),
            history.to_str().unwrap().into(),
            "--label".into(),
            label.into(),
            "--json".into(),
        ]
    };
    let a: Vec<String> = args("first");
    let (code, v) = bench_json(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0);
    follows_schema(&v);
    // Hits and misses from X-Varnish: 20 objects, so at most 20 misses.
    let (hits, misses) = (v["hits"].as_u64().unwrap(), v["misses"].as_u64().unwrap());
    assert!((1..=20).contains(&misses) && hits > 100, "hits {hits} misses {misses}");
    // The server saw every request.
    let req = v["requests"].as_u64().unwrap() + v["errors"]["total"].as_u64().unwrap();
    assert_eq!(v["server"]["client_req"].as_u64(), Some(req), "{:#}", v["server"]);
    assert_eq!(v["server"]["cache_hit"].as_u64(), Some(hits));
    let (h, rows) = csv_rows(&csv);
    assert_eq!(rows.len(), 2);
    let srv: u64 = rows.iter().map(|r| r[col(&h, "srv_client_req")].parse::<u64>().unwrap()).sum();
    assert_eq!(srv, req);
    // A second run: the history has one row per run.
    let a: Vec<String> = args("second");
    assert_eq!(bench(&a.iter().map(String::as_str).collect::<Vec<_>>()).0, 0);
    let (h, rows) = csv_rows(&history);
    assert_eq!(
        h.join(","),
        "time,label,version,target,mode,conns,threads,rate,duration_s,requests,rps,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,errors,hit_rate"
    );
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0][1].as_str(), rows[1][1].as_str()), ("first", "second"));
    assert!(rows.iter().all(|r| r[col(&h, "rps")].parse::<f64>().unwrap() > 0.0));
    // Thresholds: exit 1 when one holds, 0 when none does, 2 for a bad one.
    let one = format!("http://127.0.0.1:{}/size/10?max_age=60", d.port);
    let (code, out, _) = bench(&["run", &one, "-n", "200", "-c", "2", "--fail-if", "errors>0", "--fail-if", "p99>5s"]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = bench(&["run", &one, "-n", "200", "-c", "2", "--fail-if", "rps<1000000000", "--fail-if", "errors>0"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("check rps<1000000000: FAILED"), "{out}");
    let (code, _, err) = bench(&["run", &one, "-n", "10", "--fail-if", "p99>>3"]);
    assert_eq!(code, 2, "{err}");
    // An unknown metric is refused before the run, not after it.
    let t = std::time::Instant::now();
    let (code, _, err) = bench(&["run", &one, "-d", "30s", "--fail-if", "nosuch>1"]);
    assert!(code == 2 && err.contains("no metric 'nosuch'") && t.elapsed() < Duration::from_secs(5), "{err}");
    let (code, _, err) = bench(&["run", "-n", "10"]);
    assert_eq!(code, 2, "{err}");
    // Baseline: a saved run much faster than this one is a regression.
    let (_, mut saved) = bench_json(&["run", &one, "-n", "200", "-c", "2", "--json"]);
    saved["rps"] = serde_json::json!(saved["rps"].as_f64().unwrap() * 100.0);
    let base_file = tmp.path().join("base.json");
    std::fs::write(&base_file, saved.to_string()).unwrap();
    let (code, v) = bench_json(&["run", &one, "-n", "200", "-c", "2", "--json", "--baseline", base_file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(v["passed"], false);
    assert!(v["checks"].as_array().unwrap().iter().any(|c| c["check"] == "baseline rps" && c["failed"] == true));
}

/// A `cache-bench agent` on a free loopback port.
struct Agent {
    child: std::process::Child,
    addr: String,
}

impl Agent {
    fn start(secret: &std::path::Path, out: &std::path::Path) -> Agent {
        let mut child = Command::new(bin("cache-bench"))
            .args(["agent", "--listen", "127.0.0.1:0", "--secret-file", secret.to_str().unwrap(), "--out-dir", out.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        Agent { child, addr }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn two_agents_merge_exactly_and_a_lost_one_fails_the_run() {
    let origin = Origin::start();
    let url = format!("http://127.0.0.1:{}/size/100", origin.port);
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "correct horse battery staple\n").unwrap();
    let (out1, out2) = (tmp.path().join("a1"), tmp.path().join("a2"));
    std::fs::create_dir_all(&out1).unwrap();
    std::fs::create_dir_all(&out2).unwrap();
    let (a1, a2) = (Agent::start(&secret, &out1), Agent::start(&secret, &out2));
    let agents = format!("{},{}", a1.addr, a2.addr);
    let s = secret.to_str().unwrap();
    let (code, v) = bench_json(&["run", &url, "-d", "2s", "-c", "4", "--agents", &agents, "--secret-file", s, "--json", "--label", "dist"]);
    assert_eq!(code, 0, "{v:#}");
    follows_schema(&v);
    let list = v["agents"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    for f in ["requests", "bytes", "hits", "misses"] {
        let sum: u64 = list.iter().map(|a| a[f].as_u64().unwrap()).sum();
        assert_eq!(v[f].as_u64().unwrap(), sum, "{f}: the total is the sum of the agents");
    }
    assert!(list.iter().all(|a| a["requests"].as_u64().unwrap() > 100));
    // Each agent wrote its result file; merging them offline gives the
    // same totals and the same percentiles (histograms merged, not
    // percentiles averaged).
    let files: Vec<String> = [&out1, &out2]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path().to_str().unwrap().to_string()))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut margs = vec!["merge", "--json"];
    margs.extend(files.iter().map(String::as_str));
    let (code, m) = bench_json(&margs);
    assert_eq!(code, 0);
    for f in ["requests", "bytes", "hits", "misses"] {
        assert_eq!(m[f], v[f], "{f}");
    }
    assert_eq!(m["latency_ms"], v["latency_ms"], "merged percentiles");
    // A coordinator without the secret is refused.
    let wrong = tmp.path().join("wrong");
    std::fs::write(&wrong, "not the secret at all").unwrap();
    let (code, _, err) = bench(&["run", &url, "-d", "1s", "--agents", &agents, "--secret-file", wrong.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("authentication failed"), "{err}");
    // An agent that dies mid-run fails the run, and is named.
    let mut a2 = a2;
    let coord = Command::new(bin("cache-bench"))
        .args(["run", &url, "-d", "4s", "-c", "4", "--agents", &agents, "--secret-file", s, "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let _ = a2.child.kill();
    let o = coord.wait_with_output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(err.contains(&format!("agent {} was lost", a2.addr)), "{err}");
    assert!(out.contains(&format!("check agent {}: FAILED", a2.addr)), "{out}");
}

/// Width and height of a PNG (its IHDR).
fn png_size(b: &[u8]) -> (u32, u32) {
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
    (u32::from_be_bytes([b[16], b[17], b[18], b[19]]), u32::from_be_bytes([b[20], b[21], b[22], b[23]]))
}

#[test]
fn plots_a_run_and_the_history() {
    let tmp = tempfile::tempdir().unwrap();
    // A recorded series and history (as run --csv / --history write them).
    let csv = tmp.path().join("run.csv");
    let mut text = "second,requests,errors,bytes,hits,misses,p50_ms,p90_ms,p99_ms,p999_ms,max_ms\n".to_string();
    for s in 1..=30 {
        let stall = if s == 12 { 40.0 } else { 0.0 };
        text += &format!(
            "{s},{},0,{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
            9000 + s * 50,
            900_000 + s,
            8000,
            1000,
            0.4,
            0.9,
            2.0 + stall,
            4.0 + stall,
            9.0 + stall
        );
    }
    std::fs::write(&csv, text).unwrap();
    let history = tmp.path().join("history.csv");
    let mut h =
        "time,label,version,target,mode,conns,threads,rate,duration_s,requests,rps,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,errors,hit_rate\n"
            .to_string();
    for i in 0..8 {
        h += &format!(
            "2026-11-{:02}T03:00:00Z,nightly-{i},v0.{i},http://x,closed,64,2,,10,{},{},0.4,0.9,{},4.0,9.0,0,0.9\n",
            i + 1,
            500_000 + i * 1000,
            50_000 + i * 900,
            2.0 + (i % 3) as f64
        );
    }
    std::fs::write(&history, h).unwrap();
    for (input, name) in [(&csv, "run"), (&history, "trend")] {
        let png = tmp.path().join(format!("{name}.png"));
        let svg = tmp.path().join(format!("{name}.svg"));
        for out in [&png, &svg] {
            let (code, _, err) = bench(&["plot", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--size", "900x450"]);
            assert_eq!(code, 0, "{err}");
        }
        let b = std::fs::read(&png).unwrap();
        assert_eq!(png_size(&b), (900, 450));
        assert!(b.len() > 10_000, "a real picture, not a blank: {} bytes", b.len());
        let s = std::fs::read_to_string(&svg).unwrap();
        assert!(s.contains("width=\"900\"") && s.contains("height=\"450\""), "{}", &s[..200.min(s.len())]);
        assert!(s.contains("<polyline") || s.contains("<path"), "lines drawn");
        assert!(s.contains("p99"), "a legend");
        // Keep the images where a person can look at them.
        if let Ok(dir) = std::env::var("CACHEKIT_PLOT_DIR") {
            let _ = std::fs::copy(&png, std::path::Path::new(&dir).join(format!("{name}.png")));
            let _ = std::fs::copy(&svg, std::path::Path::new(&dir).join(format!("{name}.svg")));
        }
    }
    // Not a CSV we know: a clear error.
    let junk = tmp.path().join("junk.csv");
    std::fs::write(&junk, "a,b\n1,2\n").unwrap();
    let (code, _, err) = bench(&["plot", junk.to_str().unwrap(), "-o", tmp.path().join("x.png").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("neither"), "{err}");
}

#[test]
fn request_shapes_reconnects_and_the_max_rate_search() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let dir = d.dir.to_str().unwrap().to_string();
    let sess = || counter(&stat(&d.dir), "MAIN.sess_conn").unwrap_or(0);
    // --requests-per-conn: 100 requests, 10 per connection, 10 connections.
    let s0 = sess();
    let url = format!("http://127.0.0.1:{}/size/10?max_age=60", d.port);
    let (code, v) = bench_json(&["run", &url, "-n", "100", "-c", "1", "--requests-per-conn", "10", "--json"]);
    assert_eq!((code, v["requests"].as_u64()), (0, Some(100)));
    assert_eq!(sess() - s0, 10);
    // Method, body, headers and Host reach the server as given.
    let (code, v) = bench_json(&[
        "run",
        &format!("http://127.0.0.1:{}/size/3", d.port),
        "-n",
        "3",
        "-c",
        "1",
        "-m",
        "post",
        "--body",
        "hello",
        "-H",
        "X-Test: yes",
        "--host",
        "example.test",
        "--expect-status",
        "200",
        "--json",
    ]);
    assert_eq!((code, v["requests"].as_u64(), v["errors"]["total"].as_u64()), (0, Some(3), Some(0)), "{v:#}");
    let log = stdout(&run("cache-log", &["-d", "-n", &dir, "-q", "ReqMethod eq POST"]));
    assert!(log.contains("ReqHeader      Host: example.test"), "{log}");
    assert!(log.contains("ReqHeader      X-Test: yes"), "{log}");
    assert!(log.contains("ReqHeader      Content-Length: 5"), "{log}");
    // --max-rate: bisects open-loop rates under a bound the origin meets
    // easily, so the answer is a real rate and every step is reported.
    let (code, v) = bench_json(&[
        "run",
        &format!("http://127.0.0.1:{}/size/10", origin.port),
        "--max-rate",
        "p99<200ms",
        "-d",
        "1s",
        "-c",
        "4",
        "-q",
        "--json",
    ]);
    assert_eq!(code, 0, "{v:#}");
    let max = v["max_rate"].as_f64().unwrap();
    let capacity = v["capacity_rps"].as_f64().unwrap();
    assert!(max > 0.0 && max <= capacity * 1.1, "{max} of {capacity}");
    assert_eq!(v["steps"].as_array().unwrap().len(), 7);
    assert!(v["steps"].as_array().unwrap().iter().any(|s| s["meets"] == true));
}

#[test]
fn ctrl_c_ends_a_run_early_and_still_reports() {
    let origin = Origin::start();
    let url = format!("http://127.0.0.1:{}/size/10", origin.port);
    let child =
        Command::new(bin("cache-bench")).args(["run", &url, "-d", "60s", "-c", "2", "--json"]).stdout(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t = std::time::Instant::now();
    let o = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["interrupted"], true);
    let d = v["duration_s"].as_f64().unwrap();
    assert!((0.8..5.0).contains(&d), "{d}");
    assert!(v["requests"].as_u64().unwrap() > 0);
}

/// Resident memory of a process, in kB.
fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

#[test]
fn agents_bound_what_strangers_can_cost_them() {
    use std::io::{Read, Write};
    let origin = Origin::start();
    let url = format!("http://127.0.0.1:{}/size/100", origin.port);
    let tmp = tempfile::tempdir().unwrap();
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "correct horse battery staple\n").unwrap();
    let a = Agent::start(&secret, tmp.path());
    // A connection that says nothing does not hold the agent: a
    // coordinator runs while it sits there.
    let idle = std::net::TcpStream::connect(&a.addr).unwrap();
    let s = secret.to_str().unwrap();
    let t0 = std::time::Instant::now();
    let (code, v) = bench_json(&["run", &url, "-n", "200", "-c", "2", "--agents", &a.addr, "--secret-file", s, "--json"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["requests"], 200);
    assert!(t0.elapsed() < Duration::from_secs(8), "an idle connection delayed the run: {:?}", t0.elapsed());
    // A stranger's endless line before authentication is cut at 32 MiB:
    // the agent closes the connection and does not grow with the line.
    let mut big = std::net::TcpStream::connect(&a.addr).unwrap();
    let before = rss_kb(a.child.id());
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0usize;
    while sent < 200 << 20 {
        if big.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    assert!(sent < 100 << 20, "the agent kept reading a {} MiB line", sent >> 20);
    let grew = rss_kb(a.child.id()).saturating_sub(before);
    assert!(grew < 80 * 1024, "the agent grew by {grew} kB for one stranger's line");
    // The idle one is let go after the handshake deadline.
    let mut idle = idle;
    idle.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut buf = Vec::new();
    let _ = idle.read_to_end(&mut buf);
    assert!(String::from_utf8_lossy(&buf).contains("hello"));
    assert!(t0.elapsed() < Duration::from_secs(14), "the idle connection was kept {:?}", t0.elapsed());
    // And the agent still serves.
    let (code, _) = bench_json(&["run", &url, "-n", "50", "-c", "1", "--agents", &a.addr, "--secret-file", s, "--json"]);
    assert_eq!(code, 0);
}

/// `--stat http://…/metrics`: the counters of a cache-d on "another
/// machine", read from its cache-stat exporter each second; the CSV's
/// server column adds up to what the client sent. A wrong endpoint is an
/// error before the load starts.
#[test]
fn server_counters_from_a_remote_exporter() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(&tmp.path().join("i"), &format!("127.0.0.1:{}", origin.port), &[]);
    let mut exporter = Follower::start("cache-stat", &["-n", d.dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    exporter.wait_line(10, false, "the exporter to listen", |l| l.contains("serving /metrics on"));
    let url = exporter.err.iter().find_map(|l| l.split("serving /metrics on ").nth(1)).unwrap().trim().to_string();
    let csv = tmp.path().join("remote.csv");
    let target = format!("http://127.0.0.1:{}/size/100?max_age=60", d.port);
    let (code, v) = bench_json(&["run", &target, "-d", "2s", "-c", "2", "--stat", &url, "--csv", csv.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{v:#}");
    let sent = v["requests"].as_u64().unwrap() + v["errors"]["total"].as_u64().unwrap();
    assert_eq!(v["server"]["client_req"].as_u64(), Some(sent), "{:#}", v["server"]);
    let (h, rows) = csv_rows(&csv);
    let srv: u64 = rows.iter().map(|r| r[col(&h, "srv_client_req")].parse::<u64>().unwrap()).sum();
    assert_eq!(srv, sent, "the CSV's srv_client_req adds up to the client's requests");
    // Nothing listening, and something that is not an exporter: exit 2 at once.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (code, _, err) = bench(&["run", &target, "-d", "30s", "--stat", &format!("http://127.0.0.1:{dead}/metrics")]);
    assert!(code == 2 && err.contains("cannot reach the exporter"), "{code}: {err}");
    let (code, _, err) = bench(&["run", &target, "-d", "30s", "--stat", &format!("http://127.0.0.1:{}/size/10", origin.port)]);
    assert!(code == 2 && err.contains("not a cachekit exporter"), "{code}: {err}");
}
