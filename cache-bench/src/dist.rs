//! Many load hosts, one run: `cache-bench agent` on each host, the
//! coordinator in `cache-bench run --agents ...`, and `cache-bench merge`.
//!
//! Protocol (JSON lines over TCP):
//! 1. agent → `{"hello":"cache-bench","version":V,"proto":2,"nonce":HEX}`
//! 2. coordinator → `{"msg":{"plan":PLAN,"label":L,"name":N},"mac":HEX}`
//!    (each msg travels as its JSON text in a string, signed as sent);
//! 3. agent → `{"msg":{"ready":true},"mac":..}` (or `{"error":...}`);
//! 4. once every agent is ready, coordinator → `{"msg":{"start_unix_ms":T},"mac":..}`
//!    to all, T a little ahead; at T each runs its share of the plan,
//!    sending `{"msg":{"tick":{...}},..}` each second and finally
//!    `{"msg":{"result":RESULT},..}` — its full histograms and series, also
//!    written to its own result file, so `cache-bench merge` rebuilds the
//!    totals. The coordinator may send `{"msg":{"stop":true},..}` at any
//!    time.
//!
//! Every message after the hello carries mac = HMAC-SHA256(secret,
//! direction ‖ nonce ‖ msg as sent), direction "c" from the coordinator and
//! "a" from the agent: only a coordinator holding the shared secret can
//! make an agent send load, start or stop, a message cannot be altered or
//! replayed into another session (the nonce) or reflected back. Before
//! authentication an agent reads one line of at most [`MAX_PLAN_LINE`]
//! bytes within [`HANDSHAKE`]; it handshakes with any number of
//! connections at once (an idle one blocks nobody) and runs for one
//! coordinator at a time (others are told it is busy). A start time more
//! than [`START_SKEW`] from the agent's clock is refused.
//!
//! The coordinator merges the agents' histograms exactly; an agent that
//! disconnects before its result is reported and fails the run.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use common::bounded::{Deadline, Deadlined, Slot, Slots};

use crate::engine::{self, Live};
use crate::plan::Plan;
use crate::report::{self, Meta};
use crate::stats::Recorder;

pub const PROTO: u64 = 2;
/// Longest line an agent reads before authentication (the plan, with its
/// URL list).
pub const MAX_PLAN_LINE: u64 = 32 << 20;
/// Longest line after it (a result carries every histogram of the run).
const MAX_LINE: u64 = 1 << 30;
/// Time a connection has, from connect, to hand an agent a signed plan.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// How far from the agent's clock a start time may be.
pub const START_SKEW: Duration = Duration::from_secs(60);
/// Handshakes an agent holds at once; more connections are closed.
const MAX_HANDSHAKES: usize = 64;
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

type HmacSha256 = hmac::Hmac<Sha256>;

/// HMAC-SHA256 of `msg` under `key` (the hmac crate; any key length).
fn mac_of(key: &[u8], msg: &[u8]) -> HmacSha256 {
    let mut m = <HmacSha256 as hmac::Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    hmac::Mac::update(&mut m, msg);
    m
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
    hex::encode(
        &Sha256::new().chain_update(b).chain_update(t.to_le_bytes()).chain_update(std::process::id().to_le_bytes()).finalize()[..16],
    )
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn send(w: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(v)?;
    line.push(b'\n');
    w.write_all(&line)
}

/// One end of an authenticated session: the secret, the agent's nonce and
/// which way this end sends ("c" coordinator, "a" agent).
#[derive(Clone)]
struct Keys {
    secret: Arc<Vec<u8>>,
    nonce: String,
    me: &'static str,
}

impl Keys {
    fn mac(&self, dir: &str, msg: &str) -> String {
        hex::encode(hmac::Mac::finalize(mac_of(&self.secret, format!("{dir}{}{msg}", self.nonce).as_bytes())).into_bytes())
    }

    /// Does `mac` (hex) sign `msg` from the `dir` end? Compared in
    /// constant time.
    fn verify(&self, dir: &str, msg: &str, mac: &str) -> bool {
        let Ok(given) = hex::decode(mac) else { return false };
        hmac::Mac::verify_slice(mac_of(&self.secret, format!("{dir}{}{msg}", self.nonce).as_bytes()), &given).is_ok()
    }

    /// The message travels as JSON text inside a string, so the MAC covers
    /// exactly the bytes sent (a number re-serialised after parsing need
    /// not come out the same).
    fn send(&self, w: &mut TcpStream, msg: Value) -> std::io::Result<()> {
        let text = serde_json::to_string(&msg)?;
        let mac = self.mac(self.me, &text);
        send(w, &json!({ "msg": text, "mac": mac }))
    }

    /// The message of a signed line from the other end; an unsigned or
    /// badly signed one is an error (an error report from the other end
    /// is passed on as one).
    fn open(&self, v: Value) -> Result<Value> {
        if let Some(e) = v.get("error") {
            bail!("{}", e.as_str().unwrap_or("refused"));
        }
        let (Some(msg), Some(mac)) = (v.get("msg").and_then(Value::as_str), v.get("mac").and_then(Value::as_str)) else {
            bail!("an unsigned message");
        };
        let other = if self.me == "c" { "a" } else { "c" };
        if !self.verify(other, msg, mac) {
            bail!("a message with a bad signature (not the same secret, or altered on the way)");
        }
        Ok(serde_json::from_str(msg)?)
    }
}

/// Read one JSON line of at most `max` bytes.
fn recv<R: BufRead>(r: &mut R, max: u64) -> Result<Value> {
    let mut line = Vec::new();
    if common::bounded::read_line(r, usize::try_from(max).unwrap_or(usize::MAX), &mut line)? == 0 {
        bail!("connection closed");
    }
    Ok(serde_json::from_slice(&line)?)
}

/// For the fuzz target (fuzz/fuzz_targets/agent_msg.rs): what an agent
/// does with bytes from the network — bounded lines read, signed messages
/// opened, plans parsed and their numbers checked, start times taken —
/// on arbitrary input.
#[doc(hidden)]
pub fn fuzz_messages(data: &[u8]) {
    let keys = Keys { secret: Arc::new(b"fuzz-secret".to_vec()), nonce: "00".into(), me: "a" };
    let mut r = data;
    for _ in 0..16 {
        let Ok(v) = recv(&mut r, 4096) else { break };
        let opened = keys.open(v.clone()).ok();
        for m in [Some(&v), opened.as_ref(), v.get("msg")].into_iter().flatten() {
            if let Some(Ok(plan)) = m.get("plan").map(|p| serde_json::from_value::<Plan>(p.clone())) {
                if plan.check_bounds().is_ok() {
                    let _ = plan.share(1, 3).length_s();
                }
            }
            let _ = m.get("start_unix_ms").and_then(Value::as_u64).map(|t| t.abs_diff(unix_ms()));
        }
    }
}

// ---------------------------------------------------------------- agent

/// Serve coordinators, one run at a time, forever (or for one run: the
/// exit status then says whether it went well).
pub fn agent(listen: &str, secret: &[u8], out_dir: &str, once: bool) -> Result<i32> {
    let l = TcpListener::bind(listen).with_context(|| format!("cannot listen on {listen}"))?;
    println!("cache-bench agent listening on {}", l.local_addr()?);
    let _ = std::io::stdout().flush();
    let secret = Arc::new(secret.to_vec());
    let busy = Arc::new(AtomicBool::new(false));
    let handshakes = Slots::new(MAX_HANDSHAKES);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<bool>();
    let out_dir = out_dir.to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            // Past the cap, dropped: too many connections at once.
            let Some(slot) = handshakes.take() else { continue };
            let (secret, busy, done, out_dir) = (secret.clone(), busy.clone(), done_tx.clone(), out_dir.clone());
            std::thread::spawn(move || {
                let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                let mut ran = false;
                let r = serve_one(s, &secret, &out_dir, &busy, slot, &mut ran);
                let ok = match r {
                    Ok(file) => {
                        eprintln!("cache-bench agent: run for {peer} done, result in {file}");
                        true
                    }
                    Err(e) => {
                        eprintln!("cache-bench agent: {peer}: {e:#}");
                        false
                    }
                };
                // A connection refused before its run (no secret, a port
                // scan) does not end a one-run agent.
                if ran {
                    let _ = done.send(ok);
                }
            });
        }
    });
    loop {
        match done_rx.recv() {
            Ok(ok) if once => return Ok(if ok { 0 } else { 1 }),
            Ok(_) => {}
            Err(_) => return Ok(0),
        }
    }
}

/// One connection: handshake (bounded in size and time), then, if no other
/// run is going on, the run.
fn serve_one(s: TcpStream, secret: &Arc<Vec<u8>>, out_dir: &str, busy: &AtomicBool, handshake: Slot, ran: &mut bool) -> Result<String> {
    let mut w = s.try_clone()?;
    w.set_write_timeout(Some(Duration::from_secs(30)))?;
    let deadline = Deadline::in_(HANDSHAKE);
    let mut r = BufReader::new(Deadlined::new(s, deadline.clone(), None));
    let keys = Keys { secret: secret.clone(), nonce: nonce(), me: "a" };
    let hs = (|| -> Result<Value> {
        send(&mut w, &json!({ "hello": "cache-bench", "version": env!("CARGO_PKG_VERSION"), "proto": PROTO, "nonce": keys.nonce }))?;
        let first = recv(&mut r, MAX_PLAN_LINE)?;
        keys.open(first).map_err(|e| anyhow!("a coordinator failed to authenticate: {e}"))
    })();
    drop(handshake);
    let msg = match hs {
        Ok(m) => m,
        Err(e) => {
            let _ = send(&mut w, &json!({ "error": "authentication failed: not the same secret" }));
            return Err(e);
        }
    };
    let plan_v = msg.get("plan").cloned().ok_or_else(|| anyhow!("no plan"))?;
    let plan: Plan = serde_json::from_value(plan_v)?;
    if let Err(e) = plan.target() {
        let _ = send(&mut w, &json!({ "error": format!("{e:#}") }));
        bail!("bad plan: {e:#}");
    }
    if busy.swap(true, Ordering::AcqRel) {
        let _ = send(&mut w, &json!({ "error": "busy: this agent is running for another coordinator" }));
        bail!("refused a second coordinator while busy");
    }
    let r = run_plan(plan, &msg, &keys, (w, r, deadline), out_dir, ran);
    busy.store(false, Ordering::Release);
    r
}

/// The socket's halves and the deadline its reads keep to.
type Conn = (TcpStream, BufReader<Deadlined>, Deadline);

fn run_plan(plan: Plan, msg: &Value, keys: &Keys, conn: Conn, out_dir: &str, ran: &mut bool) -> Result<String> {
    let (mut w, mut r, deadline) = conn;
    let label = msg["label"].as_str().unwrap_or("").to_string();
    let name = msg["name"].as_str().unwrap_or("agent").to_string();
    keys.send(&mut w, json!({ "ready": true }))?;
    // The start comes once every agent is ready: allow the slowest a while.
    deadline.set(Some(Instant::now() + Duration::from_secs(60)));
    let go = keys.open(recv(&mut r, MAX_LINE).context("no start from the coordinator")?)?;
    let start_ms = go["start_unix_ms"].as_u64().ok_or_else(|| anyhow!("no start time"))?;
    let now = unix_ms();
    if start_ms.abs_diff(now) > START_SKEW.as_millis() as u64 {
        let _ = send(&mut w, &json!({ "error": "start time too far from this host's clock (check NTP)" }));
        bail!("a start time {} ms from this host's clock (more than {:?}): refused", start_ms as i128 - now as i128, START_SKEW);
    }
    *ran = true;
    let start = if start_ms > now { Instant::now() + Duration::from_millis(start_ms - now) } else { Instant::now() };
    let live = Arc::new(Live::default());
    // The coordinator may end the run early (a signed stop, Ctrl-C
    // there) or go away (EOF): either way, stop. Unsigned lines are
    // ignored.
    {
        let (live, mut r, keys) = (live.clone(), r, keys.clone());
        deadline.set(None);
        std::thread::spawn(move || loop {
            match recv(&mut r, MAX_PLAN_LINE) {
                Ok(v) => match keys.open(v) {
                    Ok(m) if m.get("stop").is_some() => break live.stop.store(true, Ordering::Relaxed),
                    _ => continue,
                },
                Err(_) => break live.stop.store(true, Ordering::Relaxed),
            }
        });
    }
    let l = live.clone();
    let mut ticks = w.try_clone()?;
    let tick_keys = keys.clone();
    let rec = engine::run(&plan, Some(start), live, &mut |t| {
        let tick = json!({ "tick": { "elapsed": t.elapsed, "requests": t.requests, "errors": t.errors, "rps": t.rps } });
        // The coordinator is gone: stop sending load for nobody.
        if tick_keys.send(&mut ticks, tick).is_err() {
            l.stop.store(true, Ordering::Relaxed);
        }
    })?;
    let elapsed = Instant::now().saturating_duration_since(start).as_secs_f64();
    let (h, p, _) = crate::plan::split_url(&plan.urls[0])?;
    let meta = Meta {
        label: label.clone(),
        target: format!("{}://{h}:{p}", crate::plan::scheme(&plan.urls[0])),
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
        let s: String = s.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        if s.is_empty() {
            "run".to_string()
        } else {
            s
        }
    };
    let path = std::path::Path::new(out_dir).join(format!("cache-bench-result-{}-{}-{start_ms}.json", safe(&label), safe(&name)));
    std::fs::write(&path, serde_json::to_vec(&file)?).with_context(|| format!("cannot write {}", path.display()))?;
    keys.send(&mut w, json!({ "result": file }))?;
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

/// A connection to an agent: its name, writer, reader and keys.
type AgentConn = (String, TcpStream, BufReader<TcpStream>, Keys);

/// Connect to agent `a`, check its version and hand it share `i` of `n`
/// of the plan.
fn hand_out(plan: &Plan, i: usize, n: usize, a: &str, secret: &Arc<Vec<u8>>, label: &str) -> Result<AgentConn> {
    let addr = a.to_socket_addrs().with_context(|| format!("agent {a}"))?.next().ok_or_else(|| anyhow!("agent {a}: no address"))?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("cannot reach agent {a}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let hello = recv(&mut r, MAX_PLAN_LINE).with_context(|| format!("agent {a} did not greet"))?;
    if hello["hello"] != "cache-bench" {
        bail!("{a} is not a cache-bench agent");
    }
    let v = hello["version"].as_str().unwrap_or("?");
    if v != env!("CARGO_PKG_VERSION") || hello["proto"].as_u64() != Some(PROTO) {
        bail!("agent {a} runs cache-bench {v}, this is {}: use the same release everywhere", env!("CARGO_PKG_VERSION"));
    }
    let share = serde_json::to_value(plan.share(i, n))?;
    let keys = Keys { secret: secret.clone(), nonce: hello["nonce"].as_str().unwrap_or("").to_string(), me: "c" };
    keys.send(&mut w, json!({ "plan": share, "label": label, "name": a }))?;
    Ok((a.to_string(), w, r, keys))
}

/// Read agent `i`'s ticks (into `ticks`) until its result comes; None if
/// it was lost first.
fn read_agent(
    a: String,
    i: usize,
    mut r: BufReader<TcpStream>,
    keys: Keys,
    ticks: &Mutex<Vec<engine::Tick>>,
) -> (String, Option<ResultFile>) {
    loop {
        match recv(&mut r, MAX_LINE).and_then(|v| keys.open(v)) {
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
    let secret = Arc::new(secret.to_vec());
    let mut conns = Vec::new();
    for (i, a) in agents.iter().enumerate() {
        conns.push(hand_out(plan, i, agents.len(), a, &secret, label)?);
    }
    for (a, _, r, keys) in conns.iter_mut() {
        let m = recv(r, MAX_LINE).with_context(|| format!("agent {a} did not answer the plan"))?;
        keys.open(m).with_context(|| format!("agent {a}"))?;
    }
    // All ready: one start time for all.
    let start_ms = unix_ms() + START_DELAY.as_millis() as u64;
    for (a, w, _, keys) in conns.iter_mut() {
        keys.send(w, json!({ "start_unix_ms": start_ms })).with_context(|| format!("agent {a}"))?;
    }
    on_start(Instant::now() + START_DELAY)?;
    // Collect ticks and results, one reader per agent.
    let length = plan.length_s();
    let wait = Duration::try_from_secs_f64(length.unwrap_or(3600.0) + plan.timeout_s + 30.0).unwrap_or(Duration::from_secs(86400 * 366));
    let ticks: Arc<Mutex<Vec<engine::Tick>>> =
        Arc::new(Mutex::new(vec![engine::Tick { elapsed: 0.0, requests: 0, errors: 0, rps: 0.0 }; conns.len()]));
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for (i, (a, w, r, keys)) in conns.into_iter().enumerate() {
        writers.push((w, keys.clone()));
        let ticks = ticks.clone();
        r.get_ref().set_read_timeout(Some(wait))?;
        readers.push(std::thread::spawn(move || read_agent(a, i, r, keys, &ticks)));
    }
    let progress = crate::local::Progress::new(quiet, length);
    let n_agents = readers.len();
    let mut stopped = false;
    while readers.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(Duration::from_millis(200));
        if crate::local::interrupted() && !stopped {
            // End the run early everywhere; the agents still report.
            for (w, keys) in writers.iter_mut() {
                let _ = keys.send(w, json!({ "stop": true }));
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
        let mac = hmac::Mac::finalize(mac_of(b"Jefe", b"what do ya want for nothing?")).into_bytes();
        assert_eq!(hex::encode(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    fn keys(me: &'static str) -> Keys {
        Keys { secret: Arc::new(b"secret!!".to_vec()), nonce: "n1".into(), me }
    }

    /// A signed line as `k` sends it.
    fn line(k: &Keys, msg: Value) -> Value {
        let text = serde_json::to_string(&msg).unwrap();
        json!({ "msg": text, "mac": k.mac(k.me, &text) })
    }

    #[test]
    fn only_signed_messages_from_the_other_end_open() {
        let (c, a) = (keys("c"), keys("a"));
        let stop = line(&c, json!({ "stop": true, "x": 0.1 + 0.2 }));
        assert_eq!(a.open(stop.clone()).unwrap()["stop"], true);
        // Unsigned, altered, reflected back, another session, another secret.
        assert!(a.open(json!({ "stop": true })).is_err());
        let mut altered = stop.clone();
        altered["msg"] = json!("{\"stop\":false}");
        assert!(a.open(altered).is_err());
        assert!(c.open(stop.clone()).is_err(), "a coordinator's message reflected to it");
        let other = Keys { nonce: "n2".into(), ..keys("a") };
        assert!(other.open(stop.clone()).is_err(), "replayed into another session");
        let wrong = Keys { secret: Arc::new(b"another secret".to_vec()), ..keys("a") };
        assert!(wrong.open(stop).is_err());
        assert!(a.open(json!({ "error": "busy" })).unwrap_err().to_string().contains("busy"));
    }

    #[test]
    fn lines_are_bounded() {
        let long = vec![b'x'; 1000];
        assert!(recv(&mut &long[..], 100).unwrap_err().to_string().contains("longer than 100"));
        assert_eq!(recv(&mut &b"{\"a\":1}\n"[..], 100).unwrap()["a"], 1);
        assert!(recv(&mut &b""[..], 100).is_err());
    }

    /// A fake coordinator against a real agent session on loopback.
    fn session(start_in_ms: i64) -> (Result<String>, Value) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let secret = Arc::new(b"secret!!".to_vec());
        let s2 = secret.clone();
        let agent = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let (busy, hs) = (AtomicBool::new(false), Slots::new(1).take().unwrap());
            let dir = std::env::temp_dir();
            serve_one(s, &s2, dir.to_str().unwrap(), &busy, hs, &mut false)
        });
        let mut w = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut r = BufReader::new(w.try_clone().unwrap());
        let hello = recv(&mut r, 1 << 20).unwrap();
        let k = Keys { secret, nonce: hello["nonce"].as_str().unwrap().into(), me: "c" };
        let mut plan = crate::plan::tests_plan();
        plan.urls = vec![format!("http://127.0.0.1:{port}/")];
        plan.duration_s = Some(0.1);
        send(&mut w, &line(&k, json!({ "plan": plan, "label": "t", "name": "a" }))).unwrap();
        k.open(recv(&mut r, 1 << 20).unwrap()).unwrap();
        let start = (unix_ms() as i64 + start_in_ms) as u64;
        send(&mut w, &line(&k, json!({ "start_unix_ms": start }))).unwrap();
        let answer = recv(&mut r, 1 << 30).unwrap_or(Value::Null);
        (agent.join().unwrap(), answer)
    }

    #[test]
    fn an_absurd_start_time_is_refused() {
        let (r, answer) = session(365 * 86400 * 1000);
        assert!(r.unwrap_err().to_string().contains("start time"));
        assert!(answer["error"].as_str().unwrap().contains("clock"));
        let (r, _) = session(-3_600_000);
        assert!(r.is_err());
    }
}
