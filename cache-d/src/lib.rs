//! cache-d: the caching reverse proxy daemon.
//!
//! This is the walking skeleton: one process that forwards to one backend,
//! counts into and logs to the shared-memory segment. The manager/child
//! split, caching and policy arrive with their own issues.

pub mod backend;
pub mod cache;
pub mod child;
pub mod cli;
pub mod clientio;
pub mod contain;
pub mod daemon;
pub mod deliver;
pub mod director;
pub mod error;
pub mod fetch;
pub mod http;
pub mod lookup;
pub mod mgt;
pub mod mgt_cli;
pub mod miss;
pub mod params;
pub mod pipe;
pub mod policy;
pub mod probe;
pub mod server;
pub mod session;
pub mod synth;
pub mod util;
pub mod vcl;

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::Arc;

use common::instance;

use crate::cli::Args;
use crate::params::Params;
use crate::server::Listener;

/// A start-up failure, reported once on stderr with exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error("could not listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error(transparent)]
    Segment(#[from] common::segment::SegmentError),
    #[error(transparent)]
    Instance(#[from] common::instance::InstanceError),
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
pub(crate) fn write_listen_file(dir: &std::path::Path, listeners: &[Listener]) -> Result<(), StartError> {
    let mut text = String::new();
    for l in listeners {
        let a = l.socket.local_addr()?;
        text.push_str(&format!("{} {} {}\n", l.name, a.ip(), a.port()));
    }
    instance::write_file(dir, instance::LISTEN_FILE, text.as_bytes(), 0o644)?;
    Ok(())
}

/// The parameters the command line asks for.
pub fn params_from_args(args: &Args) -> Result<Params, StartError> {
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
    Ok(params)
}

/// Load and compile the `-f` file: the policy and the backend address
/// (from `-b`, else the VCL's first backend).
pub fn load_policy(args: &Args) -> Result<(Option<std::sync::Arc<dyn policy::Policy>>, String), StartError> {
    let Some(path) = &args.vcl else {
        let b = args.backend.clone().ok_or_else(|| StartError::Config("give -b or -f".into()))?;
        return Ok((None, b));
    };
    let prog = vcl::parse_file(path).map_err(|e| StartError::Config(format!("VCL compilation failed:\n{e}")))?;
    let compiled =
        vcl::compile::compile(&prog).map_err(|e| StartError::Config(format!("VCL compilation failed:\n{}", e.render(&prog.files))))?;
    let backend = match (&args.backend, &compiled.backend) {
        (Some(b), _) => b.clone(),
        (None, Some(b)) => b.clone(),
        (None, None) => return Err(StartError::Config(format!("{}: declares no backend, and no -b was given", path.display()))),
    };
    let p = vcl::compile::VclPolicy::load("boot", compiled).map_err(StartError::Config)?;
    let p: std::sync::Arc<dyn policy::Policy> = std::sync::Arc::new(p);
    Ok((Some(p), backend))
}

/// Everything `main` needs: the manager, or (with the internal `--child`)
/// the child it starts.
pub fn run(args: Args) -> Result<(), StartError> {
    if args.check {
        load_policy(&args)?;
        println!("VCL compiled.");
        return Ok(());
    }
    if args.child {
        child::run(args)
    } else {
        mgt::run(args)
    }
}
