//! Command line of cache-ncsa (varnishncsa's letters).

use clap::Parser;

/// The format varnishncsa uses when none is given.
pub const DEFAULT_FORMAT: &str = r#"%h %l %u %t "%r" %s %b "%{Referer}i" "%{User-agent}i""#;

/// cache-ncsa: write an NCSA/Apache combined access log from the
/// shared-memory log of a cache-d instance.
#[derive(Parser, Debug, Clone)]
#[command(name = "cache-ncsa", version, about, long_about = None)]
pub struct Args {
    /// Process the requests already in the log (oldest first) and exit.
    #[arg(short = 'd')]
    pub dump: bool,

    #[command(flatten)]
    pub instance: common::args::Instance,

    /// Log format (see cache-ncsa(1) for the % specifiers); default:
    /// varnishncsa's (the "combined" preset).
    #[arg(short = 'F', value_name = "FORMAT")]
    pub format: Option<String>,

    /// Read the log format from FILE (its first line).
    #[arg(short = 'f', value_name = "FILE", conflicts_with = "format")]
    pub format_file: Option<std::path::PathBuf>,

    /// A ready-made format: combined (the default), common, or json (JSON
    /// lines with the fields analyzers want).
    #[arg(long, value_name = "combined|common|json", conflicts_with_all = ["format", "format_file"])]
    pub format_preset: Option<String>,

    /// JSON: with -F or -f, the format's values are escaped for JSON
    /// strings (a missing string is empty, a missing number 0), as
    /// varnishncsa -j does; without, one object per request, each format
    /// specifier under its own key.
    #[arg(short = 'j', long = "json")]
    pub json: bool,

    #[command(flatten)]
    pub output: common::args::Output,

    /// Only log requests that match this query (the language of
    /// cache-log(1)), e.g. 'RespStatus >= 500'.
    /// Repeatable, and one argument may hold several queries on lines of
    /// their own (# starts a comment): a group matching any of them is
    /// shown.
    #[arg(short = 'q', value_name = "QUERY")]
    pub query: Vec<String>,

    /// Read queries from FILE, one per line (# starts a comment), OR-ed
    /// with each other and with -q. Repeatable.
    #[arg(short = 'Q', value_name = "FILE")]
    pub query_file: Vec<std::path::PathBuf>,

    /// Log backend requests (alone, or with -c as well).
    #[arg(short = 'b')]
    pub backend: bool,

    /// Log client requests (the default; with -b, both).
    #[arg(short = 'c')]
    pub client: bool,

    /// Log ESI subrequests too (implies -c).
    #[arg(short = 'E')]
    pub esi: bool,

    /// Grouping for -q: vxid (each transaction alone, the default) or
    /// request (a request with its backend requests).
    #[arg(short = 'g', value_name = "vxid|request", default_value = "vxid", value_parser = ["vxid", "request"])]
    pub grouping: String,

    /// Read the log from FILE (written by cache-log -w or varnishlog -w;
    /// "-" is stdin) instead of the instance, then exit.
    #[arg(short = 'r', value_name = "FILE")]
    pub read: Option<std::path::PathBuf>,

    /// Seconds to wait for cache-d to appear before giving up ("off" waits
    /// forever; the default when following).
    #[arg(short = 't', value_name = "SECONDS|off")]
    pub wait: Option<String>,
}
