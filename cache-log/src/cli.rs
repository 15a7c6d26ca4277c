//! Command line of cache-log (varnishlog's letters).

use clap::Parser;
use common::log::group::Grouping;

/// cache-log: read the request log of a cache-d instance from shared memory.
#[derive(Parser, Debug, Clone)]
#[command(name = "cache-log", version, about, long_about = None)]
pub struct Args {
    /// Process the records already in the log (oldest first) and exit.
    #[arg(short = 'd')]
    pub dump: bool,

    /// Grouping: raw, vxid, request or session.
    #[arg(short = 'g', value_name = "raw|vxid|request|session", default_value = "vxid")]
    pub grouping: Grouping,

    #[command(flatten)]
    pub instance: common::args::Instance,

    /// Only show records with these tags (comma-separated; repeatable).
    #[arg(short = 'i', value_name = "TAGLIST")]
    pub include: Vec<String>,

    /// Hide records with these tags (comma-separated; repeatable).
    #[arg(short = 'x', value_name = "TAGLIST")]
    pub exclude: Vec<String>,

    /// Only show records whose payload matches REGEX (only records of TAG
    /// when given as TAG:REGEX). Repeatable.
    #[arg(short = 'I', value_name = "[TAG:]REGEX")]
    pub include_regex: Vec<String>,

    /// Hide records whose payload matches REGEX (of TAG, with TAG:REGEX).
    /// Repeatable.
    #[arg(short = 'X', value_name = "[TAG:]REGEX")]
    pub exclude_regex: Vec<String>,

    /// Only backend transactions.
    #[arg(short = 'b')]
    pub backend: bool,

    /// Only client transactions (requests and sessions).
    #[arg(short = 'c')]
    pub client: bool,

    /// Show ESI subrequests too (implies -c; -c alone leaves them out
    /// unless -g raw).
    #[arg(short = 'E')]
    pub esi: bool,

    /// Stop after showing N groups (transactions, requests, sessions).
    #[arg(short = 'k', value_name = "N")]
    pub keep: Option<u64>,

    /// Verbose: show each record's transaction id and side, as -g raw does.
    #[arg(short = 'v')]
    pub verbose: bool,

    /// One JSON object per transaction instead of text: vxid, type, level,
    /// parent and the records ([{"tag", "side", "payload"}]).
    #[arg(long)]
    pub json: bool,

    /// Only show groups that match this query (see cache-log(1), QUERY
    /// LANGUAGE), e.g. 'RespStatus >= 500 or ReqURL ~ "^/api/"'.
    /// Repeatable, and one argument may hold several queries on lines of
    /// their own (# starts a comment): a group matching any of them is
    /// shown.
    #[arg(short = 'q', value_name = "QUERY")]
    pub query: Vec<String>,

    /// Read queries from FILE, one per line (# starts a comment), OR-ed
    /// with each other and with -q. Repeatable.
    #[arg(short = 'Q', value_name = "FILE")]
    pub query_file: Vec<std::path::PathBuf>,

    /// Read the log from FILE (written by -w, or by varnishlog -w; "-" is
    /// stdin) instead of the instance, then exit.
    #[arg(short = 'r', value_name = "FILE")]
    pub read: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub output: common::args::Output,

    /// -i/-x/-I/-X in command-line order (filled by main from argv).
    #[arg(skip)]
    pub selection: Vec<(char, String)>,

    /// Seconds to wait for an incomplete transaction before showing it.
    #[arg(short = 'T', value_name = "SECONDS", default_value_t = 120.0, value_parser = common::log::follow::seconds_upto_a_day)]
    pub timeout: f64,

    /// Seconds to wait for cache-d to appear before giving up ("off" waits
    /// forever; the default when following).
    #[arg(short = 't', value_name = "SECONDS|off")]
    pub wait: Option<String>,
}
