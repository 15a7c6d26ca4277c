//! The child process: serves traffic. The manager starts it by running its
//! own binary with `--child` (never by forking a live runtime), hands it the
//! listening sockets and a private control socket as inherited descriptors,
//! and the parameters in the environment.

use std::io::{BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::adm::{self, status};
use common::counters::C;
use common::segment::SegmentWriter;

use std::collections::HashMap;

use crate::cli::Args;
use crate::params::Params;
use crate::server::Active;
use crate::server::{self, Listener, Shared};
use crate::{backend, StartError};

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
        if crate::contain::in_contained_task() {
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
    let dir = common::instance::resolve(args.name.as_deref());
    install_panic_hook(dir.clone());
    let mut params = Params::default();
    for line in std::env::var(ENV_PARAMS).unwrap_or_default().lines() {
        if let Some((k, v)) = line.split_once('=') {
            params.set(k, v).map_err(StartError::Config)?;
        }
    }
    if let Some(sz) = args.storage {
        params.storage = sz;
    }
    let mut ctl = None;
    let mut listeners = Vec::new();
    for item in std::env::var(ENV_FDS).unwrap_or_default().split(',').filter(|s| !s.is_empty()) {
        let (name, fd) = item.rsplit_once(':').ok_or_else(|| StartError::Config(format!("bad {ENV_FDS} item {item:?}")))?;
        let fd: i32 = fd.parse().map_err(|_| StartError::Config(format!("bad {ENV_FDS} item {item:?}")))?;
        // SAFETY: the manager passed us these descriptors for our own use.
        if name == "ctl" {
            ctl = Some(unsafe { UnixStream::from_raw_fd(fd) });
        } else {
            let socket = unsafe { std::net::TcpListener::from_raw_fd(fd) };
            listeners.push(Listener { name: name.into(), socket });
        }
    }
    let ctl = ctl.ok_or_else(|| StartError::Config("started as a child without a control socket".into()))?;
    let seg = Arc::new(SegmentWriter::attach(&dir)?);
    seg.set(C::NBackend, 1);
    let (policy, be) = crate::load_policy(&args)?;
    let addrs = backend::resolve(&be).map_err(StartError::Config)?;
    let shared = Shared::new(seg.clone(), params, backend::Backend::new("default", addrs));
    if let Some(p) = policy {
        seg.set(C::NBackend, p.backends().len().max(1) as u64);
        for b in p.backends() {
            crate::probe::start(&b, seg.clone());
        }
        shared.set_policy("boot", p);
    } else {
        crate::probe::start(&shared.backend, seg.clone());
    }
    let shared = Arc::new(shared);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("cache-worker").build()?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    // Serving waits for the manager's "go": it first gives us back every
    // loaded program and the active one, so no request of a restarted
    // child runs on the wrong policy. (Connections wait in the backlog.)
    let (go_tx, mut go_rx) = tokio::sync::watch::channel(false);
    let stop = tx.clone();
    let sh = shared.clone();
    std::thread::Builder::new().name("cache-ctl".into()).spawn(move || {
        control(ctl, &sh, &go_tx);
        // The manager went away: stop too.
        let _ = stop.send(true);
    })?;
    rt.block_on(async {
        tokio::spawn(async move {
            crate::daemon::wait_for_stop().await;
            let _ = tx.send(true);
        });
        let mut stopping = rx.clone();
        tokio::select! {
            _ = go_rx.wait_for(|g| *g) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        server::serve(shared, listeners, rx, Duration::from_secs(5)).await;
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// The programs the child holds: by name, and labels naming them.
struct Programs {
    vcls: HashMap<String, Arc<Active>>,
    /// label → (program, the program as used through the label: its
    /// requests log `VCL_use <program> via <label>`).
    labels: HashMap<String, (String, Arc<Active>)>,
}

impl Programs {
    /// The backends a backend.* pattern names: `name` or `vcl.name`, globs;
    /// without a pattern, the active program's. The -b backend is
    /// `boot.default` while the boot program declares none.
    fn backends(&self, sh: &Shared, pattern: Option<&str>) -> Vec<Arc<crate::backend::Backend>> {
        let active = sh.policy();
        let mut all: Vec<Arc<crate::backend::Backend>> = Vec::new();
        let mut names: Vec<&String> = self.vcls.keys().collect();
        names.sort();
        for n in names {
            let p = &self.vcls[n];
            if pattern.is_none() && !Arc::ptr_eq(&p.policy, &active.policy) {
                continue;
            }
            let bes = p.policy.backends();
            if bes.is_empty() && n == "boot" {
                all.push(sh.backend.clone());
            }
            all.extend(bes);
        }
        if all.is_empty() && pattern.is_none() {
            all.push(sh.backend.clone());
        }
        all.retain(|b| pattern.is_none_or(|p| common::glob::matches(p, &b.full_name()) || common::glob::matches(p, &b.name)));
        all
    }

    /// A program by name or label.
    fn get(&self, name: &str) -> Option<&Arc<Active>> {
        self.vcls.get(name).or_else(|| self.labels.get(name).map(|(_, a)| a))
    }
    /// Requests running on `name` now (directly or through a label): the
    /// holders of its Arcs other than this table and the active slot.
    fn busy(&self, sh: &Shared, name: &str) -> usize {
        let active = sh.policy();
        let count = |a: &Arc<Active>| {
            // `active` itself holds one reference when it is this one.
            let held = 1 + if Arc::ptr_eq(&active, a) { 2 } else { 0 };
            Arc::strong_count(a).saturating_sub(held)
        };
        let own = self.vcls.get(name).map_or(0, count);
        own + self.labels.values().filter(|(t, _)| t == name).map(|(_, a)| count(a)).sum::<usize>()
    }
}

/// Serve the manager's commands on the control socket until it closes.
fn control(ctl: UnixStream, sh: &Shared, go: &tokio::sync::watch::Sender<bool>) {
    let Ok(mut out) = ctl.try_clone() else { return };
    let mut input = BufReader::new(ctl);
    // Loaded programs by name; "boot" is the one we started with.
    let mut progs = Programs { vcls: HashMap::new(), labels: HashMap::new() };
    progs.vcls.insert("boot".into(), sh.policy());
    loop {
        let args = match adm::read_command(&mut input, usize::MAX, false) {
            Ok(Some(Ok(a))) => a,
            Ok(Some(Err(e))) => {
                let _ = out.write_all(&adm::frame(status::SYNTAX, e));
                continue;
            }
            Ok(None) | Err(_) => return,
        };
        let (code, body) = if args.first().is_some_and(|a| a == "go") {
            go.send_replace(true);
            (status::OK, String::new())
        } else {
            command(sh, &mut progs, &args)
        };
        if out.write_all(&adm::frame(code, &body)).is_err() {
            return;
        }
    }
}

/// Commands the child answers (the manager relays them).
fn command(sh: &Shared, progs: &mut Programs, args: &[String]) -> (u16, String) {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["vcl.load" | "vcl.inline", name, src] => {
            let parsed = if a[0] == "vcl.load" { crate::vcl::parse_file(Path::new(src)) } else { crate::vcl::parse_source(name, src) };
            let loaded = parsed
                .map_err(|e| e.to_string())
                .and_then(|p| crate::vcl::compile::compile(&p).map_err(|e| e.render(&p.files)))
                .and_then(|c| crate::vcl::compile::VclPolicy::load(name, c));
            match loaded {
                Ok(p) => {
                    for b in crate::policy::Policy::backends(&p) {
                        crate::probe::start(&b, sh.seg.clone());
                    }
                    progs.vcls.insert(name.to_string(), Arc::new(Active { name: name.to_string(), policy: Arc::new(p) }));
                    (status::OK, String::new())
                }
                Err(e) => (status::PARAM, e),
            }
        }
        ["vcl.use", name] => match progs.get(name) {
            Some(p) => {
                sh.set_active(p.clone());
                (status::OK, format!("VCL '{name}' now active"))
            }
            None => (status::PARAM, format!("No VCL named {name} known.")),
        },
        ["vcl.label", label, target] => {
            let Some(p) = progs.vcls.get(*target) else {
                return (status::PARAM, format!("No VCL named {target} known."));
            };
            let via = Arc::new(Active { name: format!("{target} via {label}"), policy: p.policy.clone() });
            progs.labels.insert(label.to_string(), (target.to_string(), via));
            (status::OK, String::new())
        }
        ["vcl.discard", name] => {
            if progs.labels.remove(*name).is_none() {
                if let Some(p) = progs.vcls.remove(*name) {
                    p.policy.fini();
                }
            }
            (status::OK, String::new())
        }
        ["vcl.busy"] => {
            let mut rows: Vec<String> = progs.vcls.keys().map(|n| format!("{n} {}", progs.busy(sh, n))).collect();
            rows.sort();
            (status::OK, rows.join("\n"))
        }
        ["ping", ..] => (status::OK, format!("PONG {} 1.0", crate::util::now() as u64)),
        ["param.set", name, value] => {
            let mut p = (**sh.params()).clone();
            match p.set(name, value) {
                Ok(()) => {
                    sh.set_params(p);
                    (status::OK, String::new())
                }
                Err(e) => (status::PARAM, e),
            }
        }
        ["debug.panic.worker", ..] => panic!("Don't panic (debug.panic.worker was asked to)"),
        ["debug.panic.request", ..] => {
            sh.debug_panic_request.store(true, std::sync::atomic::Ordering::Relaxed);
            (status::OK, "The next request's task will panic.".into())
        }
        ["backend.list", flags @ ..] => {
            let pattern = flags.iter().find(|f| !f.starts_with('-')).copied();
            let list = progs.backends(sh, pattern);
            let argv: Vec<&str> = std::iter::once("backend.list").chain(flags.iter().copied()).collect();
            (status::OK, crate::probe::backend_list(&list, flags.contains(&"-j"), flags.contains(&"-p"), &argv))
        }
        ["backend.set_health", pattern, state] => {
            let Some(a) = crate::backend::Admin::parse(state) else {
                return (status::PARAM, format!("Invalid state {state}: use auto, healthy or sick"));
            };
            let list = progs.backends(sh, Some(pattern));
            if list.is_empty() {
                return (status::PARAM, format!("No Backends matches: {pattern}"));
            }
            for b in list {
                b.set_admin(a);
            }
            (status::OK, String::new())
        }
        ["ban", rest @ ..] => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            match sh.cache.ban(&rest, crate::util::now(), sh.params().ban_dups) {
                Ok(_) => (status::OK, String::new()),
                Err(e) => (status::PARAM, e.to_string()),
            }
        }
        ["ban.list", flags @ ..] => {
            let list = sh.cache.ban_list();
            if flags.contains(&"-j") {
                let v: Vec<_> = list
                    .iter()
                    .map(
                        |b| serde_json::json!({"time": format!("{:.6}", b.time), "refs": b.refs, "completed": b.completed, "spec": b.spec}),
                    )
                    .collect();
                let argv: Vec<&str> = std::iter::once("ban.list").chain(flags.iter().copied()).collect();
                let doc = serde_json::json!([2, argv, (crate::util::now() * 1000.0).round() / 1000.0, v]);
                return (status::OK, serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
            let mut s = String::from("Present bans:\n");
            for b in list {
                s.push_str(&format!("{:10.6} {:5} {}  {}\n", b.time, b.refs, if b.completed { "C" } else { "-" }, b.spec));
            }
            (status::OK, s)
        }
        _ => (status::UNKNOWN, "Unknown request.\nType 'help' for more info.".into()),
    }
}

/// Path of the panic file of an instance.
pub fn panic_path(dir: &Path) -> PathBuf {
    dir.join(PANIC_FILE)
}
