//! Command-line arguments of cache-d (varnishd's letters).

use std::path::PathBuf;

use clap::Parser;

use crate::error::StartError;
use crate::params::{parse_param_arg, parse_param_name, parse_size, Params};

/// cache-d: caching HTTP reverse proxy (varnishd-compatible command line).
#[derive(Parser, Debug, Clone)]
#[command(name = "cache-d", version, about, long_about = None, disable_help_flag = true)]
pub struct Args {
    /// Listen address: [name=][host][:port][,PROTO] or
    /// [name=]/path.sock[,PROTO][,user=U][,group=G][,mode=OCTAL] (default
    /// ":80"; repeatable). PROTO is HTTP (default) or PROXY. Without a
    /// host, listens on all IPv4 addresses.
    #[arg(short = 'a', value_name = "[NAME=]ADDRESS[,PROTO]")]
    pub listen: Vec<String>,

    /// Backend server: host[:port] (port defaults to 8080), or the absolute
    /// path of a Unix socket. Required unless -f names a VCL file that
    /// declares a backend.
    #[arg(short = 'b', value_name = "HOST[:PORT]|PATH", required_unless_present = "vcl")]
    pub backend: Option<String>,

    /// VCL file with the caching policy (the supported subset is listed
    /// in cache-d(1)); its first backend is the default backend.
    #[arg(short = 'f', value_name = "FILE")]
    pub vcl: Option<PathBuf>,

    /// Compile the -f file, print the result, and exit (0 if it compiles).
    #[arg(short = 'C', requires = "vcl")]
    pub check: bool,

    /// Instance directory: an absolute path, or a name under the state
    /// directory (see cache-d(1)). Holds the shared-memory segment.
    #[arg(short = 'n', value_name = "DIR")]
    pub name: Option<String>,

    /// Run in the foreground (do not daemonize).
    #[arg(short = 'F')]
    pub foreground: bool,

    /// Debug mode: stay in the foreground with the CLI on standard input
    /// and output; the child starts with the `start` command; the daemon
    /// stops when standard input ends.
    #[arg(short = 'd')]
    pub debug: bool,

    /// TLS configuration in hitch's syntax: pem-file = "PATH" lines (the
    /// certificates https listeners serve, chosen by SNI) and frontend
    /// sections (each an https listener).
    #[arg(short = 'A', value_name = "FILE")]
    pub tls: Option<PathBuf>,

    /// Write the process id to this file; it is removed at exit.
    #[arg(short = 'P', value_name = "FILE")]
    pub pidfile: Option<PathBuf>,

    /// Set a parameter, e.g. -p timeout_idle=10 (repeatable).
    #[arg(short = 'p', value_name = "PARAM=VALUE", value_parser = parse_param_arg)]
    pub param: Vec<(String, String)>,

    /// Make parameters read-only: param.set and param.reset refuse them
    /// (107), as varnishd -r (comma-separated, repeatable).
    #[arg(short = 'r', value_name = "PARAM[,PARAM...]", value_delimiter = ',', value_parser = parse_param_name)]
    pub read_only: Vec<String>,

    /// Default time to live for cached objects, in seconds (= -p default_ttl).
    #[arg(short = 't', value_name = "TTL")]
    pub ttl: Option<f64>,

    /// Storage (repeatable): [NAME=]malloc[,SIZE] (default 100M),
    /// [NAME=]file,PATH,SIZE (bodies on disk, emptied at start) or
    /// [NAME=]persistent,PATH,SIZE[,wipe] (objects that survive
    /// restarts). Unnamed stores are s0, s1...; VCL picks one with
    /// beresp.storage. Default: -s malloc,100M.
    #[arg(short = 's', value_name = "[NAME=]KIND[,OPTIONS]", value_parser = crate::cache::spec::parse)]
    pub storage: Vec<crate::cache::spec::Spec>,

    /// Admin (CLI) listen address: host[:port] (default localhost:0, a
    /// free port; "none" disables). Published in DIR/_.admin.
    #[arg(short = 'T', value_name = "HOST[:PORT]")]
    pub admin: Option<String>,

    /// Secret file for admin authentication (default: a fresh DIR/_.secret;
    /// "none" disables authentication, loopback -T only).
    #[arg(short = 'S', value_name = "FILE")]
    pub secret: Option<PathBuf>,

    /// The fleet's secret file (what `cache-adm --peers -S` is given): the
    /// admin socket also takes answers made with this node's secret,
    /// derived from it and from the address a connection reaches, so an
    /// answer relayed from another address is refused (cache-adm(1),
    /// FLEET AUTHENTICATION). -S or DIR/_.secret stays the local secret.
    #[arg(long = "fleet-secret", value_name = "FILE")]
    pub fleet_secret: Option<PathBuf>,

    /// With --fleet-secret: an address the fleet reaches this admin socket
    /// at, other than the one connections arrive at (NAT or a port
    /// mapping in between), as IP:PORT. Repeatable.
    #[arg(long = "fleet-address", value_name = "IP:PORT", requires = "fleet_secret")]
    pub fleet_address: Vec<std::net::SocketAddr>,

    /// Internal: run as the child process of a manager.
    #[arg(long = "child", hide = true)]
    pub child: bool,

    /// Size of the shared-memory log ring (= -p vsl_space), e.g. 80M.
    #[arg(short = 'l', value_name = "SIZE", value_parser = parse_size)]
    pub vsl_space: Option<u64>,

    /// Hash algorithm, as varnishd's: critbit (its default), simple_list
    /// or classic[,BUCKETS]. Checked and accepted: cachekit's index is its
    /// own whichever is named.
    #[arg(short = 'h', value_name = "ALGORITHM", value_parser = parse_hash)]
    pub hash: Option<String>,

    /// Waiter, as varnishd's: epoll or poll. Checked and accepted:
    /// cachekit waits on idle connections with tokio's event loop.
    #[arg(short = 'W', value_name = "WAITER", value_parser = parse_waiter)]
    pub waiter: Option<String>,

    /// Print help (-h is varnishd's hash algorithm).
    #[arg(long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
}

/// A -h value varnishd takes.
fn parse_hash(v: &str) -> Result<String, String> {
    let (name, arg) = v.split_once(',').map_or((v, None), |(n, a)| (n, Some(a)));
    match (name, arg) {
        ("critbit" | "simple_list", None) => Ok(v.to_string()),
        ("classic", None) => Ok(v.to_string()),
        ("classic", Some(n)) if n.parse::<u32>().is_ok_and(|n| n > 0) => Ok(v.to_string()),
        ("classic", Some(n)) => Err(format!("classic: bucket count '{n}' is not a positive number")),
        _ => Err(format!("Unknown hash algorithm \"{name}\" (critbit, simple_list or classic[,buckets])")),
    }
}

/// A -W value varnishd takes on Linux.
fn parse_waiter(v: &str) -> Result<String, String> {
    match v {
        "epoll" | "poll" => Ok(v.to_string()),
        _ => Err(format!("Unknown waiter \"{v}\" (epoll or poll)")),
    }
}

/// The parameters the command line asks for.
pub fn params_from_args(args: &Args) -> Result<Params, StartError> {
    let mut params = Params::default();
    for (k, v) in &args.param {
        params.set(k, v)?;
    }
    if let Some(t) = args.ttl {
        params.set("default_ttl", &t.to_string())?;
    }
    if let Some(l) = args.vsl_space {
        params.set("vsl_space", &l.to_string())?;
    }
    Ok(params)
}
