//! Issue 32, item 5: a `cache-bench agent` authenticates a coordinator on a
//! small bounded message before it reads anything large or parses any JSON
//! (a 32 MiB line of `[0,0,…]` once took it to 552 MB, four such
//! connections to 2 GB), and strangers' idle handshakes are capped and
//! timed out without locking a coordinator out. The real executable on
//! loopback, its resident memory sampled from /proc during the probe.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What the agent may reach, at rest or under the probe.
const RSS_LIMIT_KB: u64 = 64 * 1024;

/// A cache-bench process that prints its address on its first line.
struct Proc {
    child: Child,
    addr: String,
}

impl Proc {
    fn start(args: &[&str]) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cache-bench"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start cache-bench");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        assert!(addr.contains(':'), "cache-bench {args:?} said {line:?}");
        Proc { child, addr }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An origin, an agent and the secret they are run with.
struct Bench {
    origin: Proc,
    agent: Proc,
    secret: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Bench {
    fn start() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "correct horse battery staple\n").unwrap();
        let origin = Proc::start(&["origin", "--listen", "127.0.0.1:0"]);
        let (s, out) = (secret.to_str().unwrap(), dir.path().to_str().unwrap());
        let agent = Proc::start(&["agent", "--listen", "127.0.0.1:0", "--secret-file", s, "--out-dir", out]);
        Bench { origin, agent, secret, _dir: dir }
    }

    /// A real coordinator run of `n` requests on the agent: (exit code,
    /// summary, how long it took).
    fn run(&self, n: u32) -> (i32, Value, Duration) {
        let url = format!("http://{}/size/100", self.origin.addr);
        let t0 = Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_cache-bench"))
            .args(["run", &url, "-n", &n.to_string(), "-c", "1", "--json", "-q"])
            .args(["--agents", &self.agent.addr, "--secret-file", self.secret.to_str().unwrap()])
            .output()
            .unwrap();
        let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(v.is_object(), "no summary from the coordinator: {err}");
        (o.status.code().unwrap_or(-1), v, t0.elapsed())
    }
}

/// Resident memory of a process, in kB.
fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// Samples a process's RSS every few milliseconds until dropped; past
/// the limit it kills the process (a failing run must not take the test
/// host's memory with it).
struct Sampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let (peak, stop) = (Arc::new(AtomicU64::new(rss_kb(pid))), Arc::new(AtomicBool::new(false)));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let now = rss_kb(pid);
                p.fetch_max(now, Ordering::Relaxed);
                if now > 4 * RSS_LIMIT_KB {
                    // SAFETY: a plain kill(2) of our own child.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Sampler { peak, stop, thread: Some(thread) }
    }

    /// The highest RSS seen, in kB.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

/// A stranger: reads the hello, sends `line`, reads what comes back until
/// the agent closes (at most 30 s).
fn stranger(addr: &str, line: &[u8]) -> String {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut hello = String::new();
    let _ = r.read_line(&mut hello);
    let _ = (&s).write_all(line);
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    hello + &String::from_utf8_lossy(&rest)
}

#[test]
fn a_32_mib_json_line_before_authentication_costs_the_agent_nothing() {
    let b = Bench::start();
    let pid = b.agent.child.id();
    // A line the old agent read whole (at most 32 MiB) and parsed: a JSON
    // array of 16 million zeros, from four connections at once.
    let mut line = Vec::with_capacity(32 << 20);
    line.push(b'[');
    while line.len() < (32 << 20) - 3 {
        line.extend_from_slice(b"0,");
    }
    line.truncate((32 << 20) - 3);
    line.extend_from_slice(b"0]\n");
    let line = Arc::new(line);
    let sampler = Sampler::start(pid);
    let probes: Vec<_> = (0..4)
        .map(|_| {
            let (addr, line) = (b.agent.addr.clone(), line.clone());
            std::thread::spawn(move || stranger(&addr, &line))
        })
        .collect();
    let answers: Vec<String> = probes.into_iter().map(|p| p.join().unwrap()).collect();
    let peak = sampler.finish();
    assert!(peak < RSS_LIMIT_KB, "the agent reached {} MB for four strangers' 32 MiB lines", peak / 1024);
    for a in &answers {
        assert!(a.contains("\"hello\"") && a.contains("authentication failed"), "{a}");
    }
    // And it still serves a real coordinator.
    let (code, v, _) = b.run(50);
    assert_eq!((code, v["requests"].as_u64()), (0, Some(50)), "{v:#}");
}

#[test]
fn idle_handshakes_are_capped_and_timed_out_without_locking_a_coordinator_out() {
    let b = Bench::start();
    let pid = b.agent.child.id();
    let sampler = Sampler::start(pid);
    // Far more idle connections than the agent holds handshakes for.
    let t0 = Instant::now();
    let idle: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(&b.agent.addr).unwrap()).collect();
    // A coordinator still gets in, and at once (not after the handshake
    // deadline frees a place).
    let (code, v, took) = b.run(50);
    assert_eq!((code, v["requests"].as_u64()), (0, Some(50)), "{v:#}");
    assert!(took < Duration::from_secs(5), "the coordinator waited {took:?} behind idle connections");
    // Every idle one is closed: the oldest to make room, the rest at the
    // handshake deadline (10 s).
    for s in &idle {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        let r = (&*s).read_to_end(&mut buf);
        assert!(r.is_ok(), "an idle connection was still open after {:?}: {r:?}", t0.elapsed());
    }
    assert!(t0.elapsed() < Duration::from_secs(15), "idle connections were kept {:?}", t0.elapsed());
    let peak = sampler.finish();
    assert!(peak < RSS_LIMIT_KB, "the agent reached {} MB for 300 idle connections", peak / 1024);
}
