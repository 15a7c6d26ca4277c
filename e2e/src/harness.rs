//! The end-to-end test harness: real processes on loopback with free ports and temp
//! instance dirs; no fixed ports, no sleeps as synchronisation (we poll for
//! state with deadlines).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The workspace's root directory.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Path of a workspace binary: in the target directory of the test
/// executable (`target/<profile>/deps/<test>` → `target/<profile>/<name>`);
/// the test command builds the whole workspace first.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps");
    let p = dir.join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --workspace` before the tests", p.display());
    p
}

/// Poll `f` until it returns Some, or panic after `secs` seconds.
pub fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The test origin (`cache-bench origin`) on a free port.
pub struct Origin {
    child: Child,
    pub port: u16,
}

impl Origin {
    pub fn start() -> Origin {
        Origin::start_at("127.0.0.1:0")
    }

    /// On a given address (to restart an origin where it was).
    pub fn start_at(addr: &str) -> Origin {
        let mut child = Command::new(bin("cache-bench"))
            .args(["origin", "--listen", addr])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cache-bench origin");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("origin said {line:?}"));
        Origin { child, port }
    }
}

impl Origin {
    /// How many requests it has answered (its /__stats, which does not
    /// count itself).
    pub fn requests(&self) -> u64 {
        let r = Client::connect(self.port).get("/__stats", "");
        let v: serde_json::Value = serde_json::from_slice(&r.body).expect("/__stats is JSON");
        v["requests"].as_u64().expect("/__stats has requests")
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cache-d in the foreground with its own instance dir.
pub struct Daemon {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub port: u16,
}

impl Daemon {
    pub fn start(dir: &Path, backend: &str, extra: &[&str]) -> Daemon {
        let mut args = vec!["-b", backend];
        args.extend_from_slice(extra);
        Daemon::start_args(dir, &args)
    }

    /// Start with these arguments (after -F -a 127.0.0.1:0 -n DIR).
    pub fn start_args(dir: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_env(dir, extra, &[])
    }

    /// The same, with these environment variables set for it.
    pub fn start_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let _ = std::fs::remove_file(dir.join("_.listen"));
        let child = Command::new(bin("cache-d"))
            .args(["-F", "-a", "127.0.0.1:0", "-n"])
            .arg(dir)
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cache-d");
        let port = wait_for(10, "cache-d to publish its listen address", || {
            let text = std::fs::read_to_string(dir.join("_.listen")).ok()?;
            text.lines().next()?.split(' ').nth(2)?.parse().ok()
        });
        Daemon { child: Some(child), dir: dir.to_path_buf(), port }
    }

    /// SIGTERM and wait; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let st = c.wait().ok()?;
        st.code()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The Debian varnishd in the foreground, `-b backend`, on a free port
/// (for compatibility tests; check `have("varnishd")` first).
pub struct Varnishd {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

impl Varnishd {
    pub fn start(dir: &Path, backend: &str) -> Varnishd {
        Varnishd::start_args(dir, backend, &[])
    }

    /// With more arguments (-T, -S...).
    pub fn start_args(dir: &Path, backend: &str, extra: &[&str]) -> Varnishd {
        let mut args = vec!["-b", backend];
        args.extend_from_slice(extra);
        Varnishd::start_with(dir, &args)
    }

    /// With a VCL file instead of -b.
    pub fn start_vcl(dir: &Path, vcl: &Path) -> Varnishd {
        Varnishd::start_with(dir, &["-f", vcl.to_str().unwrap()])
    }

    fn start_with(dir: &Path, args: &[&str]) -> Varnishd {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("varnishd")
            .args(["-j", "none", "-F", "-a", &format!("127.0.0.1:{port}")])
            .args(args)
            .arg("-n")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start varnishd");
        wait_for(30, "varnishd to serve", || std::net::TcpStream::connect(("127.0.0.1", port)).ok());
        Varnishd { child, port, dir: dir.to_path_buf() }
    }
}

impl Drop for Varnishd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a tool to completion.
pub fn run(name: &str, args: &[&str]) -> Output {
    Command::new(bin(name)).args(args).stdin(Stdio::null()).output().expect("run tool")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A long-running reader whose stdout and stderr lines are collected.
pub struct Follower {
    pub child: Child,
    lines: mpsc::Receiver<(bool, String)>,
    pub out: Vec<String>,
    pub err: Vec<String>,
}

impl Follower {
    pub fn start(name: &str, args: &[&str]) -> Follower {
        let mut child = Command::new(bin(name))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start follower");
        let (tx, rx) = mpsc::channel();
        let (o, e) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(o).lines().map_while(Result::ok) {
                let _ = tx.send((true, l));
            }
        });
        std::thread::spawn(move || {
            for l in BufReader::new(e).lines().map_while(Result::ok) {
                let _ = tx2.send((false, l));
            }
        });
        Follower { child, lines: rx, out: Vec::new(), err: Vec::new() }
    }

    fn drain(&mut self) {
        while let Ok((is_out, l)) = self.lines.try_recv() {
            if is_out {
                self.out.push(l);
            } else {
                self.err.push(l);
            }
        }
    }

    /// Has a stdout (or stderr) line satisfied `pred` yet?
    pub fn has_line(&mut self, on_stdout: bool, pred: impl Fn(&str) -> bool) -> bool {
        self.drain();
        let v = if on_stdout { &self.out } else { &self.err };
        v.iter().any(|l| pred(l))
    }

    /// Wait until a stdout (or stderr) line satisfies `pred`.
    pub fn wait_line(&mut self, secs: u64, on_stdout: bool, what: &str, pred: impl Fn(&str) -> bool) {
        wait_for(secs, what, || {
            self.drain();
            let v = if on_stdout { &self.out } else { &self.err };
            v.iter().any(|l| pred(l)).then_some(())
        });
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 client on one keep-alive connection.
pub struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl Client {
    pub fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { s, buf: Vec::new() }
    }

    /// This end's port (to find the connection in `ss`).
    pub fn local_port(&self) -> u16 {
        self.s.local_addr().unwrap().port()
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    pub fn get(&mut self, path: &str, headers: &str) -> Resp {
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: cachekit-test\r\n{headers}\r\n");
        self.send_raw(req.as_bytes());
        self.read_response(false).expect("a response")
    }

    fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 65536];
        match self.s.read(&mut tmp) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }

    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let l = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Some(l);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Read one response; None if the connection closed first. A body that
    /// is cut short also gives None (a clean-looking truncation is a bug).
    pub fn read_response(&mut self, head_only: bool) -> Option<Resp> {
        let status_line = self.line()?;
        let status = status_line.split(' ').nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let l = self.line()?;
            if l.is_empty() {
                break;
            }
            let (n, v) = l.split_once(':')?;
            headers.push((n.to_string(), v.trim().to_string()));
        }
        let mut r = Resp { status, headers, body: Vec::new() };
        if head_only || status == 204 || status == 304 {
            return Some(r);
        }
        if r.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let size = usize::from_str_radix(self.line()?.split(';').next()?.trim(), 16).ok()?;
                if size == 0 {
                    while !self.line()?.is_empty() {}
                    break;
                }
                let chunk = self.take(size)?;
                r.body.extend_from_slice(&chunk);
                self.take(2)?;
            }
        } else if let Some(n) = r.header("content-length").and_then(|v| v.parse().ok()) {
            r.body = self.take(n)?;
        } else {
            while self.fill() {}
            r.body = std::mem::take(&mut self.buf);
        }
        Some(r)
    }

    /// True if the server closed the connection (EOF within the timeout).
    pub fn closed(&mut self) -> bool {
        !self.fill()
    }
}

/// Value of a counter in `cache-stat -1` output.
pub fn counter(once: &str, name: &str) -> Option<u64> {
    once.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == name).then(|| f.next()?.parse().ok()).flatten()
    })
}

/// Read counters with cache-stat -1.
pub fn stat(dir: &Path) -> String {
    let o = run("cache-stat", &["-1", "-n", dir.to_str().unwrap()]);
    assert!(o.status.success(), "cache-stat failed: {}", stderr(&o));
    stdout(&o)
}

/// Wait (10 s at most) until the log of the instance in `dir` holds at
/// least `n` records with `tag`. A transaction's records are committed
/// just after its last byte is written (a request's `ReqAcct`, a
/// session's `SessClose` once its client has gone): a client that has
/// its response can be ahead of them, and of the counters counted with
/// them (`s_resp_*`).
pub fn wait_logged(dir: &Path, tag: &str, n: usize) {
    let d = dir.to_str().unwrap();
    wait_for(10, &format!("{n} {tag} records in {d}"), || {
        (stdout(&run("cache-log", &["-d", "-g", "raw", "-i", tag, "-n", d])).lines().count() >= n).then_some(())
    });
}

/// A VCL file from tests/vcl with the origin's port filled in.
pub fn vcl_file(dir: &Path, name: &str, origin_port: u16) -> PathBuf {
    let src = std::fs::read_to_string(workspace().join("cache-d/tests/vcl").join(name)).unwrap();
    vcl_src(dir, name, &src, origin_port)
}

/// The VCL `src` written to `dir/name`, ORIGIN_PORT in it replaced by the
/// origin's port.
pub fn vcl_src(dir: &Path, name: &str, src: &str, origin_port: u16) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, src.replace("ORIGIN_PORT", &origin_port.to_string())).unwrap();
    path
}

/// Is `tool` installed? Under CI it must be (.ci/run installs varnish and
/// tmux), so a missing one fails loudly there instead of skipping.
pub fn have(tool: &str) -> bool {
    let found = Command::new(tool).arg("-V").output().is_ok();
    assert!(found || std::env::var_os("CI").is_none(), "{tool} is missing: .ci/run installs it");
    found
}

/// A private tmux server for one test, killed when dropped (also when the
/// test fails), so no session outlives its test.
pub struct Tmux {
    sock: PathBuf,
    pub session: String,
}

impl Tmux {
    /// Start `cmd` in a detached WxH session.
    pub fn start(dir: &Path, name: &str, w: u16, h: u16, cmd: &str) -> Tmux {
        let t = Tmux { sock: dir.join("tmux.sock"), session: format!("{name}{}", std::process::id()) };
        t.run(&["new-session", "-d", "-s", &t.session, "-x", &w.to_string(), "-y", &h.to_string(), cmd]);
        t
    }
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux").arg("-S").arg(&self.sock).args(args).output().unwrap()
    }
    /// Type keys (tmux send-keys words: "Enter", "Tab"...).
    pub fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", &self.session];
        a.extend_from_slice(keys);
        self.run(&a);
    }
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", &self.session]).stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// (ip:port, secret path) of an instance's admin socket, from DIR/_.admin.
pub fn admin(dir: &Path) -> (String, String) {
    let text = std::fs::read_to_string(dir.join("_.admin")).unwrap();
    let t = text.lines().find_map(|l| l.strip_prefix("T ")).unwrap().replace(' ', ":");
    let s = text.lines().find_map(|l| l.strip_prefix("S ")).unwrap().to_string();
    (t, s)
}
