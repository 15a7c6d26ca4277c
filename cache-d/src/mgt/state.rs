//! The manager's state: the child's lifecycle (start, stop, supervise,
//! restart after a crash), the parameters, the loaded VCL sources and the
//! last panic, shared by the supervisor and every admin session.

use std::io::{BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::adm::{self, status};
use common::counters::C;
use common::segment::SegmentWriter;

use common::instance;

use crate::child;
use crate::cli::Args;
use crate::listen::Listener;
use crate::params::Params;

/// File in the instance dir naming the admin addresses (`T ip port`) and
/// the secret file (`S path`), so `cache-adm -n` needs nothing else.
pub const ADMIN_FILE: &str = "_.admin";
/// The generated secret, when `-S` is not given.
pub const SECRET_FILE: &str = "_.secret";

/// Why the child could not be started or stopped (the texts are what
/// `start` and `stop` answer).
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("Child in state {}", .0.word())]
    State(ChildState),
    #[error("{0}: {1}")]
    Io(&'static str, std::io::Error),
}

/// The child's lifecycle, as `status` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildState {
    Stopped,
    Starting,
    Running,
    Stopping,
}

impl ChildState {
    pub fn word(self) -> &'static str {
        match self {
            ChildState::Stopped => "stopped",
            ChildState::Starting => "starting",
            ChildState::Running => "running",
            ChildState::Stopping => "stopping",
        }
    }
}

pub(super) struct ChildSlot {
    pub(super) proc: Option<Child>,
    pub(super) ctl: Option<(UnixStream, BufReader<UnixStream>)>,
    pub(super) state: ChildState,
    /// Should a child be running (false after `stop`)?
    pub(super) wanted: bool,
    pub(super) last_start: Option<Instant>,
}

/// The last panic: its text and whether `panic.clear` has cleared it.
pub struct PanicRecord {
    pub text: String,
}

/// The manager's state, shared by the supervisor and admin sessions.
/// Certificates as (id, PEM bundle): the live set every child gets, and
/// the staged one `tls.cert.commit` makes live.
#[derive(Default)]
pub struct TlsCerts {
    pub live: Vec<(String, String)>,
    pub staged: Vec<(String, String)>,
    /// The live ones last warned about as close to their end (warned
    /// again when that list changes).
    pub warned: Vec<String>,
    /// When they were last looked at (a commit looks again at once).
    pub checked: Option<std::time::Instant>,
}

/// `--fleet-secret`: the fleet's secret, from which the node secrets of
/// this node's admin addresses are derived (`common::adm::node_secret`;
/// why, in common/src/adm.rs), and the `--fleet-address` addresses taken
/// besides the one a connection arrives at.
pub struct Fleet {
    pub secret: Vec<u8>,
    pub addresses: Vec<std::net::SocketAddr>,
}

pub struct Mgr {
    pub args: Args,
    pub dir: PathBuf,
    pub seg: Arc<SegmentWriter>,
    pub params: Mutex<Params>,
    /// The local secret (-S, or the generated DIR/_.secret); None with
    /// `-S none`.
    pub secret: Option<Vec<u8>>,
    pub fleet: Option<Fleet>,
    pub started: Instant,
    pub(super) listeners: Vec<Listener>,
    /// The certificates (from -A and tls.cert.*), handed to every child.
    pub tls: Mutex<TlsCerts>,
    pub(super) child: Mutex<ChildSlot>,
    pub panic: Mutex<Option<PanicRecord>>,
    pub stopping: AtomicBool,
    pub vcls: Mutex<VclState>,
}

/// The loaded VCL programs (the manager keeps the sources, so a new child
/// gets them all back) and the active one.
pub struct VclState {
    /// (name, source text, file it came from).
    pub list: Vec<(String, String, Option<PathBuf>)>,
    /// Labels: (label, the program it names).
    pub labels: Vec<(String, String)>,
    /// The labels each program's `return (vcl(LABEL))` names: such a
    /// label cannot be discarded, nor pointed anywhere that loops back.
    pub uses: std::collections::HashMap<String, Vec<String>>,
    /// Programs and labels in the order they were made (vcl.list's).
    pub order: Vec<String>,
    /// vcl.state of the programs not in "auto".
    pub states: std::collections::HashMap<String, String>,
    /// The active program or label.
    pub active: String,
    /// Since when each program not in use has been so: an `auto` one
    /// shows cold after vcl_cooldown, as Varnish cools it.
    pub idle_since: std::collections::HashMap<String, Instant>,
}

pub(super) static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub(super) fn install_stop_handlers() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGTERM, on_stop as *const () as usize);
        libc::signal(libc::SIGINT, on_stop as *const () as usize);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

fn clear_cloexec(fd: i32) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
        }
    }
}

/// The `-T` address: default localhost:0; refuse non-loopback without a secret.
impl Mgr {
    /// Say what happened to the child: on stderr in the foreground, to
    /// syslog (daemon facility) when daemonized, where stderr is gone.
    pub fn log(&self, msg: &str) {
        if self.args.foreground || self.args.debug {
            eprintln!("cache-d: {msg}");
            return;
        }
        if let Ok(c) = std::ffi::CString::new(msg.replace('\0', " ")) {
            // SAFETY: a constant format string and a NUL-terminated argument.
            unsafe { libc::syslog(libc::LOG_DAEMON | libc::LOG_ERR, c"cache-d: %s".as_ptr(), c.as_ptr()) };
        }
    }

    pub(super) fn slot(&self) -> MutexGuard<'_, ChildSlot> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn params(&self) -> MutexGuard<'_, Params> {
        self.params.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn child_state(&self) -> ChildState {
        self.slot().state
    }

    /// Start a child (if none runs).
    pub fn start_child(&self) -> Result<(), ChildError> {
        let mut slot = self.slot();
        if slot.proc.is_some() {
            return Err(ChildError::State(slot.state));
        }
        slot.state = ChildState::Starting;
        slot.wanted = true;
        let (mine, theirs) = UnixStream::pair().map_err(|e| ChildError::Io("control socket", e))?;
        let mut fds = vec![format!("ctl:{}", theirs.as_raw_fd())];
        clear_cloexec(theirs.as_raw_fd());
        for l in &self.listeners {
            let fd = l.socket.raw_fd();
            clear_cloexec(fd);
            let kind = match l.socket {
                crate::listen::Socket::Unix(_) => "unix",
                crate::listen::Socket::Udp(_) => "udp",
                crate::listen::Socket::Tcp(_) => "tcp",
            };
            fds.push(format!("{}:{fd}:{kind}:{}", l.name, l.proto.name()));
        }
        // Every parameter the child can set (not the ones not available here).
        let settable = |d: &&crate::params::ParamDef| d.effect != crate::params::Effect::Unavailable;
        let params: String = self.params().all().filter(|(d, _)| settable(d)).map(|(d, v)| format!("{}={v}\n", d.name)).collect();
        self.seg.new_generation(|name| name.starts_with("MGT."));
        let exe = std::env::current_exe().map_err(|e| ChildError::Io("cannot find our own binary", e))?;
        let mut cmd = Command::new(exe);
        cmd.arg("--child").arg("-n").arg(&self.dir);
        if let Some(b) = &self.args.backend {
            cmd.arg("-b").arg(b);
        }
        if let Some(f) = &self.args.vcl {
            cmd.arg("-f").arg(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone()));
        }
        for s in &self.args.storage {
            cmd.arg("-s").arg(crate::cache::spec::render(s));
        }
        cmd.env(child::ENV_FDS, fds.join(",")).env(child::ENV_PARAMS, params);
        if !self.args.foreground && !self.args.debug {
            // A daemon's child must not hold the starting terminal's (or a
            // caller's) pipes open.
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        }
        let proc = cmd.spawn().map_err(|e| ChildError::Io("could not start the child", e))?;
        drop(theirs);
        let reader = BufReader::new(mine.try_clone().map_err(|e| ChildError::Io("control socket", e))?);
        slot.proc = Some(proc);
        slot.ctl = Some((mine, reader));
        slot.state = ChildState::Running;
        slot.last_start = Some(Instant::now());
        self.seg.add(C::MgtChildStart, 1);
        drop(slot);
        self.replay_vcls();
        self.replay_certs();
        // Now it may serve.
        let (code, body) = self.relay(&["go".to_string()]);
        if code != status::OK {
            self.log(&format!("the new child did not take \"go\": {body}"));
        }
        Ok(())
    }

    /// Give a new child every loaded program and the active choice.
    fn replay_vcls(&self) {
        let (list, labels, active) = {
            let v = self.vcls.lock().unwrap_or_else(|e| e.into_inner());
            (v.list.clone(), v.labels.clone(), v.active.clone())
        };
        for (name, src, path) in list.iter().filter(|(n, _, _)| n != "boot") {
            let cmd = match path {
                Some(p) => vec!["vcl.load".to_string(), name.clone(), p.display().to_string()],
                None => vec!["vcl.inline".to_string(), name.clone(), src.clone()],
            };
            let (code, body) = self.relay(&cmd);
            if code != status::OK {
                self.log(&format!("could not reload VCL {name} in the new child: {body}"));
            }
        }
        for (label, target) in labels {
            let _ = self.relay(&["vcl.label".to_string(), label, target]);
        }
        if active != "boot" {
            let _ = self.relay(&["vcl.use".to_string(), active]);
        }
    }

    /// Give a new child the certificates and make them live.
    fn replay_certs(&self) {
        let live = self.tls.lock().unwrap_or_else(|e| e.into_inner()).live.clone();
        if live.is_empty() {
            return;
        }
        if let Err(why) = self.send_certs(&live) {
            self.log(&format!("the new child refused the certificates: {why}"));
        }
    }

    /// Make `set` the child's live certificates: clear its staging, load
    /// each, commit. Nothing changes in the child unless all load.
    pub fn send_certs(&self, set: &[(String, String)]) -> Result<(), String> {
        let relay = |args: &[&str]| {
            let (code, body) = self.relay(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            if code == status::OK {
                Ok(())
            } else {
                Err(body)
            }
        };
        relay(&["tls.cert.clear"])?;
        for (id, pem) in set {
            relay(&["tls.cert.load", id, pem])?;
        }
        relay(&["tls.cert.commit"])
    }

    /// Ask the child to stop and wait for it (up to `deadline`).
    pub fn stop_child(&self, deadline: Duration) -> Result<(), ChildError> {
        let mut slot = self.slot();
        slot.wanted = false;
        let Some(mut proc) = slot.proc.take() else {
            return Err(ChildError::State(slot.state));
        };
        slot.state = ChildState::Stopping;
        slot.ctl = None;
        // SAFETY: signalling our own child.
        unsafe { libc::kill(proc.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + deadline;
        loop {
            if let Ok(Some(_)) = proc.try_wait() {
                break;
            }
            if Instant::now() >= until {
                let _ = proc.kill();
                let _ = proc.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.seg.add(C::MgtChildExit, 1);
        slot.state = ChildState::Stopped;
        Ok(())
    }

    /// Send a command to the child and return its answer.
    pub fn relay(&self, args: &[String]) -> (u16, String) {
        let timeout = self.params().cli_timeout;
        let mut slot = self.slot();
        let Some((w, r)) = slot.ctl.as_mut() else {
            return (status::UNKNOWN, "Unknown request in manager process (child not running).".into());
        };
        let line: Vec<String> = args.iter().map(|a| adm::quote(a)).collect();
        let _ = w.set_write_timeout(Some(timeout.max(Duration::from_millis(100))));
        let _ = r.get_ref().set_read_timeout(Some(timeout.max(Duration::from_millis(100))));
        if w.write_all(format!("{}\n", line.join(" ")).as_bytes()).is_err() {
            return (status::COMMS, "Child communication failure".into());
        }
        match adm::read_response(r) {
            Ok(x) => x,
            Err(e) => (status::COMMS, format!("Child communication failure ({e})")),
        }
    }

    /// Once a minute (and at once after a commit): count the live
    /// certificates within tls_cert_warn of their end in
    /// MAIN.tls_cert_expiring, and name them in the log when that list
    /// changes.
    fn check_certs(&self) {
        let warn = self.params().tls_cert_warn as i64;
        let mut t = self.tls.lock().unwrap_or_else(|e| e.into_inner());
        if t.checked.is_some_and(|at| at.elapsed() < Duration::from_secs(60)) {
            return;
        }
        t.checked = Some(Instant::now());
        let now = crate::tls::info::now();
        let mut close: Vec<String> = Vec::new();
        for (id, pem) in &t.live {
            if let Some(i) = crate::tls::info::of_pem(pem.as_bytes()).filter(|i| i.close_to_end(now, warn)) {
                let when = if i.not_after <= now { "expired" } else { "expires" };
                close.push(format!("{id} ({when} {})", crate::tls::info::utc(i.not_after)));
            }
        }
        self.seg.set(C::TlsCertExpiring, close.len() as u64);
        if close != t.warned {
            if !close.is_empty() {
                self.log(&format!("Warning: certificate(s) within tls_cert_warn of their end: {}", close.join(", ")));
            }
            t.warned = close;
        }
    }

    /// The https listeners' names (every certificate serves them all).
    pub fn https_listeners(&self) -> Vec<&str> {
        self.listeners.iter().filter(|l| l.proto == crate::listen::Proto::Https).map(|l| &*l.name).collect()
    }

    /// Watch the child until SIGTERM: restart it when it dies, keep the
    /// uptime and heartbeat current.
    pub(super) fn supervise(&self) {
        let mut last_tick = Instant::now() - Duration::from_secs(2);
        while !STOP.load(Ordering::SeqCst) {
            if last_tick.elapsed() >= Duration::from_secs(1) {
                self.seg.set(C::MgtUptime, self.started.elapsed().as_secs());
                self.seg.heartbeat();
                last_tick = Instant::now();
                self.check_certs();
            }
            self.reap();
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Notice a dead child: count it, keep its panic, restart it.
    fn reap(&self) {
        let restart = {
            let mut slot = self.slot();
            let Some(proc) = slot.proc.as_mut() else {
                return self.maybe_restart(slot);
            };
            let st = match proc.try_wait() {
                Ok(Some(st)) => st,
                _ => return,
            };
            let pid = proc.id();
            slot.proc = None;
            slot.ctl = None;
            slot.state = ChildState::Stopped;
            let panic = std::fs::read_to_string(child::panic_path(&self.dir)).ok();
            let _ = std::fs::remove_file(child::panic_path(&self.dir));
            if let Some(text) = panic {
                self.seg.add(C::MgtChildPanic, 1);
                self.log(&format!("child (pid {pid}) panicked:\n{text}"));
                *self.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(PanicRecord { text });
            }
            match (st.signal(), st.code()) {
                (Some(sig), _) => {
                    self.seg.add(C::MgtChildDied, 1);
                    if st.core_dumped() {
                        self.seg.add(C::MgtChildDump, 1);
                    }
                    self.log(&format!("child (pid {pid}) died from signal {sig}"));
                }
                (None, Some(0)) => self.seg.add(C::MgtChildExit, 1),
                (None, code) => {
                    self.seg.add(C::MgtChildStop, 1);
                    self.log(&format!("child (pid {pid}) exited with status {}", code.unwrap_or(-1)));
                }
            }
            slot.wanted
        };
        if restart {
            let slot = self.slot();
            self.maybe_restart(slot);
        }
    }

    fn maybe_restart(&self, slot: MutexGuard<'_, ChildSlot>) {
        if !slot.wanted || slot.proc.is_some() || !self.params().auto_restart || self.stopping.load(Ordering::SeqCst) {
            return;
        }
        // At most one start a second, so a child that dies at once does
        // not spin; the first restart after a long run is immediate.
        if slot.last_start.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return;
        }
        drop(slot);
        if let Err(e) = self.start_child() {
            self.log(&format!("could not restart the child: {e}"));
        }
    }

    /// SIGTERM: stop the child (it finishes in-flight requests), mark the
    /// segment stopped, remove what the instance dir should not keep.
    pub(super) fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.stop_child(Duration::from_secs(6));
        self.seg.close();
        for f in [instance::LISTEN_FILE, ADMIN_FILE, child::PANIC_FILE] {
            let _ = std::fs::remove_file(self.dir.join(f));
        }
        if self.args.secret.is_none() {
            let _ = std::fs::remove_file(self.dir.join(SECRET_FILE));
        }
        if let Some(p) = &self.args.pidfile {
            let _ = std::fs::remove_file(p);
        }
    }
}
