//! The child process: serves traffic. The manager starts it by running its
//! own binary with `--child` (never by forking a live runtime), hands it the
//! listening sockets and a private control socket as inherited descriptors,
//! and the parameters in the environment.

pub mod control;
pub mod loops;
pub mod roam;

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::counters::C;
use common::segment::SegmentWriter;

use crate::acceptor;
use crate::backend::pool::{self, Backend};
use crate::backend::probe;
use crate::cli::Args;
use crate::error::StartError;
use crate::listen::{Listener, Proto, Socket};
use crate::params::Params;
use crate::shared::Shared;

/// Environment variable with the inherited descriptors: `ctl:FD,NAME:FD,...`.
pub const ENV_FDS: &str = "CACHEKIT_CHILD_FDS";
/// Environment variable with the parameters, one `name=value` a line.
pub const ENV_PARAMS: &str = "CACHEKIT_CHILD_PARAMS";
/// File in the instance dir where a panicking child leaves its message.
pub const PANIC_FILE: &str = "_.panic";

/// Write panics (message, location, backtrace) to the instance dir for the
/// manager's `panic.show`, then abort: a panicked child is replaced whole,
/// as Varnish's is.
fn install_panic_hook(dir: PathBuf) {
    std::panic::set_hook(Box::new(move |info| {
        if crate::req::contain::in_contained_task() {
            // A request's task: it unwinds to its session, which fails
            // that request alone (counted in MAIN.sc_vcl_failure, logged).
            eprintln!("cache-d child: a request task panicked (request failed, child goes on): {info}");
            return;
        }
        let bt = std::backtrace::Backtrace::force_capture();
        let when = common::httpdate::format(crate::util::now());
        let text = format!("Panic at: {when}\n{info}\nthread: {}\nbacktrace:\n{bt}\n", std::thread::current().name().unwrap_or("?"));
        let _ = common::instance::write_file(&dir, PANIC_FILE, text.as_bytes(), 0o640);
        eprintln!("cache-d child: {info}");
        std::process::abort();
    }));
}

pub fn run(args: Args) -> Result<(), StartError> {
    one_malloc_arena();
    let dir = common::instance::resolve(args.name.as_deref());
    install_panic_hook(dir.clone());
    let mut params = Params::default();
    for line in std::env::var(ENV_PARAMS).unwrap_or_default().lines() {
        if let Some((k, v)) = line.split_once('=') {
            // vsl_mask comes as the manager shows it, the whole set of tags
            // left out (not a tweak of the default): start from none.
            if k == "vsl_mask" {
                params.vsl_mask = Default::default();
                if v == "(all enabled)" {
                    continue;
                }
            }
            params.set(k, v)?;
        }
    }
    let mut ctl = None;
    let mut listeners = Vec::new();
    for item in std::env::var(ENV_FDS).unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        let bad = || StartError::Config(format!("bad {ENV_FDS} item {item:?}"));
        // ctl:FD, or NAME:FD:tcp|unix:PROTO (a name has no colon).
        let mut f = item.split(':');
        let (name, fd) = (f.next().ok_or_else(bad)?, f.next().ok_or_else(bad)?);
        let fd: i32 = fd.parse().map_err(|_| bad())?;
        // SAFETY: the manager passed us these descriptors for our own use.
        if name == "ctl" {
            ctl = Some(unsafe { UnixStream::from_raw_fd(fd) });
            continue;
        }
        let (kind, proto) = (f.next().ok_or_else(bad)?, f.next().and_then(Proto::from_name).ok_or_else(bad)?);
        let socket = match kind {
            "tcp" => Socket::Tcp(unsafe { std::net::TcpListener::from_raw_fd(fd) }),
            "unix" => Socket::Unix(unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) }),
            "udp" => Socket::Udp(unsafe { std::net::UdpSocket::from_raw_fd(fd) }),
            _ => return Err(bad()),
        };
        listeners.push(Listener { name: name.into(), proto, socket });
    }
    let ctl = ctl.ok_or_else(|| StartError::Config("started as a child without a control socket".into()))?;
    let seg = Arc::new(SegmentWriter::attach(&dir)?);
    seg.set(C::NBackend, 1);
    let (policy, be) = crate::vcl::load::load_policy(&args)?;
    // No backend (a program with only directors): requests that pick none
    // fail to connect ("no address").
    let addrs = match &be {
        Some(b) => pool::resolve(b).map_err(|e| StartError::Config(e.to_string()))?,
        None => Vec::new(),
    };
    // The stores (a persistent one read back before any request).
    let specs = crate::cache::spec::resolve(&args.storage).map_err(StartError::Config)?;
    let cache = crate::cache::Cache::open(&specs, Some(seg.clone())).map_err(StartError::Config)?;
    // A -b backend is Varnish's `backend default { .host = "ARG"; }`: a
    // backend request without Host gets the argument as it was given. An
    // absolute path is `.path = "ARG"`: a Unix socket, Host 0.0.0.0.
    let path = be.as_deref().filter(|b| b.starts_with('/')).map(std::path::PathBuf::from);
    let host_header = if path.is_some() { Some("0.0.0.0".to_string()) } else { be.clone() };
    let cfg = pool::BackendCfg { host_header, path, ..Default::default() };
    let shared = Shared::with_cache(seg.clone(), params, Backend::with_cfg("boot", "default", addrs, cfg), cache);
    if let Some(p) = policy {
        seg.set(C::NBackend, p.backends().len().max(1) as u64);
        p.start(&seg);
        shared.set_policy("boot", p);
    } else {
        probe::start(&shared.backend, seg.clone());
    }
    let shared = Arc::new(shared);
    let cache = shared.cache.clone();
    serve(shared, listeners, ctl)?;
    // What the disk stores have queued goes out before we do.
    cache.flush();
    Ok(())
}

/// Serve until told to stop: listeners, housekeeping and the stop signal
/// on this thread, client connections on the event loops, the manager's
/// commands on a thread of their own.
fn serve(shared: Arc<Shared>, listeners: Vec<Listener>, ctl: UnixStream) -> Result<(), StartError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let loops = Arc::new(crate::child::loops::Loops::start(shared.params().event_loops)?);
    let (tx, rx) = tokio::sync::watch::channel(false);
    // Serving waits for the manager's "go": it first gives us back every
    // loaded program and the active one, so no request of a restarted
    // child runs on the wrong policy. (Connections wait in the backlog.)
    let (go_tx, mut go_rx) = tokio::sync::watch::channel(false);
    let stop = tx.clone();
    let sh = shared.clone();
    std::thread::Builder::new().name("cache-ctl".into()).spawn(move || {
        control::serve(ctl, &sh, &go_tx);
        // The manager went away: stop too.
        let _ = stop.send(true);
    })?;
    rt.block_on(async {
        tokio::spawn(async move {
            crate::mgt::daemon::wait_for_stop().await;
            let _ = tx.send(true);
        });
        let mut stopping = rx.clone();
        tokio::select! {
            _ = go_rx.wait_for(|g| *g) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        acceptor::serve(shared, listeners, loops.clone(), rx, Duration::from_secs(5)).await;
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    loops.shutdown(Duration::from_secs(1));
    Ok(())
}

/// The cache's objects live in one malloc arena (unless the operator set
/// MALLOC_ARENA_MAX): memory that eviction frees is then reused by the
/// next object whichever worker fetches it, instead of stranded in
/// another thread's arena, so the process stays near its -s budget (10 KiB
/// objects, -s malloc,32m, LRU working: 43.4 MB anonymous with glibc's
/// per-thread arenas, 35.1 MB with one; hit throughput is unchanged
/// within noise, glibc's per-thread caches serving the hot path).
fn one_malloc_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable; called before any worker
        // thread exists.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    }
}

/// Path of the panic file of an instance.
pub fn panic_path(dir: &Path) -> PathBuf {
    dir.join(PANIC_FILE)
}
