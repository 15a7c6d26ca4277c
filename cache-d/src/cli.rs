//! Command-line arguments of cache-d (varnishd's letters).

use std::path::PathBuf;

use clap::Parser;

use crate::params::{parse_param_arg, parse_size};

/// cache-d: caching HTTP reverse proxy (varnishd-compatible command line).
#[derive(Parser, Debug, Clone)]
#[command(name = "cache-d", version, about, long_about = None)]
pub struct Args {
    /// Listen address: [name=][host]:port (default ":80"; repeatable).
    /// Without a host, listens on all IPv4 addresses.
    #[arg(short = 'a', value_name = "[NAME=][HOST]:PORT")]
    pub listen: Vec<String>,

    /// Backend server: host[:port] (port defaults to 8080).
    #[arg(short = 'b', value_name = "HOST[:PORT]", required = true)]
    pub backend: String,

    /// Instance directory: an absolute path, or a name under the state
    /// directory (see cache-d(1)). Holds the shared-memory segment.
    #[arg(short = 'n', value_name = "DIR")]
    pub name: Option<String>,

    /// Run in the foreground (do not daemonize).
    #[arg(short = 'F')]
    pub foreground: bool,

    /// Write the process id to this file; it is removed at exit.
    #[arg(short = 'P', value_name = "FILE")]
    pub pidfile: Option<PathBuf>,

    /// Set a parameter, e.g. -p timeout_idle=10 (repeatable).
    #[arg(short = 'p', value_name = "PARAM=VALUE", value_parser = parse_param_arg)]
    pub param: Vec<(String, String)>,

    /// Default time to live for cached objects, in seconds (= -p default_ttl).
    #[arg(short = 't', value_name = "TTL")]
    pub ttl: Option<f64>,

    /// Size of the shared-memory log ring (= -p vsl_space), e.g. 80M.
    #[arg(short = 'l', value_name = "SIZE", value_parser = parse_size)]
    pub vsl_space: Option<u64>,
}
