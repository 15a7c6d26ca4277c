//! cache-d: the caching reverse proxy daemon.
//!
//! This is the walking skeleton: one process that forwards to one backend,
//! counts into and logs to the shared-memory segment. The manager/child
//! split, caching and policy arrive with their own issues.

pub mod backend;
pub mod cache;
pub mod cli;
pub mod daemon;
pub mod deliver;
pub mod error;
pub mod fetch;
pub mod http;
pub mod miss;
pub mod params;
pub mod pipe;
pub mod policy;
pub mod server;
pub mod session;
pub mod util;

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::counters::C;
use common::instance;
use common::segment::SegmentWriter;

use crate::cli::Args;
use crate::params::Params;
use crate::server::{Listener, Shared};

/// A start-up failure, reported once on stderr with exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error("could not listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error(transparent)]
    Segment(#[from] common::segment::SegmentError),
    #[error("pid file {path}: {source}")]
    PidFile { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Parse `-a [name=][host]:port` and bind it.
pub fn bind(spec: &str, index: usize) -> Result<Vec<Listener>, StartError> {
    let (name, addr) = match spec.split_once('=') {
        Some((n, a)) => (n.to_string(), a),
        None => (format!("a{index}"), spec),
    };
    let full = if addr.starts_with(':') { format!("0.0.0.0{addr}") } else { addr.to_string() };
    let addrs: Vec<_> = full.to_socket_addrs().map_err(|e| StartError::Config(format!("-a {spec}: {e}")))?.collect();
    if addrs.is_empty() {
        return Err(StartError::Config(format!("-a {spec}: resolves to no address")));
    }
    let name: Arc<str> = name.into();
    addrs
        .into_iter()
        .map(|a| {
            let socket = std::net::TcpListener::bind(a).map_err(|source| StartError::Listen { addr: a.to_string(), source })?;
            Ok(Listener { name: name.clone(), socket })
        })
        .collect()
}

/// Publish the bound addresses (`name ip port` lines), so that tools and
/// tests that asked for port 0 can find the port (like varnishd's
/// `debug.listen_address`).
fn write_listen_file(dir: &std::path::Path, listeners: &[Listener]) -> Result<(), StartError> {
    let mut text = String::new();
    for l in listeners {
        let a = l.socket.local_addr()?;
        text.push_str(&format!("{} {} {}\n", l.name, a.ip(), a.port()));
    }
    let tmp = dir.join(format!("{}.tmp", instance::LISTEN_FILE));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(instance::LISTEN_FILE))?;
    Ok(())
}

/// Everything `main` needs: parse is done, this starts and runs the daemon.
pub fn run(args: Args) -> Result<(), StartError> {
    let mut params = Params::default();
    for (k, v) in &args.param {
        params.set(k, v).map_err(StartError::Config)?;
    }
    if let Some(t) = args.ttl {
        params.set("default_ttl", &t.to_string()).map_err(StartError::Config)?;
    }
    if let Some(sz) = args.storage {
        params.storage = sz;
    }
    if let Some(l) = args.vsl_space {
        params.set("vsl_space", &l.to_string()).map_err(StartError::Config)?;
    }
    let addrs = backend::resolve(&args.backend).map_err(StartError::Config)?;
    let dir = instance::resolve(args.name.as_deref());

    // Daemonize before anything else holds a thread or the segment: the
    // segment records our pid, which must be the one that keeps running.
    let ready = if args.foreground { None } else { Some(daemon::fork()?) };
    let started = (|| {
        let specs = if args.listen.is_empty() { vec![":80".to_string()] } else { args.listen.clone() };
        let mut listeners = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            listeners.extend(bind(s, i)?);
        }
        let seg = Arc::new(SegmentWriter::create(&dir, params.vsl_space)?);
        write_listen_file(&dir, &listeners)?;
        if let Some(p) = &args.pidfile {
            std::fs::write(p, format!("{}\n", std::process::id())).map_err(|source| StartError::PidFile { path: p.clone(), source })?;
        }
        Ok::<_, StartError>((listeners, seg))
    })();
    let (listeners, seg) = match started {
        Ok(x) => x,
        Err(e) => {
            if let Some(r) = ready {
                r.fail(&e.to_string());
            }
            return Err(e);
        }
    };
    if let Some(r) = ready {
        r.succeed();
    }
    seg.set(C::NBackend, 1);
    let shared = Arc::new(Shared::new(seg.clone(), params, backend::Backend::new("default", addrs)));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("cache-worker").build()?;
    rt.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            daemon::wait_for_stop().await;
            let _ = tx.send(true);
        });
        server::serve(shared, listeners, rx, Duration::from_secs(5)).await;
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    seg.close();
    let _ = std::fs::remove_file(dir.join(instance::LISTEN_FILE));
    if let Some(p) = &args.pidfile {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}
