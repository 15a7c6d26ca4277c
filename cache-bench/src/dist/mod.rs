//! Many load hosts, one run: `cache-bench agent` on each host, the
//! coordinator in `cache-bench run --agents ...`, and `cache-bench merge`.
//!
//! Protocol 3 (JSON lines over TCP, but for one fixed-size text line):
//! 1. agent → `{"hello":"cache-bench","version":V,"proto":3,"nonce":NA}`;
//! 2. coordinator → `auth NC MAC`: one line of exactly [`AUTH_LINE`] bytes,
//!    NC its own fresh nonce, MAC = HMAC-SHA256(secret, "c" ‖ NA ‖ NC ‖
//!    "auth") in hex. This is the first thing an agent reads: at most
//!    [`AUTH_LINE`] bytes within [`HANDSHAKE`] of the connect, checked
//!    before it reads anything more or parses any JSON;
//! 3. agent → `{"msg":{"auth":true},"mac":..}` (or `{"error":...}`): its
//!    own proof, which the coordinator reads (a short line) before it sends
//!    the plan or reads anything large;
//! 4. coordinator → `{"msg":{"plan":PLAN,"label":L,"name":N},"mac":HEX}`
//!    (each msg travels as its JSON text in a string, signed as sent);
//! 5. agent → `{"msg":{"ready":true},"mac":..}` (or `{"error":...}`);
//! 6. once every agent is ready, coordinator → `{"msg":{"start_unix_ms":T},"mac":..}`
//!    to all, T a little ahead; at T each runs its share of the plan,
//!    sending `{"msg":{"tick":{...}},..}` each second and finally
//!    `{"msg":{"result":RESULT},..}` — its full histograms and series, also
//!    written to its own result file, so `cache-bench merge` rebuilds the
//!    totals. The coordinator may send `{"msg":{"stop":true},..}` at any
//!    time.
//!
//! Every message after the proof carries mac = HMAC-SHA256(secret,
//! direction ‖ NA ‖ NC ‖ msg as sent), direction "c" from the coordinator
//! and "a" from the agent: only a coordinator holding the shared secret can
//! make an agent send load, start or stop, a message cannot be altered or
//! replayed into another session (either end's nonce) or reflected back.
//!
//! What a peer can cost the other end: before authentication, an agent
//! holds at most [`MAX_HANDSHAKES`] connections (one more closes the
//! oldest, so idle ones cannot keep a coordinator out), each for at most
//! [`HANDSHAKE`], reading at most [`AUTH_LINE`] bytes; a coordinator reads
//! at most [`MAX_HELLO_LINE`] from an agent that has not proved itself.
//! After it, every line is capped: the plan at [`MAX_PLAN_LINE`] (a
//! coordinator refuses to send a longer one), start and stop at
//! [`MAX_CONTROL_LINE`], ticks and the result at [`MAX_RESULT_LINE`] (an
//! agent whose result is longer says so and keeps it in its file). An
//! agent runs for one coordinator at a time (others are told it is busy);
//! a start time more than [`START_SKEW`] from its clock is refused.
//!
//! The coordinator merges the agents' histograms exactly; an agent that
//! disconnects before its result is reported and fails the run.

mod wire;

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use common::bounded::{Deadline, Deadlined};

use crate::engine::{self, Live};
use crate::plan::Plan;
use crate::report::{self, Meta};
use crate::stats::Recorder;
pub use wire::{fuzz_messages, AUTH_LINE};
use wire::{is_nonce, nonce, recv, send, size, unix_ms, Keys};

pub const PROTO: u64 = 3;
/// Longest line a coordinator reads from an agent that has not proved it
/// holds the secret (the hello, the answer to the proof).
pub const MAX_HELLO_LINE: usize = 4 << 10;
/// Longest plan line: the plan with its URL list, escaped and signed as it
/// travels (about half a million URLs of 100 bytes).
pub const MAX_PLAN_LINE: usize = 64 << 20;
/// Longest other line from a coordinator (start, stop) or answer to the
/// plan from an agent.
pub const MAX_CONTROL_LINE: usize = 64 << 10;
/// Longest line from an agent after it proved itself: a tick, or the
/// result, which carries every histogram of the run and one per second
/// (a few kB a second: runs of days fit).
pub const MAX_RESULT_LINE: usize = 1 << 30;
/// Time a connection has, from connect, to prove it holds the secret.
pub const HANDSHAKE: Duration = Duration::from_secs(10);
/// Time an authenticated coordinator has to send the plan.
const PLAN_WAIT: Duration = Duration::from_secs(60);
/// How far from the agent's clock a start time may be.
pub const START_SKEW: Duration = Duration::from_secs(60);
/// Handshakes an agent holds at once; one more closes the oldest.
pub const MAX_HANDSHAKES: usize = 64;
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

pub fn read_secret(path: Option<&str>) -> Result<Vec<u8>> {
    let path = path.ok_or_else(|| anyhow!("--secret-file is needed with agents (the same file on every host)"))?;
    let s = std::fs::read(path).with_context(|| format!("cannot read the secret file {path}"))?;
    let s: Vec<u8> = s.trim_ascii().to_vec();
    if s.len() < 8 {
        bail!("the secret in {path} is too short (8 bytes at least)");
    }
    Ok(s)
}

// ---------------------------------------------------------------- agent

/// The connections still in their handshake, oldest first: at most
/// [`MAX_HANDSHAKES`]; one more closes the oldest, so strangers' idle
/// connections cannot keep a coordinator out (and none lasts longer than
/// [`HANDSHAKE`] anyway).
#[derive(Clone, Default)]
struct Handshakes(Arc<Mutex<Waiting>>);

/// The sockets of the connections in their handshake, each under an id.
#[derive(Default)]
struct Waiting {
    last_id: u64,
    conns: VecDeque<(u64, TcpStream)>,
}

/// A connection's place among the [`Handshakes`] until it has
/// authenticated or failed.
struct Handshake {
    all: Handshakes,
    id: u64,
}

impl Handshakes {
    /// A place for `s` (closing the oldest when all are taken), or None if
    /// its socket cannot be shared.
    fn admit(&self, s: &TcpStream) -> Option<Handshake> {
        let s = s.try_clone().ok()?;
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        while g.conns.len() >= MAX_HANDSHAKES {
            if let Some((_, oldest)) = g.conns.pop_front() {
                let _ = oldest.shutdown(Shutdown::Both);
            }
        }
        g.last_id += 1;
        let id = g.last_id;
        g.conns.push_back((id, s));
        Some(Handshake { all: self.clone(), id })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).conns.len()
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut g = self.all.0.lock().unwrap_or_else(|e| e.into_inner());
        g.conns.retain(|(id, _)| *id != self.id);
    }
}

/// Serve coordinators, one run at a time, forever (or for one run: the
/// exit status then says whether it went well).
pub fn agent(listen: &str, secret: &[u8], out_dir: &str, once: bool) -> Result<i32> {
    let l = TcpListener::bind(listen).with_context(|| format!("cannot listen on {listen}"))?;
    println!("cache-bench agent listening on {}", l.local_addr()?);
    let _ = std::io::stdout().flush();
    let secret = Arc::new(secret.to_vec());
    let busy = Arc::new(AtomicBool::new(false));
    let handshakes = Handshakes::default();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<bool>();
    let out_dir = out_dir.to_string();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let Some(place) = handshakes.admit(&s) else { continue };
            let (secret, busy, done, out_dir) = (secret.clone(), busy.clone(), done_tx.clone(), out_dir.clone());
            // No thread to be had: the connection (and its place) is dropped.
            let _ = std::thread::Builder::new().spawn(move || {
                let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                let mut ran = false;
                let r = serve_one(s, &secret, &out_dir, &busy, place, &mut ran);
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

/// The agent's side of the handshake: the hello, then the coordinator's
/// proof — at most [`AUTH_LINE`] bytes, no JSON — checked against the
/// secret; the session's keys.
fn authenticate<R: std::io::BufRead>(w: &mut TcpStream, r: &mut R, secret: &Arc<Vec<u8>>) -> Result<Keys> {
    let na = nonce();
    send(w, &json!({ "hello": "cache-bench", "version": env!("CARGO_PKG_VERSION"), "proto": PROTO, "nonce": na }))?;
    let mut line = Vec::with_capacity(AUTH_LINE);
    if common::bounded::read_line(r, AUTH_LINE, &mut line)? == 0 {
        bail!("connection closed");
    }
    Keys::check_auth(secret, &na, &line)
        .ok_or_else(|| anyhow!("not the same secret, or not a coordinator of this release (protocol {PROTO})"))
}

/// One connection: handshake (bounded in size and time), then, if no other
/// run is going on, the run.
fn serve_one(
    s: TcpStream,
    secret: &Arc<Vec<u8>>,
    out_dir: &str,
    busy: &AtomicBool,
    handshake: Handshake,
    ran: &mut bool,
) -> Result<String> {
    let mut w = s.try_clone()?;
    w.set_write_timeout(Some(Duration::from_secs(30)))?;
    let deadline = Deadline::in_(HANDSHAKE);
    let mut r = BufReader::new(Deadlined::new(s, deadline.clone(), None));
    let hs = authenticate(&mut w, &mut r, secret);
    drop(handshake);
    let keys = match hs {
        Ok(k) => k,
        Err(e) => {
            let _ = send(&mut w, &json!({ "error": "authentication failed: not the same secret" }));
            return Err(e.context("a coordinator failed to authenticate"));
        }
    };
    keys.send(&mut w, json!({ "auth": true }))?;
    // Authenticated: the plan may be large, and may take a while.
    deadline.set(Some(Instant::now() + PLAN_WAIT));
    let msg = keys.open(recv(&mut r, MAX_PLAN_LINE).context("no plan from the coordinator")?)?;
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
    let go = keys.open(recv(&mut r, MAX_CONTROL_LINE).context("no start from the coordinator")?)?;
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
            match recv(&mut r, MAX_CONTROL_LINE) {
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
    let line = keys.line(&json!({ "result": file }))?;
    if line.len() > MAX_RESULT_LINE {
        let e = format!(
            "the result is {} as sent, over the {} a coordinator reads: it is in {} on the agent (cache-bench merge reads it)",
            size(line.len()),
            size(MAX_RESULT_LINE),
            path.display()
        );
        let _ = send(&mut w, &json!({ "error": e }));
        bail!("{e}");
    }
    w.write_all(&line)?;
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

/// The coordinator's side of the handshake with agent `a`: its hello
/// checked, our proof sent, the agent's proof read — short lines only,
/// nothing large read from an agent that has not shown it holds the
/// secret; the session's keys.
fn authenticate_to<R: std::io::BufRead>(a: &str, w: &mut TcpStream, r: &mut R, secret: &Arc<Vec<u8>>) -> Result<Keys> {
    let hello = recv(r, MAX_HELLO_LINE).with_context(|| format!("agent {a} did not greet"))?;
    if hello["hello"] != "cache-bench" {
        bail!("{a} is not a cache-bench agent");
    }
    let v = hello["version"].as_str().unwrap_or("?");
    let na = hello["nonce"].as_str().unwrap_or("");
    if v != env!("CARGO_PKG_VERSION") || hello["proto"].as_u64() != Some(PROTO) || !is_nonce(na) {
        bail!("agent {a} runs cache-bench {v}, this is {}: use the same release everywhere", env!("CARGO_PKG_VERSION"));
    }
    let keys = Keys { secret: secret.clone(), nonces: format!("{na}{}", nonce()), me: "c" };
    w.write_all(keys.auth_line().as_bytes())?;
    let proof = recv(r, MAX_HELLO_LINE).with_context(|| format!("agent {a} did not answer the authentication"))?;
    if keys.open(proof).with_context(|| format!("agent {a}"))?["auth"] != true {
        bail!("agent {a} did not confirm the authentication");
    }
    Ok(keys)
}

/// Connect to agent `a`, check its version, authenticate both ways and
/// hand it share `i` of `n` of the plan.
fn hand_out(plan: &Plan, i: usize, n: usize, a: &str, secret: &Arc<Vec<u8>>, label: &str) -> Result<AgentConn> {
    let addr = a.to_socket_addrs().with_context(|| format!("agent {a}"))?.next().ok_or_else(|| anyhow!("agent {a}: no address"))?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("cannot reach agent {a}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let keys = authenticate_to(a, &mut w, &mut r, secret)?;
    let share = serde_json::to_value(plan.share(i, n))?;
    let line = keys.line(&json!({ "plan": share, "label": label, "name": a }))?;
    if line.len() > MAX_PLAN_LINE {
        bail!(
            "the plan for agent {a} is {} as sent, over the {} an agent reads: use fewer URLs (--urls)",
            size(line.len()),
            size(MAX_PLAN_LINE)
        );
    }
    w.write_all(&line).with_context(|| format!("agent {a}"))?;
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
        match recv(&mut r, MAX_RESULT_LINE).and_then(|v| keys.open(v)) {
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
                    let file = serde_json::from_value(res.clone());
                    if let Err(e) = &file {
                        eprintln!("cache-bench: agent {a}: its result does not parse: {e}");
                    }
                    return (a, file.ok());
                }
            }
            Err(e) => {
                eprintln!("cache-bench: agent {a}: {e:#}");
                return (a, None);
            }
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
        let m = recv(r, MAX_CONTROL_LINE).with_context(|| format!("agent {a} did not answer the plan"))?;
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

    /// An agent session on a loopback connection, served on a thread of
    /// its own with `secret`: (its address, its outcome).
    fn agent_once(secret: &[u8]) -> (String, std::thread::JoinHandle<Result<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let secret = Arc::new(secret.to_vec());
        let agent = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let hs = Handshakes::default().admit(&s).unwrap();
            let dir = std::env::temp_dir();
            serve_one(s, &secret, dir.to_str().unwrap(), &AtomicBool::new(false), hs, &mut false)
        });
        (addr, agent)
    }

    /// A coordinator against a real agent session on loopback, with a
    /// start time `start_in_ms` from now.
    fn session(start_in_ms: i64) -> (Result<String>, Value) {
        let (addr, agent) = agent_once(b"secret!!");
        let mut w = TcpStream::connect(&addr).unwrap();
        let mut r = BufReader::new(w.try_clone().unwrap());
        let k = authenticate_to(&addr, &mut w, &mut r, &Arc::new(b"secret!!".to_vec())).unwrap();
        let mut plan = crate::plan::tests_plan();
        plan.urls = vec![format!("http://{addr}/")];
        plan.duration_s = Some(0.1);
        k.send(&mut w, json!({ "plan": plan, "label": "t", "name": "a" })).unwrap();
        k.open(recv(&mut r, MAX_CONTROL_LINE).unwrap()).unwrap();
        let start = (unix_ms() as i64 + start_in_ms) as u64;
        k.send(&mut w, json!({ "start_unix_ms": start })).unwrap();
        let answer = recv(&mut r, MAX_RESULT_LINE).unwrap_or(Value::Null);
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

    #[test]
    fn a_wrong_secret_is_refused_at_the_proof() {
        let (addr, agent) = agent_once(b"secret!!");
        let mut w = TcpStream::connect(&addr).unwrap();
        let mut r = BufReader::new(w.try_clone().unwrap());
        let Err(e) = authenticate_to(&addr, &mut w, &mut r, &Arc::new(b"not the secret".to_vec())) else { panic!("a wrong secret passed") };
        assert!(format!("{e:#}").contains("authentication failed"), "{e:#}");
        assert!(format!("{:#}", agent.join().unwrap().unwrap_err()).contains("failed to authenticate"));
    }

    /// The agent reads at most the proof's length from a stranger: a JSON
    /// line of a mebibyte is refused after [`AUTH_LINE`] bytes, unparsed.
    #[test]
    fn a_stranger_gets_no_further_than_the_proof_line() {
        let (addr, agent) = agent_once(b"secret!!");
        let s = TcpStream::connect(&addr).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        assert_eq!(recv(&mut r, MAX_HELLO_LINE).unwrap()["proto"], PROTO);
        let mut big = b"[".to_vec();
        big.extend(std::iter::repeat_n(b"0,".as_slice(), 1 << 19).flatten());
        big.extend_from_slice(b"0]\n");
        let _ = (&s).write_all(&big);
        let e = format!("{:#}", agent.join().unwrap().unwrap_err());
        assert!(e.contains(&format!("longer than {AUTH_LINE} bytes")), "{e}");
        assert!(recv(&mut r, MAX_HELLO_LINE).map(|v| v["error"].to_string()).unwrap_or_default().contains("authentication failed"));
    }

    /// The fuzz target's entry, by the path it calls (a valid proof for
    /// the fuzz session's nonces, then lines), on a few inputs.
    #[test]
    fn the_fuzz_entry_takes_anything() {
        let c = Keys { secret: Arc::new(b"fuzz-secret".to_vec()), nonces: "0".repeat(64), me: "c" };
        let mut good = c.auth_line().into_bytes();
        good.extend(c.line(&json!({ "plan": 1, "start_unix_ms": 5 })).unwrap());
        for data in [&good[..], b"", b"auth \n{\"msg\":1}\n", &[0xff; 300], b"[0,0,0,0]\n{}\n"] {
            crate::dist::fuzz_messages(data);
        }
    }

    #[test]
    fn handshakes_past_the_cap_close_the_oldest() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let hs = Handshakes::default();
        let mut clients = Vec::new();
        let mut places = Vec::new();
        for _ in 0..MAX_HANDSHAKES + 2 {
            clients.push(TcpStream::connect(l.local_addr().unwrap()).unwrap());
            let (s, _) = l.accept().unwrap();
            places.push((hs.admit(&s).unwrap(), s));
        }
        assert_eq!(hs.len(), MAX_HANDSHAKES);
        // The two oldest were shut (their peers see the end), the rest not.
        for c in &clients[..2] {
            assert_eq!(std::io::Read::read(&mut &*c, &mut [0u8; 1]).unwrap(), 0);
        }
        clients[2].set_nonblocking(true).unwrap();
        assert!(std::io::Read::read(&mut &clients[2], &mut [0u8; 1]).is_err(), "a newer handshake was closed");
        // A finished handshake gives its place back.
        places.truncate(10);
        assert_eq!(hs.len(), 8);
    }
}
