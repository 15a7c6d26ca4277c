//! `cache-bench run`: build the plan from the command line, run it here
//! or on agents, sample the server, write the summary, CSV and history,
//! and judge the thresholds. Exit status: 0 pass, 1 a threshold, the
//! baseline or an agent failed, 2 usage or setup error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::checks::{self, Check};
use crate::cli::RunArgs;
use crate::local::{catch_interrupts, interrupted, run_local};
use crate::plan::{self, Pick, Plan};
use crate::report::{self, Meta, ServerSecond};
use crate::stats::Recorder;

/// The plan the command line asks for.
pub fn plan_of(a: &RunArgs) -> Result<Plan> {
    let urls = match (&a.urls, &a.url) {
        (Some(f), base) => plan::read_url_file(f, base.as_deref())?,
        (None, Some(u)) => vec![u.clone()],
        (None, None) => bail!("give a URL or --urls FILE"),
    };
    let pick = match (a.zipf, a.pick.as_str()) {
        (Some(s), _) if s > 0.0 => Pick::Zipf(s),
        (Some(_), _) => bail!("--zipf takes an exponent above 0 (1.0 is typical)"),
        (None, "seq" | "sequential") => Pick::Seq,
        (None, "random") => Pick::Random,
        (None, p) => bail!("--pick {p}: seq or random (or --zipf S)"),
    };
    let stages = match &a.stages {
        Some(s) => plan::parse_stages(s)?,
        None => Vec::new(),
    };
    if a.rate.is_some() && !stages.is_empty() {
        bail!("-r and --stages do not go together: stages set the rate");
    }
    if let Some(r) = a.rate {
        if !(r > 0.0 && r.is_finite()) {
            bail!("-r must be above 0");
        }
    }
    let duration = match (&a.duration, a.requests) {
        (Some(d), _) => Some(plan::parse_duration(d)?.as_secs_f64()),
        (None, Some(_)) => None,
        (None, None) if stages.is_empty() => Some(10.0),
        (None, None) => None,
    };
    if a.requests.is_some() && (a.rate.is_some() || !stages.is_empty()) {
        bail!("-n is for the closed loop; with -r give -d");
    }
    if duration.is_some_and(|d| d <= 0.0) {
        bail!("-d must be above 0");
    }
    let conns = a.connections.max(1);
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).clamp(1, conns);
    let mut headers = Vec::new();
    for h in &a.header {
        let (n, v) = h.split_once(':').with_context(|| format!("-H '{h}': NAME: VALUE"))?;
        let n = n.trim();
        if n.is_empty() || n.contains([' ', '\r', '\n']) || v.contains(['\r', '\n']) {
            bail!("-H '{h}': a bad header");
        }
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let body = match (&a.body, &a.body_file) {
        (Some(_), Some(_)) => bail!("--body or --body-file, not both"),
        (Some(b), None) => Some(b.clone()),
        (None, Some(f)) => Some(std::fs::read_to_string(f).with_context(|| format!("cannot read {f}"))?),
        (None, None) => None,
    };
    let p = Plan {
        urls,
        pick,
        conns,
        threads,
        duration_s: duration,
        count: a.requests,
        rate: a.rate,
        stages,
        // --new-conn: every request on a connection of its own.
        requests_per_conn: if a.new_conn { Some(1) } else { a.requests_per_conn.filter(|n| *n > 0) },
        method: a.method.to_ascii_uppercase(),
        headers,
        body,
        host: a.host.clone(),
        expect_status: a.expect_status,
        expect_size: a.expect_size,
        timeout_s: plan::parse_duration(&a.timeout)?.as_secs_f64(),
        cacert: a.cacert.clone(),
        insecure: a.insecure,
        resolve: a.resolve.clone(),
        h2: a.h2,
        h3: a.h3,
        streams: a.streams,
        new_conn: a.new_conn,
        fine_pace: a.fine_pace,
        seed: a.seed.unwrap_or_else(|| std::process::id() as u64 ^ (chrono::Utc::now().timestamp_micros() as u64)),
    };
    p.target()?;
    Ok(p)
}

/// Sample the server's counters (`--stat`: a local instance or a remote
/// exporter) once a second from `start` until `stop`, as per-second
/// deltas. A sample that fails (a remote exporter slow to answer) leaves
/// that second empty; the next one carries the difference, so the
/// column's sum stays the server's count.
fn sample_server(
    mut src: crate::server::Source,
    start: Instant,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<ServerSecond>>>,
) -> Result<std::thread::JoinHandle<()>> {
    let mut last = src.read()?;
    // A start still to come (agents start together later): the baseline is
    // read again then. A start already here keeps the one just read, so a
    // sampler thread slow to run cannot miss the first requests.
    let later = start > Instant::now();
    Ok(std::thread::spawn(move || {
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        if later {
            if let Ok(now) = src.read() {
                last = now;
            }
        }
        let mut next = start + Duration::from_secs(1);
        let mut warned = false;
        loop {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            // Seen before the read, so the last read comes after the load
            // stopped: read first, a stop set just after that read would
            // have ended the loop without the requests finished meanwhile.
            let stopping = stop.load(Ordering::Acquire);
            let second = match src.read() {
                Ok(now) => {
                    let d = |i: usize| now[i].saturating_sub(last[i]);
                    let s = ServerSecond { client_req: d(0), cache_hit: d(1), cache_miss: d(2), backend_req: d(3) };
                    last = now;
                    s
                }
                Err(e) => {
                    if !warned {
                        eprintln!("cache-bench: {e:#} (the next sample makes up for it)");
                        warned = true;
                    }
                    ServerSecond::default()
                }
            };
            out.lock().unwrap_or_else(|e| e.into_inner()).push(second);
            next += Duration::from_secs(1);
            if stopping {
                break;
            }
        }
    }))
}

/// The run's duration for rates: its planned length, or the wall time
/// when it ran by count or was cut short.
fn duration_of(plan: &Plan, elapsed: f64) -> f64 {
    match plan.length_s() {
        Some(l) if !interrupted() => l,
        _ => elapsed,
    }
}

/// What a run measured, here or on agents.
struct Measured {
    rec: Recorder,
    elapsed: f64,
    agents: Vec<(String, Recorder, f64)>,
    lost: Vec<String>,
}

pub fn run(a: &RunArgs) -> Result<i32> {
    let plan = plan_of(a)?;
    catch_interrupts();
    if let Some(bound) = &a.max_rate {
        return crate::search::max_rate(&plan, bound, a);
    }
    let checks: Vec<Check> = a.fail_if.iter().map(|c| checks::parse(c)).collect::<Result<_>>()?;
    let tolerance = checks::parse_tolerance(&a.tolerance)?;
    let target = {
        let (h, p, _) = plan::split_url(&plan.urls[0])?;
        format!("{}://{h}:{p}", plan::scheme(&plan.urls[0]))
    };
    let started = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    precheck(a, &plan, &checks, tolerance, &target, &started)?;
    let server = Arc::new(Mutex::new(Vec::new()));
    let m = measure(a, &plan, &server)?;
    let meta =
        Meta { label: a.label.clone().unwrap_or_default(), target, started, duration_s: duration_of(&plan, m.elapsed), plan: plan.clone() };
    let server = a.stat.as_ref().map(|_| server_series(server.lock().unwrap_or_else(|e| e.into_inner()).clone(), m.rec.seconds.len()));
    let mut summary = report::summary(&meta, &m.rec, &m.agents, server.as_deref());
    let results = judge(a, &checks, tolerance, &summary, &m.lost)?;
    let passed = results.iter().all(|r| r["failed"] == false);
    let o = summary.as_object_mut().expect("an object");
    o.insert("checks".into(), json!(results));
    o.insert("passed".into(), json!(passed));
    if interrupted() {
        o.insert("interrupted".into(), json!(true));
    }
    if let Some(csv) = &a.csv {
        report::write_csv(csv, &m.rec, server.as_deref())?;
    }
    if let Some(h) = &a.history {
        report::append_history(h, &summary)?;
    }
    if a.json {
        report::out(&(serde_json::to_string_pretty(&summary)? + "\n"));
    } else {
        print_text(&meta, &m, server.as_deref(), &results);
    }
    for l in &m.lost {
        eprintln!("cache-bench: agent {l} was lost before it reported: the run failed");
    }
    Ok(if passed { 0 } else { 1 })
}

/// Refuse a check that names no metric, or an unreadable baseline, before
/// the run rather than after it.
fn precheck(a: &RunArgs, plan: &Plan, checks: &[Check], tolerance: f64, target: &str, started: &str) -> Result<()> {
    let meta = Meta { label: String::new(), target: target.to_string(), started: started.to_string(), duration_s: 1.0, plan: plan.clone() };
    let empty = report::summary(&meta, &Recorder::default(), &[], a.stat.as_ref().map(|_| &[][..]));
    for c in checks {
        c.judge(&empty)?;
    }
    if let Some(b) = &a.baseline {
        checks::against_baseline(b, &empty, tolerance)?;
    }
    Ok(())
}

/// Run the plan (on the agents, or here), sampling the server's counters
/// into `server` meanwhile when asked to.
fn measure(a: &RunArgs, plan: &Plan, server: &Arc<Mutex<Vec<ServerSecond>>>) -> Result<Measured> {
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let mut sampler = None;
    // Opened (and read once) before any load: a wrong --stat fails now.
    let mut source = a.stat.as_deref().map(crate::server::Source::open).transpose()?;
    let m = match &a.agents {
        Some(list) => {
            let secret = crate::dist::read_secret(a.secret_file.as_deref())?;
            let agents: Vec<String> = list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
            let (stop, srv) = (stop_sampling.clone(), server.clone());
            let mut on_start = |start: Instant| -> Result<()> {
                if let Some(src) = source.take() {
                    sampler = Some(sample_server(src, start, stop.clone(), srv.clone())?);
                }
                Ok(())
            };
            let out = crate::dist::coordinate(plan, &agents, &secret, &a.label.clone().unwrap_or_default(), a.quiet, &mut on_start)?;
            Measured { rec: out.total, elapsed: out.elapsed, agents: out.agents, lost: out.lost }
        }
        None => {
            // The baseline is read now, before the first request is sent.
            if let Some(src) = source.take() {
                sampler = Some(sample_server(src, Instant::now(), stop_sampling.clone(), server.clone())?);
            }
            let (rec, elapsed, _) = run_local(plan, a.quiet)?;
            Measured { rec, elapsed, agents: Vec::new(), lost: Vec::new() }
        }
    };
    stop_sampling.store(true, Ordering::Release);
    if let Some(s) = sampler {
        let _ = s.join();
    }
    Ok(m)
}

/// One sample per row of the series; what the server counted after the
/// last row (requests in flight at the end) goes in it.
fn server_series(mut s: Vec<ServerSecond>, rows: usize) -> Vec<ServerSecond> {
    let rows = rows.max(1);
    s.resize_with(s.len().max(rows), ServerSecond::default);
    let tail: Vec<ServerSecond> = s.drain(rows..).collect();
    let last = &mut s[rows - 1];
    for t in tail {
        last.client_req += t.client_req;
        last.cache_hit += t.cache_hit;
        last.cache_miss += t.cache_miss;
        last.backend_req += t.backend_req;
    }
    s
}

/// The thresholds, the baseline and the lost agents, each a verdict.
fn judge(a: &RunArgs, checks: &[Check], tolerance: f64, summary: &Value, lost: &[String]) -> Result<Vec<Value>> {
    let mut results: Vec<Value> = Vec::new();
    for c in checks {
        let (v, failed) = c.judge(summary)?;
        results.push(json!({ "check": c.text, "value": v, "failed": failed }));
    }
    if let Some(b) = &a.baseline {
        results.extend(checks::against_baseline(b, summary, tolerance)?);
    }
    for l in lost {
        results.push(json!({ "check": format!("agent {l}"), "failed": true, "reason": "the agent was lost before it reported" }));
    }
    Ok(results)
}

/// The text report and each verdict.
fn print_text(meta: &Meta, m: &Measured, server: Option<&[ServerSecond]>, results: &[Value]) {
    report::out(&report::text(meta, &m.rec, &m.agents, server));
    if interrupted() {
        report::out("  (interrupted: ended early by a signal)\n");
    }
    for r in results {
        let verdict = if r["failed"] == true { "FAILED" } else { "ok" };
        match r.get("value") {
            Some(v) => report::out(&format!("  check {}: {verdict} (measured {v})\n", r["check"].as_str().unwrap_or(""))),
            None => report::out(&format!("  check {}: {verdict}\n", r["check"].as_str().unwrap_or(""))),
        }
    }
}
