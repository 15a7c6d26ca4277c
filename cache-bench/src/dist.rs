//! Many load hosts, one run: `cache-bench agent` on each host, the
//! coordinator in `cache-bench run --agents ...`, and `cache-bench merge`.
//!
//! Protocol (JSON lines over TCP):
//! 1. agent → `{"hello":"cache-bench","version":V,"proto":1,"nonce":HEX}`
//! 2. coordinator → `{"auth":HEX,"plan":PLAN,"label":L,"name":N}` where
//!    auth = HMAC-SHA256(secret, nonce ‖ plan as sent), so only a
//!    coordinator holding the shared secret can make an agent send load,
//!    and the plan cannot be swapped on the way;
//! 3. agent → `{"ready":true}` (or `{"error":...}`);
//! 4. once every agent is ready, coordinator → `{"start_unix_ms":T}` to
//!    all, T a little ahead; at T each runs its share of the plan, sending
//!    `{"tick":{...}}` each second and finally `{"result":RESULT}` — its
//!    full histograms and series, also written to its own result file, so
//!    `cache-bench merge` rebuilds the totals.
//!
//! The coordinator merges the agents' histograms exactly; an agent that
//! disconnects before its result is reported and fails the run.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::engine::{self, Live};
use crate::plan::Plan;
use crate::report::{self, Meta};
use crate::stats::Recorder;

pub const PROTO: u64 = 1;
/// Agents start this long after the coordinator sends the start time
/// (room for the message to reach every agent).
pub const START_DELAY: Duration = Duration::from_millis(500);

/// One generator's measurements as a file: an agent writes one per run;
/// `cache-bench merge` reads them.
#[derive(Serialize, Deserialize)]
pub struct ResultFile {
    pub kind: String,
    pub version: u32,
    pub agent: String,
    pub meta: Meta,
    pub elapsed_s: f64,
    pub recorder: Recorder,
}

fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let (mut ipad, mut opad) = ([0x36u8; 64], [0x5cu8; 64]);
    for i in 0..64 {
        ipad[i] ^= k[i];
        opad[i] ^= k[i];
    }
    let inner = Sha256::new().chain_update(ipad).chain_update(msg).finalize();
    Sha256::new().chain_update(opad).chain_update(inner).finalize().into()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Constant-time equality, for MACs.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn read_secret(path: Option<&str>) -> Result<Vec<u8>> {
    let path = path.ok_or_else(|| anyhow!("--secret-file is needed with agents (the same file on every host)"))?;
    let s = std::fs::read(path).with_context(|| format!("cannot read the secret file {path}"))?;
    let s: Vec<u8> = s.trim_ascii().to_vec();
    if s.len() < 8 {
        bail!("the secret in {path} is too short (8 bytes at least)");
    }
    Ok(s)
}

fn nonce() -> String {
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    hex(&Sha256::new().chain_update(b).chain_update(t.to_le_bytes()).chain_update(std::process::id().to_le_bytes()).finalize()[..16])
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn send(w: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v)?;
    line.push(b'\n');
    w.write_all(&line)
}

fn recv(r: &mut BufReader<TcpStream>) -> Result<Value> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        bail!("connection closed");
    }
    Ok(serde_json::from_str(&line)?)
}

// ---------------------------------------------------------------- agent

/// Serve coordinators one at a time, forever (or for one run: the exit
/// status then says whether it went well).
pub fn agent(listen: &str, secret: &[u8], out_dir: &str, once: bool) -> Result<i32> {
    let l = TcpListener::bind(listen).with_context(|| format!("cannot listen on {listen}"))?;
    println!("cache-bench agent listening on {}", l.local_addr()?);
    let _ = std::io::stdout().flush();
    for s in l.incoming() {
        let Ok(s) = s else { continue };
        let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut ran = false;
        let ok = match serve_one(s, secret, out_dir, &mut ran) {
            Ok(file) => {
                eprintln!("cache-bench agent: run for {peer} done, result in {file}");
                true
            }
            Err(e) => {
                eprintln!("cache-bench agent: {peer}: {e:#}");
                false
            }
        };
        // A connection refused before its run (no secret, a port scan)
        // does not end a one-run agent.
        if once && ran {
            return Ok(if ok { 0 } else { 1 });
        }
    }
    Ok(0)
}

fn serve_one(s: TcpStream, secret: &[u8], out_dir: &str, ran: &mut bool) -> Result<String> {
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let nonce = nonce();
    send(&mut w, &json!({ "hello": "cache-bench", "version": env!("CARGO_PKG_VERSION"), "proto": PROTO, "nonce": nonce }))?;
    let msg = recv(&mut r)?;
    let plan_v = msg.get("plan").cloned().ok_or_else(|| anyhow!("no plan"))?;
    let plan_text = serde_json::to_string(&plan_v)?;
    let want = hmac(secret, format!("{nonce}{plan_text}").as_bytes());
    let got = msg["auth"].as_str().unwrap_or("");
    if !same(hex(&want).as_bytes(), got.as_bytes()) {
        let _ = send(&mut w, &json!({ "error": "authentication failed: not the same secret" }));
        bail!("a coordinator failed to authenticate");
    }
    let plan: Plan = serde_json::from_value(plan_v)?;
    if let Err(e) = plan.target() {
        let _ = send(&mut w, &json!({ "error": format!("{e:#}") }));
        bail!("bad plan: {e:#}");
    }
    let label = msg["label"].as_str().unwrap_or("").to_string();
    let name = msg["name"].as_str().unwrap_or("agent").to_string();
    send(&mut w, &json!({ "ready": true }))?;
    let go = recv(&mut r).context("no start from the coordinator")?;
    let start_ms = go["start_unix_ms"].as_u64().ok_or_else(|| anyhow!("no start time"))?;
    *ran = true;
    let now = unix_ms();
    let start = if start_ms > now { Instant::now() + Duration::from_millis(start_ms - now) } else { Instant::now() };
    let live = Arc::new(Live::default());
    // The coordinator may end the run early ({"stop":true}, Ctrl-C
    // there) or go away (EOF): either way, stop.
    {
        let (live, mut r) = (live.clone(), r);
        let _ = r.get_ref().set_read_timeout(None);
        std::thread::spawn(move || {
            let _ = recv(&mut r);
            live.stop.store(true, Ordering::Relaxed);
        });
    }
    let l = live.clone();
    let mut ticks = w.try_clone()?;
    let rec = engine::run(&plan, Some(start), live, &mut |t| {
        let tick = json!({ "tick": { "elapsed": t.elapsed, "requests": t.requests, "errors": t.errors, "rps": t.rps } });
        // The coordinator is gone: stop sending load for nobody.
        if send(&mut ticks, &tick).is_err() {
            l.stop.store(true, Ordering::Relaxed);
        }
    })?;
    let elapsed = Instant::now().saturating_duration_since(start).as_secs_f64();
    let (h, p, _) = crate::plan::split_url(&plan.urls[0])?;
    let meta = Meta {
        label: label.clone(),
        target: format!("http://{h}:{p}"),
        started: chrono::DateTime::from_timestamp_millis(start_ms as i64)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default(),
        duration_s: match plan.length_s() {
            Some(len) if !l.stop.load(Ordering::Relaxed) => len,
            _ => elapsed,
        },
        plan,
    };
    let file = ResultFile { kind: "cache-bench-result".into(), version: 1, agent: name.clone(), meta, elapsed_s: elapsed, recorder: rec };
    let safe = |s: &str| {
        let s: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        if s.is_empty() {
            "run".to_string()
        } else {
            s
        }
    };
    let path = std::path::Path::new(out_dir).join(format!("cache-bench-result-{}-{}-{start_ms}.json", safe(&label), safe(&name)));
    std::fs::write(&path, serde_json::to_vec(&file)?).with_context(|| format!("cannot write {}", path.display()))?;
    send(&mut w, &json!({ "result": file }))?;
    Ok(path.display().to_string())
}

// ---------------------------------------------------------------- coordinator

pub struct Outcome {
    pub total: Recorder,
    pub elapsed: f64,
    /// (agent, its measurements, its duration)
    pub agents: Vec<(String, Recorder, f64)>,
    /// Agents that were lost before they reported.
    pub lost: Vec<String>,
}

/// Run `plan` split over `agents`, all starting at one instant;
/// `on_start` learns that instant (to sample the server alongside).
pub fn coordinate(
    plan: &Plan,
    agents: &[String],
    secret: &[u8],
    label: &str,
    quiet: bool,
    on_start: &mut dyn FnMut(Instant) -> Result<()>,
) -> Result<Outcome> {
    if agents.is_empty() {
        bail!("--agents: no agent given");
    }
    // Connect, check versions, hand out the plans.
    let mut conns = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        let addr = a.to_socket_addrs().with_context(|| format!("agent {a}"))?.next().ok_or_else(|| anyhow!("agent {a}: no address"))?;
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("cannot reach agent {a}"))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut w = s.try_clone()?;
        let mut r = BufReader::new(s);
        let hello = recv(&mut r).with_context(|| format!("agent {a} did not greet"))?;
        if hello["hello"] != "cache-bench" {
            bail!("{a} is not a cache-bench agent");
        }
        let v = hello["version"].as_str().unwrap_or("?");
        if v != env!("CARGO_PKG_VERSION") || hello["proto"].as_u64() != Some(PROTO) {
            bail!("agent {a} runs cache-bench {v}, this is {}: use the same release everywhere", env!("CARGO_PKG_VERSION"));
        }
        let share = serde_json::to_value(plan.share(i, agents.len()))?;
        let text = serde_json::to_string(&share)?;
        let auth = hex(&hmac(secret, format!("{}{text}", hello["nonce"].as_str().unwrap_or("")).as_bytes()));
        send(&mut w, &json!({ "auth": auth, "plan": share, "label": label, "name": a }))?;
        conns.push((a.clone(), w, r));
    }
    for (a, _, r) in conns.iter_mut() {
        let m = recv(r).with_context(|| format!("agent {a} did not answer the plan"))?;
        if let Some(e) = m.get("error") {
            bail!("agent {a}: {}", e.as_str().unwrap_or("refused"));
        }
    }
    // All ready: one start time for all.
    let start_ms = unix_ms() + START_DELAY.as_millis() as u64;
    for (a, w, _) in conns.iter_mut() {
        send(w, &json!({ "start_unix_ms": start_ms })).with_context(|| format!("agent {a}"))?;
    }
    on_start(Instant::now() + START_DELAY)?;
    // Collect ticks and results, one reader per agent.
    let length = plan.length_s();
    let wait = Duration::from_secs_f64(length.unwrap_or(3600.0) + plan.timeout_s + 30.0);
    let ticks: Arc<Mutex<Vec<engine::Tick>>> =
        Arc::new(Mutex::new(vec![engine::Tick { elapsed: 0.0, requests: 0, errors: 0, rps: 0.0 }; conns.len()]));
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for (i, (a, w, mut r)) in conns.into_iter().enumerate() {
        writers.push(w);
        let ticks = ticks.clone();
        r.get_ref().set_read_timeout(Some(wait))?;
        readers.push(std::thread::spawn(move || -> (String, Option<ResultFile>) {
            loop {
                match recv(&mut r) {
                    Ok(m) => {
                        if let Some(t) = m.get("tick") {
                            let mut all = ticks.lock().unwrap_or_else(|e| e.into_inner());
                            all[i] = engine::Tick {
                                elapsed: t["elapsed"].as_f64().unwrap_or(0.0),
                                requests: t["requests"].as_u64().unwrap_or(0),
                                errors: t["errors"].as_u64().unwrap_or(0),
                                rps: t["rps"].as_f64().unwrap_or(0.0),
                            };
                        } else if let Some(res) = m.get("result") {
                            return (a, serde_json::from_value(res.clone()).ok());
                        }
                    }
                    Err(_) => return (a, None),
                }
            }
        }));
    }
    let progress = crate::run::Progress::new(quiet, length);
    let n_agents = readers.len();
    let mut stopped = false;
    while readers.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(200));
        if crate::run::interrupted() && !stopped {
            // End the run early everywhere; the agents still report.
            for w in writers.iter_mut() {
                let _ = send(w, &json!({ "stop": true }));
            }
            stopped = true;
        }
        let all = ticks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let sum = engine::Tick {
            elapsed: all.iter().map(|t| t.elapsed).fold(0.0, f64::max),
            requests: all.iter().map(|t| t.requests).sum(),
            errors: all.iter().map(|t| t.errors).sum(),
            rps: all.iter().map(|t| t.rps).sum(),
        };
        progress.tick(&sum, &format!("  {n_agents} agent(s)"));
    }
    progress.done();
    let mut out = Outcome { total: Recorder::default(), elapsed: 0.0, agents: Vec::new(), lost: Vec::new() };
    for h in readers {
        let (a, res) = h.join().map_err(|_| anyhow!("a reader thread panicked"))?;
        match res {
            Some(f) => {
                let rec = f.recorder;
                out.total.merge(&rec);
                out.elapsed = out.elapsed.max(f.elapsed_s);
                out.agents.push((a, rec, f.meta.duration_s));
            }
            None => out.lost.push(a),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------- merge

/// `cache-bench merge FILES...`: the totals of agents' result files.
pub fn merge(files: &[String], as_json: bool, csv: Option<&str>) -> Result<i32> {
    if files.is_empty() {
        bail!("merge: give the agents' result files");
    }
    let mut total = Recorder::default();
    let mut agents = Vec::new();
    let mut meta: Option<Meta> = None;
    for f in files {
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {f}"))?;
        let r: ResultFile = serde_json::from_str(&text).with_context(|| format!("{f} is not a cache-bench result file"))?;
        if r.kind != "cache-bench-result" {
            bail!("{f} is not a cache-bench result file");
        }
        let rec = r.recorder;
        total.merge(&rec);
        agents.push((r.agent.clone(), rec, r.meta.duration_s));
        meta = Some(match meta {
            None => r.meta,
            Some(mut m) => {
                m.duration_s = m.duration_s.max(r.meta.duration_s);
                m.plan.conns += r.meta.plan.conns;
                m.plan.threads += r.meta.plan.threads;
                m.plan.rate = match (m.plan.rate, r.meta.plan.rate) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                m
            }
        });
    }
    let meta = meta.expect("one file at least");
    let mut summary = report::summary(&meta, &total, &agents, None);
    summary.as_object_mut().expect("an object").insert("passed".into(), json!(true));
    if let Some(c) = csv {
        report::write_csv(c, &total, None)?;
    }
    if as_json {
        crate::report::out(&(serde_json::to_string_pretty(&summary)? + "\n"));
    } else {
        report::out(&report::text(&meta, &total, &agents, None));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231() {
        // RFC 4231 test case 2.
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex(&mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}
