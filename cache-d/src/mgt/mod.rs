//! The manager process: owns the shared-memory segment, the listening
//! sockets, the parameters and the admin socket (`admin`, its commands in
//! `commands/`); starts the child by running its own binary, relays cache
//! commands to it over a private socket, and restarts it when it dies
//! (`state`). `daemon` detaches from the terminal.

pub mod admin;
pub mod commands;
pub mod daemon;
pub mod state;

use std::io::Write;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::adm;
use common::instance;
use common::segment::SegmentWriter;

use self::state::{install_stop_handlers, ChildSlot, ChildState, Fleet, Mgr, VclState, ADMIN_FILE, SECRET_FILE, STOP};
use crate::cli::{params_from_args, Args};
use crate::error::StartError;

fn bind_admin(spec: &str, secret: bool) -> Result<Vec<StdListener>, StartError> {
    use std::net::ToSocketAddrs;
    let spec = if spec.contains(':') { spec.to_string() } else { format!("{spec}:0") };
    let addrs: Vec<_> = spec.to_socket_addrs().map_err(|e| StartError::Config(format!("-T {spec}: {e}")))?.collect();
    if addrs.is_empty() {
        return Err(StartError::Config(format!("-T {spec}: resolves to no address")));
    }
    if !secret && addrs.iter().any(|a| !a.ip().is_loopback()) {
        return Err(StartError::Config(format!("-T {spec}: refusing a non-loopback admin address without a secret (-S)")));
    }
    addrs.into_iter().map(|a| StdListener::bind(a).map_err(|source| StartError::Listen { addr: a.to_string(), source })).collect()
}

/// Load `-S FILE`, or write a fresh 256-byte secret to DIR/_.secret.
fn load_secret(dir: &Path, arg: Option<&Path>) -> Result<(Option<Vec<u8>>, Option<PathBuf>), StartError> {
    match arg {
        Some(p) if p.as_os_str() == "none" => Ok((None, None)),
        Some(p) => {
            let s = adm::read_file(p, adm::MAX_SECRET).map_err(|e| StartError::Config(format!("-S {e}")))?;
            Ok((Some(s), Some(p.to_path_buf())))
        }
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            let mut s = vec![0u8; 256];
            adm::random(&mut s);
            let path = dir.join(SECRET_FILE);
            let _ = std::fs::remove_file(&path);
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o640).custom_flags(libc::O_NOFOLLOW).open(&path)?;
            f.write_all(&s)?;
            Ok((Some(s), Some(path)))
        }
    }
}

/// `--fleet-secret FILE` and its `--fleet-address`es; not with `-S none`
/// (sessions there need no secret at all).
fn load_fleet(args: &Args) -> Result<Option<Fleet>, StartError> {
    let Some(p) = &args.fleet_secret else { return Ok(None) };
    if args.secret.as_ref().is_some_and(|s| s.as_os_str() == "none") {
        return Err(StartError::Config(
            "--fleet-secret with -S none: give the node a local secret (-S FILE, or none for DIR/_.secret)".into(),
        ));
    }
    let secret = adm::read_file(p, adm::MAX_SECRET).map_err(|e| StartError::Config(format!("--fleet-secret {e}")))?;
    if secret.is_empty() {
        return Err(StartError::Config(format!("--fleet-secret {}: the file is empty", p.display())));
    }
    Ok(Some(Fleet { secret, addresses: args.fleet_address.clone() }))
}

/// The admin file's text: each admin address (`T ip port`), the secret
/// file (`S path`).
fn admin_file(admin: &[StdListener], secret_path: Option<&Path>) -> std::io::Result<String> {
    let mut text = String::new();
    for l in admin {
        let a = l.local_addr()?;
        text.push_str(&format!("T {} {}\n", a.ip(), a.port()));
    }
    if let Some(p) = secret_path {
        let abs = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        text.push_str(&format!("S {}\n", abs.display()));
    }
    Ok(text)
}

/// Bind the -a listeners and the -A frontends (`:80` without either); an
/// https listener needs a certificate.
fn bind_listeners(args: &Args, frontends: Vec<String>, certs: bool) -> Result<Vec<crate::listen::Listener>, StartError> {
    let mut specs = if args.listen.is_empty() && frontends.is_empty() { vec![":80".to_string()] } else { args.listen.clone() };
    specs.extend(frontends);
    let mut listeners = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        listeners.extend(crate::listen::bind(s, i)?);
    }
    if let Some(l) = listeners.iter().find(|l| l.proto == crate::listen::Proto::Https).filter(|_| !certs) {
        return Err(StartError::Config(format!("listener {} speaks https but there is no certificate (give -A FILE)", l.name)));
    }
    Ok(listeners)
}

/// Certificates as (id, PEM bundle).
type Certs = Vec<(String, String)>;

/// Read the -A file and the certificates it names (here, in the manager:
/// the child gets them over its control channel). Returns the frontends'
/// listener specs and the certificates as (id, PEM); an id is the file's
/// name without its extension (made unique with -2, -3...).
fn load_tls(args: &Args) -> Result<(Vec<String>, Certs), StartError> {
    let Some(path) = &args.tls else { return Ok((Vec::new(), Vec::new())) };
    let file = crate::tls::config::read(path).map_err(StartError::Config)?;
    let mut certs: Vec<(String, String)> = Vec::new();
    for p in &file.pem_files {
        let pem = adm::read_file(p, adm::MAX_PEM)
            .map_err(|e| e.to_string())
            .and_then(|b| String::from_utf8(b).map_err(|_| format!("{}: not text", p.display())))
            .map_err(|e| StartError::Config(format!("-A {}: pem-file {e}", path.display())))?;
        let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "cert".into());
        let mut id = stem.clone();
        let mut n = 1;
        while certs.iter().any(|(i, _)| *i == id) {
            n += 1;
            id = format!("{stem}-{n}");
        }
        crate::tls::Cert::from_pem(&id, pem.as_bytes())
            .map_err(|e| StartError::Config(format!("-A {}: pem-file {}: {e}", path.display(), p.display())))?;
        certs.push((id, pem));
    }
    if certs.is_empty() {
        return Err(StartError::Config(format!("-A {}: no pem-file", path.display())));
    }
    Ok((file.frontends.iter().map(|f| format!("{f},https")).collect(), certs))
}

/// The -f file's text (what `vcl.show boot` prints), read on its own
/// first for a message that says what is wrong with it: the compiler's,
/// meant for admin sessions, does not tell (see common::adm::unreadable).
fn boot_source(args: &Args) -> Result<String, StartError> {
    let Some(f) = &args.vcl else { return Ok("// The built-in policy (no -f was given): see cache-d(1).\n".to_string()) };
    let text = adm::read_file(f, adm::MAX_VCL).map_err(|e| StartError::Config(format!("-f {e}")))?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// Compile the boot program and resolve its backend (the child loads it
/// again; here its lookups and probes stop at once).
fn check_boot(args: &Args) -> Result<(), StartError> {
    let (policy, backend) = crate::vcl::load::load_policy(args)?;
    if let Some(p) = policy {
        p.fini();
    }
    if let Some(b) = &backend {
        crate::backend::pool::resolve(b).map_err(|e| StartError::Config(e.to_string()))?;
    }
    Ok(())
}

/// Start the manager: daemonize, bind, create the segment, serve the admin
/// socket, run and supervise the child until SIGTERM.
pub fn run(args: Args) -> Result<(), StartError> {
    let params = params_from_args(&args)?;
    let boot_source = boot_source(&args)?;
    // Compile the VCL (and find the backend) before anything starts, so a
    // bad file is reported at once with its line and column.
    check_boot(&args)?;
    let fleet = load_fleet(&args)?;
    let dir = instance::resolve(args.name.as_deref());
    let ready = if args.foreground || args.debug { None } else { Some(daemon::fork()?) };
    let (frontends, tls_certs) = load_tls(&args)?;
    let started = (|| {
        // The instance dir is checked and locked before anything is
        // written in it (see common::instance::prepare for the rules).
        let lock = instance::prepare(&dir)?;
        let seg = Arc::new(SegmentWriter::create(&dir, params.vsl_space)?);
        let (secret, secret_path) = load_secret(&dir, args.secret.as_deref())?;
        let admin_spec = args.admin.clone().unwrap_or_else(|| "localhost:0".into());
        let admin = if admin_spec == "none" { Vec::new() } else { bind_admin(&admin_spec, secret.is_some())? };
        instance::write_file(&dir, ADMIN_FILE, admin_file(&admin, secret_path.as_deref())?.as_bytes(), 0o640)?;
        // The client listeners after the admin file: a script that starts
        // cache-d and sends a request as soon as the port answers can use
        // cache-adm at once too (the kernel queues the connections until
        // the child runs).
        let listeners = bind_listeners(&args, frontends, !tls_certs.is_empty()).inspect_err(|_| {
            let _ = std::fs::remove_file(dir.join(ADMIN_FILE));
        })?;
        // Last: tools and tests take _.listen as the sign that all is set up.
        crate::acceptor::write_listen_file(&dir, &listeners)?;
        if let Some(p) = &args.pidfile {
            std::fs::write(p, format!("{}\n", std::process::id())).map_err(|source| StartError::PidFile { path: p.clone(), source })?;
        }
        Ok::<_, StartError>((listeners, seg, secret, admin, lock))
    })();
    let (listeners, seg, secret, admin, _lock) = match started {
        Ok(x) => x,
        Err(e) => {
            if let Some(r) = ready {
                r.fail(&e.to_string());
            }
            return Err(e);
        }
    };
    install_stop_handlers();
    let mgr = Arc::new(Mgr {
        args,
        dir: dir.clone(),
        seg,
        params: Mutex::new(params),
        secret,
        fleet,
        started: Instant::now(),
        listeners,
        tls: Mutex::new(state::TlsCerts { staged: tls_certs.clone(), live: tls_certs, warned: Vec::new(), checked: None }),
        child: Mutex::new(ChildSlot { proc: None, ctl: None, state: ChildState::Stopped, wanted: true, last_start: None }),
        panic: Mutex::new(None),
        stopping: AtomicBool::new(false),
        vcls: Mutex::new(VclState {
            list: vec![("boot".into(), boot_source, None)],
            labels: Vec::new(),
            uses: Default::default(),
            order: vec!["boot".into()],
            states: Default::default(),
            active: "boot".into(),
            idle_since: Default::default(),
        }),
    });
    for l in admin {
        let m = mgr.clone();
        std::thread::Builder::new().name("cache-admin".into()).spawn(move || admin::accept_loop(m, l))?;
    }
    if mgr.args.debug {
        // -d: the CLI on stdin/stdout; no child until `start`.
        mgr.slot().wanted = false;
        let m = mgr.clone();
        std::thread::Builder::new().name("cache-cli-stdin".into()).spawn(move || {
            admin::stdin_session(m);
            STOP.store(true, Ordering::SeqCst);
        })?;
        mgr.supervise();
        mgr.shutdown();
        return Ok(());
    }
    let first = mgr.start_child();
    if let Some(r) = ready {
        match &first {
            Ok(()) => r.succeed(),
            Err(e) => r.fail(&e.to_string()),
        }
    }
    first.map_err(|e| StartError::Config(e.to_string()))?;
    daemon::sd_notify("READY=1");
    mgr.supervise();
    daemon::sd_notify("STOPPING=1");
    mgr.shutdown();
    Ok(())
}
